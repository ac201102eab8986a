//! The fail-open policy of one call site: [`FailOpen`], returned by
//! [`with_lock_fail_open`](crate::lock::DistributedLockExt::with_lock_fail_open), and [`Unguarded`],
//! which says why a section ran without the lock.

use std::fmt;
use std::future::Future;

use crate::error::{AcquireFailure, LockError};
use crate::lock::options::AcquireOptions;
use crate::lock::port::DistributedLock;
use crate::lock::status::UnguardedReason;
use crate::lock::telemetry::UNGUARDED_RUNS_TOTAL;

/// The value of a fail-open critical section, and whether the lock was held while it ran.
///
/// Either way the section ran once. A section that returns a `Result` of its own has it here,
/// `Ok` or `Err`, untouched.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::lock::{AcquireOptions, DistributedLock, DistributedLockExt, FailOpen, InMemoryLock};
/// use lock_core::lock::{Lease, UnguardedReason};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock = InMemoryLock::new();
/// let other_pod = lock.try_acquire("cache-warm:tariffs", Lease::Watchdog).await?;
///
/// let once = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::ZERO)?;
/// match lock.with_lock_fail_open("cache-warm:tariffs", once, || async { 120 }).await? {
///     FailOpen::Guarded(warmed) => println!("warmed {warmed} entries under the lock"),
///     FailOpen::Unguarded { value: warmed, unguarded } => {
///         assert_eq!(unguarded.reason(), UnguardedReason::WaitTimeElapsed);
///         println!("warmed {warmed} entries without the lock: {unguarded}");
///     }
/// }
/// # drop(other_pod);
/// # Ok(()) }
/// ```
#[must_use = "the section ran; check `unguarded()` to know whether it ran without the lock, or take `into_value()`"]
#[derive(Debug)]
pub enum FailOpen<T> {
    /// The lock was held while the section ran, as with
    /// [`with_lock`](crate::lock::DistributedLockExt::with_lock).
    Guarded(T),
    /// The section ran unguarded, and another owner may have run it at the same time.
    Unguarded {
        /// The section's value.
        value: T,
        /// Why the lock was not held.
        unguarded: Unguarded,
    },
}

impl<T> FailOpen<T> {
    /// The section's value.
    pub fn value(&self) -> &T {
        match self {
            FailOpen::Guarded(value) | FailOpen::Unguarded { value, .. } => value,
        }
    }

    /// The section's value, dropping the marker.
    pub fn into_value(self) -> T {
        match self {
            FailOpen::Guarded(value) | FailOpen::Unguarded { value, .. } => value,
        }
    }

    /// Whether the lock was held while the section ran.
    pub fn is_guarded(&self) -> bool {
        matches!(self, FailOpen::Guarded(_))
    }

    /// Why the section ran unguarded; `None` if the lock was held.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::{DisabledLock, DistributedLockExt, Lease, UnguardedReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = DisabledLock::new("enabled = false");
    /// let sent = lock.with_lock_fail_open("digest", Lease::Watchdog, || async { 3 }).await?;
    /// let unguarded = sent.unguarded().expect("the lock is switched off");
    /// assert_eq!(unguarded.reason(), UnguardedReason::LockDisabled);
    /// assert_eq!(unguarded.error().code(), "LOCK_DISABLED");
    /// # Ok(()) }
    /// ```
    pub fn unguarded(&self) -> Option<&Unguarded> {
        match self {
            FailOpen::Guarded(_) => None,
            FailOpen::Unguarded { unguarded, .. } => Some(unguarded),
        }
    }

    /// The section's value and, if it ran unguarded, why.
    pub fn into_parts(self) -> (T, Option<Unguarded>) {
        match self {
            FailOpen::Guarded(value) => (value, None),
            FailOpen::Unguarded { value, unguarded } => (value, Some(unguarded)),
        }
    }
}

