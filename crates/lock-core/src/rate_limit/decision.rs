//! [`Decision`]: what a rate-limit check answers, and [`FailurePolicy`], what it answers when
//! the backend cannot.

use std::sync::Arc;
use std::time::Duration;

use crate::rate_limit::error::RateLimitError;
use crate::rate_limit::quota::Quota;

/// What a limiter answers when its backend fails: chosen per limiter, with no default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Admit the request: availability over the limit (a gateway).
    FailOpen,
    /// Deny the request: the limit over availability (an expensive or abusable call).
    FailClosed,
}

/// How a [`Decision`] was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// By the limit's state on the backend.
    Counted,
    /// The backend failed and the limiter fails open: admitted. Nothing is charged unless the
    /// backend applied the check after all (it answered too late, or the answer was lost).
    FailedOpen,
    /// The backend failed and the limiter fails closed: denied.
    FailedClosed,
    /// Rate limiting is switched off: admitted, nothing charged.
    Disabled,
}

/// The answer to a rate-limit check.
///
/// For a check of several limits it describes the one that binds: the denying limit with the
/// longest wait, or when all admit, the one with the fewest remaining.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request is admitted (and was charged, when [`Basis::Counted`]).
    pub allowed: bool,
    /// How the decision was reached.
    pub basis: Basis,
    /// The binding limit's name.
    pub limit: Arc<str>,
    /// The binding limit's quota.
    pub quota: Quota,
    /// The limited key.
    pub key: String,
    /// Requests still admitted at once.
    pub remaining: u32,
    /// When a denied request would be admitted if nothing else is charged meanwhile; zero when
    /// admitted, and when the backend failed (nothing is known of the limit then).
    pub retry_after: Duration,
    /// When the key is at rest again, its whole burst available.
    pub reset_after: Duration,
}

impl Decision {
    /// The decision if admitted, so that a denied request can end a handler with `?`.
    ///
    /// # Errors
    /// [`RateLimitError::Limited`] (`RATE_LIMITED`, HTTP 429) when denied by the limit;
    /// [`RateLimitError::Unavailable`] (503) when denied because the backend failed.
    pub fn admitted(self) -> Result<Decision, RateLimitError> {
        if self.allowed {
            Ok(self)
        } else if self.basis == Basis::FailedClosed {
            Err(RateLimitError::unavailable(
                self.limit.to_string(),
                "the backend failed and the limiter fails closed",
            ))
        } else {
            Err(RateLimitError::Limited {
                limit: self.limit.to_string(),
                key: self.key,
                retry_after: self.retry_after,
            })
        }
    }

    /// A decision reached without the backend: all of the burst, no wait.
    pub(crate) fn unchecked(
        allowed: bool,
        basis: Basis,
        limit: Arc<str>,
        quota: Quota,
        key: &str,
    ) -> Self {
        Decision {
            allowed,
            basis,
            limit,
            quota,
            key: key.to_owned(),
            remaining: if allowed { quota.burst() } else { 0 },
            retry_after: Duration::ZERO,
            reset_after: Duration::ZERO,
        }
    }
}
