//! Configuration of the lock: keys under `telco.platform.lock`, read from built-in defaults, TOML
//! files and the environment (later wins), checked before anything connects to Redis.
//!
//! | key | default | accepted |
//! |---|---|---|
//! | `telco.platform.lock.enabled` | `true` | `true` / `false` |
//! | `telco.platform.lock.redis.address` | from `spring.data.redis.url`, else built from the other `spring.data.redis` keys, else `redis://localhost:6379` | `redis[s]://…`, `redis[s]-sentinel://…?sentinelServiceName=…`, `redis[s]-cluster://…` (see [`RedisAddress`]) |
//! | `telco.platform.lock.redis.command-timeout` | `2s` | 10 ms to 60 s |
//! | `telco.platform.lock.redis.tls.ca-file` | none: the system's root certificates | a readable PEM file, with a TLS address |
//! | `telco.platform.lock.wait-time` | `5s` | 0 ms (one attempt) to 1 h |
//! | `telco.platform.lock.watchdog-timeout` | `30s` | 1 s to 1 h |
//! | `telco.platform.lock.min-replicas` | `0` | 0 to 16 |
//! | `telco.platform.lock.replica-sync-timeout` | `1s` | 1 ms to 10 s |
//! | `telco.platform.lock.fair-waiter-timeout` | `5s` | 300 ms to 5 min |
//! | `telco.platform.lock.key-prefix` | `lock:` | 1 to 64 bytes, no braces, whitespace or control characters |
//! | `telco.platform.lock.instance-id` | `POD_NAME`, else `HOSTNAME`, else the host name | 1 to 128 bytes, no control characters or `\|` |
//!
//! [`KEYS`] is the table itself; `docs/configuration.md` explains every key. There is no
//! `lease-time` key: the lease is chosen per call (`Lease::Watchdog` or `Lease::Fixed`).
//!
//! Durations take a unit (`5s`, `250ms`, `1m30s`). Environment variables are named after the
//! keys: `TELCO_PLATFORM_LOCK_WAIT_TIME`, or Spring's relaxed `TELCO_PLATFORM_LOCK_WAITTIME`.
//! Every error names the key, the value, where it came from and what is accepted. Settings that
//! are set but not read — a section that looks like a misspelt `telco.platform.lock`
//! (`telco.platform.lok`), or `spring.data.redis` keys the address does not use — are not
//! errors, since a file is shared with other settings: they are logged as warnings and kept in
//! [`LockSettings::warnings`]. Spring keys that leave open which Redis is meant (Sentinel and
//! Cluster together, host/port with nodes, the URL with nodes, half of Sentinel) are errors.
//!
//!
//! ```
//! use lock_starter::config::{ConfigSources, LockSettings};
//!
//! let sources = ConfigSources::new().env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "5 parsecs")]);
//! let error = LockSettings::load(&sources).unwrap_err();
//! assert_eq!(
//!     error.to_string(),
//!     "telco.platform.lock.wait-time = \"5 parsecs\" (from environment variable \
//!      TELCO_PLATFORM_LOCK_WAIT_TIME): not a duration (unknown unit \"parsecs\"); accepted: a \
//!      duration with a unit (ms, s, m or h), such as 5s, 250ms or 1m30s, from 0 ms to 1 h"
//! );
//! ```

mod address;
mod error;
mod keys;
mod origin;
mod resolve;
mod sources;

use std::path::PathBuf;
use std::time::Duration;

use figment::Figment;

pub use address::{
    DEFAULT_REDIS_PORT, DEFAULT_SENTINEL_PORT, InvalidAddress, RedisAddress, Topology,
};
pub use error::ConfigError;
pub use keys::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_ENABLED, DEFAULT_FAIR_WAITER_TIMEOUT, DEFAULT_KEY_PREFIX,
    DEFAULT_MIN_REPLICAS, DEFAULT_REDIS_ADDRESS, DEFAULT_REPLICA_SYNC_TIMEOUT, DEFAULT_SPRING_HOST,
    DEFAULT_SPRING_PORT, DEFAULT_WAIT_TIME, DEFAULT_WATCHDOG_TIMEOUT, ENV_PREFIX, KEYS, KeySpec,
    MAX_COMMAND_TIMEOUT, MAX_FAIR_WAITER_TIMEOUT, MAX_KEY_PREFIX_BYTES, MAX_MIN_REPLICAS,
    MAX_REPLICA_SYNC_TIMEOUT, MIN_COMMAND_TIMEOUT, MIN_FAIR_WAITER_TIMEOUT,
    MIN_REPLICA_SYNC_TIMEOUT, PREFIX, SPRING_KEYS, ValueKind, key_spec,
};
pub use origin::{Origin, Origins};
pub(crate) use resolve::quote;
pub use sources::ConfigSources;

