//! Rate limiting's conformance suite: the behaviour every [`RateLimitStore`] backend shows
//! (feature `conformance`).
//!
//! Implement [`RateLimitFactory`] for a backend, then expand
//! `lock_core::conformance_tests!(rate_limit, …)` or call [`run_all`], as the
//! [harness](crate::conformance) describes. Quotas are slow enough (one request per hour) that a
//! loaded machine cannot refill a bucket between two calls, except in the checks of refilling,
//! which wait on the retry-after the store gives.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::conformance::{SLACK, unique_key};
use crate::rate_limit::{
    Basis, Decision, FailurePolicy, Part, Quota, RateLimitError, RateLimitStore, RateLimiter,
    check_all,
};

/// Builds clients of one shared backend for the suite.
#[async_trait]
pub trait RateLimitFactory: Send + Sync + 'static {
    /// A new client of the shared backend, on connections of its own, as another process would
    /// have.
    async fn client(&self) -> Arc<dyn RateLimitStore>;
}

/// A store shared in one process is its own factory: every client is that store.
#[async_trait]
impl<S: RateLimitStore + 'static> RateLimitFactory for Arc<S> {
    async fn client(&self) -> Arc<dyn RateLimitStore> {
        Arc::clone(self) as Arc<dyn RateLimitStore>
    }
}

/// One request per hour, with a burst of `burst`.
fn hourly(burst: u32) -> Quota {
    Quota::new(1, Duration::from_secs(3600))
        .and_then(|q| q.with_burst(burst))
        .expect("a valid quota")
}

async fn limiter(factory: &dyn RateLimitFactory, quota: Quota) -> RateLimiter {
    limiter_on(&factory.client().await, quota)
}

/// A limiter of a new name on `store`.
fn limiter_on(store: &Arc<dyn RateLimitStore>, quota: Quota) -> RateLimiter {
    let name = unique_key("limit");
    RateLimiter::new(Arc::clone(store), &name, quota, FailurePolicy::FailClosed)
        .expect("a valid limiter")
}

async fn take(limiter: &RateLimiter, key: &str, cost: u32) -> Decision {
    let decision = limiter.try_acquire(key, cost).await.expect("a decision");
    assert_eq!(decision.basis, Basis::Counted, "{decision:?}");
    decision
}

/// Asserts `actual` lies within `SLACK` below `expected`, and not above it.
fn about(actual: Duration, expected: Duration, what: &str) {
    assert!(
        actual <= expected && actual + SLACK >= expected,
        "{what}: {actual:?}, expected about {expected:?}"
    );
}

/// A burst is admitted at once, counting down, then requests are denied with a retry-after of
/// one emission interval; a denial charges nothing.
pub async fn the_burst_is_admitted_then_requests_are_denied(factory: &dyn RateLimitFactory) {
    let limiter = limiter(factory, hourly(3)).await;
    let key = unique_key("client");
    for remaining in [2, 1, 0] {
        let decision = take(&limiter, &key, 1).await;
        assert!(decision.allowed, "{decision:?}");
        assert_eq!(decision.remaining, remaining);
        assert_eq!(decision.retry_after, Duration::ZERO);
        assert_eq!(decision.key, key);
        assert_eq!(&*decision.limit, limiter.name());
    }
    for _ in 0..3 {
        let denied = take(&limiter, &key, 1).await;
        assert!(!denied.allowed);
        assert_eq!(denied.remaining, 0);
        // Denials are not charged: the wait does not grow.
        about(denied.retry_after, Duration::from_secs(3600), "retry-after");
        about(
            denied.reset_after,
            Duration::from_secs(3 * 3600),
            "reset-after",
        );
    }
    let error = take(&limiter, &key, 1).await.admitted().unwrap_err();
    assert_eq!(error.code(), "RATE_LIMITED");
}

/// A cost counts as that many requests: 5 of a burst of 5, then 1 is denied; a cost above the
/// burst is an error, not a wait.
pub async fn a_cost_counts_as_that_many_requests(factory: &dyn RateLimitFactory) {
    let limiter = limiter(factory, hourly(5)).await;
    let key = unique_key("client");
    let five = take(&limiter, &key, 5).await;
    assert!(five.allowed && five.remaining == 0, "{five:?}");
    assert!(!take(&limiter, &key, 1).await.allowed);

    let other = unique_key("client");
    let error = limiter.try_acquire(&other, 6).await.unwrap_err();
    assert!(
        matches!(
            error,
            RateLimitError::CostAboveBurst {
                cost: 6,
                burst: 5,
                ..
            }
        ),
        "{error}"
    );
    let error = limiter
        .acquire(&other, 6, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "RATE_LIMIT_COST_ABOVE_BURST");
    // A cost of 0 reads the standing without charging.
    assert_eq!(take(&limiter, &other, 0).await.remaining, 5);
    assert_eq!(take(&limiter, &other, 0).await.remaining, 5);
}