/// Why a fail-open critical section ran without the lock: the [`UnguardedReason`], and the
/// [`LockError`] a fail-closed call would have returned.
///
/// `Display` is one sentence: ``the critical section ran unguarded (wait_time_elapsed): lock
/// `cache-warm:tariffs` was not acquired: held by another owner …``.
///
/// # Examples
///
/// ```
/// use lock_core::lock::{DisabledLock, DistributedLockExt, Lease, UnguardedReason};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock = DisabledLock::new("switched off in this test");
/// let warmed = lock.with_lock_fail_open("cache-warm:tariffs", Lease::Watchdog, || async { 120 }).await?;
///
/// let unguarded = warmed.unguarded().unwrap();
/// assert_eq!(unguarded.reason(), UnguardedReason::LockDisabled);
/// assert_eq!(unguarded.error().details()["reason"], "disabled");
/// assert!(unguarded.to_string().starts_with("the critical section ran unguarded (lock_disabled): "));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Unguarded {
    reason: UnguardedReason,
    error: LockError,
}

impl Unguarded {
    /// Why the lock was not held.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::lock::{AcquireOptions, DistributedLock, DistributedLockExt, InMemoryLock, Lease};
    /// use lock_core::lock::UnguardedReason;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let other_pod = lock.try_acquire("cache-warm:tariffs", Lease::Watchdog).await?;
    /// let once = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::ZERO)?;
    /// let warmed = lock.with_lock_fail_open("cache-warm:tariffs", once, || async { 120 }).await?;
    /// // Another owner may be warming the same cache right now.
    /// assert_eq!(warmed.unguarded().unwrap().reason(), UnguardedReason::WaitTimeElapsed);
    /// # drop(other_pod);
    /// # Ok(()) }
    /// ```
    pub fn reason(&self) -> UnguardedReason {
        self.reason
    }

    /// The error the acquisition ended with: [`LockError::Disabled`] (`LOCK_DISABLED`) or
    /// [`LockError::AcquisitionFailed`] (`LOCK_ACQUISITION_FAILED`, with its `reason`, holder,
    /// cause).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::{DisabledLock, DistributedLockExt, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = DisabledLock::new("telco.platform.lock.enabled = false from config/lock.toml");
    /// let sent = lock.with_lock_fail_open("digest", Lease::Watchdog, || async {}).await?;
    /// let error = sent.unguarded().unwrap().error();
    /// assert_eq!(error.code(), "LOCK_DISABLED");
    /// assert!(error.to_string().contains("from config/lock.toml"));
    /// # Ok(()) }
    /// ```
    pub fn error(&self) -> &LockError {
        &self.error
    }

    /// The error the acquisition ended with, by value.
    pub fn into_error(self) -> LockError {
        self.error
    }

    /// The reason a fail-open call gives for `error`, or `error` back when it is not a "not
    /// granted" outcome (an invalid key or argument).
    pub(crate) fn from_error(error: LockError) -> Result<Self, LockError> {
        let reason = match &error {
            LockError::Disabled { .. } | LockError::ShutDown { .. } => {
                UnguardedReason::LockDisabled
            }
            LockError::AcquisitionFailed {
                reason:
                    AcquireFailure::HeldByAnotherOwner { .. } | AcquireFailure::WaitersAhead { .. },
                ..
            } => UnguardedReason::WaitTimeElapsed,
            // Unreachable, refusing, too slow, replicas not confirming, and whatever a future
            // reason adds: the backend could not grant the lock. A release failure is not an
            // acquisition outcome, but an implementation returning one failed at its backend too.
            LockError::AcquisitionFailed { .. } | LockError::ReleaseFailed { .. } => {
                UnguardedReason::BackendUnavailable
            }
            LockError::InvalidKey { .. } | LockError::InvalidArgument { .. } => return Err(error),
        };
        Ok(Unguarded { reason, error })
    }
}

impl fmt::Display for Unguarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the critical section ran unguarded ({}): {}",
            self.reason, self.error
        )
    }
}

