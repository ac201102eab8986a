//! The port: [`DistributedLock`], its per-call options, and [`DistributedLockExt::with_lock`].

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

#[cfg(doc)]
use crate::error::AcquireFailure;
use crate::error::LockError;
use crate::handle::{LockHandle, ReleaseOutcome};
use crate::lease::Lease;

/// Per-call options of an acquisition.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, Lease};
///
/// let opts = AcquireOptions::new(Lease::Fixed(Duration::from_secs(10))).wait(Duration::ZERO);
/// assert_eq!(opts.wait_time(), Some(Duration::ZERO));
///
/// // Apply one entity's change events in the order their consumers asked for the lock.
/// let ordered = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_secs(30)).fair();
/// assert!(ordered.is_fair());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AcquireOptions {
    lease: Lease,
    wait: Option<Duration>,
    fair: bool,
}

impl AcquireOptions {
    /// Options with this lease and the lock's configured wait time.
    pub fn new(lease: Lease) -> Self {
        AcquireOptions {
            lease,
            wait: None,
            fair: false,
        }
    }

    /// Overrides the configured wait time for this call: how long to wait for a held lock, from 0
    /// (one attempt, no waiting) to [`crate::MAX_WAIT`] (1 hour).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Asks for a *fair* acquisition: among the fair acquisitions of a key, the lock is granted
    /// in the order they asked for it, across all clients and processes (first in, first out).
    /// Use it when the order of the work matters, e.g. applying one entity's change events.
    ///
    /// A fair waiter holds a place in the key's queue while it waits. A waiter that gives up,
    /// fails or is dropped leaves the queue at once; one whose process dies is evicted by the
    /// backend within a bounded time (for Redis: the fair waiter timeout, 5 s by default), so a
    /// dead waiter never blocks the queue for longer. The wait time is honoured as for any
    /// acquisition. With a wait of zero, a fair acquisition is granted only when the lock is free
    /// and no fair waiter is queued.
    ///
    /// Fairness holds among fair acquisitions: a non-fair acquisition of the same key may still
    /// take a free lock ahead of the queue. Use one mode per key.
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Whether this is a fair acquisition (see [`fair`](AcquireOptions::fair)).
    pub fn is_fair(&self) -> bool {
        self.fair
    }

    /// The lease to request.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The per-call wait time, if overridden.
    pub fn wait_time(&self) -> Option<Duration> {
        self.wait
    }

    /// Validates the key, the lease and the wait before anything is sent to a backend.
    /// Implementations call this first.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] or [`LockError::InvalidArgument`] (code `LOCK_INVALID_ARGUMENT`).
    pub fn validate(&self, key: &str) -> Result<(), LockError> {
        crate::key::validate_key(key)?;
        self.lease.validate().map_err(|e| e.for_key(key))?;
        if let Some(wait) = self.wait {
            crate::lease::validate_wait(wait).map_err(|e| e.for_key(key))?;
        }
        Ok(())
    }
}

