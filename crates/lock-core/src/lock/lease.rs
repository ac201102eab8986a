//! Lease modes and the duration bounds every implementation enforces.

use std::time::Duration;

use crate::duration::format_duration;
use crate::error::LockError;
use crate::error::check_duration;

/// The shortest accepted fixed lease: 100 ms.
pub const MIN_LEASE: Duration = Duration::from_millis(100);
/// The longest accepted fixed lease: 7 days. Longer work should use [`Lease::Watchdog`].
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest accepted wait time: 1 hour.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);
/// The shortest accepted watchdog timeout: 1 s, renewed every 333 ms.
pub const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest accepted watchdog timeout: 1 hour, the longest a crashed holder keeps its key.
pub const MAX_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long a granted lock lives.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::lock::Lease;
///
/// // Variable-length work (a bill run): held while this process lives, renewed by the watchdog.
/// let long = Lease::Watchdog;
/// // A bounded sweep: hard-expires after 10 s whatever happens, never renewed.
/// let sweep = Lease::Fixed(Duration::from_secs(10));
/// assert_eq!(Lease::default(), long);
/// # let _ = sweep;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lease {
    /// The default: the TTL is the backend's watchdog timeout, renewed every third of it while
    /// the holder's process lives. After a crash the lock frees itself within one timeout.
    #[default]
    Watchdog,
    /// Hard-expires this long after the grant, never renewed; [`MIN_LEASE`] to [`MAX_LEASE`].
    Fixed(Duration),
}

impl Lease {
    /// Checks a fixed lease against [`MIN_LEASE`]..=[`MAX_LEASE`].
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `lease`, the value and the accepted range.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::lock::Lease;
    ///
    /// assert!(Lease::Fixed(Duration::from_secs(30)).validate().is_ok());
    /// let error = Lease::Fixed(Duration::from_millis(50)).validate().unwrap_err();
    /// assert_eq!(error.to_string(), "invalid lease 50 ms: accepted: 100 ms to 168 h");
    /// ```
    pub fn validate(&self) -> Result<(), LockError> {
        match *self {
            Lease::Watchdog => Ok(()),
            Lease::Fixed(d) => check_duration("lease", d, MIN_LEASE, MAX_LEASE),
        }
    }

    /// The TTL a grant gets under this lease, given the backend's watchdog timeout.
    pub fn ttl(&self, watchdog_timeout: Duration) -> Duration {
        match *self {
            Lease::Watchdog => watchdog_timeout,
            Lease::Fixed(d) => d,
        }
    }
}

/// Checks a wait time: zero (one attempt) up to [`MAX_WAIT`].
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `wait_time`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::lock::{MAX_WAIT, validate_wait};
///
/// assert!(validate_wait(Duration::ZERO).is_ok()); // one attempt
/// assert!(validate_wait(MAX_WAIT).is_ok());
/// let error = validate_wait(Duration::from_secs(2 * 3600)).unwrap_err();
/// assert_eq!(error.to_string(), "invalid wait_time 2 h: accepted: 0 to 1 h");
/// ```
pub fn validate_wait(wait: Duration) -> Result<(), LockError> {
    check_duration("wait_time", wait, Duration::ZERO, MAX_WAIT)
}

/// Checks a watchdog timeout: [`MIN_WATCHDOG_TIMEOUT`] to [`MAX_WATCHDOG_TIMEOUT`].
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `watchdog-timeout`.
pub fn validate_watchdog_timeout(timeout: Duration) -> Result<(), LockError> {
    check_duration(
        "watchdog-timeout",
        timeout,
        MIN_WATCHDOG_TIMEOUT,
        MAX_WATCHDOG_TIMEOUT,
    )
}

/// Checks a minimum hold ([`AcquireOptions::hold_at_least`](crate::lock::AcquireOptions::hold_at_least)):
/// zero up to [`MAX_LEASE`], and for a fixed lease at most the lease.
pub(crate) fn validate_hold_at_least(hold: Duration, lease: Lease) -> Result<(), LockError> {
    match lease {
        Lease::Fixed(lease) if hold > lease => Err(LockError::invalid_argument(
            "hold_at_least",
            format_duration(hold),
            format!(
                "accepted: 0 to the fixed lease {} (the key ends with its lease)",
                format_duration(lease)
            ),
        )),
        _ => check_duration("hold_at_least", hold, Duration::ZERO, MAX_LEASE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_lease_bounds_are_enforced_and_named() {
        assert!(Lease::Fixed(MIN_LEASE).validate().is_ok());
        assert!(Lease::Fixed(MAX_LEASE).validate().is_ok());
        assert!(Lease::Watchdog.validate().is_ok());
        for bad in [
            Duration::ZERO,
            Duration::from_millis(99),
            MAX_LEASE + Duration::from_secs(1),
        ] {
            let text = Lease::Fixed(bad).validate().unwrap_err().to_string();
            assert!(text.starts_with("invalid lease"), "{text}");
            assert!(text.contains("accepted: 100 ms to 168 h"), "{text}");
        }
    }

    #[test]
    fn wait_accepts_zero_and_rejects_over_an_hour() {
        assert!(validate_wait(Duration::ZERO).is_ok());
        assert!(validate_wait(MAX_WAIT).is_ok());
        let text = validate_wait(MAX_WAIT + Duration::from_millis(1))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("invalid wait_time 3600001 ms: accepted: 0 to 1 h"),
            "{text}"
        );
    }

    #[test]
    fn watchdog_timeout_must_leave_room_to_renew() {
        assert!(validate_watchdog_timeout(Duration::from_secs(30)).is_ok());
        let text = validate_watchdog_timeout(Duration::from_millis(500))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("invalid watchdog-timeout 500 ms: accepted: 1 s to 1 h"),
            "{text}"
        );
    }

    #[test]
    fn ttl_uses_the_watchdog_timeout_only_for_watchdog_leases() {
        let wd = Duration::from_secs(30);
        assert_eq!(Lease::Watchdog.ttl(wd), wd);
        assert_eq!(
            Lease::Fixed(Duration::from_secs(2)).ttl(wd),
            Duration::from_secs(2)
        );
    }
}
