//! # lock-redis: the Redis implementation of the lock port
//!
//! [`RedisLock`] implements [`lock_core::DistributedLock`] on the `fred` client. Services normally
//! get it through `lock-starter`; use this crate directly only to wire it by hand.
//!
//! The crate is laid out by capability, each on one shared Redis core:
//! - `lock/`: the distributed lock, [`RedisLock`] (its settings are [`RedisLockConfig`]);
//! - `branches/`: master/sub locks, [`RedisBranches`] (the `lock_core::branches` port, on a
//!   `RedisLock`'s connections);
//! - `idempotency/`: idempotent execution's record store, [`RedisIdempotencyStore`], on a
//!   `RedisLock`'s connections;
//! - `core/`: what every capability stands on — the command and pub/sub connections and their
//!   health, following a Sentinel failover, pub/sub subscriptions shared per channel, the key
//!   layout (one hash tag per name), [`RedisFailure`], and the one retry back-off.
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
//! - **Fair acquire** ([`AcquireOptions::fair`](lock_core::AcquireOptions::fair)) is `fair_acquire.lua`: the lock goes to the
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
//! assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED");
//! assert_eq!(error.details()["reason"], "backend_unavailable");
//! assert!(RedisFailure::find(&error).is_some()); // what went wrong talking to Redis
//! # Ok(()) }
//! ```
//!
//! Requires Redis 7.0 or later (sharded pub/sub, effect replication of scripts).

mod branches;
mod core;
mod idempotency;
mod lock;

pub use branches::{
    BRANCH_OPEN_SCRIPT, BRANCH_PENDING_SCRIPT, BRANCH_REGISTER_SCRIPT, BRANCH_RELEASE_SCRIPT,
    BRANCH_SEAL_SCRIPT, RedisBranches,
};
pub use core::address::{
    ACCEPTED_ADDRESSES, DEFAULT_REDIS_PORT, DEFAULT_SENTINEL_PORT, InvalidAddress, RedisAddress,
    Topology,
};
pub use core::connection::{RECONNECT_MAX_DELAY, check_ca_file};
pub use core::error::{RedisFailure, Refusal};
pub use core::redact::redact;
pub use lock::config::{
    DEFAULT_ADDRESS, DEFAULT_COMMAND_TIMEOUT, DEFAULT_FAIR_WAITER_TIMEOUT, DEFAULT_KEY_PREFIX,
    DEFAULT_MIN_REPLICAS, DEFAULT_REPLICA_SYNC_TIMEOUT, DEFAULT_WATCHDOG_TIMEOUT,
    MAX_COMMAND_TIMEOUT, MAX_FAIR_WAITER_TIMEOUT, MAX_KEY_PREFIX_BYTES, MAX_MIN_REPLICAS,
    MAX_REPLICA_SYNC_TIMEOUT, MIN_COMMAND_TIMEOUT, MIN_FAIR_WAITER_TIMEOUT,
    MIN_REPLICA_SYNC_TIMEOUT, RedisLockConfig, TOMBSTONE_TTL, key_prefix_problem,
    validate_key_prefix,
};
pub use lock::ops::{ForceReleased, LockState, LockStatus};
pub use lock::registry::{RENEW_BATCH, WatchdogStats, renewal_period};
pub use lock::scripts::{
    ACQUIRE_SCRIPT, FAIR_ACQUIRE_SCRIPT, FAIR_LEAVE_SCRIPT, FORCE_RELEASE_SCRIPT, RELEASE_SCRIPT,
    RENEW_SCRIPT, STATUS_SCRIPT,
};
/// Re-exported from lock-core, which renders every duration range.
pub use lock_core::duration_range;

pub use lock::RedisLock;

pub use idempotency::RedisIdempotencyStore;
pub use idempotency::scripts::{
    IDEMPOTENCY_ABANDON_SCRIPT, IDEMPOTENCY_CLAIM_SCRIPT, IDEMPOTENCY_COMPLETE_SCRIPT,
    IDEMPOTENCY_FORGET_SCRIPT, IDEMPOTENCY_RENEW_SCRIPT,
};
