//! Settings of a [`crate::RedisLock`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::{
    LockError, MAX_WAIT, MAX_WATCHDOG_TIMEOUT, MIN_WATCHDOG_TIMEOUT, check_duration,
    validate_instance_id,
};

use crate::core::address::{ACCEPTED_ADDRESSES, InvalidAddress, RedisAddress};
use crate::core::connection::{Endpoint, check_ca_file_use};
use crate::core::redact::redact;

/// Default Redis address: `redis://localhost:6379`.
pub const DEFAULT_ADDRESS: &str = "redis://localhost:6379";
/// Default per-command timeout: 2 s.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
use lock_core::DEFAULT_WAIT_TIME;
/// Default watchdog timeout: 30 s (renewed every 10 s).
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default key prefix: `lock:`.
pub const DEFAULT_KEY_PREFIX: &str = "lock:";
/// Shortest accepted command timeout: 10 ms.
pub const MIN_COMMAND_TIMEOUT: Duration = Duration::from_millis(10);
/// Longest accepted command timeout: 60 s.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Default number of replicas that must acknowledge a grant: 0 (no `WAIT`).
pub const DEFAULT_MIN_REPLICAS: u32 = 0;
/// Most replicas a grant can be made to wait for: 16.
pub const MAX_MIN_REPLICAS: u32 = 16;
/// Default time a grant waits for its replica acknowledgements: 1 s.
pub const DEFAULT_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest accepted replica-sync timeout: 10 s.
pub const MAX_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest accepted replica-sync-timeout: 1 ms.
pub const MIN_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_millis(1);

/// Default fair waiter timeout: 5 s (see [`RedisLockConfig::fair_waiter_timeout`]).
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(5);
/// Shortest accepted fair waiter timeout: 300 ms.
pub const MIN_FAIR_WAITER_TIMEOUT: Duration = Duration::from_millis(300);
/// Longest accepted fair waiter timeout: 5 min.
pub const MAX_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a released key keeps its tombstone (last fencing token, releasing owner): 10 s.
///
/// The fencing token is floored by the Redis server clock; the tombstone covers clock steps
/// back of up to this long, and makes a re-sent release report its first outcome.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(10);

/// The local safety margin subtracted from every confirmed expiry: 1 % of the TTL plus 5 ms. It
/// absorbs clock-rate differences between this host and Redis and timer lateness, so the local
/// deadline passes before Redis expires the key.
pub(crate) fn safety_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(5)
}

/// Settings of a [`crate::RedisLock`]: where Redis is, and the timing of every lock.
///
/// Services get these from `lock-starter`'s configuration (`telco.platform.lock.*`); build one
/// by hand only to wire [`RedisLock`](crate::RedisLock) yourself.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_redis::RedisLockConfig;
///
/// let config = RedisLockConfig::new("redis://127.0.0.1:6379")
///     .wait_time(Duration::from_secs(2))
///     .watchdog_timeout(Duration::from_secs(10))
///     .instance_id("billing-7f9c");
/// assert!(config.validate().is_ok());
///
/// // Every setting, as a production service might have them:
/// let config = RedisLockConfig::default()
///     .address("rediss://billing:s3cret@redis.internal:6380/2")
///     .tls_ca_file("/etc/ssl/redis-ca.pem")
///     .command_timeout(Duration::from_millis(500))
///     .wait_time(Duration::from_secs(5))
///     .watchdog_timeout(Duration::from_secs(30))
///     .key_prefix("billing:lock:")
///     .instance_id("billing-7f9c")
///     .min_replicas(1)
///     .replica_sync_timeout(Duration::from_millis(200))
///     .fair_waiter_timeout(Duration::from_secs(5));
/// assert!(config.validate().is_ok());
/// assert!(!format!("{config:?}").contains("s3cret")); // `Debug` redacts the password
/// ```
#[derive(Clone)]
pub struct RedisLockConfig {
    /// Parsed when set, so the builder stays infallible; a bad one is reported by
    /// [`RedisLockConfig::validate`].
    pub(crate) address: Result<RedisAddress, Unparsed>,
    pub(crate) command_timeout: Duration,
    pub(crate) wait_time: Duration,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) key_prefix: String,
    pub(crate) instance_id: String,
    pub(crate) min_replicas: u32,
    pub(crate) replica_sync_timeout: Duration,
    pub(crate) fair_waiter_timeout: Duration,
    pub(crate) tls_ca_file: Option<PathBuf>,
}

