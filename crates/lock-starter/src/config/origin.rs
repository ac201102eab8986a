//! Where a value came from: a default, a TOML file, an environment variable, a consumer's figment.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use figment::Metadata;

use super::keys::{KEYS, key_spec};

/// The metadata name of the per-variable environment providers; their `Source::Custom` holds the
/// variable's name.
pub(crate) const ENV_PROVIDER: &str = "environment variable";

/// The metadata name of the key table's defaults; a `Source::Custom` names the variable (or
/// [`HOST_NAME`]) a default was read from.
pub(crate) const DEFAULTS_PROVIDER: &str = "default";

/// The source of a default read from the operating system's host name.
pub(crate) const HOST_NAME: &str = "the host name";

/// Where a setting's value came from. `Display` reads as the end of "from …":
/// `default`, `TOML file config/app.toml`, `environment variable TELCO_PLATFORM_LOCK_WAIT_TIME`,
/// `spring.data.redis.url from environment variable SPRING_DATA_REDIS_URL`,
/// `spring.data.redis.host from TOML file config/app.toml, spring.data.redis.port from default
/// and spring.data.redis.password from environment variable SPRING_DATA_REDIS_PASSWORD`.
///
/// # Examples
///
/// ```
/// use lock_starter::config::{ConfigSources, LockSettings, Origin};
///
/// # fn main() -> Result<(), lock_starter::config::ConfigError> {
/// // The address from the service's Spring settings:
/// let sources = ConfigSources::new().env_from([("SPRING_DATA_REDIS_URL", "redis://cache:6380")]);
/// let settings = LockSettings::load(&sources)?;
/// let origin = settings.source_of("redis.address").unwrap();
/// assert_eq!(origin, &Origin::SpringUrl(Box::new(Origin::Env("SPRING_DATA_REDIS_URL".into()))));
/// assert_eq!(
///     origin.to_string(),
///     "spring.data.redis.url from environment variable SPRING_DATA_REDIS_URL"
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// The built-in default.
    Default,
    /// A default read from an environment variable (`POD_NAME` or `HOSTNAME` for
    /// `instance-id`).
    DefaultFromEnv(String),
    /// A default read from the operating system's host name (`instance-id`).
    DefaultFromHostname,
    /// A file; `format` is how figment names it (`TOML file`).
    File {
        /// The kind of file, e.g. `TOML file`.
        format: String,
        /// The path as it was given.
        path: PathBuf,
    },
    /// An environment variable, by its exact name.
    Env(String),
    /// `redis.address` taken from `spring.data.redis.url`, which came from the origin inside.
    SpringUrl(Box<Origin>),
    /// `redis.address` built from `spring.data.redis.host` and `port` (both always listed,
    /// [`Origin::Default`] for one not set), then whichever of `username` and `password` are set.
    SpringFallback {
        /// Each key used, by its full name, with where its value came from, in that order.
        keys: Vec<(String, Origin)>,
    },
    /// Another figment provider, from a consumer's figment: its name and, when known, its
    /// location or the name it gives the key.
    Provider(String),
}

impl Origin {
    /// The origin figment recorded for a value at `path`.
    pub(crate) fn from_metadata(metadata: Option<&Metadata>, path: &str) -> Origin {
        let Some(metadata) = metadata else {
            return Origin::Provider("an unnamed figment provider".to_owned());
        };
        match &metadata.source {
            Some(figment::Source::Custom(name)) if metadata.name == DEFAULTS_PROVIDER => {
                if name == HOST_NAME {
                    Origin::DefaultFromHostname
                } else {
                    Origin::DefaultFromEnv(name.clone())
                }
            }
            None if metadata.name == DEFAULTS_PROVIDER => Origin::Default,
            Some(figment::Source::Custom(name)) if metadata.name == ENV_PROVIDER => {
                Origin::Env(name.clone())
            }
            Some(figment::Source::File(path)) => Origin::File {
                format: metadata.name.to_string(),
                path: path.clone(),
            },
            source => {
                let keys: Vec<&str> = path.split('.').collect();
                let profile = figment::Profile::Default;
                let named = metadata.interpolate(&profile, &keys);
                // Providers without their own naming (all but figment's `Env`) say nothing new.
                let plain = Metadata::named("").interpolate(&profile, &keys);
                let mut text = metadata.name.to_string();
                if named != plain {
                    text = format!("{text} {named}");
                }
                match source {
                    Some(figment::Source::Code(location)) => {
                        text = format!("figment provider {text} at {location}");
                    }
                    Some(figment::Source::Custom(custom)) => text = format!("{text} {custom}"),
                    _ => {}
                }
                Origin::Provider(text)
            }
        }
    }

