//! What the lock tells operators: `tracing` spans and the `metrics` it records.
//!
//! Nothing here needs configuring. Spans and events go to whatever `tracing` subscriber the
//! service installed; metrics go through the [`metrics`](https://docs.rs/metrics) facade to
//! whatever recorder (Prometheus exporter, StatsD, …) the service installed — without one they
//! cost a few atomic loads. This crate depends on no exporter.
//!
//! Every implementation of [`DistributedLock`](crate::lock::DistributedLock) gets the acquisition and
//! release telemetry, because it is recorded by the provided
//! [`acquire_with`](crate::lock::DistributedLock::acquire_with) and by [`LockHandle`](crate::lock::LockHandle)
//! themselves; backends add their own (the Redis watchdog records renewals).
//!
//! **No metric carries the lock key as a label**: keys are unbounded (`bill-run:2026-11`,
//! `cdc:ticket-4711`, …) and would explode a time-series database. The key is on the spans and
//! log events instead.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`ACQUISITIONS_TOTAL`] | counter | `outcome` |
//! | [`FAIL_CLOSED_TOTAL`] | counter | `reason` |
//! | [`WAIT_SECONDS`] | histogram | `outcome` |
//! | [`RELEASES_TOTAL`] | counter | `outcome` |
//! | [`HOLD_SECONDS`] | histogram | — |
//! | [`LOST_LEASES_TOTAL`] | counter | `reason` |
//! | [`RENEWALS_TOTAL`] | counter | `outcome` (recorded by backends with a watchdog) |
//!
//! Spans are at `DEBUG` level (`lock.acquire`, `lock.release`; the Redis watchdog adds
//! `lock.renew`), so an `INFO` subscriber pays nothing for them. Each also ends with a `DEBUG`
//! event (`lock granted`, `lock released`, `watchdog renewed leases`, …) so that a plain `fmt`
//! subscriber, which prints spans only around events, shows the normal path too; an
//! acquisition that fails closed for a reason other than contention logs one `INFO` event, a
//! lost lease a `WARN`.
//! `docs/observability.md` lists every field and the suggested alerts.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;
use tracing::field::Empty;

use crate::error::LockError;
use crate::lock::lease::Lease;
use crate::lock::options::AcquireOptions;
use crate::lock::status::{LostReason, ReleaseOutcome};

/// Counter: acquisitions by `outcome`: `granted`, `reentered` (a nested acquisition inside a
/// `with_lock` scope; no backend call), `held_by_another_owner`, `waiters_ahead`,
/// `backend_unavailable`, `replication_unconfirmed`, `lease_expired_before_grant`, `disabled`,
/// `invalid_argument`, or `cancelled` (the caller dropped the acquire future).
pub const ACQUISITIONS_TOTAL: &str = "platform_lock_acquisitions_total";
/// Counter: acquisitions that failed closed — not granted, for any `reason` (the outcomes of
/// [`ACQUISITIONS_TOTAL`] other than `granted`, `reentered`, `invalid_argument`, `cancelled`).
/// Fail-open call sites count here too: their acquisition failed all the same.
pub const FAIL_CLOSED_TOTAL: &str = "platform_lock_fail_closed_total";
/// Histogram (seconds): how long an acquisition took, from the call to the grant or the error,
/// by `outcome` as in [`ACQUISITIONS_TOTAL`] (not recorded for `reentered`, `invalid_argument`
/// and `cancelled`).
pub const WAIT_SECONDS: &str = "platform_lock_wait_seconds";
/// Counter: releases by `outcome`: `released`, `not_held` (the lease had already ended),
/// `failed` (not confirmed; the lease ends at its TTL) or `dropped` (the handle was dropped; a
/// release was started in the background). Re-entrant handles are not counted.
pub const RELEASES_TOTAL: &str = "platform_lock_releases_total";
/// Histogram (seconds): how long a lease was held, from the grant to its release or drop.
pub const HOLD_SECONDS: &str = "platform_lock_hold_seconds";
/// Counter: leases lost while held, by `reason`: `expired` (the local deadline passed without a
/// confirmed renewal; counted when the process notices it), `not_owner` (a renewal found the
/// key gone or taken), `scope_ended` (a re-entrant handle outlived its section) or `shut_down`
/// (the client was shut down while the lease was held, and released it).
pub const LOST_LEASES_TOTAL: &str = "platform_lock_lost_leases_total";
/// Counter: watchdog renewals of single leases by `outcome`: `renewed`, `lost` (the key was gone
/// or taken over) or `failed` (the renewal call failed or was not acknowledged by enough
/// replicas; the lease keeps its old deadline). Recorded by backends with a watchdog.
pub const RENEWALS_TOTAL: &str = "platform_lock_renewals_total";

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
/// and records its outcome: span fields, metrics, and an `INFO` event for an acquisition that
/// failed closed for another reason than contention.
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
    if let Some(wait) = options.wait_time() {
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
            match outcome {
                // Contention is the lock doing its job; an outage is not.
                "held_by_another_owner" | "waiters_ahead" | "disabled" | "shut_down" => {
                    tracing::debug!(
                        lock_key = key,
                        reason = outcome,
                        "lock not granted: failing closed"
                    )
                }
                _ => tracing::info!(
                    lock_key = key,
                    reason = outcome,
                    %error,
                    "lock not granted: failing closed"
                ),
            }
        }
    }
    result
}

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

/// Records a lease that turned from held to lost.
pub(crate) fn lost(reason: LostReason) {
    let reason = match reason {
        LostReason::Expired => "expired",
        LostReason::NotOwner => "not_owner",
        LostReason::ScopeEnded => "scope_ended",
        LostReason::ShutDown => "shut_down",
    };
    metrics::counter!(LOST_LEASES_TOTAL, "reason" => reason).increment(1);
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
