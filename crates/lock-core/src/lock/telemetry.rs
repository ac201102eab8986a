//! The lock's `tracing` spans and `metrics`, recorded for every implementation.
//!
//! The provided [`acquire_with`](crate::lock::DistributedLock::acquire_with) and
//! [`LockHandle`](crate::lock::LockHandle) record acquisitions and releases, and backends with a
//! watchdog record renewals. Metrics go through the [`metrics`](https://docs.rs/metrics) facade
//! to the recorder the service installed, and cost a few atomic loads without one.
//!
//! No metric has the lock key as a label, as keys are unbounded. Spans and events carry it.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`ACQUISITIONS_TOTAL`] | counter | `outcome` |
//! | [`FAIL_CLOSED_TOTAL`] | counter | `reason` |
//! | [`WAIT_SECONDS`] | histogram | `outcome` |
//! | [`RELEASES_TOTAL`] | counter | `outcome` |
//! | [`HOLD_SECONDS`] | histogram | none |
//! | [`LOST_LEASES_TOTAL`] | counter | `reason` |
//! | [`RENEWALS_TOTAL`] | counter | `outcome` |
//! | [`UNGUARDED_RUNS_TOTAL`] | counter | `reason` |
//!
//! Spans are at `DEBUG`: `lock.acquire`, `lock.release`, and `lock.renew` of a watchdog. Each
//! ends with a `DEBUG` event. An acquisition that fails closed for another reason than
//! contention logs an `INFO` event. `docs/observability.md` lists every field, event and
//! suggested alert.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;
use tracing::field::Empty;

use crate::error::LockError;
use crate::lock::lease::Lease;
use crate::lock::options::AcquireOptions;
use crate::lock::status::{LostReason, ReleaseOutcome, UnguardedReason};
use crate::metric::metric_name;
use crate::outage::Outage;

/// Counter of acquisitions by `outcome`: `granted`, `reentered`, `cancelled`,
/// `invalid_argument` or an [`AcquireFailure::reason`](crate::AcquireFailure::reason), `disabled`
/// or `shut_down`.
pub const ACQUISITIONS_TOTAL: &str = metric_name!("lock", "acquisitions_total");
/// Counter of acquisitions not granted by `reason`, the outcomes of [`ACQUISITIONS_TOTAL`] but
/// `granted`, `reentered`, `invalid_argument` and `cancelled`. Fail-open call sites count too.
pub const FAIL_CLOSED_TOTAL: &str = metric_name!("lock", "fail_closed_total");
/// Histogram of seconds from an acquisition's call to its grant or error, by `outcome`. Not
/// recorded for `reentered`, `invalid_argument` and `cancelled`.
pub const WAIT_SECONDS: &str = metric_name!("lock", "wait_seconds");
/// Counter of releases by `outcome`: `released`, `not_held`, `failed` or `dropped`. Re-entrant
/// handles are not counted.
pub const RELEASES_TOTAL: &str = metric_name!("lock", "releases_total");
/// Histogram of seconds from a grant to its release or drop.
pub const HOLD_SECONDS: &str = metric_name!("lock", "hold_seconds");
/// Counter of leases lost while held, by `reason`: `expired`, `not_owner`, `scope_ended` or
/// `shut_down`, as [`LostReason`].
pub const LOST_LEASES_TOTAL: &str = metric_name!("lock", "lost_leases_total");
/// Counter of a watchdog's renewals of single leases by `outcome`: `renewed`, `lost` or
/// `failed`. Recorded by backends.
pub const RENEWALS_TOTAL: &str = metric_name!("lock", "renewals_total");

/// Counter of fail-open critical sections run without the lock, by `reason`, an
/// [`UnguardedReason`]: `lock_disabled`, `wait_time_elapsed` or
/// `backend_unavailable`.
pub const UNGUARDED_RUNS_TOTAL: &str = metric_name!("lock", "unguarded_runs_total");

/// Registers at 0 the series that the suggested alerts count with `increase()`,
/// [`LOST_LEASES_TOTAL`] and [`UNGUARDED_RUNS_TOTAL`], so that an event after the first scrape is
/// a rise. The backends of this workspace call it when built; a custom backend should too.
pub fn register_series() {
    for reason in LOST_REASONS {
        metrics::counter!(LOST_LEASES_TOTAL, "reason" => lost_label(reason)).increment(0);
    }
    for reason in UnguardedReason::ALL {
        metrics::counter!(UNGUARDED_RUNS_TOTAL, "reason" => reason.as_str()).increment(0);
    }
}

