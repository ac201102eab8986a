//! The Redis lock on a real Redis Cluster (three masters, one replica each): the conformance
//! suite, single-slot scripts whatever the lock name, waiting on sharded pub/sub, a waiter whose
//! slot migrates, watchdog renewal batched per slot, and fair locks.
//!
//! Starting a cluster costs seconds, so every test here shares one (started by the first test
//! that needs it) and takes it in turn: the tests count commands in `INFO commandstats` and move
//! slots, which must not overlap. Each test has its own runtime, so each connects its own
//! clients. Nothing sleeps for a fixed time; every wait is on an event with a generous deadline.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::common::Setup;
use crate::suites::Suite;
use common::{GENEROUS, SLACK, WATCHDOG, eventually};
use lock_core::lock::conformance;
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, LockHandle, ReleaseOutcome};
use lock_core::{LockError, MAX_KEY_BYTES};
use lock_redis::lock::RedisLock;
use lock_testkit::shared::{Shared, Taken};
use lock_testkit::{RedisCluster, Rng, unique_suffix};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The cluster every test of this file uses, one test at a time; started by the first, stopped
/// by the last of its eleven tests.
static CLUSTER: Shared<RedisCluster> = Shared::new(11);

/// Takes the shared cluster, starting it on first use.
async fn cluster() -> Taken<RedisCluster> {
    let cluster = CLUSTER
        .take(|| async {
            let started = Instant::now();
            let cluster = RedisCluster::start()
                .await
                .expect("the Redis Cluster did not start");
            eprintln!(
                "cluster started in {:?}: {}",
                started.elapsed(),
                cluster.url()
            );
            cluster
        })
        .await;
    // A test that failed half-way (e.g. during a slot migration) leaves the next one a settled
    // cluster.
    cluster
        .wait_until_ok()
        .await
        .expect("the cluster did not settle");
    cluster
}

/// Client settings for the cluster: the short timeouts of the other lock-redis tests.
fn config(url: &str) -> Setup {
    common::config_at(url).instance_id("cluster-pod")
}

async fn client(url: &str) -> RedisLock {
    common::connect(config(url)).await
}

fn wait(lease: Lease, wait: Duration) -> AcquireOptions {
    AcquireOptions::new(lease).wait_time(wait).unwrap()
}

/// `INFO commandstats` of one node as command name → calls.
async fn calls_on(cluster: &RedisCluster, port: u16) -> HashMap<String, u64> {
    cluster.command_calls_on(port).await.unwrap()
}

/// `calls_on` of every node in `ports`.
async fn calls_on_all(
    cluster: &RedisCluster,
    ports: &[u16],
) -> BTreeMap<u16, HashMap<String, u64>> {
    let mut all = BTreeMap::new();
    for &port in ports {
        all.insert(port, calls_on(cluster, port).await);
    }
    all
}

fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, cmd: &str) -> u64 {
    after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
}

/// A numeric field of a node's `INFO <section>` or `CLUSTER INFO` text.
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.trim().split_once(':')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// The slot ranges of the running masters, from one node's `CLUSTER NODES`: (first, last, port).
async fn slot_map(cluster: &RedisCluster) -> Vec<(u16, u16, u16)> {
    let any = cluster.masters().await.unwrap()[0];
    let nodes = cluster.cmd_on(any, &["CLUSTER", "NODES"]).await.unwrap();
    let mut ranges = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let port: u16 = fields[1]
            .split(['@', ','])
            .next()
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected CLUSTER NODES line {line}"));
        for range in fields[8..].iter().filter(|r| !r.starts_with('[')) {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            ranges.push((first.parse().unwrap(), last.parse().unwrap(), port));
        }
    }
    ranges
}

fn owner_of(map: &[(u16, u16, u16)], slot: u16) -> u16 {
    map.iter()
        .find(|(first, last, _)| (*first..=*last).contains(&slot))
        .map(|(_, _, port)| *port)
        .unwrap_or_else(|| panic!("no master serves slot {slot}"))
}

/// The slot of `key` as the client library computes it (checked against the server where it
/// matters).
fn local_slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

/// `count` lock names starting with `stem` whose keys are in `slot` (the hash tag is the encoded
/// name, so these are CRC16 collisions, found by trying names in turn).
fn names_in_slot(lock: &RedisLock, slot: u16, stem: &str, count: usize) -> Vec<String> {
    (0u64..)
        .map(|i| format!("{stem}-{i}"))
        .filter(|name| local_slot(&lock.redis_key(name)) == slot)
        .take(count)
        .collect()
}

