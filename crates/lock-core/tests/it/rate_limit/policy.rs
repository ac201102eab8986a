//! The failure policy: a failing store gives the policy's decision, says so, and is logged once
//! per outage.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use lock_core::rate_limit::telemetry::DECISIONS_TOTAL;
use lock_core::rate_limit::{
    Basis, Charge, FailurePolicy, InMemoryRateLimits, Part, RateLimitError, RateLimitStore,
    RateLimiter, Verdict, check_all,
};
use lock_testkit::logs::CapturedLogs;

/// An in-memory store that fails while `down` is set.
#[derive(Debug, Default)]
struct Flaky {
    inner: InMemoryRateLimits,
    down: AtomicBool,
}

#[async_trait]
impl RateLimitStore for Flaky {
    async fn charge(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, RateLimitError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(RateLimitError::unavailable(
                charges[0].limit,
                "connection refused",
            ));
        }
        self.inner.charge(charges).await
    }
}

fn limiter(store: &Arc<Flaky>, name: &str, policy: FailurePolicy) -> RateLimiter {
    RateLimiter::new(store.clone(), name, "1/1h".parse().unwrap(), policy).unwrap()
}

#[tokio::test]
async fn each_policy_decides_and_says_so_logging_once_per_outage() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let _guard = tracing::subscriber::set_default(subscriber);
    let store = Arc::new(Flaky::default());
    let open = limiter(&store, "gateway", FailurePolicy::FailOpen);
    let closed = limiter(&store, "payments", FailurePolicy::FailClosed);

    store.down.store(true, Ordering::SeqCst);
    for _ in 0..50 {
        let decision = open.try_acquire("client", 1).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.basis, Basis::FailedOpen);
        let decision = closed.try_acquire("client", 1).await.unwrap();
        assert!(!decision.allowed);
        assert_eq!(decision.basis, Basis::FailedClosed);
        assert_eq!(
            decision.admitted().unwrap_err().code(),
            "RATE_LIMIT_UNAVAILABLE"
        );
    }
    // Both limits together fail closed: one closed part is enough.
    let parts = [
        Part {
            limiter: &open,
            key: "client",
            cost: 1,
        },
        Part {
            limiter: &closed,
            key: "client",
            cost: 1,
        },
    ];
    assert_eq!(check_all(&parts).await.unwrap().basis, Basis::FailedClosed);

    store.down.store(false, Ordering::SeqCst);
    assert_eq!(
        open.try_acquire("client", 1).await.unwrap().basis,
        Basis::Counted
    );
    assert!(open.try_acquire("client", 1).await.unwrap().basis == Basis::Counted);

    let text = logs.text();
    assert_eq!(text.matches("rate limit store failed").count(), 2, "{text}");
    assert_eq!(
        text.matches("limit=\"gateway\"").count() + text.matches("limit=gateway").count(),
        2,
        "{text}"
    );
    assert_eq!(text.matches("answers again").count(), 1, "{text}");
}

/// A store failing for every other call (one key of another type in Redis, say) is logged
/// once, not per call; and again a minute later.
#[tokio::test(start_paused = true)]
async fn a_store_failing_every_other_call_is_logged_once_a_minute() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let _guard = tracing::subscriber::set_default(subscriber);
    let store = Arc::new(Flaky::default());
    let gateway = limiter(&store, "gateway", FailurePolicy::FailOpen);
    let flap = || async {
        for _ in 0..20 {
            store.down.store(true, Ordering::SeqCst);
            let failed = gateway.try_acquire("broken", 1).await.unwrap();
            assert_eq!(failed.basis, Basis::FailedOpen);
            store.down.store(false, Ordering::SeqCst);
            let counted = gateway.try_acquire("client", 0).await.unwrap();
            assert_eq!(counted.basis, Basis::Counted);
        }
    };
    flap().await;
    let text = logs.text();
    assert_eq!(text.matches("rate limit store failed").count(), 1, "{text}");
    assert_eq!(text.matches("answers again").count(), 1, "{text}");
    tokio::time::advance(std::time::Duration::from_secs(60)).await;
    flap().await;
    let text = logs.text();
    assert_eq!(text.matches("rate limit store failed").count(), 2, "{text}");
    assert_eq!(text.matches("answers again").count(), 2, "{text}");
}

