//! The errors of idempotent execution.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{BoxError, LockError, details_of, impl_problem};

/// Why an idempotent call did not produce a result.
///
/// It is a [`Problem`](crate::Problem), with the HTTP status the IETF `Idempotency-Key` draft
/// gives each case: 409 for a duplicate whose wait ran out, 422 for a key reused with another
/// request, 503 for an unreachable backend or a failed first call, 500 otherwise.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::idempotency::IdempotencyError;
///
/// let error = IdempotencyError::InProgress {
///     key: "ticket-create:42".into(),
///     holder: "billing-7f9c/3e1f0c9a2b7d4e58/1".into(),
///     waited: Duration::from_secs(200),
/// };
/// assert_eq!(error.code(), "IDEMPOTENCY_IN_PROGRESS");
/// assert_eq!(error.http_status(), 409);
/// assert_eq!(error.details()["idempotencyKey"], "ticket-create:42");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// The backend could not be reached, timed out or refused a command, and the action did not
    /// run. Code `IDEMPOTENCY_BACKEND_UNAVAILABLE`.
    #[error("idempotent call `{key}` did not run: backend unavailable: {cause}")]
    Unavailable {
        /// The idempotency key.
        key: String,
        /// The backend's error.
        #[source]
        cause: BoxError,
    },
    /// Another caller was still executing this key when the duplicate's wait ran out. Code
    /// `IDEMPOTENCY_IN_PROGRESS`.
    #[error(
        "idempotent call `{key}` is still in progress at {holder} after waiting {}; the action did not run again",
        crate::duration::format_duration(*.waited)
    )]
    InProgress {
        /// The idempotency key.
        key: String,
        /// The owner token of the caller executing it.
        holder: String,
        /// How long this duplicate waited.
        waited: Duration,
    },
    /// The caller this duplicate waited on failed or could not store its result, and the action
    /// did not run again. A later call runs it. Code `IDEMPOTENCY_OWNER_FAILED`.
    #[error(
        "idempotent call `{key}` failed at {holder}, which this duplicate waited on; the action did not run again (a retry runs it)"
    )]
    OwnerFailed {
        /// The idempotency key.
        key: String,
        /// The owner token of the caller that failed.
        holder: String,
    },
    /// The key was used before with a different request fingerprint. Code
    /// `IDEMPOTENCY_KEY_REUSED`.
    #[error(
        "idempotency key `{key}` was already used for a different request (fingerprint mismatch); use a new key for a new request"
    )]
    KeyReused {
        /// The idempotency key.
        key: String,
    },
    /// The stored result does not decode as the caller's type, and the action did not run
    /// again. Code `IDEMPOTENCY_RESULT_UNREADABLE`.
    #[error(
        "the stored result of idempotent call `{key}` cannot be read as the caller's type: {cause}"
    )]
    ResultUnreadable {
        /// The idempotency key.
        key: String,
        /// The decoder's error.
        #[source]
        cause: BoxError,
    },
    /// The result was not stored and the record was given up, so a duplicate runs the action
    /// again. Only [`IdempotencyScope::complete`](crate::idempotency::IdempotencyScope::complete) returns it.
    /// Code `IDEMPOTENCY_RESULT_NOT_STORED`.
    #[error("the result of idempotent call `{key}` was not stored: {reason}")]
    ResultNotStored {
        /// The idempotency key.
        key: String,
        /// Why.
        #[source]
        reason: NotStored,
    },
    /// A key, duration or option is not accepted and nothing was sent to the backend. Code
    /// `IDEMPOTENCY_INVALID_ARGUMENT`.
    #[error("invalid {name} {value:?}: {problem}")]
    InvalidArgument {
        /// The argument, such as `idempotency key` or `wait_time`.
        name: &'static str,
        /// The rejected value.
        value: String,
        /// What is wrong and what is accepted.
        problem: String,
    },
}

/// Why a result was not stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotStored {
    /// The serialized result is larger than
    /// [`IdempotencySettings::max_result_bytes`](crate::idempotency::IdempotencySettings::max_result_bytes).
    #[error("its {size} bytes of JSON exceed the {max}-byte cap (max_result_bytes)")]
    TooLarge {
        /// Serialized size, bytes.
        size: usize,
        /// The cap, bytes.
        max: usize,
    },
    /// The result type failed to serialize.
    #[error("it cannot be serialized: {0}")]
    NotSerializable(#[source] BoxError),
    /// The in-progress lease ended before the result arrived, so the record may have another
    /// owner now.
    #[error("the in-progress lease ended first (another caller may have run the action too)")]
    LeaseLost,
    /// The backend did not confirm the write, which may or may not have landed.
    #[error("the backend did not confirm it: {0}")]
    Unavailable(#[source] BoxError),
}

impl NotStored {
    /// Which of the reasons this is, without its cause.
    pub fn kind(&self) -> Unstored {
        match self {
            NotStored::TooLarge { .. } => Unstored::TooLarge,
            NotStored::NotSerializable(_) => Unstored::NotSerializable,
            NotStored::LeaseLost => Unstored::LeaseLost,
            NotStored::Unavailable(_) => Unstored::Unconfirmed,
        }
    }
}

/// Why an executed result is not the one retries get, in
/// [`Idempotent::Unstored`](crate::idempotency::Idempotent::Unstored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unstored {
    /// Larger than the result cap. Waiting duplicates get [`IdempotencyError::OwnerFailed`] and
    /// the next call runs the action again.
    TooLarge,
    /// The result type failed to serialize, with the effect of [`TooLarge`](Unstored::TooLarge).
    NotSerializable,
    /// The in-progress lease ended first. Another caller may have run the action, and retries
    /// get its result.
    LeaseLost,
    /// The backend did not confirm the write. Retries replay this result if it landed, else run
    /// the action again.
    Unconfirmed,
}

