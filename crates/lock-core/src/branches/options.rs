//! [`MasterOptions`]: the master lock's acquisition and how long the master waits for its
//! branches.

use std::time::Duration;

use crate::branches::error::BranchError;
use crate::duration::out_of_range;
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
/// [`DEFAULT_BRANCH_WAIT`] for [`Lease::Watchdog`]. A fixed lease's wait ends a tenth of the
/// lease (at most 1 s) before the lease does, so the master releases a lease it still holds.
///
/// The duration setters check their value when called: a value out of range is
/// [`BranchError::InvalidArgument`] then, never later.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::branches::{BranchError, MasterOptions};
/// use lock_core::Lease;
///
/// // Wait up to 2 s for the lock, then up to 10 s for the branches.
/// let options = MasterOptions::new(Lease::Watchdog)
///     .wait(Duration::from_secs(2))?
///     .branch_wait(Duration::from_secs(10))?;
/// assert_eq!(options.branch_wait_time(), Some(Duration::from_secs(10)));
/// assert_eq!(options.acquire_options().wait_time(), Some(Duration::from_secs(2)));
/// # Ok::<(), BranchError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasterOptions {
    acquire: AcquireOptions,
    branch_wait: Option<Duration>,
}

/// A duration setter of [`MasterOptions`] and its accepted range, declared once.
struct Setting {
    name: &'static str,
    min: Duration,
    max: Duration,
}

/// The lock's wait time, as the lock accepts it.
const WAIT: Setting = Setting {
    name: "wait",
    min: Duration::ZERO,
    max: MAX_WAIT,
};

/// The branch wait.
const BRANCH_WAIT: Setting = Setting {
    name: "branch_wait",
    min: Duration::ZERO,
    max: MAX_BRANCH_WAIT,
};

impl Setting {
    fn check(&self, value: Duration) -> Result<Duration, BranchError> {
        match out_of_range(value, self.min, self.max) {
            None => Ok(value),
            Some((value, problem)) => Err(BranchError::InvalidArgument {
                name: self.name,
                value,
                problem,
            }),
        }
    }
}

impl MasterOptions {
    /// A master lock with `lease`, the configured lock wait time and the default branch wait.
    pub fn new(lease: Lease) -> Self {
        MasterOptions::from(AcquireOptions::new(lease))
    }

    /// How long to wait for the master lock (see [`AcquireOptions::wait`]). Accepted: 0 (one
    /// attempt) to 1 h.
    ///
    /// # Errors
    /// [`BranchError::InvalidArgument`] naming `wait`, the value and the accepted range.
    pub fn wait(mut self, wait: Duration) -> Result<Self, BranchError> {
        self.acquire = self.acquire.wait(WAIT.check(wait)?);
        Ok(self)
    }

    /// How long the master waits for its branches after its block returned (0 = look once). A
    /// fixed lease still ends the wait shortly before the lease ends. Accepted: 0 to 1 h
    /// ([`MAX_BRANCH_WAIT`]).
    ///
    /// # Errors
    /// [`BranchError::InvalidArgument`] naming `branch_wait`, the value and the accepted range.
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
    ///     .unwrap_err();
    /// assert_eq!(error.to_string(), "invalid branch_wait 2 h: accepted: 0 to 1 h");
    /// assert_eq!(error.code(), "BRANCHES_INVALID_ARGUMENT");
    /// ```
    pub fn branch_wait(mut self, wait: Duration) -> Result<Self, BranchError> {
        self.branch_wait = Some(BRANCH_WAIT.check(wait)?);
        Ok(self)
    }

    /// The lock's acquisition options.
    pub fn acquire_options(&self) -> AcquireOptions {
        self.acquire
    }

    /// The branch wait given, if any.
    pub fn branch_wait_time(&self) -> Option<Duration> {
        self.branch_wait
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
