//! Local batches on the in-memory store, on paused time: the bound across limiters, one store
//! call per batch, one refill in flight per key, held denials, and off by default.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::rate_limit::{
    Basis, Charge, FailurePolicy, InMemoryRateLimits, MAX_LOCAL_BATCH, Quota, RateLimitError,
    RateLimitStore, RateLimiter, Verdict,
};

/// An in-memory store counting its calls and charged costs, answering after `delay`, failing
/// while `down`.
#[derive(Debug, Default)]
struct Counting {
    inner: InMemoryRateLimits,
    calls: AtomicU32,
    delay_ms: AtomicU32,
    down: AtomicBool,
}

#[async_trait]
impl RateLimitStore for Counting {
    async fn charge(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, RateLimitError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay.into())).await;
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(RateLimitError::unavailable(charges[0].limit, "down"));
        }
        self.inner.charge(charges).await
    }
}

impl Counting {
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

fn limiter(store: &Arc<Counting>, quota: &str, burst: u32, batch: u32) -> RateLimiter {
    let quota: Quota = quota.parse().unwrap();
    RateLimiter::new(
        store.clone(),
        "api",
        quota.with_burst(burst).unwrap(),
        FailurePolicy::FailClosed,
    )
    .unwrap()
    .local_batch(batch)
    .unwrap()
}

/// Two replicas (limiters with their own batches on one store) offered a request each every
/// millisecond for 10 s at 100/1s, burst 50, batches of 10: the whole run admits at most
/// burst + rate × t, and any 1 s window at most that plus a batch per replica.
#[tokio::test(start_paused = true)]
async fn replicas_with_batches_admit_at_most_burst_plus_rate() {
    let store = Arc::new(Counting::default());
    let replicas = [
        limiter(&store, "100/1s", 50, 10),
        limiter(&store, "100/1s", 50, 10),
    ];
    let mut admitted_at = Vec::new();
    for ms in 0..10_000u64 {
        for replica in &replicas {
            if replica.try_acquire("client", 1).await.unwrap().allowed {
                admitted_at.push(ms);
            }
        }
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    let bound = 50 + 100 * 10;
    assert!(
        admitted_at.len() <= bound,
        "{} > {bound}",
        admitted_at.len()
    );
    // Partial grants keep the under-admission small when the limit binds.
    assert!(admitted_at.len() >= bound * 9 / 10, "{}", admitted_at.len());
    let most_in_a_second = (0..admitted_at.len())
        .map(|i| admitted_at[i..].partition_point(|t| *t < admitted_at[i] + 1000))
        .max()
        .unwrap();
    assert!(
        most_in_a_second <= 50 + 100 + 2 * 10,
        "{most_in_a_second} in one second"
    );
}

/// Below the limit, a key costs one store call per batch.
#[tokio::test(start_paused = true)]
async fn a_refill_is_one_store_call_per_batch() {
    let store = Arc::new(Counting::default());
    let limiter = limiter(&store, "1000000/1s", 1_000_000, 25);
    for _ in 0..1000 {
        let decision = limiter.try_acquire("client", 1).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.basis, Basis::Counted);
    }
    assert_eq!(store.calls(), 1000 / 25);
    // A cost above the batch is charged whole.
    limiter.try_acquire("other", 40).await.unwrap();
    assert_eq!(store.calls(), 1000 / 25 + 1);
}

/// Callers of one key at once wait for the one refill in flight.
#[tokio::test(start_paused = true)]
async fn concurrent_callers_share_one_refill() {
    let store = Arc::new(Counting::default());
    store.delay_ms.store(5, Ordering::SeqCst);
    let limiter = limiter(&store, "1000000/1s", 1_000_000, 100);
    let calls = (0..100).map(|_| limiter.try_acquire("hot", 1));
    for decision in futures::future::join_all(calls).await {
        assert!(decision.unwrap().allowed);
    }
    assert_eq!(store.calls(), 1);
}

/// Unspent permits are dropped after their lifetime; a denial is answered locally until one
/// request would be admitted.
#[tokio::test(start_paused = true)]
async fn permits_expire_and_denials_are_held() {
    let store = Arc::new(Counting::default());
    let limiter = limiter(&store, "10/1s", 10, 5);
    assert!(limiter.try_acquire("k", 1).await.unwrap().allowed);
    // 5 permits of 10/1s are earned in 500 ms, and kept as long: 4 lost after.
    tokio::time::advance(Duration::from_millis(500)).await;
    for _ in 0..5 {
        assert!(limiter.try_acquire("k", 1).await.unwrap().allowed);
    }
    assert_eq!(store.calls(), 2);
    // 10 charged, 5 refilled over the 500 ms: 5 left, a batch of 5.
    for _ in 0..5 {
        assert!(limiter.try_acquire("k", 1).await.unwrap().allowed);
    }
    let denied = limiter.try_acquire("k", 1).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Duration::from_millis(100));
    let calls = store.calls();
    for _ in 0..10 {
        let held = limiter.try_acquire("k", 1).await.unwrap();
        assert!(!held.allowed);
        assert_eq!(held.retry_after, Duration::from_millis(100));
    }
    assert_eq!(store.calls(), calls, "a held denial asks nothing");
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(limiter.try_acquire("k", 1).await.unwrap().allowed);
}