/// The lock's settings, checked: every value is within its bounds.
///
/// `Debug` shows the Redis address with its password as `***`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_starter::config::{ConfigSources, LockSettings};
///
/// # fn main() -> Result<(), lock_starter::config::ConfigError> {
/// let sources = ConfigSources::new().env_from([
///     ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://app:s3cret@redis.internal:6379"),
///     ("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", "10s"),
///     ("POD_NAME", "billing-7f9c"),
/// ]);
/// let settings = LockSettings::load(&sources)?;
/// assert!(settings.enabled);
/// assert_eq!(settings.watchdog_timeout, Duration::from_secs(10));
/// assert_eq!(settings.wait_time, Duration::from_secs(5)); // the default
/// assert_eq!(settings.instance_id, "billing-7f9c");
/// assert_eq!(settings.key_prefix, "lock:");
/// assert!(!format!("{settings:?}").contains("s3cret"));
/// assert!(settings.warnings.is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LockSettings {
    /// `telco.platform.lock.enabled`: master switch. Default `true`.
    pub enabled: bool,
    /// `telco.platform.lock.redis.*`: where Redis is and how long a command may take.
    pub redis: RedisSettings,
    /// `telco.platform.lock.wait-time`: longest time an acquire waits. Default 5 s; 0 (one
    /// attempt) to 1 h.
    pub wait_time: Duration,
    /// `telco.platform.lock.watchdog-timeout`: TTL of watchdog leases, renewed every third.
    /// Default 30 s; 1 s to 1 h.
    pub watchdog_timeout: Duration,
    /// `telco.platform.lock.min-replicas`: replicas that must acknowledge a grant (Redis
    /// `WAIT`) before it is reported. Default 0 (no `WAIT`); 0 to 16.
    pub min_replicas: u32,
    /// `telco.platform.lock.replica-sync-timeout`: how long a grant waits for `min_replicas`
    /// acknowledgements. Default 1 s; 1 ms to 10 s.
    pub replica_sync_timeout: Duration,
    /// `telco.platform.lock.fair-waiter-timeout`: how long a fair waiter keeps its place in a
    /// key's queue without calling again. Default 5 s; 300 ms to 5 min.
    pub fair_waiter_timeout: Duration,
    /// `telco.platform.lock.key-prefix`: prefix of every Redis key. Default `lock:`; 1 to 64
    /// bytes, no braces, whitespace or control characters.
    pub key_prefix: String,
    /// `telco.platform.lock.instance-id`: readable part of owner tokens. Default `POD_NAME`, else
    /// `HOSTNAME`, else the host name; 1 to 128 bytes.
    pub instance_id: String,
    /// Where each value came from; [`Origins::default`] (all defaults) for settings built by hand.
    pub origins: Origins,
    /// What [`LockSettings::load`] warned about (see [`LockSettings::warnings`]); empty for
    /// settings built by hand.
    pub warnings: Vec<String>,
}