/// `watchdog` or `fixed`: the `lease` field of `lock.acquire`.
pub(crate) fn lease_mode(lease: Lease) -> &'static str {
    match lease {
        Lease::Watchdog => "watchdog",
        Lease::Fixed(_) => "fixed",
    }
}

/// What the acquisition telemetry reads of a granted handle (implemented by
/// [`LockHandle`](crate::lock::LockHandle)).
pub(crate) trait Grant {
    fn fencing_token(&self) -> u64;
    fn is_reentrant(&self) -> bool;
    fn hold_count(&self) -> usize;
}

/// The `outcome` of an acquisition's result.
fn acquire_outcome(result: &Result<impl Grant, LockError>) -> &'static str {
    match result {
        Ok(handle) if handle.is_reentrant() => "reentered",
        Ok(_) => "granted",
        Err(LockError::AcquisitionFailed { reason, .. }) => reason.reason(),
        Err(LockError::Disabled { .. }) => "disabled",
        Err(LockError::ShutDown { .. }) => "shut_down",
        Err(LockError::InvalidKey { .. } | LockError::InvalidArgument { .. }) => "invalid_argument",
        // Not returned by an acquisition; counted under a name of its own should one appear.
        Err(LockError::ReleaseFailed { .. }) => "release_failed",
    }
}

/// Records `cancelled` if the acquisition future is dropped before it completes.
struct CancelGuard {
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            metrics::counter!(ACQUISITIONS_TOTAL, "outcome" => "cancelled").increment(1);
        }
    }
}

/// Runs `attempt` (validation, re-entry, the backend's acquisition) inside a `lock.acquire` span
/// and records its outcome: span fields, metrics, and an `INFO` event for the first acquisition
/// of an outage that failed closed for another reason than contention (`DEBUG` for the others).
pub(crate) async fn acquire<F, G>(
    key: &str,
    options: AcquireOptions,
    attempt: F,
) -> Result<G, LockError>
where
    F: Future<Output = Result<G, LockError>>,
    G: Grant,
{
    let span = tracing::debug_span!(
        "lock.acquire",
        lock_key = key,
        lease = lease_mode(options.lease()),
        fair = options.is_fair(),
        wait_ms = Empty,
        outcome = Empty,
        waited_ms = Empty,
        fencing_token = Empty,
    );
    if let Some(wait) = options.wait_override() {
        span.record("wait_ms", millis(wait));
    }
    let started = Instant::now();
    let mut guard = CancelGuard { armed: true };
    let result = attempt.instrument(span.clone()).await;
    guard.armed = false;
    let waited = started.elapsed();
    let outcome = acquire_outcome(&result);
    span.record("outcome", outcome);
    span.record("waited_ms", millis(waited));
    metrics::counter!(ACQUISITIONS_TOTAL, "outcome" => outcome).increment(1);
    match &result {
        // Events, not only span fields: a plain `fmt` subscriber prints a span's fields only on
        // the events inside it (or with `FmtSpan::CLOSE`), so the normal path would be silent.
        Ok(handle) if handle.is_reentrant() => {
            tracing::debug!(
                parent: &span,
                lock_key = key,
                fencing_token = handle.fencing_token(),
                hold_count = handle.hold_count(),
                outcome,
                "lock re-entered"
            );
        }
        Ok(handle) => {
            span.record("fencing_token", handle.fencing_token());
            metrics::histogram!(WAIT_SECONDS, "outcome" => outcome).record(waited.as_secs_f64());
            tracing::debug!(
                parent: &span,
                lock_key = key,
                fencing_token = handle.fencing_token(),
                outcome,
                waited_ms = millis(waited),
                "lock granted"
            );
        }
        Err(LockError::InvalidKey { .. } | LockError::InvalidArgument { .. }) => {}
        Err(error) => {
            metrics::histogram!(WAIT_SECONDS, "outcome" => outcome).record(waited.as_secs_f64());
            metrics::counter!(FAIL_CLOSED_TOTAL, "reason" => outcome).increment(1);
            let _entered = span.enter();
            // Contention is the lock doing its job; an outage is not, and is logged once.
            let contention =
                CONTENDED.contains(&outcome) || matches!(outcome, "disabled" | "shut_down");
            let first = !contention
                && OUTAGE.note(true) == Some(crate::outage::Change::Started { loud: true });
            if first {
                tracing::info!(
                    lock_key = key,
                    reason = outcome,
                    %error,
                    "lock not granted: failing closed"
                );
            } else {
                tracing::debug!(
                    lock_key = key,
                    reason = outcome,
                    %error,
                    "lock not granted: failing closed"
                );
            }
        }
    }
    let answered = match &result {
        Ok(handle) => !handle.is_reentrant(),
        Err(_) => CONTENDED.contains(&outcome),
    };
    if answered {
        OUTAGE.note(false);
    }
    result
}

