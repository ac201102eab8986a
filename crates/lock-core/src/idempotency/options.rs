//! The settings of an [`Idempotency`](crate::idempotency::Idempotency) and the options of one call.

use std::time::Duration;

use crate::error::check_duration;
use crate::idempotency::error::IdempotencyError;
use crate::key::truncate_for_display;
use crate::lock::lease::{Lease, MAX_LEASE, MAX_WAIT};

/// How long a duplicate waits for the first execution by default: 200 s.
pub const DEFAULT_DUPLICATE_WAIT: Duration = Duration::from_secs(200);
/// How long a result is replayed by default: 90 s.
pub const DEFAULT_RESULT_TTL: Duration = Duration::from_secs(90);
/// The largest serialized result stored by default: 1 MiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;
/// The shortest accepted result TTL: 1 s.
pub const MIN_RESULT_TTL: Duration = Duration::from_secs(1);
/// The largest accepted result cap: 64 MiB, as a replay sends the result whole.
pub const MAX_RESULT_BYTES: usize = 64 << 20;

/// The defaults every call of one [`Idempotency`](crate::idempotency::Idempotency) uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencySettings {
    /// How long a duplicate waits for a running first execution before failing with
    /// [`IdempotencyError::InProgress`]. 0 to 1 h; default 200 s.
    pub wait_time: Duration,
    /// How long a completed result is replayed. 1 s to 7 days; default 90 s.
    pub result_ttl: Duration,
    /// The largest serialized result stored, bytes. 1 to 64 MiB; default 1 MiB.
    pub max_result_bytes: usize,
    /// The in-progress lease under [`Lease::Watchdog`], renewed every third while the owner
    /// lives. 1 s to 1 h; default 30 s.
    pub watchdog_timeout: Duration,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        IdempotencySettings {
            wait_time: DEFAULT_DUPLICATE_WAIT,
            result_ttl: DEFAULT_RESULT_TTL,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            // The lock's default watchdog timeout.
            watchdog_timeout: Duration::from_secs(30),
        }
    }
}

impl IdempotencySettings {
    /// Checks every setting against its range.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming the setting and the accepted range.
    pub fn validate(&self) -> Result<(), IdempotencyError> {
        check_wait(self.wait_time)?;
        check_result_ttl(self.result_ttl)?;
        crate::lock::lease::validate_watchdog_timeout(self.watchdog_timeout)
            .map_err(IdempotencyError::from_validation)?;
        if !(1..=MAX_RESULT_BYTES).contains(&self.max_result_bytes) {
            return Err(IdempotencyError::InvalidArgument {
                name: "max_result_bytes",
                value: self.max_result_bytes.to_string(),
                problem: format!("accepted: 1 to {MAX_RESULT_BYTES} bytes"),
            });
        }
        Ok(())
    }
}

fn check_wait(wait: Duration) -> Result<(), IdempotencyError> {
    check_duration("wait_time", wait, Duration::ZERO, MAX_WAIT)
        .map_err(IdempotencyError::from_validation)
}

fn check_result_ttl(ttl: Duration) -> Result<(), IdempotencyError> {
    check_duration("result_ttl", ttl, MIN_RESULT_TTL, MAX_LEASE)
        .map_err(IdempotencyError::from_validation)
}

fn check_delayed_start(delay: Duration) -> Result<(), IdempotencyError> {
    check_duration("delayed_start", delay, Duration::ZERO, MAX_WAIT)
        .map_err(IdempotencyError::from_validation)
}

fn check_lease(lease: Lease) -> Result<(), IdempotencyError> {
    lease.validate().map_err(IdempotencyError::from_validation)
}

fn check_fingerprint(fingerprint: &str) -> Result<(), IdempotencyError> {
    if fingerprint.len() <= crate::MAX_KEY_BYTES {
        return Ok(());
    }
    Err(IdempotencyError::InvalidArgument {
        name: "fingerprint",
        value: truncate_for_display(fingerprint),
        problem: format!(
            "accepted: at most {} bytes (pass a hash of the request)",
            crate::MAX_KEY_BYTES
        ),
    })
}

