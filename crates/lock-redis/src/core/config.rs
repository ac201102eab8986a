//! Settings of a [`RedisClient`](crate::RedisClient): where Redis is and how to talk to it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::{LockError, check_duration, validate_instance_id};

use crate::core::address::{ACCEPTED_ADDRESSES, InvalidAddress, RedisAddress};
use crate::core::connection::{Endpoint, check_ca_file_use};
use crate::core::redact::redact;

/// Defaults and accepted ranges of [`RedisConfig`].
pub(crate) mod limits {
    use std::time::Duration;

    /// Default Redis address: `redis://localhost:6379`.
    pub const DEFAULT_ADDRESS: &str = "redis://localhost:6379";
    /// Default per-command timeout: 2 s.
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
    /// Shortest accepted command timeout: 10 ms.
    pub const MIN_COMMAND_TIMEOUT: Duration = Duration::from_millis(10);
    /// Longest accepted command timeout: 60 s.
    pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
    /// Default key prefix: `lock:`.
    pub const DEFAULT_KEY_PREFIX: &str = "lock:";
    /// Longest accepted key prefix, in bytes: 64.
    pub const MAX_KEY_PREFIX_BYTES: usize = 64;
}

use limits::*;

/// Settings of a [`RedisClient`](crate::RedisClient): the address, TLS, the command timeout, the
/// key prefix and the instance id that every capability on the client shares.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_redis::RedisConfig;
///
/// let config = RedisConfig::new("rediss://billing:s3cret@redis.internal:6380/2")
///     .tls_ca_file("/etc/ssl/redis-ca.pem")
///     .command_timeout(Duration::from_millis(500))
///     .key_prefix("billing:lock:")
///     .instance_id("billing-7f9c");
/// assert!(config.validate().is_ok());
/// assert!(!format!("{config:?}").contains("s3cret")); // `Debug` redacts the password
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    /// Parsed when set, so the builder stays infallible; a bad one is reported by `validate`.
    pub(crate) address: Result<RedisAddress, Unparsed>,
    pub(crate) command_timeout: Duration,
    pub(crate) key_prefix: String,
    pub(crate) instance_id: String,
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

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("address", &self.redacted_address())
            .field("command_timeout", &self.command_timeout)
            .field("key_prefix", &self.key_prefix)
            .field("instance_id", &self.instance_id)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self::new(DEFAULT_ADDRESS)
    }
}

impl From<RedisAddress> for RedisConfig {
    /// Settings for an address parsed already.
    fn from(address: RedisAddress) -> Self {
        RedisConfig {
            address: Ok(address),
            ..RedisConfig::default()
        }
    }
}

impl RedisConfig {
    /// Settings for the Redis at `address`: one server, a Sentinel group or a Cluster (see
    /// [`RedisAddress`]). The instance id defaults to `POD_NAME` or `HOSTNAME`. A bad address is
    /// reported by [`validate`](Self::validate) and by connecting.
    pub fn new(address: impl Into<String>) -> Self {
        RedisConfig {
            address: parse_address(&address.into()),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            instance_id: ["POD_NAME", "HOSTNAME"]
                .iter()
                .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
                .unwrap_or_else(|| "unknown-instance".to_owned()),
            tls_ca_file: None,
        }
    }

    /// Replaces the Redis address.
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = parse_address(&address.into());
        self
    }

    /// A PEM file of CA certificates to trust for TLS addresses instead of the system's roots.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// Timeout of every Redis command and of connecting. Default 2 s; 10 ms to 60 s.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Prefix of every key and channel. Default `lock:`; 1 to 64 bytes, no braces, whitespace
    /// or control characters.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The readable part of owner tokens (host or pod name); 1 to 128 bytes.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = id.into();
        self
    }

    /// The address with every password replaced by `***`, for logs and messages.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::RedisConfig;
    ///
    /// let config = RedisConfig::new(
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
    /// [`LockError::InvalidArgument`] naming `address`, with why it was refused and the
    /// accepted forms.
    pub(crate) fn redis_address(&self) -> Result<&RedisAddress, LockError> {
        self.address.as_ref().map_err(|unparsed| {
            LockError::invalid_argument(
                "address",
                unparsed.shown.clone(),
                format!("{}; accepted: {ACCEPTED_ADDRESSES}", unparsed.problem),
            )
        })
    }

    /// What the connections are built from.
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
    /// `command_timeout`, `key_prefix`, `instance_id`, `tls_ca_file` with an address without
    /// TLS) and what is accepted. The CA file itself is read when connecting.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::RedisConfig;
    ///
    /// let config = RedisConfig::new("redis://redis.internal:6379")
    ///     .command_timeout(Duration::from_secs(120));
    /// let error = config.validate().unwrap_err();
    /// assert_eq!(error.details()["argument"], "command_timeout");
    /// assert_eq!(error.to_string(), "invalid command_timeout 120 s: accepted: 10 ms to 60 s");
    ///
    /// let error = RedisConfig::new("redis://redis.internal:0").validate().unwrap_err();
    /// assert_eq!(error.details()["argument"], "address");
    /// ```
    pub fn validate(&self) -> Result<(), LockError> {
        check_ca_file_use(&self.endpoint()?)?;
        check_duration(
            "command_timeout",
            self.command_timeout,
            MIN_COMMAND_TIMEOUT,
            MAX_COMMAND_TIMEOUT,
        )?;
        validate_key_prefix(&self.key_prefix)?;
        validate_instance_id(&self.instance_id).map_err(|error| match error {
            LockError::InvalidArgument { value, problem, .. } => {
                LockError::invalid_argument("instance_id", value, problem)
            }
            other => other,
        })
    }
}

/// What is wrong with a key prefix, if anything. Accepted: 1 to [`MAX_KEY_PREFIX_BYTES`] bytes,
/// no braces (they would move the Cluster hash tag), whitespace or control characters.
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
/// [`LockError::InvalidArgument`] naming `key_prefix`.
fn validate_key_prefix(prefix: &str) -> Result<(), LockError> {
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
            let config = RedisConfig::new(&address);
            assert_no_secret("the config's Debug", &format!("{config:?}"));
            assert_no_secret("the redacted address", &config.redacted_address());
            let text = format!("{address} failed");
            let scrubbed = match config.endpoint() {
                Ok(endpoint) => endpoint.address.scrub(&text),
                Err(_) => redact(&text).into_owned(),
            };
            assert_no_secret("a scrubbed text", &scrubbed);
        }
        let refused = RedisConfig::new(format!("redis://{USER}:{PASSWORD}@db:0"));
        let error = refused.validate().unwrap_err();
        assert_eq!(error.details()["argument"], "address");
        assert_no_secret("the error", &error.to_string());
    }

    #[test]
    fn settings_are_checked_by_name() {
        let ok = RedisConfig::new("redis://h").instance_id("pod-1");
        assert!(ok.validate().is_ok());
        let cases = [
            (ok.clone().address("redis://h:0"), "address"),
            (ok.clone().address("http://h"), "address"),
            (ok.clone().tls_ca_file("/ca.pem"), "tls_ca_file"),
            (
                ok.clone().command_timeout(Duration::ZERO),
                "command_timeout",
            ),
            (ok.clone().key_prefix("a{b"), "key_prefix"),
            (ok.clone().key_prefix(""), "key_prefix"),
            (ok.clone().instance_id(""), "instance_id"),
        ];
        for (config, setting) in cases {
            let error = config.validate().unwrap_err();
            assert_eq!(error.details()["argument"], setting, "{error}");
            let text = error.to_string();
            assert!(text.starts_with(&format!("invalid {setting} ")), "{text}");
        }
    }
}
