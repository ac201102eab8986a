//! The lock capability: [`RedisLock`], the Redis implementation of
//! [`lock_core::DistributedLock`], on the shared Redis core (`crate::core`).
//!
//! The lock's own parts: its settings (`config`), the state a client shares with its handles
//! and background tasks (`inner`), acquisition (`acquire`, fair queues in `acquire::fair`),
//! release, the watchdog, shutdown, the operators' operations (`ops`) and the Lua scripts.

mod acquire;
pub(crate) mod background;
pub(crate) mod config;
pub(crate) mod inner;
pub(crate) mod ops;
pub(crate) mod registry;
mod release;
pub(crate) mod scripts;
mod shutdown;
pub(crate) mod watchdog;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use lock_core::{
    AcquireOptions, DistributedLock, LockError, LockHandle, OwnerTokens, ShutdownSummary,
};
use tokio::time::Instant;

use crate::core::client::RedisCore;
use crate::core::connection;
use crate::core::error::RedisFailure;
use crate::core::keys::KeyLayout;
use crate::lock::acquire::Acquisition;
use crate::lock::config::RedisLockConfig;
use crate::lock::inner::Inner;
use crate::lock::registry::WatchdogStats;
use crate::lock::registry::renewal_period;
use crate::lock::scripts::Scripts;

/// A [`DistributedLock`] on Redis. Cheap to clone; clones share one connection, one pub/sub
/// connection and one watchdog.
///
/// Background tasks (watchdog, pub/sub) run on the Tokio runtime that called
/// [`RedisLock::connect`]; they stop and the connections close once the lock and every handle
/// from it are dropped.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use lock_core::{DistributedLock, DistributedLockExt, Lease, LockError};
/// use lock_redis::{RedisLock, RedisLockConfig};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), LockError> {
/// let config = RedisLockConfig::new("redis://redis.internal:6379").instance_id("billing-7f9c");
/// let lock: Arc<dyn DistributedLock> = Arc::new(RedisLock::connect(config).await?);
///
/// match lock.with_lock("bill-run:2026-11", Lease::Watchdog, || async { 1_204 }).await {
///     Ok(invoices) => println!("{invoices} invoices"),
///     // Held by another pod for the whole wait time, or Redis unavailable: fail closed.
///     Err(error @ LockError::AcquisitionFailed { .. }) => eprintln!("skipped: {error}"),
///     Err(error) => return Err(error),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLock {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLock")
            .field("address", &self.inner.config.redacted_address())
            .field("instance_id", &self.inner.owners.instance_id())
            .field("watchdog_leases", &self.inner.watchdog.len())
            .finish_non_exhaustive()
    }
}

impl RedisLock {
    /// What this client shares with the other capabilities built on it: its connections, key
    /// layout and owner tokens. They open no connection of their own.
    pub(crate) fn shared(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Connects to Redis and starts the watchdog.
    ///
    /// Makes the first connection attempt at once and waits for its outcome, at most the
    /// command timeout or 1 s, whichever is longer (the attempt's TCP connect and its set-up
    /// commands are each bounded by the command timeout; the floor keeps a short command
    /// timeout from giving up on an attempt that is still under way). A Redis that is down
    /// (connection refused: at once) or does not answer (after that wait) does not fail this
    /// call: the client keeps reconnecting in the background
    /// (100 ms doubling to 2 s), a warning is logged, and acquisitions fail closed until Redis
    /// answers (at once, with the connection error, once a connection attempt has failed).
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] (`LOCK_INVALID_ARGUMENT`) naming the bad setting by its
    /// [`RedisLockConfig`] method, as [`RedisLockConfig::validate`] does (`address`,
    /// `command_timeout`, `key_prefix`, …), or `tls_ca_file` for a CA file that cannot be used.
    /// Also `address`, with the (redacted) address, when Redis answers the
    /// first connection attempt by refusing it for good: the credentials are wrong or missing
    /// (`WRONGPASS`, `NOAUTH`), or the user lacks a command the connection set-up sends
    /// (`NOPERM`, e.g. `SELECT` for the address's database). Retrying cannot cure these, so
    /// they are configuration errors, not an outage.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let address = format!("redis://127.0.0.1:{port}");
    /// let config = RedisLockConfig::new(address).command_timeout(Duration::from_millis(250));
    ///
    /// // Bad settings fail at once, before anything connects:
    /// let error = RedisLock::connect(config.clone().key_prefix("{lock}:")).await.unwrap_err();
    /// assert_eq!(error.details()["argument"], "key_prefix");
    ///
    /// // Redis not answering (yet) does not: acquisitions fail closed until it does.
    /// let lock = RedisLock::connect(config).await?;
    /// # drop(lock);
    /// # Ok(()) }
    /// ```
    pub async fn connect(config: RedisLockConfig) -> Result<RedisLock, LockError> {
        config.validate()?;
        let owners = OwnerTokens::new(&config.instance_id)?;
        if config.command_timeout > renewal_period(config.watchdog_timeout) {
            tracing::warn!(
                command_timeout_ms = config.command_timeout.as_millis() as u64,
                watchdog_timeout_ms = config.watchdog_timeout.as_millis() as u64,
                "command-timeout is longer than a third of watchdog-timeout: one slow renewal can outlast a watchdog lease"
            );
        }
        let scripts = Scripts::new();
        let (core, answered) = RedisCore::connect(&config.endpoint()?).await?;
        if answered {
            if let Err(error) = scripts.load(&core.client).await {
                tracing::warn!(%error, "could not preload the lock scripts; they load on first use");
            }
            acquire::check_replica_count(&core.client, config.min_replicas).await;
        }
        let inner = Arc::new(Inner {
            namespace: connection::namespace(config.redis_address()?, &config.key_prefix),
            core,
            scripts,
            keys: KeyLayout::new(&config.key_prefix),
            owners,
            watchdog: Default::default(),
            config,
            held: Default::default(),
            background: Default::default(),
        });
        tokio::spawn(watchdog::run(
            Arc::downgrade(&inner),
            renewal_period(inner.config.watchdog_timeout),
        ));
        Ok(RedisLock { inner })
    }

