// Own binary: it installs a global WARN log capture; one per process, at one level.

//! The fail-open policy through the starter, on real `redis-server` processes: the section runs
//! guarded when Redis grants the lock, and unguarded — exactly once, its value returned, marked
//! with why and logged as a `WARN` — when another pod holds the key past the wait time, when
//! Redis is unreachable (stopped, or never there), and when the lock is disabled
//! (`lock_or_disabled`, no connection). A section's own error is its value.
//!
//! Logs go to one global capture for the test binary (tests run in parallel); each test uses its
//! own keys and looks only at the lines naming them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::prelude::*;
use lock_testkit::logs::CapturedLogs;
use lock_testkit::{RedisServer, SLACK};

const WAIT_TIME: Duration = Duration::from_millis(300);
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);

fn logs() -> &'static CapturedLogs {
    CapturedLogs::global(tracing::Level::WARN)
}

/// A started starter for `address`: wait time 300 ms, command timeout 500 ms, `instance_id`.
async fn starter(address: &str, instance_id: &str) -> LockStarter {
    logs();
    let toml = format!(
        "[telco.platform.lock]\nwait-time = \"{}ms\"\ninstance-id = \"{instance_id}\"\n\
         [telco.platform.lock.redis]\naddress = \"{address}\"\ncommand-timeout = \"{}ms\"\n",
        WAIT_TIME.as_millis(),
        COMMAND_TIMEOUT.as_millis(),
    );
    LockStarter::builder()
        .figment(Figment::from(Toml::string(&toml)))
        .build()
        .await
        .unwrap()
}