/// The outcomes of an acquisition refused because another holds the key: Redis answered.
const CONTENDED: [&str; 2] = ["held_by_another_owner", "waiters_ahead"];

/// Acquisitions failing closed for a reason other than contention, in this process: the first
/// of an outage is logged at `INFO`, unless one was within a minute.
static OUTAGE: Outage = Outage::new();

/// Runs a release inside a `lock.release` span and records its outcome and the hold time.
pub(crate) async fn release<F>(
    key: &str,
    fencing_token: u64,
    held_for: std::time::Duration,
    release: F,
) -> Result<ReleaseOutcome, LockError>
where
    F: Future<Output = Result<ReleaseOutcome, LockError>>,
{
    let span = tracing::debug_span!(
        "lock.release",
        lock_key = key,
        outcome = Empty,
        held_ms = millis(held_for),
    );
    let result = release.instrument(span.clone()).await;
    let outcome = match &result {
        Ok(ReleaseOutcome::Released) => "released",
        Ok(ReleaseOutcome::NotHeld) => "not_held",
        Err(_) => "failed",
    };
    span.record("outcome", outcome);
    let message = match outcome {
        "released" => "lock released",
        "not_held" => "lock release found the lease already ended",
        _ => "lock release not confirmed; the lease ends at its TTL",
    };
    tracing::debug!(
        parent: &span,
        lock_key = key,
        fencing_token,
        outcome,
        held_ms = millis(held_for),
        "{message}"
    );
    metrics::counter!(RELEASES_TOTAL, "outcome" => outcome).increment(1);
    metrics::histogram!(HOLD_SECONDS).record(held_for.as_secs_f64());
    result
}

/// Records a handle dropped while it still had its release: released in the background.
pub(crate) fn dropped(key: &str, held_for: std::time::Duration) {
    tracing::debug!(
        lock_key = key,
        held_ms = millis(held_for),
        "lock handle dropped; releasing in the background"
    );
    metrics::counter!(RELEASES_TOTAL, "outcome" => "dropped").increment(1);
    metrics::histogram!(HOLD_SECONDS).record(held_for.as_secs_f64());
}

/// Every [`LostReason`], for [`register_series`].
const LOST_REASONS: [LostReason; 4] = [
    LostReason::Expired,
    LostReason::NotOwner,
    LostReason::ScopeEnded,
    LostReason::ShutDown,
];

/// The `reason` label of [`LOST_LEASES_TOTAL`].
fn lost_label(reason: LostReason) -> &'static str {
    match reason {
        LostReason::Expired => "expired",
        LostReason::NotOwner => "not_owner",
        LostReason::ScopeEnded => "scope_ended",
        LostReason::ShutDown => "shut_down",
    }
}

/// Records a lease of `holder` (key, owner token) that turned from held to lost: a `WARN`
/// when the holder did not end it itself.
pub(crate) fn lost(reason: LostReason, holder: Option<&(String, String)>) {
    let label = lost_label(reason);
    metrics::counter!(LOST_LEASES_TOTAL, "reason" => label).increment(1);
    let (key, owner) = holder.map_or(("", ""), |(k, o)| (k.as_str(), o.as_str()));
    match reason {
        LostReason::Expired | LostReason::NotOwner => tracing::warn!(
            lock_key = key,
            owner,
            reason = label,
            "lease lost: {reason}; another holder may now be granted the key, and the holder is told via lost()"
        ),
        LostReason::ScopeEnded | LostReason::ShutDown => {
            tracing::debug!(
                lock_key = key,
                owner,
                reason = label,
                "lease ended: {reason}"
            );
        }
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