    /// The settings this lock runs with.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let address = format!("redis://app:s3cret@127.0.0.1:{port}");
    /// let config = RedisLockConfig::new(address).instance_id("billing-7f9c");
    /// # let config = config.command_timeout(Duration::from_millis(100));
    /// let lock = RedisLock::connect(config).await?; // no Redis needed for this
    /// let settings = format!("{:?}", lock.config()); // for a start-up log line
    /// assert!(settings.contains(r#"instance_id: "billing-7f9c""#));
    /// assert!(settings.contains("redis://app:***@127.0.0.1:"));
    /// # Ok(()) }
    /// ```
    pub fn config(&self) -> &RedisLockConfig {
        &self.inner.config
    }

    /// The Redis key holding lock `name`, e.g. `lock:{bill-run:2026-11}` — for inspecting it
    /// with `redis-cli`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = RedisLockConfig::new(format!("redis://127.0.0.1:{port}"))
    /// #     .command_timeout(Duration::from_millis(100));
    /// let lock = RedisLock::connect(config).await?; // no Redis needed for this
    /// assert_eq!(lock.redis_key("bill-run:2026-11"), "lock:{bill-run:2026-11}");
    /// // Braces are percent-encoded inside the hash tag:
    /// assert_eq!(lock.redis_key("tenant-{7}"), "lock:{tenant-%7B7%7D}");
    /// # Ok(()) }
    /// ```
    pub fn redis_key(&self, name: &str) -> String {
        self.inner.keys.lock_key(name)
    }

    /// The Redis key of lock `name`'s queue of fair waiters: a sorted set of their owner tokens
    /// by arrival (see [`AcquireOptions::fair`]). Exists only while fair waiters are queued.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = RedisLockConfig::new(format!("redis://127.0.0.1:{port}"))
    /// #     .command_timeout(Duration::from_millis(100));
    /// let lock = RedisLock::connect(config).await?; // no Redis needed for this
    /// assert_eq!(lock.queue_key("cdc:ticket-4711"), "lock:{cdc:ticket-4711}:queue");
    /// # Ok(()) }
    /// ```
    pub fn queue_key(&self, name: &str) -> String {
        self.inner.keys.queue_key(name)
    }

    /// The Redis key of lock `name`'s fair waiter timeouts: a sorted set of the queued owner
    /// tokens by the server time (ms since the epoch) at which each loses its place unless it
    /// calls again. Exists only while fair waiters are queued.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = RedisLockConfig::new(format!("redis://127.0.0.1:{port}"))
    /// #     .command_timeout(Duration::from_millis(100));
    /// let lock = RedisLock::connect(config).await?; // no Redis needed for this
    /// assert_eq!(lock.timeout_key("cdc:ticket-4711"), "lock:{cdc:ticket-4711}:timeout");
    /// # Ok(()) }
    /// ```
    pub fn timeout_key(&self, name: &str) -> String {
        self.inner.keys.timeout_key(name)
    }

    /// The channel on which releases of lock `name` are published.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = RedisLockConfig::new(format!("redis://127.0.0.1:{port}"))
    /// #     .command_timeout(Duration::from_millis(100));
    /// let lock = RedisLock::connect(config).await?; // no Redis needed for this
    /// // `SSUBSCRIBE lock:{bill-run:2026-11}:released` in redis-cli shows every release.
    /// assert_eq!(lock.release_channel("bill-run:2026-11"), "lock:{bill-run:2026-11}:released");
    /// # Ok(()) }
    /// ```
    pub fn release_channel(&self, name: &str) -> String {
        self.inner.keys.release_channel(name)
    }

