// A binary of its own: tracing's per-call-site interest cache is process-wide (see below).
//! The `lock.acquire` span and its events, as a plain fmt subscriber prints them — for every
//! implementation, here the in-memory one.
//!
//! A test binary of its own: tracing caches each callsite's interest process-wide, and tests of
//! another file emitting the same events on other threads without a subscriber raced this one's
//! thread-local subscriber (seen twice on a loaded machine as a capture that stopped after the first event).

use std::time::Duration;

use lock_core::lock::{DistributedLock, InMemoryLock, Lease, ReleaseOutcome};
use lock_testkit::logs::CapturedLogs;

/// Runs `test` on a runtime of its own, with this thread's logs captured at `DEBUG`.
fn logged(test: impl std::future::Future<Output = ()>) -> CapturedLogs {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::DEBUG);
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(test);
    logs
}

#[test]
fn the_acquire_span_carries_key_lease_outcome_and_token() {
    let logs = logged(async {
        let lock = InMemoryLock::new();
        let held = lock
            .try_acquire("span-key", Lease::Fixed(Duration::from_secs(5)))
            .await
            .unwrap();
        lock.try_acquire("span-key", Lease::Watchdog)
            .await
            .unwrap_err();
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    });
    let text = logs.text();
    // The DEBUG event of the failed acquisition is logged inside its span: the fmt subscriber
    // prints the span with its fields as known then.
    let line = text
        .lines()
        .find(|l| l.contains("lock not granted: failing closed"))
        .unwrap_or_else(|| panic!("no failing-closed event in:\n{text}"));
    assert!(line.contains("lock.acquire{"), "{line}");
    assert!(line.contains("lock_key=\"span-key\""), "{line}");
    assert!(line.contains("lease=\"watchdog\""), "{line}");
    assert!(line.contains("fair=false"), "{line}");
    assert!(line.contains("wait_ms=0"), "{line}");
    assert!(line.contains("reason=\"held_by_another_owner\""), "{line}");
}

/// A lock whose backend is down: every acquisition fails with `backend_unavailable`.
#[derive(Debug)]
struct DownLock;

#[async_trait::async_trait]
impl DistributedLock for DownLock {
    fn namespace(&self) -> &str {
        "down"
    }

    async fn acquire_lease(
        &self,
        key: &str,
        _options: lock_core::lock::AcquireOptions,
    ) -> Result<lock_core::lock::LockHandle, lock_core::LockError> {
        Err(lock_core::LockError::backend_unavailable(
            key,
            "connection refused",
        ))
    }

    async fn shutdown(&self, _timeout: Duration) -> lock_core::lock::ShutdownSummary {
        lock_core::lock::ShutdownSummary::default()
    }
}

/// Acquisitions failing closed while the backend is down are logged at `INFO` once, with the
/// error, and at `DEBUG` after that: an outage is not logged per request.
#[test]
fn an_outage_is_logged_at_info_once() {
    let logs = logged(async {
        for _ in 0..3 {
            DownLock
                .try_acquire("outage-key", Lease::Watchdog)
                .await
                .unwrap_err();
        }
    });
    let text = logs.text();
    let lines: Vec<_> = text
        .lines()
        .filter(|l| l.contains("lock not granted: failing closed") && l.contains("outage-key"))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].contains(" INFO ") && lines[0].contains("connection refused"),
        "{}",
        lines[0]
    );
    for line in &lines[1..] {
        assert!(line.contains("DEBUG"), "{line}");
    }
}