/// A loopback address nothing listens on: a port the kernel handed out, then closed.
fn nothing_listening() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("redis://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_is_held_while_the_section_runs_and_released_after() {
    let redis = RedisServer::start().await.unwrap();
    let ours = starter(&redis.url(), "digest-a").await.lock_or_disabled();
    let other_pod = starter(&redis.url(), "digest-b").await.lock().unwrap();
    let runs = AtomicUsize::new(0);
    let outcome = ours
        .with_lock_fail_open("digest:guarded", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            let in_redis = redis
                .cmd(&["EXISTS", "lock:{digest:guarded}"])
                .await
                .unwrap();
            // Another pod is refused, naming us (another task: this one would re-enter).
            let other_pod = other_pod.clone();
            let refused = tokio::spawn(async move {
                other_pod
                    .try_acquire("digest:guarded", Lease::Watchdog)
                    .await
                    .unwrap_err()
            })
            .await
            .unwrap();
            (in_redis, refused.details()["holder"].clone())
        })
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(outcome.is_guarded(), "{outcome:?}");
    let (in_redis, holder) = outcome.into_value();
    assert_eq!(
        in_redis, "1",
        "the lock key was not in Redis during the section"
    );
    assert!(holder.starts_with("digest-a/"), "holder {holder}");
    // Released after the section: the other pod gets it at once.
    let handle = other_pod
        .try_acquire("digest:guarded", Lease::Watchdog)
        .await
        .expect("released after the section");
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(logs().fail_open_warnings("digest:guarded").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_pod_holding_past_the_wait_time_runs_the_section_unguarded_once() {
    let redis = RedisServer::start().await.unwrap();
    let ours = starter(&redis.url(), "digest-a").await.lock_or_disabled();
    let other_pod = starter(&redis.url(), "digest-b").await.lock().unwrap();
    let held = other_pod
        .acquire("digest:contended", Lease::Watchdog)
        .await
        .unwrap();
    let runs = AtomicUsize::new(0);
    let started = Instant::now();
    let outcome = ours
        .with_lock_fail_open("digest:contended", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            // Logged before the section runs.
            logs().fail_open_warnings("digest:contended").len()
        })
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        elapsed >= WAIT_TIME && elapsed <= WAIT_TIME + COMMAND_TIMEOUT + SLACK,
        "ran after {elapsed:?}, wait time {WAIT_TIME:?}"
    );
    let FailOpen::Unguarded { value, unguarded } = outcome else {
        panic!("ran guarded while another pod held the key");
    };
    assert_eq!(value, 1, "the WARN was not logged before the section ran");
    assert_eq!(unguarded.reason(), UnguardedReason::WaitTimeElapsed);
    let details = unguarded.error().details();
    assert_eq!(details["reason"], "held_by_another_owner");
    assert_eq!(details["holder"], held.owner());
    logs().assert_one_fail_open_warning("digest:contended", "wait_time_elapsed", held.owner());
    // The holder was never disturbed.
    assert!(held.is_held());
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_runs_the_section_unguarded_with_backend_unavailable() {
    let mut redis = RedisServer::start().await.unwrap();
    let lock = starter(&redis.url(), "digest-a").await.lock_or_disabled();
    // Connected and working first.
    let before = lock
        .with_lock_fail_open("digest:stopped", Lease::Watchdog, || async { "warm" })
        .await
        .unwrap();
    assert!(before.is_guarded(), "{before:?}");

    redis.kill().await.unwrap();
    let runs = AtomicUsize::new(0);
    let started = Instant::now();
    let outcome = lock
        .with_lock_fail_open("digest:stopped", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            "sent anyway"
        })
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        elapsed <= WAIT_TIME + COMMAND_TIMEOUT + SLACK,
        "ran after {elapsed:?}"
    );
    assert_eq!(*outcome.value(), "sent anyway");
    let unguarded = outcome.unguarded().expect("Redis is down");
    assert_eq!(unguarded.reason(), UnguardedReason::BackendUnavailable);
    assert_eq!(unguarded.error().code(), "LOCK_ACQUISITION_FAILED");
    assert_eq!(unguarded.error().details()["reason"], "backend_unavailable");
    logs().assert_one_fail_open_warning(
        "digest:stopped",
        "backend_unavailable",
        "backend unavailable",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_never_answered_runs_the_section_unguarded_with_backend_unavailable() {
    let lock = starter(&nothing_listening(), "digest-a")
        .await
        .lock_or_disabled();
    let runs = AtomicUsize::new(0);
    let outcome = lock
        .with_lock_fail_open(
            "digest:never-there",
            AcquireOptions::new(Lease::Fixed(Duration::from_secs(10)))
                .wait_time(Duration::ZERO)
                .unwrap(),
            || async {
                runs.fetch_add(1, Ordering::SeqCst);
                42
            },
        )
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let (value, unguarded) = outcome.into_parts();
    assert_eq!(value, 42);
    let unguarded = unguarded.expect("nothing listens");
    assert_eq!(unguarded.reason(), UnguardedReason::BackendUnavailable);
    logs().assert_one_fail_open_warning(
        "digest:never-there",
        "backend_unavailable",
        "backend unavailable",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_lock_runs_the_section_unguarded_without_connecting() {
    let redis = RedisServer::start().await.unwrap();
    let baseline = redis.connected_clients().await.unwrap();
    logs();
    let starter = LockStarter::builder()
        .figment(Figment::from(Toml::string(&format!(
            "[telco.platform.lock]\nenabled = false\n[telco.platform.lock.redis]\naddress = \"{}\"\n",
            redis.url()
        ))))
        .build()
        .await
        .unwrap();
    assert!(!starter.is_enabled());
    assert_eq!(starter.lock().unwrap_err().code(), "LOCK_DISABLED");
    let lock = starter.lock_or_disabled();

    let runs = AtomicUsize::new(0);
    let outcome = lock
        .with_lock_fail_open("digest:disabled", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            "sent"
        })
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let FailOpen::Unguarded { value, unguarded } = outcome else {
        panic!("a disabled lock guarded a section");
    };
    assert_eq!(value, "sent");
    assert_eq!(unguarded.reason(), UnguardedReason::LockDisabled);
    assert_eq!(unguarded.error().code(), "LOCK_DISABLED");
    logs().assert_one_fail_open_warning(
        "digest:disabled",
        "lock_disabled",
        "telco.platform.lock.enabled = false",
    );

    // Fail-closed callers of the same lock get LOCK_DISABLED; their section does not run.
    let err = lock
        .with_lock("digest:disabled", Lease::Watchdog, || async {
            runs.fetch_add(1, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), "LOCK_DISABLED");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        redis.connected_clients().await.unwrap(),
        baseline,
        "a disabled starter connected to Redis"
    );
}

/// A section that fails has its own `Err` returned as its value — guarded or not — never
/// swallowed and never replaced by a lock error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_error_is_the_value_guarded_or_not() {
    let redis = RedisServer::start().await.unwrap();
    let ours = starter(&redis.url(), "digest-a").await.lock_or_disabled();
    let other_pod = starter(&redis.url(), "digest-b").await.lock().unwrap();
    let send = || async { Err::<u32, String>("mail relay answered 451".to_owned()) };

    let guarded = ours
        .with_lock_fail_open("digest:section-err", Lease::Watchdog, send)
        .await
        .unwrap();
    assert!(guarded.is_guarded());
    assert_eq!(guarded.into_value().unwrap_err(), "mail relay answered 451");

    let held = other_pod
        .acquire("digest:section-err", Lease::Watchdog)
        .await
        .unwrap();
    let unguarded = ours
        .with_lock_fail_open("digest:section-err", Lease::Watchdog, send)
        .await
        .unwrap();
    assert_eq!(
        unguarded.unguarded().map(Unguarded::reason),
        Some(UnguardedReason::WaitTimeElapsed)
    );
    assert_eq!(
        unguarded.into_value().unwrap_err(),
        "mail relay answered 451"
    );
    drop(held);
}