impl Unstored {
    /// The label metrics and logs use: `too_large`, `not_serializable`, `lease_lost`,
    /// `unconfirmed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unstored::TooLarge => "too_large",
            Unstored::NotSerializable => "not_serializable",
            Unstored::LeaseLost => "lease_lost",
            Unstored::Unconfirmed => "unconfirmed",
        }
    }
}

impl IdempotencyError {
    /// The stable code, such as `IDEMPOTENCY_IN_PROGRESS`.
    pub fn code(&self) -> &'static str {
        match self {
            IdempotencyError::Unavailable { .. } => "IDEMPOTENCY_BACKEND_UNAVAILABLE",
            IdempotencyError::InProgress { .. } => "IDEMPOTENCY_IN_PROGRESS",
            IdempotencyError::OwnerFailed { .. } => "IDEMPOTENCY_OWNER_FAILED",
            IdempotencyError::KeyReused { .. } => "IDEMPOTENCY_KEY_REUSED",
            IdempotencyError::ResultUnreadable { .. } => "IDEMPOTENCY_RESULT_UNREADABLE",
            IdempotencyError::ResultNotStored { .. } => "IDEMPOTENCY_RESULT_NOT_STORED",
            IdempotencyError::InvalidArgument { .. } => "IDEMPOTENCY_INVALID_ARGUMENT",
        }
    }

    /// The HTTP status: 503 unavailable or owner failed, 409 in progress, 422 key reused, 500
    /// otherwise.
    pub fn http_status(&self) -> u16 {
        match self {
            IdempotencyError::Unavailable { .. } | IdempotencyError::OwnerFailed { .. } => 503,
            IdempotencyError::InProgress { .. } => 409,
            IdempotencyError::KeyReused { .. } => 422,
            IdempotencyError::ResultUnreadable { .. }
            | IdempotencyError::ResultNotStored { .. }
            | IdempotencyError::InvalidArgument { .. } => 500,
        }
    }

    /// The idempotency key this error is about, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            IdempotencyError::Unavailable { key, .. }
            | IdempotencyError::InProgress { key, .. }
            | IdempotencyError::OwnerFailed { key, .. }
            | IdempotencyError::KeyReused { key }
            | IdempotencyError::ResultUnreadable { key, .. }
            | IdempotencyError::ResultNotStored { key, .. } => Some(key),
            IdempotencyError::InvalidArgument { .. } => None,
        }
    }

    /// The details map of a problem body or a log: `code`, `message`, `reason` (the code in
    /// lower case without its prefix, such as `in_progress`), and where known `idempotencyKey`,
    /// `holder`, `waitedMs` and `argument`.
    pub fn details(&self) -> BTreeMap<&'static str, String> {
        let code = self.code();
        let mut details = details_of(code, self);
        let reason = code.trim_start_matches("IDEMPOTENCY_").to_ascii_lowercase();
        details.insert("reason", reason);
        if let Some(key) = self.key() {
            details.insert("idempotencyKey", key.to_owned());
        }
        match self {
            IdempotencyError::InProgress { holder, waited, .. } => {
                details.insert("holder", holder.clone());
                details.insert("waitedMs", waited.as_millis().to_string());
            }
            IdempotencyError::OwnerFailed { holder, .. } => {
                details.insert("holder", holder.clone());
            }
            IdempotencyError::InvalidArgument { name, .. } => {
                details.insert("argument", (*name).to_owned());
            }
            _ => {}
        }
        details
    }

    /// The backend is unavailable for `key`.
    pub fn unavailable(key: &str, cause: impl Into<BoxError>) -> Self {
        IdempotencyError::Unavailable {
            key: key.to_owned(),
            cause: cause.into(),
        }
    }

    /// Restates an invalid key or argument from the shared validation for an idempotent call.
    pub(crate) fn from_validation(error: LockError) -> Self {
        match error {
            LockError::InvalidKey { key, problem, .. } => IdempotencyError::InvalidArgument {
                name: "idempotency key",
                value: key,
                problem: format!("{problem}; {KEY_RULES}"),
            },
            LockError::InvalidArgument {
                name,
                value,
                problem,
                ..
            } => IdempotencyError::InvalidArgument {
                name,
                value,
                problem,
            },
            other => IdempotencyError::InvalidArgument {
                name: "argument",
                value: String::new(),
                problem: other.to_string(),
            },
        }
    }
}

/// What a valid idempotency key looks like: the lock's key rules.
const KEY_RULES: &str = "an idempotency key is 1 to 512 bytes of UTF-8 with no control characters";

impl_problem!(IdempotencyError);
