//! The watchdog: renews every watchdog lease of one client, every third of the watchdog timeout,
//! in batched script calls — not one call per lock per tick (one per hash slot on a Cluster).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;

use fred::prelude::*;
use lock_core::{LeaseState, LostReason};
use tokio::time::{Instant, MissedTickBehavior};

use crate::inner::Inner;

/// Keys per renewal call: bounds the time one script holds the Redis thread (~a few µs a key).
pub const RENEW_BATCH: usize = 500;

/// The leases the watchdog renews.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    leases: Mutex<HashMap<u64, Renewal>>,
    next_id: AtomicU64,
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

/// One tick: renews every registered lease, [`RENEW_BATCH`] keys per call.
async fn renew_all(inner: &Inner) {
    let leases = inner.watchdog.snapshot();
    if leases.is_empty() {
        return;
    }
    let ttl = inner.config.watchdog_timeout;
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
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
    for batch in groups.values().flat_map(|group| group.chunks(RENEW_BATCH)) {
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
        match reply {
            Ok(renewed) if renewed.len() == batch.len() => {
                let valid_until = sent + ttl - crate::safety_margin(ttl);
                for ((id, renewal), ok) in batch.iter().zip(renewed) {
                    let still_ours = ok == 1 && renewal.state.confirm(valid_until);
                    if !still_ours {
                        if ok != 1 {
                            renewal.state.mark_lost(LostReason::NotOwner);
                            tracing::warn!(
                                redis_key = %renewal.redis_key,
                                owner = %renewal.owner,
                                "watchdog found the lease gone or taken over; the holder is told via lost()"
                            );
                        }
                        inner.watchdog.unregister(*id);
                    }
                }
            }
            Ok(renewed) => tracing::warn!(
                expected = batch.len(),
                got = renewed.len(),
                "watchdog renewal returned a malformed reply; leases lapse unless the next tick succeeds"
            ),
            // Leases keep their old local deadline; if no renewal gets through before it, the
            // holders' lost() fires.
            Err(error) => tracing::warn!(%error, leases = batch.len(), "watchdog renewal failed"),
        }
    }
}
