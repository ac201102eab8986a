//! `min-replicas` on a Cluster — each shard's replica confirms only that shard's grants and
//! renewals, and a shard whose replica stalls costs only its own leases — and a Cluster node
//! given as a single-server address.
//!
//! Waits are on events with generous deadlines (a loaded 2-core machine), never fixed sleeps.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use lock_core::lock::{DistributedLock, Lease, LostReason};
use lock_testkit::RedisCluster;
use tokio::time::Instant;

fn slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

/// Shard A's replica stalls while one client holds watchdog leases on eight of A's slots and
/// on a slot of shard B. A's renewals are no longer confirmed, so A's leases are lost
/// (`Expired`); B's renewals — confirmed by B's healthy replica — carry on, although the watchdog
/// renews every slot in the same tick and A's `WAIT`s each take the whole replica-sync timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_replica_costs_only_its_own_shards_leases() {
    let cluster = RedisCluster::start().await.expect("the cluster starts");
    let masters = cluster.masters().await.unwrap();
    let shard_a = masters[0];
    let replica_a = cluster.replica_of(shard_a).await.unwrap().unwrap();
    let config = common::default_config(cluster.url())
        .watchdog_timeout(Duration::from_secs(6))
        .command_timeout(Duration::from_secs(1))
        .wait_time(Duration::from_secs(2))
        .min_replicas(1)
        .replica_sync_timeout(Duration::from_secs(1))
        .instance_id("cluster-replication");
    let lock = common::connect(config).await;

    // B's key in a slot after all of A's, so a watchdog renewing slot by slot in order would
    // reach it last.
    let mut b_name = None;
    for i in 0.. {
        let name = format!("b-{i}");
        let key = lock.redis_key(&name);
        if slot(&key) > 10_000 && cluster.node_for_key(&key).await.unwrap() != shard_a {
            b_name = Some(name);
            break;
        }
    }
    let b_name = b_name.unwrap();
    let mut a_names = Vec::new();
    let mut slots = BTreeSet::new();
    for i in 0.. {
        let name = format!("a-{i}");
        let key = lock.redis_key(&name);
        if cluster.node_for_key(&key).await.unwrap() == shard_a && slots.insert(slot(&key)) {
            a_names.push(name);
        }
        if a_names.len() == 8 {
            break;
        }
    }
    let b = lock.acquire(&b_name, Lease::Watchdog).await.unwrap();
    let mut a_handles = Vec::new();
    for name in &a_names {
        a_handles.push(lock.acquire(name, Lease::Watchdog).await.unwrap());
    }

    let stalled = cluster.node(replica_a).unwrap();
    stalled.pause().unwrap();
    let started = Instant::now();
    let mut reasons = Vec::new();
    for handle in &a_handles {
        let reason = tokio::time::timeout(Duration::from_secs(60), handle.lost())
            .await
            .expect("a lease whose renewals no replica confirmed was never lost");
        reasons.push(reason);
    }
    let all_lost = started.elapsed();
    // B renewed past its first deadline after the stall: still held, locally and in Redis.
    let b_key = lock.redis_key(&b_name);
    let node_b = cluster.node_for_key(&b_key).await.unwrap();
    let value = cluster.cmd_on(node_b, &["GET", &b_key]).await.unwrap();
    let held = b.is_held();
    stalled.resume().unwrap();
    eprintln!("shard A's leases lost {all_lost:?} after the stall ({reasons:?}); B held: {held}");
    assert!(
        reasons.iter().all(|r| *r == LostReason::Expired),
        "{reasons:?}"
    );
    assert!(
        held,
        "the lease on the healthy shard was lost ({:?}) behind the stalled shard's WAITs",
        b.status()
    );
    assert!(value.contains(b.owner()), "{value}");
}

/// A `redis://` address pointing at a Cluster node: keys the node does not serve are answered
/// `MOVED`. The acquisition fails closed, and the error says to use a `redis-cluster://` address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_address_on_a_cluster_node_says_to_use_redis_cluster() {
    let cluster = RedisCluster::start().await.expect("the cluster starts");
    let node = cluster.masters().await.unwrap()[0];
    let lock = common::connect(
        common::default_config(format!("redis://127.0.0.1:{node}"))
            .command_timeout(Duration::from_secs(2))
            .wait_time(Duration::ZERO)
            .instance_id("misconfigured"),
    )
    .await;
    let mut elsewhere = None;
    for i in 0.. {
        let name = format!("moved-{i}");
        if cluster.node_for_key(&lock.redis_key(&name)).await.unwrap() != node {
            elsewhere = Some(name);
            break;
        }
    }
    let error = lock
        .acquire(&elsewhere.unwrap(), Lease::Watchdog)
        .await
        .expect_err("a key of another node cannot be granted here");
    assert_eq!(error.details()["reason"], "backend_unavailable", "{error}");
    let refusal = lock_redis::RedisFailure::find(&error).and_then(|f| f.refusal());
    assert_eq!(
        refusal,
        Some(lock_redis::Refusal::ClusterRedirect),
        "{error}"
    );
    let message = format!(
        "{error} {:?}",
        std::error::Error::source(&error).map(|s| s.to_string())
    );
    assert!(message.contains("redis-cluster://"), "{message}");
}
