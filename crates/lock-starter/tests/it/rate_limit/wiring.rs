//! Rate limits as the starter wires them: shared through Redis, and switched off.

use lock_starter::prelude::*;

use crate::common::starter;
use lock_starter::rate_limit::Basis;
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use tracing::instrument::WithSubscriber;

/// Two services on one Redis share a configured limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_starters_on_one_redis_share_a_configured_limit() {
    let redis = RedisServer::start().await.unwrap();
    let config = format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n\
         [telco.platform.lock.rate-limits.login]\nrate = \"3/1h\"\n",
        redis.url()
    );
    let (a, b) = (starter(&config).await, starter(&config).await);
    let (a, b) = (
        a.rate_limiter("login", FailurePolicy::FailClosed).unwrap(),
        b.rate_limiter("login", FailurePolicy::FailClosed).unwrap(),
    );
    let mut admitted = 0;
    for limiter in [&a, &b, &a, &b, &a, &b] {
        let decision = limiter.try_acquire("client-42", 1).await.unwrap();
        assert_eq!(decision.basis, Basis::Counted);
        admitted += u32::from(decision.allowed);
    }
    assert_eq!(admitted, 3);
    let stored = redis
        .cmd(&["EXISTS", "lock:rate:{client-42}:login"])
        .await
        .unwrap();
    assert_eq!(stored.trim(), "1");
}

/// `enabled = false`: every request is admitted, and one `WARN` at start-up says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_limits_admit_everything_and_warn_once_at_start_up() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let starter = starter(
        "[telco.platform.lock]\nenabled = false\n\
         [telco.platform.lock.rate-limits.login]\nrate = \"1/1h\"\n",
    )
    .with_subscriber(subscriber)
    .await;
    let login = starter
        .rate_limiter("login", FailurePolicy::FailClosed)
        .unwrap();
    for _ in 0..10 {
        let decision = login.try_acquire("client-42", 1).await.unwrap();
        assert!(
            decision.allowed && decision.basis == Basis::Disabled,
            "{decision:?}"
        );
    }
    let text = logs.text();
    assert_eq!(
        text.matches("rate limiting is switched off").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("telco.platform.lock.enabled = false"),
        "{text}"
    );
}

/// An unconfigured name is an error naming the configured ones and the key to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfigured_limit_names_the_key_to_set() {
    let starter = starter("[telco.platform.lock]\nenabled = false\n").await;
    let error = starter
        .rate_limiter("login", FailurePolicy::FailOpen)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid limit \"login\": no quota is configured for it; set telco.platform.lock.rate-limits.login.rate (configured: none)"
    );
}