/// `PUBSUB SHARDNUMSUB channel` on one node: its subscribers there.
/// Starts `waiter` waiting up to `within` for `name`, and waits until it has subscribed to the
/// release channel on the node `on`; the task ends with the outcome and when it came.
async fn wait_subscribed(
    cluster: &RedisCluster,
    waiter: &RedisLock,
    name: &str,
    within: Duration,
    on: u16,
) -> JoinHandle<(Result<LockHandle, LockError>, Instant)> {
    let channel = waiter.release_channel(name);
    let waiting = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.to_owned());
        let options = wait(Lease::Fixed(Duration::from_secs(30)), within);
        async move { (waiter.acquire_with(&name, options).await, Instant::now()) }
    });
    let subscribed = eventually(GENEROUS, || async {
        shard_subscribers(cluster, on, &channel).await == 1
    })
    .await;
    assert!(
        subscribed,
        "the waiter never subscribed to {channel} on {on}"
    );
    waiting
}

async fn shard_subscribers(cluster: &RedisCluster, port: u16, channel: &str) -> u64 {
    let reply = cluster
        .cmd_on(port, &["PUBSUB", "SHARDNUMSUB", channel])
        .await
        .unwrap();
    reply
        .lines()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// 1. Conformance
// ---------------------------------------------------------------------------------------------

/// Runs a suite, `run_all`, on the shared cluster and asserts that every check passed;
/// returns the cluster, still taken, for more checks.
async fn assert_suite_passes<Fut>(
    capability: &str,
    run_all: impl FnOnce(Arc<Suite<Setup>>) -> Fut,
) -> Taken<RedisCluster>
where
    Fut: Future<Output = Vec<&'static str>>,
{
    let cluster = cluster().await;
    let failed = run_all(Arc::new(Suite(config(&cluster.url())))).await;
    assert!(
        failed.is_empty(),
        "{capability} checks failed on the Cluster: {failed:?}"
    );
    cluster
}

/// Every conformance check, in turn, against the one cluster (each uses keys of its own). A
/// failing check does not stop the others; all failures are reported together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_on_the_cluster() {
    assert_suite_passes("conformance", |factory| conformance::run_all(factory)).await;
}

/// Idempotent execution's scripts are single-key and publish on a channel of the record's slot:
/// its whole conformance suite on the cluster (keys of many slots, clients of every node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_conformance_suite_passes_on_the_cluster() {
    assert_suite_passes("idempotency", |factory| {
        lock_core::idempotency::conformance::run_all(factory)
    })
    .await;
}

/// Shared values' scripts are single-key and publish on a channel of the value's slot: the
/// values suite on the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_values_conformance_suite_passes_on_the_cluster() {
    assert_suite_passes("values", |factory| {
        lock_core::values::conformance::run_all(factory)
    })
    .await;
}

/// A cache's two keys and its channel share its hash tag, so one slot: the suite on the
/// cluster, the in-process tier's pushed changes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_conformance_suite_passes_on_the_cluster() {
    assert_suite_passes("cache", |factory| {
        lock_core::cache::conformance::run_all(factory)
    })
    .await;
}

