//! The watchdog: renews every watchdog lease of one client, every third of the watchdog timeout,
//! in batched script calls — not one call per lock per renewal (one per hash slot on a Cluster).
//! Each lease is due a renewal period after its last renewal was sent; a round renews the
//! leases due then (and those due soon after, so they share calls), concurrently with later
//! rounds.

use std::collections::BTreeMap;
use std::sync::Weak;
use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, Key};
use futures::StreamExt as _;
use lock_core::lock::LostReason;
use lock_core::lock::telemetry::RENEWALS_TOTAL;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::lock::inner::Inner;
use crate::lock::registry::{Due, RENEW_BATCH};

/// Wake-ups of the watchdog per renewal period: a lease's renewal starts at most this fraction
/// of a period after it is due (a tenth: 1 s at the default 30 s watchdog timeout).
const WAKES_PER_PERIOD: u32 = 10;

/// A round slower than a third of the renewal period is logged at `WARN`: at that load a
/// lease has about two periods of slack left before its TTL runs out.
const SLOW_ROUND_DIVISOR: u32 = 3;

/// Runs until the client is dropped (the weak reference stops upgrading): wakes
/// [`WAKES_PER_PERIOD`] times per renewal `period` and starts a round when a lease is due.
/// Rounds run concurrently with later wake-ups, so one that is slow delays only its own leases.
pub(crate) async fn run(inner: Weak<Inner>, period: Duration) {
    let wake = period / WAKES_PER_PERIOD;
    let mut wakes = tokio::time::interval_at(Instant::now() + wake, wake);
    wakes.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut rounds = futures::stream::FuturesUnordered::new();
    loop {
        tokio::select! {
            _ = wakes.tick() => {
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                let due = inner.watchdog.take_due(Instant::now(), period);
                if !due.is_empty() {
                    rounds.push(async move { renew_round(&inner, due, period).await });
                }
            }
            Some(()) = rounds.next(), if !rounds.is_empty() => {}
        }
    }
}

/// Per-lease results of a renewal call: renewed, lost (key gone or taken), failed (call failed
/// or not acknowledged by enough replicas).
#[derive(Debug, Default, Clone, Copy)]
struct Renewed {
    renewed: u64,
    lost: u64,
    failed: u64,
}

/// One round: renews `leases`, [`RENEW_BATCH`] keys per call, in a `lock.renew` span
/// (`leases`, `renewed`, `lost`, `failed`), counting each lease in
/// `platform_lock_renewals_total{outcome}`; warns when it took more than a third of `period`
/// with no outage overlapping it.
async fn renew_round(inner: &Inner, leases: Vec<Due>, period: Duration) {
    let started = Instant::now();
    let errors_before = inner.core.health.errors();
    let count = leases.len();
    let span = tracing::debug_span!(
        "lock.renew",
        leases = count,
        renewed = tracing::field::Empty,
        lost = tracing::field::Empty,
        failed = tracing::field::Empty,
    );
    let totals = renew_leases(inner, leases, period)
        .instrument(span.clone())
        .await;
    span.record("renewed", totals.renewed);
    span.record("lost", totals.lost);
    span.record("failed", totals.failed);
    tracing::debug!(
        parent: &span,
        leases = count,
        renewed = totals.renewed,
        lost = totals.lost,
        failed = totals.failed,
        took_ms = started.elapsed().as_millis() as u64,
        "watchdog renewed leases"
    );
    for (outcome, n) in [
        ("renewed", totals.renewed),
        ("lost", totals.lost),
        ("failed", totals.failed),
    ] {
        if n > 0 {
            metrics::counter!(RENEWALS_TOTAL, "outcome" => outcome).increment(n);
        }
    }
    let took = started.elapsed();
    inner.watchdog.record_round(totals.calls, took);
    // Not when an outage overlapped the round: it is warned of already, and is not slowness.
    let health = &inner.core.health;
    if health.errors() == errors_before
        && health.last_error().is_none()
        && took > period / SLOW_ROUND_DIVISOR
        && inner.watchdog.may_warn_slow(Instant::now())
    {
        tracing::warn!(
            redis = %inner.core.namespace,
            leases = count,
            calls = totals.calls,
            elapsed_ms = took.as_millis() as u64,
            renewal_period_ms = period.as_millis() as u64,
            "a watchdog renewal round took more than a third of the renewal period; leases are lost if renewals keep slowing down: check Redis latency and CPU, and the watchdog capacity in docs/performance.md"
        );
    }
}

struct Totals {
    renewed: u64,
    lost: u64,
    failed: u64,
    calls: usize,
}

async fn renew_leases(inner: &Inner, leases: Vec<Due>, period: Duration) -> Totals {
    let ttl = inner.config.watchdog_timeout;
    // A script may only touch keys of one hash slot on a Cluster: one call per slot there, one
    // call per batch of any keys on a single server.
    let mut groups: BTreeMap<u16, Vec<Due>> = BTreeMap::new();
    let clustered = inner.core.client.is_clustered();
    for lease in leases {
        let slot = if clustered {
            fred::util::redis_keyslot(lease.key.as_bytes())
        } else {
            0
        };
        groups.entry(slot).or_default().push(lease);
    }
    // All batches at once: on a Cluster each slot's renewal (and its WAIT with min-replicas)
    // goes to that slot's master, and a shard whose replica stalls must not hold up the
    // renewals of other shards past their deadline. Batches to one node still queue on its
    // connection, in order.
    let renewals: Vec<_> = groups
        .iter()
        .flat_map(|(slot, group)| {
            group
                .chunks(RENEW_BATCH)
                .map(move |batch| renew_batch(inner, *slot, batch, ttl, period))
        })
        .collect();
    let calls = renewals.len();
    let results = futures::future::join_all(renewals).await;
    let mut totals = Totals {
        renewed: 0,
        lost: 0,
        failed: 0,
        calls,
    };
    for r in results {
        totals.renewed += r.renewed;
        totals.lost += r.lost;
        totals.failed += r.failed;
    }
    totals
}

