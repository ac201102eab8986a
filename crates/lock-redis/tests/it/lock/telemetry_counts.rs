//! The metrics count each event exactly once: a forced release seen by a watchdog holder, the
//! release after it, a cancelled wait and a fair wait.
//!
//! As telemetry.rs: a `current_thread` runtime with the recorder as the thread's default, so
//! the background tasks record into it too.

use crate::common;

use std::time::Duration;

use common::SLACK;
use lock_core::lock::telemetry::{
    ACQUISITIONS_TOTAL, FAIL_CLOSED_TOTAL, LOST_LEASES_TOTAL, RELEASES_TOTAL, RENEWALS_TOTAL,
    WAIT_SECONDS,
};
use lock_core::lock::{DistributedLock, Lease, LostReason, ReleaseOutcome};
use lock_redis::lock::ForceReleased;
use lock_testkit::metrics::{CapturedMetrics, Recorded};

#[tokio::test(flavor = "current_thread")]
async fn forced_release_cancelled_and_fair_acquisitions_are_counted_exactly() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let (_redis, [holder, ops]) = common::server_with().await;

    // A watchdog lease taken from its holder by an operator.
    let handle = holder.acquire("tel:forced", Lease::Watchdog).await.unwrap();
    // A second lease whose renewals mark the watchdog's ticks.
    let ticker = holder.acquire("tel:ticker", Lease::Watchdog).await.unwrap();
    metrics.take();
    assert!(matches!(
        ops.force_release("tel:forced").await.unwrap(),
        ForceReleased::Released { .. }
    ));
    let reason = tokio::time::timeout(SLACK, handle.lost())
        .await
        .expect("the holder never noticed the forced release");
    assert_eq!(reason, LostReason::NotOwner);
    // Three more ticks: a lost lease is counted once, not again as `expired` later.
    let mut seen = Recorded::default();
    let ticked = common::eventually(SLACK, || {
        seen.merge(metrics.take());
        let n = seen.counter(RENEWALS_TOTAL, "outcome", "renewed");
        async move { n >= 4 }
    })
    .await;
    assert!(ticked, "{seen:#?}");
    seen.assert_counter(LOST_LEASES_TOTAL, "reason", "not_owner", 1);
    seen.assert_counter_total(LOST_LEASES_TOTAL, 1);
    seen.assert_counter(RENEWALS_TOTAL, "outcome", "lost", 1);
    seen.assert_counter_total(RELEASES_TOTAL, 0);
    seen.assert_counter_total(ACQUISITIONS_TOTAL, 0);

    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let m = metrics.take();
    m.assert_counter(RELEASES_TOTAL, "outcome", "not_held", 1);
    m.assert_counter_total(RELEASES_TOTAL, 1);
    m.assert_counter_total(LOST_LEASES_TOTAL, 0);

    // A fixed lease taken by force is not told: its release is `not_held`, nothing is lost.
    let fixed = common::hold(&holder, "tel:fixed", Duration::from_secs(30)).await;
    ops.force_release("tel:fixed").await.unwrap();
    assert_eq!(fixed.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let m = metrics.take();
    m.assert_counter(RELEASES_TOTAL, "outcome", "not_held", 1);
    m.assert_counter_total(RELEASES_TOTAL, 1);
    m.assert_counter_total(LOST_LEASES_TOTAL, 0);

    // A wait the caller gives up on (drops the future): one `cancelled`, no failure.
    let blocker = ops.acquire("tel:wait", Lease::Watchdog).await.unwrap();
    metrics.take();
    {
        let waiter = holder.acquire_with(
            "tel:wait",
            common::watchdog_waiting(Duration::from_secs(60)),
        );
        tokio::pin!(waiter);
        let subscribed = tokio::select! {
            _ = &mut waiter => panic!("granted a held lock"),
            subscribed = common::eventually(SLACK, || async {
                ops.status("tel:wait").await.unwrap().subscribed_clients == 1
            }) => subscribed,
        };
        assert!(subscribed, "the waiter never subscribed");
    }
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "cancelled", 1);
    m.assert_counter_total(ACQUISITIONS_TOTAL, 1);
    m.assert_counter_total(FAIL_CLOSED_TOTAL, 0);
    assert!(m.histogram(WAIT_SECONDS, "outcome", "cancelled").is_empty());

    // A fair wait, several script calls, one acquisition.
    let fair = holder.acquire_with(
        "tel:wait",
        common::watchdog_waiting(Duration::from_secs(60)).fair(),
    );
    tokio::pin!(fair);
    let queued = tokio::select! {
        _ = &mut fair => panic!("granted a held lock"),
        queued = common::eventually(SLACK, || async {
            ops.status("tel:wait").await.unwrap().fair_waiters == 1
        }) => queued,
    };
    assert!(queued);
    assert_eq!(blocker.release().await.unwrap(), ReleaseOutcome::Released);
    let granted = tokio::time::timeout(SLACK, fair).await.unwrap().unwrap();
    let m = metrics.take();
    m.assert_counter(ACQUISITIONS_TOTAL, "outcome", "granted", 1);
    m.assert_counter_total(ACQUISITIONS_TOTAL, 1);
    m.assert_counter_total(FAIL_CLOSED_TOTAL, 0);
    assert_eq!(m.histogram(WAIT_SECONDS, "outcome", "granted").len(), 1);
    assert_eq!(granted.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(ticker.release().await.unwrap(), ReleaseOutcome::Released);
}
