//! A [`DistributedLock`] that is switched off: every acquisition fails with `LOCK_DISABLED`.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::LockError;
use crate::lock::handle::LockHandle;
use crate::lock::options::AcquireOptions;
use crate::lock::port::DistributedLock;
use crate::lock::shutdown::ShutdownSummary;

/// The lock of a service whose distributed lock is switched off by configuration
/// (`telco.platform.lock.enabled = false`): it never grants, and holds no backend connection.
///
/// Every acquisition with a valid key and options fails with [`LockError::Disabled`] (code
/// `LOCK_DISABLED`, HTTP 503) carrying [`detail`](DisabledLock::detail); invalid ones fail with
/// `LOCK_INVALID_ARGUMENT` first, as with any lock. So fail-closed calls
/// ([`with_lock`](crate::DistributedLockExt::with_lock), `acquire`) fail as they would without a lock,
/// and fail-open calls ([`with_lock_fail_open`](crate::DistributedLockExt::with_lock_fail_open)) run
/// their section unguarded with reason `lock_disabled`. It lets a service hold one
/// `Arc<dyn DistributedLock>` whether or not the lock is enabled (the starter's
/// `LockStarter::lock_or_disabled`).
///
/// Its [`namespace`](DistributedLock::namespace) is `disabled`. Being a lock that never grants,
/// it does not pass the conformance suite.
///
/// # Examples
///
/// ```
/// use lock_core::{DisabledLock, DistributedLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lock = DisabledLock::new("telco.platform.lock.enabled = false from config/lock.toml");
/// let err = lock.acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
/// assert_eq!(err.code(), "LOCK_DISABLED");
/// assert!(err.to_string().contains("from config/lock.toml"));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisabledLock {
    detail: String,
}

impl DisabledLock {
    /// A disabled lock; `detail` says where the lock was switched off, e.g.
    /// `telco.platform.lock.enabled = false from environment variable TELCO_PLATFORM_LOCK_ENABLED`.
    pub fn new(detail: impl Into<String>) -> Self {
        DisabledLock {
            detail: detail.into(),
        }
    }

    /// Where the lock was switched off, as given to [`new`](DisabledLock::new).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::DisabledLock;
    ///
    /// let lock = DisabledLock::new("telco.platform.lock.enabled = false from config/lock.toml");
    /// assert_eq!(lock.detail(), "telco.platform.lock.enabled = false from config/lock.toml");
    /// ```
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

#[async_trait]
impl DistributedLock for DisabledLock {
    fn namespace(&self) -> &str {
        "disabled"
    }

    async fn acquire_lease(
        &self,
        _key: &str,
        _options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        Err(LockError::Disabled {
            detail: self.detail.clone(),
        })
    }

    /// Nothing to release: a disabled lock never grants a lease.
    async fn shutdown(&self, _timeout: Duration) -> ShutdownSummary {
        ShutdownSummary::default()
    }
}
