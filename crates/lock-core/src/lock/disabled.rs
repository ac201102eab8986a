//! A [`DistributedLock`] that is switched off: every acquisition fails with `LOCK_DISABLED`.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::LockError;
use crate::lock::handle::LockHandle;
use crate::lock::options::AcquireOptions;
use crate::lock::port::DistributedLock;
use crate::lock::shutdown::ShutdownSummary;

/// A lock that is switched off: it never grants, and holds no backend connection.
///
/// Every acquisition with a valid key fails with [`LockError::Disabled`] (`LOCK_DISABLED`, HTTP
/// 503) carrying the [`detail`](DisabledLock::detail). So `with_lock` fails as it would without
/// a lock, and [`with_lock_fail_open`](crate::lock::DistributedLockExt::with_lock_fail_open) runs its
/// section unguarded. A service can thus hold one `Arc<dyn DistributedLock>` whether or not the
/// lock is enabled. Its [`namespace`](DistributedLock::namespace) is `disabled`, and it does not
/// pass the conformance suite.
///
/// # Examples
///
/// ```
/// use lock_core::lock::{DisabledLock, DistributedLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lock = DisabledLock::new("switched off in lock.toml");
/// let err = lock.acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
/// assert_eq!(err.code(), "LOCK_DISABLED");
/// assert!(err.to_string().contains("switched off in lock.toml"));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisabledLock {
    detail: String,
}

impl DisabledLock {
    /// A disabled lock; `detail` says where it was switched off, for the errors.
    pub fn new(detail: impl Into<String>) -> Self {
        crate::lock::telemetry::register_series();
        DisabledLock {
            detail: detail.into(),
        }
    }

    /// Where the lock was switched off, as given to [`new`](DisabledLock::new).
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
