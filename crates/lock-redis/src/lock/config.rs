//! Settings of a [`RedisLock`](crate::lock::RedisLock).

use std::time::Duration;

use lock_core::lock::{MAX_WAIT, MAX_WATCHDOG_TIMEOUT, MIN_WATCHDOG_TIMEOUT};
use lock_core::{LockError, check_duration};

/// Defaults and accepted ranges of [`RedisLockConfig`], and the lock's fixed timings.
pub(crate) mod limits {
    use std::time::Duration;

    pub use lock_core::lock::DEFAULT_WAIT_TIME;
    /// Default watchdog timeout: 30 s (renewed every 10 s).
    pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
    /// Default number of replicas that must acknowledge a grant: 0 (no `WAIT`).
    pub const DEFAULT_MIN_REPLICAS: u32 = 0;
    /// Most replicas a grant can be made to wait for: 16.
    pub const MAX_MIN_REPLICAS: u32 = 16;
    /// Default time a grant waits for its replica acknowledgements: 1 s.
    pub const DEFAULT_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(1);
    /// Shortest accepted replica-sync timeout: 1 ms.
    pub const MIN_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_millis(1);
    /// Longest accepted replica-sync timeout: 10 s.
    pub const MAX_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default fair waiter timeout: 5 s.
    pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(5);
    /// Shortest accepted fair waiter timeout: 300 ms.
    pub const MIN_FAIR_WAITER_TIMEOUT: Duration = Duration::from_millis(300);
    /// Longest accepted fair waiter timeout: 5 min.
    pub const MAX_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(300);
    /// How long a released key keeps its tombstone (last fencing token, releasing owner): 10 s.
    /// It covers server clock steps back of up to this long, and makes a re-sent release
    /// report its first outcome.
    pub const TOMBSTONE_TTL: Duration = Duration::from_secs(10);
    pub use crate::lock::registry::{RENEW_BATCH, renewal_period};
}

use limits::*;

/// The local safety margin subtracted from every confirmed expiry: 1 % of the TTL plus 5 ms. It
/// absorbs clock-rate differences between this host and Redis and timer lateness, so the local
/// deadline passes before Redis expires the key.
pub(crate) fn safety_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(5)
}

/// Settings of a [`RedisLock`](crate::lock::RedisLock): the timing of every lock. Where Redis is, is
/// the [`RedisClient`](crate::RedisClient)'s.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_redis::lock::RedisLockConfig;
///
/// let config = RedisLockConfig::default()
///     .wait_time(Duration::from_secs(5))
///     .watchdog_timeout(Duration::from_secs(30))
///     .min_replicas(1)
///     .replica_sync_timeout(Duration::from_millis(200))
///     .fair_waiter_timeout(Duration::from_secs(5));
/// assert!(config.validate().is_ok());
/// assert!(config.min_replicas(17).validate().is_err()); // at most 16
/// ```
#[derive(Debug, Clone)]
pub struct RedisLockConfig {
    pub(crate) wait_time: Duration,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) min_replicas: u32,
    pub(crate) replica_sync_timeout: Duration,
    pub(crate) fair_waiter_timeout: Duration,
}

impl Default for RedisLockConfig {
    fn default() -> Self {
        RedisLockConfig {
            wait_time: DEFAULT_WAIT_TIME,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            min_replicas: DEFAULT_MIN_REPLICAS,
            replica_sync_timeout: DEFAULT_REPLICA_SYNC_TIMEOUT,
            fair_waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
        }
    }
}

impl RedisLockConfig {
    /// Default wait time of an acquire. Default 5 s; 0 (one attempt) to 1 h.
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.wait_time = wait;
        self
    }

    /// TTL of watchdog leases, renewed every third of it. Default 30 s; 1 s to 1 h.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// Replicas that must acknowledge a grant (Redis `WAIT`) before it is reported. Fewer
    /// acknowledgements within the [replica sync timeout](Self::replica_sync_timeout) release
    /// the grant and fail closed (reason `replication_unconfirmed`). Default 0; 0 to 16.
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.min_replicas = replicas;
        self
    }

    /// How long a grant waits for [`min_replicas`](Self::min_replicas) acknowledgements.
    /// Default 1 s; 1 ms to 10 s. Adds to the longest time an acquire can take.
    pub fn replica_sync_timeout(mut self, timeout: Duration) -> Self {
        self.replica_sync_timeout = timeout;
        self
    }

    /// How long a fair waiter keeps its place in a key's queue without calling again; it calls
    /// every third of it. A dead waiter holds up those behind it for at most this plus one
    /// command timeout. Default 5 s; 300 ms to 5 min.
    pub fn fair_waiter_timeout(mut self, timeout: Duration) -> Self {
        self.fair_waiter_timeout = timeout;
        self
    }

    /// Checks every setting.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming the setting by its builder method and what is
    /// accepted.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::lock::RedisLockConfig;
    ///
    /// let config = RedisLockConfig::default().fair_waiter_timeout(Duration::from_millis(100));
    /// let error = config.validate().unwrap_err();
    /// assert_eq!(error.details()["argument"], "fair_waiter_timeout");
    /// assert_eq!(error.to_string(), "invalid fair_waiter_timeout 100 ms: accepted: 300 ms to 5 m");
    /// ```
    pub fn validate(&self) -> Result<(), LockError> {
        check_duration("wait_time", self.wait_time, Duration::ZERO, MAX_WAIT)?;
        check_duration(
            "watchdog_timeout",
            self.watchdog_timeout,
            MIN_WATCHDOG_TIMEOUT,
            MAX_WATCHDOG_TIMEOUT,
        )?;
        if self.min_replicas > MAX_MIN_REPLICAS {
            return Err(LockError::invalid_argument(
                "min_replicas",
                self.min_replicas.to_string(),
                format!("accepted: 0 to {MAX_MIN_REPLICAS}"),
            ));
        }
        check_duration(
            "replica_sync_timeout",
            self.replica_sync_timeout,
            MIN_REPLICA_SYNC_TIMEOUT,
            MAX_REPLICA_SYNC_TIMEOUT,
        )?;
        check_duration(
            "fair_waiter_timeout",
            self.fair_waiter_timeout,
            MIN_FAIR_WAITER_TIMEOUT,
            MAX_FAIR_WAITER_TIMEOUT,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_by_name() {
        let ok = RedisLockConfig::default();
        assert!(ok.validate().is_ok());
        let cases = [
            (ok.clone().wait_time(Duration::from_secs(7200)), "wait_time"),
            (
                ok.clone().watchdog_timeout(Duration::from_millis(10)),
                "watchdog_timeout",
            ),
            (ok.clone().min_replicas(17), "min_replicas"),
            (
                ok.clone().replica_sync_timeout(Duration::ZERO),
                "replica_sync_timeout",
            ),
            (
                ok.clone().fair_waiter_timeout(Duration::from_millis(100)),
                "fair_waiter_timeout",
            ),
        ];
        for (config, setting) in cases {
            let error = config.validate().unwrap_err();
            assert_eq!(error.details()["argument"], setting, "{error}");
            let text = error.to_string();
            assert!(text.starts_with(&format!("invalid {setting} ")), "{text}");
        }
    }
}
