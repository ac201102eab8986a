//! The fred clients behind a lock: one multiplexed connection for commands, one for pub/sub.

use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::CustomCommand;
use lock_core::LockError;

use crate::config::{RedisLockConfig, scrub};

/// Reconnect forever, 100 ms doubling to 2 s: a Redis outage makes acquisitions fail closed, it
/// must never leave the client permanently disconnected.
fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 100, 2_000, 2)
}

/// The lock space of an address and key prefix: `redis://<host>:<port>/<db> <prefix>`, the same
/// however the address was written (default port and database filled in, user and password
/// left out). Host names are compared as written: `localhost` and `127.0.0.1` differ.
pub(crate) fn namespace(config: &RedisLockConfig) -> String {
    let parsed = Config::from_url(&config.address).ok();
    let server = parsed
        .as_ref()
        .and_then(|c| c.server.hosts().into_iter().next())
        .map_or_else(
            || config.redacted_address(),
            |s| format!("{}:{}", s.host, s.port),
        );
    let database = parsed.and_then(|c| c.database).unwrap_or(0);
    format!("redis://{server}/{database} {}", config.key_prefix)
}

/// Builds (does not connect) the command client and the subscriber client.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `redis.address` when fred cannot parse the URL.
pub(crate) fn build_clients(
    config: &RedisLockConfig,
) -> Result<(Client, SubscriberClient), LockError> {
    check_scheme(config)?;
    let mut fred_config = Config::from_url(&config.address).map_err(|e| {
        LockError::invalid_argument(
            "redis.address",
            config.redacted_address(),
            format!(
                "{}; accepted: redis://[user[:password]@]host[:port][/db]",
                scrub(e.details(), &config.address)
            ),
        )
    })?;
    // Keep retrying the first connection too: a service may start while Redis is down, and its
    // acquisitions fail closed until Redis answers.
    fred_config.fail_fast = false;

    let mut builder = Builder::from_config(fred_config);
    builder
        .set_policy(reconnect_policy())
        .with_performance_config(|perf| {
            // fred's default is no timeout at all; every command is bounded by ours.
            perf.default_command_timeout = config.command_timeout;
        })
        .with_connection_config(|conn| {
            conn.connection_timeout = config.command_timeout;
            conn.internal_command_timeout = config.command_timeout;
            conn.tcp.nodelay = Some(true);
            // An idle connection a middlebox dropped silently is found within about a minute
            // (30 s idle, then 3 probes 10 s apart) instead of the kernel's two hours.
            conn.tcp.keepalive = Some(
                socket2::TcpKeepalive::new()
                    .with_time(Duration::from_secs(30))
                    .with_interval(Duration::from_secs(10))
                    .with_retries(3),
            );
        });
    let client = builder.build().map_err(|e| invalid_address(config, &e))?;
    let subscriber = builder
        .build_subscriber_client()
        .map_err(|e| invalid_address(config, &e))?;
    Ok((client, subscriber))
}

/// Warns when Redis may evict lock keys: every lock key has a TTL, so any policy but
/// `noeviction` (`allkeys-*` and `volatile-*` alike) can drop a held lock under memory pressure,
/// and its holder learns it only at the next renewal. Silent when `CONFIG` is not allowed (as on
/// many managed services).
pub(crate) async fn check_eviction_policy(client: &Client) {
    let command = CustomCommand::new_static("CONFIG", None, false);
    let reply: Result<Vec<String>, Error> = client
        .custom(command, vec!["GET", "maxmemory-policy"])
        .await;
    if let Ok(reply) = reply {
        if let [_, policy] = reply.as_slice() {
            if policy != "noeviction" {
                tracing::warn!(
                    maxmemory_policy = %policy,
                    "Redis may evict held lock keys under memory pressure; use maxmemory-policy noeviction for the lock's Redis"
                );
            }
        }
    }
}

/// Only single-server `redis://` is supported and tested so far.
fn check_scheme(config: &RedisLockConfig) -> Result<(), LockError> {
    let scheme = config.address.split_once("://").map(|(scheme, _)| scheme);
    let problem = match scheme {
        Some("redis") => return Ok(()),
        Some("rediss" | "redis-sentinel" | "redis-cluster") => {
            format!("{}:// is not supported yet", scheme.unwrap_or_default())
        }
        _ => "not a redis:// URL".to_owned(),
    };
    Err(LockError::invalid_argument(
        "redis.address",
        config.redacted_address(),
        format!("{problem}; accepted: redis://[user[:password]@]host[:port][/db]"),
    ))
}

fn invalid_address(config: &RedisLockConfig, error: &Error) -> LockError {
    LockError::invalid_argument(
        "redis.address",
        config.redacted_address(),
        scrub(error.details(), &config.address),
    )
}

/// What the command connection last reported: the latest connection error, cleared when it
/// (re)connects. A command that times out while the client is disconnected is reported with
/// this error ("connection refused", "WRONGPASS …"), not as a bare timeout, so on-call sees the
/// cause.
#[derive(Debug, Default)]
pub(crate) struct Health {
    last_error: std::sync::Mutex<Option<String>>,
}

impl Health {
    /// Starts following `client`'s error and reconnect events. The task ends with the client.
    pub(crate) fn follow(self: &std::sync::Arc<Self>, client: &Client, address: &RedisLockConfig) {
        let health = std::sync::Arc::downgrade(self);
        let mut errors = client.error_rx();
        let mut reconnects = client.reconnect_rx();
        let address = address.address.clone();
        tokio::spawn(async move {
            loop {
                let update = tokio::select! {
                    error = errors.recv() => match error {
                        Ok((error, _)) => Some(scrub(&describe(&error), &address)),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return,
                    },
                    reconnect = reconnects.recv() => match reconnect {
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                        Err(_) => return,
                    },
                };
                let Some(health) = health.upgrade() else {
                    return;
                };
                *health.lock() = update;
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_error.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last connection error, if the client has not connected since.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.lock().clone()
    }
}

/// A connection error as one readable phrase: fred renders I/O errors with `Debug`
/// (`Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }`); keep the message.
fn describe(error: &Error) -> String {
    let details = error.details();
    match error.kind() {
        ErrorKind::IO => {
            let message = details
                .split_once("message: \"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map_or(details, |(message, _)| message);
            format!("connection failed: {message}")
        }
        ErrorKind::Auth => format!("authentication failed: {details}"),
        _ => error.to_string(),
    }
}