#[tokio::test(flavor = "current_thread")]
async fn decisions_are_counted_by_outcome_from_zero() {
    let metrics = lock_testkit::metrics::CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let store = Arc::new(Flaky::default());
    let open = limiter(&store, "gateway", FailurePolicy::FailOpen);
    // A first failure must be a rise from 0, or `increase()` alerts never see it.
    let m = metrics.take();
    for outcome in [
        "allowed",
        "denied",
        "failed_open",
        "failed_closed",
        "disabled",
    ] {
        m.assert_registered(DECISIONS_TOTAL, &format!("limit=gateway,outcome={outcome}"));
    }
    m.assert_counter_total(DECISIONS_TOTAL, 0);

    assert!(open.try_acquire("client", 1).await.unwrap().allowed);
    assert!(!open.try_acquire("client", 1).await.unwrap().allowed);
    store.down.store(true, Ordering::SeqCst);
    assert!(open.try_acquire("client", 1).await.unwrap().allowed);
    let m = metrics.take();
    for outcome in ["allowed", "denied", "failed_open"] {
        let labels = format!("limit=gateway,outcome={outcome}");
        assert_eq!(
            m.counter_at(DECISIONS_TOTAL, &labels),
            1,
            "{labels}: {m:#?}"
        );
    }
    m.assert_counter_total(DECISIONS_TOTAL, 3);
}

/// Limits checked together count their own verdicts: the one that denied counts `denied`, the
/// one that would have admitted counts nothing, and a read (cost 0) counts nothing.
#[tokio::test(flavor = "current_thread")]
async fn limits_checked_together_count_their_own_verdicts() {
    let metrics = lock_testkit::metrics::CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let store = Arc::new(Flaky::default());
    let quota = "10/1s".parse().unwrap();
    let second =
        RateLimiter::new(store.clone(), "second", quota, FailurePolicy::FailClosed).unwrap();
    let day = limiter(&store, "day", FailurePolicy::FailClosed);
    let parts = [
        Part {
            limiter: &second,
            key: "client",
            cost: 1,
        },
        Part {
            limiter: &day,
            key: "other-client",
            cost: 1,
        },
    ];
    assert!(check_all(&parts).await.unwrap().allowed);
    let _ = metrics.take();
    // `day` has no permit left; `second` has nine.
    assert!(!check_all(&parts).await.unwrap().allowed);
    assert!(second.try_acquire("client", 0).await.unwrap().allowed);
    let m = metrics.take();
    assert_eq!(
        m.counter_at(DECISIONS_TOTAL, "limit=day,outcome=denied"),
        1,
        "{m:#?}"
    );
    m.assert_counter_total(DECISIONS_TOTAL, 1);
    // The store down: a fail-open limit in a call a fail-closed one denies counts nothing.
    let open = RateLimiter::new(store.clone(), "open", quota, FailurePolicy::FailOpen).unwrap();
    store.down.store(true, Ordering::SeqCst);
    let both = [
        Part {
            limiter: &open,
            key: "client",
            cost: 1,
        },
        Part {
            limiter: &day,
            key: "client",
            cost: 1,
        },
    ];
    assert!(!check_all(&both).await.unwrap().allowed);
    assert!(open.try_acquire("client", 0).await.unwrap().allowed);
    assert!(open.try_acquire("client", 1).await.unwrap().allowed);
    let m = metrics.take();
    assert_eq!(
        m.counter_at(DECISIONS_TOTAL, "limit=day,outcome=failed_closed"),
        1,
        "{m:#?}"
    );
    assert_eq!(
        m.counter_at(DECISIONS_TOTAL, "limit=open,outcome=failed_open"),
        1,
        "{m:#?}"
    );
    m.assert_counter_total(DECISIONS_TOTAL, 2);
}

/// A switched-off store's decisions are counted `disabled`.
#[tokio::test(flavor = "current_thread")]
async fn disabled_decisions_are_counted() {
    let metrics = lock_testkit::metrics::CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let store = Arc::new(lock_core::rate_limit::DisabledRateLimits);
    let quota = "1/1h".parse().unwrap();
    let off = RateLimiter::new(store, "off", quota, FailurePolicy::FailClosed).unwrap();
    let _ = metrics.take();
    assert!(off.try_acquire("client", 1).await.unwrap().allowed);
    let m = metrics.take();
    assert_eq!(
        m.counter_at(DECISIONS_TOTAL, "limit=off,outcome=disabled"),
        1,
        "{m:#?}"
    );
}
