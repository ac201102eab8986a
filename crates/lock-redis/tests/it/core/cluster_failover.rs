//! The Redis lock through Cluster failovers, on a cluster of its own (node timeout 1 s): a manual
//! `CLUSTER FAILOVER` with a lock held and a waiter waiting, and a killed master whose last grant
//! never reached its replica. Measured times are printed (`--nocapture`) for the deployment docs.
//!
//! The tests share one cluster and take it in turn. Nothing sleeps for a fixed time: every
//! wait is on an event, with a generous deadline for a loaded 2-core machine.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use crate::common::Setup;
use common::{GENEROUS, eventually};
use lock_core::AcquireFailure;
use lock_core::lock::{DistributedLock, Lease, LockHandle, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::shared::{Shared, Taken};
use lock_testkit::{FAILOVER, RedisCluster, unique_suffix};
use tokio::time::Instant;

/// The cluster every test of this file uses, one test at a time; started by the first, stopped
/// by the last of its tests.
static CLUSTER: Shared<RedisCluster> = Shared::new(3);

/// `cluster-node-timeout` of this file's cluster.
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Watchdog timeout of the clients here: renewals every 2 s, so a lease rides out a failover of
/// a few seconds instead of lapsing locally while the slot has no master.
const WATCHDOG: Duration = Duration::from_secs(6);

async fn cluster() -> Taken<RedisCluster> {
    let cluster = CLUSTER
        .take(|| async {
            let started = Instant::now();
            let cluster = RedisCluster::builder()
                .node_timeout(NODE_TIMEOUT)
                .start()
                .await
                .expect("the Redis Cluster did not start");
            eprintln!("cluster started in {:?}", started.elapsed());
            cluster
        })
        .await;
    // A test that failed half-way may have left a replica cut off (see the killed-master test).
    for node in cluster.nodes().iter().filter(|n| n.pid().is_some()) {
        let _ = node.cmd(&["CLIENT", "UNPAUSE"]).await;
    }
    cluster
        .wait_until_ok()
        .await
        .expect("the cluster did not settle");
    cluster
}

fn config(cluster: &RedisCluster) -> Setup {
    common::config_at(cluster.url())
        .watchdog_timeout(WATCHDOG)
        .instance_id("failover-pod")
}

async fn client(cluster: &RedisCluster) -> RedisLock {
    common::connect(config(cluster)).await
}

fn local_slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

/// Fresh lock names whose keys are all in one slot.
struct SlotNames {
    lock: RedisLock,
    slot: u16,
    stem: String,
    next: u64,
}

impl SlotNames {
    fn new(lock: &RedisLock, slot: u16, stem: &str) -> Self {
        SlotNames {
            lock: lock.clone(),
            slot,
            stem: stem.to_owned(),
            next: 0,
        }
    }

    fn next(&mut self) -> String {
        loop {
            let name = format!("{}-{}", self.stem, self.next);
            self.next += 1;
            if local_slot(&self.lock.redis_key(&name)) == self.slot {
                return name;
            }
        }
    }
}

/// A lock name whose key is served by `master`, checked with the server.
async fn name_on(cluster: &RedisCluster, lock: &RedisLock, master: u16, stem: &str) -> String {
    for i in 0.. {
        let name = format!("{stem}-{i}");
        if cluster.node_for_key(&lock.redis_key(&name)).await.unwrap() == master {
            return name;
        }
    }
    unreachable!()
}

/// A running master that has a running replica.
async fn master_with_replica(cluster: &RedisCluster) -> (u16, u16) {
    for master in cluster.masters().await.unwrap() {
        if let Some(replica) = cluster.replica_of(master).await.unwrap() {
            return (master, replica);
        }
    }
    panic!("no master has a replica left");
}

async fn calls_on(cluster: &RedisCluster, port: u16) -> HashMap<String, u64> {
    cluster.command_calls_on(port).await.unwrap()
}

async fn shard_subscribers(cluster: &RedisCluster, port: u16, channel: &str) -> u64 {
    cluster
        .cmd_on(port, &["PUBSUB", "SHARDNUMSUB", channel])
        .await
        .unwrap()
        .lines()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Tries fresh names of the slot, one after another, until one is granted; returns how long
/// that took from `since`. Panics after [`FAILOVER`] past `since`.
async fn first_grant_after(lock: &RedisLock, names: &mut SlotNames, since: Instant) -> Duration {
    let mut attempts = 0;
    let mut last_error = None;
    while since.elapsed() < FAILOVER {
        attempts += 1;
        match lock
            .try_acquire(&names.next(), Lease::Fixed(Duration::from_secs(10)))
            .await
        {
            Ok(handle) => {
                let took = since.elapsed();
                eprintln!("  first grant on the slot after {took:?} ({attempts} attempts)");
                drop(handle);
                return took;
            }
            Err(e) => {
                last_error = Some(e.to_string());
                // Refused connections fail at once: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    panic!(
        "no grant on slot {} within {FAILOVER:?} ({attempts} attempts, last error: {last_error:?})",
        names.slot
    );
}

/// Grants on one slot, tried back to back while something happens to the cluster: how many
/// were granted and refused, and the longest stretch without a grant.
#[derive(Debug, Default)]
struct Probe {
    granted: u32,
    refused: u32,
    longest_without_grant: Duration,
    errors: Vec<String>,
}

fn start_probe(
    lock: RedisLock,
    mut names: SlotNames,
    stop: Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<Probe> {
    tokio::spawn(async move {
        let mut probe = Probe::default();
        let mut last_grant = Instant::now();
        let stopped = stop.notified();
        tokio::pin!(stopped);
        loop {
            let name = names.next();
            let attempt = lock.try_acquire(&name, Lease::Fixed(Duration::from_secs(10)));
            tokio::select! {
                () = &mut stopped => break,
                result = attempt => match result {
                    Ok(handle) => {
                        probe.granted += 1;
                        probe.longest_without_grant =
                            probe.longest_without_grant.max(last_grant.elapsed());
                        last_grant = Instant::now();
                        let _ = handle.release().await;
                    }
                    Err(e) => {
                        probe.refused += 1;
                        if probe.errors.len() < 3 {
                            probe.errors.push(e.to_string());
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        probe.longest_without_grant = probe.longest_without_grant.max(last_grant.elapsed());
        probe
    })
}

// ---------------------------------------------------------------------------------------------
// (a) CLUSTER FAILOVER with a lock held and a waiter waiting
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_keeps_the_lease_hands_it_to_the_waiter_after_release_and_never_to_two() {
    let cluster = cluster().await;
    let (holder, waiter, prober) = (
        client(&cluster).await,
        client(&cluster).await,
        client(&cluster).await,
    );
    let (master, replica) = master_with_replica(&cluster).await;
    let name = name_on(
        &cluster,
        &holder,
        master,
        &format!("manual-failover-{:x}", unique_suffix()),
    )
    .await;
    let key = holder.redis_key(&name);
    let channel = holder.release_channel(&name);
    let slot = cluster.slot_for_key(&key).await.unwrap();

    let held = holder.acquire(&name, Lease::Watchdog).await.unwrap();
    let token = held.fencing_token();
    // When the holder learns it lost the lease, if it does: the waiter may be granted the lock
    // only after that (or after the release).
    let holder_lost_at: Arc<StdMutex<Option<Instant>>> = Arc::default();
    tokio::spawn({
        let (lost, at) = (held.lost(), Arc::clone(&holder_lost_at));
        async move {
            lost.await;
            *at.lock().unwrap() = Some(Instant::now());
        }
    });
    let mut waiting = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.clone());
        async move {
            let options = common::watchdog_waiting(Duration::from_secs(60));
            let result = waiter.acquire_with(&name, options).await;
            (result, Instant::now())
        }
    });
    let subscribed = eventually(GENEROUS, || async {
        shard_subscribers(&cluster, master, &channel).await == 1
    })
    .await;
    assert!(subscribed, "the waiter never subscribed on {master}");

    let stop = Arc::new(tokio::sync::Notify::new());
    let probe = start_probe(
        prober.clone(),
        SlotNames::new(&prober, slot, &format!("{name}-probe")),
        Arc::clone(&stop),
    );
    let started = Instant::now();
    let promoted = cluster.failover(master).await.expect("CLUSTER FAILOVER");
    let failover_took = started.elapsed();
    assert_eq!(promoted, replica);
    assert_eq!(cluster.node_for_key(&key).await.unwrap(), promoted);
    let mut fresh = SlotNames::new(&prober, slot, &format!("{name}-fresh"));
    eprintln!(
        "CLUSTER FAILOVER {master} -> {promoted} (node timeout {NODE_TIMEOUT:?}) settled in {failover_took:?}"
    );
    let recovered = first_grant_after(&prober, &mut fresh, started).await;
    stop.notify_one();
    let probe = probe.await.unwrap();
    eprintln!(
        "  while failing over: {} grants, {} refusals, longest stretch without a grant {:?}, e.g. {:?}",
        probe.granted, probe.refused, probe.longest_without_grant, probe.errors
    );
    assert!(recovered <= FAILOVER);

    // The holder keeps its lease across the failover — its renewals reach the new master — or,
    // had the key not survived, it would have been told through lost().
    let renewals_from = calls_on(&cluster, promoted).await;
    let renewed = eventually(GENEROUS, || async {
        let now = calls_on(&cluster, promoted).await;
        now.get("evalsha").copied().unwrap_or(0)
            > renewals_from.get("evalsha").copied().unwrap_or(0) + 1
            || !held.is_held()
    })
    .await;
    assert!(renewed, "no renewal reached the new master {promoted}");
    let still_held = held.is_held();
    // The waiter may have given up while the cluster failed over (an attempt it made then
    // failed): allowed, if it failed closed. It must not have been granted the lock while the
    // holder held it.
    let early = if waiting.is_finished() {
        Some((&mut waiting).await.unwrap())
    } else {
        None
    };
    if still_held {
        let value = cluster.cmd_on(promoted, &["GET", &key]).await.unwrap();
        assert!(
            value.contains(held.owner()),
            "the holder believes it holds {key}, but the new master has {value:?}"
        );
        if let Some((Ok(other), _)) = &early {
            panic!(
                "two holders: the waiter {} was granted {key} while {} held it",
                other.owner(),
                held.owner()
            );
        }
        eprintln!("  the holder kept its lease across the manual failover");
    } else {
        let reason = tokio::time::timeout(GENEROUS, held.lost())
            .await
            .expect("not held, yet lost() did not fire");
        eprintln!("  the holder lost its lease in the failover: {reason}");
    }

    let released_at = Instant::now();
    let outcome = held.release().await.unwrap();
    if still_held {
        assert_eq!(outcome, ReleaseOutcome::Released);
    }
    let (result, granted_at) = match early {
        Some(early) => early,
        None => tokio::time::timeout(GENEROUS + Duration::from_secs(60), waiting)
            .await
            .expect("the waiter neither got the lock nor gave up")
            .unwrap(),
    };
    match result {
        Ok(handle) => {
            let lost_at = *holder_lost_at.lock().unwrap();
            assert!(
                granted_at >= released_at || lost_at.is_some_and(|lost| granted_at >= lost),
                "the waiter was granted the lock before the holder released or lost it"
            );
            eprintln!(
                "  the waiter got the lock {:?} after the release",
                granted_at.saturating_duration_since(released_at)
            );
            assert!(handle.fencing_token() > token);
            assert_waiter_is_the_only_holder(&cluster, &handle, &key).await;
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        }
        Err(e) => {
            // Allowed, if clear: it failed closed with a reason.
            assert_eq!(e.code(), "LOCK_ACQUISITION_FAILED", "{e}");
            eprintln!("  the waiter failed closed: {e}");
        }
    }
}

async fn assert_waiter_is_the_only_holder(cluster: &RedisCluster, handle: &LockHandle, key: &str) {
    let node = cluster.node_for_key(key).await.unwrap();
    let value = cluster.cmd_on(node, &["GET", key]).await.unwrap();
    assert!(
        value.starts_with("H|") && value.contains(handle.owner()),
        "{value:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// (b) A killed master whose last grant never reached its replica
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_loses_an_unreplicated_grant_the_holder_is_told_and_min_replicas_fails_closed()
 {
    let mut cluster = cluster().await;
    let (master, replica) = master_with_replica(&cluster).await;
    let holder = client(&cluster).await;
    let other = client(&cluster).await;
    let strict = common::connect(
        config(&cluster)
            .min_replicas(1)
            .replica_sync_timeout(Duration::from_millis(500)),
    )
    .await;
    let name = name_on(
        &cluster,
        &holder,
        master,
        &format!("killed-master-{:x}", unique_suffix()),
    )
    .await;
    let key = holder.redis_key(&name);
    let slot = cluster.slot_for_key(&key).await.unwrap();

    // Cut the replica off: it still receives the replication stream but applies no write (its
    // master link is a client, and paused clients run no write). Its election is unaffected.
    cluster
        .cmd_on(replica, &["CLIENT", "PAUSE", "60000", "WRITE"])
        .await
        .unwrap();

    // With min-replicas 1 the grant is not confirmed: refused, with its own reason, and handed
    // back at once.
    let started = Instant::now();
    let err = strict
        .try_acquire(&name, Lease::Watchdog)
        .await
        .expect_err("a grant no replica has must not be reported");
    eprintln!(
        "min-replicas 1 with the replica cut off: refused after {:?}: {err}",
        started.elapsed()
    );
    assert!(
        matches!(
            err.acquire_failure(),
            Some(AcquireFailure::ReplicationUnconfirmed {
                required: 1,
                acknowledged: 0
            })
        ),
        "{err}"
    );
    assert_eq!(err.details()["reason"], "replication_unconfirmed");

    // Without min-replicas the same grant is reported — and lives on the master only.
    let held = holder
        .acquire_with(&name, common::watchdog_waiting(Duration::from_secs(10)))
        .await
        .expect("granted without min-replicas");
    let token = held.fencing_token();
    let lost = held.lost();
    let value = cluster.cmd_on(master, &["GET", &key]).await.unwrap();
    assert!(value.contains(held.owner()), "{value:?}");

    let stop = Arc::new(tokio::sync::Notify::new());
    let probe = start_probe(
        other.clone(),
        SlotNames::new(&other, slot, &format!("{name}-probe")),
        Arc::clone(&stop),
    );
    let killed_at = Instant::now();
    let promoted = cluster.kill_master(master).await.expect("kill_master");
    let failover_took = killed_at.elapsed();
    cluster
        .cmd_on(promoted, &["CLIENT", "UNPAUSE"])
        .await
        .unwrap();
    assert_eq!(promoted, replica);
    eprintln!(
        "killed master {master}: replica {promoted} took over after {failover_took:?} (node timeout {NODE_TIMEOUT:?})"
    );
    let value = cluster.cmd_on(promoted, &["GET", &key]).await.unwrap();
    assert!(
        !value.contains(held.owner()),
        "the unreplicated grant survived the failover ({value:?}); the test did not cut the replica off"
    );

    // New grants on the slot within a bounded time.
    let mut fresh = SlotNames::new(&other, slot, &format!("{name}-fresh"));
    let recovered = first_grant_after(&other, &mut fresh, killed_at).await;
    assert!(recovered <= FAILOVER);
    stop.notify_one();
    let probe = probe.await.unwrap();
    eprintln!(
        "  around the kill: {} grants, {} refusals, longest stretch without a grant {:?}, e.g. {:?}",
        probe.granted, probe.refused, probe.longest_without_grant, probe.errors
    );

    // The holder learns that its key did not survive.
    let reason = tokio::time::timeout(GENEROUS, lost)
        .await
        .expect("the holder was never told its lease was lost");
    let told_after = killed_at.elapsed();
    eprintln!(
        "  the holder learned the loss {told_after:?} after the kill ({:?} after the failover): {reason}",
        told_after.saturating_sub(failover_took)
    );
    assert!(!held.is_held());
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::NotHeld);

    // The next holder of the same lock gets a larger fencing token.
    let next = other
        .acquire_with(&name, common::watchdog_waiting(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        next.fencing_token() > token,
        "fencing token {} after {token}",
        next.fencing_token()
    );
    assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);

    // The promoted master has no replica now: with min-replicas 1, grants on its slots fail
    // closed rather than be reported unreplicated. `strict` sat idle through the failover, so
    // its first calls may still find the cluster's state settling (backend_unavailable, closed
    // too); the reason is asserted once Redis answers it.
    let until = Instant::now() + GENEROUS;
    let err = loop {
        let err = strict
            .try_acquire(&fresh.next(), Lease::Watchdog)
            .await
            .expect_err("no replica can acknowledge");
        if err.details()["reason"] != "backend_unavailable" || Instant::now() >= until {
            break err;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(err.details()["reason"], "replication_unconfirmed", "{err}");
}

/// A waiter for a shared value's change, subscribed on the key's master, sees a write made right
/// after a manual failover moved the key to the replica: the old master dropped the
/// subscription, and a replica would accept it again but deliver nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_waiter_sees_a_write_made_after_a_manual_failover() {
    let cluster = cluster().await;
    let (writer, reader) = (client(&cluster).await, client(&cluster).await);
    let (values, store) = crate::values::values(&writer).await;
    let (watched, _) = crate::values::values(&reader).await;
    let (master, _) = master_with_replica(&cluster).await;
    let mut key = String::new();
    for i in 0.. {
        key = format!("failover-value-{:x}-{i}", unique_suffix());
        if cluster.node_for_key(&store.value_key(&key)).await.unwrap() == master {
            break;
        }
    }
    let channel = store.write_channel(&key);
    let ttl = lock_core::values::Expiry::After(Duration::from_secs(600));
    let since = values.set(&key, &0u64, ttl).await.unwrap();
    let waiting = tokio::spawn({
        let key = key.clone();
        async move {
            watched
                .wait_for_change::<u64>(&key, Some(since), Duration::from_secs(60))
                .await
        }
    });
    let subscribed = eventually(GENEROUS, || async {
        shard_subscribers(&cluster, master, &channel).await == 1
    })
    .await;
    assert!(subscribed, "the waiter never subscribed on {master}");

    cluster.failover(master).await.unwrap();
    let written = Instant::now();
    values.set(&key, &1u64, ttl).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter missed the write made after the failover")
        .unwrap()
        .unwrap();
    eprintln!("the waiter saw the write {:?} after it", written.elapsed());
    assert!(waited.is_met(), "{waited:?}");
}
