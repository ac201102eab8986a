//! The watchdog: renews every watchdog lease of one client, every third of the watchdog timeout,
//! in batched script calls — not one call per lock per renewal (one per hash slot on a Cluster).
//! Each lease is due a renewal period after its last renewal was sent; a round renews the
//! leases due then (and those due soon after, so they share calls), concurrently with later
//! rounds.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::prelude::*;
use fred::types::{ClusterHash, Key};
use futures::StreamExt as _;
use lock_core::telemetry::RENEWALS_TOTAL;
use lock_core::{LeaseState, LostReason};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::inner::Inner;

/// Keys per renewal call: bounds the time one script holds the Redis thread (about 1–1.5 µs a
/// key, so under 1 ms a call; see docs/performance.md, "Watchdog capacity").
pub const RENEW_BATCH: usize = 500;

/// How often a watchdog lease is renewed: every third of the watchdog timeout, so a lease
/// survives two renewals in a row that do not get through.
pub fn renewal_period(watchdog_timeout: Duration) -> Duration {
    watchdog_timeout / 3
}

/// What a client's watchdog has done since it started, from
/// [`RedisLock::watchdog_stats`](crate::RedisLock::watchdog_stats).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use lock_redis::{RedisLock, RedisLockConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let config = RedisLockConfig::new("redis://redis.internal:6379")
///     .watchdog_timeout(Duration::from_secs(30));
/// let lock = RedisLock::connect(config).await?;
/// // … later, e.g. from a debug endpoint:
/// let stats = lock.watchdog_stats();
/// println!(
///     "{} renewal rounds, {} renewal calls, last round {:?}, longest {:?}",
///     stats.ticks, stats.renewal_calls, stats.last_tick, stats.longest_tick
/// );
/// if stats.longest_tick > Duration::from_secs(10) / 2 {
///     eprintln!("renewals take half of a renewal interval: check Redis latency");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchdogStats {
    /// Renewal rounds so far. A round renews the leases due at one wake-up of the watchdog and
    /// those due within a renewal period after (they share its calls), so a client's leases
    /// are renewed in about one round per renewal period.
    pub ticks: u64,
    /// Renewal script calls sent: one per [`RENEW_BATCH`] keys per round (per hash slot on a
    /// Cluster).
    pub renewal_calls: u64,
    /// Wall time of the last round, from taking its leases until every renewal reply (and
    /// `WAIT`, with min-replicas) was in. Rounds can overlap: a slow one does not hold up the
    /// next.
    pub last_tick: Duration,
    /// The longest round so far. Above a third of the renewal period the watchdog logs a
    /// `WARN` (at most once a minute).
    pub longest_tick: Duration,
}

/// Wake-ups of the watchdog per renewal period: a lease's renewal starts at most this fraction
/// of a period after it is due (a tenth: 1 s at the default 30 s watchdog timeout).
const WAKES_PER_PERIOD: u32 = 10;

/// A round slower than a third of the renewal period is logged at `WARN`: at that load a
/// lease has about two periods of slack left before its TTL runs out.
const SLOW_ROUND_DIVISOR: u32 = 3;

/// After a slow-round warning, the next one waits this long: a Redis that stays slow logs
/// once a minute, not once a round.
const SLOW_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// The leases the watchdog renews.
///
/// Each lease is renewed on its own schedule — a period after its last renewal was sent — not
/// on one tick for all: a slow batch (a paused shard, a slow replica) delays only its own
/// leases, and a round that runs long does not hold up the next one.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    leases: Mutex<HashMap<u64, Renewal>>,
    next_id: AtomicU64,
    stats: Mutex<WatchdogStats>,
    /// When the last slow-round warning was logged.
    warned_slow: Mutex<Option<Instant>>,
}

/// One lease's renewal entry. The key and the expected grant are reference-counted bytes:
/// a round clones them into its script call without copying.
#[derive(Debug)]
struct Renewal {
    key: Key,
    /// [`held_prefix`](crate::scripts::held_prefix): what renew.lua expects at the start of the
    /// value.
    grant: Str,
    state: LeaseState,
    /// When the next renewal is due; `None` while one is in flight, so a slow call is not sent
    /// again on top of itself.
    due: Option<Instant>,
}

/// A lease taken into a round.
#[derive(Debug)]
struct Due {
    id: u64,
    key: Key,
    grant: Str,
    state: LeaseState,
}

