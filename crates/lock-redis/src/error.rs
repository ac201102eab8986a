//! The causes lock-redis attaches to fail-closed errors.

use std::time::Duration;

/// What went wrong talking to Redis; carried as the `source` of a
/// [`LockError`](lock_core::LockError).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisFailure {
    /// A command failed: connection refused or lost, timed out, or Redis answered with an error.
    #[error("{operation} failed: {source}")]
    Command {
        /// What was being done, e.g. `acquire script`.
        operation: &'static str,
        /// fred's error (kind and Redis' message).
        #[source]
        source: fred::error::Error,
    },
    /// The client is disconnected and its last connection attempt failed (refused, no route,
    /// authentication failed, …); the command was never answered.
    #[error("Redis is unreachable: {last_error} ({operation} was not answered)")]
    Unreachable {
        /// What was being done.
        operation: &'static str,
        /// The last connection error, e.g. `Connection refused (os error 111)` or `WRONGPASS …`.
        last_error: String,
    },
    /// Redis answered something the protocol does not expect.
    #[error("{operation} returned an unexpected reply: {problem}")]
    Protocol {
        /// What was being done.
        operation: &'static str,
        /// What was wrong with the reply.
        problem: &'static str,
    },
    /// The whole acquisition ran past its wait time plus one command timeout.
    #[error("no answer from Redis within the wait time plus one command timeout ({} ms)", .budget.as_millis())]
    Timeout {
        /// The budget that ran out.
        budget: Duration,
    },
}

impl RedisFailure {
    pub(crate) fn command(operation: &'static str, source: fred::error::Error) -> Self {
        RedisFailure::Command { operation, source }
    }

    pub(crate) fn protocol(operation: &'static str, problem: &'static str) -> Self {
        RedisFailure::Protocol { operation, problem }
    }
}
