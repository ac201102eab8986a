//! The lock capability: [`RedisLock`], the Redis implementation of
//! [`lock_core::lock::DistributedLock`], on the shared Redis core (`crate::core`).
//!
//! The lock's own parts: its settings (`config`), the state a client shares with its handles
//! and background tasks (`inner`), acquisition (`acquire`, fair queues in `acquire::fair`),
//! release, the watchdog, shutdown, the operators' operations (`ops`) and the Lua scripts.

mod acquire;
pub(crate) mod background;
pub(crate) mod config;

pub use config::RedisLockConfig;
pub use ops::{ForceReleased, LockState, LockStatus};
pub use registry::WatchdogStats;
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
use lock_core::LockError;
use lock_core::lock::{AcquireOptions, DistributedLock, LockHandle, ShutdownSummary};

use crate::core::client::RedisClient;
use crate::core::error::RedisFailure;
use crate::lock::acquire::Acquisition;
use crate::lock::inner::Inner;
use crate::lock::registry::renewal_period;
use crate::lock::scripts::Scripts;

/// A [`DistributedLock`] on Redis. Cheap to clone; clones share one connection, one pub/sub
/// connection and one watchdog.
///
/// The watchdog runs on the client's Tokio runtime and stops once the lock and every handle
/// from it are dropped.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use lock_core::LockError;
/// use lock_core::lock::{DistributedLock, DistributedLockExt, Lease};
/// use lock_redis::lock::{RedisLock, RedisLockConfig};
/// use lock_redis::{RedisClient, RedisConfig};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), LockError> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
/// let lock: Arc<dyn DistributedLock> = Arc::new(RedisLock::new(&redis, RedisLockConfig::default()).await?);
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
            .field("namespace", &self.inner.core.namespace)
            .field("watchdog_leases", &self.inner.watchdog.len())
            .finish_non_exhaustive()
    }
}

impl RedisLock {
    /// The lock on `client`'s connections. Loads the lock's scripts (while Redis answers) and
    /// starts the watchdog.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming the bad setting, as [`RedisLockConfig::validate`]
    /// does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let address = format!("redis://127.0.0.1:{port}");
    /// let redis = RedisClient::connect(RedisConfig::new(address)).await?; // no Redis needed
    /// let config = RedisLockConfig::default().watchdog_timeout(Duration::from_millis(10));
    /// let error = RedisLock::new(&redis, config).await.unwrap_err();
    /// assert_eq!(error.details()["argument"], "watchdog_timeout");
    /// # Ok(()) }
    /// ```
    pub async fn new(
        client: &RedisClient,
        config: RedisLockConfig,
    ) -> Result<RedisLock, LockError> {
        config.validate()?;
        lock_core::lock::telemetry::register_series();
        let core = Arc::clone(&client.core);
        if core.command_timeout > renewal_period(config.watchdog_timeout) {
            tracing::warn!(
                command_timeout_ms = core.command_timeout.as_millis() as u64,
                watchdog_timeout_ms = config.watchdog_timeout.as_millis() as u64,
                "command-timeout is longer than a third of watchdog-timeout: one slow renewal can outlast a watchdog lease"
            );
        }
        let scripts = Scripts::new();
        crate::core::scripts::preload(&core, &scripts.preloaded(), "lock").await;
        if core.answering() {
            acquire::check_replica_count(&core.client, config.min_replicas).await;
        }
        let inner = Arc::new(Inner {
            core,
            scripts,
            watchdog: Default::default(),
            config,
            held: Default::default(),
            background: Default::default(),
        });
        inner.core.runtime.spawn(watchdog::run(
            Arc::downgrade(&inner),
            renewal_period(inner.config.watchdog_timeout),
        ));
        Ok(RedisLock { inner })
    }

    /// The client this lock is on, for building other capabilities on its connections.
    pub fn client(&self) -> RedisClient {
        RedisClient {
            core: Arc::clone(&self.inner.core),
        }
    }

