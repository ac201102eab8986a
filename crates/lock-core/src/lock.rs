//! The port: [`DistributedLock`], its per-call options, and [`DistributedLockExt::with_lock`]
//! (and its fail-open variant).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::LockError;
use crate::fail_open::FailOpen;
use crate::handle::{LockHandle, ReleaseOutcome};
use crate::lease::Lease;
use crate::shutdown::ShutdownSummary;

/// Per-call options of an acquisition.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, Lease};
///
/// let opts = AcquireOptions::new(Lease::Fixed(Duration::from_secs(10))).wait(Duration::ZERO);
/// assert_eq!(opts.lease(), Lease::Fixed(Duration::from_secs(10)));
/// assert_eq!(opts.wait_time(), Some(Duration::ZERO));
/// assert!(!opts.is_fair());
/// assert_eq!(AcquireOptions::new(Lease::Watchdog).wait_time(), None); // the configured wait
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
    hold_at_least: Duration,
}

impl AcquireOptions {
    /// Options with this lease and the lock's configured wait time.
    pub fn new(lease: Lease) -> Self {
        AcquireOptions {
            lease,
            wait: None,
            fair: false,
            hold_at_least: Duration::ZERO,
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
    /// backend within a bounded time (for Redis: the fair waiter timeout plus one command
    /// timeout, 7 s by default), so a
    /// dead waiter never blocks the queue for longer. The wait time is honoured as for any
    /// acquisition. With a wait of zero, a fair acquisition is granted only when the lock is free
    /// and no fair waiter is queued.
    ///
    /// The order is the order the requests reach the backend: make the calls in the order you
    /// want. A fair acquisition whose wait is spent while earlier fair waiters are still queued
    /// fails with reason `waiters_ahead` ([`AcquireFailure::WaitersAhead`](crate::AcquireFailure::WaitersAhead))
    /// when the lock itself is free, else `held_by_another_owner`. Like any acquisition, one whose
    /// first attempt finds the backend unavailable fails closed at once; a queued fair waiter
    /// retries passing failures until its wait is spent.
    ///
    /// Fairness holds among fair acquisitions: a non-fair acquisition of the same key may still
    /// take a free lock ahead of the queue. Use one mode per key. For Redis, the dead-waiter
    /// bound is set by `telco.platform.lock.fair-waiter-timeout`.
    ///
    /// # Examples
    ///
    /// Three consumers of one ticket's change events take the lock in the order they asked:
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, DistributedLock, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let holder = lock.try_acquire("cdc:ticket-4711", Lease::Watchdog).await?;
    ///
    /// let fair = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_secs(10)).fair();
    /// let mut consumers = Vec::new();
    /// for event in ["created", "updated", "closed"] {
    ///     let lock = lock.clone();
    ///     consumers.push(tokio::spawn(async move {
    ///         let handle = lock.acquire_with("cdc:ticket-4711", fair).await?;
    ///         Ok::<_, lock_core::LockError>((event, handle.fencing_token()))
    ///     }));
    ///     tokio::task::yield_now().await; // let it join the queue before the next one asks
    /// }
    /// drop(holder);
    ///
    /// let mut last_token = 0;
    /// for (consumer, event) in consumers.into_iter().zip(["created", "updated", "closed"]) {
    ///     let (applied, token) = consumer.await.unwrap()?;
    ///     assert_eq!(applied, event);
    ///     assert!(token > last_token, "granted in arrival order");
    ///     last_token = token;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Asks for a *minimum hold* (ShedLock's `lockAtLeastFor`): a release — explicit, by drop,
    /// or at the end of a `with_lock` section — that comes sooner than `hold` after the grant
    /// leaves the key held until grant + `hold` instead of freeing it. For a scheduled job
    /// that every pod runs each tick: a sweep shorter than the clock skew between the pods'
    /// ticks would otherwise free the key in time for a late pod to sweep the same tick again.
    ///
    /// Accepted: 0 (the default: no minimum hold) up to [`MAX_LEASE`](crate::MAX_LEASE) (7
    /// days); with [`Lease::Fixed`], at most the lease — the key ends with its lease, so a
    /// longer hold could not be kept and is rejected rather than capped.
    ///
    /// The hold is measured on the backend's clock (for Redis: the server's `TIME`, never a
    /// client's clock), from the grant. Contract:
    /// - the release is still owner-checked and still reports
    ///   [`ReleaseOutcome::Released`]; the handle stops renewing at once, and for a watchdog
    ///   lease the key's TTL becomes the rest of the minimum hold — no renewal keeps it longer;
    /// - the key stays held by the releasing owner: other acquisitions, fair ones too, see it
    ///   held (`held_by_another_owner`, with the hold's remaining TTL) and are granted when it
    ///   ends, with a greater fencing token; waiters woken by the release find the key held and
    ///   wait for that TTL;
    /// - a holder that dies without releasing is not held longer than its lease: the minimum
    ///   hold only delays a release; nor is a grant that never reached its caller (an
    ///   acquisition that failed or was cancelled after the backend granted it) — its clean-up
    ///   frees the key at once;
    /// - an operator's forced release (Redis: `RedisLock::force_release`) ignores it;
    /// - a re-entrant acquisition ignores it, as its lease and wait: the outer grant's applies.
    ///
    /// # Examples
    ///
    /// Two pods tick at about the same time; the first sweeps in 10 ms, the second finds the
    /// key still held for the rest of the tick:
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, DistributedLock, DistributedLockExt, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let pod_a = InMemoryLock::new();
    /// let pod_b = pod_a.clone(); // another client of the same locks, as pods sharing a Redis
    /// let tick = AcquireOptions::new(Lease::Fixed(Duration::from_secs(50)))
    ///     .wait(Duration::ZERO)
    ///     .hold_at_least(Duration::from_secs(30));
    /// pod_a.with_lock_opts("msisdn-reaper", tick, || tokio::time::sleep(Duration::from_millis(10))).await?;
    ///
    /// tokio::time::sleep(Duration::from_secs(2)).await; // pod B's tick comes 2 s late
    /// let late = pod_b.with_lock_opts("msisdn-reaper", tick, || async {}).await.unwrap_err();
    /// assert_eq!(late.details()["reason"], "held_by_another_owner");
    ///
    /// tokio::time::sleep(Duration::from_secs(30)).await; // the next tick
    /// pod_b.with_lock_opts("msisdn-reaper", tick, || async {}).await?;
    ///
    /// let too_long = tick.hold_at_least(Duration::from_secs(60));
    /// assert_eq!(
    ///     too_long.validate("msisdn-reaper").unwrap_err().to_string(),
    ///     "invalid hold-at-least 1m for lock `msisdn-reaper`: accepted: 0s to the fixed lease 50s (the key ends with its lease)"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.hold_at_least = hold;
        self
    }

    /// The minimum hold (see [`hold_at_least`](AcquireOptions::hold_at_least)); zero for none.
    pub fn minimum_hold(&self) -> Duration {
        self.hold_at_least
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
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, Lease};
    ///
    /// let options = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_secs(30));
    /// assert!(options.validate("bill-run:2026-11").is_ok());
    /// assert!(options.validate("").is_err());
    ///
    /// let too_long = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_secs(2 * 3600));
    /// assert_eq!(
    ///     too_long.validate("bill-run:2026-11").unwrap_err().to_string(),
    ///     "invalid wait 2h for lock `bill-run:2026-11`: accepted: 0s to 1h"
    /// );
    /// ```
    pub fn validate(&self, key: &str) -> Result<(), LockError> {
        crate::key::validate_key(key)?;
        self.lease.validate().map_err(|e| e.for_key(key))?;
        crate::lease::validate_hold_at_least(self.hold_at_least, self.lease)
            .map_err(|e| e.for_key(key))?;
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
///   An outage is never reported as contention, nor a timeout as a grant. (A call site may still
///   choose to run its section without the lock, by name:
///   [`DistributedLockExt::with_lock_fail_open`]; the acquisition itself fails all the same.)
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
/// - **Re-entry.** Inside a [`DistributedLockExt::with_lock`] scope, an acquisition of the same
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
/// helpers live in [`DistributedLockExt`], implemented for every `DistributedLock`.
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
    /// let patient = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_secs(1));
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
        crate::telemetry::acquire(key, options, async {
            options.validate(key)?;
            let wait = options.wait_time().unwrap_or(crate::DEFAULT_WAIT_TIME);
            if let Some(nested) = crate::reentrant::enter(self.namespace(), key, wait).await {
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
        self.acquire_with(key, AcquireOptions::new(lease).wait(Duration::ZERO))
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
    /// [`LockHandle::lost`] to react to that.
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
    ///
    /// # Examples
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
    /// let once = AcquireOptions::new(Lease::Watchdog).wait(Duration::ZERO);
    /// let result = lock
    ///     .with_lock_opts("bill-run:2026-11", once, || async { unreachable!("not granted") })
    ///     .await;
    /// let error = result.unwrap_err(); // the section did not run
    /// assert_eq!(error.details()["holder"], other_pod.owner());
    /// # Ok(()) }
    /// ```
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
            Ok(run_holding(self.namespace(), key, handle, critical_section).await)
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
    /// starts no later than the wait time (the configured one; the per-call one with
    /// [`with_lock_opts_fail_open`](DistributedLockExt::with_lock_opts_fail_open)) plus one
    /// backend command timeout. An unguarded section holds no lease: acquisitions of the same
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
    /// # Errors
    /// [`LockError::InvalidKey`], [`LockError::InvalidArgument`] (`LOCK_INVALID_ARGUMENT`, HTTP
    /// 500): the key or lease is rejected before any backend call — a defect of the caller, so
    /// the section does not run. No other error: every other outcome runs the section.
    fn with_lock_fail_open<F, Fut, T>(
        &self,
        key: &str,
        lease: Lease,
        critical_section: F,
    ) -> impl Future<Output = Result<FailOpen<T>, LockError>> + Send
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.with_lock_opts_fail_open(key, AcquireOptions::new(lease), critical_section)
    }

    /// [`with_lock_fail_open`](DistributedLockExt::with_lock_fail_open) with per-call options:
    /// a wait time (how long contention may delay the section before it runs unguarded; zero =
    /// one attempt), a fair acquisition.
    ///
    /// # Examples
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
    /// let options = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_millis(200));
    /// let sent = lock
    ///     .with_lock_opts_fail_open("digest:2026-11-30", options, || async { "sent" })
    ///     .await?;
    /// assert_eq!(sent.unguarded().unwrap().reason(), UnguardedReason::WaitTimeElapsed);
    /// assert_eq!(sent.into_value(), "sent");
    /// # drop(other_pod);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`with_lock_fail_open`](DistributedLockExt::with_lock_fail_open): only
    /// `LOCK_INVALID_ARGUMENT` (a bad key, lease or wait), and then the section did not run.
    fn with_lock_opts_fail_open<F, Fut, T>(
        &self,
        key: &str,
        options: AcquireOptions,
        critical_section: F,
    ) -> impl Future<Output = Result<FailOpen<T>, LockError>> + Send
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        crate::fail_open::with_lock_fail_open(self, key, options, critical_section)
    }
}

impl<L: DistributedLock + ?Sized> DistributedLockExt for L {}

/// The granted path of every `with_lock*`: runs `critical_section` holding `handle` (registered
/// for re-entry), then releases it and logs — does not return — a lease that had ended or a
/// release that was not confirmed. A re-entrant handle is left to the enclosing scope.
pub(crate) async fn run_holding<F, Fut, T>(
    namespace: &str,
    key: &str,
    handle: LockHandle,
    critical_section: F,
) -> T
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = T>,
{
    if handle.is_reentrant() {
        // The outer scope holds the lease and releases it.
        let value = crate::reentrant::nested_section(namespace, key, critical_section()).await;
        drop(handle);
        return value;
    }
    let value = crate::reentrant::scope(namespace, &handle, critical_section()).await;
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
    value
}
