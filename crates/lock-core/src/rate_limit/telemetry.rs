//! Rate limiting's `metrics`, recorded by [`RateLimiter`](crate::rate_limit::RateLimiter) for
//! every backend.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`DECISIONS_TOTAL`] | counter | `limit`, `outcome` |
//!
//! The limit's name is a label, its keys never are.

use std::sync::Arc;

use crate::metric::metric_name;
use crate::rate_limit::decision::{Basis, Decision};

/// Counter of decisions by `limit` and `outcome`: `allowed`, `denied`, `failed_open`,
/// `failed_closed` or `disabled`. A limit checked with others counts its own verdict: it
/// counts nothing when it would admit but another denied, and a cost of 0 counts nothing.
pub const DECISIONS_TOTAL: &str = metric_name!("rate_limit", "decisions_total");

/// The `outcome` labels of [`DECISIONS_TOTAL`].
const OUTCOMES: [&str; 5] = [
    "allowed",
    "denied",
    "failed_open",
    "failed_closed",
    "disabled",
];

/// Registers every outcome of `limit` at 0, so that its first failure is a rise that
/// `increase()` sees.
pub(crate) fn register(limit: &Arc<str>) {
    for outcome in OUTCOMES {
        metrics::counter!(DECISIONS_TOTAL, "limit" => limit.to_owned(), "outcome" => outcome)
            .increment(0);
    }
}

/// Counts one decision of `limit`.
pub(crate) fn decided(limit: &Arc<str>, decision: &Decision) {
    counted(limit, decision.basis, decision.allowed);
}

/// Counts one decision of `limit` on `basis`.
pub(crate) fn counted(limit: &Arc<str>, basis: Basis, allowed: bool) {
    let outcome = OUTCOMES[match (basis, allowed) {
        (Basis::Counted, true) => 0,
        (Basis::Counted, false) => 1,
        (Basis::FailedOpen, _) => 2,
        (Basis::FailedClosed, _) => 3,
        (Basis::Disabled, _) => 4,
    }];
    metrics::counter!(DECISIONS_TOTAL, "limit" => limit.to_owned(), "outcome" => outcome)
        .increment(1);
}
