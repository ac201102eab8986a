//! # lock-starter: the distributed lock for services
//!
//! The one crate a service depends on for cross-pod mutual exclusion on Redis. It reads the
//! configuration under `telco.platform.lock.*` (TOML files, then environment variables), builds
//! the Redis-backed lock, and re-exports the whole lock API, so no other crate of ours is needed.
//!
//! On the same Redis connections it gives idempotent execution, [`LockStarter::idempotency`]: a
//! retried call gets the first call's result instead of running twice (`docs/idempotency.md`);
//! master/sub locks, [`LockStarter::master_locks`]; shared values with wait-for-change,
//! [`LockStarter::values`] (`docs/values.md`); rate limiting, [`LockStarter::rate_limiter`]
//! (`docs/rate-limiting.md`); and a distributed cache, [`LockStarter::cache`] (`docs/cache.md`).
//!
//! Each capability is a module, [`lock`], [`idempotency`], [`branches`], [`values`],
//! [`rate_limit`] and [`cache`], holding its API and its wiring. The shared part serves them all: configuration
//! ([`config`]), the builder and [`LockStarter`], the health check, HTTP problem responses, and
//! [`redis`] for wiring the Redis implementations by hand. [`prelude`] has the everyday names.
//!
//! # Examples
//!
//! ```no_run
//! use lock_starter::prelude::*;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Defaults, then config/lock.toml, then TELCO_PLATFORM_LOCK_* variables.
//! let starter = LockStarter::builder().toml_file("config/lock.toml").build().await?;
//! let lock = starter.lock()?;
//!
//! // Variable-length work: a watchdog lease, renewed while this process lives.
//! let invoices = lock
//!     .with_lock("bill-run:2026-11", Lease::Watchdog, || async {
//!         // … runs on exactly one pod at a time …
//!         1_204
//!     })
//!     .await?; // LOCK_ACQUISITION_FAILED (HTTP 503) if another pod holds it or Redis is down
//! # let _ = invoices;
//! # Ok(()) }
//! ```
//!
//! The same flow in a unit test, without Redis: the configuration is read and checked as in
//! production, and an [`InMemoryLock`](lock::InMemoryLock) stands in for the Redis lock.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_starter::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use lock_starter::figment::{Figment, providers::{Format, Toml}};
//! # let config = Figment::from(Toml::string("[telco.platform.lock]\nwatchdog-timeout = \"10s\"\n"));
//! // `config`: the service's figment, read and checked as in production.
//! let test_lock = InMemoryLock::new().with_wait_time(Duration::ZERO)?; // one attempt, no waiting
//! let starter = LockStarter::builder().figment(config).lock(Arc::new(test_lock)).build().await?;
//! let lock = starter.lock()?;
//!
//! let invoices = lock.with_lock("bill-run:2026-11", Lease::Watchdog, || async { 1_204 }).await?;
//! assert_eq!(invoices, 1_204);
//!
//! // Another pod holds the period: fail closed, the section does not run.
//! let other_pod = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
//! let error = lock
//!     .with_lock("bill-run:2026-11", Lease::Watchdog, || async { unreachable!() })
//!     .await
//!     .unwrap_err();
//! assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED");
//! assert_eq!(error.details()["holder"], other_pod.owner());
//! # Ok(()) }
//! ```
//!
//! - Configuration keys, defaults and environment names: [`config`] and `docs/configuration.md`.
//! - The lock contract (leases, fail closed, fencing tokens): [`DistributedLock`](lock::DistributedLock).
//! - Fail open, opted into per call site where availability matters more than exclusion:
//!   [`DistributedLockExt::with_lock_fail_open`](lock::DistributedLockExt::with_lock_fail_open) and [`LockStarter::lock_or_disabled`];
//!   choosing between the two policies: `docs/failure-policy.md`.
//! - Overrides: [`LockStarterBuilder::lock`] hands in your own implementation (e.g.
//!   [`InMemoryLock`](lock::InMemoryLock) in unit tests); [`LockStarterBuilder::figment`] your own configuration
//!   sources.
//! - Observability: `tracing` spans and `metrics` (names in `lock_core::lock::telemetry`); an opt-in health
//!   check, [`LockStarter::health`]; with the `http` feature, RFC 9457 problem responses for
//!   lock errors ([`http`](crate#http-feature)). See `docs/observability.md`.
//!
//! # `http` feature
//!
//! Off by default. Adds the module `lock_starter::http`: a [`LockError`](lock::LockError) as an RFC 9457
//! problem body (`application/problem+json`, status 503 for a lock that failed closed), and an
//! axum `IntoResponse` for it. Its tower layers make a handler idempotent by its
//! `Idempotency-Key` (`LockStarter::idempotency_layer`), limit requests per client with 429
//! and the IETF `RateLimit` fields (`LockStarter::rate_limit_layer`), and run a handler under
//! a key's lock (`LockStarter::lock_layer`). Examples: `examples/http_service.rs`,
//! `examples/rate_limited_service.rs`.