    /// The settings this lock runs with.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// # use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let address = format!("redis://127.0.0.1:{port}");
    /// # let redis = RedisClient::connect(RedisConfig::new(address)).await?;
    /// let config = RedisLockConfig::default().watchdog_timeout(Duration::from_secs(10));
    /// let lock = RedisLock::new(&redis, config).await?; // no Redis needed for this
    /// let settings = format!("{:?}", lock.config()); // for a start-up log line
    /// assert!(settings.contains("watchdog_timeout: 10s"));
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
    /// # use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// # use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let redis = RedisClient::connect(RedisConfig::new(format!("redis://127.0.0.1:{port}"))).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?; // no Redis needed for this
    /// assert_eq!(lock.redis_key("bill-run:2026-11"), "lock:{bill-run:2026-11}");
    /// // Braces are percent-encoded inside the hash tag:
    /// assert_eq!(lock.redis_key("tenant-{7}"), "lock:{tenant-%7B7%7D}");
    /// # Ok(()) }
    /// ```
    pub fn redis_key(&self, name: &str) -> String {
        self.inner.core.keys.lock_key(name)
    }

    /// The Redis key of lock `name`'s queue of fair waiters: a sorted set of their owner tokens
    /// by arrival (see [`AcquireOptions::fair`]). Exists only while fair waiters are queued.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// # use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let redis = RedisClient::connect(RedisConfig::new(format!("redis://127.0.0.1:{port}"))).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?; // no Redis needed for this
    /// assert_eq!(lock.queue_key("cdc:ticket-4711"), "lock:{cdc:ticket-4711}:queue");
    /// # Ok(()) }
    /// ```
    pub fn queue_key(&self, name: &str) -> String {
        self.inner.core.keys.queue_key(name)
    }

    /// The Redis key of lock `name`'s fair waiter timeouts: a sorted set of the queued owner
    /// tokens by the server time (ms since the epoch) at which each loses its place unless it
    /// calls again. Exists only while fair waiters are queued.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// # use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let redis = RedisClient::connect(RedisConfig::new(format!("redis://127.0.0.1:{port}"))).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?; // no Redis needed for this
    /// assert_eq!(lock.timeout_key("cdc:ticket-4711"), "lock:{cdc:ticket-4711}:timeout");
    /// # Ok(()) }
    /// ```
    pub fn timeout_key(&self, name: &str) -> String {
        self.inner.core.keys.timeout_key(name)
    }

    /// The channel on which releases of lock `name` are published.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// # use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let redis = RedisClient::connect(RedisConfig::new(format!("redis://127.0.0.1:{port}"))).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?; // no Redis needed for this
    /// // `SSUBSCRIBE lock:{bill-run:2026-11}:released` in redis-cli shows every release.
    /// assert_eq!(lock.release_channel("bill-run:2026-11"), "lock:{bill-run:2026-11}:released");
    /// # Ok(()) }
    /// ```
    pub fn release_channel(&self, name: &str) -> String {
        self.inner.core.keys.release_channel(name)
    }

    /// Number of watchdog leases this client renews now.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lock_core::lock::{DistributedLock, Lease};
    /// use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
    /// let handle = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// assert_eq!(lock.watchdog_lease_count(), 1); // fixed leases are not renewed
    /// drop(handle);
    /// assert_eq!(lock.watchdog_lease_count(), 0); // renewal stops at once
    /// # Ok(()) }
    /// ```
    pub fn watchdog_lease_count(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// What this client's watchdog has done since [`new`](Self::new): ticks that renewed
    /// something, renewal script calls, and tick durations.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lock_core::lock::{DistributedLock, Lease};
    /// use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
    /// let config = RedisLockConfig::default().watchdog_timeout(Duration::from_secs(3));
    /// let lock = RedisLock::new(&redis, config).await?;
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
    /// use lock_core::lock::{DistributedLock, Lease};
    /// use lock_redis::lock::{RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
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
            .waiters(&self.inner.core.keys.release_channel(name))
    }
}

#[async_trait]
impl DistributedLock for RedisLock {
    fn namespace(&self) -> &str {
        &self.inner.core.namespace
    }

    async fn acquire_lease(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        let config = &self.inner.config;
        let wait = options.wait_override().unwrap_or(config.wait_time);
        let command_timeout = self.inner.core.command_timeout;
        let mut budget = wait + command_timeout;
        if config.min_replicas > 0 {
            budget += config.replica_sync_timeout + command_timeout;
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
                            address: self.inner.core.redacted_address.clone(),
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
