//! The state one client shares between its lock, its handles and its background tasks.

use std::sync::Arc;

use fred::prelude::*;
use lock_core::{LockError, OwnerTokens, ReleaseOutcome};

use crate::config::{RedisLockConfig, TOMBSTONE_TTL};
use crate::connection::Health;
use crate::error::RedisFailure;
use crate::keys::KeyLayout;
use crate::scripts::Scripts;
use crate::subscriptions::Subscriptions;
use crate::watchdog::Registry;

#[derive(Debug)]
pub(crate) struct Inner {
    /// The lock space, e.g. `redis://cache:6379/0 lock:` (password redacted).
    pub(crate) namespace: String,
    pub(crate) client: Client,
    pub(crate) subscriptions: Subscriptions,
    pub(crate) scripts: Scripts,
    pub(crate) keys: KeyLayout,
    pub(crate) owners: OwnerTokens,
    pub(crate) watchdog: Registry,
    pub(crate) config: RedisLockConfig,
    /// The command connection's last connection error, for telling "unreachable" from "slow".
    pub(crate) health: Arc<Health>,
    /// The runtime the client was created on: background releases are spawned here, so dropping
    /// a handle works from any thread.
    pub(crate) runtime: tokio::runtime::Handle,
}

/// Why a release runs in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackgroundRelease {
    /// A handle was dropped: the lease was granted and should be freed now.
    Dropped,
    /// An acquisition failed, timed out or was cancelled after its script may have run: the
    /// grant may or may not exist.
    OutcomeUnknown,
}

impl Inner {
    /// The cause to report for a failed command: "unreachable" with the connection error when
    /// the client is disconnected (the command timed out, was cancelled, lost its connection or
    /// met the connection's authentication error); [`RedisFailure::Refused`] with its
    /// [`Refusal`](crate::error::Refusal) when Redis answered with an error reply (`WRONGTYPE`,
    /// `READONLY`, `OOM`, `BUSY`, …); else the command's own error.
    pub(crate) fn failure(&self, operation: &'static str, error: Error) -> RedisFailure {
        match self.unreachable(operation) {
            Some(unreachable)
                if matches!(
                    error.kind(),
                    ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::IO | ErrorKind::Auth
                ) =>
            {
                unreachable
            }
            // `command` tells Redis' error replies (→ `Refused`) from the client's own errors.
            _ => RedisFailure::command(operation, error),
        }
    }

    /// [`RedisFailure::Unreachable`] if the client is disconnected after a failed connection
    /// attempt.
    pub(crate) fn unreachable(&self, operation: &'static str) -> Option<RedisFailure> {
        if self.client.is_connected() {
            return None;
        }
        let last_error = self.health.last_error()?;
        Some(RedisFailure::Unreachable {
            operation,
            last_error,
        })
    }

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
                cause: Box::new(self.failure("release script", e)),
            })?;
        Ok(if released == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// Releases `owner`'s lease in the background. A failure is logged (a warning for a dropped
    /// handle, debug for a grant of unknown outcome, which usually never existed); the lease then
    /// ends at its TTL.
    pub(crate) fn release_in_background(
        self: &Arc<Self>,
        name: String,
        owner: String,
        why: BackgroundRelease,
    ) {
        let inner = Arc::clone(self);
        self.runtime.spawn(async move {
            match (inner.release(&name, &owner).await, why) {
                (Ok(_), _) => {}
                (Err(error), BackgroundRelease::Dropped) => tracing::warn!(
                    lock_key = %name, %owner, %error,
                    "release of a dropped lock handle failed; the lease ends at its TTL"
                ),
                (Err(error), BackgroundRelease::OutcomeUnknown) => tracing::debug!(
                    lock_key = %name, %owner, %error,
                    "clean-up of a possible grant failed; if it exists, it ends at its TTL"
                ),
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
