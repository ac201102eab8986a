//! What idempotent execution tells operators: one `DEBUG` span per call and two counters. No
//! metric carries the key (unbounded); the span does.

use std::future::Future;

use tracing::Instrument;

use crate::idempotency::error::NotStored;

/// Idempotent calls by `outcome`: `executed`, `replayed`, `action_failed` or `refused` (an
/// [`IdempotencyError`](crate::idempotency::IdempotencyError): backend down, wait spent, key reused, …).
pub const CALLS_TOTAL: &str = "platform_idempotency_calls_total";
/// Results returned but not stored, by `reason`: `too_large`, `not_serializable`,
/// `lease_lost`, `unconfirmed` ([`Unstored::as_str`](crate::idempotency::Unstored::as_str)).
pub const NOT_STORED_TOTAL: &str = "platform_idempotency_results_not_stored_total";

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
