//! Shared set-up for the lock-redis tests: a private redis-server and clients on it.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::time::Duration;

use lock_core::LockError;
use lock_redis::{RedisFailure, RedisLock, RedisLockConfig};
use lock_testkit::RedisServer;

/// Watchdog timeout of test clients: short, so renewal and expiry happen within seconds.
pub const WATCHDOG: Duration = Duration::from_secs(1);
/// Command timeout of test clients.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Slack for upper bounds on a loaded 2-core machine.
pub const SLACK: Duration = Duration::from_secs(5);

/// A private redis-server for one test.
pub async fn server() -> RedisServer {
    RedisServer::start()
        .await
        .expect("redis-server did not start")
}

/// A primary and a replica of it (`REPLICAOF`), the replica fully synced.
pub async fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = server().await;
    let replica = server().await;
    replica
        .cmd(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()])
        .await
        .unwrap();
    let synced = eventually(Duration::from_secs(60), || async {
        replica
            .cmd(&["INFO", "replication"])
            .await
            .is_ok_and(|info| info.contains("master_link_status:up"))
    })
    .await;
    assert!(synced, "the replica never synced");
    (primary, replica)
}

/// Client settings for `server`: short watchdog and command timeouts.
pub fn config(server: &RedisServer) -> RedisLockConfig {
    RedisLockConfig::new(server.url())
        .watchdog_timeout(WATCHDOG)
        .wait_time(Duration::from_secs(2))
        .command_timeout(COMMAND_TIMEOUT)
        .instance_id("test-pod")
}

/// A connected client of `server`.
pub async fn client(server: &RedisServer) -> RedisLock {
    RedisLock::connect(config(server)).await.expect("connect")
}

/// `INFO commandstats` as command name → calls.
pub async fn command_calls(server: &RedisServer) -> HashMap<String, u64> {
    let info = server.cmd(&["INFO", "commandstats"]).await.unwrap();
    lock_testkit::command_calls(&info)
}

/// How many more times `cmd` ran in `after` than in `before`.
pub fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, cmd: &str) -> u64 {
    after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
}

pub use lock_testkit::eventually;

/// Waits (up to [`SLACK`]) until `redis` has exactly one subscriber on shard channel `channel`:
/// a client's waiters share one subscription per key.
pub async fn one_subscriber(redis: &RedisServer, channel: &str) -> bool {
    let expected = format!("{channel}\n1");
    eventually(SLACK, || async {
        redis
            .cmd(&["PUBSUB", "SHARDNUMSUB", channel])
            .await
            .is_ok_and(|reply| reply == expected)
    })
    .await
}

/// The `RedisFailure` behind a lock error; panics naming the error when there is none.
pub fn redis_failure(error: &LockError) -> &RedisFailure {
    RedisFailure::find(error).unwrap_or_else(|| panic!("no RedisFailure behind {error:?}"))
}

/// The body of a fair-waiter child process (started with `lock_testkit::test_child`): when
/// `var` holds a Redis URL, queues fairly for `key` (fair waiter timeout `place`, command
/// timeout [`COMMAND_TIMEOUT`]) and waits to be killed; does nothing when `var` is unset.
pub async fn run_fair_child_waiter(var: &str, key: &str, place: Duration) {
    let Ok(url) = std::env::var(var) else {
        return;
    };
    let lock = RedisLock::connect(
        RedisLockConfig::new(url)
            .fair_waiter_timeout(place)
            .command_timeout(COMMAND_TIMEOUT)
            .instance_id("child"),
    )
    .await
    .expect("connect");
    let options = lock_core::AcquireOptions::new(lock_core::Lease::Watchdog)
        .wait_time(Duration::from_secs(120))
        .unwrap()
        .fair();
    let handle = lock_core::DistributedLock::acquire_with(&lock, key, options).await;
    panic!("the child waiter was meant to be killed while waiting: {handle:?}");
}

/// xorshift64*: a seeded random number generator for tests, no extra dependency.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A duration of `lo..=hi` milliseconds.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}