/// Mutual exclusion across processes: at most one holder per key at a time, for the length of a
/// lease.
///
/// # Contract
/// Every implementation passes the conformance suite (`lock_core::conformance`, feature
/// `conformance`). In short:
/// - **Exclusion.** While a lease is held, no other acquisition of the same key succeeds, in this
///   process or any other sharing the backend.
/// - **Wait.** `acquire_with` waits up to the wait time (the per-call override, else the
///   configured default) for a held key; zero means one attempt. It returns no later than the
///   wait time plus one backend command timeout, whatever the backend does.
/// - **Fail closed.** When the lock is not granted — contention outlasting the wait, an
///   unreachable, slow or failing backend — the call returns
///   [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`, HTTP 503) and never a handle.
///   An outage is never reported as contention, nor a timeout as a grant.
/// - **Leases.** [`Lease::Fixed`] ends at its duration; [`Lease::Watchdog`] is renewed while the
///   holder's process lives and ends within one watchdog timeout after it dies.
/// - **Release.** Owner-checked: releasing (or dropping) a handle whose lease has ended never
///   frees a lock another owner holds now. Dropping a handle releases in the background.
/// - **Fencing.** Each grant carries a fencing token ([`LockHandle::fencing_token`], a `u64`)
///   strictly greater than every earlier grant's token for that key, whichever client or process
///   received it.
/// - **Owners.** Every acquisition has its own owner token ([`LockHandle::owner`]), starting with
///   the readable instance id; a release — even a late, retried one — only ever frees the grant
///   made for its own acquisition.
/// - **Lost leases.** [`LockHandle::is_held`] turns false and [`LockHandle::lost`] fires when a
///   renewal finds the key gone or taken, or when the local monotonic deadline (last confirmed
///   expiry minus a safety margin) passes without a confirmed renewal — before the backend can
///   grant the key to anyone else, as long as it does not lose the key. Renewal never re-creates
///   a missing key; after a release, `lost()` never fires.
/// - **Outcome unknown.** An acquisition that fails, times out or whose future is dropped at any
///   await point leaves no grant behind beyond one lease, no subscription and no renewal: a
///   grant it may have caused is released (owner-checked) in the background.
/// - **Validation.** Bad keys and durations are rejected before any backend call, with
///   `LOCK_INVALID_ARGUMENT`.
/// - **Fairness.** Acquisitions with [`AcquireOptions::fair`] are granted in the order they
///   asked, among the fair acquisitions of a key, across clients; a fair waiter that dies is
///   evicted from the queue within a bounded, documented time, and one that gives up or is
///   dropped leaves it at once. A fair acquisition that finds the lock free but earlier fair
///   waiters queued is not granted ([`AcquireFailure::WaitersAhead`] when its wait is spent).
/// - **Re-entry.** Inside a [`DistributedLockExt::with_lock`] scope, an acquisition of the same
///   key through a lock of the same [`namespace`](DistributedLock::namespace) by the same task
///   re-enters: it returns at once with a nested handle on the held lease
///   ([`LockHandle::is_reentrant`]), without a backend call; the outer lease, owner and fencing
///   token are kept, and the lease and wait of the nested call are ignored. Any other
///   acquisition — another task, or outside such a scope — contends.
///
/// The lock is a lease, not a proof: a holder paused longer than its lease can still act after
/// losing it. Pass the fencing token to the store you write to when that matters.
///
/// The trait is object safe; services hold it as `Arc<dyn DistributedLock>`. Closure-based
/// helpers live in [`DistributedLockExt`], implemented for every `DistributedLock`.
///
/// # Implementing
/// Implement [`namespace`](DistributedLock::namespace) and
/// [`acquire_lease`](DistributedLock::acquire_lease); the provided
/// [`acquire_with`](DistributedLock::acquire_with) validates the arguments and handles re-entry
/// before calling `acquire_lease`. Run the conformance suite against the result.
#[async_trait]
pub trait DistributedLock: Send + Sync + fmt::Debug {
    /// The lock space this lock guards: two locks with the same namespace guard the same keys
    /// (same backend, same key prefix); re-entry is decided per namespace and key. For example
    /// `redis://cache:6379/0 lock:`. Never contains credentials.
    fn namespace(&self) -> &str;

