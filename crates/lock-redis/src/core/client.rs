//! The shared client: the command and pub/sub connections of one Redis deployment, their
//! health, the key layout and owner tokens, and how a failed command is reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::prelude::*;
use lock_core::{LockError, OwnerTokens};

use crate::core::config::RedisConfig;
use crate::core::connection::{self, Health};
use crate::core::error::{RedisFailure, Refusal};
use crate::core::keys::KeyLayout;
use crate::core::sentinel_events;
use crate::core::subscriptions::Subscriptions;

/// A connection to one Redis deployment that every capability is built on: they share its
/// connections, subscriptions, key prefix and owner tokens, and open none of their own.
///
/// Cheap to clone. The connections close once the client, and every capability built on it,
/// are dropped. Background tasks run on the Tokio runtime that called
/// [`connect`](Self::connect).
///
/// # Examples
///
/// ```no_run
/// use lock_redis::idempotency::RedisIdempotencyStore;
/// use lock_redis::lock::{RedisLock, RedisLockConfig};
/// use lock_redis::{RedisClient, RedisConfig};
///
/// # async fn run() -> Result<(), lock_core::LockError> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
/// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
/// let records = RedisIdempotencyStore::new(&redis).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisClient {
    pub(crate) core: Arc<RedisCore>,
}

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("namespace", &self.core.namespace)
            .field("instance_id", &self.core.owners.instance_id())
            .finish_non_exhaustive()
    }
}

impl RedisClient {
    /// Connects to Redis.
    ///
    /// Waits for the first connection attempt's outcome, at most the command timeout or 1 s,
    /// whichever is longer. A Redis that is down or does not answer does not fail this call:
    /// the client keeps reconnecting in the background (100 ms doubling to 2 s), logs a
    /// warning, and every operation fails closed until Redis answers. Must be called inside a
    /// Tokio runtime.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming the bad setting as [`RedisConfig::validate`] does,
    /// or `tls_ca_file` for a CA file that cannot be used. Also `address` when Redis refuses
    /// the first connection for good: wrong or missing credentials (`WRONGPASS`, `NOAUTH`), or
    /// a user that lacks a command the connection set-up sends (`NOPERM`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let address = format!("redis://127.0.0.1:{port}");
    /// let config = RedisConfig::new(address).command_timeout(Duration::from_millis(250));
    ///
    /// // Bad settings fail at once, before anything connects:
    /// let error = RedisClient::connect(config.clone().key_prefix("{lock}:")).await.unwrap_err();
    /// assert_eq!(error.details()["argument"], "key_prefix");
    ///
    /// // Redis not answering (yet) does not: operations fail closed until it does.
    /// let redis = RedisClient::connect(config).await?;
    /// assert!(redis.ping().await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn connect(config: RedisConfig) -> Result<RedisClient, LockError> {
        config.validate()?;
        let (core, _) = RedisCore::connect(config).await?;
        Ok(RedisClient { core })
    }

    /// The settings this client runs with.
    pub fn config(&self) -> &RedisConfig {
        &self.core.config
    }

    /// Round-trips a `PING`, for health checks; returns the round-trip time.
    ///
    /// # Errors
    /// [`LockError::AcquisitionFailed`] with reason `backend_unavailable` (key `<health>`) when
    /// Redis does not answer within the command timeout, or at once when a connection attempt
    /// just failed.
    pub async fn ping(&self) -> Result<Duration, LockError> {
        let failed = |failure| LockError::backend_unavailable("<health>", failure);
        let client = self.core.client_for("PING", failed)?;
        let started = tokio::time::Instant::now();
        let _: String =
            (client.ping(None).await).map_err(|e| failed(self.core.failure("PING", e)))?;
        Ok(started.elapsed())
    }

    /// The channels this client is subscribed to now: one per key with a local waiter.
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.core.subscriptions.active_channels()
    }
}

