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
/// `failed_closed` or `disabled`.
pub const DECISIONS_TOTAL: &str = metric_name!("rate_limit", "decisions_total");

/// Counts one decision of `limit`.
pub(crate) fn decided(limit: &Arc<str>, decision: &Decision) {
    let outcome = match (decision.basis, decision.allowed) {
        (Basis::Counted, true) => "allowed",
        (Basis::Counted, false) => "denied",
        (Basis::FailedOpen, _) => "failed_open",
        (Basis::FailedClosed, _) => "failed_closed",
        (Basis::Disabled, _) => "disabled",
    };
    metrics::counter!(DECISIONS_TOTAL, "limit" => limit.to_owned(), "outcome" => outcome)
        .increment(1);
}