/// Off by default: every decision asks the store.
#[tokio::test(start_paused = true)]
async fn off_by_default() {
    let store = Arc::new(Counting::default());
    let plain = RateLimiter::new(
        store.clone(),
        "api",
        "1000/1s".parse().unwrap(),
        FailurePolicy::FailOpen,
    )
    .unwrap();
    assert_eq!(plain.local_batch_size(), 0);
    for _ in 0..10 {
        plain.try_acquire("k", 1).await.unwrap();
    }
    assert_eq!(store.calls(), 10);
    let off = plain.local_batch(0).unwrap();
    off.try_acquire("k", 1).await.unwrap();
    assert_eq!(store.calls(), 11);
}

#[test]
fn a_batch_above_the_maximum_is_refused() {
    let store = Arc::new(Counting::default());
    let error = RateLimiter::new(
        store,
        "api",
        "1000/1s".parse().unwrap(),
        FailurePolicy::FailOpen,
    )
    .unwrap()
    .local_batch(MAX_LOCAL_BATCH + 1)
    .unwrap_err();
    assert_eq!(error.code(), "RATE_LIMIT_INVALID_ARGUMENT");
    assert!(error.to_string().contains("10000"), "{error}");
}

/// A failed refill decides by the policy, for the callers that waited for it too, without each
/// asking again.
#[tokio::test(start_paused = true)]
async fn a_failed_refill_decides_by_the_policy_once() {
    let store = Arc::new(Counting::default());
    store.delay_ms.store(5, Ordering::SeqCst);
    store.down.store(true, Ordering::SeqCst);
    let limiter = limiter(&store, "1000000/1s", 1_000_000, 100);
    let calls = (0..20).map(|_| limiter.try_acquire("hot", 1));
    for decision in futures::future::join_all(calls).await {
        assert_eq!(decision.unwrap().basis, Basis::FailedClosed);
    }
    assert_eq!(store.calls(), 1);
    store.down.store(false, Ordering::SeqCst);
    assert!(limiter.try_acquire("hot", 1).await.unwrap().allowed);
}

/// A refilling call dropped mid-refill (its caller's timeout) lets the callers waiting for it
/// refill themselves.
#[tokio::test(start_paused = true)]
async fn a_refill_dropped_midway_wakes_the_callers_waiting_for_it() {
    let store = Arc::new(Counting::default());
    store.delay_ms.store(5, Ordering::SeqCst);
    let limiter = limiter(&store, "1000000/1s", 1_000_000, 100);
    let first = tokio::time::timeout(Duration::from_millis(1), limiter.try_acquire("hot", 1));
    let second = limiter.try_acquire("hot", 1);
    let (first, second) = tokio::join!(first, second);
    assert!(first.is_err(), "the first call timed out");
    assert!(second.unwrap().allowed);
    assert_eq!(store.calls(), 2);
}

/// A batch above the burst takes the burst per refill, and says so, whatever the quota in force.
#[tokio::test(start_paused = true)]
async fn a_batch_above_the_burst_is_the_burst() {
    let store = Arc::new(Counting::default());
    let limiter = RateLimiter::new(
        store.clone(),
        "api",
        "5/1s".parse().unwrap(),
        FailurePolicy::FailOpen,
    )
    .unwrap()
    .local_batch(50)
    .unwrap();
    assert_eq!(limiter.local_batch_size(), 5);
    for _ in 0..5 {
        assert!(limiter.try_acquire("k", 1).await.unwrap().allowed);
    }
    assert_eq!(store.calls(), 1, "one refill of 5");
    limiter.set_quota("100/1s".parse().unwrap());
    assert_eq!(limiter.local_batch_size(), 50);
}
