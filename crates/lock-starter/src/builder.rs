//! Wiring: configuration → the lock a service uses, with the defaults-then-overrides rule.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use figment::Figment;
use lock_core::{DisabledLock, DistributedLock, LockError};
use lock_redis::{RedisLock, RedisLockConfig};

use crate::config::{ConfigError, ConfigSources, LockSettings};

/// Why the starter could not start.
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

/// The started lock module: hands the configured [`DistributedLock`] to whoever asks.
///
/// ```no_run
/// use lock_starter::prelude::*;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let starter = LockStarter::builder().toml_file("config/lock.toml").build().await?;
/// let lock = starter.lock()?; // Arc<dyn DistributedLock>
/// lock.with_lock("bill-run:2026-11", Lease::Watchdog, || async { /* … */ }).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockStarter {
    pub(crate) lock: Result<Arc<dyn DistributedLock>, String>,
    /// The Redis lock the starter built (not a custom one), for [`LockStarter::health`].
    pub(crate) redis: Option<RedisLock>,
    settings: LockSettings,
}

impl fmt::Debug for LockStarter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockStarter")
            .field(
                "lock",
                &self.lock.as_ref().map_err(|detail| detail.as_str()),
            )
            .field("settings", &self.settings)
            .finish()
    }
}

impl LockStarter {
    /// A builder: built-in defaults, then TOML files, then the environment; overrides on top.
    pub fn builder() -> LockStarterBuilder {
        LockStarterBuilder::default()
    }

    /// The lock, as `Arc<dyn DistributedLock>`.
    ///
    /// # Errors
    /// [`LockError::Disabled`] (code `LOCK_DISABLED`, HTTP 503) when
    /// `telco.platform.lock.enabled = false`; the message says where that was set. No Redis
    /// connection exists in that case. [`lock_or_disabled`](LockStarter::lock_or_disabled)
    /// returns a lock that fails so on every acquisition instead.
    pub fn lock(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        self.lock
            .clone()
            .map_err(|detail| LockError::Disabled { detail })
    }

    /// The lock, or — when `telco.platform.lock.enabled = false` — a [`DisabledLock`] saying
    /// where it was switched off, so a service holds one `Arc<dyn DistributedLock>` either way.
    ///
    /// Through the disabled lock, fail-closed calls (`with_lock`, `acquire`) fail with
    /// [`LockError::Disabled`] (`LOCK_DISABLED`, HTTP 503) exactly as [`lock`](LockStarter::lock)
    /// does, and fail-open calls ([`with_lock_fail_open`](lock_core::DistributedLockExt::with_lock_fail_open))
    /// run their section unguarded with reason `lock_disabled` and a `WARN`. It opens no
    /// connection. Use [`lock`](LockStarter::lock) instead when a disabled lock should stop the
    /// service at start-up.
    ///
    /// ```no_run
    /// use lock_starter::prelude::*;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder().build().await?;
    /// let lock = starter.lock_or_disabled(); // never fails
    /// let sent = lock
    ///     .with_lock_fail_open("digest:2026-11-30", Lease::Watchdog, || async { /* send */ 3 })
    ///     .await?;
    /// if let Some(unguarded) = sent.unguarded() {
    ///     println!("sent without the lock: {}", unguarded.reason()); // e.g. lock_disabled
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lock_or_disabled(&self) -> Arc<dyn DistributedLock> {
        match &self.lock {
            Ok(lock) => Arc::clone(lock),
            Err(detail) => Arc::new(DisabledLock::new(detail.clone())),
        }
    }

    /// Whether a lock is available (`telco.platform.lock.enabled`).
    pub fn is_enabled(&self) -> bool {
        self.lock.is_ok()
    }

    /// The settings the lock was built from (passwords redacted in `Debug`).
    pub fn settings(&self) -> &LockSettings {
        &self.settings
    }
}

