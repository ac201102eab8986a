//! A Cluster master that stops answering, on a cluster with `cluster-require-full-coverage no`
//! (and no automatic failover, so the outage lasts): locks on the other shards keep working,
//! locks on the dead shard fail closed. With Redis' default (`yes`) every node refuses queries
//! while a slot is uncovered — that is Redis, not the client (docs/deployments.md).
//!
//! Waits are on events with generous deadlines (a loaded 2-core machine), never fixed sleeps.

use crate::common;

use std::time::Duration;

use common::eventually;
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, ReleaseOutcome};
use lock_testkit::RedisCluster;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_leaves_the_other_shards_locks_working_without_full_coverage() {
    let cluster = RedisCluster::builder()
        .args([
            "--cluster-require-full-coverage",
            "no",
            "--cluster-replica-no-failover",
            "yes",
        ])
        .start()
        .await
        .expect("the cluster starts");
    let masters = cluster.masters().await.unwrap();
    let dead = masters[0];
    let lock = common::connect(
        common::default_config(cluster.url())
            .command_timeout(Duration::from_secs(1))
            .wait_time(Duration::ZERO)
            .instance_id("coverage"),
    )
    .await;
    let (mut on_dead, mut on_live) = (None, None);
    for i in 0.. {
        let name = format!("coverage-{i}");
        let node = cluster.node_for_key(&lock.redis_key(&name)).await.unwrap();
        if node == dead {
            on_dead.get_or_insert(name);
        } else {
            on_live.get_or_insert(name);
        }
        if on_dead.is_some() && on_live.is_some() {
            break;
        }
    }
    let (on_dead, on_live) = (on_dead.unwrap(), on_live.unwrap());

    let node = cluster.node(dead).unwrap();
    node.pause().unwrap();
    let paused = Instant::now();
    // The other masters mark it failed after the node timeout; their shards must serve locks
    // throughout (the client may need a moment to re-read the slot map).
    let others: Vec<u16> = masters[1..].to_vec();
    let marked_failed = eventually(common::GENEROUS, || async {
        cluster
            .cmd_on(others[0], &["CLUSTER", "NODES"])
            .await
            .is_ok_and(|nodes| {
                // The flags column holds `fail` once the majority agrees (`fail?` before).
                nodes.lines().any(|l| {
                    l.contains(&format!(":{dead}@"))
                        && l.split_whitespace()
                            .nth(2)
                            .is_some_and(|flags| flags.split(',').any(|f| f == "fail"))
                })
            })
    })
    .await;
    assert!(marked_failed, "the paused master was never marked failed");
    let state = cluster
        .cmd_on(others[0], &["CLUSTER", "INFO"])
        .await
        .unwrap();
    assert!(state.contains("cluster_state:ok"), "{state}");
    let granted = eventually(Duration::from_secs(30), || async {
        match lock
            .acquire(&on_live, Lease::Fixed(Duration::from_secs(30)))
            .await
        {
            Ok(handle) => handle.release().await.unwrap() == ReleaseOutcome::Released,
            Err(_) => false,
        }
    })
    .await;
    let first_grant = paused.elapsed();
    // Several rounds, not just one lucky grant.
    for _ in 0..20 {
        let handle = lock
            .acquire(&on_live, Lease::Fixed(Duration::from_secs(30)))
            .await;
        assert!(handle.is_ok(), "{:?}", handle.err().map(|e| e.to_string()));
        assert_eq!(
            handle.unwrap().release().await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    let started = Instant::now();
    let dead_shard = lock
        .acquire_with(&on_dead, AcquireOptions::new(Lease::Watchdog))
        .await;
    let refused_after = started.elapsed();
    node.resume().unwrap();
    assert!(
        granted,
        "no lock on a live shard was granted while one master was down"
    );
    eprintln!(
        "live shard: granted {first_grant:?} after the pause; dead shard refused after \
         {refused_after:?}"
    );
    let error = dead_shard.expect_err("a lock on the dead shard cannot be granted");
    assert_eq!(error.details()["reason"], "backend_unavailable", "{error}");
    assert!(refused_after < Duration::from_secs(10), "{refused_after:?}");
}
