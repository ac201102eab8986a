//! Rate limits as the starter wires them: shared through Redis, and switched off.

use lock_starter::prelude::*;

use crate::common::starter;
use lock_starter::rate_limit::Basis;
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use tracing::instrument::WithSubscriber;

/// A section only a variable made (`…_RATE_LIMITS_SIGN_UP_RATE` makes `sign-up`) serves the
/// name as the code spells it, under the section's name: every spelling, and every call, is
/// one limiter, so two call sites spelling it differently never double the limit.
#[tokio::test]
async fn every_spelling_of_a_limit_is_the_one_limiter() {
    use lock_starter::figment::Figment;
    use lock_starter::figment::providers::{Format, Toml};

    let starter = LockStarter::builder()
        .figment(Figment::from(Toml::string(
            "[telco.platform.lock.rate-limits.sign-up]\nrate = \"3/1h\"\nlocal-batch = 2\n",
        )))
        .lock(std::sync::Arc::new(lock_starter::lock::InMemoryLock::new()))
        .build()
        .await
        .unwrap();
    let limiters = ["sign_up", "SIGN-UP", "sign-up"].map(|name| {
        starter
            .rate_limiter(name, FailurePolicy::FailClosed)
            .unwrap()
    });
    assert_eq!(limiters[0].quota().to_string(), "3/1h");
    assert_eq!(limiters[0].local_batch_size(), 2);
    let mut admitted = 0;
    for limiter in limiters.iter().cycle().take(9) {
        assert_eq!(limiter.name(), "sign-up");
        admitted += u32::from(limiter.try_acquire("client-42", 1).await.unwrap().allowed);
    }
    assert_eq!(admitted, 3);
    // Another policy is the same limit: a quota changed through it holds for every call site.
    let open = starter
        .rate_limiter("sign-up", FailurePolicy::FailOpen)
        .unwrap();
    assert_eq!(open.policy(), FailurePolicy::FailOpen);
    open.set_quota("1/1h".parse().unwrap());
    assert_eq!(limiters[0].quota().to_string(), "1/1h");
    assert_eq!(limiters[0].policy(), FailurePolicy::FailClosed);
}

/// Two services on one Redis share a configured limit, even when their configurations spell
/// its section differently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_starters_on_one_redis_share_a_configured_limit() {
    let redis = RedisServer::start().await.unwrap();
    let config = |section: &str| {
        format!(
            "[telco.platform.lock.redis]\naddress = \"{}\"\n\
             [telco.platform.lock.rate-limits.{section}]\nrate = \"3/1h\"\n",
            redis.url()
        )
    };
    let (a, b) = (
        starter(&config("LOGIN")).await,
        starter(&config("login")).await,
    );
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

/// A configured local batch: one `EVALSHA` per batch of a key; another limit asks every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_local_batch_asks_redis_once_per_batch() {
    let redis = RedisServer::start().await.unwrap();
    let config = format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n\
         [telco.platform.lock.rate-limits.api]\nrate = \"100000/1s\"\nlocal-batch = 20\n\
         [telco.platform.lock.rate-limits.login]\nrate = \"100000/1s\"\n",
        redis.url()
    );
    let starter = starter(&config).await;
    let api = starter
        .rate_limiter("api", FailurePolicy::FailClosed)
        .unwrap();
    let login = starter
        .rate_limiter("login", FailurePolicy::FailClosed)
        .unwrap();
    assert_eq!((api.local_batch_size(), login.local_batch_size()), (20, 0));
    login.try_acquire("warm", 1).await.unwrap();
    let evalsha = || async {
        redis
            .command_calls()
            .await
            .unwrap()
            .get("evalsha")
            .copied()
            .unwrap_or(0)
    };
    let before = evalsha().await;
    for _ in 0..100 {
        assert!(api.try_acquire("client-42", 1).await.unwrap().allowed);
    }
    let batched = evalsha().await;
    assert_eq!(batched - before, 100 / 20);
    for _ in 0..100 {
        assert!(login.try_acquire("client-42", 1).await.unwrap().allowed);
    }
    assert_eq!(evalsha().await - batched, 100);
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
    let configured = starter(
        "[telco.platform.lock]\nenabled = false\n\
         [telco.platform.lock.rate-limits.api]\nrate = \"5/1s\"\n",
    )
    .await;
    let error = configured
        .rate_limiter("apii", FailurePolicy::FailOpen)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid limit \"apii\": no quota is configured for it (did you mean \"api\"?); set telco.platform.lock.rate-limits.apii.rate (configured: api)"
    );
    let starter = starter("[telco.platform.lock]\nenabled = false\n").await;
    for (name, expected) in [
        (
            "login",
            "invalid limit \"login\": no quota is configured for it; set telco.platform.lock.rate-limits.login.rate (configured: none)",
        ),
        // A name TOML cannot write bare is shown quoted, as a TOML file writes it.
        (
            "new api",
            "invalid limit \"new api\": no quota is configured for it; set telco.platform.lock.rate-limits.\"new api\".rate (configured: none)",
        ),
        // A name no key could hold says so, rather than naming a key.
        (
            "",
            "invalid limit \"\": it is empty; accepted: names of 1 to 512 bytes of UTF-8 with no control characters, no `.` and no whitespace at either end",
        ),
        (
            " ",
            "invalid limit \" \": begins or ends with whitespace; accepted: names of 1 to 512 bytes of UTF-8 with no control characters, no `.` and no whitespace at either end",
        ),
        (
            "v1.login",
            "invalid limit \"v1.login\": contains `.`, which a configuration key cannot hold; accepted: names of 1 to 512 bytes of UTF-8 with no control characters, no `.` and no whitespace at either end",
        ),
    ] {
        let error = starter
            .rate_limiter(name, FailurePolicy::FailOpen)
            .unwrap_err();
        assert_eq!(error.to_string(), expected);
    }
}
