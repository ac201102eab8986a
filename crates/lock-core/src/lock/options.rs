//! The per-call options of an acquisition: [`AcquireOptions`].

use std::time::Duration;

use crate::error::LockError;
use crate::lock::lease::{Lease, validate_hold_at_least, validate_wait};

/// The wait time of an acquisition where neither the call nor the lock sets one: 5 s.
pub const DEFAULT_WAIT_TIME: Duration = Duration::from_secs(5);

/// Per-call options of an acquisition.
///
/// Each setter that takes a value checks it and names it when it is out of range, as
/// [`IdempotencyOptions`](crate::idempotency::IdempotencyOptions) does. The lease is checked at the
/// acquisition.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::LockError;
/// use lock_core::lock::{AcquireOptions, Lease};
///
/// let opts = AcquireOptions::new(Lease::Fixed(Duration::from_secs(10))).wait_time(Duration::ZERO)?;
/// assert_eq!(opts.lease(), Lease::Fixed(Duration::from_secs(10)));
/// assert_eq!(opts.wait_override(), Some(Duration::ZERO));
/// assert_eq!(AcquireOptions::new(Lease::Watchdog).wait_override(), None); // the lock's wait
///
/// let error = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::from_secs(7200)).unwrap_err();
/// assert_eq!(error.to_string(), "invalid wait_time 2 h: accepted: 0 to 1 h");
/// # Ok::<(), LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AcquireOptions {
    lease: Lease,
    wait: Option<Duration>,
    fair: bool,
    hold_at_least: Duration,
}

impl AcquireOptions {
    /// Options with this lease and the lock's wait time.
    pub fn new(lease: Lease) -> Self {
        AcquireOptions {
            lease,
            wait: None,
            fair: false,
            hold_at_least: Duration::ZERO,
        }
    }

    /// How long to wait for a held lock, in place of the lock's wait time. 0 to 1 h, where 0
    /// makes one attempt.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `wait_time` for a value out of range.
    pub fn wait_time(mut self, wait: Duration) -> Result<Self, LockError> {
        validate_wait(wait)?;
        self.wait = Some(wait);
        Ok(self)
    }

    /// Asks for a *fair* acquisition: the fair acquisitions of a key are granted in the order
    /// they reached the backend, across clients and processes.
    ///
    /// # Contract
    /// - A waiter that gives up, fails or is dropped leaves the queue at once. One whose process
    ///   died is evicted within a bound the backend documents.
    /// - With a wait of zero, the lock is granted only when it is free and no fair waiter is
    ///   queued.
    /// - A wait spent with earlier fair waiters queued and the lock free fails with reason
    ///   `waiters_ahead`, else `held_by_another_owner`.
    /// - A first attempt that finds the backend unavailable fails closed at once. A queued
    ///   waiter retries passing failures until its wait is spent.
    /// - A non-fair acquisition of the same key may take a free lock ahead of the queue, so use
    ///   one mode per key.
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
    /// let fair = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::from_secs(10))?.fair();
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

