//! # lock-redis: the Redis implementation of the lock port
//!
//! [`RedisLock`] implements [`lock_core::DistributedLock`] on the `fred` client. Services normally
//! get it through `lock-starter`; use this crate directly only to wire it by hand.
//!
//! How it works, in one screen:
//! - **Keys.** Lock `name` lives at `<prefix>{name}` and announces releases on
//!   `<prefix>{name}:released`; fair waiters queue in `<prefix>{name}:queue` and
//!   `<prefix>{name}:timeout`. All share one hash tag, so every script is single-slot on a
//!   Cluster. Braces in names are percent-encoded inside the tag.
//! - **Acquire** is one `EVALSHA` of `acquire.lua` when uncontended: it grants (setting the TTL
//!   and a fencing token) or reports the holder and its TTL. A waiting caller subscribes to the
//!   release channel (sharded pub/sub), tries once more when the subscription is confirmed, then
//!   sleeps until a release message or the holder's TTL, whichever is first — no fixed-interval
//!   polling. Subscriptions are shared per channel per client, re-established after reconnects,
//!   and taken down with the last waiter.
//! - **Fair acquire** ([`AcquireOptions::fair`]) is `fair_acquire.lua`: the lock goes to the
//!   first of the key's queue of fair waiters in Redis, the others keep their place by calling
//!   again every third of the fair waiter timeout (a dead waiter loses it within that timeout
//!   plus one command timeout),
//!   and the release message names the first waiter, so exactly it tries.
//! - **Release** is one `EVALSHA` of `release.lua`: owner-checked, it leaves a short tombstone
//!   (the last fencing token) and publishes the release.
//! - **Watchdog.** Watchdog leases are renewed every third of the watchdog timeout, all of a
//!   client's leases in one `renew.lua` call per 500 keys. A renewal never re-creates a key; a
//!   lease found gone is reported through [`LockHandle::lost`](lock_core::LockHandle::lost).
//! - **Local deadline.** Each grant and renewal sets a local deadline of send time + TTL − a
//!   safety margin (1 % of the TTL + 5 ms); `is_held()` turns false and `lost()` fires when it
//!   passes, before Redis can hand the key to anyone else.
//! - **Fail closed.** Every command has a timeout (fred's default is none); an acquisition
//!   returns no later than its wait time plus one command timeout. A failed or timed-out
//!   attempt may still have been granted, so the grant is released (owner-checked) before the
//!   error is returned.
//! - **Fail fast while disconnected.** Once a connection attempt has failed, and until one
//!   succeeds, an acquisition's first attempt fails at once with that connection error instead
//!   of waiting a command timeout for an answer that cannot come; a client still making its
//!   first connection sends as usual. Queued waiters keep trying within their wait. When Redis
//!   answers again, one `INFO` line says "Redis reachable again after N s".
//!
//! # Examples
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{DistributedLockExt, Lease};
//! use lock_redis::{RedisLock, RedisLockConfig};
//!
//! # async fn run() -> Result<(), lock_core::LockError> {
//! let lock = RedisLock::connect(
//!     RedisLockConfig::new("redis://127.0.0.1:6379").watchdog_timeout(Duration::from_secs(10)),
//! )
//! .await?;
//! lock.with_lock("msisdn-reaper", Lease::Fixed(Duration::from_secs(30)), || async {
//!     // sweep expired reservations
//! })
//! .await?;
//! # Ok(()) }
//! ```
//!
//! The same flow with Redis down: connecting succeeds, the acquisition fails closed and the
//! section does not run.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{DistributedLockExt, Lease};
//! use lock_redis::{RedisFailure, RedisLock, RedisLockConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! # let down = format!("redis://127.0.0.1:{port}");
//! let config = RedisLockConfig::new(down).command_timeout(Duration::from_millis(200));
//! let lock = RedisLock::connect(config).await?; // logs a warning, keeps reconnecting
//!
//! let result = lock
//!     .with_lock("msisdn-reaper", Lease::Fixed(Duration::from_secs(30)), || async {
//!         unreachable!("the section never runs without the lock")
//!     })
//!     .await;
//! let error = result.unwrap_err();
//! assert_eq!(error.code().as_str(), "LOCK_ACQUISITION_FAILED");
//! assert_eq!(error.details()["reason"], "backend_unavailable");
//! assert!(RedisFailure::find(&error).is_some()); // what went wrong talking to Redis
//! # Ok(()) }
//! ```
//!
//! Requires Redis 7.0 or later (sharded pub/sub, effect replication of scripts).

mod acquire;
mod address;
mod backoff;
mod config;
mod connection;
mod error;
mod inner;
mod keys;
mod ops;
mod redact;
mod release;
mod scripts;
mod sentinel_events;
mod shutdown;
mod subscriptions;
mod watchdog;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use lock_core::{
    AcquireOptions, DistributedLock, LockError, LockHandle, OwnerTokens, ShutdownSummary,
};
use tokio::time::Instant;

