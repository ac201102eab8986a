//! Configuration of the lock: keys under `telco.platform.lock`, read from built-in defaults, TOML
//! files and the environment (later wins), checked before anything connects to Redis.
//!
//! [`KEYS`] declares every key once — name, default, what it accepts, doc line — and the
//! settings are extracted from figment into [`LockSettings`] with serde; the checks, the error
//! texts, [`LockSettings::describe`], the environment names, `config/lock.toml` and the table of
//! `docs/configuration.md` follow from the declarations. There is no `lease-time` key: the lease
//! is chosen per call (`Lease::Watchdog` or `Lease::Fixed`).
//!
//! Durations are numbers with the unit `ms`, `s`, `m` or `h` (`5s`, `250ms`, `1m30s`), or a bare
//! `0`. Environment variables are named after the keys: `TELCO_PLATFORM_LOCK_WAIT_TIME`, or
//! Spring's relaxed `TELCO_PLATFORM_LOCK_WAITTIME`. A bad value stops start-up with an error
//! that names the key, the value, where it came from and what is accepted. A key the lock does
//! not know — under `telco.platform.lock`, a `TELCO_PLATFORM_LOCK_*` variable, a misspelt
//! section (`telco.platform.lok`), Spring keys the address does not use — is a warning with a
//! did-you-mean, logged and kept in [`LockSettings::warnings`]: a file may be shared with a newer
//! version that knows more keys.
//!
//! ```
//! use lock_starter::config::{ConfigSources, LockSettings};
//!
//! let sources = ConfigSources::new().env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "5 parsecs")]);
//! let error = LockSettings::load(&sources).unwrap_err();
//! assert_eq!(
//!     error.to_string(),
//!     "telco.platform.lock.wait-time = \"5 parsecs\" (from environment variable \
//!      TELCO_PLATFORM_LOCK_WAIT_TIME): unknown unit \"parsecs\"; the units are ms, s, m (minutes) and h; \
//!      accepted: a duration in ms, s, m or h (such as 250ms, 5s or 1m30s; 0 needs no unit), \
//!      from 0 to 1 h"
//! );
//! ```

mod error;
pub(crate) mod keys;
mod load;
mod origin;
mod sources;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use figment::Figment;
use lock_core::fold_name;
use lock_core::rate_limit::Quota;
use serde::Deserialize;