/// An address [`RedisAddress::parse`] refused: as messages show it, and why.
#[derive(Clone)]
pub(crate) struct Unparsed {
    shown: String,
    problem: InvalidAddress,
}

fn parse_address(text: &str) -> Result<RedisAddress, Unparsed> {
    RedisAddress::parse(text).map_err(|problem| Unparsed {
        shown: redact(text).into_owned(),
        problem,
    })
}

impl fmt::Debug for RedisLockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockConfig")
            .field("address", &self.redacted_address())
            .field("command_timeout", &self.command_timeout)
            .field("wait_time", &self.wait_time)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("key_prefix", &self.key_prefix)
            .field("instance_id", &self.instance_id)
            .field("min_replicas", &self.min_replicas)
            .field("replica_sync_timeout", &self.replica_sync_timeout)
            .field("fair_waiter_timeout", &self.fair_waiter_timeout)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

impl Default for RedisLockConfig {
    fn default() -> Self {
        Self::new(DEFAULT_ADDRESS)
    }
}

impl From<RedisAddress> for RedisLockConfig {
    /// Settings for an address parsed already, as [`RedisLockConfig::new`] gives them.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::{RedisAddress, RedisLockConfig};
    ///
    /// let address = RedisAddress::parse("redis-cluster://redis-0:6379?node=redis-1:6379")?;
    /// let config = RedisLockConfig::from(address).key_prefix("billing:lock:");
    /// assert!(config.validate().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn from(address: RedisAddress) -> Self {
        RedisLockConfig {
            address: Ok(address),
            ..RedisLockConfig::default()
        }
    }
}

impl RedisLockConfig {
    /// Settings for the Redis at `address` (a [`RedisAddress`] text: one server, a Sentinel
    /// group or a Cluster), all timings at their defaults and the instance id taken from
    /// `POD_NAME` or `HOSTNAME`. The address is parsed here, once; a bad one is reported by
    /// [`validate`](Self::validate) and [`RedisLock::connect`](crate::RedisLock::connect).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::RedisLockConfig;
    ///
    /// let config = RedisLockConfig::new("redis://redis.internal:6379/2");
    /// assert_eq!(config.redacted_address(), "redis://redis.internal:6379/2");
    /// assert!(config.validate().is_ok()); // the defaults are valid
    /// ```
    pub fn new(address: impl Into<String>) -> Self {
        RedisLockConfig {
            address: parse_address(&address.into()),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            wait_time: DEFAULT_WAIT_TIME,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            instance_id: ["POD_NAME", "HOSTNAME"]
                .iter()
                .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
                .unwrap_or_else(|| "unknown-instance".to_owned()),
            min_replicas: DEFAULT_MIN_REPLICAS,
            replica_sync_timeout: DEFAULT_REPLICA_SYNC_TIMEOUT,
            fair_waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
            tls_ca_file: None,
        }
    }

