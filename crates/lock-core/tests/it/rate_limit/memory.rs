//! The in-memory store: the conformance suite, and the algorithm's bounds on paused time.

use std::sync::Arc;
use std::time::Duration;

use lock_core::rate_limit::{
    Basis, DisabledRateLimits, FailurePolicy, InMemoryRateLimits, Part, Quota, RateLimiter,
    check_all,
};

mod conformance_suite {
    use super::*;

    lock_core::conformance_tests!(rate_limit, async {
        Arc::new(InMemoryRateLimits::default())
    });
}

fn limiter(quota: &str, burst: u32) -> RateLimiter {
    let quota: Quota = quota.parse().unwrap();
    let store = Arc::new(InMemoryRateLimits::new());
    RateLimiter::new(
        store,
        "api",
        quota.with_burst(burst).unwrap(),
        FailurePolicy::FailClosed,
    )
    .unwrap()
}

/// Requests offered every millisecond for 10 s against 10/1s with a burst of 10: at most the
/// burst plus the rate in any 1 s window, wherever it starts, and the bound reached overall.
#[tokio::test(start_paused = true)]
async fn no_window_admits_more_than_burst_plus_rate() {
    let limiter = limiter("10/1s", 10);
    let mut admitted_at = Vec::new();
    for ms in 0..10_000u64 {
        if limiter.try_acquire("client", 1).await.unwrap().allowed {
            admitted_at.push(ms);
        }
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    let most_in_a_second = admitted_at
        .iter()
        .map(|start| {
            admitted_at
                .iter()
                .filter(|t| (*start..*start + 1000).contains(t))
                .count()
        })
        .max()
        .unwrap();
    assert!(
        most_in_a_second <= 10 + 10,
        "{most_in_a_second} in one second"
    );
    // 10 at once, then one per 100 ms for the rest of the 10 s.
    assert_eq!(admitted_at.len(), 10 + 99, "{admitted_at:?}");
}

/// `acquire` sleeps until the retry-after and is admitted then, one per emission interval.
#[tokio::test(start_paused = true)]
async fn acquire_sleeps_until_the_retry_after() {
    let limiter = limiter("2/1s", 1);
    let started = tokio::time::Instant::now();
    for n in 0..5u32 {
        let decision = limiter
            .acquire("client", 1, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(decision.allowed);
        assert_eq!(started.elapsed(), Duration::from_millis(500) * n);
    }
    let refused = limiter
        .acquire("client", 1, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(!refused.allowed);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(2),
        "no wait beyond the timeout"
    );
    let error = limiter
        .acquire("client", 1, Duration::from_secs(7200))
        .await
        .unwrap_err();
    assert_eq!(error.details()["argument"], "timeout", "{error}");
}

/// Lowering the rate mid-run: from then on admissions follow the lower rate; raising it never
/// admits fewer than the old rate would have.
#[tokio::test(start_paused = true)]
async fn a_rate_lowered_and_raised_mid_run_holds_at_once() {
    let limiter = limiter("100/1s", 1);
    let admitted = |limiter: RateLimiter| async move {
        let mut count = 0;
        for _ in 0..1000 {
            if limiter.try_acquire("client", 1).await.unwrap().allowed {
                count += 1;
            }
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        count
    };
    assert_eq!(admitted(limiter.clone()).await, 100);
    let quota = |text: &str| text.parse::<Quota>().unwrap().with_burst(1).unwrap();
    limiter.set_quota(quota("10/1s"));
    assert_eq!(admitted(limiter.clone()).await, 10);
    limiter.set_quota(quota("50/1s"));
    assert_eq!(admitted(limiter.clone()).await, 50);
}

/// Limits checked together share one store.
#[tokio::test]
async fn limits_on_different_stores_are_not_checked_together() {
    let (here, elsewhere) = (limiter("1/1h", 1), limiter("1/1h", 1));
    let parts = [
        Part {
            limiter: &here,
            key: "client",
            cost: 1,
        },
        Part {
            limiter: &elsewhere,
            key: "client",
            cost: 1,
        },
    ];
    let error = check_all(&parts).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid parts `api` and `api`: the limits use different stores; limits checked together share one"
    );
}

/// Every spelling of a name is one limit: a replica writing `MY_API` in code shares the quota of
/// one configured as `my-api`.
#[tokio::test(start_paused = true)]
async fn every_spelling_of_a_name_is_one_limit() {
    let store = Arc::new(InMemoryRateLimits::new());
    let quota: Quota = "1/1h".parse().unwrap();
    let named = |name: &str| {
        RateLimiter::new(store.clone(), name, quota, FailurePolicy::FailClosed).unwrap()
    };
    let (code, config) = (named("MY_API"), named("my-api"));
    assert_eq!(code.name(), "my-api");
    assert!(
        code.try_acquire("client", 1)
            .await
            .unwrap()
            .admitted()
            .is_ok()
    );
    assert!(
        config
            .try_acquire("client", 1)
            .await
            .unwrap()
            .admitted()
            .is_err()
    );
}

/// Switched off: everything is admitted and the decision says so.
#[tokio::test]
async fn a_disabled_store_admits_everything() {
    let limiter = RateLimiter::new(
        Arc::new(DisabledRateLimits),
        "api",
        "1/1h".parse().unwrap(),
        FailurePolicy::FailClosed,
    )
    .unwrap();
    for _ in 0..100 {
        let decision = limiter.try_acquire("client", 1).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.basis, Basis::Disabled);
    }
    assert!(
        limiter.try_acquire("client", 2).await.is_err(),
        "a cost above the burst is still an error"
    );
}

#[tokio::test]
async fn a_timeout_above_an_hour_is_refused_naming_the_range_once() {
    let limiter = limiter("10/1s", 10);
    let timeout = Duration::from_secs(3600) + Duration::from_millis(1);
    let error = limiter.acquire("k", 1, timeout).await.unwrap_err();
    assert_eq!(error.code(), "RATE_LIMIT_INVALID_ARGUMENT");
    assert_eq!(
        error.to_string(),
        "invalid timeout 3600001 ms: accepted: 0 to 1 h"
    );
}
