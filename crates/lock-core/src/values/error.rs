//! [`ValuesError`]: what a shared-values call fails with.

use std::collections::BTreeMap;

use crate::error::{BoxError, LockError, details_of, impl_problem};

/// The error of every fallible shared-values operation.
///
/// It is a [`Problem`](crate::Problem): codes `VALUES_UNAVAILABLE` (HTTP 503),
/// `VALUES_QUEUE_FULL` (503), `VALUES_INVALID_ARGUMENT` and `VALUES_UNDECODABLE` (500, a defect
/// of the calling code).
///
/// # Examples
///
/// ```
/// use lock_core::values::ValuesError;
///
/// let error = ValuesError::unavailable("get", "catalog:warm", "timed out");
/// assert_eq!(error.code(), "VALUES_UNAVAILABLE");
/// assert_eq!(error.http_status(), 503);
/// assert_eq!(error.details()["key"], "catalog:warm");
/// assert_eq!(error.to_string(), "shared value get of `catalog:warm` was not confirmed: timed out");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValuesError {
    /// The backend did not confirm `operation`: a write may or may not have happened, and
    /// nothing is reported as current. Code `VALUES_UNAVAILABLE`.
    #[error("shared value {operation} of `{key}` was not confirmed: {cause}")]
    Unavailable {
        /// `get`, `set`, `delete` or `wait`.
        operation: &'static str,
        /// The value's key.
        key: String,
        /// The backend's error.
        #[source]
        cause: BoxError,
    },
    /// An argument is not accepted and nothing was sent to the backend. Code
    /// `VALUES_INVALID_ARGUMENT`.
    #[error("invalid {name} {value}: {problem}")]
    InvalidArgument {
        /// The argument, such as `key`, `ttl` or `value`.
        name: &'static str,
        /// The rejected value, quoted or summarised.
        value: String,
        /// What is wrong and what is accepted.
        problem: String,
    },
    /// A push would pass the queue's bound, and nothing was pushed. Code `VALUES_QUEUE_FULL`.
    #[error(
        "queue `{queue}` holds {len} items and takes at most {max_len}: the push of {pushed} was refused whole; take and acknowledge items first"
    )]
    QueueFull {
        /// The queue.
        queue: String,
        /// The items it holds.
        len: u64,
        /// Its bound.
        max_len: u64,
        /// The items the push had.
        pushed: usize,
    },
    /// The stored value does not deserialize as the type asked for: another type, or an older
    /// shape of it. Code `VALUES_UNDECODABLE`.
    #[error("shared value `{key}`{} does not decode as `{type_name}`: {cause}", version_text(*.version))]
    Undecodable {
        /// The value's key (`<map>[<field>]` for a map's field).
        key: String,
        /// The version of the value that did not decode (map fields have none).
        version: Option<u64>,
        /// The Rust type asked for.
        type_name: &'static str,
        /// The deserializer's error.
        #[source]
        cause: serde_json::Error,
    },
}

impl ValuesError {
    /// An [`Unavailable`](ValuesError::Unavailable) error.
    pub fn unavailable(
        operation: &'static str,
        key: impl Into<String>,
        cause: impl Into<BoxError>,
    ) -> Self {
        ValuesError::Unavailable {
            operation,
            key: key.into(),
            cause: cause.into(),
        }
    }

    /// The stable code, such as `VALUES_UNAVAILABLE`.
    pub fn code(&self) -> &'static str {
        match self {
            ValuesError::Unavailable { .. } => "VALUES_UNAVAILABLE",
            ValuesError::InvalidArgument { .. } => "VALUES_INVALID_ARGUMENT",
            ValuesError::Undecodable { .. } => "VALUES_UNDECODABLE",
            ValuesError::QueueFull { .. } => "VALUES_QUEUE_FULL",
        }
    }

    /// The HTTP status: 503 when the backend failed or a queue is full, else 500.
    pub fn http_status(&self) -> u16 {
        match self {
            ValuesError::Unavailable { .. } | ValuesError::QueueFull { .. } => 503,
            _ => 500,
        }
    }

    /// The details map of a problem body or a log: `code`, `message`, `reason`
    /// (`backend_unavailable`, `queue_full`, `invalid_argument` or `undecodable`), and where
    /// known `key`, `operation`, `argument`, `version` and `len`.
    pub fn details(&self) -> BTreeMap<&'static str, String> {
        let mut details = details_of(self.code(), self);
        let reason = match self {
            ValuesError::Unavailable { operation, key, .. } => {
                details.insert("operation", (*operation).to_owned());
                details.insert("key", key.clone());
                "backend_unavailable"
            }
            ValuesError::InvalidArgument { name, .. } => {
                details.insert("argument", (*name).to_owned());
                "invalid_argument"
            }
            ValuesError::QueueFull { queue, len, .. } => {
                details.insert("key", queue.clone());
                details.insert("len", len.to_string());
                "queue_full"
            }
            ValuesError::Undecodable { key, version, .. } => {
                details.insert("key", key.clone());
                if let Some(version) = version {
                    details.insert("version", version.to_string());
                }
                "undecodable"
            }
        };
        details.insert("reason", reason.to_owned());
        details
    }

    /// The error of a [`ValueStore::queue_ack`](crate::values::ValueStore::queue_ack) given
    /// `id`, which no take of the queue could have given.
    pub fn not_a_queue_id(id: &str) -> Self {
        ValuesError::invalid(
            "id",
            format!("{id:?}"),
            "not an id a take of this queue gave; nothing was acknowledged".to_owned(),
        )
    }

    /// An invalid argument `name` with the value shown as `value`.
    pub(crate) fn invalid(name: &'static str, value: impl Into<String>, problem: String) -> Self {
        ValuesError::InvalidArgument {
            name,
            value: value.into(),
            problem,
        }
    }

    /// A failed argument check of the shared part (a key, a duration) as this capability's
    /// error.
    pub(crate) fn argument(error: LockError) -> Self {
        Self::argument_named("key", error)
    }

    /// As [`argument`](Self::argument), a bad key named `key` (a map's `field`, `map`, …).
    pub(crate) fn argument_named(key: &'static str, error: LockError) -> Self {
        let (name, value, problem) = error.into_argument(key, "argument");
        ValuesError::invalid(name, value, problem)
    }
}

fn version_text(version: Option<u64>) -> String {
    version.map_or_else(String::new, |v| format!(" (version {v})"))
}

impl_problem!(ValuesError);
