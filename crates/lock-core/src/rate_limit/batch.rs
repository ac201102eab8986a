//! Local batches: a hot key's permits charged on the store several at a time and spent in this
//! process ([`RateLimiter::local_batch`](crate::rate_limit::RateLimiter::local_batch)).
//!
//! Each permit spent here was charged on the store first, so the store's bound holds for every
//! admission counted from rest; over a window starting later, the permits held at its start
//! (at most a batch per limiter and key) come on top. Permits not spent within their lifetime
//! are dropped: they were charged, so dropping them under-admits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::rate_limit::port::Verdict;
use crate::rate_limit::quota::Quota;

/// The largest local batch: 10,000 permits.
pub const MAX_LOCAL_BATCH: u32 = 10_000;
/// The shortest a batch's permits are kept: 10 ms.
pub const MIN_BATCH_LIFETIME: Duration = Duration::from_millis(10);
/// The longest a batch's permits are kept: 1 s.
pub const MAX_BATCH_LIFETIME: Duration = Duration::from_secs(1);

/// Refills between two sweeps of the keys with nothing held.
const SWEEP_EVERY: u32 = 1024;

/// How long `granted` permits of `quota` are kept: the time the rate takes to earn them, from
/// [`MIN_BATCH_LIFETIME`] to [`MAX_BATCH_LIFETIME`].
pub(crate) fn lifetime(quota: &Quota, granted: u32) -> Duration {
    quota
        .emission_interval()
        .saturating_mul(granted)
        .clamp(MIN_BATCH_LIFETIME, MAX_BATCH_LIFETIME)
}

/// What this process holds for the keys of one limiter.
#[derive(Default)]
pub(crate) struct Batches {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Batches {
    /// The number of keys only: the keys are clients' ids, and there may be many.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches")
            .field("keys", &self.len())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Inner {
    by_key: HashMap<String, Slot>,
    since_sweep: u32,
}

#[derive(Debug)]
struct Slot {
    /// The quota the holding was charged under; another one drops it.
    quota: Quota,
    held: Held,
    /// Until when `held` stands.
    until: Instant,
    /// Whether a caller is refilling the key: the others wait for it.
    refilling: bool,
    /// Told at the end of each refill, made, failed or given up: every caller waiting wakes at
    /// once and looks again.
    done: watch::Sender<()>,
    /// Refills that failed: a caller that waited for one decides by the policy without asking.
    failures: u64,
}

impl Slot {
    fn new(quota: Quota, held: Held, until: Instant, refilling: bool) -> Self {
        Slot {
            quota,
            held,
            until,
            refilling,
            done: watch::Sender::new(()),
            failures: 0,
        }
    }

    /// Ends the refill in flight, waking the callers waiting for it.
    fn refilled(&mut self) {
        self.refilling = false;
        self.done.send_replace(());
    }
}

/// What a caller does when nothing held answers it.
#[derive(Debug)]
pub(crate) enum Refill {
    /// It refills the key; the others wait for it.
    Mine,
    /// Another caller is refilling: wait for the end of that refill, then look again. With the
    /// failures the key had, to tell whether that refill failed.
    Wait(watch::Receiver<()>, u64),
}

#[derive(Debug, Clone, Copy)]
enum Held {
    Nothing,
    /// Permits charged on the store and not spent yet, with the store's standing after the
    /// charge.
    Permits {
        left: u32,
        remaining: u32,
        reset_at: Instant,
    },
    /// The store denied: until `until`, a request of cost 1 is denied.
    Denied {
        remaining: u32,
        reset_at: Instant,
    },
}

/// A decision made from what is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Local {
    pub(crate) allowed: bool,
    pub(crate) remaining: u32,
    pub(crate) retry_after: Duration,
    pub(crate) reset_after: Duration,
}

impl Batches {
    /// Spends `cost` permits of `key` held for `quota` at `now`, or answers a denial held; else
    /// says whether the caller refills or waits for the refill in flight.
    pub(crate) fn take(
        &self,
        key: &str,
        quota: Quota,
        cost: u32,
        now: Instant,
    ) -> Result<Local, Refill> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = inner.by_key.get_mut(key) else {
            let slot = Slot::new(quota, Held::Nothing, now, true);
            inner.by_key.insert(key.to_owned(), slot);
            return Err(Refill::Mine);
        };
        if slot.quota != quota || slot.until <= now {
            slot.held = Held::Nothing;
        }
        match &mut slot.held {
            Held::Permits {
                left,
                remaining,
                reset_at,
            } if *left >= cost => {
                *left -= cost;
                Ok(Local {
                    allowed: true,
                    remaining: left.saturating_add(*remaining),
                    retry_after: Duration::ZERO,
                    reset_after: reset_at.saturating_duration_since(now),
                })
            }
            Held::Denied {
                remaining,
                reset_at,
            } => Ok(Local {
                allowed: false,
                remaining: *remaining,
                retry_after: slot.until - now + quota.emission_interval().saturating_mul(cost - 1),
                reset_after: reset_at.saturating_duration_since(now),
            }),
            _ if slot.refilling => Err(Refill::Wait(slot.done.subscribe(), slot.failures)),
            _ => {
                slot.refilling = true;
                Err(Refill::Mine)
            }
        }
    }

