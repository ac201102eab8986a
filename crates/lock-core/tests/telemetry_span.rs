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

#[test]
fn the_acquire_span_carries_key_lease_outcome_and_token() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::DEBUG);
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
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
