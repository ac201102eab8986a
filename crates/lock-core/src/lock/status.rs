//! What a holder learns about its lease: [`LeaseStatus`], [`LostReason`], [`ReleaseOutcome`].

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
    /// This owner still held the lock; it is now free and waiters were woken. For a re-entrant
    /// handle ([`LockHandle::is_reentrant`](crate::lock::LockHandle::is_reentrant)): its hold was given back and the lease stays with
    /// the enclosing `with_lock` section, which releases it.
    Released,
    /// The lease had already ended (expired, lost, or taken over); nothing was deleted, and
    /// whoever holds the key now keeps it.
    NotHeld,
}

/// Why a held lease was lost.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::lock::{DistributedLock, InMemoryLock, Lease, LostReason};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock = InMemoryLock::new();
/// let handle = lock.acquire("msisdn-reaper", Lease::Fixed(Duration::from_secs(1))).await?;
///
/// let reason = handle.lost().await; // the fixed lease ran out
/// assert_eq!(reason, LostReason::Expired);
/// assert_eq!(reason.to_string(), "the lease ran out without a confirmed renewal");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The local deadline (last confirmed expiry minus a safety margin) passed without a
    /// confirmed renewal. Fires before the backend can grant the key to someone else.
    Expired,
    /// A renewal found the key gone or held by another owner.
    NotOwner,
    /// This re-entrant handle outlived the `with_lock` section it was taken in; the section
    /// ended and its lease was released.
    ScopeEnded,
    /// The lock client was shut down ([`DistributedLock::shutdown`](crate::lock::DistributedLock::shutdown))
    /// while this lease was held, and released it.
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

/// The status of one lease as the holder's process knows it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::lock::{DistributedLock, InMemoryLock, Lease, LeaseStatus, LostReason};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock = InMemoryLock::new();
/// let handle = lock.acquire("msisdn-reaper", Lease::Fixed(Duration::from_secs(1))).await?;
/// assert!(matches!(handle.status(), LeaseStatus::Held { valid_until: Some(_) }));
///
/// tokio::time::sleep(Duration::from_secs(2)).await;
/// assert_eq!(handle.status(), LeaseStatus::Lost(LostReason::Expired));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Held until `valid_until` on the local monotonic clock; `None` means no deadline (the
    /// in-process implementation's watchdog leases).
    Held {
        /// The local deadline: last confirmed expiry minus a safety margin.
        valid_until: Option<Instant>,
    },
    /// Released by the holder (explicitly or by dropping the handle).
    Released,
    /// Lost while held.
    Lost(LostReason),
}
