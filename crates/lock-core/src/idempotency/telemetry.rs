//! Idempotent execution's `tracing` span and `metrics`: one `DEBUG` span,
//! `idempotency.execute`, per call, and two counters. No metric has the key as a label.

use std::future::Future;

use tracing::Instrument;

use crate::idempotency::error::NotStored;
use crate::metric::metric_name;

/// Counter of idempotent calls by `outcome`: `executed`, `replayed`, `action_failed` or
/// `refused` with an [`IdempotencyError`](crate::idempotency::IdempotencyError).
pub const CALLS_TOTAL: &str = metric_name!("idempotency", "calls_total");
/// Counter of results returned but not stored, by `reason`, an
/// [`Unstored::as_str`](crate::idempotency::Unstored::as_str).
pub const NOT_STORED_TOTAL: &str = metric_name!("idempotency", "results_not_stored_total");

pub(crate) async fn execute<R>(key: &str, call: impl Future<Output = (R, &'static str)>) -> R {
    let span = tracing::debug_span!("idempotency.execute", key, outcome = tracing::field::Empty);
    let (result, outcome) = call.instrument(span.clone()).await;
    span.record("outcome", outcome);
    metrics::counter!(CALLS_TOTAL, "outcome" => outcome).increment(1);
    result
}

pub(crate) fn not_stored(reason: &NotStored) {
    metrics::counter!(NOT_STORED_TOTAL, "reason" => reason.kind().as_str()).increment(1);
}
