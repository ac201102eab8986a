//! An opt-in health check of the lock's Redis: nothing runs unless the service calls
//! [`LockStarter::health`].

use std::fmt;
use std::time::Duration;

use crate::LockStarter;

/// What [`LockStarter::health`] found.
///
/// # Examples
///
/// ```
/// use lock_starter::figment::{Figment, providers::{Format, Toml}};
/// use lock_starter::{HealthStatus, LockStarter};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let off = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
/// let starter = LockStarter::builder().figment(off).build().await?;
/// let status = starter.health().await.status;
/// assert_eq!(status, HealthStatus::Disabled);
///
/// // For a readiness probe: only `Down` means "not ready".
/// let ready = !matches!(status, HealthStatus::Down);
/// assert!(ready);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthStatus {
    /// Redis answered a `PING` within the command timeout.
    Up,
    /// Redis did not answer: acquisitions fail closed until it does.
    Down,
    /// The lock is switched off (`telco.platform.lock.enabled = false`); there is nothing to
    /// check.
    Disabled,
    /// The lock is a custom implementation handed to
    /// [`LockStarterBuilder::lock`](crate::LockStarterBuilder::lock): the starter cannot check it.
    Unknown,
}

impl HealthStatus {
    /// `UP`, `DOWN`, `DISABLED` or `UNKNOWN` (the words of Spring Boot's health endpoint).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::HealthStatus;
    ///
    /// assert_eq!(HealthStatus::Up.as_str(), "UP");
    /// assert_eq!(HealthStatus::Down.to_string(), "DOWN"); // `Display` is the same
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Up => "UP",
            HealthStatus::Down => "DOWN",
            HealthStatus::Disabled => "DISABLED",
            HealthStatus::Unknown => "UNKNOWN",
        }
    }
}

impl fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one health check.
///
/// # Examples
///
/// ```
/// use lock_starter::figment::{Figment, providers::{Format, Toml}};
/// use lock_starter::{Health, HealthStatus, LockStarter};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// # let config = Figment::from(Toml::string(&format!(
/// #     "[telco.platform.lock.redis]\naddress = \"redis://app:s3cret@127.0.0.1:{port}\"\ncommand-timeout = \"100ms\"\n"
/// # )));
/// // `config` points at a Redis that is down.
/// let starter = LockStarter::builder().figment(config).build().await?;
/// let Health { status, latency, detail, .. } = starter.health().await;
/// assert_eq!(status, HealthStatus::Down);
/// assert_eq!(latency, None);
/// assert!(detail.starts_with("redis://app:***@127.0.0.1:")); // the password never shows
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Up, down, disabled or unknown.
    pub status: HealthStatus,
    /// The `PING` round trip, when Redis answered.
    pub latency: Option<Duration>,
    /// For people: the Redis address (password redacted) and, when down, the error.
    pub detail: String,
}

impl LockStarter {
    /// Checks, now, whether the lock's Redis answers: one `PING`, bounded by the command
    /// timeout. Opt-in: the starter never calls it by itself.
    ///
    /// Wire it into a **readiness** or informational health endpoint — and keep it off your
    /// **liveness** probe unless the service truly cannot do anything without Redis: a Redis
    /// failover would otherwise restart every pod at once, which helps nobody (the lock already
    /// fails closed while Redis is away, and recovers by itself when it is back).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::prelude::*;
    /// use lock_starter::HealthStatus;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use lock_starter::figment::{Figment, providers::{Format, Toml}};
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = Figment::from(Toml::string(&format!(
    /// #     "[telco.platform.lock.redis]\naddress = \"redis://127.0.0.1:{port}\"\ncommand-timeout = \"100ms\"\n"
    /// # )));
    /// // `config` points at a Redis that is down.
    /// let starter = LockStarter::builder().figment(config).build().await?;
    /// let health = starter.health().await;
    /// if health.status == HealthStatus::Down {
    ///     eprintln!("lock backend down: {}", health.detail);
    /// }
    /// assert_eq!(health.status, HealthStatus::Down);
    /// # Ok(()) }
    /// ```
    pub async fn health(&self) -> Health {
        let Some(redis) = &self.redis else {
            return match &self.lock {
                Err(detail) => Health {
                    status: HealthStatus::Disabled,
                    latency: None,
                    detail: detail.clone(),
                },
                Ok(lock) => Health {
                    status: HealthStatus::Unknown,
                    latency: None,
                    detail: format!(
                        "custom lock implementation ({}); not checked",
                        lock.namespace()
                    ),
                },
            };
        };
        let address = redis.config().redacted_address();
        match redis.ping().await {
            Ok(latency) => Health {
                status: HealthStatus::Up,
                latency: Some(latency),
                detail: format!("{address} answered PING"),
            },
            Err(error) => Health {
                status: HealthStatus::Down,
                latency: None,
                detail: format!(
                    "{address}: {}",
                    error
                        .acquire_failure()
                        .map_or_else(|| error.to_string(), ToString::to_string)
                ),
            },
        }
    }
}
