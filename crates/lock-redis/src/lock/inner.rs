//! The state one client shares between its lock, its handles and its background tasks.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use lock_core::LockError;
use lock_core::lock::{HeldLeases, ReleaseOutcome};
use tokio::time::Instant;

use crate::core::backoff::Backoff;
use crate::core::client::RedisCore;
use crate::core::error::RedisFailure;
use crate::core::subscriptions::ReleaseWake;
use crate::lock::background::{Background, BackgroundRelease, Grant};
use crate::lock::config::RedisLockConfig;
use crate::lock::config::limits::TOMBSTONE_TTL;
use crate::lock::registry::Registry;
use crate::lock::scripts::Scripts;

#[derive(Debug)]
pub(crate) struct Inner {
    /// The client's shared state: connections, key layout, owner tokens.
    pub(crate) core: Arc<RedisCore>,
    pub(crate) scripts: Scripts,
    pub(crate) watchdog: Registry,
    pub(crate) config: RedisLockConfig,
    /// The grants this client holds, closed by [`Inner::shutdown`].
    pub(crate) held: HeldLeases<Arc<Grant>>,
    /// Background releases, fair-queue leaves and acquisitions in flight, which a shutdown
    /// waits for.
    pub(crate) background: Arc<Background>,
}

impl Inner {
    /// Owner-checked release of `owner`'s lease on lock `name`; `token` is the grant's fencing
    /// token when known (it lets this client recognise the echo of its own release message).
    /// It is unknown only for a grant of unknown outcome, which never reached a caller: that
    /// one is freed at once, whatever its minimum hold — nobody did the work the hold protects.
    ///
    /// # Errors
    /// [`LockError::ReleaseFailed`] when Redis did not confirm it.
    pub(crate) async fn release(
        &self,
        name: &str,
        owner: &str,
        token: Option<u64>,
    ) -> Result<ReleaseOutcome, LockError> {
        // Known down (a connection attempt failed): say so now, as an acquisition does, rather
        // than after a command timeout; the lease ends at its TTL either way.
        if let Some(unreachable) = self.core.unreachable("release script") {
            return Err(LockError::ReleaseFailed {
                key: name.to_owned(),
                cause: Box::new(unreachable),
            });
        }
        let channel = self.core.keys.release_channel(name);
        let call = || {
            // The fair queue keys too: the release message names the first fair waiter.
            let keys = self
                .core
                .keys
                .fair_keys(name)
                .into_iter()
                .map(Key::from)
                .collect();
            let args: Vec<Value> = vec![
                owner.into(),
                channel.as_str().into(),
                (TOMBSTONE_TTL.as_millis() as i64).into(),
                Value::from_static_str(if token.is_some() { "hold" } else { "free" }),
            ];
            (keys, args)
        };
        let release =
            crate::core::scripts::call::<i64>(&self.core.client, &self.scripts.release, call);
        let mut release = std::pin::pin!(release);
        // The first poll queues the release on the connection. Waking this client's next waiter
        // now lets its attempt travel right behind the release — Redis runs one connection's
        // commands in order — so the lock changes hands in about one round trip instead of two.
        // Should the release not free the lock, that attempt just finds it held.
        // (Unless other clients wait too: then this client's waiters hear of the release by the
        // release message, as theirs do.)
        let (released, wake) = match futures::poll!(release.as_mut()) {
            std::task::Poll::Ready(result) => (result, ReleaseWake::OnReply),
            std::task::Poll::Pending => {
                let wake = self.core.subscriptions.releasing(&channel, token);
                (release.await, wake)
            }
        };
        let released: i64 = released.map_err(|e| LockError::ReleaseFailed {
            key: name.to_owned(),
            cause: Box::new(self.core.failure("release script", e)),
        })?;
        Ok(if released >= 1 {
            let receivers = u64::try_from(released - 1).unwrap_or(0);
            self.core.subscriptions.released(&channel, receivers, wake);
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
        token: Option<u64>,
        why: BackgroundRelease,
        ttl: Duration,
    ) {
        let inner = Arc::clone(self);
        let ticket = self.background.start();
        self.core.runtime.spawn(async move {
            // Retried while Redis is unreachable or slow, so a grant left behind by an outage
            // is freed as soon as Redis answers again rather than blocking the key for its whole
            // TTL; given up once the grant would have expired anyway (at most a minute, so a
            // client is not kept alive for a long fixed lease). A refusal is not retried.
            let give_up = Instant::now() + ttl.min(BACKGROUND_RELEASE_RETRY);
            let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
            let error = loop {
                match inner.release(&name, &owner, token).await {
                    Ok(outcome) => return ticket.done(outcome == ReleaseOutcome::Released, false),
                    Err(error)
                        if RedisFailure::find(&error).is_some_and(|f| f.refusal().is_some()) =>
                    {
                        break error;
                    }
                    Err(error) => {
                        let delay = backoff.next_delay();
                        if Instant::now() + delay >= give_up {
                            break error;
                        }
                        tokio::time::sleep(delay).await;
                    }
                }
            };
            match why {
                BackgroundRelease::Dropped => tracing::warn!(
                    lock_key = %name, %owner, %error,
                    "release of a dropped lock handle failed; the lease ends at its TTL"
                ),
                BackgroundRelease::OutcomeUnknown => tracing::debug!(
                    lock_key = %name, %owner, %error,
                    "clean-up of a possible grant failed; if it exists, it ends at its TTL"
                ),
                BackgroundRelease::ShutDown => tracing::warn!(
                    lock_key = %name, %owner, %error,
                    "release of a lease held at shutdown failed; the lease ends at its TTL"
                ),
                BackgroundRelease::Unconfirmed => tracing::warn!(
                    lock_key = %name, %owner, %error,
                    "an unconfirmed release was retried without success; the lease ends at its TTL"
                ),
            }
            // A grant of unknown outcome usually never existed: not a failed release.
            ticket.done(false, why != BackgroundRelease::OutcomeUnknown);
        });
    }
}

impl Inner {
    /// Takes fair waiter `owner` out of lock `name`'s queue in the background (it gave up,
    /// failed or was dropped), so the waiters behind it move up now rather than when its place
    /// times out. A failure is logged at debug: the place then times out (the fair waiter
    /// timeout at most). A shutdown waits for it like for a release (counted as pending if it
    /// is still running at the shutdown's deadline).
    pub(crate) fn leave_queue_in_background(self: &Arc<Self>, name: String, owner: String) {
        let inner = Arc::clone(self);
        let ticket = self.background.start();
        self.core.runtime.spawn(async move {
            let args: Vec<Value> = vec![
                owner.as_str().into(),
                inner.core.keys.release_channel(&name).into(),
            ];
            let left: Result<i64, Error> = inner
                .scripts
                .fair_leave
                .evalsha_with_reload(&inner.core.client, inner.core.keys.fair_keys(&name), args)
                .await;
            if let Err(error) = left {
                tracing::debug!(lock_key = %name, %owner, %error, "leaving the fair queue failed; the place times out");
            }
            // Not a release: a place in the queue is no lease.
            ticket.done(false, false);
        });
    }
}

/// The longest a background release is retried: 60 s.
const BACKGROUND_RELEASE_RETRY: Duration = Duration::from_secs(60);