/// Builds a [`LockStarter`]. Sources, later wins: built-in defaults → TOML files (in the order
/// given) → environment variables. A consumer may replace the sources with its own
/// [`Figment`], or replace the lock itself.
#[derive(Default)]
pub struct LockStarterBuilder {
    toml_files: Vec<PathBuf>,
    figment: Option<Figment>,
    lock: Option<Arc<dyn DistributedLock>>,
}

impl fmt::Debug for LockStarterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockStarterBuilder")
            .field("toml_files", &self.toml_files)
            .field("custom_figment", &self.figment.is_some())
            .field("custom_lock", &self.lock)
            .finish()
    }
}

impl LockStarterBuilder {
    /// Adds a TOML file; later files win over earlier ones, the environment over all. A file
    /// given here must exist.
    pub fn toml_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.toml_files.push(path.into());
        self
    }

    /// Uses this figment instead of the default sources (files and environment). Keys are read
    /// from the same `telco.platform.lock.*` paths and validated the same way.
    pub fn figment(mut self, figment: Figment) -> Self {
        self.figment = Some(figment);
        self
    }

    /// Uses this lock instead of building the Redis one (the override point: a fake in tests,
    /// your own implementation in production). The configuration is still read and validated,
    /// and `telco.platform.lock.enabled = false` still switches the lock off.
    pub fn lock(mut self, lock: Arc<dyn DistributedLock>) -> Self {
        self.lock = Some(lock);
        self
    }

    /// Reads and validates the configuration, then builds the lock: the override if one was
    /// given, otherwise a [`RedisLock`] connected to `telco.platform.lock.redis.address`.
    /// Disabled: no connection is opened and [`LockStarter::lock`] says why. An unreachable
    /// Redis does not fail the start: acquisitions fail closed until it answers (a warning is
    /// logged).
    ///
    /// Must run inside a Tokio runtime (the Redis client's tasks run on it).
    ///
    /// # Errors
    /// [`StartError::Config`] for any bad or unknown key; [`StartError::Lock`] when the Redis
    /// client rejects the settings.
    pub async fn build(self) -> Result<LockStarter, StartError> {
        let sources = match self.figment {
            Some(figment) => ConfigSources::from_figment(figment),
            None => self
                .toml_files
                .into_iter()
                .fold(ConfigSources::new(), ConfigSources::toml_file),
        };
        let settings = LockSettings::load(&sources)?;
        if !settings.enabled {
            let detail = settings
                .describe("enabled")
                .unwrap_or_else(|| "telco.platform.lock.enabled = false".to_owned());
            tracing::info!(%detail, "distributed lock disabled; no Redis connection opened");
            return Ok(LockStarter {
                lock: Err(detail),
                redis: None,
                settings,
            });
        }
        let (lock, redis): (Arc<dyn DistributedLock>, _) = match self.lock {
            Some(custom) => (custom, None),
            None => {
                let redis = RedisLock::connect(redis_config(&settings)).await?;
                (Arc::new(redis.clone()), Some(redis))
            }
        };
        Ok(LockStarter {
            lock: Ok(lock),
            redis,
            settings,
        })
    }
}

/// The lock-redis settings for validated starter settings: what [`LockStarter`] connects with,
/// for tools that need the concrete [`RedisLock`] (its operations: `status`, `list`,
/// `force_release`).
pub fn redis_config(settings: &LockSettings) -> RedisLockConfig {
    let config = RedisLockConfig::new(settings.redis.address.expose())
        .command_timeout(settings.redis.command_timeout)
        .wait_time(settings.wait_time)
        .watchdog_timeout(settings.watchdog_timeout)
        .min_replicas(settings.min_replicas)
        .replica_sync_timeout(settings.replica_sync_timeout)
        .fair_waiter_timeout(settings.fair_waiter_timeout)
        .key_prefix(settings.key_prefix.clone())
        .instance_id(settings.instance_id.clone());
    match &settings.redis.tls_ca_file {
        Some(path) => config.tls_ca_file(path.clone()),
        None => config,
    }
}
