//! How a Redis [`LockHandle`](lock_core::lock::LockHandle) gives its lock back.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::LockError;
use lock_core::lock::{LeaseRelease, ReleaseOutcome};

use crate::core::error::RedisFailure;
use crate::lock::background::BackgroundRelease;
use crate::lock::background::Grant;
use crate::lock::inner::Inner;

/// The release side of one grant: owner-checked, and it stops the watchdog first.
#[derive(Debug)]
pub(crate) struct RedisRelease {
    pub(crate) inner: Arc<Inner>,
    pub(crate) grant: Arc<Grant>,
    /// The grant in [`Inner::held`].
    pub(crate) held: u64,
}

impl RedisRelease {
    /// Takes the grant out of the client's held leases and stops its renewal; `false` when a
    /// shutdown took it first (and releases it).
    fn take(&self) -> bool {
        if self.inner.held.remove(self.held).is_none() {
            return false;
        }
        if let Some(id) = self.grant.renewal {
            self.inner.watchdog.unregister(id);
        }
        true
    }
}

#[async_trait]
impl LeaseRelease for RedisRelease {
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
        if !self.take() {
            // The shutdown marked the lease lost before releasing it.
            return Ok(ReleaseOutcome::NotHeld);
        }
        let grant = &self.grant;
        let mut unconfirmed = Unconfirmed {
            release: &self,
            armed: true,
        };
        let result = self
            .inner
            .release(&grant.name, &grant.owner, Some(grant.token))
            .await;
        unconfirmed.armed = result.as_ref().is_err_and(|error| {
            RedisFailure::find(error).is_none_or(|failure| failure.refusal().is_none())
        });
        result
    }

    fn release_in_background(self: Box<Self>) {
        if self.take() {
            let grant = &self.grant;
            self.inner.release_in_background(
                grant.name.clone(),
                grant.owner.clone(),
                Some(grant.token),
                BackgroundRelease::Dropped,
                grant.ttl,
            );
        }
    }
}

/// Sends a release again in the background when it failed without a refusal, or was cancelled
/// before Redis answered, so that the key is freed once Redis answers rather than at its TTL.
struct Unconfirmed<'a> {
    release: &'a RedisRelease,
    armed: bool,
}

impl Drop for Unconfirmed<'_> {
    fn drop(&mut self) {
        if self.armed {
            let grant = &self.release.grant;
            self.release.inner.release_in_background(
                grant.name.clone(),
                grant.owner.clone(),
                Some(grant.token),
                BackgroundRelease::Unconfirmed,
                grant.ttl,
            );
        }
    }
}
