//! The state one client shares between its lock, its handles and its background tasks.

use std::sync::Arc;

use fred::prelude::*;
use lock_core::{LockError, OwnerTokens, ReleaseOutcome};

use crate::config::{RedisLockConfig, TOMBSTONE_TTL};
use crate::keys::KeyLayout;
use crate::scripts::Scripts;
use crate::subscriptions::Subscriptions;
use crate::watchdog::Registry;

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) subscriptions: Subscriptions,
    pub(crate) scripts: Scripts,
    pub(crate) keys: KeyLayout,
    pub(crate) owners: OwnerTokens,
    pub(crate) watchdog: Registry,
    pub(crate) config: RedisLockConfig,
    /// The runtime the client was created on: background releases are spawned here, so dropping
    /// a handle works from any thread.
    pub(crate) runtime: tokio::runtime::Handle,
}

impl Inner {
    /// Owner-checked release of `owner`'s lease on lock `name`.
    ///
    /// # Errors
    /// [`LockError::ReleaseFailed`] when Redis did not confirm it.
    pub(crate) async fn release(
        &self,
        name: &str,
        owner: &str,
    ) -> Result<ReleaseOutcome, LockError> {
        let redis_key = self.keys.lock_key(name);
        let args: Vec<Value> = vec![
            owner.into(),
            self.keys.release_channel(name).into(),
            (TOMBSTONE_TTL.as_millis() as i64).into(),
        ];
        let released: i64 = self
            .scripts
            .release
            .evalsha_with_reload(&self.client, redis_key, args)
            .await
            .map_err(|e| LockError::ReleaseFailed {
                key: name.to_owned(),
                cause: Box::new(e),
            })?;
        Ok(if released == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// Releases `owner`'s lease in the background, for handles dropped and acquisitions whose
    /// outcome is unknown. Failures are logged; the lease then ends at its TTL.
    pub(crate) fn release_in_background(self: &Arc<Self>, name: String, owner: String) {
        let inner = Arc::clone(self);
        self.runtime.spawn(async move {
            if let Err(error) = inner.release(&name, &owner).await {
                tracing::warn!(lock_key = %name, %owner, %error, "background release failed; the lease ends at its TTL");
            }
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let client = self.client.clone();
        self.runtime.spawn(async move {
            let _ = client.quit().await;
        });
    }
}