pub use error::ConfigError;
pub(crate) use keys::key_of_setting;
#[doc(hidden)]
pub use keys::{
    Accepts, ENV_PREFIX, KEYS, KeyDefault, KeySpec, NAMED_KEYS, PREFIX, SPRING_KEYS, key_spec,
};
pub(crate) use load::{CACHE_NAME_RULES, NAME_DOTTED, NAME_RULES, name_problem, quote, toml_key};
#[doc(hidden)]
pub use lock_core::duration_range;
/// The one duration syntax, from lock-core: see [`lock_core::parse_duration`]; every message
/// writes durations in it with [`lock_core::format_duration`].
pub use lock_core::{format_duration, parse_duration};
/// The Redis address, parsed once: lock-redis's own type.
pub use lock_redis::{RedisAddress, Topology};
pub use origin::Origin;
pub(crate) use origin::Origins;
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
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LockSettings {
    /// `telco.platform.lock.enabled`: master switch. Default `true`.
    pub enabled: bool,
    /// `telco.platform.lock.redis.*`: where Redis is and how long a command may take.
    pub redis: RedisSettings,
    /// `telco.platform.lock.wait-time`: longest time an acquire waits. Default 5 s; 0 (one
    /// attempt) to 1 h.
    #[serde(deserialize_with = "load::duration")]
    pub wait_time: Duration,
    /// `telco.platform.lock.watchdog-timeout`: TTL of watchdog leases, renewed every third.
    /// Default 30 s; 1 s to 1 h.
    #[serde(deserialize_with = "load::duration")]
    pub watchdog_timeout: Duration,
    /// `telco.platform.lock.min-replicas`: replicas that must acknowledge a grant (Redis
    /// `WAIT`) before it is reported. Default 0 (no `WAIT`); 0 to 16.
    pub min_replicas: u32,
    /// `telco.platform.lock.replica-sync-timeout`: how long a grant waits for `min_replicas`
    /// acknowledgements. Default 1 s; 1 ms to 10 s.
    #[serde(deserialize_with = "load::duration")]
    pub replica_sync_timeout: Duration,
    /// `telco.platform.lock.fair-waiter-timeout`: how long a fair waiter keeps its place in a
    /// key's queue without calling again. Default 5 s; 300 ms to 5 min.
    #[serde(deserialize_with = "load::duration")]
    pub fair_waiter_timeout: Duration,
    /// `telco.platform.lock.key-prefix`: prefix of every Redis key. Default `lock:`; 1 to 64
    /// bytes, no braces, whitespace or control characters.
    pub key_prefix: String,
    /// `telco.platform.lock.instance-id`: readable part of owner tokens. Default `POD_NAME`, else
    /// `HOSTNAME`, else the host name; 1 to 128 bytes.
    pub instance_id: String,
    /// `telco.platform.lock.idempotency.*`: the defaults of idempotent calls.
    pub idempotency: IdempotencySection,
    /// `telco.platform.lock.branches.*`: the defaults of master/sub locks.
    pub branches: BranchesSection,
    /// `telco.platform.lock.cache.*`: the settings of every cache.
    pub cache: CacheSection,
    /// `telco.platform.lock.caches.<name>.*`: the settings of each cache that overrides
    /// [`cache`](Self::cache), complete (see [`LockSettings::cache_of`]).
    #[serde(skip)]
    pub caches: BTreeMap<String, CacheSection>,
    /// `telco.platform.lock.rate-limits.<name>.*`: the quota of each named rate limit.
    #[serde(skip)]
    pub rate_limits: BTreeMap<String, Quota>,
    /// `telco.platform.lock.rate-limits.<name>.local-batch`: the local batch of each named rate
    /// limit that sets one above 0 (see `RateLimiter::local_batch`).
    #[serde(skip)]
    pub rate_limit_batches: BTreeMap<String, u32>,
    /// Where each value came from (see [`LockSettings::source_of`]).
    #[serde(skip)]
    pub(crate) origins: Origins,
    /// What [`LockSettings::load`] warned about (see [`LockSettings::warnings`]); empty for
    /// settings built by hand.
    #[serde(skip)]
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RedisSettings {
    /// `telco.platform.lock.redis.address`: one server, a Sentinel group or a Cluster (see
    /// [`RedisAddress::topology`]), TLS or not ([`RedisAddress::tls`]). Default: from
    /// `spring.data.redis.url` if set, else built from `spring.data.redis.host`/`port` (with
    /// `username` and `password`) if any is set, else `redis://localhost:6379`.
    #[serde(deserialize_with = "load::address")]
    pub address: RedisAddress,
    /// `telco.platform.lock.redis.command-timeout`: timeout of every Redis command. Default 2 s;
    /// 10 ms to 60 s.
    #[serde(deserialize_with = "load::duration")]
    pub command_timeout: Duration,
    /// `telco.platform.lock.redis.tls.ca-file`: PEM file of the CA certificates to trust for
    /// TLS. `None` (the default): the system's root certificates. Only set with a TLS address;
    /// the file existed, was readable and held a PEM certificate when the settings were loaded.
    #[serde(rename = "tls", default, deserialize_with = "load::ca_file")]
    pub tls_ca_file: Option<PathBuf>,
}

/// `telco.platform.lock.cache.*`: the settings of every cache ([`LockStarter::cache`](crate::LockStarter::cache)).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CacheSection {
    /// `…cache.ttl`: the TTL of entries. Default 1 h; 1 ms to 720 h.
    #[serde(deserialize_with = "load::duration")]
    pub ttl: Duration,
    /// `…cache.max-value-bytes`: the largest value stored, bytes of JSON. Default 1 MiB; 1 to
    /// 64 MiB.
    pub max_value_bytes: u32,
    /// `…cache.near-cache-entries`: entries each cache keeps in process memory too. Default 0
    /// (none); 0 to 10 million.
    pub near_cache_entries: u32,
    /// `…cache.cross-pod-load-wait`: how long a miss waits for another replica's load of the
    /// key. Default 0 (every replica that misses loads); at most 1 h.
    #[serde(deserialize_with = "load::duration")]
    pub cross_pod_load_wait: Duration,
}

/// `telco.platform.lock.idempotency.*`: the defaults of every idempotent call (a call may pass
/// its own wait time and result TTL).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IdempotencySection {
    /// `…idempotency.wait-time`: how long a duplicate waits for the first call. Default 200 s;
    /// 0 to 1 h.
    #[serde(deserialize_with = "load::duration")]
    pub wait_time: Duration,
    /// `…idempotency.result-ttl`: how long a result is replayed. Default 90 s; 1 s to 7 days.
    #[serde(deserialize_with = "load::duration")]
    pub result_ttl: Duration,
    /// `…idempotency.max-result-bytes`: the largest stored result, bytes of JSON. Default 1 MiB;
    /// 1 to 64 MiB.
    pub max_result_bytes: u32,
    /// `…idempotency.http-wait-time`: how long a retry at the `Idempotency-Key` layer waits for
    /// the first request with its key. Default 0 (409 at once); 0 to 1 h.
    #[serde(deserialize_with = "load::duration")]
    pub http_wait_time: Duration,
    /// `…idempotency.http-max-body-bytes`: the largest request body the `Idempotency-Key` layer
    /// reads. Default 1 MiB; 1 to 64 MiB.
    pub http_max_body_bytes: u32,
}

