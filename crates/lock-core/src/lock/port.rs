//! The lock port, [`DistributedLock`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::LockError;
use crate::lock::handle::LockHandle;
use crate::lock::lease::Lease;
use crate::lock::options::{AcquireOptions, DEFAULT_WAIT_TIME};
use crate::lock::shutdown::ShutdownSummary;

/// Mutual exclusion across processes: at most one holder per key at a time, for the length of a
/// lease.
///
/// # Contract
/// Every implementation passes the conformance suite (feature `conformance`). In short:
/// - **Exclusion.** While a lease is held, no other acquisition of its key succeeds, in any
///   process sharing the backend.
/// - **Wait.** [`acquire_with`](DistributedLock::acquire_with) waits up to the wait time for a
///   held key (zero: one attempt) and returns within the wait time plus one backend command
///   timeout, whatever the backend does.
/// - **Fail closed.** A lock not granted, through contention or a failing backend, is
///   [`LockError::AcquisitionFailed`] and never a handle. An outage is never reported as
///   contention, nor a timeout as a grant.
/// - **Leases.** [`Lease::Fixed`] ends at its duration. [`Lease::Watchdog`] is renewed while the
///   holder's process lives and ends within one watchdog timeout after it dies.
/// - **Release.** Owner-checked: releasing or dropping a handle whose lease ended never frees
///   another owner's lock. A dropped handle releases in the background.
/// - **Minimum hold.** A release sooner than [`AcquireOptions::hold_at_least`] after the grant
///   reports `Released` but keeps the key held, unrenewed, until grant + hold on the backend's
///   clock.
/// - **Fencing.** Each grant's [`LockHandle::fencing_token`] is greater than the token of every
///   earlier grant of that key, to any client.
/// - **Owners.** Each acquisition has its own owner token ([`LockHandle::owner`]), starting with
///   the instance id. A release, even a late retried one, frees only its own acquisition's grant.
/// - **Lost leases.** [`LockHandle::lost`] fires, and `is_held` turns false, when a renewal finds
///   the key gone or taken, or when the local deadline passes without a confirmed renewal. That
///   is before the backend can grant the key to anyone else, as long as it keeps the key.
///   Renewal never re-creates a missing key. After a release, `lost()` never fires.
/// - **Outcome unknown.** An acquisition that fails, times out or is dropped at any await point
///   leaves no grant beyond one lease, no subscription and no renewal.
/// - **Validation.** Bad keys and durations are rejected with `LOCK_INVALID_ARGUMENT` before any
///   backend call.
/// - **Fairness.** Fair acquisitions ([`AcquireOptions::fair`]) of a key are granted in the order
///   they asked, across clients. A fair waiter that dies leaves the queue within a bounded time,
///   one that gives up or is dropped leaves at once. A fair acquisition is not granted while
///   earlier fair waiters are queued
///   ([`AcquireFailure::WaitersAhead`](crate::AcquireFailure::WaitersAhead)).
/// - **Re-entry.** Inside a [`with_lock`](crate::lock::DistributedLockExt::with_lock) scope, the same
///   task acquiring the same key through a lock of the same
///   [`namespace`](DistributedLock::namespace) gets a nested handle at once, without a backend
///   call ([`LockHandle::is_reentrant`]). The outer lease, owner and fencing token are kept, and
///   the nested call's lease and wait are ignored. Nested sections of one scope run one at a
///   time, the second waiting up to its wait time. Any other acquisition contends.
/// - **Shutdown.** [`shutdown`](DistributedLock::shutdown) releases every lease the client
///   holds and waits for its background releases. Every later acquisition through this client
///   fails with [`LockError::ShutDown`]. Other clients of the backend are not affected.
///
/// A lease is not a proof: a holder paused past its lease can still act. Pass the fencing token
/// to the store you write to when that matters.
///
/// The trait is object safe: services hold an `Arc<dyn DistributedLock>`. The closure helpers
/// are in [`DistributedLockExt`](crate::lock::DistributedLockExt).
///
/// # Implementing
/// Implement [`namespace`](DistributedLock::namespace),
/// [`acquire_lease`](DistributedLock::acquire_lease) and
/// [`shutdown`](DistributedLock::shutdown). The provided `acquire_with` validates the arguments
/// and handles re-entry before it calls `acquire_lease`. [`HeldLeases`](crate::lock::HeldLeases) keeps
/// the leases a shutdown must release. Run the conformance suite against the result.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::LockError;
/// use lock_core::lock::{DistributedLock, InMemoryLock, Lease};
///
/// /// Runs the reaper if no other pod does; returns the fencing token it ran under.
/// async fn reap(lock: &dyn DistributedLock) -> Result<u64, LockError> {
///     let handle = lock.try_acquire("msisdn-reaper", Lease::Watchdog).await?;
///     // … sweep, writing with `handle.fencing_token()` …
///     let token = handle.fencing_token();
///     let _ = handle.release().await?;
///     Ok(token)
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let lock: Arc<dyn DistributedLock> = Arc::new(InMemoryLock::new());
/// let first = reap(&*lock).await?;
/// let second = reap(&*lock).await?;
/// assert!(second > first, "every grant of a key gets a greater fencing token");
///
/// let other_pod = lock.try_acquire("msisdn-reaper", Lease::Watchdog).await?;
/// let error = reap(&*lock).await.unwrap_err(); // fail closed: the sweep did not run
/// assert_eq!(error.details()["reason"], "held_by_another_owner");
/// # drop(other_pod);
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedLock: Send + Sync + fmt::Debug {
    /// The lock space this lock guards, never containing credentials: two locks with the same
    /// namespace guard the same keys, and re-entry is decided per namespace and key.
    fn namespace(&self) -> &str;

    /// The implementation hook that waits for and grants a lease on `key`, called by
    /// [`acquire_with`](DistributedLock::acquire_with) once the arguments are valid and
    /// re-entry is ruled out.
    ///
    /// # Errors
    /// [`LockError::AcquisitionFailed`] when not granted.
    ///
    /// # Examples
    ///
    /// A lock that counts the acquisitions reaching another. It forwards `shutdown` too, or the
    /// wrapped lock's leases would stay held at exit.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use async_trait::async_trait;
    /// use lock_core::LockError;
    /// use lock_core::lock::{AcquireOptions, DistributedLock, InMemoryLock, Lease, LockHandle, ShutdownSummary};
    ///
    /// #[derive(Debug, Default)]
    /// struct Counted {
    ///     inner: InMemoryLock,
    ///     calls: AtomicUsize,
    /// }
    ///
    /// #[async_trait]
    /// impl DistributedLock for Counted {
    ///     fn namespace(&self) -> &str {
    ///         self.inner.namespace()
    ///     }
    ///
    ///     async fn acquire_lease(&self, key: &str, options: AcquireOptions) -> Result<LockHandle, LockError> {
    ///         self.calls.fetch_add(1, Ordering::Relaxed);
    ///         self.inner.acquire_lease(key, options).await
    ///     }
    ///
    ///     async fn shutdown(&self, timeout: Duration) -> ShutdownSummary {
    ///         self.inner.shutdown(timeout).await
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let lock = Counted::default();
    /// assert!(lock.acquire("", Lease::Watchdog).await.is_err()); // rejected before the hook
    /// assert_eq!(lock.calls.load(Ordering::Relaxed), 0);
    /// let handle = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// assert_eq!(lock.calls.load(Ordering::Relaxed), 1);
    /// drop(handle);
    /// assert!(lock.shutdown(Duration::from_secs(5)).await.is_complete());
    /// # Ok(()) }
    /// ```
    async fn acquire_lease(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError>;

    /// Acquires `key`, waiting for a held key up to the options' wait time, else the client's.
    ///
    /// Returns within the wait time plus one backend command timeout. Runs in a `lock.acquire`
    /// span and records the acquisition metrics ([`telemetry`](crate::lock::telemetry)).
    ///
    /// # Errors
    /// - [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`, HTTP 503): not granted. Its
    ///   reason tells contention from an unavailable backend.
    /// - [`LockError::InvalidKey`], [`LockError::InvalidArgument`] (`LOCK_INVALID_ARGUMENT`,
    ///   HTTP 500): rejected before any backend call.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::lock::{AcquireOptions, DistributedLock, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let sweep = AcquireOptions::new(Lease::Fixed(Duration::from_millis(200)));
    /// let first = lock.acquire_with("msisdn-reaper", sweep).await?;
    ///
    /// // Waits up to 1 s: the fixed lease ends after 200 ms and this call gets the key.
    /// let patient = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::from_secs(1))?;
    /// let second = lock.acquire_with("msisdn-reaper", patient).await?;
    /// assert!(!first.is_held());
    /// assert!(second.fencing_token() > first.fencing_token());
    /// # Ok(()) }
    /// ```
    async fn acquire_with(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        crate::lock::telemetry::acquire(key, options, async {
            options.validate(key)?;
            let wait = options.wait_override().unwrap_or(DEFAULT_WAIT_TIME);
            if let Some(nested) = crate::lock::reentrant::enter(self.namespace(), key, wait).await {
                return nested;
            }
            self.acquire_lease(key, options).await
        })
        .await
    }

    /// Acquires `key` with `lease`, waiting up to the client's wait time.
    ///
    /// # Errors
    /// As [`acquire_with`](DistributedLock::acquire_with).
    async fn acquire(&self, key: &str, lease: Lease) -> Result<LockHandle, LockError> {
        self.acquire_with(key, AcquireOptions::new(lease)).await
    }

    /// Makes one attempt to acquire `key`, without waiting.
    ///
    /// # Errors
    /// As [`acquire_with`](DistributedLock::acquire_with). A held key fails at once with reason
    /// `held_by_another_owner`.
    async fn try_acquire(&self, key: &str, lease: Lease) -> Result<LockHandle, LockError> {
        let once = AcquireOptions::new(lease).wait_time(Duration::ZERO);
        self.acquire_with(key, once.expect("0 is a wait time"))
            .await
    }

    /// Shuts this client down before the process exits: releases its leases and grants no more.
    ///
    /// # Contract
    /// - Releases every lease the client still holds. Each handle's `lost()` fires first, with
    ///   [`LostReason::ShutDown`](crate::lock::LostReason::ShutDown).
    /// - Waits for the background releases of dropped handles and abandoned acquisitions.
    /// - Refuses every later acquisition, and every waiting one, with [`LockError::ShutDown`]
    ///   (`LOCK_DISABLED`, reason `shut_down`).
    /// - Returns within `timeout`, whatever the backend does. Releases still under way are
    ///   counted as [`pending`](ShutdownSummary::pending) and go on while the process lives.
    /// - Calling it again waits for what is still pending.
    ///
    /// Call it last in `main`: a dropped handle releases in the background, and a process that
    /// exits first leaves its key held for the whole lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::{DEFAULT_SHUTDOWN_TIMEOUT, DistributedLock, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let handle = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// drop(handle); // released in the background
    ///
    /// let summary = lock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
    /// assert!(summary.is_complete(), "{summary}");
    ///
    /// let error = lock.acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
    /// assert_eq!(error.details()["reason"], "shut_down");
    /// # Ok(()) }
    /// ```
    async fn shutdown(&self, timeout: Duration) -> ShutdownSummary;
}
