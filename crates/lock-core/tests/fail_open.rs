// A binary of its own: it installs a process-wide log capture that other tests' logs would fill.
//! The fail-open policy (`with_lock_fail_open`) on the in-process
//! lock, a disabled lock and a lock whose backend is down: the section runs exactly once on every
//! path, its value comes back with the right marker, the `WARN` is logged before it runs, and an
//! invalid argument is the one error (the section does not run).
//!
//! Logs go to one global capture for the whole test binary (tests run in parallel); each test
//! uses its own key and looks only at the lines naming it. `with_lock`'s own warnings (a lease that
//! ended in the section) are checked here too, for the capture.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockError;
use lock_core::lock::{
    AcquireOptions, DisabledLock, DistributedLock, DistributedLockExt, FailOpen, InMemoryLock,
    Lease, LockHandle, UnguardedReason,
};
use lock_testkit::logs::CapturedLogs;

fn logs() -> &'static CapturedLogs {
    CapturedLogs::global(tracing::Level::WARN)
}

fn wait(wait: Duration) -> AcquireOptions {
    AcquireOptions::new(Lease::Watchdog)
        .wait_time(wait)
        .unwrap()
}

/// A lock whose backend is down: every acquisition fails with `backend_unavailable`.
#[derive(Debug)]
struct DownLock;

#[async_trait]
impl DistributedLock for DownLock {
    fn namespace(&self) -> &str {
        "down"
    }

    async fn acquire_lease(
        &self,
        key: &str,
        _options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        Err(LockError::backend_unavailable(key, "connection refused"))
    }

    async fn shutdown(&self, _timeout: Duration) -> lock_core::lock::ShutdownSummary {
        lock_core::lock::ShutdownSummary::default()
    }
}

#[tokio::test]
async fn a_granted_lock_guards_the_section_and_is_released_after_it() {
    logs();
    let lock = InMemoryLock::new();
    let other_client = lock.clone();
    let runs = AtomicUsize::new(0);
    let outcome = lock
        .with_lock_fail_open("fo-guarded", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            // Really held: another client (another task: this one would re-enter) is refused
            // while the section runs.
            let other_client = other_client.clone();
            let refused = tokio::spawn(async move {
                other_client
                    .try_acquire("fo-guarded", Lease::Watchdog)
                    .await
                    .unwrap_err()
            })
            .await
            .unwrap();
            refused.details()["reason"].clone()
        })
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(outcome.is_guarded());
    assert!(outcome.unguarded().is_none());
    assert_eq!(outcome.into_value(), "held_by_another_owner");
    assert_eq!(lock.held_count(), 0, "released after the section");
    assert!(logs().fail_open_warnings("fo-guarded").is_empty());
}

#[tokio::test(start_paused = true)]
async fn contention_past_the_wait_time_runs_the_section_unguarded_once() {
    logs();
    let lock = InMemoryLock::new();
    let other_pod = lock
        .try_acquire("fo-contended", Lease::Watchdog)
        .await
        .unwrap();
    let runs = AtomicUsize::new(0);
    let started = tokio::time::Instant::now();
    let outcome = lock
        .with_lock_fail_open("fo-contended", wait(Duration::from_millis(300)), || async {
            runs.fetch_add(1, Ordering::SeqCst);
            // The WARN is out before the section runs.
            assert_eq!(logs().fail_open_warnings("fo-contended").len(), 1);
            "digest sent"
        })
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited first"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let FailOpen::Unguarded { value, unguarded } = outcome else {
        panic!("ran guarded while another owner held the key");
    };
    assert_eq!(value, "digest sent");
    assert_eq!(unguarded.reason(), UnguardedReason::WaitTimeElapsed);
    let error = unguarded.error();
    assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED");
    assert_eq!(error.details()["holder"], other_pod.owner());
    assert!(unguarded.to_string().contains("wait_time_elapsed"));
    logs().assert_one_fail_open_warning("fo-contended", "wait_time_elapsed", other_pod.owner());
    assert!(other_pod.is_held(), "the holder keeps its lease");
}

#[tokio::test]
async fn a_disabled_lock_runs_the_section_unguarded_with_lock_disabled() {
    logs();
    let lock = DisabledLock::new("telco.platform.lock.enabled = false from a test");
    let runs = AtomicUsize::new(0);
    let outcome = lock
        .with_lock_fail_open("fo-disabled", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            7
        })
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let (value, unguarded) = outcome.into_parts();
    assert_eq!(value, 7);
    let unguarded = unguarded.expect("a disabled lock never guards");
    assert_eq!(unguarded.reason(), UnguardedReason::LockDisabled);
    assert_eq!(unguarded.error().code(), "LOCK_DISABLED");
    logs().assert_one_fail_open_warning("fo-disabled", "lock_disabled", "from a test");

    // Fail-closed callers of the same lock still get LOCK_DISABLED, and the section does not run.
    let err = lock
        .with_lock("fo-disabled", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), "LOCK_DISABLED");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(lock.namespace(), "disabled");
}

#[tokio::test]
async fn an_unavailable_backend_runs_the_section_unguarded_with_backend_unavailable() {
    logs();
    let lock: Arc<dyn DistributedLock> = Arc::new(DownLock);
    let runs = AtomicUsize::new(0);
    let outcome = lock
        .with_lock_fail_open("fo-down", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            "warmed"
        })
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(*outcome.value(), "warmed");
    let unguarded = outcome.unguarded().expect("the backend is down");
    assert_eq!(unguarded.reason(), UnguardedReason::BackendUnavailable);
    assert_eq!(unguarded.error().details()["reason"], "backend_unavailable");
    logs().assert_one_fail_open_warning("fo-down", "backend_unavailable", "connection refused");
}

