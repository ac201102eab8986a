//! The watchdog: renews every watchdog lease of one client, every third of the watchdog timeout,
//! in batched script calls — not one call per lock per tick (one per hash slot on a Cluster).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;

use fred::prelude::*;
use fred::types::ClusterHash;
use lock_core::telemetry::RENEWALS_TOTAL;
use lock_core::{LeaseState, LostReason};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::inner::Inner;

/// Keys per renewal call: bounds the time one script holds the Redis thread (~a few µs a key).
pub const RENEW_BATCH: usize = 500;

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
///     "{} renewing ticks, {} renewal calls, last tick {:?}, longest {:?}",
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
    /// Ticks that had leases to renew (idle ticks are not counted).
    pub ticks: u64,
    /// Renewal script calls sent: one per [`RENEW_BATCH`] keys per tick (per hash slot on a
    /// Cluster).
    pub renewal_calls: u64,
    /// Wall time of the last counted tick, from its snapshot of the leases until every renewal
    /// reply (and `WAIT`, with min-replicas) was in.
    pub last_tick: Duration,
    /// The longest counted tick so far.
    pub longest_tick: Duration,
}

/// The leases the watchdog renews.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    leases: Mutex<HashMap<u64, Renewal>>,
    next_id: AtomicU64,
    stats: Mutex<WatchdogStats>,
}

#[derive(Debug, Clone)]
struct Renewal {
    redis_key: String,
    owner: String,
    state: LeaseState,
}

impl Registry {
    fn leases(&self) -> MutexGuard<'_, HashMap<u64, Renewal>> {
        // Inserts and removes only; a panic cannot leave the map inconsistent.
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts renewing a lease; returns the id to stop it with.
    pub(crate) fn register(&self, redis_key: String, owner: String, state: LeaseState) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.leases().insert(
            id,
            Renewal {
                redis_key,
                owner,
                state,
            },
        );
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

    fn record_tick(&self, calls: usize, took: Duration) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.ticks += 1;
        stats.renewal_calls += calls as u64;
        stats.last_tick = took;
        stats.longest_tick = stats.longest_tick.max(took);
    }

    fn snapshot(&self) -> Vec<(u64, Renewal)> {
        let mut leases = self.leases();
        // Leases released or lost since the last tick are dropped here.
        leases.retain(|_, r| r.state.is_held());
        leases.iter().map(|(id, r)| (*id, r.clone())).collect()
    }
}

/// Runs until the client is dropped (the weak reference stops upgrading).
pub(crate) async fn run(inner: Weak<Inner>, period: Duration) {
    let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        renew_all(&inner).await;
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

/// One tick: renews every registered lease, [`RENEW_BATCH`] keys per call, in a `lock.renew`
/// span (`leases`, `renewed`, `lost`, `failed`), counting each lease in
/// `platform_lock_renewals_total{outcome}`.
async fn renew_all(inner: &Inner) {
    let started = Instant::now();
    let leases = inner.watchdog.snapshot();
    if leases.is_empty() {
        return;
    }
    let span = tracing::debug_span!(
        "lock.renew",
        leases = leases.len(),
        renewed = tracing::field::Empty,
        lost = tracing::field::Empty,
        failed = tracing::field::Empty,
    );
    let totals = renew_leases(inner, leases).instrument(span.clone()).await;
    span.record("renewed", totals.renewed);
    span.record("lost", totals.lost);
    span.record("failed", totals.failed);
    tracing::debug!(
        parent: &span,
        leases = totals.renewed + totals.lost + totals.failed,
        renewed = totals.renewed,
        lost = totals.lost,
        failed = totals.failed,
        took_ms = started.elapsed().as_millis() as u64,
        "watchdog renewed leases"
    );
    for (outcome, count) in [
        ("renewed", totals.renewed),
        ("lost", totals.lost),
        ("failed", totals.failed),
    ] {
        if count > 0 {
            metrics::counter!(RENEWALS_TOTAL, "outcome" => outcome).increment(count);
        }
    }
    inner.watchdog.record_tick(totals.calls, started.elapsed());
}

struct Totals {
    renewed: u64,
    lost: u64,
    failed: u64,
    calls: usize,
}

async fn renew_leases(inner: &Inner, leases: Vec<(u64, Renewal)>) -> Totals {
    let ttl = inner.config.watchdog_timeout;
    // A script may only touch keys of one hash slot on a Cluster: one call per slot there, one
    // call per batch of any keys on a single server.
    let mut groups: BTreeMap<u16, Vec<(u64, Renewal)>> = BTreeMap::new();
    let clustered = inner.client.is_clustered();
    for lease in leases {
        let slot = if clustered {
            fred::util::redis_keyslot(lease.1.redis_key.as_bytes())
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
                .map(move |batch| renew_batch(inner, *slot, batch, ttl))
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
async fn renew_batch(inner: &Inner, slot: u16, batch: &[(u64, Renewal)], ttl: Duration) -> Renewed {
    let failed = Renewed {
        failed: batch.len() as u64,
        ..Renewed::default()
    };
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let keys: Vec<&str> = batch.iter().map(|(_, r)| r.redis_key.as_str()).collect();
    let mut args: Vec<Value> = Vec::with_capacity(batch.len() + 1);
    args.push(ttl_ms.into());
    args.extend(batch.iter().map(|(_, r)| Value::from(r.owner.as_str())));
    let sent = Instant::now();
    let reply: Result<Vec<i64>, Error> = inner
        .scripts
        .renew
        .evalsha_with_reload(&inner.client, keys, args)
        .await;
    let renewed = match reply {
        Ok(renewed) if renewed.len() == batch.len() => renewed,
        Ok(renewed) => {
            tracing::warn!(
                expected = batch.len(),
                got = renewed.len(),
                "watchdog renewal returned a malformed reply; leases lapse unless the next tick succeeds"
            );
            return failed;
        }
        // Leases keep their old local deadline; if no renewal gets through before it, the
        // holders' lost() fires.
        Err(error) => {
            inner.follow_if_demoted(&error);
            tracing::warn!(%error, leases = batch.len(), "watchdog renewal failed");
            return failed;
        }
    };
    // With min-replicas, a renewal counts only once the replicas have it too: a failover
    // promotes a replica, and its copy of the key expires at the last renewal it received. An
    // unconfirmed renewal leaves the old local deadline, so lost() fires before that copy can
    // expire and be granted to someone else.
    let replicated = renewal_replicated(inner, slot).await;
    let valid_until = sent + ttl - crate::safety_margin(ttl);
    let mut result = Renewed::default();
    for ((id, renewal), ok) in batch.iter().zip(renewed) {
        if ok == 1 && replicated {
            result.renewed += 1;
        } else if ok == 1 {
            result.failed += 1;
        } else {
            result.lost += 1;
        }
        if ok != 1 {
            renewal.state.mark_lost(LostReason::NotOwner);
            tracing::warn!(
                redis_key = %renewal.redis_key,
                owner = %renewal.owner,
                "watchdog found the lease gone or taken over; the holder is told via lost()"
            );
            inner.watchdog.unregister(*id);
        } else if replicated && !renewal.state.confirm(valid_until) {
            // Released or lost locally since the snapshot.
            inner.watchdog.unregister(*id);
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
