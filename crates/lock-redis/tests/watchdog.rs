//! The watchdog's renewal rounds against real redis-server processes: a value without a TTL is
//! not renewed, a slow round is logged once, and a shard that stops answering does not hold up
//! the renewals of leases on the other shards.
//!
//! Redis is slowed with `CLIENT PAUSE … WRITE` (scripts without the `no-writes` flag wait,
//! reads do not): it stalls exactly the renewals, for exactly as long as asked.

mod common;

use std::time::Duration;

use common::{SLACK, eventually, server};
use lock_core::lock::{DistributedLock, Lease, LostReason};
use lock_testkit::logs::CapturedLogs;
use lock_testkit::{RedisCluster, RedisServer};

/// The slow-round warning's message, as the watchdog logs it.
const SLOW_ROUND: &str = "a watchdog renewal round took more than a third of the renewal period";

/// Watchdog timeout of the tests that pause Redis: a 1 s renewal period, so a round slower
/// than 333 ms is slow, and a lease survives a pause of up to about 2 s.
const WATCHDOG: Duration = Duration::from_secs(3);

/// Everything this test binary logs at `WARN` and above.
fn logs() -> &'static CapturedLogs {
    CapturedLogs::global(tracing::Level::WARN)
}

/// The slow-round warnings of the clients of `redis` (tests run at once and share the logs).
fn slow_round_warnings(redis: &RedisServer) -> Vec<String> {
    let address = format!("127.0.0.1:{}/", redis.port());
    logs()
        .text()
        .lines()
        .filter(|line| line.contains(SLOW_ROUND) && line.contains(&address))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_value_without_a_ttl_is_not_renewed_and_its_holder_is_told() {
    let (redis, [lock]) = common::server_with().await;
    let handle = lock.acquire("no-ttl", Lease::Watchdog).await.unwrap();
    let key = lock.redis_key("no-ttl");
    // The value stays what the grant wrote; only its TTL goes. No grant of this library has
    // no TTL, so the value is someone else's now.
    assert_eq!(redis.cmd(&["PERSIST", &key]).await.unwrap(), "1");
    let lost = tokio::time::timeout(SLACK, handle.lost()).await;
    assert_eq!(
        lost.ok(),
        Some(LostReason::NotOwner),
        "the watchdog renewed a lock value without a TTL"
    );
    assert_eq!(redis.cmd(&["PTTL", &key]).await.unwrap(), "-1");
    assert!(!handle.is_held());
    assert_eq!(lock.watchdog_lease_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_renewal_round_is_logged_once_with_its_leases_and_duration() {
    let redis = server().await;
    logs();
    let lock = common::connect(common::config(&redis).watchdog_timeout(WATCHDOG)).await;
    let _held = [
        lock.acquire("slow-1", Lease::Watchdog).await.unwrap(),
        lock.acquire("slow-2", Lease::Watchdog).await.unwrap(),
    ];
    // A round on a Redis that answers at once is not slow.
    let renewed = eventually(SLACK, || async { lock.watchdog_stats().ticks >= 1 }).await;
    assert!(renewed, "the watchdog did not renew within {SLACK:?}");
    assert_eq!(slow_round_warnings(&redis), Vec::<String>::new());

    // Longer than a renewal period: a round starts during the pause and waits at least
    // 1.5 s − 1 s for it to end (or the 1 s command timeout), more than 333 ms either way.
    let pause_and_wait_for_a_round_after = || async {
        redis
            .cmd(&["CLIENT", "PAUSE", "1500", "WRITE"])
            .await
            .unwrap();
        let after = lock.watchdog_stats().ticks + 2;
        let rounds = eventually(SLACK * 2, || async { lock.watchdog_stats().ticks >= after }).await;
        assert!(rounds, "the watchdog stopped renewing after the pause");
    };
    pause_and_wait_for_a_round_after().await;
    let warnings = slow_round_warnings(&redis);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    assert!(
        warning.contains("leases=2") && warning.contains("renewal_period_ms=1000"),
        "{warning}"
    );
    let elapsed_ms: u64 = warning
        .split("elapsed_ms=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no elapsed_ms in {warning}"));
    assert!(elapsed_ms > 333, "{warning}");

    // Slow again within the minute: not logged again.
    pause_and_wait_for_a_round_after().await;
    assert_eq!(
        slow_round_warnings(&redis).len(),
        1,
        "{:?}",
        slow_round_warnings(&redis)
    );
}

/// Redis gone mid-hold: the renewals fail and are retried, and the failure is warned of once,
/// but no round is called slow, although each now waits out the command timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_while_redis_is_down_is_not_called_slow() {
    let mut redis = server().await;
    logs();
    let lock = common::connect(common::config(&redis).watchdog_timeout(WATCHDOG)).await;
    let _held = lock.acquire("down-1", Lease::Watchdog).await.unwrap();
    redis.kill().await.unwrap();
    let after = lock.watchdog_stats().ticks + 2;
    let rounds = eventually(SLACK * 3, || async { lock.watchdog_stats().ticks >= after }).await;
    assert!(
        rounds,
        "the watchdog stopped its rounds while Redis was down"
    );
    assert_eq!(slow_round_warnings(&redis), Vec::<String>::new());
    let address = format!("127.0.0.1:{}", redis.port());
    let text = logs().text();
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("watchdog renewal failed") && l.contains(&address))
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "once per outage, not per retry: {failed:#?}"
    );
}

