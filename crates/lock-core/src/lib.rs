//! The ports of platform-lock: one trait per capability, with no backend behind it.
//!
//! Each capability comes with an in-memory implementation for tests, a disabled one, and a
//! conformance suite (feature `conformance`) that every backend passes. The Redis implementation
//! is lock-redis; services get theirs wired by lock-starter.
//!
//! - The distributed lock: [`DistributedLock`](crate::lock::DistributedLock), described below.
//! - Master/sub locks, which wait for the asynchronous branches of an operation: [`branches`].
//! - Idempotent execution, where a retried call gets the first call's result: [`Idempotency`](crate::idempotency::Idempotency)
//!   over the [`IdempotencyStore`](crate::idempotency::IdempotencyStore) port.
//! - Shared values with a TTL and a version, and waiting for one to change:
//!   [`SharedValues`](crate::values::SharedValues) over the [`ValueStore`](crate::values::ValueStore) port.
//! - Rate limiting by the generic cell rate algorithm: [`RateLimiter`](crate::rate_limit::RateLimiter)
//!   over the [`RateLimitStore`](crate::rate_limit::RateLimitStore) port.
//! - A distributed cache of typed values with an optional in-process tier:
//!   [`Cache`](crate::cache::Cache) over the [`CacheStore`](crate::cache::CacheStore) port.
//! - Shared by all: the error and its stable codes ([`Problem`], [`LockError`]), key
//!   validation ([`validate_key`]) and owner tokens ([`OwnerTokens`]).
//!
//! # The distributed lock
//!
//! Mutual exclusion per key across processes: while one pod holds `bill-run:2026-11`, no other
//! pod sharing the backend gets it. It is built for work that must run on one replica at a time.
//!
//! - **Leases.** [`Lease::Watchdog`](crate::lock::Lease::Watchdog), the default, is renewed while the holder's process lives
//!   and ends within one watchdog timeout after a crash. [`Lease::Fixed`](crate::lock::Lease::Fixed) hard-expires.
//! - **Fail closed.** A lock held elsewhere for the whole wait time, or a backend that is down,
//!   gives [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`, HTTP 503), and the
//!   critical section does not run.
//! - **Fail open, by name.** [`DistributedLockExt::with_lock_fail_open`](crate::lock::DistributedLockExt::with_lock_fail_open) runs the section
//!   unguarded when the lock is not granted, logs a `WARN` and says why in a [`FailOpen`](crate::lock::FailOpen).
//! - **Fair order, by name.** [`AcquireOptions::fair`](crate::lock::AcquireOptions::fair) grants a key to its fair waiters in the
//!   order they asked, across processes.
//! - **Owner-checked release.** Releasing a lease that already ended never frees another
//!   owner's lock.
//! - **Fencing.** [`LockHandle::fencing_token`](crate::lock::LockHandle::fencing_token) grows with every grant of a key, and
//!   [`LockHandle::lost`](crate::lock::LockHandle::lost) fires when the lease can no longer be trusted.
//!
//! A lease is not a proof: a holder paused past its lease can still act. Where two runs would
//! corrupt data, have the store check the fencing token (docs/fencing.md).
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use lock_core::LockError;
//! use lock_core::lock::{DistributedLock, DistributedLockExt, InMemoryLock, Lease};
//!
//! async fn run_bill_run(lock: &dyn DistributedLock, period: &str) -> Result<u32, LockError> {
//!     lock.with_lock(&format!("bill-run:{period}"), Lease::Watchdog, || async {
//!         // … only one pod runs this for `period` at a time …
//!         17 // invoices written
//!     })
//!     .await
//! }
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), LockError> {
//! let lock: Arc<dyn DistributedLock> = Arc::new(InMemoryLock::new());
//! assert_eq!(run_bill_run(&*lock, "2026-11").await?, 17);
//!
//! // While another pod holds the period, the bill run fails closed after the wait time (5 s).
//! let other_pod = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
//! let error = run_bill_run(&*lock, "2026-11").await.unwrap_err();
//! assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED");
//! assert_eq!(error.http_status(), 503);
//! # drop(other_pod);
//! # Ok(()) }
//! ```

pub mod branches;
pub mod cache;
#[cfg(feature = "conformance")]
pub mod conformance;
mod duration;
mod error;
pub mod idempotency;
mod key;
pub mod lock;
mod metric;
mod outage;
mod owner;
mod process;
pub mod rate_limit;
pub mod values;
mod watch;

pub use duration::{duration_range, format_duration, parse_duration};
pub use error::{AcquireFailure, BoxError, LockError, Problem, check_duration};
pub use key::{MAX_KEY_BYTES, fold_name, validate_key};
pub use owner::{MAX_INSTANCE_ID_BYTES, OwnerTokens, validate_instance_id};
pub use process::issued_by_this_process;
pub use watch::ChangeWatch;
