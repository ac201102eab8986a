//! [`MasterOptions`]: the master lock's acquisition and how long the master waits for its
//! branches.

use std::time::Duration;

use crate::branches::error::BranchError;
use crate::duration::out_of_range;
use crate::error::LockError;
use crate::lock::lease::{Lease, MAX_WAIT};
use crate::lock::options::AcquireOptions;

/// How long a master with a watchdog lease waits for its branches after its block returned,
/// unless [`MasterOptions::branch_wait`] says otherwise: 30 s.
pub const DEFAULT_BRANCH_WAIT: Duration = Duration::from_secs(30);

/// The longest branch wait accepted: 1 h.
pub const MAX_BRANCH_WAIT: Duration = MAX_WAIT;

/// Options of one master invocation: how its lock is acquired, and how long it waits for its
/// branches after its block returned.
///
/// The branch wait defaults to the rest of a fixed lease, less a tenth of it and at most 1 s,
/// and to [`DEFAULT_BRANCH_WAIT`] for a watchdog lease. Each setter that takes a value checks
/// it and names it when it is out of range, as [`AcquireOptions`] does.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::branches::{BranchError, MasterOptions};
/// use lock_core::lock::Lease;
///
/// // Wait up to 2 s for the lock, then up to 10 s for the branches.
/// let options = MasterOptions::new(Lease::Watchdog)
///     .wait_time(Duration::from_secs(2))?
///     .branch_wait(Duration::from_secs(10))?;
/// assert_eq!(options.branch_wait_time(), Some(Duration::from_secs(10)));
/// assert_eq!(options.acquire_options().wait_override(), Some(Duration::from_secs(2)));
/// # Ok::<(), BranchError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasterOptions {
    acquire: AcquireOptions,
    branch_wait: Option<Duration>,
}

impl MasterOptions {
    /// A master lock with `lease`, the lock's wait time and the default branch wait.
    pub fn new(lease: Lease) -> Self {
        MasterOptions::from(AcquireOptions::new(lease))
    }

    /// How long to wait for the master lock, as [`AcquireOptions::wait_time`]. 0 to 1 h.
    ///
    /// # Errors
    /// [`BranchError::InvalidArgument`] naming `wait_time` for a value out of range.
    pub fn wait_time(mut self, wait: Duration) -> Result<Self, BranchError> {
        self.acquire = self.acquire.wait_time(wait).map_err(invalid)?;
        Ok(self)
    }

    /// How long the master waits for its branches after its block returned, where 0 looks
    /// once. A fixed lease still ends the wait shortly before the lease ends. 0 to
    /// [`MAX_BRANCH_WAIT`].
    ///
    /// # Errors
    /// [`BranchError::InvalidArgument`] naming `branch_wait` for a value out of range.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::branches::MasterOptions;
    /// use lock_core::lock::Lease;
    ///
    /// let error = MasterOptions::new(Lease::Watchdog)
    ///     .branch_wait(Duration::from_secs(7200))
    ///     .unwrap_err();
    /// assert_eq!(error.to_string(), "invalid branch_wait 2 h: accepted: 0 to 1 h");
    /// assert_eq!(error.code(), "BRANCHES_INVALID_ARGUMENT");
    /// ```
    pub fn branch_wait(mut self, wait: Duration) -> Result<Self, BranchError> {
        if let Some((value, problem)) = out_of_range(wait, Duration::ZERO, MAX_BRANCH_WAIT) {
            return Err(BranchError::InvalidArgument {
                name: "branch_wait",
                value,
                problem,
            });
        }
        self.branch_wait = Some(wait);
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

/// A setter's [`LockError::InvalidArgument`] as the master/sub locks' own.
fn invalid(error: LockError) -> BranchError {
    match error {
        LockError::InvalidArgument {
            name,
            value,
            problem,
            ..
        } => BranchError::InvalidArgument {
            name,
            value,
            problem,
        },
        other => BranchError::from(other),
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
