//! What a holder learns about its lease: [`LeaseStatus`], [`LostReason`], [`ReleaseOutcome`];
//! and why a fail-open section ran without one, [`UnguardedReason`].

use std::fmt;
use tokio::time::Instant;

/// What an owner-checked release found.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::lock::{DistributedLock, InMemoryLock, Lease, ReleaseOutcome};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock = InMemoryLock::new();
/// let quick = lock.acquire("msisdn-reaper", Lease::Fixed(Duration::from_secs(10))).await?;
/// assert_eq!(quick.release().await?, ReleaseOutcome::Released);
///
/// let slow = lock.acquire("msisdn-reaper", Lease::Fixed(Duration::from_secs(1))).await?;
/// tokio::time::sleep(Duration::from_secs(2)).await; // the sweep overran its lease
/// let next_pod = lock.try_acquire("msisdn-reaper", Lease::Watchdog).await?;
/// // Owner-checked: the late release deletes nothing and reports it.
/// assert_eq!(slow.release().await?, ReleaseOutcome::NotHeld);
/// assert!(next_pod.is_held());
/// # Ok(()) }
/// ```
#[must_use = "a release that found the lease gone means the critical section may have overlapped another holder"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// This owner still held the lock and released it. A
    /// [re-entrant](crate::lock::LockHandle::is_reentrant) handle gave its hold back instead, and the
    /// enclosing section keeps the lease.
    Released,
    /// The lease had already ended: nothing was deleted, and whoever holds the key keeps it.
    NotHeld,
}

/// Why a held lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The local deadline passed without a confirmed renewal, which is before the backend can
    /// grant the key to anyone else.
    Expired,
    /// A renewal found the key gone or held by another owner.
    NotOwner,
    /// This re-entrant handle outlived the `with_lock` section that held the lease.
    ScopeEnded,
    /// The client was [shut down](crate::lock::DistributedLock::shutdown) and released the lease.
    ShutDown,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "the lease ran out without a confirmed renewal",
            LostReason::NotOwner => "the key was gone or held by another owner at renewal",
            LostReason::ScopeEnded => {
                "the with_lock section this re-entrant handle was taken in has ended and released the lease"
            }
            LostReason::ShutDown => "the lock client was shut down and released the lease",
        })
    }
}

/// The status of one lease, as the holder's process knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Held until `valid_until` on the local monotonic clock, or with no deadline (`None`).
    Held {
        /// The last confirmed expiry minus a safety margin.
        valid_until: Option<Instant>,
    },
    /// Released by the holder, or its handle dropped.
    Released,
    /// Lost while held.
    Lost(LostReason),
}

/// Why a fail-open critical section ran without the lock.
///
/// [`as_str`](UnguardedReason::as_str) is the stable name, logged as `reason`, for metrics and
/// alerts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnguardedReason {
    /// `lock_disabled`: the lock is switched off or its client was shut down (`LOCK_DISABLED`).
    LockDisabled,
    /// `wait_time_elapsed`: the wait time was spent while another owner held the lock or, for a
    /// fair acquisition, while earlier fair waiters were queued. Another owner may be running
    /// the same section now.
    WaitTimeElapsed,
    /// `backend_unavailable`: the backend could not grant the lock, for any reason other than
    /// contention. Whether anyone holds the lock is unknown.
    BackendUnavailable,
}

impl UnguardedReason {
    /// Every reason, for the metric series registered at 0.
    pub(crate) const ALL: [UnguardedReason; 3] = [
        UnguardedReason::LockDisabled,
        UnguardedReason::WaitTimeElapsed,
        UnguardedReason::BackendUnavailable,
    ];

    /// The stable name: `lock_disabled`, `wait_time_elapsed` or `backend_unavailable`.
    pub const fn as_str(self) -> &'static str {
        match self {
            UnguardedReason::LockDisabled => "lock_disabled",
            UnguardedReason::WaitTimeElapsed => "wait_time_elapsed",
            UnguardedReason::BackendUnavailable => "backend_unavailable",
        }
    }
}

impl fmt::Display for UnguardedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