/// A round renews every shard's leases at once; when one shard stops answering, the leases of
/// the others must still be renewed on time, not wait for the stalled call. The command timeout
/// here is longer than the lease TTL, so a watchdog that waits for the whole round before the
/// next loses the healthy shard's leases too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_shard_does_not_hold_up_the_renewals_on_the_other_shards() {
    let cluster = RedisCluster::start()
        .await
        .expect("the Redis Cluster did not start");
    let config = common::default_config(cluster.url())
        .watchdog_timeout(WATCHDOG)
        .command_timeout(Duration::from_secs(5))
        .instance_id("shard-pod");
    let lock = common::connect(config).await;
    let masters = cluster.masters().await.unwrap();
    // One lock name on each of two masters.
    let mut names = Vec::new();
    for master in &masters[..2] {
        for i in 0.. {
            let name = format!("shard-{i}");
            if cluster.node_for_key(&lock.redis_key(&name)).await.unwrap() == *master {
                names.push(name);
                break;
            }
        }
    }
    let paused = lock.acquire(&names[0], Lease::Watchdog).await.unwrap();
    let healthy = lock.acquire(&names[1], Lease::Watchdog).await.unwrap();
    let rounds = eventually(SLACK, || async { lock.watchdog_stats().ticks >= 1 }).await;
    assert!(rounds, "the watchdog did not renew within {SLACK:?}");

    // Longer than the TTL: the paused shard's lease is lost, and its renewal call hangs for
    // 4 s — past the healthy lease's TTL.
    cluster
        .cmd_on(masters[0], &["CLIENT", "PAUSE", "4000", "WRITE"])
        .await
        .unwrap();
    let lost = tokio::time::timeout(SLACK * 2, paused.lost()).await;
    assert!(lost.is_ok(), "the lease on the paused shard was not lost");
    // Until the paused shard answers again, and a round after.
    let answering = eventually(SLACK * 2, || async {
        cluster
            .cmd_on(masters[0], &["EVAL", "return 1", "0"])
            .await
            .is_ok()
    })
    .await;
    assert!(answering, "the paused master did not come back");
    let after = lock.watchdog_stats().ticks + 1;
    let renewed = eventually(SLACK, || async { lock.watchdog_stats().ticks >= after }).await;
    assert!(renewed, "the watchdog stopped renewing");
    assert!(
        healthy.is_held(),
        "the lease on the healthy shard was lost while another shard was paused"
    );
    let ttl: i64 = cluster
        .cmd_on(masters[1], &["PTTL", &lock.redis_key(&names[1])])
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(ttl > 0, "the healthy lease's key has PTTL {ttl}");
}
