//! The lock's wiring: the client and lock settings, and what lock-redis rejects at connect as
//! the configuration error of the key it came from.

use lock_core::LockError;
use lock_redis::RedisConfig;
use lock_redis::lock::RedisLockConfig;

use crate::config::{ConfigError, LockSettings, key_of_setting, quote};
use crate::error::StartError;

impl LockSettings {
    /// A setting the Redis lock rejected at connect (a refused password, an unusable CA file) as
    /// the configuration error of the key it came from, with the key's origin, like any other bad
    /// value; other errors as they are ([`StartError::Lock`]).
    ///
    /// What [`LockStarterBuilder::build`](crate::LockStarterBuilder::build) reports; for tools that
    /// connect themselves with [`LockSettings::redis_config`], so their start-up errors name the full key and where it was set as the
    /// service's do. lock-redis names the setting by its builder method (`address`,
    /// `tls_ca_file`, `wait_time`); the error names the key it came from
    /// (`telco.platform.lock.redis.address`, …). What the value accepts comes from the error when
    /// it says (after `"; accepted: "`), else from the key table.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    /// use lock_starter::StartError;
    /// use lock_starter::lock::LockError;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let sources = ConfigSources::new()
    ///     .env_from([("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://:wrong@127.0.0.1:6379")]);
    /// let settings = LockSettings::load(&sources)?;
    /// let refused = LockError::invalid_argument(
    ///     "address", // the `RedisConfig` setting
    ///     "redis://:***@127.0.0.1:6379",
    ///     "Redis refused the connection: WRONGPASS; accepted: a password Redis accepts",
    /// );
    /// let StartError::Config(error) = settings.start_error(refused) else { panic!() };
    /// assert_eq!(error.key(), Some("telco.platform.lock.redis.address"));
    /// assert!(error.to_string().contains("(from environment variable TELCO_PLATFORM_LOCK_REDIS_ADDRESS)"));
    /// assert!(error.to_string().ends_with("; accepted: a password Redis accepts"));
    /// # Ok(()) }
    /// ```
    pub fn start_error(&self, error: LockError) -> StartError {
        let settings = self;
        if let LockError::InvalidArgument {
            name,
            value,
            problem,
            ..
        } = &error
        {
            // lock-redis names its own settings (`address`, `tls_ca_file`); the service knows keys.
            let spec = key_of_setting(name);
            if let Some((spec, origin)) = spec.and_then(|s| Some((s, settings.source_of(s.name)?)))
            {
                let declared = spec.accepted();
                let (problem, accepted) = problem
                    .split_once("; accepted: ")
                    .unwrap_or((problem, &declared));
                return StartError::Config(ConfigError::InvalidValue {
                    key: spec.name.to_owned(),
                    value: quote(value),
                    origin: Box::new(origin.clone()),
                    problem: problem.to_owned(),
                    accepted: accepted.to_owned(),
                });
            }
        }
        StartError::Lock(error)
    }

    /// The Redis client settings for validated starter settings: what [`LockStarter`](crate::LockStarter)
    /// connects with, for tools that need the concrete Redis types, e.g. an on-call tool calling
    /// [`RedisLock`](lock_redis::lock::RedisLock)'s `status`, `list` and `force_release`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let sources = ConfigSources::new().env_from([
    ///     ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://ops:s3cret@redis.internal:6379/2"),
    ///     ("TELCO_PLATFORM_LOCK_KEY_PREFIX", "billing:lock:"),
    ///     ("POD_NAME", "lock-cli"),
    /// ]);
    /// let settings = LockSettings::load(&sources)?;
    /// let config = settings.redis_config();
    /// assert_eq!(config.redacted_address(), "redis://ops:***@redis.internal:6379/2");
    /// assert!(format!("{config:?}").contains(r#"key_prefix: "billing:lock:""#));
    /// # async fn list(settings: lock_starter::config::LockSettings) -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_starter::redis::{RedisClient, RedisLock};
    /// // Then, in the tool's async code:
    /// let redis = RedisClient::connect(settings.redis_config()).await?;
    /// let ops = RedisLock::new(&redis, settings.lock_config()).await?;
    /// for status in ops.list(None, 100).await? {
    ///     println!("{} {:?}", status.name, status.state);
    /// }
    /// # Ok(()) }
    /// # Ok(()) }
    /// ```
    pub fn redis_config(&self) -> RedisConfig {
        let settings = self;
        let config = RedisConfig::from(settings.redis.address.clone())
            .command_timeout(settings.redis.command_timeout)
            .key_prefix(settings.key_prefix.clone())
            .instance_id(settings.instance_id.clone());
        match &settings.redis.tls_ca_file {
            Some(path) => config.tls_ca_file(path.clone()),
            None => config,
        }
    }

    /// The Redis lock's settings for validated starter settings (see [`LockSettings::redis_config`]).
    pub fn lock_config(&self) -> RedisLockConfig {
        let settings = self;
        RedisLockConfig::default()
            .wait_time(settings.wait_time)
            .watchdog_timeout(settings.watchdog_timeout)
            .min_replicas(settings.min_replicas)
            .replica_sync_timeout(settings.replica_sync_timeout)
            .fair_waiter_timeout(settings.fair_waiter_timeout)
    }
}
