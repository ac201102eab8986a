//! Shared set-up for the lock-redis tests: a private redis-server and clients on it.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockError;
use lock_core::branches::{
    BranchError, BranchToken, Master, MasterLocks, MasterOptions, MasterOutcome,
};
use lock_core::idempotency::{Idempotency, IdempotencySettings};
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, LockHandle, ReleaseOutcome};
use lock_redis::branches::RedisBranches;
use lock_redis::idempotency::RedisIdempotencyStore;
use lock_redis::lock::{RedisLock, RedisLockConfig};
use lock_redis::{RedisClient, RedisConfig, RedisFailure};
use lock_testkit::{FaultProxy, RedisServer};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Watchdog timeout of test clients: short, so renewal and expiry happen within seconds.
pub const WATCHDOG: Duration = Duration::from_secs(1);
/// Command timeout of test clients.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// A watchdog lease, waiting up to `wait` for the lock.
pub fn watchdog_waiting(wait: Duration) -> AcquireOptions {
    AcquireOptions::new(Lease::Watchdog)
        .wait_time(wait)
        .unwrap()
}

/// A fixed `lease`, waiting up to `wait` for the lock.
pub fn fixed_waiting(lease: Duration, wait: Duration) -> AcquireOptions {
    AcquireOptions::new(Lease::Fixed(lease))
        .wait_time(wait)
        .unwrap()
}

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
    RedisLock::new(&client, config.lock).await
}

/// A client connected with `config`; panics when it cannot connect.
pub async fn connect(config: Setup) -> RedisLock {
    try_connect(config).await.expect("connect")
}

/// A private redis-server and `N` clients of it with the test settings.
pub async fn server_with<const N: usize>() -> (RedisServer, [RedisLock; N]) {
    let server = server().await;
    let clients = clients(&server).await;
    (server, clients)
}

/// `N` clients of `server` with the test settings, connected one after the other.
pub async fn clients<const N: usize>(server: &RedisServer) -> [RedisLock; N] {
    let mut clients = Vec::with_capacity(N);
    for _ in 0..N {
        clients.push(client(server).await);
    }
    clients.try_into().expect("N clients")
}

/// Acquires `name` on `lock` with a fixed lease of `ttl`; panics when it is not granted.
pub async fn hold(lock: &RedisLock, name: &str, ttl: Duration) -> LockHandle {
    let lease = lock_core::lock::Lease::Fixed(ttl);
    let granted = lock.acquire(name, lease).await;
    granted.unwrap_or_else(|error| panic!("`{name}` not granted: {error}"))
}

/// The address of `server` as a user who may not touch the lock's keys: Redis answers every
/// lock script with `NOPERM`. The password is `pw`.
pub async fn user_without_lock_keys(server: &RedisServer) -> String {
    let rules = ["on", ">pw", "~other:*", "&*", "+@all"];
    let args: Vec<&str> = ["ACL", "SETUSER", "locker"]
        .into_iter()
        .chain(rules)
        .collect();
    server.cmd(&args).await.unwrap();
    server.url().replace("redis://", "redis://locker:pw@")
}

/// Starts a master lock on `key` that registers the branch `branch` and then waits up to
/// `wait` for it; returns the task and the branch's token.
pub async fn master_with_branch(
    masters: MasterLocks,
    key: &str,
    branch: &str,
    wait: Duration,
) -> (
    JoinHandle<Result<MasterOutcome<()>, BranchError>>,
    BranchToken,
) {
    let (tokens, mut received) = tokio::sync::mpsc::unbounded_channel();
    let (key, branch) = (key.to_owned(), branch.to_owned());
    let options = MasterOptions::new(lock_core::lock::Lease::Watchdog)
        .branch_wait(wait)
        .unwrap();
    let task = tokio::spawn(async move {
        let block = |master: Master| async move {
            tokens
                .send(master.register_branch(&branch).await.unwrap())
                .unwrap();
        };
        masters.with_master_lock(&key, options, block).await
    });
    (
        task,
        received
            .recv()
            .await
            .expect("the master registered its branch"),
    )
}

/// A fault proxy in front of `server`.
pub async fn proxy(server: &RedisServer) -> FaultProxy {
    FaultProxy::start(("127.0.0.1", server.port()))
        .await
        .expect("the proxy starts")
}