/// The rate-limit script's keys are of one key, so one slot: the suite on the cluster, and
/// limits of different keys refused with an error that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_conformance_suite_passes_on_the_cluster() {
    use lock_core::rate_limit::{FailurePolicy, Part, check_all};

    let cluster = assert_suite_passes("rate-limit", |factory| {
        lock_core::rate_limit::conformance::run_all(factory)
    })
    .await;

    let store = crate::rate_limit::store(&client(&cluster.url()).await).await;
    let per_client =
        crate::rate_limit::limiter(&store, "per-client", "2/1h", FailurePolicy::FailOpen);
    let global = crate::rate_limit::limiter(&store, "global", "2/1h", FailurePolicy::FailOpen);
    let parts = [
        Part {
            limiter: &per_client,
            key: "client-42",
            cost: 1,
        },
        Part {
            limiter: &global,
            key: "all",
            cost: 1,
        },
    ];
    let error = check_all(&parts).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("on a Redis Cluster, limits checked together must be of one key"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Every script's keys share one slot, whatever the name
// ---------------------------------------------------------------------------------------------

/// Names that once broke (or could break) a hash tag: braces in every arrangement, tags that
/// look empty, the encoding's escape character, spaces, unicode, the longest accepted name.
fn awkward_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "{}",
        "}{",
        "{",
        "}",
        "{{}}",
        "}}{{",
        "{}{}",
        "a{}",
        "{}b",
        "{a}",
        "{a}{b}",
        "x{y}z",
        "{ }",
        " ",
        "   ",
        " leading and trailing ",
        "name with spaces",
        "%",
        "%7B",
        "%7D",
        "%7B%7D",
        "%25",
        "{%}",
        "ünïcødé",
        "日本語のロック",
        "🔒{🔑}",
        "\u{a0}nbsp\u{a0}",
        "zero\u{200b}width",
        "lock:{nested}",
        "::",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    names.push("x".repeat(MAX_KEY_BYTES));
    names.push("{".repeat(MAX_KEY_BYTES));
    names.push("}".repeat(MAX_KEY_BYTES / 2) + &"{".repeat(MAX_KEY_BYTES / 2));
    names.push("🔒".repeat(MAX_KEY_BYTES / 4));
    names
}

