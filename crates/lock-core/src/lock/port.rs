//! The port: [`DistributedLock`]. Its per-call options are
//! [`AcquireOptions`](crate::AcquireOptions), its closure helpers (`with_lock`)
//! [`DistributedLockExt`](crate::DistributedLockExt).

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
///   An outage is never reported as contention, nor a timeout as a grant. (A call site may still
///   choose to run its section without the lock, by name:
///   [`DistributedLockExt::with_lock_fail_open`](crate::DistributedLockExt::with_lock_fail_open); the acquisition itself fails all the same.)
/// - **Leases.** [`Lease::Fixed`] ends at its duration; [`Lease::Watchdog`] is renewed while the
///   holder's process lives and ends within one watchdog timeout after it dies.
/// - **Release.** Owner-checked: releasing (or dropping) a handle whose lease has ended never
///   frees a lock another owner holds now. Dropping a handle releases in the background.
/// - **Minimum hold.** A release sooner than [`AcquireOptions::hold_at_least`] after the grant
///   reports `Released` but leaves the key held by its owner, unrenewed, until grant + hold on
///   the backend's clock; other acquisitions see it held until then and are granted after.
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
///   waiters queued is not granted ([`AcquireFailure::WaitersAhead`](crate::AcquireFailure::WaitersAhead) when its wait is spent).
/// - **Re-entry.** Inside a [`DistributedLockExt::with_lock`](crate::DistributedLockExt::with_lock) scope, an acquisition of the same
///   key through a lock of the same [`namespace`](DistributedLock::namespace) by the same task
///   re-enters: it returns at once with a nested handle on the held lease
///   ([`LockHandle::is_reentrant`]), without a backend call; the outer lease, owner and fencing
///   token are kept, and the lease and wait of the nested call are ignored. Nested sections
///   of one scope run one at a time: a re-entry while another runs (only a future running
///   beside it inside the scope, `join!`/`select!`, can ask then) waits for it up to its wait
///   time. Any other acquisition — another task, or outside such a scope — contends.
/// - **Shutdown.** [`shutdown(timeout)`](DistributedLock::shutdown) releases every lease this
///   client still holds, watchdog and fixed (their handles' `lost()` fires first, with
///   [`LostReason::ShutDown`](crate::LostReason::ShutDown)), and waits up to `timeout` for the
///   background releases of dropped handles and abandoned acquisitions; it returns a
///   [`ShutdownSummary`]. From then on every acquisition through this client, one still waiting
///   included, fails with [`LockError::ShutDown`] (`LOCK_DISABLED`, reason `shut_down`); other
///   clients of the backend are not affected.
///
/// The lock is a lease, not a proof: a holder paused longer than its lease can still act after
/// losing it. Pass the fencing token to the store you write to when that matters.
///
/// The trait is object safe; services hold it as `Arc<dyn DistributedLock>`. Closure-based
/// helpers live in [`DistributedLockExt`](crate::DistributedLockExt), implemented for every `DistributedLock`.
///
/// # Implementing
/// Implement [`namespace`](DistributedLock::namespace) and
/// [`acquire_lease`](DistributedLock::acquire_lease); the provided
/// [`acquire_with`](DistributedLock::acquire_with) validates the arguments and handles re-entry
/// before calling `acquire_lease`. Implement [`shutdown`](DistributedLock::shutdown) too unless
/// the backend's releases finish inside `drop` and refusing grants after shutdown does not
/// matter ([`HeldLeases`](crate::HeldLeases) does the bookkeeping). Run the conformance suite
/// against the result.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::{DistributedLock, InMemoryLock, Lease, LockError};
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
/// // Services get the Redis lock from lock-starter; tests hand in an InMemoryLock.
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
    /// The lock space this lock guards: two locks with the same namespace guard the same keys
    /// (same backend, same key prefix); re-entry is decided per namespace and key. For example
    /// `redis://cache:6379/0 lock:`. Never contains credentials.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::{DisabledLock, DistributedLock, InMemoryLock};
    ///
    /// let table = InMemoryLock::new();
    /// assert_eq!(table.clone().namespace(), table.namespace()); // clones share the locks
    /// assert_ne!(InMemoryLock::new().namespace(), table.namespace()); // a separate table
    /// assert_eq!(DisabledLock::new("enabled = false").namespace(), "disabled");
    /// ```
    fn namespace(&self) -> &str;

    /// The implementation hook: waits for and grants a lease on `key`. Called by
    /// [`acquire_with`](DistributedLock::acquire_with) only, after the key and options were
    /// validated and re-entry ruled out; callers use `acquire_with`.
    ///
    /// # Errors
    /// [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`) when not granted.
    ///
    /// # Examples
    ///
    /// A lock that delegates to another and counts the acquisitions reaching it (it forwards
    /// [`shutdown`](DistributedLock::shutdown) too, so the wrapped lock's leases are released at
    /// exit):
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use async_trait::async_trait;
    /// use lock_core::{
    ///     AcquireOptions, DistributedLock, InMemoryLock, Lease, LockError, LockHandle,
    ///     ShutdownSummary,
    /// };
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
    ///     async fn acquire_lease(
    ///         &self,
    ///         key: &str,
    ///         options: AcquireOptions,
    ///     ) -> Result<LockHandle, LockError> {
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
    ///
    /// Runs in a `lock.acquire` span and records the acquisition metrics
    /// ([`telemetry`](crate::telemetry)), for every implementation that keeps this provided
    /// method.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, DistributedLock, InMemoryLock, Lease};
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

    /// Acquires `key` with `lease`, waiting up to the configured wait time.
    ///
    /// # Errors
    /// As [`acquire_with`](DistributedLock::acquire_with).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::{DistributedLock, InMemoryLock, Lease, LockError, ReleaseOutcome};
    ///
    /// async fn bill_run(lock: &dyn DistributedLock, period: &str) -> Result<(), LockError> {
    ///     let handle = lock.acquire(&format!("bill-run:{period}"), Lease::Watchdog).await?;
    ///     // … the bill run, watching `handle.lost()` if it must stop when the lease ends …
    ///     if handle.release().await? == ReleaseOutcome::NotHeld {
    ///         eprintln!("the lease ended before the bill run did");
    ///     }
    ///     Ok(())
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// bill_run(&InMemoryLock::new(), "2026-11").await?;
    /// # Ok(()) }
    /// ```
    async fn acquire(&self, key: &str, lease: Lease) -> Result<LockHandle, LockError> {
        self.acquire_with(key, AcquireOptions::new(lease)).await
    }

    /// Makes exactly one attempt to acquire `key`, without waiting.
    ///
    /// # Errors
    /// As [`acquire_with`](DistributedLock::acquire_with); a held key fails at once with reason
    /// `held_by_another_owner`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::{DistributedLock, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let held = lock.try_acquire("msisdn-reaper", Lease::Watchdog).await?;
    ///
    /// let error = lock.try_acquire("msisdn-reaper", Lease::Watchdog).await.unwrap_err();
    /// assert_eq!(error.details()["reason"], "held_by_another_owner");
    /// assert_eq!(error.details()["holder"], held.owner());
    /// # Ok(()) }
    /// ```
    async fn try_acquire(&self, key: &str, lease: Lease) -> Result<LockHandle, LockError> {
        let once = AcquireOptions::new(lease).wait_time(Duration::ZERO);
        self.acquire_with(key, once.expect("0 is a wait time"))
            .await
    }

    /// Shuts this client down before the process exits: releases every lease it still holds
    /// (watchdog and fixed; each handle's `lost()` fires first, with
    /// [`LostReason::ShutDown`](crate::LostReason::ShutDown)), waits for the background releases
    /// of dropped handles and abandoned acquisitions, and refuses every later acquisition with
    /// [`LockError::ShutDown`] (`LOCK_DISABLED`). Returns within `timeout` (plus scheduling),
    /// whatever the backend does; releases still under way then are counted as
    /// [`pending`](ShutdownSummary::pending) and go on while the process lives.
    ///
    /// A dropped handle releases in the background, so a process that drops one and returns
    /// from `main` may exit before the release reaches the backend, leaving the key held for
    /// its whole lease. Call this last. Calling it again waits for what is still pending.
    ///
    /// There is no provided method: a lock that wraps another must forward it, or the leases of
    /// the wrapped lock stay held at exit. The conformance check `shutdown_releases_and_refuses`
    /// holds every backend to the contract.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::{DEFAULT_SHUTDOWN_TIMEOUT, DistributedLock, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let handle = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// drop(handle); // released in the background
    ///
    /// // The last thing `main` does:
    /// let summary = lock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
    /// assert!(summary.is_complete(), "{summary}");
    ///
    /// let error = lock.acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
    /// assert_eq!(error.details()["reason"], "shut_down");
    /// # Ok(()) }
    /// ```
    async fn shutdown(&self, timeout: Duration) -> ShutdownSummary;
}
