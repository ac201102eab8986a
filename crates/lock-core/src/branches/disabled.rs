//! [`DisabledBranches`], the backend of a service whose master/sub locks are switched off.

use std::time::Duration;

use async_trait::async_trait;

use crate::branches::error::BranchError;
use crate::branches::outcome::{BranchRelease, Registration};
use crate::branches::port::Branches;
use crate::branches::sub_key::SubKey;
use crate::watch::ChangeWatch;

/// A [`Branches`] backend that is switched off: masters run untracked and wait for nothing.
///
/// - [`open`](Branches::open) fails with [`BranchError::Disabled`], so a granted master runs its
///   block untracked: every [`register_branch`](crate::branches::Master::register_branch)
///   returns an unregistered token and logs an `INFO` with the `detail`.
/// - [`release_branch`](Branches::release_branch) answers [`BranchRelease::Unknown`], so
///   consumers need no special case.
/// - Every other call fails with [`BranchError::Disabled`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::branches::{BranchRelease, Branches, DisabledBranches, MasterLocks};
/// use lock_core::lock::{InMemoryLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::branches::BranchError> {
/// let branches = Arc::new(DisabledBranches::new("switched off in this service"));
/// let masters = MasterLocks::new(Arc::new(InMemoryLock::new()), branches.clone());
/// let outcome = masters
///     .with_master_lock("ticket:4711", Lease::Watchdog, |master| async move {
///         master.register_branch("search").await // an INFO; the branch runs anyway
///     })
///     .await?;
/// let token = outcome.value?;
/// assert!(!token.is_registered());
/// assert_eq!(outcome.unregistered, ["search"]); // not waited for
/// assert_eq!(branches.release_branch(&token).await?, BranchRelease::Unknown);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisabledBranches {
    detail: String,
}

impl DisabledBranches {
    /// A disabled backend; `detail` says where it was switched off, for the errors and logs.
    pub fn new(detail: impl Into<String>) -> Self {
        DisabledBranches {
            detail: detail.into(),
        }
    }

    fn disabled(&self) -> BranchError {
        BranchError::Disabled {
            detail: self.detail.clone(),
        }
    }
}

#[async_trait]
impl Branches for DisabledBranches {
    fn namespace(&self) -> &str {
        "disabled"
    }

    async fn open(&self, _sub_key: &SubKey, _ttl: Duration) -> Result<(), BranchError> {
        Err(self.disabled())
    }

    async fn register(
        &self,
        _sub_key: &SubKey,
        _branch: &str,
        _ttl: Duration,
    ) -> Result<Registration, BranchError> {
        Err(self.disabled())
    }

    async fn refresh(&self, _sub_key: &SubKey, _ttl: Duration) -> Result<(), BranchError> {
        Err(self.disabled())
    }

    async fn seal(
        &self,
        _sub_key: &SubKey,
        _ttl: Duration,
    ) -> Result<Option<Vec<String>>, BranchError> {
        Err(self.disabled())
    }

    async fn pending(&self, _sub_key: &SubKey) -> Result<Option<Vec<String>>, BranchError> {
        Err(self.disabled())
    }

    async fn watch(&self, _sub_key: &SubKey) -> Result<Box<dyn ChangeWatch>, BranchError> {
        Err(self.disabled())
    }

    async fn release(
        &self,
        _sub_key: &SubKey,
        _branch: &str,
    ) -> Result<BranchRelease, BranchError> {
        Ok(BranchRelease::Unknown)
    }

    async fn close(&self, _sub_key: &SubKey) -> Result<(), BranchError> {
        Err(self.disabled())
    }
}