    /// Whether two values came from the same file, the environment, or the same provider.
    pub(crate) fn same_source(&self, other: &Origin) -> bool {
        match (self, other) {
            (Origin::Env(_), Origin::Env(_)) => true,
            (a, b) => a == b,
        }
    }

    /// Whether the value is a built-in default (including a default read from the environment
    /// or the host name).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// let sources = ConfigSources::new()
    ///     .env_from([("POD_NAME", "billing-7f9c"), ("TELCO_PLATFORM_LOCK_WAIT_TIME", "2s")]);
    /// let settings = LockSettings::load(&sources)?;
    /// assert!(settings.source_of("instance-id").unwrap().is_default()); // from POD_NAME
    /// assert!(!settings.source_of("wait-time").unwrap().is_default());
    /// # Ok(()) }
    /// ```
    pub fn is_default(&self) -> bool {
        matches!(
            self,
            Origin::Default | Origin::DefaultFromEnv(_) | Origin::DefaultFromHostname
        )
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::DefaultFromEnv(var) => write!(f, "default, environment variable {var}"),
            Origin::DefaultFromHostname => f.write_str("default, the host name"),
            Origin::File { format, path } => write!(f, "{format} {}", path.display()),
            Origin::Env(var) => write!(f, "environment variable {var}"),
            Origin::SpringUrl(url) => write!(f, "spring.data.redis.url from {url}"),
            Origin::SpringFallback { keys } => {
                for (i, (key, origin)) in keys.iter().enumerate() {
                    let separator = match i {
                        0 => "",
                        i if i + 1 == keys.len() => " and ",
                        _ => ", ",
                    };
                    write!(f, "{separator}{key} from {origin}")?;
                }
                Ok(())
            }
            Origin::Provider(text) => f.write_str(text),
        }
    }
}

/// The [`Origin`] of every setting of a [`LockSettings`](super::LockSettings); all
/// [`Origin::Default`] for settings built by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Origins {
    by_key: BTreeMap<&'static str, Origin>,
}

static DEFAULT: Origin = Origin::Default;

impl Origins {
    /// Where `key` came from; `key` is the full name (`telco.platform.lock.wait-time`) or the
    /// name relative to `telco.platform.lock` (`wait-time`). `None` if the key is not in
    /// [`KEYS`](super::KEYS).
    pub(crate) fn get(&self, key: &str) -> Option<&Origin> {
        let spec = key_spec(key).filter(|spec| KEYS.contains(spec))?;
        Some(self.by_key.get(spec.name).unwrap_or(&DEFAULT))
    }

    pub(crate) fn set(&mut self, name: &'static str, origin: Origin) {
        self.by_key.insert(name, origin);
    }
}

/// What the settings need from the environment besides the keys: `POD_NAME` and `HOSTNAME` for
/// the default `instance-id`, and the warnings about variables the lock does not read.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostEnv {
    pub(crate) pod_name: Option<String>,
    pub(crate) hostname: Option<String>,
    pub(crate) warnings: Vec<String>,
    /// The `SPRING_DATA_REDIS_*` variables that set no key the lock reads (names only).
    pub(crate) spring_unread: Vec<String>,
}

impl HostEnv {
    pub(crate) fn process() -> Self {
        HostEnv::with(|name| std::env::var(name).ok())
    }

    pub(crate) fn with(var: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name| var(name).filter(|v| !v.is_empty());
        HostEnv {
            pod_name: var("POD_NAME"),
            hostname: var("HOSTNAME"),
            ..HostEnv::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_found_by_its_full_or_relative_name_and_only_if_the_lock_reads_it() {
        let origins = Origins::default();
        assert_eq!(
            origins.get("telco.platform.lock.wait-time"),
            Some(&Origin::Default)
        );
        assert_eq!(origins.get("wait-time"), Some(&Origin::Default));
        assert_eq!(origins.get("spring.data.redis.url"), None);
    }
}