/// Every client of the backend shares a limit; other keys and other limits are apart.
pub async fn clients_share_a_limit_and_keys_are_apart(factory: &dyn RateLimitFactory) {
    let first = limiter(factory, hourly(2)).await;
    let second = RateLimiter::new(
        factory.client().await,
        first.name(),
        first.quota(),
        FailurePolicy::FailOpen,
    )
    .expect("a valid limiter");
    let key = unique_key("client");
    assert!(take(&first, &key, 1).await.allowed);
    assert!(take(&second, &key, 1).await.allowed);
    assert!(!take(&first, &key, 1).await.allowed);
    assert!(!take(&second, &key, 1).await.allowed);

    assert!(take(&second, &unique_key("client"), 1).await.allowed);
    let other_limit = limiter(factory, hourly(2)).await;
    assert_eq!(take(&other_limit, &key, 0).await.remaining, 2);
}

/// A check of several limits charges all of them or none.
pub async fn several_limits_are_charged_all_or_none(factory: &dyn RateLimitFactory) {
    let store = factory.client().await;
    let (wide, narrow) = (
        limiter_on(&store, hourly(10)),
        limiter_on(&store, hourly(2)),
    );
    let key = unique_key("client");
    let both = |cost| {
        [
            Part {
                limiter: &wide,
                key: &key,
                cost,
            },
            Part {
                limiter: &narrow,
                key: &key,
                cost,
            },
        ]
    };
    let admitted = check_all(&both(1)).await.expect("a decision");
    assert!(admitted.allowed);
    assert_eq!(
        &*admitted.limit,
        narrow.name(),
        "the binding limit has the fewest left"
    );
    assert_eq!(admitted.remaining, 1);
    let denied = check_all(&both(2)).await.expect("a decision");
    assert!(!denied.allowed);
    assert_eq!(&*denied.limit, narrow.name());
    assert_eq!(
        take(&wide, &key, 0).await.remaining,
        9,
        "the denied check charged nothing"
    );
    assert_eq!(take(&narrow, &key, 0).await.remaining, 1);

    // Every field is the binding part's, its reset-after too.
    let daily = Quota::new(1, Duration::from_secs(86_400))
        .and_then(|q| q.with_burst(10))
        .expect("a valid quota");
    let daily = limiter_on(&store, daily);
    let key = unique_key("client");
    let decision = check_all(&[
        Part {
            limiter: &daily,
            key: &key,
            cost: 1,
        },
        Part {
            limiter: &narrow,
            key: &key,
            cost: 1,
        },
    ])
    .await
    .expect("a decision");
    assert_eq!(&*decision.limit, narrow.name());
    about(
        decision.reset_after,
        Duration::from_secs(3600),
        "the binding part's reset-after",
    );
}

/// Calls made at the same time are decided one after another, each all or none: of 30 single
/// charges of a burst of 10, exactly 10 are admitted, counting down from 9 to 0; of 12 checks of
/// two limits, exactly as many as the narrower admits, and only they charge the wider.
pub async fn concurrent_calls_are_each_all_or_none(factory: &dyn RateLimitFactory) {
    let store = factory.client().await;
    let [single, wide, narrow] = [10, 10, 4].map(|burst| limiter_on(&store, hourly(burst)));
    let (key, both_key) = (unique_key("client"), unique_key("client"));
    let singles = futures::future::join_all((0..30).map(|_| take(&single, &key, 1)));
    let both = [&wide, &narrow].map(|limiter| Part {
        limiter,
        key: &both_key,
        cost: 1,
    });
    let checks = futures::future::join_all((0..12).map(|_| check_all(&both)));
    let (singles, checks) = futures::join!(singles, checks);
    let mut remaining: Vec<u32> = singles
        .iter()
        .filter(|d| d.allowed)
        .map(|d| d.remaining)
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..10).collect::<Vec<_>>(), "{singles:?}");
    let admitted = checks
        .into_iter()
        .map(|c| c.expect("a decision"))
        .filter(|d| d.allowed)
        .count();
    assert_eq!(admitted, 4);
    assert_eq!(
        take(&wide, &both_key, 0).await.remaining,
        6,
        "denied checks charged nothing"
    );
}