/// A fault proxy in front of `server`, and a client connected through it with the library's
/// default settings as `settings` changes them.
pub async fn behind_proxy(
    server: &RedisServer,
    settings: impl FnOnce(Setup) -> Setup,
) -> (FaultProxy, RedisLock) {
    let proxy = proxy(server).await;
    let lock = connect(settings(default_config(proxy.url()))).await;
    (proxy, lock)
}

/// A connected client of `server` with the test settings.
pub async fn client(server: &RedisServer) -> RedisLock {
    connect(config(server)).await
}

/// The idempotency store on `lock`'s connections.
pub async fn idempotency_store(lock: &RedisLock) -> RedisIdempotencyStore {
    RedisIdempotencyStore::new(&lock.client()).await
}

/// Idempotent execution with `settings` on `lock`'s connections.
pub async fn idempotency(lock: &RedisLock, settings: IdempotencySettings) -> Idempotency {
    Idempotency::new(Arc::new(idempotency_store(lock).await), settings).expect("valid settings")
}

/// The branch store on `lock`'s connections.
pub async fn branches(lock: &RedisLock) -> RedisBranches {
    RedisBranches::new(&lock.client()).await
}

/// Master locks on `lock` and the branch store on its connections.
pub async fn master_locks(lock: RedisLock) -> (MasterLocks, RedisBranches) {
    let branches = branches(&lock).await;
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

/// The raw value of `key` on `server` (`""` when absent).
pub async fn value(server: &RedisServer, key: &str) -> String {
    server.cmd(&["GET", key]).await.unwrap_or_default()
}

/// The integer reply of `args` on `server`.
pub async fn integer(server: &RedisServer, args: &[&str]) -> i64 {
    let reply = server.cmd(args).await.unwrap();
    let parsed = reply.trim().parse();
    parsed.unwrap_or_else(|_| panic!("{args:?}: {reply}"))
}

/// How many fair waiters are queued for `name`, as `lock` names its queue on `server`.
pub async fn queued(server: &RedisServer, lock: &RedisLock, name: &str) -> usize {
    let reply = server.cmd(&["ZCARD", &lock.queue_key(name)]).await.unwrap();
    reply.trim().parse().expect("ZCARD answers a number")
}

/// Waits (up to [`SLACK`]) until `n` fair waiters are queued for `name`.
pub async fn queue_reaches(server: &RedisServer, lock: &RedisLock, name: &str, n: usize) -> bool {
    eventually(SLACK, || async { queued(server, lock, name).await == n }).await
}

/// The shard channels `server` has subscribers on, sorted.
pub async fn shard_channels(server: &RedisServer) -> Vec<String> {
    let reply = server.cmd(&["PUBSUB", "SHARDCHANNELS"]).await.unwrap();
    let mut channels: Vec<String> = reply.lines().map(str::to_owned).collect();
    channels.sort();
    channels
}

/// Starts a wait for `name` on `lock`; once granted, releases it and returns its fencing token
/// and when it was granted. The task panics when the wait fails or the release finds the lock
/// gone.
pub fn spawn_grant(
    lock: &RedisLock,
    name: &str,
    options: AcquireOptions,
) -> JoinHandle<(u64, Instant)> {
    let (lock, name) = (lock.clone(), name.to_owned());
    tokio::spawn(async move {
        let handle = lock
            .acquire_with(&name, options)
            .await
            .unwrap_or_else(|error| panic!("`{name}` not granted: {error}"));
        let at = Instant::now();
        let token = handle.fencing_token();
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        (token, at)
    })
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

/// Starts the ignored test `body` of `module` (the caller's `module_path!()`) as a child
/// process, with the URL of `redis` in the environment variable `var` and its stdout piped.
pub fn spawn_child(
    module: &str,
    body: &str,
    var: &str,
    redis: &RedisServer,
) -> std::process::Child {
    lock_testkit::test_child(module, body)
        .env(var, redis.url())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start a child")
}

/// Waits for `child` and returns the line it printed after `marker`.
pub async fn result_line(child: std::process::Child, marker: &str) -> String {
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once(marker).map(|(_, r)| r.to_owned()))
        .unwrap_or_else(|| panic!("a child printed no result: {stdout}"))
}
