//! The fred clients behind a lock: one multiplexed connection for commands, one for pub/sub.

use fred::clients::SubscriberClient;
use fred::prelude::*;
use lock_core::LockError;

use crate::config::{RedisLockConfig, scrub};

/// Reconnect forever, 100 ms doubling to 2 s: a Redis outage makes acquisitions fail closed, it
/// must never leave the client permanently disconnected.
fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 100, 2_000, 2)
}

/// Builds (does not connect) the command client and the subscriber client.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `redis.address` when fred cannot parse the URL.
pub(crate) fn build_clients(
    config: &RedisLockConfig,
) -> Result<(Client, SubscriberClient), LockError> {
    let mut fred_config =
        Config::from_url(&config.address).map_err(|e| LockError::InvalidArgument {
            name: "redis.address",
            value: config.redacted_address(),
            problem: format!(
                "{}; accepted: redis://[user[:password]@]host[:port][/db]",
                scrub(e.details(), &config.address)
            ),
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
        });
    let client = builder.build().map_err(|e| invalid_address(config, &e))?;
    let subscriber = builder
        .build_subscriber_client()
        .map_err(|e| invalid_address(config, &e))?;
    Ok((client, subscriber))
}

fn invalid_address(config: &RedisLockConfig, error: &Error) -> LockError {
    LockError::InvalidArgument {
        name: "redis.address",
        value: config.redacted_address(),
        problem: scrub(error.details(), &config.address),
    }
}
