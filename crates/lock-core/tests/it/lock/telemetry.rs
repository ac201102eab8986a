//! The acquisition, release and lost-lease metrics, recorded by the provided `acquire_with` and
//! by `LockHandle` for every implementation — here the in-memory one (the `lock.acquire` span:
//! `tests/telemetry_span.rs`).
//!
//! Each test installs its own recorder as the thread's default and runs on a `current_thread`
//! runtime, so it sees exactly what its own lock did.

use std::time::Duration;

use lock_core::lock::telemetry::{
    ACQUISITIONS_TOTAL, FAIL_CLOSED_TOTAL, HOLD_SECONDS, LOST_LEASES_TOTAL, RELEASES_TOTAL,
    UNGUARDED_RUNS_TOTAL, WAIT_SECONDS,
};
use lock_core::lock::{
    AcquireOptions, DisabledLock, DistributedLock, DistributedLockExt, InMemoryLock, Lease,
    LostReason, ReleaseOutcome,
};
use lock_testkit::metrics::CapturedMetrics;

#[tokio::test(flavor = "current_thread")]
async fn a_grant_a_contention_failure_and_a_release_are_counted_exactly() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let lock = InMemoryLock::new();

    let held = lock
        .acquire("bill-run:2026-11", Lease::Watchdog)
        .await
        .unwrap();
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "granted", 1);
    m.assert_counter_total(ACQUISITIONS_TOTAL, 1);
    m.assert_counter_total(FAIL_CLOSED_TOTAL, 0);
    assert_eq!(m.histogram(WAIT_SECONDS, "outcome", "granted").len(), 1);
    // A first lost lease must be a rise from 0, or `increase()` alerts never see it.
    m.assert_registered(LOST_LEASES_TOTAL, "reason=not_owner");
    m.assert_registered(LOST_LEASES_TOTAL, "reason=expired");
    m.assert_counter_total(LOST_LEASES_TOTAL, 0);

    let options = AcquireOptions::new(Lease::Watchdog)
        .wait_time(Duration::from_millis(50))
        .unwrap();
    let err = lock
        .acquire_with("bill-run:2026-11", options)
        .await
        .unwrap_err();
    assert_eq!(err.details()["reason"], "held_by_another_owner");
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "held_by_another_owner", 1);
    m.assert_counter(FAIL_CLOSED_TOTAL, "reason", "held_by_another_owner", 1);
    m.assert_counter_total(ACQUISITIONS_TOTAL, 1);
    let waited = m.histogram(WAIT_SECONDS, "outcome", "held_by_another_owner");
    assert_eq!(waited.len(), 1);
    assert!(
        waited[0] >= 0.05,
        "waited at least the 50 ms wait: {waited:?}"
    );

    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let m = metrics.take();
    m.assert_counter(RELEASES_TOTAL, "outcome", "released", 1);
    m.assert_counter_total(RELEASES_TOTAL, 1);
    assert_eq!(m.histogram(HOLD_SECONDS, "", "").len(), 1);
    m.assert_counter_total(ACQUISITIONS_TOTAL, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn with_lock_counts_one_grant_and_one_release_and_reentry_apart() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let lock = InMemoryLock::new();
    lock.with_lock("reaper", Lease::Watchdog, || async {
        let nested = lock.acquire("reaper", Lease::Watchdog).await.unwrap();
        assert!(nested.is_reentrant());
        assert_eq!(nested.release().await.unwrap(), ReleaseOutcome::Released);
    })
    .await
    .unwrap();
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "granted", 1);
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "reentered", 1);
    // The nested release gives its hold back; only the outer one is a release.
    m.assert_counter_total(RELEASES_TOTAL, 1);
    m.assert_counter(RELEASES_TOTAL, "outcome", "released", 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_handle_and_a_lost_lease_are_counted() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let lock = InMemoryLock::new();

    drop(lock.acquire("k1", Lease::Watchdog).await.unwrap());
    let m = metrics.take();
    m.assert_counter(RELEASES_TOTAL, "outcome", "dropped", 1);

    let (logs, subscriber) = lock_testkit::logs::CapturedLogs::scoped(tracing::Level::WARN);
    let _logs = tracing::subscriber::set_default(subscriber);
    let short = lock
        .acquire("k2", Lease::Fixed(Duration::from_millis(100)))
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(30), short.lost())
        .await
        .expect("the fixed lease ends");
    assert_eq!(reason, LostReason::Expired);
    let m = metrics.take();
    m.assert_counter(LOST_LEASES_TOTAL, "reason", "expired", 1);
    let text = logs.text();
    assert!(
        text.contains("lease lost: the lease ran out without a confirmed renewal")
            && text.contains("lock_key=\"k2\"")
            && text.contains(short.owner()),
        "one WARN names the key, the owner and the reason: {text}"
    );
    // Noticing the loss again does not count it again.
    assert!(!short.is_held());
    assert_eq!(short.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let m = metrics.take();
    m.assert_counter_total(LOST_LEASES_TOTAL, 0);
    m.assert_counter(RELEASES_TOTAL, "outcome", "not_held", 1);
}

#[tokio::test(flavor = "current_thread")]
async fn invalid_and_disabled_acquisitions_are_told_apart() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());

    InMemoryLock::new()
        .acquire("", Lease::Watchdog)
        .await
        .unwrap_err();
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "invalid_argument", 1);
    // A bug of the caller, not a lock that failed closed.
    m.assert_counter_total(FAIL_CLOSED_TOTAL, 0);

    DisabledLock::new("enabled = false")
        .acquire("k", Lease::Watchdog)
        .await
        .unwrap_err();
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "disabled", 1);
    m.assert_counter(FAIL_CLOSED_TOTAL, "reason", "disabled", 1);
}

#[tokio::test(flavor = "current_thread")]
async fn an_unguarded_fail_open_run_is_counted_by_reason_from_zero() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    // At 0 from the client's construction: a start-up job's first run is a rise from 0 for
    // the scrapes after the construction.
    let disabled = DisabledLock::new("enabled = false");
    let m = metrics.take();
    m.assert_registered(UNGUARDED_RUNS_TOTAL, "reason=lock_disabled");
    m.assert_registered(LOST_LEASES_TOTAL, "reason=expired");
    m.assert_counter_total(UNGUARDED_RUNS_TOTAL, 0);

    let ran = InMemoryLock::new()
        .with_lock_fail_open("k", Lease::Watchdog, || async { 1 })
        .await
        .unwrap();
    assert!(ran.is_guarded());
    let ran = disabled
        .with_lock_fail_open("k", Lease::Watchdog, || async { 1 })
        .await
        .unwrap();
    assert!(!ran.is_guarded());
    let m = metrics.take();
    m.assert_counter(UNGUARDED_RUNS_TOTAL, "reason", "lock_disabled", 1);
    m.assert_counter_total(UNGUARDED_RUNS_TOTAL, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_acquisition_is_counted_as_cancelled() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let lock = InMemoryLock::new();
    let _held = lock.acquire("k", Lease::Watchdog).await.unwrap();
    metrics.take();
    let waiting = lock.acquire_with(
        "k",
        AcquireOptions::new(Lease::Watchdog)
            .wait_time(Duration::from_secs(60))
            .unwrap(),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(50), waiting)
            .await
            .is_err()
    );
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "cancelled", 1);
    m.assert_counter_total(FAIL_CLOSED_TOTAL, 0);
}
