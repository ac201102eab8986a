//! The watchdog's bookkeeping: the watchdog leases of one client, when each is due a renewal,
//! and what the watchdog has done ([`WatchdogStats`]). The renewal task is `watchdog`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::Key;
use lock_core::lock::LeaseState;
use tokio::time::Instant;

/// Keys per renewal call: bounds the time one script holds the Redis thread (about 1–1.5 µs a
/// key, so under 1 ms a call; see docs/performance.md, "Watchdog capacity").
pub const RENEW_BATCH: usize = 500;

/// How often a watchdog lease is renewed: every third of the watchdog timeout. A renewal that
/// does not get through is tried again at the watchdog's next wake-up, a tenth of this later.
pub fn renewal_period(watchdog_timeout: Duration) -> Duration {
    watchdog_timeout / 3
}

/// What a client's watchdog has done since it started, from
/// [`RedisLock::watchdog_stats`](crate::lock::RedisLock::watchdog_stats).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use lock_redis::lock::{RedisLock, RedisLockConfig};
/// use lock_redis::{RedisClient, RedisConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
/// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
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

/// After a slow-round warning, the next one waits this long: a Redis that stays slow logs
/// once a minute, not once a round.
const SLOW_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// The leases the watchdog renews.
///
/// Each lease is renewed on its own schedule — a period after its last renewal was sent, or at
/// the next wake-up after one that failed — not on one tick for all: a slow batch (a paused shard, a slow replica) delays only its own
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
    /// [`held_prefix`](crate::lock::scripts::held_prefix): what renew.lua expects at the start of the
    /// value.
    grant: Str,
    state: LeaseState,
    /// When the next renewal is due; `None` while one is in flight, so a slow call is not sent
    /// again on top of itself.
    due: Option<Instant>,
    /// Whether the last renewal failed: the next one is a retry.
    retrying: bool,
}

/// A lease taken into a round.
#[derive(Debug)]
pub(crate) struct Due {
    pub(crate) id: u64,
    pub(crate) key: Key,
    pub(crate) grant: Str,
    pub(crate) state: LeaseState,
    /// Whether its last renewal failed.
    pub(crate) retrying: bool,
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
            grant: Str::from(crate::lock::scripts::held_prefix(token, owner)),
            state,
            due: Some(Instant::now() + period),
            retrying: false,
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

    pub(crate) fn record_round(&self, calls: usize, took: Duration) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.ticks += 1;
        stats.renewal_calls += calls as u64;
        stats.last_tick = took;
        stats.longest_tick = stats.longest_tick.max(took);
    }

    /// Whether a slow round may be warned about now (at most once per
    /// [`SLOW_WARNING_INTERVAL`]).
    pub(crate) fn may_warn_slow(&self, now: Instant) -> bool {
        let mut warned = self.warned_slow.lock().unwrap_or_else(|p| p.into_inner());
        if warned.is_some_and(|at| now < at + SLOW_WARNING_INTERVAL) {
            return false;
        }
        *warned = Some(now);
        true
    }

    /// The leases of the next round, marked in flight: none unless one is due at `now`. A
    /// regular renewal takes along every lease due within a renewal `period` of it, so that a
    /// client's leases share one round (and its calls) per period, as leases granted at
    /// different times would otherwise each start rounds of their own; a lease whose renewal
    /// was slow rejoins the others at the next round. Retries of failed renewals go alone, so
    /// that a failing shard does not renew the healthy shards' leases at every wake-up. Leases
    /// released or lost since they were registered are dropped here.
    pub(crate) fn take_due(&self, now: Instant, period: Duration) -> Vec<Due> {
        let mut leases = self.leases();
        // Compares instants only: this runs every wake-up, over every lease.
        let (mut regular, mut retries) = (false, false);
        for r in leases
            .values()
            .filter(|r| r.due.is_some_and(|due| due <= now))
        {
            if !r.retrying {
                regular = true;
                break;
            }
            retries = true;
        }
        let until = match (regular, retries) {
            (true, _) => now + period,
            (false, true) => now,
            (false, false) => return Vec::new(),
        };
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
                retrying: r.retrying,
            });
            true
        });
        taken
    }

    /// The renewal of `ids` sent at `sent` has its answer. Renewed, or found lost: the next is
    /// due a `period` after it was sent. `failed` (the call, or its replicas' confirmation):
    /// it is due now, for the next wake-up, and the lease keeps its old local deadline.
    pub(crate) fn answered(
        &self,
        ids: impl Iterator<Item = u64>,
        sent: Instant,
        period: Duration,
        failed: bool,
    ) {
        let next = if failed {
            Instant::now()
        } else {
            sent + period
        };
        let mut leases = self.leases();
        for id in ids {
            if let Some(renewal) = leases.get_mut(&id) {
                renewal.due = Some(next);
                renewal.retrying = failed;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(10);
    /// The watchdog's wake-up interval for `PERIOD`.
    const WAKE: Duration = Duration::from_secs(1);

    fn taken(registry: &Registry) -> Vec<u64> {
        let mut ids: Vec<u64> = registry
            .take_due(Instant::now(), PERIOD)
            .iter()
            .map(|d| d.id)
            .collect();
        ids.sort();
        ids
    }

    fn lease(registry: &Registry, key: &str) -> u64 {
        let state = LeaseState::new(Some(Instant::now() + PERIOD * 3));
        registry.register(key.into(), 1, "owner", state, PERIOD)
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_retried_alone_at_the_next_wake_up() {
        let registry = Registry::default();
        let (a, b) = (lease(&registry, "a"), lease(&registry, "b"));
        tokio::time::advance(PERIOD).await;
        assert_eq!(taken(&registry), [a, b]);
        let sent = Instant::now();
        // a's call fails a command timeout later; b's was answered at once.
        registry.answered([b].into_iter(), sent, PERIOD, false);
        tokio::time::advance(WAKE * 2).await;
        registry.answered([a].into_iter(), sent, PERIOD, true);

        // A retry at the next wake-up, without the healthy lease riding along.
        tokio::time::advance(WAKE / 2).await;
        assert_eq!(taken(&registry), [a]);
        registry.answered([a].into_iter(), Instant::now(), PERIOD, false);

        // Renewed, it rejoins b's rounds.
        tokio::time::advance(PERIOD - WAKE * 3).await;
        assert!(taken(&registry).is_empty());
        tokio::time::advance(WAKE).await;
        assert_eq!(taken(&registry), [a, b]);
    }
}
