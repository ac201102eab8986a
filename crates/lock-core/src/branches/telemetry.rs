//! The master/sub locks' `tracing` spans and `metrics`, recorded for every backend.
//!
//! The orchestration and the provided
//! [`Branches::release_branch`](crate::branches::Branches::release_branch) record them. No
//! metric has a key or branch id as a label, as they are unbounded. Spans and events carry
//! them.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`REGISTRATIONS_TOTAL`] | counter | `outcome` |
//! | [`RELEASES_TOTAL`] | counter | `outcome` |
//! | [`MASTER_WAITS_TOTAL`] | counter | `outcome` |
//! | [`MASTER_WAIT_SECONDS`] | histogram | `outcome` |
//!
//! Spans are at `DEBUG`: `branches.master` around an invocation and `branches.release` around
//! a consumer's release. A registration that fails open logs a `WARN`, or an `INFO` when the
//! backend is disabled, and so does a wait that ends with branches not released.

use std::future::Future;
use std::time::Duration;

use tracing::Instrument;
use tracing::field::Empty;

use crate::branches::error::BranchError;
use crate::branches::outcome::{BranchRelease, BranchesOutcome};
use crate::branches::token::BranchToken;
use crate::metric::metric_name;

/// Counter of registrations by `outcome`: `registered`, `unregistered` (failed open, so the
/// master does not wait for it) or `sealed`.
pub const REGISTRATIONS_TOTAL: &str = metric_name!("branches", "registrations_total");
/// Counter of consumers' releases by `outcome`: a [`BranchRelease`] or `failed`.
pub const RELEASES_TOTAL: &str = metric_name!("branches", "releases_total");
/// Counter of master waits by `outcome`, a [`BranchesOutcome`].
pub const MASTER_WAITS_TOTAL: &str = metric_name!("branches", "master_waits_total");
/// Histogram of seconds a master waited for its branches after its block returned, by
/// `outcome`.
pub const MASTER_WAIT_SECONDS: &str = metric_name!("branches", "master_wait_seconds");

/// The span of one master invocation; its outcome fields are recorded by [`master_done`].
pub(crate) fn master_span(master_key: &str) -> tracing::Span {
    tracing::debug_span!(
        "branches.master",
        master_key,
        invocation = Empty,
        outcome = Empty,
        missing = Empty,
        waited_ms = Empty,
    )
}

/// Counts one registration outcome.
pub(crate) fn registered(outcome: &'static str) {
    metrics::counter!(REGISTRATIONS_TOTAL, "outcome" => outcome).increment(1);
}

/// The most branch ids a log line or span names; the rest are counted.
const MISSING_SHOWN: usize = 10;

/// Records how a master's wait ended, on its span and in the metrics, and warns when not every
/// branch was confirmed released, with `cause` when the branches could not be read.
pub(crate) fn master_done(
    span: &tracing::Span,
    master_key: &str,
    invocation: u64,
    outcome: &BranchesOutcome,
    cause: Option<&str>,
    waited: Duration,
) {
    let label = outcome.as_str();
    let missing = shown(outcome.missing());
    span.record("outcome", label);
    span.record("missing", missing.as_str());
    span.record("waited_ms", millis(waited));
    metrics::counter!(MASTER_WAITS_TOTAL, "outcome" => label).increment(1);
    metrics::histogram!(MASTER_WAIT_SECONDS, "outcome" => label).record(waited.as_secs_f64());
    let message = match outcome {
        BranchesOutcome::AllReleased => {
            tracing::debug!(
                parent: span,
                master_key,
                invocation,
                waited_ms = millis(waited),
                "every branch of the master released"
            );
            return;
        }
        BranchesOutcome::TimedOut { .. } => {
            "the master's branch wait ended with branches not released"
        }
        BranchesOutcome::LeaseLost { .. } => {
            "the master's lease was lost; it stopped waiting for its branches"
        }
        BranchesOutcome::Unconfirmed { .. } => {
            "the master stopped waiting: its branches cannot be confirmed"
        }
    };
    tracing::warn!(
        parent: span,
        master_key,
        invocation,
        outcome = label,
        missing = %missing,
        missing_count = outcome.missing().len(),
        error = cause,
        waited_ms = millis(waited),
        "{message}"
    );
}

/// `ids` as a list of quoted ids, the first [`MISSING_SHOWN`] of them and a count of the rest.
fn shown(ids: &[String]) -> String {
    let mut list: Vec<String> = ids
        .iter()
        .take(MISSING_SHOWN)
        .map(|id| format!("{id:?}"))
        .collect();
    if ids.len() > MISSING_SHOWN {
        list.push(format!("… and {} more", ids.len() - MISSING_SHOWN));
    }
    format!("[{}]", list.join(", "))
}

/// Runs a consumer's release inside a `branches.release` span and counts its outcome.
pub(crate) async fn release<F>(
    token: &BranchToken,
    release: F,
) -> Result<BranchRelease, BranchError>
where
    F: Future<Output = Result<BranchRelease, BranchError>>,
{
    let span = tracing::debug_span!(
        "branches.release",
        master_key = token.master_key(),
        invocation = token.invocation(),
        branch = token.branch(),
        outcome = Empty,
    );
    let result = release.instrument(span.clone()).await;
    let outcome = match &result {
        Ok(outcome) => outcome.as_str(),
        Err(_) => "failed",
    };
    span.record("outcome", outcome);
    tracing::debug!(parent: &span, outcome, "branch release");
    metrics::counter!(RELEASES_TOTAL, "outcome" => outcome).increment(1);
    result
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