/// A quota changed at run time keeps the keys' state: a lower burst denies at once, a higher
/// one admits what the old one did and more, the same quota again changes nothing.
pub async fn a_changed_quota_keeps_the_state(factory: &dyn RateLimitFactory) {
    let limiter = limiter(factory, hourly(4)).await;
    let key = unique_key("client");
    assert!(take(&limiter, &key, 3).await.allowed);
    for _ in 0..1000 {
        limiter.set_quota(hourly(4));
        assert_eq!(
            take(&limiter, &key, 0).await.remaining,
            1,
            "the same quota changes nothing"
        );
    }
    limiter.set_quota(hourly(2));
    let lowered = take(&limiter, &key, 1).await;
    assert!(!lowered.allowed, "3 owed against a burst of 2: {lowered:?}");
    about(
        lowered.retry_after,
        Duration::from_secs(2 * 3600),
        "retry-after",
    );
    limiter.set_quota(hourly(10));
    let raised = take(&limiter, &key, 7).await;
    assert!(raised.allowed, "3 owed against a burst of 10: {raised:?}");
    assert_eq!(raised.remaining, 0);
    // A lower rate holds past the old rate's reset: the denial keeps what is owed.
    let key = unique_key("client");
    limiter.set_quota(Quota::new(10, Duration::from_millis(500)).expect("a valid quota"));
    assert!(take(&limiter, &key, 10).await.allowed);
    limiter.set_quota(hourly(10));
    let lowered = take(&limiter, &key, 1).await;
    assert!(!lowered.allowed, "{lowered:?}");
    // Past the 500 ms TTL the old rate gave the state.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = take(&limiter, &key, 1).await;
    assert!(
        !later.allowed,
        "owed at the new rate after the old one's reset: {later:?}"
    );
    // Time that passed before the switch drained at the old rate, 72,000 times faster.
    assert!(later.retry_after > Duration::from_secs(1800), "{later:?}");
    // A faster rate drains what is owed faster: 10 per second empties in about a second.
    limiter.set_quota(Quota::new(10, Duration::from_secs(1)).expect("a valid quota"));
    let faster = take(&limiter, &key, 0).await;
    assert!(faster.reset_after <= Duration::from_secs(1), "{faster:?}");
}

/// Requests return at the rate: after the retry-after a denial gives, the request is admitted;
/// `acquire` sleeps until then, and answers at once when that is beyond its timeout.
pub async fn requests_return_at_the_rate(factory: &dyn RateLimitFactory) {
    let quota = Quota::new(1, Duration::from_millis(300)).expect("a valid quota");
    let fast = limiter(factory, quota).await;
    let key = unique_key("client");
    assert!(take(&fast, &key, 1).await.allowed);
    let denied = take(&fast, &key, 1).await;
    assert!(
        !denied.allowed && denied.retry_after <= Duration::from_millis(300),
        "{denied:?}"
    );
    tokio::time::sleep(denied.retry_after).await;
    assert!(
        take(&fast, &key, 1).await.allowed,
        "admitted after the retry-after"
    );

    let started = Instant::now();
    let waited = fast
        .acquire(&key, 1, Duration::from_secs(60))
        .await
        .expect("a decision");
    assert!(waited.allowed, "{waited:?}");
    assert!(started.elapsed() < Duration::from_millis(300) + SLACK);

    let slow = limiter(factory, hourly(1)).await;
    assert!(take(&slow, &key, 1).await.allowed);
    let started = Instant::now();
    let refused = slow
        .acquire(&key, 1, Duration::from_secs(30))
        .await
        .expect("a decision");
    assert!(!refused.allowed, "{refused:?}");
    assert!(
        started.elapsed() < SLACK,
        "no wait for a retry-after beyond the timeout"
    );
}

/// Bad keys and names are errors that name the argument, and nothing is charged.
pub async fn invalid_arguments_are_rejected(factory: &dyn RateLimitFactory) {
    let store = factory.client().await;
    let error =
        RateLimiter::new(Arc::clone(&store), "", hourly(1), FailurePolicy::FailOpen).unwrap_err();
    assert_eq!(error.details()["argument"], "limit", "{error}");
    let limiter = limiter(factory, hourly(1)).await;
    for key in ["", "bad\nkey"] {
        let error = limiter.try_acquire(key, 1).await.unwrap_err();
        assert_eq!(error.code(), "RATE_LIMIT_INVALID_ARGUMENT", "{error}");
        assert_eq!(error.details()["argument"], "key", "{error}");
    }
    let error = check_all(&[]).await.unwrap_err();
    assert_eq!(error.details()["argument"], "parts");
}

crate::conformance::run_all!(RateLimitFactory, rate_limit_conformance_checks);

/// Rate limiting's checks, declared once: expands to `$callback! { $($prefix)* <every check>, }`.
#[doc(hidden)]
#[macro_export]
macro_rules! rate_limit_conformance_checks {
    ($callback:path; $($prefix:tt)*) => {
        $callback! { $($prefix)*
            the_burst_is_admitted_then_requests_are_denied,
            a_cost_counts_as_that_many_requests,
            clients_share_a_limit_and_keys_are_apart,
            several_limits_are_charged_all_or_none,
            concurrent_calls_are_each_all_or_none,
            a_changed_quota_keeps_the_state,
            requests_return_at_the_rate,
            invalid_arguments_are_rejected,
        }
    };
    ($callback:ident) => {
        $crate::rate_limit_conformance_checks! { $callback; }
    };
}
#[doc(hidden)]
pub use crate::rate_limit_conformance_checks as checks;