/// One random name: up to a dozen pieces, now and then a long one (up to 512 bytes).
fn random_name(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "{", "}", "{}", "}{", "%", "%7B", "%7D", " ", "  ", ":", "-", "_", "/", "a", "b", "z", "0",
        "9", "lock", "bill-run", "ü", "ß", "é", "日本", "🔒", "\u{a0}", "\u{200b}", "{x}", "{ }",
        "|",
    ];
    let pieces = if rng.below(20) == 0 {
        100 + rng.below(300)
    } else {
        1 + rng.below(12)
    };
    let mut name = String::new();
    for _ in 0..pieces {
        let piece = PIECES[rng.index(PIECES.len())];
        if name.len() + piece.len() > MAX_KEY_BYTES {
            break;
        }
        name.push_str(piece);
    }
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_awkward_names_lock_and_release_in_one_slot_each_spread_over_every_master() {
    const NAMES: usize = 1000;
    const TASKS: usize = 8;
    let seed = lock_testkit::seed("LOCK_CLUSTER_SEED");
    let mut rng = Rng(seed | 1);
    let mut names = awkward_names();
    let mut seen: HashSet<String> = names.iter().cloned().collect();
    while names.len() < NAMES {
        let name = random_name(&mut rng);
        if !name.is_empty() && seen.insert(name.clone()) {
            names.push(name);
        }
    }

    let cluster = cluster().await;
    let masters = cluster.masters().await.unwrap();
    // A prefix of its own: no other test's keys can collide with these names.
    let lock = common::connect(config(&cluster.url()).key_prefix("names:")).await;
    let errors_before = error_stats(&cluster, &masters).await;

    // While held, the awkward names' keys are where the server says their slot lives, holding
    // the holder's owner token.
    for name in awkward_names() {
        let handle = lock
            .try_acquire(&name, Lease::Fixed(Duration::from_secs(30)))
            .await
            .unwrap_or_else(|e| panic!("{name:?} was not granted: {e}"));
        let key = lock.redis_key(&name);
        let node = cluster.node_for_key(&key).await.unwrap();
        let value = cluster.cmd_on(node, &["GET", &key]).await.unwrap();
        assert!(
            value.contains(handle.owner()),
            "{name:?}: {key} holds {value:?}"
        );
        assert_eq!(
            handle.release().await.unwrap(),
            ReleaseOutcome::Released,
            "{name:?}"
        );
    }

    // All of them, eight at a time.
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in names.chunks(NAMES.div_ceil(TASKS)) {
        let (lock, chunk) = (lock.clone(), chunk.to_vec());
        tasks.spawn(async move {
            let mut failures = Vec::new();
            for name in chunk {
                match lock
                    .try_acquire(&name, Lease::Fixed(Duration::from_secs(30)))
                    .await
                {
                    Ok(handle) => match handle.release().await {
                        Ok(ReleaseOutcome::Released) => {}
                        other => failures.push(format!("{name:?}: release gave {other:?}")),
                    },
                    Err(e) => failures.push(format!("{name:?}: {e}")),
                }
            }
            failures
        });
    }
    let mut failures = Vec::new();
    while let Some(result) = tasks.join_next().await {
        failures.extend(result.unwrap());
    }
    eprintln!(
        "{NAMES} names locked and released on the cluster in {:?}",
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {NAMES} names failed, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    let errors_after = error_stats(&cluster, &masters).await;
    assert_eq!(
        errors_before, errors_after,
        "seed {seed}: Redis answered with errors (INFO errorstats)"
    );

    // The keys spread over every master: each lock has a hash tag of its own, not one shared tag.
    let map = slot_map(&cluster).await;
    let mut per_master: BTreeMap<u16, usize> = masters.iter().map(|m| (*m, 0)).collect();
    let mut slots = BTreeSet::new();
    for name in &names {
        let key = lock.redis_key(name);
        let slot = cluster.slot_for_key(&key).await.unwrap();
        assert_eq!(
            slot,
            local_slot(&key),
            "fred and Redis disagree on the slot of {key:?}"
        );
        slots.insert(slot);
        *per_master.entry(owner_of(&map, slot)).or_default() += 1;
    }
    eprintln!(
        "{NAMES} names: {} distinct slots, per master {per_master:?}",
        slots.len()
    );
    assert_eq!(per_master.len(), 3, "{per_master:?}");
    for (master, count) in &per_master {
        assert!(
            *count >= NAMES / 6,
            "seed {seed}: only {count} of {NAMES} keys on master {master}: {per_master:?}"
        );
    }
    assert!(
        slots.len() >= NAMES * 8 / 10,
        "seed {seed}: {NAMES} names share only {} slots",
        slots.len()
    );
}

/// `INFO errorstats` of the masters (`errorstat_CROSSSLOT:count=…` and the like).
async fn error_stats(cluster: &RedisCluster, masters: &[u16]) -> BTreeMap<u16, String> {
    let mut stats = BTreeMap::new();
    for &port in masters {
        let info = cluster.cmd_on(port, &["INFO", "errorstats"]).await.unwrap();
        let lines: Vec<&str> = info
            .lines()
            .filter(|l| l.starts_with("errorstat_"))
            .collect();
        stats.insert(port, lines.join(","));
    }
    stats
}

// ---------------------------------------------------------------------------------------------
// 3. Waiting uses sharded pub/sub, on the key's node only
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_sharded_publish_on_the_keys_master_only() {
    let cluster = cluster().await;
    let url = cluster.url();
    let (holder, waiter) = (client(&url).await, client(&url).await);
    let name = format!("spublish-{:x}", unique_suffix());
    let key = holder.redis_key(&name);
    let channel = holder.release_channel(&name);
    let master = cluster.node_for_key(&key).await.unwrap();
    assert_eq!(cluster.node_for_key(&channel).await.unwrap(), master);
    let masters = cluster.masters().await.unwrap();

    let lease = Duration::from_secs(60);
    let granted_at = Instant::now();
    let held = holder.acquire(&name, Lease::Fixed(lease)).await.unwrap();
    let before = calls_on_all(&cluster, &masters).await;
    let replica = cluster
        .replica_of(master)
        .await
        .unwrap()
        .expect("the key's master has a replica");
    let bus_before = cluster_bus(&cluster, master, replica).await;

    let waiting = wait_subscribed(&cluster, &waiter, &name, lease, master).await;
    // The waiter subscribed on the key's master (and nowhere else).
    assert_eq!(waiter.client().subscribed_channels(), vec![channel.clone()]);
    for &other in masters.iter().filter(|m| **m != master) {
        assert_eq!(shard_subscribers(&cluster, other, &channel).await, 0);
    }

    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (handle, woke_at) = tokio::time::timeout(lease, waiting)
        .await
        .expect("the waiter was not woken before the holder's lease would have ended")
        .unwrap();
    let handle = handle.expect("the waiter did not get the released lock");
    let woke_after = woke_at - released_at;
    eprintln!("sharded pub/sub: waiter granted {woke_after:?} after the release");
    assert!(
        woke_at < granted_at + lease && woke_after < GENEROUS,
        "the waiter was granted {woke_after:?} after the release: it waited for the TTL instead of the release message"
    );

    let after = calls_on_all(&cluster, &masters).await;
    for &port in &masters {
        let (b, a) = (&before[&port], &after[&port]);
        let spublish = delta(b, a, "spublish");
        if port == master {
            assert_eq!(
                spublish, 1,
                "the release published once on the key's master"
            );
            assert!(
                delta(b, a, "ssubscribe") >= 1,
                "no SSUBSCRIBE on the key's master"
            );
        } else {
            assert_eq!(spublish, 0, "SPUBLISH ran on master {port}, not the key's");
        }
        assert_eq!(delta(b, a, "publish"), 0, "a plain PUBLISH ran on {port}");
        assert_eq!(
            delta(b, a, "subscribe"),
            0,
            "a plain SUBSCRIBE ran on {port}"
        );
    }
    // On the cluster bus: a shard message reached the key's replica, and no broadcast PUBLISH
    // left the master. Counted where it is received: Valkey 8 sends shard messages with a light
    // header that its `_sent` counters leave out, Redis 7 counts both ends.
    let bus_after = cluster_bus(&cluster, master, replica).await;
    let bus = |text: &str, name: &str| field(text, name).unwrap_or(0);
    let ((master_before, replica_before), (master_after, replica_after)) =
        (&bus_before, &bus_after);
    assert_eq!(
        bus(master_after, "cluster_stats_messages_publish_sent"),
        bus(master_before, "cluster_stats_messages_publish_sent"),
        "a release was broadcast to every node"
    );
    assert_eq!(
        bus(replica_after, "cluster_stats_messages_publish_received"),
        bus(replica_before, "cluster_stats_messages_publish_received"),
        "the key's replica received a broadcast PUBLISH"
    );
    let shard_received = |text: &str| bus(text, "cluster_stats_messages_publishshard_received");
    let reached_replica = eventually(GENEROUS, || async {
        let now = cluster.cmd_on(replica, &["CLUSTER", "INFO"]).await.unwrap();
        shard_received(&now) > shard_received(replica_before)
    })
    .await;
    assert!(
        reached_replica,
        "the release did not reach the key's replica as a shard message:\n{replica_after}"
    );
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    // The last waiter gone, the subscription is taken down.
    let unsubscribed = eventually(GENEROUS, || async {
        shard_subscribers(&cluster, master, &channel).await == 0
    })
    .await;
    assert!(unsubscribed, "the waiter's subscription outlived it");
}

/// `CLUSTER INFO` of a master and of its replica, for the cluster bus counters.
async fn cluster_bus(cluster: &RedisCluster, master: u16, replica: u16) -> (String, String) {
    let info = |port| cluster.cmd_on(port, &["CLUSTER", "INFO"]);
    (info(master).await.unwrap(), info(replica).await.unwrap())
}

// ---------------------------------------------------------------------------------------------
// 4. A waiter still wakes after its slot migrates
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_and_renewals_continue_after_the_slot_migrates() {
    let cluster = cluster().await;
    let url = cluster.url();
    // The holder's watchdog renews every 667 ms: a renewal or two slowed by the migration on a
    // loaded machine must not let the lease lapse.
    let holder_watchdog = WATCHDOG * 2;
    let holder = common::connect(config(&url).watchdog_timeout(holder_watchdog)).await;
    let waiter = client(&url).await;
    let name = format!("migrating-{:x}", unique_suffix());
    let key = holder.redis_key(&name);
    let channel = holder.release_channel(&name);
    let slot = cluster.slot_for_key(&key).await.unwrap();
    let source = cluster.node_for_key(&key).await.unwrap();
    let target = *cluster
        .masters()
        .await
        .unwrap()
        .iter()
        .find(|m| **m != source)
        .unwrap();
    // A watchdog lease of the same holder in the same slot.
    let renewed_name = names_in_slot(&holder, slot, &format!("{name}-renewed"), 1).remove(0);
    assert_eq!(
        cluster
            .slot_for_key(&holder.redis_key(&renewed_name))
            .await
            .unwrap(),
        slot
    );

    let lease = Duration::from_secs(60);
    let granted_at = Instant::now();
    let held = holder.acquire(&name, Lease::Fixed(lease)).await.unwrap();
    let renewed = holder
        .acquire(&renewed_name, Lease::Watchdog)
        .await
        .unwrap();
    let waiting = wait_subscribed(&cluster, &waiter, &name, lease, source).await;

    let started = Instant::now();
    cluster
        .migrate_slot(slot, target)
        .await
        .expect("migrate_slot");
    let migrated_at = Instant::now();
    eprintln!(
        "slot {slot} migrated from {source} to {target} in {:?}",
        started.elapsed()
    );
    assert_eq!(cluster.node_for_key(&key).await.unwrap(), target);
    let value = cluster.cmd_on(target, &["GET", &key]).await.unwrap();
    assert!(value.contains(held.owner()), "{key} on {target}: {value:?}");

    // Released right away, published on the new master: the waiter, whose subscription the
    // old master dropped with the slot, must still be woken long before the TTL would.
    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (handle, woke_at) = tokio::time::timeout(lease + SLACK, waiting)
        .await
        .expect("the waiter neither got the lock nor gave up")
        .unwrap();
    let woke_after = woke_at - released_at;
    let handle = handle.unwrap_or_else(|e| {
        panic!("the waiter did not get the lock released after the migration ({woke_after:?}): {e}")
    });
    eprintln!("slot migration: waiter granted {woke_after:?} after the release");
    assert!(
        woke_at < granted_at + lease && woke_after < GENEROUS,
        "the waiter was granted {woke_after:?} after the release: it missed the release message and waited for the TTL"
    );
    assert_eq!(
        shard_subscribers(&cluster, source, &channel).await,
        0,
        "still subscribed on the slot's old master"
    );

    // The holder's renewals reach the slot's new master: three renewals there, and the lease is
    // still held more than a watchdog timeout after the migration.
    let renewals_from = calls_on(&cluster, target).await;
    let renewing = eventually(GENEROUS, || async {
        delta(&renewals_from, &calls_on(&cluster, target).await, "evalsha") >= 3
            && migrated_at.elapsed() > holder_watchdog * 2
    })
    .await;
    assert!(
        renewing,
        "no renewals reached the slot's new master {target}"
    );
    assert!(
        renewed.is_held(),
        "the watchdog lease lapsed after the migration"
    );
    let renewed_key = holder.redis_key(&renewed_name);
    let value = cluster
        .cmd_on(target, &["GET", &renewed_key])
        .await
        .unwrap();
    assert!(value.contains(renewed.owner()), "{value:?}");
    let pttl: i64 = cluster
        .cmd_on(target, &["PTTL", &renewed_key])
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(pttl > 0, "PTTL {pttl}");
    assert!(renewed.is_held());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(renewed.release().await.unwrap(), ReleaseOutcome::Released);
}

// ---------------------------------------------------------------------------------------------
// 5. Watchdog renewal is batched per slot
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renewal_is_one_call_per_slot_per_tick() {
    /// Ticks to count: enough that renewing per key (four or six times the calls) stands out.
    const TICKS: u64 = 8;
    let cluster = cluster().await;
    let lock = client(&cluster.url()).await;
    let masters = cluster.masters().await.unwrap();
    let map = slot_map(&cluster).await;
    let stem = format!("batched-{:x}", unique_suffix());
    // `n` distinct slots served by `master`.
    let slots_on = |master: u16, n: usize| {
        let mut slots = Vec::new();
        for i in 0u64.. {
            let slot = local_slot(&lock.redis_key(&format!("{stem}-{i}")));
            if owner_of(&map, slot) == master && !slots.contains(&slot) {
                slots.push(slot);
                if slots.len() == n {
                    return slots;
                }
            }
        }
        unreachable!()
    };
    // Master 0: one slot with a single key, the reference (one call per tick either way).
    // Master 1: one slot with six keys. Master 2: two slots with three keys each.
    let two = slots_on(masters[2], 2);
    let layout: Vec<(u16, u16, usize)> = vec![
        (masters[0], slots_on(masters[0], 1)[0], 1),
        (masters[1], slots_on(masters[1], 1)[0], 6),
        (masters[2], two[0], 3),
        (masters[2], two[1], 3),
    ];
    let slots: BTreeSet<u16> = layout.iter().map(|(_, s, _)| *s).collect();
    assert_eq!(slots.len(), 4, "{layout:?}");
    let mut handles = Vec::new();
    for &(master, slot, count) in &layout {
        for name in names_in_slot(&lock, slot, &format!("{stem}-{slot}"), count) {
            let key = lock.redis_key(&name);
            assert_eq!(cluster.slot_for_key(&key).await.unwrap(), slot, "{key}");
            assert_eq!(cluster.node_for_key(&key).await.unwrap(), master, "{key}");
            handles.push(lock.acquire(&name, Lease::Watchdog).await.unwrap());
        }
    }
    assert_eq!(lock.watchdog_lease_count(), 13);

    let before = calls_on_all(&cluster, &masters).await;
    let window = Instant::now();
    let counted = eventually(GENEROUS, || async {
        delta(
            &before[&masters[0]],
            &calls_on(&cluster, masters[0]).await,
            "evalsha",
        ) >= TICKS
    })
    .await;
    let after = calls_on_all(&cluster, &masters).await;
    assert!(counted, "the watchdog did not renew {TICKS} times");
    let calls: Vec<u64> = masters
        .iter()
        .map(|m| delta(&before[m], &after[m], "evalsha"))
        .collect();
    let ticks = calls[0];
    eprintln!(
        "watchdog over {:?}: renew calls per master {calls:?} (1, 1 and 2 slots holding 1, 6 and 3+3 keys)",
        window.elapsed()
    );
    // One call per slot per tick. The three masters are read one after another, so a tick may
    // fall between two reads: one tick of slack each way.
    let per_slot = |slots: u64| (slots * ticks.saturating_sub(1))..=(slots * (ticks + 1));
    assert!(
        per_slot(1).contains(&calls[1]),
        "{} calls for one slot of six keys in {ticks} ticks: renewal is not batched per slot",
        calls[1]
    );
    assert!(
        per_slot(2).contains(&calls[2]),
        "{} calls for two slots of three keys each in {ticks} ticks: expected one call per slot per tick",
        calls[2]
    );
    drop(handles);
}

/// Fair waiters on two clients are granted in the order they queued, for names on every master:
/// the lock key, its queue and timeout keys and its channel share one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_granted_in_queue_order_on_every_master() {
    let cluster = cluster().await;
    let url = cluster.url();
    let holder = client(&url).await;
    let clients = [client(&url).await, client(&url).await];
    let fair = common::fixed_waiting(Duration::from_secs(60), GENEROUS).fair();
    let masters = cluster.masters().await.unwrap();
    let mut masters_seen = BTreeSet::new();
    while masters_seen.len() < masters.len() {
        // A name on a master not tried yet.
        let name = format!("fair-{:x}", unique_suffix());
        let queue = holder.queue_key(&name);
        let port = cluster.node_for_key(&queue).await.unwrap();
        if !masters_seen.insert(port) {
            continue;
        }
        let held = common::hold(&holder, &name, Duration::from_secs(60)).await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..4usize {
            let (lock, key, order) = (clients[i % 2].clone(), name.clone(), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let handle = lock.acquire_with(&key, fair).await.unwrap();
                order.lock().unwrap().push(i);
                assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
            }));
            let expected = (i + 1).to_string();
            let queued = eventually(GENEROUS, || async {
                cluster
                    .cmd_on(port, &["ZCARD", &queue])
                    .await
                    .is_ok_and(|n| n == expected)
            })
            .await;
            assert!(queued, "{name}: waiter {i} never queued on {port}");
        }
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3], "{name}");
        let gone = cluster
            .cmd_on(port, &["EXISTS", &queue, &holder.timeout_key(&name)])
            .await
            .unwrap();
        assert_eq!(gone, "0", "{name}: queue state left behind");
    }
}

/// The operators' calls on a Cluster: `list` scans every primary (names spread over all slots
/// are all found), `status` and `force_release` reach the key's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_list_every_primary_and_force_release_on_a_cluster() {
    let cluster = cluster().await;
    let holder = client(&cluster.url()).await;
    let ops = client(&cluster.url()).await;
    let lease = Lease::Fixed(Duration::from_secs(30));
    let mut handles = Vec::new();
    for i in 0..30 {
        handles.push(
            holder
                .acquire(&format!("ops-spread-{i}"), lease)
                .await
                .unwrap(),
        );
    }
    let listed = ops.list(Some("ops-spread-*"), 1_000).await.unwrap();
    let names: BTreeSet<String> = listed.iter().map(|s| s.name.clone()).collect();
    assert_eq!(names.len(), 30, "{names:?}");
    assert!(ops.status("ops-spread-7").await.unwrap().is_held());
    assert!(matches!(
        ops.force_release("ops-spread-7").await.unwrap(),
        lock_redis::lock::ForceReleased::Released { .. }
    ));
    assert!(!ops.status("ops-spread-7").await.unwrap().is_held());
    for handle in handles {
        let _ = handle.release().await;
    }
}