    /// The implementation hook: waits for and grants a lease on `key`. Called by
    /// [`acquire_with`](DistributedLock::acquire_with) only, after the key and options were
    /// validated and re-entry ruled out; callers use `acquire_with`.
    ///
    /// # Errors
    /// [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`) when not granted.
    async fn acquire_lease(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError>;

    /// Acquires `key` with the given options, waiting up to the wait time for a held key (the
    /// per-call wait, else the configured default; 0 = one attempt). Returns no later than the
    /// wait time plus one backend command timeout.
    ///
    /// # Errors
    /// - [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`, HTTP 503): not granted;
    ///   its reason tells contention (holder, TTL) from an unavailable backend. The critical
    ///   section must not run.
    /// - [`LockError::InvalidKey`], [`LockError::InvalidArgument`] (`LOCK_INVALID_ARGUMENT`,
    ///   HTTP 500): rejected before any backend call.
    async fn acquire_with(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        options.validate(key)?;
        if let Some(nested) = crate::reentrant::enter(self.namespace(), key) {
            return Ok(nested);
        }
        self.acquire_lease(key, options).await
    }

    /// Acquires `key` with `lease`, waiting up to the configured wait time.
    ///
    /// # Errors
    /// As [`acquire_with`](DistributedLock::acquire_with).
    async fn acquire(&self, key: &str, lease: Lease) -> Result<LockHandle, LockError> {
        self.acquire_with(key, AcquireOptions::new(lease)).await
    }

    /// Makes exactly one attempt to acquire `key`, without waiting.
    ///
    /// # Errors
    /// As [`acquire_with`](DistributedLock::acquire_with); a held key fails at once with reason
    /// `held_by_another_owner`.
    async fn try_acquire(&self, key: &str, lease: Lease) -> Result<LockHandle, LockError> {
        self.acquire_with(key, AcquireOptions::new(lease).wait(Duration::ZERO))
            .await
    }
}

/// Closure helpers for every [`DistributedLock`], including `dyn DistributedLock`.
pub trait DistributedLockExt: DistributedLock {
    /// Acquires `key`, runs `critical_section`, releases, and returns its value: the safe default.
    ///
    /// The section does not run unless the lock was granted. The lock is released when the
    /// section's future completes, and also if it panics or is dropped (in the background). A
    /// failed release is logged, not returned: the work is done and its value is yours; the lease
    /// ends at its TTL. So is a lease that ran out before the section finished (a `WARN` says
    /// another owner may have run concurrently); use [`DistributedLock::acquire`] and
    /// [`LockHandle::lost`] to react to that.
    ///
    /// Inside the section, the same task acquiring the same key again (with `with_lock` or
    /// `acquire`) re-enters: see the `# Contract` of [`DistributedLock`].
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
    /// # Errors
    /// As [`DistributedLock::acquire_with`]; when it errs, the section did not run.
    fn with_lock<F, Fut, T>(
        &self,
        key: &str,
        lease: Lease,
        critical_section: F,
    ) -> impl Future<Output = Result<T, LockError>> + Send
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.with_lock_opts(key, AcquireOptions::new(lease), critical_section)
    }

    /// [`with_lock`](DistributedLockExt::with_lock) with per-call options (e.g. a wait time).
    ///
    /// # Errors
    /// As [`DistributedLock::acquire_with`]; when it errs, the section did not run.
    fn with_lock_opts<F, Fut, T>(
        &self,
        key: &str,
        options: AcquireOptions,
        critical_section: F,
    ) -> impl Future<Output = Result<T, LockError>> + Send
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move {
            let handle = self.acquire_with(key, options).await?;
            if handle.is_reentrant() {
                // The outer scope holds the lease and releases it.
                return Ok(critical_section().await);
            }
            let value =
                crate::reentrant::scope(self.namespace(), &handle, critical_section()).await;
            let still_held = handle.is_held();
            match handle.release().await {
                Ok(ReleaseOutcome::Released) => {}
                Ok(ReleaseOutcome::NotHeld) => tracing::warn!(
                    lock_key = key,
                    still_held_locally = still_held,
                    "the lease ended before the critical section finished; another owner may have run concurrently"
                ),
                Err(error) => tracing::warn!(
                    lock_key = key,
                    %error,
                    "release after the critical section was not confirmed; the lease ends at its TTL"
                ),
            }
            Ok(value)
        }
    }
}

impl<L: DistributedLock + ?Sized> DistributedLockExt for L {}