mod builder;
mod built;
pub mod config;
mod error;
mod health;
#[cfg(feature = "http")]
pub mod http;
mod wiring;

pub use builder::{LockStarter, LockStarterBuilder};
pub use error::StartError;
/// Re-exported so a service can hand its own figment to [`LockStarterBuilder::figment`].
pub use figment;
pub use health::{Health, HealthStatus};
/// The error trait of every capability: a stable code, an HTTP status and details.
pub use lock_core::Problem;

/// The distributed lock: mutual exclusion per key across processes (see [`DistributedLock`](lock::DistributedLock)).
pub mod lock {
    #[cfg(feature = "conformance")]
    pub use lock_core::conformance_tests;
    /// The conformance suite for an implementation of your own (feature `conformance`).
    #[cfg(feature = "conformance")]
    pub use lock_core::lock::conformance;
    pub use lock_core::lock::{
        AcquireOptions, DistributedLock, DistributedLockExt, FailOpen, InMemoryLock, Lease,
        LeaseStatus, LockHandle, LostReason, ReleaseOutcome, ShutdownSummary, Unguarded,
        UnguardedReason,
    };
    pub use lock_core::{AcquireFailure, LockError};
    pub(crate) mod wiring;

    /// Accepted ranges of leases and wait times, and the default shutdown bound.
    pub mod limits {
        pub use lock_core::lock::{DEFAULT_SHUTDOWN_TIMEOUT, MAX_LEASE, MAX_WAIT, MIN_LEASE};
    }
}

/// Idempotent execution: a retried call gets the first call's result instead of running twice
/// (see [`LockStarter::idempotency`](crate::LockStarter::idempotency) and `docs/idempotency.md`).
pub mod idempotency {
    pub use lock_core::idempotency::{
        Begun, Idempotency, IdempotencyError, IdempotencyOptions, IdempotencyScope,
        IdempotencySettings, IdempotencyStore, Idempotent, InMemoryIdempotencyStore, NotStored,
        Unstored,
    };
    pub(crate) mod wiring;
}

/// Master/sub locks: wait for the asynchronous branches of an operation (see
/// [`LockStarter::master_locks`](crate::LockStarter::master_locks) and `docs/branches.md`).
pub mod branches {
    pub use lock_core::branches::{
        BRANCH_TOKEN_HEADER, BranchError, BranchRelease, BranchToken, Branches, BranchesOutcome,
        InMemoryBranches, InvalidBranchToken, Master, MasterLocks, MasterOptions, MasterOutcome,
        SubKey,
    };
    pub(crate) mod wiring;
}

