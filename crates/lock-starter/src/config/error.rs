//! The one error of loading configuration: every variant names the key, the value, where it came
//! from and what is accepted.

use std::path::PathBuf;

use super::origin::Origin;

/// Why the lock configuration was not accepted. Start-up should stop and print it.
///
/// Every message names the key (full dotted name, or the exact environment variable), the
/// offending value, where it came from, and what is accepted, e.g.
///
/// ```text
/// telco.platform.lock.wait-time = "5 parsecs" (from environment variable TELCO_PLATFORM_LOCK_WAIT_TIME): unknown unit "parsecs"; the units are ms, s, m (minutes) and h; accepted: a duration in ms, s, m or h (such as 250ms, 5s or 1m30s; 0 needs no unit), from 0 to 1 h
/// ```
///
/// Passwords in Redis URLs and `spring.data.redis.password` are shown as `***` in `Display` and
/// `Debug`.
///
/// # Examples
///
/// ```
/// use lock_starter::config::{ConfigError, ConfigSources, LockSettings, Origin};
///
/// let sources = ConfigSources::new()
///     .env_from([("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://app:s3cret@redis.internal:0")]);
/// match LockSettings::load(&sources) {
///     Err(ConfigError::InvalidValue { key, value, origin, problem, .. }) => {
///         assert_eq!(key, "telco.platform.lock.redis.address");
///         assert_eq!(value, r#""redis://app:***@redis.internal:0""#); // never the password
///         assert_eq!(*origin, Origin::Env("TELCO_PLATFORM_LOCK_REDIS_ADDRESS".into()));
///         assert!(problem.starts_with("port 0 is not accepted"));
///     }
///     other => panic!("expected an invalid value, got {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A known key has a value that is not accepted.
    #[error("{key} = {value} (from {origin}): {problem}; accepted: {accepted}")]
    InvalidValue {
        /// The full dotted key, e.g. `telco.platform.lock.wait-time`.
        key: String,
        /// The value as given (strings quoted), password redacted.
        value: String,
        /// Where the value came from (boxed to keep the error small).
        origin: Box<Origin>,
        /// What is wrong with it.
        problem: String,
        /// What the key accepts.
        accepted: String,
    },
    /// Two environment variables set one key to different values: its two forms, or two
    /// spellings of a section's name.
    #[error(
        "{key} is set twice in the environment with different values: {first} = {first_value} \
         and {second} = {second_value}; accepted: set only one of them (both name the same key)"
    )]
    ConflictingEnv {
        /// The full dotted key.
        key: String,
        /// The variable in the form with `_` for dashes, where one of them is.
        first: String,
        /// Its value.
        first_value: String,
        /// The other variable.
        second: String,
        /// Its value.
        second_value: String,
    },
    /// A TOML file given explicitly does not exist.
    #[error(
        "TOML file {} does not exist; it was given as a configuration source, so create it or \
         stop passing it (accepted: a path to an existing TOML file)",
        .path.display()
    )]
    MissingFile {
        /// The path as it was given.
        path: PathBuf,
    },
    /// A TOML file exists but cannot be read.
    #[error("TOML file {} cannot be read: {reason}", .path.display())]
    UnreadableFile {
        /// The path as it was given.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// A TOML file is not valid TOML.
    #[error("TOML file {} is not valid TOML: {message}", .path.display())]
    InvalidToml {
        /// The path as it was given.
        path: PathBuf,
        /// The parser's message: position and problem.
        message: String,
    },
    /// A consumer-supplied figment failed to produce its values.
    #[error("a configuration source of the supplied figment failed: {message}")]
    Source {
        /// Figment's message, passwords redacted.
        message: String,
    },
    /// The starter's builder was given TOML files and also sources that replace the default
    /// ones (a figment or a [`ConfigSources`](super::ConfigSources)), so the files would not be
    /// read.
    #[error(
        "the starter was given TOML files ({files}) and a figment or ConfigSources, which \
         replaces the default sources, so the files would not be read; accepted: one or the \
         other (to layer files and a figment, add both to one ConfigSources and pass it to \
         `sources`)"
    )]
    IgnoredFiles {
        /// The files given with `toml_file`, comma-separated.
        files: String,
    },
    /// A variable the lock reads holds bytes that are not UTF-8.
    #[error(
        "environment variable {variable} holds bytes that are not UTF-8 (not shown: it may be a \
         secret); accepted: UTF-8 text"
    )]
    NotUtf8Env {
        /// The variable.
        variable: String,
    },
}

impl ConfigError {
    /// The key (full dotted name) or environment variable the error is about, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    ///
    /// let sources = ConfigSources::new().env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "1M")]);
    /// let error = LockSettings::load(&sources).unwrap_err();
    /// assert_eq!(error.key(), Some("telco.platform.lock.wait-time"));
    /// assert!(error.to_string().contains("M is not minutes"));
    ///
    /// let missing = LockSettings::load(&ConfigSources::new().toml_file("lock-typo.toml"));
    /// assert_eq!(missing.unwrap_err().key(), None); // about a file, not a key
    /// ```
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::InvalidValue { key, .. } | ConfigError::ConflictingEnv { key, .. } => {
                Some(key)
            }
            ConfigError::NotUtf8Env { variable } => Some(variable),
            ConfigError::MissingFile { .. }
            | ConfigError::UnreadableFile { .. }
            | ConfigError::InvalidToml { .. }
            | ConfigError::Source { .. }
            | ConfigError::IgnoredFiles { .. } => None,
        }
    }

    /// Where the offending value came from, when it is one place.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    ///
    /// let sources = ConfigSources::new().env_from([("TELCO_PLATFORM_LOCK_MIN_REPLICAS", "-1")]);
    /// let error = LockSettings::load(&sources).unwrap_err();
    /// let origin = error.origin().unwrap();
    /// assert_eq!(origin.to_string(), "environment variable TELCO_PLATFORM_LOCK_MIN_REPLICAS");
    /// ```
    pub fn origin(&self) -> Option<&Origin> {
        match self {
            ConfigError::InvalidValue { origin, .. } => Some(origin),
            _ => None,
        }
    }
}

/// A figment error on one line: for parse errors the position and the problem, without the
/// quoted source line (which could hold a password); URL passwords redacted.
pub(crate) fn one_line_message(error: &figment::Error) -> String {
    let text = match &error.kind {
        figment::error::Kind::Message(message) => message.clone(),
        _ => error.to_string(),
    };
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let message = match (lines.first(), lines.last()) {
        (Some(first), Some(last)) if lines.len() > 1 && first.starts_with("TOML parse error") => {
            format!("{first}: {last}")
        }
        _ => lines.join(" "),
    };
    lock_redis::redact(&message).into_owned()
}
