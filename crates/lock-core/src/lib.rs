//! # lock-core: the ports of platform-lock (Redis-free)
//!
//! Each capability is a port (a trait) with an in-memory implementation and a conformance
//! suite; the Redis implementations are in `lock-redis`. Laid out by capability:
//! - `lock/`: the distributed lock, [`DistributedLock`] — described below;
//! - `branches/`: master/sub locks, waiting for the asynchronous branches of an operation
//!   ([`branches`]);
//! - `idempotency/`: idempotent execution, [`Idempotency`] over the [`IdempotencyStore`] port —
//!   a retried call gets the first call's result instead of running twice;
//! - shared by every capability: the error trait [`Problem`] (a stable code, an HTTP status
//!   and details), key validation ([`validate_key`]), and owner tokens
//!   ([`OwnerTokens`]).
//!
//! ## The distributed lock
//!
//! A distributed lock here is **mutual exclusion per key across processes**: while one pod holds
//! `bill-run:2026-11`, no other pod sharing the backend gets it. It is built for work that must run
//! on exactly one replica at a time — a bill run for one billing period, a scheduled reaper that
//! every replica would otherwise run at once.
//!
//! What you get:
//! - **Leases.** Every grant is a lease: [`Lease::Watchdog`] (default) is renewed while your process
//!   lives and frees itself within one watchdog timeout after a crash; [`Lease::Fixed`] hard-expires.
//! - **Fail closed.** If the lock cannot be granted — held elsewhere for the whole wait time, or
//!   the backend is down — you get [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`,
//!   HTTP 503) and your critical section does not run.
//! - **Fail open, where you ask for it.** A call site that values availability over exclusion
//!   names it: [`DistributedLockExt::with_lock_fail_open`] runs the section unguarded when the
//!   lock is not granted (disabled, wait time spent, backend down), logs a `WARN`, and returns
//!   the section's value in a [`FailOpen`] marked with why. Never a default.
//! - **Fair order, where you ask for it.** [`AcquireOptions::fair`] grants a key to its fair
//!   waiters in the order they asked, across processes — for work whose order matters.
//! - **Owner-checked release.** Releasing a lease that already ended never frees someone else's lock.
//! - **Fencing tokens and a lost-lease signal.** [`LockHandle::fencing_token`] increases with every
//!   grant of a key; [`LockHandle::lost`] fires when the lease can no longer be trusted.
//!
//! What you do not get: a correctness proof. A lease can end under a holder that is paused (GC,
//! SIGSTOP, a slow disk) and the next holder can start before the paused one notices. Where two
//! concurrent runs would corrupt data, have the store check the fencing token, or enforce the
//! invariant in the database.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use lock_core::{DistributedLock, DistributedLockExt, InMemoryLock, Lease, LockError};
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
//!
//! Services get a Redis-backed `Arc<dyn DistributedLock>` from `lock-starter`; [`InMemoryLock`]
//! stands in for unit tests. Implementations prove themselves with the conformance suite
//! (`conformance` feature).

pub mod branches;
mod duration;
mod error;
pub mod idempotency;
mod key;
mod lock;
mod metric;
mod owner;
mod process;
mod watch;

#[cfg(feature = "conformance")]
pub use lock::conformance;
pub use lock::telemetry;

pub use duration::{duration_range, format_duration, parse_duration};
pub use error::{AcquireFailure, BoxError, LockError, Problem, check_duration};
pub use idempotency::disabled::DisabledIdempotencyStore;
pub use idempotency::error::{IdempotencyError, NotStored, Unstored};
pub use idempotency::execute::{Begun, Idempotency, Idempotent};
pub use idempotency::memory::InMemoryIdempotencyStore;
pub use idempotency::options::{
    DEFAULT_DUPLICATE_WAIT, DEFAULT_MAX_RESULT_BYTES, DEFAULT_RESULT_TTL, IdempotencyOptions,
    IdempotencySettings, MAX_RESULT_BYTES, MIN_RESULT_TTL,
};
pub use idempotency::port::{Claim, IdempotencyStore};
pub use idempotency::scope::IdempotencyScope;
pub use key::{MAX_KEY_BYTES, validate_key};
pub use lock::disabled::DisabledLock;
pub use lock::ext::DistributedLockExt;
pub use lock::fail_open::{FailOpen, Unguarded, UnguardedReason};
pub use lock::handle::{LeaseRelease, LeaseState, LockHandle};
pub use lock::lease::{
    Lease, MAX_LEASE, MAX_WAIT, MAX_WATCHDOG_TIMEOUT, MIN_LEASE, MIN_WATCHDOG_TIMEOUT,
    validate_wait, validate_watchdog_timeout,
};
pub use lock::memory::InMemoryLock;
pub use lock::options::{AcquireOptions, DEFAULT_WAIT_TIME};
pub use lock::port::DistributedLock;
pub use lock::shutdown::{DEFAULT_SHUTDOWN_TIMEOUT, HeldLeases, ShutdownSummary};
pub use lock::status::{LeaseStatus, LostReason, ReleaseOutcome};
pub use owner::{MAX_INSTANCE_ID_BYTES, OwnerTokens, validate_instance_id};
pub use process::issued_by_this_process;
pub use watch::ChangeWatch;