pub use address::{
    ACCEPTED_ADDRESSES, DEFAULT_REDIS_PORT, DEFAULT_SENTINEL_PORT, InvalidAddress, RedisAddress,
    Topology,
};
pub use config::{
    DEFAULT_ADDRESS, DEFAULT_COMMAND_TIMEOUT, DEFAULT_FAIR_WAITER_TIMEOUT, DEFAULT_KEY_PREFIX,
    DEFAULT_MIN_REPLICAS, DEFAULT_REPLICA_SYNC_TIMEOUT, DEFAULT_WAIT_TIME,
    DEFAULT_WATCHDOG_TIMEOUT, MAX_COMMAND_TIMEOUT, MAX_FAIR_WAITER_TIMEOUT, MAX_KEY_PREFIX_BYTES,
    MAX_MIN_REPLICAS, MAX_REPLICA_SYNC_TIMEOUT, MIN_COMMAND_TIMEOUT, MIN_FAIR_WAITER_TIMEOUT,
    MIN_REPLICA_SYNC_TIMEOUT, RedisLockConfig, TOMBSTONE_TTL, duration_range, key_prefix_problem,
    validate_key_prefix,
};
pub use connection::RECONNECT_MAX_DELAY;
pub use error::{RedisFailure, Refusal};
pub use ops::{ForceReleased, LockState, LockStatus};
pub use redact::redact;
pub use scripts::{
    ACQUIRE_SCRIPT, FAIR_ACQUIRE_SCRIPT, FAIR_LEAVE_SCRIPT, FORCE_RELEASE_SCRIPT, RELEASE_SCRIPT,
    RENEW_SCRIPT, STATUS_SCRIPT,
};
pub use watchdog::{RENEW_BATCH, WatchdogStats, renewal_period};

use crate::acquire::Acquisition;
use crate::inner::Inner;
use crate::keys::KeyLayout;
use crate::scripts::Scripts;
use crate::subscriptions::Subscriptions;

/// The least [`RedisLock::connect`] waits for the first connection attempt's outcome: 1 s (it
/// waits the command timeout when that is longer).
const FIRST_CONNECTION_WAIT: Duration = Duration::from_secs(1);

/// The local safety margin subtracted from every confirmed expiry: 1 % of the TTL plus 5 ms. It
/// absorbs clock-rate differences between this host and Redis and timer lateness, so the local
/// deadline passes before Redis expires the key.
pub(crate) fn safety_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(5)
}

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
        let address = config.redis_address()?.clone();
        let owners = OwnerTokens::new(&config.instance_id)?;
        let (client, subscriber) = connection::build_clients(&config)?;
        let switches = sentinel_events::SwitchWatch::build(&config)?;
        let scripts = Scripts::new();
        let health = Arc::new(connection::Health::default());
        health.follow(&client, &address, config.command_timeout);
        // The connection tasks end with `quit`, sent when the lock is dropped; the retries of
        // a first connection that failed end when `stop_connecting` is dropped with it.
        let (stop_connecting, stop) = tokio::sync::watch::channel(());
        connection::keep_connecting(&client, stop.clone());
        connection::keep_connecting(&subscriber, stop);
        if config.command_timeout > renewal_period(config.watchdog_timeout) {
            tracing::warn!(
                command_timeout_ms = config.command_timeout.as_millis() as u64,
                watchdog_timeout_ms = config.watchdog_timeout.as_millis() as u64,
                "command-timeout is longer than a third of watchdog-timeout: one slow renewal can outlast a watchdog lease"
            );
        }
        // The first attempt's outcome (it starts at once): a refused connection (Redis down)
        // or refused credentials end it within a round trip.
        let first = tokio::time::timeout(
            config.command_timeout.max(FIRST_CONNECTION_WAIT),
            health.first_outcome(),
        )
        .await;
        match first {
            Ok(Ok(())) => {
                health.started(&address);
                if let Err(error) = scripts.load(&client).await {
                    tracing::warn!(%error, "could not preload the lock scripts; they load on first use");
                }
                connection::check_eviction_policy(&client).await;
                acquire::check_replica_count(&client, config.min_replicas).await;
            }
            Ok(Err(error)) => {
                if let Some(refused) = connection::refused_at_connect(&config, &error) {
                    drop(stop_connecting);
                    tokio::spawn(async move {
                        let _ = client.quit().await;
                        let _ = subscriber.quit().await;
                    });
                    return Err(refused);
                }
                // Otherwise Redis is down or unreachable: warned of (once) from here on.
                health.started(&address);
            }
            Err(_) => {
                if !health.started(&address) {
                    tracing::warn!(
                        address = %config.redacted_address(),
                        last_error = health.last_error().as_deref().unwrap_or("none (no answer)"),
                        "Redis is not reachable yet; acquisitions fail closed until it is"
                    );
                }
            }
        }
        let subscriptions = Subscriptions::start(subscriber, &client);
        let inner = Arc::new(Inner {
            namespace: connection::namespace(&address, &config.key_prefix),
            client,
            subscriptions,
            scripts,
            keys: KeyLayout::new(&config.key_prefix),
            owners,
            watchdog: Default::default(),
            runtime: tokio::runtime::Handle::current(),
            health,
            config,
            following_master: Default::default(),
            held: Default::default(),
            background: Default::default(),
            _stop_connecting: stop_connecting,
        });
        if let Some(switches) = switches {
            switches.start(Arc::downgrade(&inner), address);
        }
        tokio::spawn(watchdog::run(
            Arc::downgrade(&inner),
            watchdog::renewal_period(inner.config.watchdog_timeout),
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
        let _: String = self.inner.client.ping(None).await.map_err(|e| {
            LockError::backend_unavailable("<health>", self.inner.failure("PING", e))
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
        self.inner.subscriptions.active_channels()
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
        let wait = options.wait_time().unwrap_or(config.wait_time);
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
                        .unreachable("acquire")
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
