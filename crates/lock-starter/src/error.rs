//! Why the starter could not start.

use lock_core::LockError;

use crate::config::ConfigError;

/// Why the starter could not start.
///
/// # Examples
///
/// ```
/// use lock_starter::figment::{Figment, providers::{Format, Toml}};
/// use lock_starter::{LockStarter, StartError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let toml = Figment::from(Toml::string("[telco.platform.lock]\nwait-time = 5\n"));
/// match LockStarter::builder().figment(toml).build().await {
///     Err(StartError::Config(error)) => {
///         // Stop the service and print it: the key, the value, where from, what is accepted.
///         assert_eq!(error.key(), Some("telco.platform.lock.wait-time"));
///         assert!(error.to_string().contains("a unit is required"), "{error}");
///     }
///     other => panic!("expected a configuration error, got {other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is invalid; the message names the key, the value, where it came from
    /// and what is accepted.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The lock could not be created from valid configuration (e.g. an address the Redis client
    /// rejects).
    #[error("the distributed lock could not be created: {0}")]
    Lock(#[from] LockError),
}
