//! Replica-acknowledged grants (`min-replicas`, `replica-sync-timeout`) on a primary with one
//! replica: a grant is reported only once enough replicas have it; otherwise it is handed back
//! and the acquisition fails closed with its own reason.

use crate::common;

use std::time::Duration;

use common::{SLACK, command_calls, delta, eventually};
use lock_core::lock::{DistributedLock, Lease, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;

/// A client of `primary` whose grants wait up to `sync` for `replicas` replicas.
async fn replicated_client(primary: &RedisServer, replicas: u32, sync: Duration) -> RedisLock {
    let config = common::config(primary).min_replicas(replicas);
    common::connect(config.replica_sync_timeout(sync)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_waits_for_its_replica_and_costs_one_wait() {
    let (primary, replica) = common::primary_with_replica().await;
    let lock = common::connect(common::config(&primary).min_replicas(1)).await;
    let before = command_calls(&primary).await;
    let handle = common::hold(&lock, "replicated", Duration::from_secs(30)).await;
    let after = command_calls(&primary).await;
    assert_eq!(delta(&before, &after, "evalsha"), 1);
    assert_eq!(delta(&before, &after, "wait"), 1);
    // The replica has the grant at the moment it is reported.
    let on_replica = common::value(&replica, &lock.redis_key("replicated")).await;
    assert!(on_replica.contains(handle.owner()), "{on_replica}");
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_acknowledgements_hand_the_grant_back_and_fail_closed() {
    let (primary, _replica) = common::primary_with_replica().await;
    let lock = replicated_client(&primary, 2, Duration::from_millis(200)).await;
    let err = lock
        .acquire("unreplicated", Lease::Fixed(Duration::from_secs(60)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "LOCK_ACQUISITION_FAILED");
    let details = err.details();
    assert_eq!(details["reason"], "replication_unconfirmed", "{err}");
    assert_eq!(details["requiredReplicas"], "2");
    assert_eq!(details["acknowledgedReplicas"], "1");
    // Handed back at once (not held for its 60 s lease): someone else gets it.
    let other = common::connect(common::config(&primary)).await;
    let handed_back = eventually(SLACK, || async {
        other
            .try_acquire("unreplicated", Lease::Watchdog)
            .await
            .is_ok()
    })
    .await;
    assert!(handed_back, "the unconfirmed grant was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_makes_grants_fail_closed_within_the_sync_timeout() {
    let (primary, replica) = common::primary_with_replica().await;
    let lock = replicated_client(&primary, 1, Duration::from_millis(300)).await;
    replica.pause().unwrap();
    let started = tokio::time::Instant::now();
    let err = lock.acquire("cut-off", Lease::Watchdog).await.unwrap_err();
    assert_eq!(err.details()["reason"], "replication_unconfirmed", "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "did not wait for the replica"
    );
    replica.resume().unwrap();
    let recovered = eventually(Duration::from_secs(20), || async {
        lock.try_acquire("cut-off", Lease::Watchdog).await.is_ok()
    })
    .await;
    assert!(recovered, "grants did not recover with the replica");
}

/// Logs written while `f` runs on this thread (the test's own task: `connect` logs from it).
async fn logs_of<F: std::future::Future>(f: F) -> (F::Output, String) {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    let guard = tracing::subscriber::set_default(subscriber);
    let output = f.await;
    drop(guard);
    (output, logs.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_with_more_min_replicas_than_replicas_warns_naming_the_setting() {
    let (primary, _replica) = common::primary_with_replica().await;
    let (lock, logged) = logs_of(common::try_connect(
        common::config(&primary).min_replicas(2),
    ))
    .await;
    lock.unwrap();
    assert!(
        logged.contains("min-replicas asks for more replicas")
            && logged.contains("connected_replicas=1"),
        "{logged}"
    );
    // Enough replicas: no warning.
    let (lock, logged) = logs_of(common::try_connect(
        common::config(&primary).min_replicas(1),
    ))
    .await;
    lock.unwrap();
    assert!(!logged.contains("min-replicas"), "{logged}");
}