/// The body of [`DistributedLockExt::with_lock_fail_open`](crate::lock::DistributedLockExt::with_lock_fail_open).
pub(crate) async fn with_lock_fail_open<L, F, Fut, T>(
    lock: &L,
    key: &str,
    options: AcquireOptions,
    critical_section: F,
) -> Result<FailOpen<T>, LockError>
where
    L: DistributedLock + ?Sized,
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = T> + Send,
    T: Send,
{
    match lock.acquire_with(key, options).await {
        Ok(handle) => Ok(FailOpen::Guarded(
            crate::lock::reentrant::run_holding(lock.namespace(), key, handle, critical_section)
                .await,
        )),
        Err(error) => {
            let unguarded = Unguarded::from_error(error)?;
            metrics::counter!(UNGUARDED_RUNS_TOTAL, "reason" => unguarded.reason.as_str())
                .increment(1);
            tracing::warn!(
                lock_key = key,
                reason = unguarded.reason.as_str(),
                error = %unguarded.error,
                "lock not held; running the critical section unguarded (fail open)"
            );
            let value = critical_section().await;
            Ok(FailOpen::Unguarded { value, unguarded })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn reason_of(error: LockError) -> Option<UnguardedReason> {
        Unguarded::from_error(error).ok().map(|u| u.reason())
    }

    #[test]
    fn each_not_granted_outcome_has_its_reason_and_invalid_arguments_have_none() {
        let held = LockError::AcquisitionFailed {
            key: "k".into(),
            reason: AcquireFailure::HeldByAnotherOwner {
                holder: "pod-a/1".into(),
                ttl: None,
                waited: Duration::ZERO,
            },
        };
        let queued = LockError::AcquisitionFailed {
            key: "k".into(),
            reason: AcquireFailure::WaitersAhead {
                ahead: 2,
                waited: Duration::from_secs(1),
            },
        };
        let replicas = LockError::AcquisitionFailed {
            key: "k".into(),
            reason: AcquireFailure::ReplicationUnconfirmed {
                required: 1,
                acknowledged: 0,
            },
        };
        let late = LockError::AcquisitionFailed {
            key: "k".into(),
            reason: AcquireFailure::LeaseExpiredBeforeGrant {
                lease: Duration::from_secs(1),
            },
        };
        use UnguardedReason::*;
        assert_eq!(reason_of(held), Some(WaitTimeElapsed));
        assert_eq!(reason_of(queued), Some(WaitTimeElapsed));
        assert_eq!(
            reason_of(LockError::backend_unavailable("k", "connection refused")),
            Some(BackendUnavailable)
        );
        assert_eq!(reason_of(replicas), Some(BackendUnavailable));
        assert_eq!(reason_of(late), Some(BackendUnavailable));
        assert_eq!(
            reason_of(LockError::Disabled {
                detail: "telco.platform.lock.enabled = false".into()
            }),
            Some(LockDisabled)
        );
        assert_eq!(reason_of(crate::validate_key("").unwrap_err()), None);
        assert_eq!(
            reason_of(LockError::invalid_argument("wait", "2h", "at most 1h")),
            None
        );
    }

    #[test]
    fn reasons_have_stable_names() {
        assert_eq!(UnguardedReason::LockDisabled.as_str(), "lock_disabled");
        assert_eq!(
            UnguardedReason::WaitTimeElapsed.to_string(),
            "wait_time_elapsed"
        );
        assert_eq!(
            UnguardedReason::BackendUnavailable.as_str(),
            "backend_unavailable"
        );
    }

    #[test]
    fn the_marker_says_it_ran_unguarded_why_and_the_error() {
        let unguarded = Unguarded::from_error(LockError::backend_unavailable(
            "digest",
            "connection refused",
        ))
        .unwrap();
        assert_eq!(
            unguarded.to_string(),
            "the critical section ran unguarded (backend_unavailable): lock `digest` was not \
             acquired: backend unavailable: connection refused"
        );
        let outcome = FailOpen::Unguarded {
            value: 3,
            unguarded,
        };
        assert!(!outcome.is_guarded());
        assert_eq!(*outcome.value(), 3);
        assert_eq!(
            outcome.unguarded().map(Unguarded::reason),
            Some(UnguardedReason::BackendUnavailable)
        );
        let (value, unguarded) = outcome.into_parts();
        assert_eq!(value, 3);
        assert_eq!(unguarded.unwrap().error().details()["lockKey"], "digest");
        let guarded = FailOpen::Guarded("done");
        assert!(guarded.is_guarded() && guarded.unguarded().is_none());
        assert_eq!(guarded.into_value(), "done");
    }
}
