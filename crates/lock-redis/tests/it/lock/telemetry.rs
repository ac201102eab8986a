//! The metrics against a real redis-server: a grant, a contention failure, renewals, a lease lost
//! to a deleted key, a release that found it gone, and a backend-unavailable failure — each
//! counted exactly.
//!
//! The recorder is the test thread's default and the runtime is `current_thread`, so the
//! watchdog's and the connection's tasks record into it too, and nothing of other tests does.

use crate::common;

use common::SLACK;
use lock_core::lock::telemetry::{
    ACQUISITIONS_TOTAL, FAIL_CLOSED_TOTAL, LOST_LEASES_TOTAL, RELEASES_TOTAL, RENEWALS_TOTAL,
    WAIT_SECONDS,
};
use lock_core::lock::{DistributedLock, Lease, LostReason, ReleaseOutcome};
use lock_testkit::metrics::{CapturedMetrics, Recorded};

#[tokio::test(flavor = "current_thread")]
async fn grants_contention_renewals_lost_leases_and_outages_are_counted() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let (mut redis, [holder, other]) = common::server_with().await;

    let handle = holder
        .try_acquire("tel:bill-run", Lease::Watchdog)
        .await
        .unwrap();
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "granted", 1);
    m.assert_counter_total(ACQUISITIONS_TOTAL, 1);

    let err = other
        .try_acquire("tel:bill-run", Lease::Watchdog)
        .await
        .unwrap_err();
    assert_eq!(err.details()["reason"], "held_by_another_owner");
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "held_by_another_owner", 1);
    m.assert_counter(FAIL_CLOSED_TOTAL, "reason", "held_by_another_owner", 1);
    assert_eq!(
        m.histogram(WAIT_SECONDS, "outcome", "held_by_another_owner")
            .len(),
        1
    );

    // The watchdog (1 s timeout: a tick every 333 ms) renews the one lease.
    let mut seen = Recorded::default();
    let renewed = common::eventually(SLACK, || {
        seen.merge(metrics.take());
        let n = seen.counter(RENEWALS_TOTAL, "outcome", "renewed");
        async move { n >= 2 }
    })
    .await;
    assert!(renewed, "no renewals counted: {seen:#?}");
    seen.assert_counter(RENEWALS_TOTAL, "outcome", "lost", 0);
    seen.assert_counter_total(LOST_LEASES_TOTAL, 0);

    // The key vanishes: the next renewal finds it gone and the holder is told.
    redis
        .cmd(&["DEL", &holder.redis_key("tel:bill-run")])
        .await
        .unwrap();
    let reason = tokio::time::timeout(SLACK, handle.lost())
        .await
        .expect("lost() fires");
    assert_eq!(reason, LostReason::NotOwner);
    let m = metrics.take();
    m.assert_counter(RENEWALS_TOTAL, "outcome", "lost", 1);
    m.assert_counter(LOST_LEASES_TOTAL, "reason", "not_owner", 1);
    m.assert_counter_total(LOST_LEASES_TOTAL, 1);

    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let m = metrics.take();
    m.assert_counter(RELEASES_TOTAL, "outcome", "not_held", 1);
    m.assert_counter_total(RELEASES_TOTAL, 1);

    // Redis goes away: the acquisition fails closed as backend_unavailable.
    redis.kill().await.unwrap();
    let err = other
        .try_acquire("tel:other", Lease::Watchdog)
        .await
        .unwrap_err();
    assert_eq!(err.details()["reason"], "backend_unavailable", "{err}");
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "backend_unavailable", 1);
    m.assert_counter(FAIL_CLOSED_TOTAL, "reason", "backend_unavailable", 1);
    m.assert_counter_total(ACQUISITIONS_TOTAL, 1);
}