    /// Round-trips a `PING`, for health checks; returns the round-trip time.
    ///
    /// # Errors
    /// [`LockError::AcquisitionFailed`] with reason `backend_unavailable` (key `<health>`) when
    /// Redis does not answer within the command timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = RedisLockConfig::new(format!("redis://127.0.0.1:{port}"))
    /// #     .command_timeout(Duration::from_millis(100));
    /// let lock = RedisLock::connect(config).await?; // no Redis needed for this
    /// match lock.ping().await {
    ///     Ok(latency) => println!("Redis up, PING took {latency:?}"),
    ///     Err(error) => {
    ///         // Redis is down here: acquisitions fail closed until it answers.
    ///         assert_eq!(error.details()["reason"], "backend_unavailable");
    ///         assert_eq!(error.lock_key(), Some("<health>"));
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self) -> Result<Duration, LockError> {
        let started = Instant::now();
        let _: String = self.inner.core.client.ping(None).await.map_err(|e| {
            LockError::backend_unavailable("<health>", self.inner.core.failure("PING", e))
        })?;
        Ok(started.elapsed())
    }

    /// Number of watchdog leases this client renews now.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lock_core::{DistributedLock, Lease};
    /// use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = RedisLock::connect(RedisLockConfig::new("redis://redis.internal:6379")).await?;
    /// let handle = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// assert_eq!(lock.watchdog_lease_count(), 1); // fixed leases are not renewed
    /// drop(handle);
    /// assert_eq!(lock.watchdog_lease_count(), 0); // renewal stops at once
    /// # Ok(()) }
    /// ```
    pub fn watchdog_lease_count(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// What this client's watchdog has done since [`connect`](Self::connect): ticks that renewed
    /// something, renewal script calls, and tick durations.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lock_core::{DistributedLock, Lease};
    /// use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let config = RedisLockConfig::new("redis://redis.internal:6379")
    ///     .watchdog_timeout(Duration::from_secs(3));
    /// let lock = RedisLock::connect(config).await?;
    /// let _held = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// tokio::time::sleep(Duration::from_secs(3)).await; // renewed every second
    /// let stats = lock.watchdog_stats();
    /// assert!(stats.ticks >= 2 && stats.renewal_calls >= stats.ticks);
    /// # Ok(()) }
    /// ```
    pub fn watchdog_stats(&self) -> WatchdogStats {
        self.inner.watchdog.stats()
    }

    /// How many acquisitions of this client are waiting for lock `name` now. They are served in
    /// arrival order: only the first tries the lock when it may be free, and a new acquisition
    /// queues behind them instead of trying first.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lock_core::{DistributedLock, Lease};
    /// use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = RedisLock::connect(RedisLockConfig::new("redis://redis.internal:6379")).await?;
    /// let held = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// let waiter = tokio::spawn({
    ///     let lock = lock.clone();
    ///     async move { lock.acquire("bill-run:2026-11", Lease::Watchdog).await }
    /// });
    /// tokio::time::sleep(Duration::from_millis(100)).await;
    /// assert_eq!(lock.queued_waiters("bill-run:2026-11"), 1);
    /// drop(held); // the waiter gets the lock
    /// assert!(waiter.await.unwrap().is_ok());
    /// # Ok(()) }
    /// ```
    pub fn queued_waiters(&self, name: &str) -> usize {
        self.inner
            .core
            .subscriptions
            .waiters(&self.inner.keys.release_channel(name))
    }

    /// Release channels this client is subscribed to now (one per key with a local waiter).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lock_redis::{RedisLock, RedisLockConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = RedisLock::connect(RedisLockConfig::new("redis://redis.internal:6379")).await?;
    /// // From a debug endpoint: which keys this pod is waiting for.
    /// for channel in lock.subscribed_channels() {
    ///     println!("waiting on {channel}"); // e.g. lock:{bill-run:2026-11}:released
    /// }
    /// # Ok(()) }
    /// ```
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.inner.core.subscriptions.active_channels()
    }
}

#[async_trait]
impl DistributedLock for RedisLock {
    fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    async fn acquire_lease(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        let config = &self.inner.config;
        let wait = options.wait_override().unwrap_or(config.wait_time);
        let mut budget = wait + config.command_timeout;
        if config.min_replicas > 0 {
            budget += config.replica_sync_timeout + config.command_timeout;
        }
        let mut acquisition = Acquisition::new(&self.inner, key, options);
        let shut_down = || LockError::ShutDown {
            key: key.to_owned(),
        };
        tokio::select! {
            // A client shut down grants nothing more, and a waiting acquisition gives up.
            biased;
            () = self.inner.held.closed() => Err(shut_down()),
            result = tokio::time::timeout(budget, acquisition.run(wait)) => match result {
                Ok(result) => result,
                // Dropping `acquisition` releases any grant the interrupted attempt may have made.
                Err(_) => Err(LockError::backend_unavailable(
                    key,
                    self.inner
                        .core.unreachable("acquire")
                        .unwrap_or_else(|| RedisFailure::Timeout {
                            budget,
                            address: config.redacted_address(),
                        }),
                )),
            },
        }
    }

    /// Releases every lease this client holds and waits for its background releases — see the
    /// trait. Fails nothing: a release not confirmed in time is counted as pending (it goes on
    /// while the process lives), one that failed as failed; both leases end at their TTL. The
    /// connections stay open until the lock is dropped, so [`status`](RedisLock::status) and the
    /// other operations still work.
    async fn shutdown(&self, timeout: Duration) -> ShutdownSummary {
        self.inner.shutdown(timeout).await
    }
}
