//! [`DistributedLockExt`]: `with_lock` and its fail-open variant.

use std::future::Future;

use crate::error::LockError;
use crate::lock::fail_open::FailOpen;
use crate::lock::options::AcquireOptions;
use crate::lock::port::DistributedLock;

/// Closure helpers for every [`DistributedLock`], `dyn DistributedLock` included.
pub trait DistributedLockExt: DistributedLock {
    /// Acquires `key`, runs `critical_section`, releases, and returns the section's value.
    ///
    /// `options` is a [`Lease`](crate::lock::Lease) or [`AcquireOptions`]. The section runs only if the
    /// lock was granted, and the lock is released when the section completes, panics or is
    /// dropped. A failed release, or a lease that ran out before the section finished, is logged
    /// as a `WARN`, not returned: react to a lost lease with [`DistributedLock::acquire`] and
    /// [`LockHandle::lost`](crate::lock::LockHandle::lost) instead. Inside the section the same task
    /// re-enters the key, as the contract of [`DistributedLock`] says.
    ///
    /// # Errors
    /// As [`DistributedLock::acquire_with`]. When it errs, the section did not run.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::lock::{AcquireOptions, DistributedLock, DistributedLockExt, InMemoryLock, Lease};
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

    /// Like [`with_lock`](DistributedLockExt::with_lock), but runs `critical_section` unguarded
    /// when the lock is not granted.
    ///
    /// For work where not running hurts more than running twice, such as warming a cache.
    /// docs/failure-policy.md helps choose between the two.
    ///
    /// # Contract
    /// - Granted: as `with_lock`, giving [`FailOpen::Guarded`].
    /// - Not granted: a `WARN` (fields `lock_key`, `reason`, `error`), then the section runs once
    ///   without the lock, giving [`FailOpen::Unguarded`] with the reason and the error a
    ///   fail-closed call would have returned ([`Unguarded`](crate::lock::Unguarded)).
    /// - The section runs at most once and its value is always returned, its own `Err` included.
    /// - It starts within the wait time plus one backend command timeout.
    /// - An unguarded section holds no lease: acquisitions of the key inside it contend.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`], [`LockError::InvalidArgument`] (`LOCK_INVALID_ARGUMENT`, HTTP
    /// 500): a key or lease rejected before any backend call, and the section did not run. Every
    /// other outcome runs the section.
    ///
    /// # Examples
    ///
    /// ```
    /// # use lock_core::lock::{DistributedLock, DistributedLockExt, FailOpen, InMemoryLock, Lease};
    /// # use lock_core::lock::DisabledLock;
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
    /// assert_eq!(warm_tariff_cache(&DisabledLock::new("switched off")).await?, 120);
    /// # Ok(()) }
    /// ```
    ///
    /// With a wait time of its own:
    ///
    /// ```
    /// use std::time::Duration;
    /// # use lock_core::lock::{AcquireOptions, DistributedLock, DistributedLockExt, InMemoryLock};
    /// # use lock_core::lock::{Lease, UnguardedReason};
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
