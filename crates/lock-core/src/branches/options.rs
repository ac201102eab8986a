//! [`MasterOptions`]: the master lock's acquisition and how long the master waits for its
//! branches.

use std::time::Duration;

use crate::branches::error::BranchError;
use crate::duration::{duration_range, format_duration};
use crate::lock::lease::{Lease, MAX_WAIT};
use crate::lock::options::AcquireOptions;

/// How long a master with a watchdog lease waits for its branches after its block returned,
/// unless [`MasterOptions::branch_wait`] says otherwise: 30 s.
pub const DEFAULT_BRANCH_WAIT: Duration = Duration::from_secs(30);

/// The longest branch wait accepted: 1 h.
pub const MAX_BRANCH_WAIT: Duration = MAX_WAIT;

/// Options of one master invocation: how its lock is acquired ([`AcquireOptions`]: lease,
/// wait time, fair, …) and how long it waits for its branches after its block returned.
///
/// The branch wait defaults to the rest of the lease for [`Lease::Fixed`] and to
/// [`DEFAULT_BRANCH_WAIT`] for [`Lease::Watchdog`]; it never outlasts a fixed lease.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::branches::MasterOptions;
/// use lock_core::Lease;
///
/// // Wait up to 2 s for the lock, then up to 10 s for the branches.
/// let options = MasterOptions::new(Lease::Watchdog)
///     .wait(Duration::from_secs(2))
///     .branch_wait(Duration::from_secs(10));
/// assert_eq!(options.branch_wait_time(), Some(Duration::from_secs(10)));
/// assert_eq!(options.acquire_options().wait_time(), Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasterOptions {
    acquire: AcquireOptions,
    branch_wait: Option<Duration>,
}

impl MasterOptions {
    /// A master lock with `lease`, the configured lock wait time and the default branch wait.
    pub fn new(lease: Lease) -> Self {
        MasterOptions::from(AcquireOptions::new(lease))
    }

    /// How long to wait for the master lock (see [`AcquireOptions::wait`]).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.acquire = self.acquire.wait(wait);
        self
    }

    /// How long the master waits for its branches after its block returned (0 = look once). A
    /// fixed lease still ends the wait when it ends. Accepted: 0 to 1 h.
    pub fn branch_wait(mut self, wait: Duration) -> Self {
        self.branch_wait = Some(wait);
        self
    }

    /// The lock's acquisition options.
    pub fn acquire_options(&self) -> AcquireOptions {
        self.acquire
    }

    /// The branch wait given, if any.
    pub fn branch_wait_time(&self) -> Option<Duration> {
        self.branch_wait
    }

    /// Checks the branch wait (the lock checks its own options when acquiring).
    ///
    /// # Errors
    /// [`BranchError::InvalidArgument`] naming `branch_wait` and the accepted range.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::branches::MasterOptions;
    /// use lock_core::Lease;
    ///
    /// let error = MasterOptions::new(Lease::Watchdog)
    ///     .branch_wait(Duration::from_secs(7200))
    ///     .validate()
    ///     .unwrap_err();
    /// assert_eq!(error.to_string(), "invalid branch_wait 2 h: accepted: 0 to 1 h");
    /// ```
    pub fn validate(&self) -> Result<(), BranchError> {
        match self.branch_wait {
            Some(wait) if wait > MAX_BRANCH_WAIT => Err(BranchError::InvalidArgument {
                name: "branch_wait",
                value: format_duration(wait),
                problem: format!(
                    "accepted: {}",
                    duration_range(Duration::ZERO, MAX_BRANCH_WAIT)
                ),
            }),
            _ => Ok(()),
        }
    }
}

impl From<AcquireOptions> for MasterOptions {
    fn from(acquire: AcquireOptions) -> Self {
        MasterOptions {
            acquire,
            branch_wait: None,
        }
    }
}

impl From<Lease> for MasterOptions {
    fn from(lease: Lease) -> Self {
        MasterOptions::new(lease)
    }
}