impl Registry {
    fn leases(&self) -> MutexGuard<'_, HashMap<u64, Renewal>> {
        // Inserts, removes and field stores only; a panic cannot leave the map inconsistent.
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts renewing the lease `owner` was granted with fencing token `token` at
    /// `redis_key`; its first renewal is due a renewal `period` from now. Returns the id to
    /// stop it with.
    pub(crate) fn register(
        &self,
        redis_key: String,
        token: u64,
        owner: &str,
        state: LeaseState,
        period: Duration,
    ) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let renewal = Renewal {
            key: Key::from(redis_key),
            grant: Str::from(crate::scripts::held_prefix(token, owner)),
            state,
            due: Some(Instant::now() + period),
        };
        self.leases().insert(id, renewal);
        id
    }

    /// Stops renewing a lease at once (called on release and drop).
    pub(crate) fn unregister(&self, id: u64) {
        self.leases().remove(&id);
    }

    /// Number of leases being renewed.
    pub(crate) fn len(&self) -> usize {
        self.leases().len()
    }

    pub(crate) fn stats(&self) -> WatchdogStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record_round(&self, calls: usize, took: Duration) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.ticks += 1;
        stats.renewal_calls += calls as u64;
        stats.last_tick = took;
        stats.longest_tick = stats.longest_tick.max(took);
    }

    /// Whether a slow round may be warned about now (at most once per
    /// [`SLOW_WARNING_INTERVAL`]).
    fn may_warn_slow(&self, now: Instant) -> bool {
        let mut warned = self.warned_slow.lock().unwrap_or_else(|p| p.into_inner());
        if warned.is_some_and(|at| now < at + SLOW_WARNING_INTERVAL) {
            return false;
        }
        *warned = Some(now);
        true
    }

    /// The leases of the next round, marked in flight: none unless one is due at `now`, and
    /// then every lease due within a renewal `period` of it. The early ones ride along so
    /// that a client's leases share one round (and its calls) per period, as leases granted
    /// at different times would otherwise each start rounds of their own; a lease whose
    /// renewal was slow rejoins the others at the next round. Leases released or lost since
    /// they were registered are dropped here.
    fn take_due(&self, now: Instant, period: Duration) -> Vec<Due> {
        let mut leases = self.leases();
        // Compares instants only: this runs every wake-up, over every lease.
        if !leases.values().any(|r| r.due.is_some_and(|due| due <= now)) {
            return Vec::new();
        }
        let until = now + period;
        let mut taken = Vec::new();
        leases.retain(|id, r| {
            if r.due.is_none_or(|due| due > until) {
                return true;
            }
            if !r.state.is_held() {
                return false;
            }
            r.due = None;
            taken.push(Due {
                id: *id,
                key: r.key.clone(),
                grant: r.grant.clone(),
                state: r.state.clone(),
            });
            true
        });
        taken
    }

    /// The renewal of `ids` sent at `sent` has its answer: their next one is due a `period`
    /// after it was sent (whatever the answer; a failed one keeps the old local deadline).
    fn answered(&self, ids: impl Iterator<Item = u64>, sent: Instant, period: Duration) {
        let mut leases = self.leases();
        for id in ids {
            if let Some(renewal) = leases.get_mut(&id) {
                renewal.due = Some(sent + period);
            }
        }
    }
}

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
/// `platform_lock_renewals_total{outcome}`; warns when it took more than a third of `period`.
async fn renew_round(inner: &Inner, leases: Vec<Due>, period: Duration) {
    let started = Instant::now();
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
    if took > period / SLOW_ROUND_DIVISOR && inner.watchdog.may_warn_slow(Instant::now()) {
        tracing::warn!(
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
    let clustered = inner.client.is_clustered();
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
    inner
        .watchdog
        .answered(batch.iter().map(|lease| lease.id), sent, period);
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
        .evalsha_with_reload(&inner.client, keys, args)
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
            inner.follow_if_demoted(&error);
            tracing::warn!(%error, leases = batch.len(), "watchdog renewal failed");
            return failed;
        }
    }
    // With min-replicas, a renewal counts only once the replicas have it too: a failover
    // promotes a replica, and its copy of the key expires at the last renewal it received. An
    // unconfirmed renewal leaves the old local deadline, so lost() fires before that copy can
    // expire and be granted to someone else.
    let replicated = renewal_replicated(inner, slot).await;
    let valid_until = sent + ttl - crate::safety_margin(ttl);
    let mut result = Renewed::default();
    for (lease, lost) in batch.iter().zip(not_renewed) {
        if lost && !lease.state.is_held() {
            // Released (or already lost) locally while the round was in flight: the key is
            // tombstoned or kept for its minimum hold, which is no loss to report.
            inner.watchdog.unregister(lease.id);
        } else if lost {
            result.lost += 1;
            lease.state.mark_lost(LostReason::NotOwner);
            tracing::warn!(
                redis_key = %String::from_utf8_lossy(lease.key.as_bytes()),
                owner = lease.grant.splitn(3, '|').nth(2).unwrap_or_default(),
                "watchdog found the lease gone, taken over or without a TTL; the holder is told via lost()"
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

/// Whether the renewal just sent is on `min-replicas` replicas (`WAIT` on the same connection,
/// to the node serving `slot`); `true` without `min-replicas`.
async fn renewal_replicated(inner: &Inner, slot: u16) -> bool {
    let config = &inner.config;
    if config.min_replicas == 0 {
        return true;
    }
    let options = Options {
        cluster_hash: Some(ClusterHash::Custom(slot)),
        timeout: Some(config.replica_sync_timeout + config.command_timeout),
        ..Options::default()
    };
    let timeout_ms = i64::try_from(config.replica_sync_timeout.as_millis()).unwrap_or(i64::MAX);
    let acknowledged: Result<i64, Error> = inner
        .client
        .with_options(&options)
        .wait(i64::from(config.min_replicas), timeout_ms)
        .await;
    match acknowledged {
        Ok(n) if n >= i64::from(config.min_replicas) => true,
        Ok(n) => {
            tracing::warn!(
                required = config.min_replicas,
                acknowledged = n,
                "watchdog renewal not acknowledged by enough replicas; the leases keep their old deadline"
            );
            false
        }
        Err(error) => {
            tracing::warn!(%error, "WAIT after a watchdog renewal failed; the leases keep their old deadline");
            false
        }
    }
}