/// The options of one idempotent call, where every unset one takes the
/// [`IdempotencySettings`]' value.
///
/// Each setter checks its value and names it when it is out of range, as
/// [`AcquireOptions`](crate::lock::AcquireOptions) does.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::idempotency::{IdempotencyError, IdempotencyOptions};
///
/// let options = IdempotencyOptions::new()
///     .fingerprint("sha256:4f2a…")? // the same key with another request is refused (422)
///     .result_ttl(Duration::from_secs(600))?
///     .delayed_start(Duration::from_millis(50))?; // let a burst of duplicates join
/// # let _ = options;
///
/// let error = IdempotencyOptions::new().wait_time(Duration::from_secs(7200)).unwrap_err();
/// assert_eq!(error.to_string(), "invalid wait_time \"2 h\": accepted: 0 to 1 h");
/// # Ok::<(), IdempotencyError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdempotencyOptions {
    pub(crate) lease: Lease,
    pub(crate) wait_time: Option<Duration>,
    pub(crate) result_ttl: Option<Duration>,
    pub(crate) fingerprint: String,
    pub(crate) delayed_start: Duration,
}

impl IdempotencyOptions {
    /// The defaults: a watchdog lease, the settings' wait time and result TTL, no fingerprint
    /// and no delayed start.
    pub fn new() -> Self {
        Self::default()
    }

    /// The in-progress record's lease. [`Lease::Watchdog`], the default, frees a crashed
    /// owner's record within the watchdog timeout. [`Lease::Fixed`] ends after that long even if
    /// the action still runs, and a duplicate then runs it too.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `lease` for a fixed lease out of range.
    pub fn lease(mut self, lease: Lease) -> Result<Self, IdempotencyError> {
        check_lease(lease)?;
        self.lease = lease;
        Ok(self)
    }

    /// How long a duplicate waits for a running first execution. 0 to 1 h, where 0 does not
    /// wait.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `wait_time` for a value out of range.
    pub fn wait_time(mut self, wait: Duration) -> Result<Self, IdempotencyError> {
        check_wait(wait)?;
        self.wait_time = Some(wait);
        Ok(self)
    }

    /// How long the result is replayed. 1 s to 7 days.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `result_ttl` for a value out of range.
    pub fn result_ttl(mut self, ttl: Duration) -> Result<Self, IdempotencyError> {
        check_result_ttl(ttl)?;
        self.result_ttl = Some(ttl);
        Ok(self)
    }

    /// A fingerprint of the request, such as a hash of its body, of at most 512 bytes. A later
    /// call with the same key and another fingerprint fails with
    /// [`IdempotencyError::KeyReused`]. Calls without one compare as the empty fingerprint.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `fingerprint` when it is over 512 bytes.
    pub fn fingerprint(mut self, fingerprint: impl Into<String>) -> Result<Self, IdempotencyError> {
        let fingerprint = fingerprint.into();
        check_fingerprint(&fingerprint)?;
        self.fingerprint = fingerprint;
        Ok(self)
    }

    /// How long the first caller waits before running the action, so that a burst of
    /// identical requests joins it. 0 to 1 h, default 0; under a [`Lease::Fixed`], shorter than
    /// the lease, which the wait spends.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `delayed_start` for a value out of range;
    /// one not shorter than a fixed lease is refused by the call that uses both.
    pub fn delayed_start(mut self, delay: Duration) -> Result<Self, IdempotencyError> {
        check_delayed_start(delay)?;
        self.delayed_start = delay;
        Ok(self)
    }

    /// The options resolved against `settings`, checked again as combined.
    pub(crate) fn resolve(
        &self,
        settings: &IdempotencySettings,
    ) -> Result<Resolved, IdempotencyError> {
        let wait_time = self.wait_time.unwrap_or(settings.wait_time);
        check_wait(wait_time)?;
        let result_ttl = self.result_ttl.unwrap_or(settings.result_ttl);
        check_result_ttl(result_ttl)?;
        if let Lease::Fixed(lease) = self.lease {
            // The record would expire during the wait, and a duplicate run the action first.
            if self.delayed_start >= lease {
                return Err(IdempotencyError::InvalidArgument {
                    name: "delayed_start",
                    value: crate::format_duration(self.delayed_start),
                    problem: format!(
                        "accepted: shorter than the fixed lease ({}), which the wait spends",
                        crate::format_duration(lease)
                    ),
                });
            }
        }
        Ok(Resolved {
            lease_ttl: self.lease.ttl(settings.watchdog_timeout),
            renewed: self.lease == Lease::Watchdog,
            wait_time,
            result_ttl,
            max_result_bytes: settings.max_result_bytes,
        })
    }
}

/// One call's options with the settings filled in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolved {
    pub(crate) lease_ttl: Duration,
    pub(crate) renewed: bool,
    pub(crate) wait_time: Duration,
    pub(crate) result_ttl: Duration,
    pub(crate) max_result_bytes: usize,
}