    /// Replicas that must acknowledge a grant (Redis `WAIT`, on the connection that ran the
    /// acquire script) before it is reported; fewer acknowledgements within
    /// [`replica_sync_timeout`](Self::replica_sync_timeout) release the grant and fail closed
    /// (reason `replication_unconfirmed`). Default 0 (no `WAIT`); 0 to 16.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::RedisLockConfig;
    ///
    /// // A grant must reach one replica within 200 ms, so a failover cannot lose it.
    /// let config = RedisLockConfig::new("redis://redis.internal:6379")
    ///     .min_replicas(1)
    ///     .replica_sync_timeout(Duration::from_millis(200));
    /// assert!(config.validate().is_ok());
    /// assert!(config.min_replicas(17).validate().is_err()); // at most 16
    /// ```
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.min_replicas = replicas;
        self
    }

    /// How long a grant waits for [`min_replicas`](Self::min_replicas) acknowledgements.
    /// Default 1 s; 1 ms to 10 s. Adds to the longest time an acquire can take.
    pub fn replica_sync_timeout(mut self, timeout: Duration) -> Self {
        self.replica_sync_timeout = timeout;
        self
    }

    /// The fair waiter timeout (see [`AcquireOptions::fair`](lock_core::AcquireOptions::fair)):
    /// a waiting process calls every third of it, and each call keeps its place in the key's
    /// queue for this long plus one [command timeout](Self::command_timeout). So a waiter whose
    /// process died holds up the waiters behind it for at most that long (7 s with the
    /// defaults). Default 5 s; 300 ms to 5 min — [`validate`](Self::validate) and
    /// [`RedisLock::connect`](crate::RedisLock::connect) reject other values with
    /// `LOCK_INVALID_ARGUMENT` naming `fair_waiter_timeout`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::RedisLockConfig;
    ///
    /// let config = RedisLockConfig::new("redis://redis.internal:6379");
    /// assert!(config.clone().fair_waiter_timeout(Duration::from_secs(2)).validate().is_ok());
    ///
    /// let error = config.fair_waiter_timeout(Duration::from_millis(100)).validate().unwrap_err();
    /// assert_eq!(error.details()["argument"], "fair_waiter_timeout");
    /// ```
    pub fn fair_waiter_timeout(mut self, timeout: Duration) -> Self {
        self.fair_waiter_timeout = timeout;
        self
    }

    /// A PEM file of CA certificates to trust for `rediss://` addresses instead of the
    /// system's roots.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// Replaces the Redis address (see [`new`](Self::new)).
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = parse_address(&address.into());
        self
    }

    /// Timeout of every Redis command, also of connecting. Default 2 s; 10 ms to 60 s. An
    /// acquire returns at most this long after its wait time.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Default wait time of an acquire. Default 5 s; 0 (one attempt) to 1 h.
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.wait_time = wait;
        self
    }

    /// TTL of watchdog leases, renewed every third of it. Default 30 s; 1 s to 1 h.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// Prefix of every Redis key and channel. Default `lock:`; 1 to 64 bytes, no braces,
    /// whitespace or control characters.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The readable part of owner tokens (host or pod name); 1 to 128 bytes.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = id.into();
        self
    }

    /// The address with any password — the user's, and secret-looking query parameters such as
    /// `sentinelPassword` — replaced by `***`, for logs and messages.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::RedisLockConfig;
    ///
    /// let config = RedisLockConfig::new(
    ///     "redis-sentinel://app:s3cret@s1:26379/0?sentinelServiceName=mymaster&sentinelPassword=t0p",
    /// );
    /// assert_eq!(
    ///     config.redacted_address(),
    ///     "redis-sentinel://app:***@s1:26379/0?sentinelServiceName=mymaster&sentinelPassword=***"
    /// );
    /// ```
    pub fn redacted_address(&self) -> String {
        match &self.address {
            Ok(address) => address.to_string(),
            Err(unparsed) => unparsed.shown.clone(),
        }
    }

    /// The parsed address.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `address`, with the (redacted) address, why
    /// [`RedisAddress::parse`] refused it and the accepted forms.
    pub(crate) fn redis_address(&self) -> Result<&RedisAddress, LockError> {
        self.address.as_ref().map_err(|unparsed| {
            LockError::invalid_argument(
                "address",
                unparsed.shown.clone(),
                format!("{}; accepted: {ACCEPTED_ADDRESSES}", unparsed.problem),
            )
        })
    }

    /// What the shared core connects with.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `address` when the address did not parse.
    pub(crate) fn endpoint(&self) -> Result<Endpoint<'_>, LockError> {
        Ok(Endpoint {
            address: self.redis_address()?,
            command_timeout: self.command_timeout,
            tls_ca_file: self.tls_ca_file.as_deref(),
        })
    }

    /// Checks every setting.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming the setting by its builder method (`address`,
    /// `command_timeout`, `wait_time`, `watchdog_timeout`, `key_prefix`, `instance_id`,
    /// `min_replicas`, `replica_sync_timeout`, `fair_waiter_timeout`, `tls_ca_file` — set with an
    /// address without TLS) and what is accepted. The CA file
    /// ([`tls_ca_file`](Self::tls_ca_file)) is read when connecting.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::RedisLockConfig;
    ///
    /// let config = RedisLockConfig::new("redis://redis.internal:6379")
    ///     .command_timeout(Duration::from_secs(120));
    /// let error = config.validate().unwrap_err();
    /// assert_eq!(error.code(), "LOCK_INVALID_ARGUMENT");
    /// assert_eq!(error.details()["argument"], "command_timeout");
    /// assert_eq!(error.to_string(), "invalid command_timeout 120 s: accepted: 10 ms to 60 s");
    ///
    /// let error = RedisLockConfig::new("redis://redis.internal:0").validate().unwrap_err();
    /// assert_eq!(error.details()["argument"], "address");
    /// assert!(error.to_string().starts_with("invalid address redis://redis.internal:0: port 0 is not accepted"));
    /// ```
    pub fn validate(&self) -> Result<(), LockError> {
        check_ca_file_use(&self.endpoint()?)?;
        let (command, fair) = (self.command_timeout, self.fair_waiter_timeout);
        check_duration(
            "command_timeout",
            command,
            MIN_COMMAND_TIMEOUT,
            MAX_COMMAND_TIMEOUT,
        )?;
        check_duration("wait_time", self.wait_time, Duration::ZERO, MAX_WAIT)?;
        let watchdog = self.watchdog_timeout;
        check_duration(
            "watchdog_timeout",
            watchdog,
            MIN_WATCHDOG_TIMEOUT,
            MAX_WATCHDOG_TIMEOUT,
        )?;
        validate_key_prefix(&self.key_prefix)?;
        validate_instance_id(&self.instance_id).map_err(|e| rename(e, "instance_id"))?;
        if self.min_replicas > MAX_MIN_REPLICAS {
            return Err(LockError::invalid_argument(
                "min_replicas",
                self.min_replicas.to_string(),
                format!("accepted: 0 to {MAX_MIN_REPLICAS}"),
            ));
        }
        let sync = self.replica_sync_timeout;
        check_duration(
            "replica_sync_timeout",
            sync,
            MIN_REPLICA_SYNC_TIMEOUT,
            MAX_REPLICA_SYNC_TIMEOUT,
        )?;
        check_duration(
            "fair_waiter_timeout",
            fair,
            MIN_FAIR_WAITER_TIMEOUT,
            MAX_FAIR_WAITER_TIMEOUT,
        )
    }
}