/// Renews one batch of keys (all in `slot` on a Cluster) with one script call.
async fn renew_batch(
    inner: &Inner,
    slot: u16,
    batch: &[Due],
    ttl: Duration,
    period: Duration,
) -> Renewed {
    let sent = Instant::now();
    let renewed = renew_batch_call(inner, slot, batch, ttl, sent).await;
    // A failed renewal is tried again at the next wake-up, not a period later: the lease then
    // survives any outage that ends before its local deadline.
    inner.watchdog.answered(
        batch.iter().map(|lease| lease.id),
        sent,
        period,
        renewed.failed > 0,
    );
    renewed
}

async fn renew_batch_call(
    inner: &Inner,
    slot: u16,
    batch: &[Due],
    ttl: Duration,
    sent: Instant,
) -> Renewed {
    let failed = Renewed {
        failed: batch.len() as u64,
        ..Renewed::default()
    };
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let keys: Vec<Key> = batch.iter().map(|lease| lease.key.clone()).collect();
    let mut args: Vec<Value> = Vec::with_capacity(batch.len() + 1);
    args.push(ttl_ms.into());
    args.extend(batch.iter().map(|lease| Value::from(lease.grant.clone())));
    let reply: Result<Vec<i64>, Error> = inner
        .scripts
        .renew
        .evalsha_with_reload(&inner.core.client, keys, args)
        .await;
    // The positions (1-based) of the keys not renewed.
    let mut not_renewed = vec![false; batch.len()];
    match reply {
        Ok(positions) => {
            for position in positions {
                match usize::try_from(position)
                    .ok()
                    .and_then(|p| p.checked_sub(1))
                {
                    Some(i) if i < batch.len() => not_renewed[i] = true,
                    _ => {
                        tracing::warn!(
                            leases = batch.len(),
                            position,
                            "watchdog renewal returned a position outside its batch; leases lapse unless the next renewal succeeds"
                        );
                        return failed;
                    }
                }
            }
        }
        // Leases keep their old local deadline; if no renewal gets through before it, the
        // holders' lost() fires.
        Err(error) => {
            renewal_failed(batch, inner.core.failure("watchdog renewal", error));
            return failed;
        }
    }
    // With min-replicas, a renewal counts only once the replicas have it too: a failover
    // promotes a replica, and its copy of the key expires at the last renewal it received. An
    // unconfirmed renewal leaves the old local deadline, so lost() fires before that copy can
    // expire and be granted to someone else.
    let replicated = match renewal_replicated(inner, slot).await {
        Ok(()) => true,
        Err(why) => {
            renewal_failed(batch, why);
            false
        }
    };
    let valid_until = sent + ttl - crate::lock::config::safety_margin(ttl);
    let mut result = Renewed::default();
    for (lease, lost) in batch.iter().zip(not_renewed) {
        if lost && !lease.state.is_held() {
            // Released (or already lost) locally while the round was in flight: the key is
            // tombstoned or kept for its minimum hold, which is no loss to report.
            inner.watchdog.unregister(lease.id);
        } else if lost {
            result.lost += 1;
            lease.state.mark_lost(LostReason::NotOwner);
            tracing::debug!(
                redis_key = %String::from_utf8_lossy(lease.key.as_bytes()),
                "watchdog found the lease gone, taken over or without a TTL"
            );
            inner.watchdog.unregister(lease.id);
        } else if !replicated {
            result.failed += 1;
        } else {
            result.renewed += 1;
            if !lease.state.confirm(valid_until) {
                // Released or lost locally since the round took it.
                inner.watchdog.unregister(lease.id);
            }
        }
    }
    result
}

/// Logs that the renewal of `batch` failed, `why`: at `WARN` once per lease and outage, at
/// `DEBUG` when every lease of the batch is a retry.
fn renewal_failed(batch: &[Due], why: impl std::fmt::Display) {
    let message = "watchdog renewal failed; the leases keep their deadlines and are tried again at the next wake-up, and a holder whose deadline passes is told via lost()";
    if batch.iter().all(|lease| lease.retrying) {
        tracing::debug!(error = %why, leases = batch.len(), "{message}");
    } else {
        tracing::warn!(error = %why, leases = batch.len(), "{message}");
    }
}

/// Checks that the renewal just sent is on `min-replicas` replicas (`WAIT` on the same
/// connection, to the node serving `slot`); `Ok` without `min-replicas`.
///
/// # Errors
/// Why it is not known to be: too few replicas acknowledged it, or the `WAIT` failed.
async fn renewal_replicated(inner: &Inner, slot: u16) -> Result<(), String> {
    let config = &inner.config;
    if config.min_replicas == 0 {
        return Ok(());
    }
    let options = Options {
        cluster_hash: Some(ClusterHash::Custom(slot)),
        timeout: Some(config.replica_sync_timeout + inner.core.command_timeout),
        ..Options::default()
    };
    let timeout_ms = i64::try_from(config.replica_sync_timeout.as_millis()).unwrap_or(i64::MAX);
    let acknowledged: Result<i64, Error> = inner
        .core
        .client
        .with_options(&options)
        .wait(i64::from(config.min_replicas), timeout_ms)
        .await;
    match acknowledged {
        Ok(n) if n >= i64::from(config.min_replicas) => Ok(()),
        Ok(n) => Err(format!(
            "acknowledged by {n} of the {} replicas required (min-replicas)",
            config.min_replicas
        )),
        Err(error) => Err(format!("WAIT after the renewal failed: {error}")),
    }
}
