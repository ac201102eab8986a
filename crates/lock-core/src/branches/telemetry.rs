//! What the master/sub locks tell operators: `tracing` spans and `metrics`, like the lock's
//! ([`crate::lock::telemetry`]). Recorded by the generic orchestration and the provided
//! [`Branches::release_branch`](crate::branches::Branches::release_branch), so every backend
//! gets them. No metric carries a key or branch id as a label (unbounded); spans and events do.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`BRANCH_REGISTRATIONS_TOTAL`] | counter | `outcome` |
//! | [`BRANCH_RELEASES_TOTAL`] | counter | `outcome` |
//! | [`MASTER_WAITS_TOTAL`] | counter | `outcome` |
//! | [`MASTER_WAIT_SECONDS`] | histogram | `outcome` |
//!
//! Spans are at `DEBUG`: `branches.master` (fields `master_key`, `invocation`, `outcome`,
//! `missing`, `waited_ms`) around a whole invocation, `branches.release` around a consumer's
//! release. A registration that fails open logs one `WARN` (an `INFO` naming where the backend
//! was switched off, when it is disabled); a wait that ends without every branch released logs
//! a `WARN` too.

use std::future::Future;
use std::time::Duration;

use tracing::Instrument;
use tracing::field::Empty;

use crate::branches::error::BranchError;
use crate::branches::outcome::{BranchRelease, BranchesOutcome};
use crate::branches::token::BranchToken;

/// Counter: registrations by `outcome`: `registered` (confirmed, including repeats),
/// `unregistered` (failed open: the token is marked unregistered and the master does not wait
/// for it) or `sealed` (after the block returned: refused).
pub const BRANCH_REGISTRATIONS_TOTAL: &str = "platform_lock_branch_registrations_total";
/// Counter: consumers' releases by `outcome`: `released`, `already_released`,
/// `not_registered`, `unknown` (see [`BranchRelease`]) or `failed` (not confirmed).
pub const BRANCH_RELEASES_TOTAL: &str = "platform_lock_branch_releases_total";
/// Counter: master waits by `outcome`: `all_released`, `timed_out`, `lease_lost` or
/// `unconfirmed` (see [`BranchesOutcome`]).
pub const MASTER_WAITS_TOTAL: &str = "platform_lock_master_waits_total";
/// Histogram (seconds): how long a master waited for its branches after its block returned, by
/// `outcome` as in [`MASTER_WAITS_TOTAL`].
pub const MASTER_WAIT_SECONDS: &str = "platform_lock_master_wait_seconds";

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
    metrics::counter!(BRANCH_REGISTRATIONS_TOTAL, "outcome" => outcome).increment(1);
}

/// Records how a master's wait ended, on its span and in the metrics, and warns when not every
/// branch was released.
pub(crate) fn master_done(
    span: &tracing::Span,
    master_key: &str,
    invocation: u64,
    outcome: &BranchesOutcome,
    waited: Duration,
) {
    let label = outcome.as_str();
    let missing = outcome.missing().join(",");
    span.record("outcome", label);
    span.record("missing", missing.as_str());
    span.record("waited_ms", millis(waited));
    metrics::counter!(MASTER_WAITS_TOTAL, "outcome" => label).increment(1);
    metrics::histogram!(MASTER_WAIT_SECONDS, "outcome" => label).record(waited.as_secs_f64());
    match outcome {
        BranchesOutcome::AllReleased => tracing::debug!(
            parent: span,
            master_key,
            invocation,
            waited_ms = millis(waited),
            "every branch of the master released"
        ),
        _ => tracing::warn!(
            parent: span,
            master_key,
            invocation,
            outcome = label,
            missing = %missing,
            waited_ms = millis(waited),
            "the master stopped waiting with branches not released"
        ),
    }
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
    metrics::counter!(BRANCH_RELEASES_TOTAL, "outcome" => outcome).increment(1);
    result
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