fn rename(error: LockError, setting: &'static str) -> LockError {
    match error {
        LockError::InvalidArgument { value, problem, .. } => {
            LockError::invalid_argument(setting, value, problem)
        }
        other => other,
    }
}

/// Longest accepted key prefix, in bytes: 64.
pub const MAX_KEY_PREFIX_BYTES: usize = 64;

/// What is wrong with a key prefix, if anything. Accepted: 1 to [`MAX_KEY_PREFIX_BYTES`] bytes,
/// no braces (they would move the Redis Cluster hash tag), whitespace or control characters.
///
/// # Examples
///
/// ```
/// use lock_redis::key_prefix_problem;
///
/// assert_eq!(key_prefix_problem("billing:lock:"), None);
/// assert_eq!(key_prefix_problem("billing lock:").as_deref(), Some("it contains whitespace"));
/// assert!(key_prefix_problem("{billing}:").unwrap().contains("hash tag"));
/// ```
pub fn key_prefix_problem(prefix: &str) -> Option<String> {
    if prefix.is_empty() {
        Some("it is empty".to_owned())
    } else if prefix.len() > MAX_KEY_PREFIX_BYTES {
        Some(format!(
            "it is {} bytes long, more than {MAX_KEY_PREFIX_BYTES}",
            prefix.len()
        ))
    } else if prefix.contains(['{', '}']) {
        Some("it contains a brace, which would move the Redis Cluster hash tag".to_owned())
    } else if prefix.chars().any(char::is_control) {
        Some("it contains a control character".to_owned())
    } else if prefix.chars().any(char::is_whitespace) {
        Some("it contains whitespace".to_owned())
    } else {
        None
    }
}