#[tokio::test]
async fn an_invalid_key_or_lease_is_an_error_and_the_section_does_not_run() {
    logs();
    let runs = AtomicUsize::new(0);
    let locks: [Arc<dyn DistributedLock>; 3] = [
        Arc::new(InMemoryLock::new()),
        Arc::new(DisabledLock::new("off")),
        Arc::new(DownLock),
    ];
    for lock in locks {
        let err = lock
            .with_lock_fail_open("fo-bad\nkey", Lease::Watchdog, || async {
                runs.fetch_add(1, Ordering::SeqCst);
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), "LOCK_INVALID_ARGUMENT", "{lock:?}");
        let err = lock
            .with_lock_fail_open("fo-bad-lease", Lease::Fixed(Duration::ZERO), || async {
                runs.fetch_add(1, Ordering::SeqCst);
            })
            .await
            .unwrap_err();
        assert_eq!(err.details()["argument"], "lease", "{lock:?}");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a section ran for a bad argument"
    );
    for key in ["fo-bad\nkey", "fo-bad-lease"] {
        assert!(logs().fail_open_warnings(key).is_empty(), "{key}");
    }
}

/// The section's own `Err` is its value, on both paths: never swallowed, never replaced.
#[tokio::test]
async fn a_section_that_fails_has_its_own_error_returned() {
    logs();
    let lock = InMemoryLock::new();
    let guarded = lock
        .with_lock_fail_open("fo-section-err", Lease::Watchdog, || async {
            Err::<u32, _>("tariff service answered 502")
        })
        .await
        .unwrap();
    assert!(guarded.is_guarded());
    assert_eq!(guarded.into_value(), Err("tariff service answered 502"));

    let unguarded = DownLock
        .with_lock_fail_open("fo-section-err", Lease::Watchdog, || async {
            Err::<u32, _>("tariff service answered 503")
        })
        .await
        .unwrap();
    assert_eq!(
        unguarded.unguarded().map(|u| u.reason()),
        Some(UnguardedReason::BackendUnavailable)
    );
    assert_eq!(unguarded.into_value(), Err("tariff service answered 503"));
}

/// Inside a `with_lock` section of the same key, the same task re-enters, as with `with_lock`:
/// guarded, without waiting for itself.
#[tokio::test(start_paused = true)]
async fn inside_a_with_lock_section_of_the_key_it_re_enters() {
    logs();
    let lock = InMemoryLock::new();
    let started = tokio::time::Instant::now();
    let inner = lock
        .with_lock("fo-reentry", Lease::Watchdog, || async {
            lock.with_lock_fail_open("fo-reentry", Lease::Watchdog, || async { 5 })
                .await
                .unwrap()
        })
        .await
        .unwrap();
    assert!(inner.is_guarded(), "{inner:?}");
    assert_eq!(started.elapsed(), Duration::ZERO, "waited for itself");
    assert!(logs().fail_open_warnings("fo-reentry").is_empty());
    assert_eq!(lock.held_count(), 0);
}

/// A lock whose leases end after 50 ms and whose store is unreachable when they are released.
#[derive(Debug)]
struct ExpiringUnreachableLock;

#[derive(Debug)]
struct UnreachableRelease;

#[async_trait]
impl lock_core::lock::LeaseRelease for UnreachableRelease {
    async fn release(self: Box<Self>) -> Result<lock_core::lock::ReleaseOutcome, LockError> {
        Err(LockError::ReleaseFailed {
            key: "lost-unreachable".into(),
            cause: "connection refused".into(),
        })
    }

    fn release_in_background(self: Box<Self>) {}
}

#[async_trait]
impl DistributedLock for ExpiringUnreachableLock {
    fn namespace(&self) -> &str {
        "expiring-unreachable"
    }

    async fn acquire_lease(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        let state = lock_core::lock::LeaseState::new(Some(
            tokio::time::Instant::now() + Duration::from_millis(50),
        ));
        let release = Box::new(UnreachableRelease);
        Ok(LockHandle::new(
            key,
            options.lease(),
            "owner-1",
            1,
            state,
            release,
        ))
    }

    async fn shutdown(&self, _timeout: Duration) -> lock_core::lock::ShutdownSummary {
        lock_core::lock::ShutdownSummary::default()
    }
}

/// The lease ran out during the section and the release then failed (the store unreachable):
/// `with_lock` warns that another owner may have run, not that the lease "ends at its TTL" — it
/// ended already.
#[tokio::test(start_paused = true)]
async fn a_lease_that_ended_in_the_section_is_reported_even_when_the_release_fails() {
    logs();
    let value = ExpiringUnreachableLock
        .with_lock("lost-unreachable", Lease::Watchdog, || async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            42
        })
        .await
        .unwrap();
    assert_eq!(value, 42);
    let text = logs().text();
    let line = text
        .lines()
        .find(|line| line.contains("lost-unreachable") && line.contains("critical section"))
        .unwrap_or_else(|| panic!("no warning for the key in:\n{text}"));
    assert!(
        line.contains("another owner may have run concurrently"),
        "{line}"
    );
    assert!(
        !line.contains("release after the critical section"),
        "{line}"
    );
}