/// `telco.platform.lock.redis.*`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_starter::config::{ConfigSources, LockSettings, Topology};
///
/// # fn main() -> Result<(), lock_starter::config::ConfigError> {
/// let sources = ConfigSources::new().env_from([
///     ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis-cluster://redis-0:6379?node=redis-1:6379"),
///     ("TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT", "500ms"),
/// ]);
/// let redis = LockSettings::load(&sources)?.redis;
/// assert_eq!(redis.address.topology(), &Topology::Cluster);
/// assert_eq!(redis.command_timeout, Duration::from_millis(500));
/// assert_eq!(redis.tls_ca_file, None); // the system's root certificates
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `telco.platform.lock.redis.address`: one server, a Sentinel group or a Cluster (see
    /// [`RedisAddress::topology`]), TLS or not ([`RedisAddress::tls`]). Default: from
    /// `spring.data.redis.url` if set, else built from `spring.data.redis.sentinel.*`,
    /// `cluster.nodes` or `host`/`port` (with `username`, `password`, `database`,
    /// `ssl.enabled`) if any is set, else `redis://localhost:6379`.
    pub address: RedisAddress,
    /// `telco.platform.lock.redis.command-timeout`: timeout of every Redis command. Default 2 s;
    /// 10 ms to 60 s.
    pub command_timeout: Duration,
    /// `telco.platform.lock.redis.tls.ca-file`: PEM file of the CA certificates to trust for
    /// TLS. `None` (the default): the system's root certificates. Only set with a TLS address;
    /// the file existed, was readable and held a PEM certificate when the settings were loaded.
    pub tls_ca_file: Option<PathBuf>,
}