/// Checks a key prefix (see [`key_prefix_problem`]).
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `key_prefix` (the [`RedisLockConfig`] setting).
///
/// # Examples
///
/// ```
/// use lock_redis::validate_key_prefix;
///
/// assert!(validate_key_prefix("lock:").is_ok());
/// let error = validate_key_prefix("").unwrap_err();
/// assert_eq!(error.details()["argument"], "key_prefix");
/// assert!(error.to_string().starts_with("invalid key_prefix \"\": it is empty; accepted: 1 to 64 bytes"));
/// ```
pub fn validate_key_prefix(prefix: &str) -> Result<(), LockError> {
    match key_prefix_problem(prefix) {
        None => Ok(()),
        Some(problem) => Err(LockError::invalid_argument(
            "key_prefix",
            format!("{prefix:?}"),
            format!(
                "{problem}; accepted: 1 to {MAX_KEY_PREFIX_BYTES} bytes without braces, whitespace or control characters"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use lock_testkit::secrets::{AT_PASSWORD, PASSWORD, SENTINEL_PASSWORD, USER, assert_no_secret};

    use super::*;

    #[test]
    fn passwords_never_show() {
        for address in [
            format!("redis://{USER}:{PASSWORD}@db:6379"),
            format!("rediss://{PASSWORD}@db:6379"),
            format!(
                "redis-sentinel://{USER}:{PASSWORD}@h:26379/0?sentinelServiceName=m\
                 &sentinelUsername=s&sentinelPassword={SENTINEL_PASSWORD}&node=h2:1"
            ),
            // Refused by the parser (port 0), shown all the same.
            format!("redis://{USER}:{PASSWORD}@db:0"),
            format!("redis://{USER}:{AT_PASSWORD}@db:6379"),
        ] {
            let config = RedisLockConfig::new(&address);
            assert_no_secret("the config's Debug", &format!("{config:?}"));
            assert_no_secret("the redacted address", &config.redacted_address());
            let text = format!("{address} failed");
            let scrubbed = match config.endpoint() {
                Ok(endpoint) => endpoint.address.scrub(&text),
                Err(_) => redact(&text).into_owned(),
            };
            assert_no_secret("a scrubbed text", &scrubbed);
        }
        let refused = RedisLockConfig::new(format!("redis://{USER}:{PASSWORD}@db:0"));
        let error = refused.validate().unwrap_err();
        assert_eq!(error.details()["argument"], "address");
        assert_no_secret("the error", &error.to_string());
    }

    #[test]
    fn settings_are_checked_by_name() {
        let ok = RedisLockConfig::new("redis://h").instance_id("pod-1");
        assert!(ok.validate().is_ok());
        let cases = [
            (ok.clone().address("redis://h:0"), "address"),
            (ok.clone().address("http://h"), "address"),
            (
                ok.clone().command_timeout(Duration::ZERO),
                "command_timeout",
            ),
            (ok.clone().wait_time(Duration::from_secs(7200)), "wait_time"),
            (
                ok.clone().watchdog_timeout(Duration::from_millis(10)),
                "watchdog_timeout",
            ),
            (ok.clone().key_prefix("a{b"), "key_prefix"),
            (ok.clone().key_prefix(""), "key_prefix"),
            (ok.clone().instance_id(""), "instance_id"),
            (ok.clone().min_replicas(17), "min_replicas"),
            (
                ok.clone().replica_sync_timeout(Duration::ZERO),
                "replica_sync_timeout",
            ),
            (
                ok.clone().fair_waiter_timeout(Duration::from_millis(100)),
                "fair_waiter_timeout",
            ),
        ];
        for (config, setting) in cases {
            let error = config.validate().unwrap_err();
            assert_eq!(error.details()["argument"], setting, "{error}");
            let text = error.to_string();
            assert!(text.starts_with(&format!("invalid {setting} ")), "{text}");
        }
    }
}
