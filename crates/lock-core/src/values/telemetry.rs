//! Shared values' `tracing` spans and `metrics`, recorded by [`SharedValues`](crate::values::SharedValues)
//! for every backend.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`WRITES_TOTAL`] | counter | `operation`, `outcome` |
//! | [`WAITS_TOTAL`] | counter | `outcome` |
//! | [`WAIT_SECONDS`] | histogram | `outcome` |
//!
//! No metric has a key as a label. A wait runs in a `values.wait` span at `DEBUG` carrying its
//! key and outcome.

use std::future::Future;

use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::metric::metric_name;
use crate::values::error::ValuesError;
use crate::values::port::{Waited, Written};

/// Counter of writes by `operation` (`set`, `delete`) and `outcome` (`stored`, `refused`,
/// `failed`).
pub const WRITES_TOTAL: &str = metric_name!("values", "writes_total");
/// Counter of waits by `outcome`: `met`, `timed_out` or `failed`.
pub const WAITS_TOTAL: &str = metric_name!("values", "waits_total");
/// Histogram of seconds a wait took, by `outcome`.
pub const WAIT_SECONDS: &str = metric_name!("values", "wait_seconds");

/// Counts one write.
pub(crate) fn written(operation: &'static str, written: &Result<Written, ValuesError>) {
    let outcome = match written {
        Ok(Written::Stored { .. }) => "stored",
        Ok(Written::Refused { .. }) => "refused",
        Err(_) => "failed",
    };
    metrics::counter!(WRITES_TOTAL, "operation" => operation, "outcome" => outcome).increment(1);
}

/// Runs a wait in its span and records how it ended.
pub(crate) async fn wait<T>(
    key: &str,
    wait: impl Future<Output = Result<Waited<T>, ValuesError>>,
) -> Result<Waited<T>, ValuesError> {
    let span = tracing::debug_span!("values.wait", key, outcome = Empty);
    let started = Instant::now();
    let waited = wait.instrument(span.clone()).await;
    let outcome = match &waited {
        Ok(Waited::Met(_)) => "met",
        Ok(Waited::TimedOut(_)) => "timed_out",
        Err(_) => "failed",
    };
    span.record("outcome", outcome);
    metrics::counter!(WAITS_TOTAL, "outcome" => outcome).increment(1);
    metrics::histogram!(WAIT_SECONDS, "outcome" => outcome).record(started.elapsed().as_secs_f64());
    waited
}