/// `telco.platform.lock.branches.*`: the defaults of master/sub locks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BranchesSection {
    /// `…branches.wait-time`: how long a watchdog-leased master waits for its branches unless the
    /// call gives its own. Default 30 s; 0 to 1 h.
    #[serde(deserialize_with = "load::duration")]
    pub wait_time: Duration,
}

/// The section of `sections` that configures `name`: the one spelt so, or else the one spelt
/// alike ([`fold`]), as an environment variable names it (`CACHES_PRODUCT_PRICES_TTL` sets
/// `product-prices`, found for `product_prices` too). Loading refuses two spelt alike.
pub(crate) fn section_name<'a, V>(sections: &'a BTreeMap<String, V>, name: &'a str) -> &'a str {
    if sections.contains_key(name) {
        return name;
    }
    let name_folded = fold_name(name);
    let alike = sections.keys().find(|s| fold_name(s) == name_folded);
    alike.map_or(name, String::as_str)
}

/// The configured section of `sections` whose name is a likely misspelling of `name`, when
/// none is spelt as `name` (see [`section_name`]): `product` for `products`.
pub(crate) fn near_section<'a, V>(
    sections: &'a BTreeMap<String, V>,
    name: &str,
) -> Option<&'a str> {
    if sections.contains_key(section_name(sections, name)) {
        return None;
    }
    let name = fold_name(name);
    sections
        .keys()
        .map(|s| (strsim::damerau_levenshtein(&fold_name(s), &name), s))
        .filter(|(d, _)| *d <= keys::edits_allowed(name.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, s)| s.as_str())
}

impl LockSettings {
    /// The settings of the cache `name`: its `caches.<name>.*` keys over `cache.*`. The section
    /// is the one spelt `name`, or else the only one spelt alike (`_` as `-`, any case), as an
    /// environment variable names it.
    pub fn cache_of(&self, name: &str) -> &CacheSection {
        self.caches
            .get(section_name(&self.caches, name))
            .unwrap_or(&self.cache)
    }

    /// The settings of idempotent execution: this section, and the lock's watchdog timeout for
    /// the in-progress lease.
    pub fn idempotency_settings(&self) -> lock_core::idempotency::IdempotencySettings {
        lock_core::idempotency::IdempotencySettings {
            wait_time: self.idempotency.wait_time,
            result_ttl: self.idempotency.result_ttl,
            max_result_bytes: self.idempotency.max_result_bytes as usize,
            watchdog_timeout: self.watchdog_timeout,
        }
    }

    /// Reads and checks the settings from `sources` (defaults → TOML files and figments in
    /// order → environment).
    ///
    /// # Errors
    /// A [`ConfigError`] for the first problem found, in this order: a TOML file missing,
    /// unreadable or not TOML; a value where a table belongs in any one source; one key set by
    /// both its environment forms with different values; a failing consumer figment; a value
    /// of the wrong type or syntax; the Spring keys of the address (also `url` with `host` or
    /// `port` from the same source); then each key of [`KEYS`] in table order with a value out
    /// of its range.
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
        load::resolve(&figment, &host_env)
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
    /// let warned = LockSettings::from_figment(&typo)?; // a warning, not an error
    /// assert!(warned.warnings()[0].contains("did you mean telco.platform.lock.wait-time?"));
    /// # Ok(()) }
    /// ```
    pub fn from_figment(figment: &Figment) -> Result<LockSettings, ConfigError> {
        load::resolve(figment, &origin::HostEnv::process())
    }

    /// The warnings of loading, each also logged with `tracing::warn!` when found: a
    /// `TELCO_PLATFORM_LOCK_*` variable or a key under `telco.platform.lock` that names no key
    /// (with a did-you-mean and the accepted list), a variable or section that looks like a
    /// misspelt `TELCO_PLATFORM_LOCK_` / `telco.platform.lock`, and `spring.data.redis` keys
    /// that are set while the address falls back to Spring but that it does not use (by name and
    /// source, never by value).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    /// use lock_starter::figment::{Figment, providers::Serialized};
    ///
    /// let figment = Figment::from(Serialized::default("telco.platform.lok.wait-time", "2s"));
    /// let settings = LockSettings::load(&ConfigSources::from_figment(figment)).unwrap();
    /// assert!(settings.warnings()[0].starts_with("key telco.platform.lok.wait-time"));
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
        let value = load::show_val(&spec.value(self)?);
        let origin = self.source_of(spec.name)?;
        Some(format!("{} = {value} from {origin}", spec.name))
    }
}
