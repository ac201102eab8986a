//! # lock-redis: the Redis implementations of platform-lock's ports
//!
//! Every capability is built on one [`RedisClient`] and shares its connections. Services
//! normally get them through `lock-starter`; use this crate directly only to wire them by hand.
//!
//! - [`RedisClient`], from a [`RedisConfig`]: the command and pub/sub connections and their
//!   health, Sentinel failover, shared sharded subscriptions, the key layout and owner tokens.
//! - [`lock`]: the distributed lock, [`RedisLock`](lock::RedisLock).
//! - [`idempotency`]: the record store of idempotent execution.
//! - [`branches`]: the branch backend of master/sub locks.
//! - [`values`]: the store of shared values.
//! - [`rate_limit`]: the store of rate limits.
//! - [`cache`]: the store of named caches and the push that keeps in-process tiers current.
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
//! - **Fair acquire** ([`AcquireOptions::fair`](lock_core::lock::AcquireOptions::fair)) is `fair_acquire.lua`: the lock goes to the
//!   first of the key's queue of fair waiters in Redis, the others keep their place by calling
//!   again every third of the fair waiter timeout (a dead waiter loses it within that timeout
//!   plus one command timeout),
//!   and the release message names the first waiter, so exactly it tries.
//! - **Release** is one `EVALSHA` of `release.lua`: owner-checked, it leaves a short tombstone
//!   (the last fencing token) and publishes the release.
//! - **Watchdog.** Watchdog leases are renewed every third of the watchdog timeout, all of a
//!   client's leases in one `renew.lua` call per 500 keys. A renewal never re-creates a key; a
//!   lease found gone is reported through [`LockHandle::lost`](lock_core::lock::LockHandle::lost).
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
//! use lock_core::lock::{DistributedLockExt, Lease};
//! use lock_redis::lock::{RedisLock, RedisLockConfig};
//! use lock_redis::{RedisClient, RedisConfig};
//!
//! # async fn run() -> Result<(), lock_core::LockError> {
//! let redis = RedisClient::connect(RedisConfig::new("redis://127.0.0.1:6379")).await?;
//! let config = RedisLockConfig::default().watchdog_timeout(Duration::from_secs(10));
//! let lock = RedisLock::new(&redis, config).await?;
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
//! use lock_core::lock::{DistributedLockExt, Lease};
//! use lock_redis::lock::{RedisLock, RedisLockConfig};
//! use lock_redis::{RedisClient, RedisConfig, RedisFailure};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! # let down = format!("redis://127.0.0.1:{port}");
//! let config = RedisConfig::new(down).command_timeout(Duration::from_millis(200));
//! let redis = RedisClient::connect(config).await?; // logs a warning, keeps reconnecting
//! let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
//!
//! let result = lock
//!     .with_lock("msisdn-reaper", Lease::Fixed(Duration::from_secs(30)), || async {
//!         unreachable!("the section never runs without the lock")
//!     })
//!     .await;
//! let error = result.unwrap_err();
//! assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED");
//! assert_eq!(error.details()["reason"], "backend_unavailable");
//! assert!(RedisFailure::find(&error).is_some()); // what went wrong talking to Redis
//! # Ok(()) }
//! ```
//!
//! Requires Redis 7.0 or later (sharded pub/sub, effect replication of scripts).

pub mod branches;
pub mod cache;
mod core;
pub mod idempotency;
pub mod lock;
pub mod rate_limit;
pub mod values;

pub use core::address::{InvalidAddress, RedisAddress, Topology};
pub use core::client::RedisClient;
pub use core::config::{RedisConfig, key_prefix_problem};
pub use core::connection::check_ca_file;
pub use core::error::{RedisFailure, Refusal};
pub use core::redact::redact;

/// Defaults and accepted ranges of every setting, and the fixed timings.
pub mod limits {
    pub use crate::core::address::{ACCEPTED_ADDRESSES, DEFAULT_REDIS_PORT, DEFAULT_SENTINEL_PORT};
    pub use crate::core::config::limits::*;
    pub use crate::core::connection::RECONNECT_MAX_DELAY;
    pub use crate::lock::config::limits::*;
}

/// The Lua sources, for the benchmarks' script-level scenarios.
#[doc(hidden)]
pub mod scripts {
    pub use crate::branches::scripts::*;
    pub use crate::cache::scripts::*;
    pub use crate::idempotency::scripts::*;
    pub use crate::lock::scripts::*;
    pub use crate::rate_limit::scripts::*;
    pub use crate::values::scripts::*;
}
