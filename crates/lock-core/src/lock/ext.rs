//! [`DistributedLockExt`]: `with_lock` and its fail-open variant, for every [`DistributedLock`].

use std::future::Future;

use crate::error::LockError;
use crate::lock::fail_open::FailOpen;
use crate::lock::options::AcquireOptions;
use crate::lock::port::DistributedLock;

/// Closure helpers for every [`DistributedLock`], including `dyn DistributedLock`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::{DistributedLock, DistributedLockExt, InMemoryLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock: Arc<dyn DistributedLock> = Arc::new(InMemoryLock::new());
///
/// let invoices = lock.with_lock("bill-run:2026-11", Lease::Watchdog, || async { 1_204 }).await?;
/// assert_eq!(invoices, 1_204);
/// // Released when the section ended:
/// assert!(lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.is_ok());
/// # Ok(()) }
/// ```
pub trait DistributedLockExt: DistributedLock {
    /// Acquires `key`, runs `critical_section`, releases, and returns its value: the safe default.
    ///
    /// The section does not run unless the lock was granted. The lock is released when the
    /// section's future completes, and also if it panics or is dropped (in the background). A
    /// failed release is logged, not returned: the work is done and its value is yours; the lease
    /// ends at its TTL. So is a lease that ran out before the section finished (a `WARN` says
    /// another owner may have run concurrently); use [`DistributedLock::acquire`] and
    /// [`LockHandle::lost`](crate::LockHandle::lost) to react to that.
    ///
    /// `options` is a [`Lease`](crate::Lease) (the configured wait time) or [`AcquireOptions`] (a wait time of
    /// its own, fair, a minimum hold).
    ///
    /// Inside the section, the same task acquiring the same key again (with `with_lock` or
    /// `acquire`) re-enters: see the `# Contract` of [`DistributedLock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use lock_core::{DistributedLockExt, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// # let lock = InMemoryLock::new();
    /// let invoices = lock
    ///     .with_lock("bill-run:2026-11", Lease::Watchdog, || async {
    ///         42 // run the bill run, return what it produced
    ///     })
    ///     .await?;
    /// assert_eq!(invoices, 42);
    /// # Ok(()) }
    /// ```
    ///
    /// With options:
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, DistributedLock, DistributedLockExt, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let other_pod = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
    ///
    /// // One attempt: a bill run already in progress elsewhere is an answer, not a queue.
    /// let once = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::ZERO)?;
    /// let result = lock
    ///     .with_lock("bill-run:2026-11", once, || async { unreachable!("not granted") })
    ///     .await;
    /// let error = result.unwrap_err(); // the section did not run
    /// assert_eq!(error.details()["holder"], other_pod.owner());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`DistributedLock::acquire_with`]; when it errs, the section did not run.
    fn with_lock<F, Fut, T>(
        &self,
        key: &str,
        options: impl Into<AcquireOptions>,
        critical_section: F,
    ) -> impl Future<Output = Result<T, LockError>> + Send
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let options = options.into();
        async move {
            let handle = self.acquire_with(key, options).await?;
            Ok(
                crate::lock::reentrant::run_holding(
                    self.namespace(),
                    key,
                    handle,
                    critical_section,
                )
                .await,
            )
        }
    }

    /// Fail open, opted into at this call site: like [`with_lock`](DistributedLockExt::with_lock)
    /// when the lock is granted, but when it is not, runs `critical_section` anyway — unguarded —
    /// and returns its value marked with why. For work where not running hurts more than running
    /// twice (warming a cache, sending a digest whose receiver drops duplicates); everything else
    /// keeps the fail-closed default. Not a correctness guarantee either way: see
    /// `docs/failure-policy.md` for choosing between the two.
    ///
    /// - **Granted**: exactly as `with_lock` (the section runs holding the lease, re-entry
    ///   included; release problems are logged, not returned) →
    ///   [`FailOpen::Guarded`].
    /// - **Not granted** → a `WARN` event (fields `lock_key`, `reason`, `error`: "lock not held;
    ///   running the critical section unguarded (fail open)"), then the section runs once without
    ///   the lock → [`FailOpen::Unguarded`] with the [`Unguarded`](crate::Unguarded) marker: its
    ///   [`UnguardedReason`](crate::UnguardedReason) and the [`LockError`] a fail-closed call would have returned.
    ///   - [`LockError::Disabled`] (`LOCK_DISABLED`, e.g. a [`DisabledLock`](crate::DisabledLock))
    ///     → [`UnguardedReason::LockDisabled`](crate::UnguardedReason::LockDisabled);
    ///   - contention that outlasted the wait time (`held_by_another_owner`, `waiters_ahead`) →
    ///     [`UnguardedReason::WaitTimeElapsed`](crate::UnguardedReason::WaitTimeElapsed): another owner may be running the same section;
    ///   - any other `LOCK_ACQUISITION_FAILED` (backend unreachable, timed out, refusing,
    ///     replicas not confirming, the grant arriving too late) →
    ///     [`UnguardedReason::BackendUnavailable`](crate::UnguardedReason::BackendUnavailable).
    ///
    /// The section runs at most once, and its value is always returned — a section that returns
    /// `Err` of its own has that `Err` inside the `FailOpen`, never replaced by a lock error. It
    /// starts no later than the wait time (the configured one, or that of the [`AcquireOptions`]
    /// passed as `options`; zero = one attempt) plus one backend command timeout. An unguarded section holds no lease: acquisitions of the same
    /// key inside it contend like any other.
    ///
    /// # Examples
    ///
    /// ```
    /// # use lock_core::{DistributedLock, DistributedLockExt, FailOpen, InMemoryLock, Lease};
    /// # use lock_core::DisabledLock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// async fn warm_tariff_cache(lock: &dyn DistributedLock) -> Result<u32, lock_core::LockError> {
    ///     let warmed = lock
    ///         .with_lock_fail_open("cache-warm:tariffs", Lease::Watchdog, || async {
    ///             120 // entries loaded; loading them twice costs only time
    ///         })
    ///         .await?; // Err only for an invalid key or lease (a bug): the section did not run
    ///     if let Some(unguarded) = warmed.unguarded() {
    ///         // Already logged as a WARN; count it if you alert on fail-open runs.
    ///         eprintln!("{unguarded}");
    ///     }
    ///     Ok(warmed.into_value())
    /// }
    ///
    /// assert_eq!(warm_tariff_cache(&InMemoryLock::new()).await?, 120);
    /// // Switched off: still warmed, unguarded, reason `lock_disabled`.
    /// assert_eq!(warm_tariff_cache(&DisabledLock::new("enabled = false")).await?, 120);
    /// # Ok(()) }
    /// ```
    ///
    /// With a wait time of its own:
    ///
    /// ```
    /// use std::time::Duration;
    /// # use lock_core::{AcquireOptions, DistributedLock, DistributedLockExt, InMemoryLock};
    /// # use lock_core::{Lease, UnguardedReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// # let lock = InMemoryLock::new();
    /// let other_pod = lock.try_acquire("digest:2026-11-30", Lease::Watchdog).await?;
    ///
    /// // Wait at most 200 ms for the other pod, then send the digest anyway.
    /// let options = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::from_millis(200))?;
    /// let sent = lock
    ///     .with_lock_fail_open("digest:2026-11-30", options, || async { "sent" })
    ///     .await?;
    /// assert_eq!(sent.unguarded().unwrap().reason(), UnguardedReason::WaitTimeElapsed);
    /// assert_eq!(sent.into_value(), "sent");
    /// # drop(other_pod);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidKey`], [`LockError::InvalidArgument`] (`LOCK_INVALID_ARGUMENT`, HTTP
    /// 500): the key or lease is rejected before any backend call — a defect of the caller, so
    /// the section does not run. No other error: every other outcome runs the section.
    fn with_lock_fail_open<F, Fut, T>(
        &self,
        key: &str,
        options: impl Into<AcquireOptions>,
        critical_section: F,
    ) -> impl Future<Output = Result<FailOpen<T>, LockError>> + Send
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        crate::lock::fail_open::with_lock_fail_open(self, key, options.into(), critical_section)
    }
}

impl<L: DistributedLock + ?Sized> DistributedLockExt for L {}