    /// Asks for a *minimum hold*, as ShedLock's `lockAtLeastFor`: a release sooner than `hold`
    /// after the grant leaves the key held until then. For a scheduled job every pod runs each
    /// tick, so that a late pod does not run the same tick again. 0 to
    /// [`MAX_LEASE`](crate::lock::MAX_LEASE), and at most a fixed lease.
    ///
    /// # Contract
    /// - The hold is measured on the backend's clock, from the grant.
    /// - The release still reports [`ReleaseOutcome::Released`](crate::lock::ReleaseOutcome::Released)
    ///   and the handle stops renewing. The key stays held by its owner for the rest of the hold,
    ///   and other acquisitions see it held with that TTL.
    /// - A holder that dies is not held past its lease, and a grant that never reached its
    ///   caller is freed at once.
    /// - An operator's forced release and a re-entrant acquisition ignore it.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `hold_at_least` for a value out of range.
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
    ///     .wait_time(Duration::ZERO)?
    ///     .hold_at_least(Duration::from_secs(30))?;
    /// pod_a.with_lock("msisdn-reaper", tick, || tokio::time::sleep(Duration::from_millis(10))).await?;
    ///
    /// tokio::time::sleep(Duration::from_secs(2)).await; // pod B's tick comes 2 s late
    /// let late = pod_b.with_lock("msisdn-reaper", tick, || async {}).await.unwrap_err();
    /// assert_eq!(late.details()["reason"], "held_by_another_owner");
    ///
    /// tokio::time::sleep(Duration::from_secs(30)).await; // the next tick
    /// pod_b.with_lock("msisdn-reaper", tick, || async {}).await?;
    ///
    /// let too_long = tick.hold_at_least(Duration::from_secs(60)).unwrap_err();
    /// assert_eq!(
    ///     too_long.to_string(),
    ///     "invalid hold_at_least 60 s: accepted: 0 to the fixed lease 50 s (the key ends with its lease)"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn hold_at_least(mut self, hold: Duration) -> Result<Self, LockError> {
        validate_hold_at_least(hold, self.lease)?;
        self.hold_at_least = hold;
        Ok(self)
    }

    /// The [minimum hold](AcquireOptions::hold_at_least), zero for none.
    pub fn minimum_hold(&self) -> Duration {
        self.hold_at_least
    }

    /// Whether this is a [fair](AcquireOptions::fair) acquisition.
    pub fn is_fair(&self) -> bool {
        self.fair
    }

    /// The lease to request.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The wait time [set](AcquireOptions::wait_time) for this call, if any.
    pub fn wait_override(&self) -> Option<Duration> {
        self.wait
    }

    /// Checks the key and the lease, the values the setters do not check, before anything is
    /// sent to a backend. Implementations call this first.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] or [`LockError::InvalidArgument`], code
    /// `LOCK_INVALID_ARGUMENT`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::lock::{AcquireOptions, Lease};
    ///
    /// let options = AcquireOptions::new(Lease::Watchdog);
    /// assert!(options.validate("bill-run:2026-11").is_ok());
    /// assert!(options.validate("").is_err());
    ///
    /// let zero = AcquireOptions::new(Lease::Fixed(Duration::ZERO));
    /// assert_eq!(
    ///     zero.validate("bill-run:2026-11").unwrap_err().to_string(),
    ///     "invalid lease 0 for lock `bill-run:2026-11`: accepted: 100 ms to 168 h"
    /// );
    /// ```
    pub fn validate(&self, key: &str) -> Result<(), LockError> {
        crate::key::validate_key(key)?;
        self.lease.validate().map_err(|e| e.for_key(key))
    }
}

/// A lease with the default options, so that `with_lock(key, Lease::Watchdog, …)` takes a
/// lease where it takes options.
impl From<Lease> for AcquireOptions {
    fn from(lease: Lease) -> Self {
        AcquireOptions::new(lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::lease::{MAX_LEASE, MAX_WAIT};

    #[test]
    fn setters_check_their_values_when_called() {
        let options = AcquireOptions::new(Lease::Watchdog);
        for wait in [Duration::ZERO, MAX_WAIT] {
            assert_eq!(options.wait_time(wait).unwrap().wait_override(), Some(wait));
        }
        let error = options.wait_time(MAX_WAIT + Duration::from_millis(1));
        assert_eq!(error.unwrap_err().details()["argument"], "wait_time");
        for hold in [Duration::ZERO, MAX_LEASE] {
            assert_eq!(options.hold_at_least(hold).unwrap().minimum_hold(), hold);
        }
        let error = options.hold_at_least(MAX_LEASE + Duration::from_millis(1));
        assert_eq!(error.unwrap_err().details()["argument"], "hold_at_least");
        let fixed = AcquireOptions::new(Lease::Fixed(Duration::from_secs(1)));
        assert!(fixed.hold_at_least(Duration::from_secs(1)).is_ok());
        let text = fixed
            .hold_at_least(Duration::from_secs(2))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("2 s") && text.contains("fixed lease 1 s"),
            "{text}"
        );
    }
}
