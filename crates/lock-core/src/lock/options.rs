//! The per-call options of an acquisition: [`AcquireOptions`].

use std::time::Duration;

use crate::error::LockError;
use crate::lock::lease::Lease;

/// The wait time of an acquisition that names none, where the lock has no configured one: 5 s,
/// as the default of `telco.platform.lock.wait-time` (the in-memory lock's default, and what a
/// re-entry beside a running nested section waits).
pub const DEFAULT_WAIT_TIME: Duration = Duration::from_secs(5);

/// Per-call options of an acquisition.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::lock::{AcquireOptions, Lease};
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
    /// (one attempt, no waiting) to [`crate::lock::MAX_WAIT`] (1 hour).
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
    /// use lock_core::lock::{AcquireOptions, DistributedLock, InMemoryLock, Lease};
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
    /// Accepted: 0 (the default: no minimum hold) up to [`MAX_LEASE`](crate::lock::MAX_LEASE) (7
    /// days); with [`Lease::Fixed`], at most the lease — the key ends with its lease, so a
    /// longer hold could not be kept and is rejected rather than capped.
    ///
    /// The hold is measured on the backend's clock (for Redis: the server's `TIME`, never a
    /// client's clock), from the grant. Contract:
    /// - the release is still owner-checked and still reports
    ///   [`ReleaseOutcome::Released`](crate::lock::ReleaseOutcome::Released); the handle stops renewing at once, and for a watchdog
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
    /// use lock_core::lock::{AcquireOptions, DistributedLock, DistributedLockExt, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let pod_a = InMemoryLock::new();
    /// let pod_b = pod_a.clone(); // another client of the same locks, as pods sharing a Redis
    /// let tick = AcquireOptions::new(Lease::Fixed(Duration::from_secs(50)))
    ///     .wait(Duration::ZERO)
    ///     .hold_at_least(Duration::from_secs(30));
    /// pod_a.with_lock("msisdn-reaper", tick, || tokio::time::sleep(Duration::from_millis(10))).await?;
    ///
    /// tokio::time::sleep(Duration::from_secs(2)).await; // pod B's tick comes 2 s late
    /// let late = pod_b.with_lock("msisdn-reaper", tick, || async {}).await.unwrap_err();
    /// assert_eq!(late.details()["reason"], "held_by_another_owner");
    ///
    /// tokio::time::sleep(Duration::from_secs(30)).await; // the next tick
    /// pod_b.with_lock("msisdn-reaper", tick, || async {}).await?;
    ///
    /// let too_long = tick.hold_at_least(Duration::from_secs(60));
    /// assert_eq!(
    ///     too_long.validate("msisdn-reaper").unwrap_err().to_string(),
    ///     "invalid hold-at-least 60 s for lock `msisdn-reaper`: accepted: 0 to the fixed lease 50 s (the key ends with its lease)"
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
    /// use lock_core::lock::{AcquireOptions, Lease};
    ///
    /// let options = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_secs(30));
    /// assert!(options.validate("bill-run:2026-11").is_ok());
    /// assert!(options.validate("").is_err());
    ///
    /// let too_long = AcquireOptions::new(Lease::Watchdog).wait(Duration::from_secs(2 * 3600));
    /// assert_eq!(
    ///     too_long.validate("bill-run:2026-11").unwrap_err().to_string(),
    ///     "invalid wait 2 h for lock `bill-run:2026-11`: accepted: 0 to 1 h"
    /// );
    /// ```
    pub fn validate(&self, key: &str) -> Result<(), LockError> {
        crate::key::validate_key(key)?;
        self.lease.validate().map_err(|e| e.for_key(key))?;
        crate::lock::lease::validate_hold_at_least(self.hold_at_least, self.lease)
            .map_err(|e| e.for_key(key))?;
        if let Some(wait) = self.wait {
            crate::lock::lease::validate_wait(wait).map_err(|e| e.for_key(key))?;
        }
        Ok(())
    }
}

/// A lease with the default options: `with_lock(key, Lease::Watchdog, …)` and
/// `with_lock(key, AcquireOptions::new(…).wait(…), …)` are the same call.
impl From<Lease> for AcquireOptions {
    fn from(lease: Lease) -> Self {
        AcquireOptions::new(lease)
    }
}