impl LockSettings {
    /// Reads and checks the settings from `sources` (defaults → TOML files and figments in
    /// order → environment).
    ///
    /// # Errors
    /// A [`ConfigError`] for the first problem found, in this order: a TOML file missing,
    /// unreadable or not TOML; an unknown `TELCO_PLATFORM_LOCK_*` variable or one key set by
    /// both its environment forms with different values; a failing consumer figment; an unknown
    /// key under `telco.platform.lock`; then each key of [`KEYS`] in table order with a value
    /// that is not accepted (the Spring keys with `redis.address`).
    ///
    /// Settings that are set but not read are warnings, not errors: each is logged with
    /// `tracing::warn!` and kept in [`LockSettings::warnings`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_starter::config::{ConfigSources, LockSettings};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("lock.toml");
    /// std::fs::write(&path, "[telco.platform.lock]\nwait-time = \"2s\"\nwatchdog-timeout = \"10s\"\n")?;
    ///
    /// // The environment wins over the file.
    /// let sources = ConfigSources::new()
    ///     .toml_file(&path)
    ///     .env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "1s")]);
    /// let settings = LockSettings::load(&sources)?;
    /// assert_eq!(settings.wait_time, Duration::from_secs(1));
    /// assert_eq!(settings.watchdog_timeout, Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub fn load(sources: &ConfigSources) -> Result<LockSettings, ConfigError> {
        let (figment, host_env) = sources.build()?;
        resolve::resolve(&figment, &host_env)
    }

    /// Reads and checks the settings from a consumer's own figment, with the same key layout as
    /// the TOML files. Keys it does not set take their defaults; `POD_NAME`/`HOSTNAME` for the
    /// default instance id come from the process environment.
    ///
    /// # Errors
    /// As [`LockSettings::load`], from the figment's values; a figment whose providers failed
    /// gives [`ConfigError::Source`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_starter::config::LockSettings;
    /// use lock_starter::figment::{Figment, providers::{Format, Toml}};
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// let figment = Figment::from(Toml::string(
    ///     r#"
    ///     [telco.platform.lock]
    ///     wait-time = "2s"
    ///     [telco.platform.lock.redis]
    ///     address = "redis-sentinel://redis-sentinel:26379?sentinelServiceName=mymaster"
    ///     "#,
    /// ));
    /// let settings = LockSettings::from_figment(&figment)?;
    /// assert_eq!(settings.wait_time, Duration::from_secs(2));
    /// assert_eq!(settings.redis.address.port(), 26379);
    ///
    /// let typo = Figment::from(Toml::string("[telco.platform.lock]\nwait-tme = \"2s\"\n"));
    /// let error = LockSettings::from_figment(&typo).unwrap_err();
    /// assert!(error.to_string().contains("did you mean telco.platform.lock.wait-time?"));
    /// # Ok(()) }
    /// ```
    pub fn from_figment(figment: &Figment) -> Result<LockSettings, ConfigError> {
        resolve::resolve(figment, &sources::HostEnv::process())
    }

    /// The warnings of loading, each also logged with `tracing::warn!` when found, in this
    /// order:
    ///
    /// - an environment variable that looks like a misspelt `TELCO_PLATFORM_LOCK_…` one
    ///   (`TELCO_PLATFROM_LOCK_WAIT_TIME`);
    /// - a section or key that looks like a misspelt `telco.platform.lock` (`telco.platform.lok`,
    ///   `telco.platfrom.lock.redis`, `Telco.Platform.Lock`), naming it, its keys and its source;
    ///   clearly different sections (`telco.platform.log`, `telco.platform.kafka`) are left
    ///   alone;
    /// - `spring.data.redis` keys or `SPRING_DATA_REDIS_*` variables that are set while the
    ///   address does not come from `telco.platform.lock.redis.address`, but are not used for
    ///   it (`timeout`, `sentinel.password`, `ssl.bundle`, … — and with `spring.data.redis.url`
    ///   also `ssl.enabled`), by name and source, never by value.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    ///
    /// use lock_starter::figment::{Figment, providers::Serialized};
    ///
    /// let figment = Figment::from(Serialized::default(
    ///     "telco.platform.lok.wait-time",
    ///     "2s",
    /// ));
    /// let settings = LockSettings::load(&ConfigSources::from_figment(figment)).unwrap();
    /// assert!(settings.warnings()[0].starts_with("section telco.platform.lok (keys wait-time; "));
    /// assert!(settings.warnings()[0].ends_with("did you mean telco.platform.lock?"));
    /// ```
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Where `key` came from; `key` is the full name or the name relative to
    /// `telco.platform.lock` (`enabled`, `redis.address`). `None` for a key not in [`KEYS`].
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings, Origin};
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// let sources = ConfigSources::new().env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "2s")]);
    /// let settings = LockSettings::load(&sources)?;
    /// assert_eq!(
    ///     settings.source_of("wait-time"),
    ///     Some(&Origin::Env("TELCO_PLATFORM_LOCK_WAIT_TIME".into()))
    /// );
    /// assert_eq!(settings.source_of("telco.platform.lock.watchdog-timeout"), Some(&Origin::Default));
    /// assert_eq!(settings.source_of("lease-time"), None); // no such key
    /// # Ok(()) }
    /// ```
    pub fn source_of(&self, key: &str) -> Option<&Origin> {
        self.origins.get(key)
    }

    /// `key = value from origin`, e.g. `telco.platform.lock.enabled = false from environment
    /// variable TELCO_PLATFORM_LOCK_ENABLED` — the detail of `LockError::Disabled`, and a line
    /// for start-up logs. The address is shown with its password as `***`. `None` for a key not
    /// in [`KEYS`].
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// let sources = ConfigSources::new().env_from([
    ///     ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://app:s3cret@redis.internal:6379"),
    /// ]);
    /// let settings = LockSettings::load(&sources)?;
    /// assert_eq!(
    ///     settings.describe("redis.address").unwrap(),
    ///     "telco.platform.lock.redis.address = redis://app:***@redis.internal:6379 \
    ///      from environment variable TELCO_PLATFORM_LOCK_REDIS_ADDRESS"
    /// );
    /// assert_eq!(
    ///     settings.describe("wait-time").unwrap(),
    ///     "telco.platform.lock.wait-time = 5s from default"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn describe(&self, key: &str) -> Option<String> {
        let spec = key_spec(key).filter(|spec| KEYS.contains(spec))?;
        let duration = |d: Duration| humantime::format_duration(d).to_string();
        let value = match spec.short_name() {
            "enabled" => self.enabled.to_string(),
            "redis.address" => self.redis.address.to_string(),
            "redis.command-timeout" => duration(self.redis.command_timeout),
            "redis.tls.ca-file" => match &self.redis.tls_ca_file {
                Some(path) => resolve::quote(&path.display().to_string()),
                None => "none (the system's root certificates)".to_owned(),
            },
            "wait-time" => duration(self.wait_time),
            "watchdog-timeout" => duration(self.watchdog_timeout),
            "min-replicas" => self.min_replicas.to_string(),
            "replica-sync-timeout" => duration(self.replica_sync_timeout),
            "fair-waiter-timeout" => duration(self.fair_waiter_timeout),
            "key-prefix" => resolve::quote(&self.key_prefix),
            "instance-id" => resolve::quote(&self.instance_id),
            _ => return None,
        };
        let origin = self.source_of(spec.name)?;
        Some(format!("{} = {value} from {origin}", spec.name))
    }
}
