//! Shared set-up for the lock-redis tests: a private redis-server and clients on it.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockError;
use lock_core::branches::MasterLocks;
use lock_core::idempotency::{Idempotency, IdempotencySettings};
use lock_redis::branches::RedisBranches;
use lock_redis::idempotency::RedisIdempotencyStore;
use lock_redis::lock::{RedisLock, RedisLockConfig};
use lock_redis::{RedisClient, RedisConfig, RedisFailure};
use lock_testkit::RedisServer;

/// Watchdog timeout of test clients: short, so renewal and expiry happen within seconds.
pub const WATCHDOG: Duration = Duration::from_secs(1);
/// Command timeout of test clients.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

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
    let synced = eventually(GENEROUS, || async {
        replica
            .cmd(&["INFO", "replication"])
            .await
            .is_ok_and(|info| info.contains("master_link_status:up"))
    })
    .await;
    assert!(synced, "the replica never synced");
    (primary, replica)
}

/// A client's and its lock's settings in one chain, as the tests set them.
#[derive(Clone, Debug)]
pub struct Setup {
    pub redis: RedisConfig,
    pub lock: RedisLockConfig,
}

impl Setup {
    pub fn new(address: impl Into<String>) -> Self {
        Setup {
            redis: RedisConfig::new(address),
            lock: RedisLockConfig::default(),
        }
    }

    pub fn address(self, address: impl Into<String>) -> Self {
        self.client(|c| c.address(address))
    }

    pub fn command_timeout(self, timeout: Duration) -> Self {
        self.client(|c| c.command_timeout(timeout))
    }

    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        self.client(|c| c.key_prefix(prefix))
    }

    pub fn instance_id(self, id: impl Into<String>) -> Self {
        self.client(|c| c.instance_id(id))
    }

    pub fn tls_ca_file(self, path: impl Into<std::path::PathBuf>) -> Self {
        self.client(|c| c.tls_ca_file(path))
    }

    pub fn wait_time(self, wait: Duration) -> Self {
        self.locks(|l| l.wait_time(wait))
    }

    pub fn watchdog_timeout(self, timeout: Duration) -> Self {
        self.locks(|l| l.watchdog_timeout(timeout))
    }

    pub fn min_replicas(self, replicas: u32) -> Self {
        self.locks(|l| l.min_replicas(replicas))
    }

    pub fn replica_sync_timeout(self, timeout: Duration) -> Self {
        self.locks(|l| l.replica_sync_timeout(timeout))
    }

    pub fn fair_waiter_timeout(self, timeout: Duration) -> Self {
        self.locks(|l| l.fair_waiter_timeout(timeout))
    }

    pub fn redacted_address(&self) -> String {
        self.redis.redacted_address()
    }

    pub fn validate(&self) -> Result<(), LockError> {
        self.redis.validate()?;
        self.lock.validate()
    }

    fn client(mut self, set: impl FnOnce(RedisConfig) -> RedisConfig) -> Self {
        self.redis = set(self.redis);
        self
    }

    fn locks(mut self, set: impl FnOnce(RedisLockConfig) -> RedisLockConfig) -> Self {
        self.lock = set(self.lock);
        self
    }
}

/// The library's default settings for the Redis at `address`.
pub fn default_config(address: impl Into<String>) -> Setup {
    Setup::new(address)
}

/// Test settings for the Redis at `address`: short watchdog and command timeouts, a 2 s wait.
pub fn config_at(address: impl Into<String>) -> Setup {
    default_config(address)
        .watchdog_timeout(WATCHDOG)
        .wait_time(Duration::from_secs(2))
        .command_timeout(COMMAND_TIMEOUT)
        .instance_id("test-pod")
}

/// Test settings for `server`.
pub fn config(server: &RedisServer) -> Setup {
    config_at(server.url())
}

/// A client connected with `config`, or why it could not connect.
pub async fn try_connect(config: Setup) -> Result<RedisLock, LockError> {
    let client = RedisClient::connect(config.redis).await?;
    RedisLock::new(&client, config.lock)
}

/// A client connected with `config`; panics when it cannot connect.
pub async fn connect(config: Setup) -> RedisLock {
    try_connect(config).await.expect("connect")
}

/// A connected client of `server` with the test settings.
pub async fn client(server: &RedisServer) -> RedisLock {
    connect(config(server)).await
}

/// The idempotency store on `lock`'s connections.
pub fn idempotency_store(lock: &RedisLock) -> RedisIdempotencyStore {
    RedisIdempotencyStore::new(&lock.client())
}

/// Idempotent execution with `settings` on `lock`'s connections.
pub fn idempotency(lock: &RedisLock, settings: IdempotencySettings) -> Idempotency {
    Idempotency::new(Arc::new(idempotency_store(lock)), settings).expect("valid settings")
}

/// The branch store on `lock`'s connections.
pub fn branches(lock: &RedisLock) -> RedisBranches {
    RedisBranches::new(&lock.client())
}

/// Master locks on `lock` and the branch store on its connections.
pub fn master_locks(lock: RedisLock) -> (MasterLocks, RedisBranches) {
    let branches = branches(&lock);
    (
        MasterLocks::new(Arc::new(lock), Arc::new(branches.clone())),
        branches,
    )
}

/// `INFO commandstats` as command name → calls.
pub async fn command_calls(server: &RedisServer) -> HashMap<String, u64> {
    server.command_calls().await.expect("INFO commandstats")
}

/// How many more times `cmd` ran in `after` than in `before`.
pub fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, cmd: &str) -> u64 {
    after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
}

pub use lock_testkit::{GENEROUS, SLACK, eventually};

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
    let lock = connect(
        default_config(url)
            .fair_waiter_timeout(place)
            .command_timeout(COMMAND_TIMEOUT)
            .instance_id("child"),
    )
    .await;
    let options = lock_core::lock::AcquireOptions::new(lock_core::lock::Lease::Watchdog)
        .wait_time(Duration::from_secs(120))
        .unwrap()
        .fair();
    let handle = lock_core::lock::DistributedLock::acquire_with(&lock, key, options).await;
    panic!("the child waiter was meant to be killed while waiting: {handle:?}");
}