    /// Keeps what a refill of `key` got: `granted` permits of which the caller spent `cost`, or
    /// for a denial (`granted` 0) the store's verdict for a charge of `charged`.
    pub(crate) fn fill(
        &self,
        key: &str,
        quota: Quota,
        charged: u32,
        verdict: &Verdict,
        cost: u32,
        now: Instant,
    ) -> Local {
        let interval = quota.emission_interval();
        let reset_at = now + verdict.reset_after;
        let (held, until, local) = if verdict.allowed {
            let left = charged - cost;
            let local = Local {
                allowed: true,
                remaining: left.saturating_add(verdict.remaining),
                retry_after: Duration::ZERO,
                reset_after: verdict.reset_after,
            };
            let held = Held::Permits {
                left,
                remaining: verdict.remaining,
                reset_at,
            };
            (held, now + lifetime(&quota, charged), local)
        } else {
            // The wait of a charge of 1, and of the caller's cost, from that of `charged`.
            let one = verdict
                .retry_after
                .saturating_sub(interval.saturating_mul(charged - 1));
            let local = Local {
                allowed: false,
                remaining: verdict.remaining,
                retry_after: verdict
                    .retry_after
                    .saturating_sub(interval.saturating_mul(charged - cost)),
                reset_after: verdict.reset_after,
            };
            let held = Held::Denied {
                remaining: verdict.remaining,
                reset_at,
            };
            (held, now + one, local)
        };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.since_sweep += 1;
        if inner.since_sweep >= SWEEP_EVERY {
            inner.since_sweep = 0;
            inner
                .by_key
                .retain(|_, slot| slot.until > now || slot.refilling || !slot.done.is_closed());
        }
        match inner.by_key.get_mut(key) {
            Some(slot) => {
                slot.quota = quota;
                slot.held = held;
                slot.until = until;
                slot.refilled();
            }
            None => {
                let slot = Slot::new(quota, held, until, false);
                inner.by_key.insert(key.to_owned(), slot);
            }
        }
        local
    }

    /// Ends a refill of `key` that failed (`failed`) or was given up.
    pub(crate) fn abandon(&self, key: &str, failed: bool) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = inner.by_key.get_mut(key) {
            slot.failures += u64::from(failed);
            slot.refilled();
        }
    }

    /// Whether a refill of `key` failed since it had `failures`.
    pub(crate) fn failed_since(&self, key: &str, failures: u64) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .by_key
            .get(key)
            .is_some_and(|slot| slot.failures != failures)
    }

    /// Keys with a slot, held or not.
    fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota() -> Quota {
        "100/1s".parse().unwrap()
    }

    fn allowed(remaining: u32) -> Verdict {
        Verdict {
            allowed: true,
            remaining,
            retry_after: Duration::ZERO,
            reset_after: Duration::from_millis(100),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_is_spent_then_refilled() {
        let batches = Batches::default();
        let now = Instant::now();
        assert!(batches.take("k", quota(), 1, now).is_err());
        let local = batches.fill("k", quota(), 10, &allowed(90), 1, now);
        assert_eq!((local.allowed, local.remaining), (true, 99));
        for left in (0..9).rev() {
            let local = batches.take("k", quota(), 1, now).unwrap();
            assert_eq!((local.allowed, local.remaining), (true, left + 90));
        }
        assert!(batches.take("k", quota(), 1, now).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn permits_expire_and_another_quota_drops_them() {
        let batches = Batches::default();
        let now = Instant::now();
        batches.fill("k", quota(), 10, &allowed(90), 1, now);
        // 10 permits of 100/1s: earned in 100 ms, kept as long.
        assert_eq!(lifetime(&quota(), 10), Duration::from_millis(100));
        let later = now + Duration::from_millis(100);
        assert!(batches.take("k", quota(), 1, later).is_err());
        batches.fill("k", quota(), 10, &allowed(90), 1, now);
        let other = quota().with_burst(50).unwrap();
        assert!(batches.take("k", other, 1, now).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_denial_is_held_until_one_is_admitted() {
        let batches = Batches::default();
        let now = Instant::now();
        let denied = Verdict {
            allowed: false,
            remaining: 0,
            retry_after: Duration::from_millis(95),
            reset_after: Duration::from_secs(1),
        };
        // A batch of 10 denied 95 ms: one is admitted in 5 ms, the caller's 2 in 15 ms.
        let local = batches.fill("k", quota(), 10, &denied, 2, now);
        assert_eq!(local.retry_after, Duration::from_millis(15));
        let held = batches.take("k", quota(), 1, now).unwrap();
        assert!(!held.allowed);
        assert_eq!(held.retry_after, Duration::from_millis(5));
        let soon = now + Duration::from_millis(5);
        assert!(batches.take("k", quota(), 1, soon).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn debug_shows_no_key() {
        let batches = Batches::default();
        batches.fill("client-42", quota(), 10, &allowed(90), 1, Instant::now());
        assert_eq!(format!("{batches:?}"), "Batches { keys: 1 }");
    }

    #[test]
    fn the_lifetime_is_bounded() {
        let fast: Quota = "1000000/1s".parse().unwrap();
        assert_eq!(lifetime(&fast, 100), MIN_BATCH_LIFETIME);
        let slow: Quota = "5/1m".parse().unwrap();
        assert_eq!(lifetime(&slow, 5), MAX_BATCH_LIFETIME);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_with_nothing_held_are_swept() {
        let batches = Batches::default();
        let now = Instant::now();
        for n in 1..SWEEP_EVERY {
            batches.fill(&n.to_string(), quota(), 1, &allowed(0), 1, now);
        }
        let later = now + Duration::from_secs(2);
        batches.fill("last", quota(), 2, &allowed(0), 1, later);
        assert_eq!(batches.len(), 1);
    }
}
