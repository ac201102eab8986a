//! The state one client shares between its lock, its handles and its background tasks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::prelude::*;
use lock_core::{HeldLeases, LockError, OwnerTokens, ReleaseOutcome};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::config::{RedisLockConfig, TOMBSTONE_TTL};
use crate::connection::Health;
use crate::error::{RedisFailure, Refusal};
use crate::keys::KeyLayout;
use crate::scripts::Scripts;
use crate::shutdown::{Background, Grant};
use crate::subscriptions::{ReleaseWake, Subscriptions};
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
    /// Set while both connections are being moved off a demoted master (see
    /// [`Inner::follow_if_demoted`]).
    pub(crate) following_master: Arc<AtomicBool>,
    /// The grants this client holds, closed by [`Inner::shutdown`].
    pub(crate) held: HeldLeases<Arc<Grant>>,
    /// Background releases, fair-queue leaves and acquisitions in flight, which a shutdown
    /// waits for.
    pub(crate) background: Arc<Background>,
    /// Dropped with the client: ends the retries of a first connection that has not succeeded
    /// (see `connection::keep_connecting`).
    pub(crate) _stop_connecting: tokio::sync::watch::Sender<()>,
}

/// Why a release runs in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackgroundRelease {
    /// A handle was dropped: the lease was granted and should be freed now.
    Dropped,
    /// An acquisition failed, timed out or was cancelled after its script may have run: the
    /// grant may or may not exist.
    OutcomeUnknown,
    /// The client was shut down while the lease was held.
    ShutDown,
}

impl Inner {
    /// The cause to report for a failed command: "unreachable" with the connection error when
    /// the client is disconnected (the command timed out, was cancelled, lost its connection or
    /// met the connection's authentication error); [`RedisFailure::Refused`] with its
    /// [`Refusal`](crate::error::Refusal) when Redis answered with an error reply (`WRONGTYPE`,
    /// `READONLY`, `OOM`, `BUSY`, …); else the command's own error.
    ///
    /// A command that timed out on a live connection is [`RedisFailure::CommandTimeout`] naming
    /// the address and the command timeout.
    pub(crate) fn failure(&self, operation: &'static str, error: Error) -> RedisFailure {
        self.failure_within(
            operation,
            error,
            self.config.command_timeout,
            "command_timeout",
        )
    }

    /// [`Inner::failure`] for a command whose timeout is `timeout`, set by `setting` (the
    /// [`RedisLockConfig`] field or fields it comes from).
    pub(crate) fn failure_within(
        &self,
        operation: &'static str,
        error: Error,
        timeout: Duration,
        setting: &'static str,
    ) -> RedisFailure {
        self.follow_if_demoted(&error);
        match self.unreachable(operation) {
            Some(unreachable)
                if matches!(
                    error.kind(),
                    ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::IO | ErrorKind::Auth
                ) =>
            {
                unreachable
            }
            _ if *error.kind() == ErrorKind::Timeout => RedisFailure::CommandTimeout {
                operation,
                address: self.config.redacted_address(),
                timeout,
                setting,
            },
            // `command` tells Redis' error replies (→ `Refused`) from the client's own errors.
            _ => RedisFailure::command(operation, error),
        }
    }

    /// Through Sentinel, a `READONLY` reply means the node this client is connected to was
    /// demoted to a replica without closing its connections (a manual failover before the
    /// Sentinels reconfigure the old master, the `FAILOVER` command, a `REPLICAOF`): fred would
    /// keep using it, and every write would fail until something closed the connection. Reconnect
    /// both connections — fred asks the Sentinels for the current master and checks its `ROLE` —
    /// the pub/sub one too, since releases published on the new master never reach a replica's
    /// subscribers. One reconnection at a time; a no-op for other errors and other deployments.
    pub(crate) fn follow_if_demoted(&self, error: &Error) {
        if !self.client.uses_sentinels()
            || Refusal::of_reply(error) != Some(Refusal::ReadOnly)
            || self.following_master.swap(true, Ordering::SeqCst)
        {
            return;
        }
        tracing::warn!(
            "the Redis master was demoted to a replica (READONLY); reconnecting to the master the Sentinels name"
        );
        let client = self.client.clone();
        let subscriber = self.subscriptions.subscriber().clone();
        let following = Arc::clone(&self.following_master);
        self.runtime.spawn(async move {
            if let Err(error) = crate::sentinel_events::reconnect_both(&client, &subscriber).await {
                tracing::debug!(%error, "reconnecting after READONLY failed");
            }
            following.store(false, Ordering::SeqCst);
        });
    }

    /// [`RedisFailure::Unreachable`] if the client is disconnected after a failed connection
    /// attempt (see [`Health`]).
    pub(crate) fn unreachable(&self, operation: &'static str) -> Option<RedisFailure> {
        let last_error = self.health.last_error()?;
        Some(RedisFailure::Unreachable {
            operation,
            last_error,
        })
    }

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
        // The fair queue keys too: the release message names the first fair waiter.
        let keys = self.keys.fair_keys(name);
        let channel = self.keys.release_channel(name);
        let args: Vec<Value> = vec![
            owner.into(),
            channel.as_str().into(),
            (TOMBSTONE_TTL.as_millis() as i64).into(),
            if token.is_some() { "hold" } else { "free" }.into(),
        ];
        let release = self
            .scripts
            .release
            .evalsha_with_reload(&self.client, keys, args);
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
                let wake = self.subscriptions.releasing(&channel, token);
                (release.await, wake)
            }
        };
        let released: i64 = released.map_err(|e| LockError::ReleaseFailed {
            key: name.to_owned(),
            cause: Box::new(self.failure("release script", e)),
        })?;
        Ok(if released >= 1 {
            let receivers = u64::try_from(released - 1).unwrap_or(0);
            self.subscriptions.released(&channel, receivers, wake);
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
        self.runtime.spawn(async move {
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
        self.runtime.spawn(async move {
            let args: Vec<Value> = vec![
                owner.as_str().into(),
                inner.keys.release_channel(&name).into(),
            ];
            let left: Result<i64, Error> = inner
                .scripts
                .fair_leave
                .evalsha_with_reload(&inner.client, inner.keys.fair_keys(&name), args)
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

impl Drop for Inner {
    fn drop(&mut self) {
        let client = self.client.clone();
        self.runtime.spawn(async move {
            let _ = client.quit().await;
        });
    }
}
