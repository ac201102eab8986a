//! The [`RateLimitStore`] port: charges on a shared clock.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::rate_limit::error::RateLimitError;
use crate::rate_limit::quota::Quota;

/// One limit of a check: `cost` requests of `key` against the limit `limit` with `quota`.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    /// The limit's name, part of where its state lives.
    pub limit: &'a str,
    /// The limited key, such as a client id.
    pub key: &'a str,
    /// The quota to decide by: the one in force now, which may differ from the last call's.
    pub quota: Quota,
    /// Requests to charge; 0 reads the standing without charging.
    pub cost: u32,
}

/// A store's answer for one [`Charge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whether this charge alone would be admitted.
    pub allowed: bool,
    /// Requests still admitted at once after this call.
    pub remaining: u32,
    /// When the charge would be admitted; zero when it is.
    pub retry_after: Duration,
    /// When the key is at rest again (its whole burst admitted at once).
    pub reset_after: Duration,
}

/// Where rate-limit state lives: the generic cell rate algorithm (GCRA) on one clock shared by
/// every client.
///
/// # Contract
/// - `charge` decides every charge on the backend's clock, never the caller's, and answers one
///   [`Verdict`] per charge, in order.
/// - It charges all of them when every one is allowed, and none otherwise, atomically: no other
///   call sees some charged.
/// - A key's state is O(1) and is kept no longer than until it is at rest.
/// - A charge decides by the quota it carries. State charged under another quota is converted,
///   not reset: requests owed stay owed and drain at the new rate from now on.
/// - A cost above the quota's burst is never sent: the caller rejects it.
/// - Errors are [`RateLimitError::Unavailable`] for a backend failure and
///   [`RateLimitError::InvalidArgument`] for charges the backend cannot take together.
#[async_trait]
pub trait RateLimitStore: Send + Sync + Debug + 'static {
    /// Decides and, if all are allowed, charges every one of `charges`.
    async fn charge(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, RateLimitError>;

    /// Whether rate limiting is switched off: every request is admitted and nothing is asked
    /// of the store. Only [`DisabledRateLimits`](crate::rate_limit::DisabledRateLimits) says so.
    fn disabled(&self) -> bool {
        false
    }
}
