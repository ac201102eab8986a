//! The shared client: the command and pub/sub connections of one Redis deployment, their
//! health, and how a failed command is reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::prelude::*;
use lock_core::LockError;

use crate::core::connection::{self, Endpoint, Health};
use crate::core::error::{RedisFailure, Refusal};
use crate::core::sentinel_events;
use crate::core::subscriptions::Subscriptions;

/// The connections every capability of one client uses: cheap to share (`Arc`), closed when
/// the last user drops it.
#[derive(Debug)]
pub(crate) struct RedisCore {
    pub(crate) client: Client,
    pub(crate) subscriptions: Subscriptions,
    /// The command connection's last connection error, for telling "unreachable" from "slow".
    pub(crate) health: Arc<Health>,
    /// The runtime the client was created on: background tasks are spawned here, so dropping
    /// a handle works from any thread.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Set while both connections are being moved off a demoted master (see
    /// [`RedisCore::follow_if_demoted`]).
    pub(crate) following_master: Arc<AtomicBool>,
    /// The address with its secrets redacted, for errors.
    pub(crate) redacted_address: String,
    pub(crate) command_timeout: Duration,
    /// Dropped with the client: ends the retries of a first connection that has not succeeded
    /// (see `connection::keep_connecting`) and the Sentinel follower (`sentinel_events`).
    pub(crate) _stop_connecting: tokio::sync::watch::Sender<()>,
}

/// The least [`RedisCore::connect`] waits for the first connection attempt's outcome: 1 s (it
/// waits the command timeout when that is longer).
const FIRST_CONNECTION_WAIT: Duration = Duration::from_secs(1);

impl RedisCore {
    /// Builds both clients, starts connecting them (and following Sentinel failovers), and
    /// waits for the first connection attempt's outcome: at most the command timeout or 1 s,
    /// whichever is longer. Redis down or not answering does not fail this: the clients keep
    /// reconnecting and the failure is logged once. Also returns whether Redis answered.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when the address cannot be used, or when Redis refuses
    /// the first connection for good (credentials, `NOPERM`): see `RedisLock::connect`.
    pub(crate) async fn connect(
        config: &Endpoint<'_>,
    ) -> Result<(Arc<RedisCore>, bool), LockError> {
        let address = config.address.clone();
        let (client, subscriber) = connection::build_clients(config)?;
        let switches = sentinel_events::SwitchWatch::build(config)?;
        let health = Arc::new(Health::default());
        health.follow(&client, &address, config.command_timeout);
        // The connection tasks end with `quit`, sent when the core is dropped; the retries of
        // a first connection that failed end when `stop_connecting` is dropped with it.
        let (stop_connecting, stop) = tokio::sync::watch::channel(());
        connection::keep_connecting(&client, stop.clone());
        connection::keep_connecting(&subscriber, stop);
        // The first attempt's outcome (it starts at once): a refused connection (Redis down)
        // or refused credentials end it within a round trip.
        let first = tokio::time::timeout(
            config.command_timeout.max(FIRST_CONNECTION_WAIT),
            health.first_outcome(),
        )
        .await;
        let answered = matches!(first, Ok(Ok(())));
        match first {
            Ok(Ok(())) => {
                health.started(&address);
                connection::check_eviction_policy(&client).await;
            }
            Ok(Err(error)) => {
                if let Some(refused) = connection::refused_at_connect(config, &error) {
                    drop(stop_connecting);
                    tokio::spawn(async move {
                        let _ = client.quit().await;
                        let _ = subscriber.quit().await;
                    });
                    return Err(refused);
                }
                // Otherwise Redis is down or unreachable: warned of (once) from here on.
                health.started(&address);
            }
            Err(_) => {
                if !health.started(&address) {
                    tracing::warn!(
                        address = %config.address.to_string(),
                        last_error = health.last_error().as_deref().unwrap_or("none (no answer)"),
                        "Redis is not reachable yet; acquisitions fail closed until it is"
                    );
                }
            }
        }
        let following_master = Arc::<AtomicBool>::default();
        if let Some(switches) = switches {
            let connections = sentinel_events::Connections {
                client: client.clone(),
                subscriber: subscriber.clone(),
                following_master: Arc::clone(&following_master),
                address: address.clone(),
            };
            switches.start(connections, stop_connecting.subscribe());
        }
        let subscriptions = Subscriptions::start(subscriber, &client);
        let core = Arc::new(RedisCore {
            client,
            subscriptions,
            health,
            runtime: tokio::runtime::Handle::current(),
            following_master,
            redacted_address: config.address.to_string(),
            command_timeout: config.command_timeout,
            _stop_connecting: stop_connecting,
        });
        Ok((core, answered))
    }

    /// The cause to report for a failed command: "unreachable" with the connection error when
    /// the client is disconnected (the command timed out, was cancelled, lost its connection or
    /// met the connection's authentication error); [`RedisFailure::Refused`] with its
    /// [`Refusal`](crate::core::error::Refusal) when Redis answered with an error reply (`WRONGTYPE`,
    /// `READONLY`, `OOM`, `BUSY`, …); else the command's own error.
    ///
    /// A command that timed out on a live connection is [`RedisFailure::CommandTimeout`] naming
    /// the address and the command timeout.
    pub(crate) fn failure(&self, operation: &'static str, error: Error) -> RedisFailure {
        self.failure_within(operation, error, self.command_timeout, "command_timeout")
    }

    /// [`RedisCore::failure`] for a command whose timeout is `timeout`, set by `setting` (the
    /// `RedisLockConfig` field or fields it comes from).
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
                address: self.redacted_address.clone(),
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
            if let Err(error) = sentinel_events::reconnect_both(&client, &subscriber).await {
                tracing::debug!(%error, "reconnecting after READONLY failed");
            }
            following.store(false, Ordering::SeqCst);
        });
    }

    /// Resolves with [`RedisFailure::Unreachable`] once the client has been disconnected for one
    /// command timeout without reconnecting: what every wait on Redis selects on, so that a
    /// waiter fails then rather than at its deadline. A shorter outage (a dropped connection, a
    /// failover) passes unnoticed; the waiter re-reads on the resubscription that follows.
    pub(crate) async fn connection_lost(&self, operation: &'static str) -> RedisFailure {
        let last_error = self.health.lost_for(self.command_timeout).await;
        RedisFailure::Unreachable {
            operation,
            last_error,
        }
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
}

impl Drop for RedisCore {
    fn drop(&mut self) {
        let client = self.client.clone();
        self.runtime.spawn(async move {
            let _ = client.quit().await;
        });
    }
}