/// The state a [`RedisClient`] shares with every capability built on it.
#[derive(Debug)]
pub(crate) struct RedisCore {
    /// The key space, e.g. `redis://cache:6379/0 lock:` (password redacted).
    pub(crate) namespace: String,
    pub(crate) keys: KeyLayout,
    pub(crate) owners: OwnerTokens,
    pub(crate) config: RedisConfig,
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
    /// the first connection for good (credentials, `NOPERM`): see [`RedisClient::connect`].
    pub(crate) async fn connect(
        settings: RedisConfig,
    ) -> Result<(Arc<RedisCore>, bool), LockError> {
        let owners = OwnerTokens::new(&settings.instance_id)?;
        let config = &settings.endpoint()?;
        let address = config.address.clone();
        if address.username().is_some() && !address.has_password() {
            // The user part is not shown: it may be a password written in the user's place.
            tracing::warn!(
                address = %address,
                "the Redis address has a user but no password, so no AUTH is sent and the \
                 connection is the default user's; write user:password@ for an ACL user, or \
                 :password@ for a password alone"
            );
        }
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
                    // A refused first attempt (fail fast) ended the command client's
                    // connection task. One still mid-attempt is refused the same way, and its
                    // retries end with `stop_connecting`.
                    tokio::spawn(async move {
                        connection::quit(&client).await;
                        connection::quit(&subscriber).await;
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
                        "Redis is not reachable yet; until it answers, each capability fails as its policy says"
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
            namespace: connection::namespace(&address, &settings.key_prefix),
            keys: KeyLayout::new(&settings.key_prefix),
            owners,
            config: settings.clone(),
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
    /// setting or settings it comes from).
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
                    ErrorKind::Timeout
                        | ErrorKind::Canceled
                        | ErrorKind::IO
                        | ErrorKind::Auth
                        | ErrorKind::Protocol
                ) =>
            {
                unreachable
            }
            _ if *error.kind() == ErrorKind::Timeout => {
                self.watch_stall(timeout, setting);
                RedisFailure::CommandTimeout {
                    operation,
                    address: self.redacted_address.clone(),
                    timeout,
                    setting,
                }
            }
            // `command` tells Redis' error replies (→ `Refused`) from the client's own errors.
            _ => RedisFailure::command(operation, error),
        }
    }

    /// After a command got no answer within `timeout` (set by `setting`) on a connection with
    /// no error: warns once of the stall, and pings every second until Redis answers, to say
    /// when it did.
    fn watch_stall(&self, timeout: Duration, setting: &'static str) {
        let Ok(address) = &self.config.address else {
            return;
        };
        if !self.health.unanswered(address, timeout, setting) {
            return;
        }
        let (client, health, address) = (
            self.client.clone(),
            Arc::downgrade(&self.health),
            address.clone(),
        );
        self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let answered = client.ping::<Value>(None).await.is_ok();
                let Some(health) = health.upgrade() else {
                    return;
                };
                if answered {
                    health.answered(&address);
                    return;
                }
            }
        });
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

    /// Whether Redis has answered this client's connection and it is up: set-up work (script
    /// preloads, start-up checks) is sent only then, so that a Redis that does not answer
    /// delays start-up by one command timeout in all, not one per step.
    pub(crate) fn answering(&self) -> bool {
        self.health.is_connected()
    }

    /// The command client, or at once `failed(unreachable)` while Redis is known down
    /// ([`RedisCore::unreachable`]), rather than a command timeout later.
    pub(crate) fn client_for<E>(
        &self,
        operation: &'static str,
        failed: impl FnOnce(RedisFailure) -> E,
    ) -> Result<&Client, E> {
        match self.unreachable(operation) {
            Some(failure) => Err(failed(failure)),
            None => Ok(&self.client),
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
        self.runtime
            .spawn(async move { connection::quit(&client).await });
    }
}

#[cfg(test)]
mod tests {
    use lock_testkit::RedisServer;
    use lock_testkit::logs::CapturedLogs;
    use tracing::instrument::WithSubscriber;

    use super::*;

    /// A user without a password is no AUTH at all: the connection is the default user's, so
    /// one `WARN` says so, without the user part, which may be a password in the wrong place.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_user_without_a_password_is_warned_of() {
        let redis = RedisServer::start().await.unwrap();
        let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
        let address = redis.url().replace("redis://", "redis://Xk4PwLeak@");
        let (_core, answered) = RedisCore::connect(RedisConfig::new(address))
            .with_subscriber(subscriber)
            .await
            .unwrap();
        assert!(answered);
        let text = logs.text();
        assert_eq!(
            text.matches("has a user but no password").count(),
            1,
            "{text}"
        );
        assert!(!text.contains("Xk4PwLeak"), "{text}");
    }
}