/// Shared values: typed values with a TTL and a version, shared by every replica, and waiting
/// for one to change (see [`LockStarter::values`](crate::LockStarter::values) and
/// `docs/values.md`).
pub mod values {
    pub use lock_core::values::{
        Condition, Delivery, Expiry, Flight, InMemoryValues, Observed, Progress, Pushed, Queue,
        SharedValues, Taken, TtlMap, ValueStore, ValueWatch, ValuesError, Versioned, Waited,
        WhenBusy, Written,
    };
    pub(crate) mod wiring;
}

/// Rate limiting: GCRA on Redis' clock, a limit per name and key, an explicit failure policy
/// (see [`LockStarter::rate_limiter`](crate::LockStarter::rate_limiter) and
/// `docs/rate-limiting.md`).
pub mod rate_limit {
    pub use lock_core::rate_limit::{
        Basis, Charge, Decision, DisabledRateLimits, FailurePolicy, InMemoryRateLimits, Part,
        Quota, RateLimitError, RateLimitStore, RateLimiter, Verdict, check_all,
    };
    pub(crate) mod wiring;
}

/// A distributed cache: named caches of typed values, loaded on a miss, with an optional
/// in-process tier (see [`LockStarter::cache`](crate::LockStarter::cache) and `docs/cache.md`).
pub mod cache {
    pub use lock_core::cache::{
        Cache, CacheError, CacheOptions, CacheStore, CacheWatch, Change, DisabledCaches, Entry,
        InMemoryCaches, NearCache,
    };
    pub(crate) mod wiring;
}

/// The Redis implementations, for wiring them by hand (most services use [`LockStarter`]).
pub mod redis {
    pub use lock_redis::branches::RedisBranches;
    pub use lock_redis::cache::RedisCaches;
    pub use lock_redis::idempotency::RedisIdempotencyStore;
    pub use lock_redis::lock::{
        ForceReleased, LockState, LockStatus, RedisLock, RedisLockConfig, WatchdogStats,
    };
    pub use lock_redis::rate_limit::RedisRateLimits;
    pub use lock_redis::values::RedisValues;
    pub use lock_redis::{RedisClient, RedisConfig, RedisFailure, Refusal};
}

/// Everything a service needs in scope: `use lock_starter::prelude::*;`.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::cache::{Cache, CacheError, CacheOptions};
    #[doc(no_inline)]
    pub use crate::idempotency::{
        Idempotency, IdempotencyError, IdempotencyOptions, Idempotent, InMemoryIdempotencyStore,
        Unstored,
    };
    #[doc(no_inline)]
    pub use crate::lock::{
        AcquireFailure, AcquireOptions, DistributedLock, DistributedLockExt, FailOpen,
        InMemoryLock, Lease, LeaseStatus, LockError, LockHandle, LostReason, ReleaseOutcome,
        ShutdownSummary, Unguarded, UnguardedReason,
    };
    #[doc(no_inline)]
    pub use crate::rate_limit::{Decision, FailurePolicy, Quota, RateLimitError, RateLimiter};
    #[doc(no_inline)]
    pub use crate::values::{
        Expiry, Flight, Progress, SharedValues, ValuesError, Versioned, Waited, WhenBusy,
    };
    #[doc(no_inline)]
    pub use crate::{LockStarter, Problem};
}

/// The README's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// docs/lock.md's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/lock.md")]
struct LockDoctests;

/// docs/idempotency.md's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/idempotency.md")]
struct IdempotencyDoctests;

/// docs/branches.md's example, compiled as a doctest so it stays true (with the paths a
/// service has: lock-starter's).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/branches.md")]
struct BranchesDoctests;

/// docs/values.md's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/values.md")]
struct ValuesDoctests;

/// docs/rate-limiting.md's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rate-limiting.md")]
struct RateLimitingDoctests;

/// docs/cache.md's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/cache.md")]
struct CacheDoctests;

/// docs/configuration.md's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/configuration.md")]
struct ConfigurationDoctests;

/// docs/failure-policy.md's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/failure-policy.md")]
struct FailurePolicyDoctests;
