//! [`RateLimitError`]: what a rate-limit call fails with.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{BoxError, LockError, impl_problem};

/// The error of a rate-limit call.
///
/// It is a [`Problem`](crate::Problem): codes `RATE_LIMITED` (HTTP 429, from
/// [`Decision::admitted`](crate::rate_limit::Decision::admitted)), `RATE_LIMIT_UNAVAILABLE`
/// (503, a backend failure as the port reports it), `RATE_LIMIT_COST_ABOVE_BURST` and
/// `RATE_LIMIT_INVALID_ARGUMENT` (500, defects of the calling code).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::rate_limit::RateLimitError;
///
/// let error = RateLimitError::Limited {
///     limit: "login".into(),
///     key: "client-42".into(),
///     retry_after: Duration::from_millis(1500),
/// };
/// assert_eq!(error.code(), "RATE_LIMITED");
/// assert_eq!(error.http_status(), 429);
/// assert_eq!(error.details()["retryAfterMs"], "1500");
/// assert_eq!(error.to_string(), "rate limit `login` for `client-42` is used up: retry after 1500 ms");
///
/// let soon = RateLimitError::Limited {
///     limit: "api".into(),
///     key: "client-42".into(),
///     retry_after: Duration::from_micros(400),
/// };
/// assert_eq!(soon.details()["retryAfterMs"], "1"); // whole milliseconds, rounded up
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimitError {
    /// The request was denied. Code `RATE_LIMITED`.
    #[error("rate limit `{limit}` for `{key}` is used up: retry after {}", crate::format_duration(*.retry_after))]
    Limited {
        /// The limit that denied it.
        limit: String,
        /// The limited key.
        key: String,
        /// When the request would be admitted, if nothing else is charged meanwhile.
        retry_after: Duration,
    },
    /// The backend did not answer. The port reports it; a [`RateLimiter`](crate::rate_limit::RateLimiter)
    /// turns it into a decision by its [`FailurePolicy`](crate::rate_limit::FailurePolicy). Code
    /// `RATE_LIMIT_UNAVAILABLE`.
    #[error("rate limit `{limit}` could not be checked: {cause}")]
    Unavailable {
        /// The limit (the first of a combined check).
        limit: String,
        /// The backend's error.
        #[source]
        cause: BoxError,
    },
    /// The cost is more than the burst, so no wait could ever admit it. Code
    /// `RATE_LIMIT_COST_ABOVE_BURST`.
    #[error(
        "cost {cost} is above the burst of rate limit `{limit}` ({burst}): no wait admits it; split the request or raise the burst"
    )]
    CostAboveBurst {
        /// The limit.
        limit: String,
        /// The cost asked for.
        cost: u32,
        /// The limit's burst.
        burst: u32,
    },
    /// An argument is not accepted and nothing was charged. Code `RATE_LIMIT_INVALID_ARGUMENT`.
    #[error("invalid {name} {value}: {problem}")]
    InvalidArgument {
        /// The argument, such as `key`, `limit` or `quota`.
        name: &'static str,
        /// The rejected value, quoted or summarised.
        value: String,
        /// What is wrong and what is accepted.
        problem: String,
    },
}

impl RateLimitError {
    /// The stable code, such as `RATE_LIMITED`.
    pub fn code(&self) -> &'static str {
        match self {
            RateLimitError::Limited { .. } => "RATE_LIMITED",
            RateLimitError::Unavailable { .. } => "RATE_LIMIT_UNAVAILABLE",
            RateLimitError::CostAboveBurst { .. } => "RATE_LIMIT_COST_ABOVE_BURST",
            RateLimitError::InvalidArgument { .. } => "RATE_LIMIT_INVALID_ARGUMENT",
        }
    }

    /// The HTTP status: 429 when limited, 503 when the backend failed, else 500.
    pub fn http_status(&self) -> u16 {
        match self {
            RateLimitError::Limited { .. } => 429,
            RateLimitError::Unavailable { .. } => 503,
            _ => 500,
        }
    }

    /// The details map of a problem body or a log: `code`, `message`, `reason` (`limited`,
    /// `backend_unavailable`, `cost_above_burst` or `invalid_argument`), and where known
    /// `limit`, `key`, `retryAfterMs` (rounded up) and `argument`.
    pub fn details(&self) -> BTreeMap<&'static str, String> {
        let mut details = BTreeMap::from([
            ("code", self.code().to_owned()),
            ("message", self.to_string()),
        ]);
        let reason = match self {
            RateLimitError::Limited {
                limit,
                key,
                retry_after,
            } => {
                details.insert("limit", limit.clone());
                details.insert("key", key.clone());
                // Rounded up: a denial never reads as "retry now".
                let millis = retry_after.as_nanos().div_ceil(1_000_000);
                details.insert("retryAfterMs", millis.to_string());
                "limited"
            }
            RateLimitError::Unavailable { limit, .. } => {
                details.insert("limit", limit.clone());
                "backend_unavailable"
            }
            RateLimitError::CostAboveBurst { limit, .. } => {
                details.insert("limit", limit.clone());
                "cost_above_burst"
            }
            RateLimitError::InvalidArgument { name, .. } => {
                details.insert("argument", (*name).to_owned());
                "invalid_argument"
            }
        };
        details.insert("reason", reason.to_owned());
        details
    }

    /// An [`Unavailable`](RateLimitError::Unavailable) error.
    pub fn unavailable(limit: impl Into<String>, cause: impl Into<BoxError>) -> Self {
        RateLimitError::Unavailable {
            limit: limit.into(),
            cause: cause.into(),
        }
    }

    /// An invalid argument `name` with the value shown as `value`.
    pub fn invalid(
        name: &'static str,
        value: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        RateLimitError::InvalidArgument {
            name,
            value: value.into(),
            problem: problem.into(),
        }
    }

    /// A failed key or name check of the shared part as this capability's error.
    pub(crate) fn argument(name: &'static str, error: LockError) -> Self {
        match error {
            LockError::InvalidKey {
                key,
                problem,
                accepted,
            } => RateLimitError::invalid(
                name,
                format!("{key:?}"),
                format!(
                    "{problem}; {}",
                    accepted.replacen("a lock key", &format!("a {name}"), 1)
                ),
            ),
            LockError::InvalidArgument { value, problem, .. } => {
                RateLimitError::invalid(name, value, problem)
            }
            other => RateLimitError::invalid(name, String::new(), other.to_string()),
        }
    }
}

impl_problem!(RateLimitError);
