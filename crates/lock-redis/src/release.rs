//! How a Redis [`LockHandle`](lock_core::LockHandle) gives its lock back.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{LeaseRelease, LockError, ReleaseOutcome};

use crate::inner::{BackgroundRelease, Inner};

/// The release side of one grant: owner-checked, and it stops the watchdog first.
#[derive(Debug)]
pub(crate) struct RedisRelease {
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: String,
    pub(crate) owner: String,
    /// The grant's fencing token.
    pub(crate) token: u64,
    /// The watchdog registration, for watchdog leases.
    pub(crate) renewal: Option<u64>,
    /// The key's TTL at grant: how long a background release is worth retrying.
    pub(crate) ttl: Duration,
}

impl RedisRelease {
    fn stop_renewal(&self) {
        if let Some(id) = self.renewal {
            self.inner.watchdog.unregister(id);
        }
    }
}

#[async_trait]
impl LeaseRelease for RedisRelease {
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
        self.stop_renewal();
        self.inner
            .release(&self.name, &self.owner, Some(self.token))
            .await
    }

    fn release_in_background(self: Box<Self>) {
        self.stop_renewal();
        let RedisRelease {
            inner,
            name,
            owner,
            token,
            ttl,
            ..
        } = *self;
        inner.release_in_background(name, owner, Some(token), BackgroundRelease::Dropped, ttl);
    }
}
