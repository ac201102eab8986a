//! The starter as a service sees it: configuration in, a working lock out; the disabled mode;
//! the override point.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lock_starter::StartError;
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::lock::InMemoryLock;
use lock_starter::prelude::*;
use lock_testkit::RedisServer;

fn config(toml: &str) -> Figment {
    Figment::from(Toml::string(toml))
}

/// A starter built from the TOML text `toml` alone.
async fn start(toml: &str) -> LockStarter {
    LockStarter::builder()
        .figment(config(toml))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_starter_guards_a_section_on_real_redis() {
    let redis = RedisServer::start().await.unwrap();
    let starter = start(&format!(
        "[telco.platform.lock]\nwait-time = \"250ms\"\ninstance-id = \"billing-7f9c\"\n\
             [telco.platform.lock.redis]\naddress = \"{}\"\n",
        redis.url()
    ))
    .await;
    assert!(starter.is_enabled());
    assert_eq!(starter.settings().wait_time, Duration::from_millis(250));
    let lock = starter.lock().unwrap();
    let invoices = lock
        .with_lock("bill-run:2026-11", Lease::Watchdog, || async { 1204 })
        .await
        .unwrap();
    assert_eq!(invoices, 1204);

    // The configured wait time and instance id are what a contender sees.
    let held = lock
        .acquire("bill-run:2026-12", Lease::Watchdog)
        .await
        .unwrap();
    assert!(held.owner().starts_with("billing-7f9c/"));
    let err = lock
        .acquire("bill-run:2026-12", Lease::Watchdog)
        .await
        .unwrap_err();
    assert_eq!(err.details()["holder"], held.owner());
    assert!(err.details()["waitedMs"].parse::<u64>().unwrap() >= 250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_opens_no_connection_and_says_so_when_the_lock_is_requested() {
    let redis = RedisServer::start().await.unwrap();
    let baseline = redis.connected_clients().await.unwrap();
    let starter = start(&format!(
        "[telco.platform.lock]\nenabled = false\n[telco.platform.lock.redis]\naddress = \"{}\"\n",
        redis.url()
    ))
    .await;
    assert!(!starter.is_enabled());
    let err = starter.lock().unwrap_err();
    assert_eq!(err.code(), "LOCK_DISABLED");
    assert_eq!(err.http_status(), 503);
    let text = err.to_string();
    assert!(
        text.contains("telco.platform.lock.enabled = false"),
        "{text}"
    );
    assert!(text.contains("no Redis connection"), "{text}");
    assert_eq!(
        redis.connected_clients().await.unwrap(),
        baseline,
        "a disabled starter connected to Redis"
    );
}

mockall::mock! {
    Lock {}
    impl std::fmt::Debug for Lock {
        fn fmt<'a>(&self, f: &mut std::fmt::Formatter<'a>) -> std::fmt::Result;
    }
    #[async_trait::async_trait]
    impl DistributedLock for Lock {
        fn namespace(&self) -> &str;
        async fn acquire_lease(&self, key: &str, options: AcquireOptions) -> Result<LockHandle, LockError>;
        async fn shutdown(&self, timeout: Duration) -> ShutdownSummary;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_replaces_the_redis_lock_entirely() {
    let redis = RedisServer::start().await.unwrap();
    let baseline = redis.connected_clients().await.unwrap();
    let mut mock = MockLock::new();
    mock.expect_namespace().return_const("mock".to_owned());
    mock.expect_acquire_lease()
        .withf(|key, options| key == "reaper" && options.wait_override() == Some(Duration::ZERO))
        .times(1)
        .returning(|key, _| Err(LockError::backend_unavailable(key, "from the mock")));
    mock.expect_shutdown()
        .withf(|timeout| *timeout == lock_starter::lock::limits::DEFAULT_SHUTDOWN_TIMEOUT)
        .times(1)
        .returning(|_| ShutdownSummary::default());
    let starter = LockStarter::builder()
        .figment(config(&format!(
            "[telco.platform.lock.redis]\naddress = \"{}\"\n",
            redis.url()
        )))
        .lock(Arc::new(mock))
        .build()
        .await
        .unwrap();
    let runs = AtomicU32::new(0);
    let err = starter
        .lock()
        .unwrap()
        .with_lock(
            "reaper",
            AcquireOptions::new(Lease::Watchdog)
                .wait_time(Duration::ZERO)
                .unwrap(),
            || async { runs.fetch_add(1, Ordering::SeqCst) },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("from the mock"), "{err}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // The starter's shutdown reaches the override (with the starter's default bound).
    assert!(starter.shutdown().await.is_complete());
    assert_eq!(
        redis.connected_clients().await.unwrap(),
        baseline,
        "the override still connected to Redis"
    );

    // The in-memory lock is the override a service's unit tests use.
    let starter = LockStarter::builder()
        .figment(Figment::new())
        .lock(Arc::new(InMemoryLock::new()))
        .build()
        .await
        .unwrap();
    let value = starter
        .lock()
        .unwrap()
        .with_lock("k", Lease::Watchdog, || async { 7 })
        .await
        .unwrap();
    assert_eq!(value, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_fails_start_up_naming_key_value_and_source() {
    let err = LockStarter::builder()
        .figment(config(
            "[telco.platform.lock]\nwatchdog-timeout = \"5 parsecs\"\n",
        ))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::Config(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("telco.platform.lock.watchdog-timeout"),
        "{text}"
    );
    assert!(text.contains("5 parsecs"), "{text}");
    assert!(text.contains("accepted"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acknowledgement_keys_reach_the_redis_lock() {
    // No replica: with min-replicas = 1 every grant must be handed back, so the acquisition
    // failing with replication_unconfirmed proves both keys were passed on.
    let redis = RedisServer::start().await.unwrap();
    let starter = start(&format!(
        "[telco.platform.lock]\nmin-replicas = 1\nreplica-sync-timeout = \"50ms\"\n\
             wait-time = \"0s\"\n[telco.platform.lock.redis]\naddress = \"{}\"\n",
        redis.url()
    ))
    .await;
    assert_eq!(starter.settings().min_replicas, 1);
    let lock = starter.lock().unwrap();
    let err = lock
        .acquire("bill-run:2026-11", Lease::Watchdog)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "LOCK_ACQUISITION_FAILED", "{err}");
    assert_eq!(err.details()["reason"], "replication_unconfirmed", "{err}");
    assert_eq!(err.details()["requiredReplicas"], "1", "{err}");
    assert_eq!(err.details()["acknowledgedReplicas"], "0", "{err}");
    // The grant was handed back: the key is free (no lease left behind).
    let key = redis.cmd(&["KEYS", "*bill-run*"]).await.unwrap();
    assert!(!key.contains("H|"), "{key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_ca_file_key_reaches_the_redis_lock() {
    let certs = lock_testkit::TestCertificates::generate_temp().unwrap();
    let redis = RedisServer::builder().tls(&certs).start().await.unwrap();
    let starter = start(&format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\ntls.ca-file = \"{}\"\n",
        redis.tls_url(),
        certs.ca.display()
    ))
    .await;
    let lock = starter.lock().unwrap();
    // Without the CA file the system roots would reject the test CA and this would fail.
    let answer = lock
        .with_lock("tls-section", Lease::Watchdog, || async { 42 })
        .await
        .unwrap();
    assert_eq!(answer, 42);
}

/// Idempotent execution as a service gets it from the starter: on the lock's own two
/// connections (a waiting duplicate included), with the configured defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_runs_on_the_locks_connections_with_the_configured_defaults() {
    let redis = RedisServer::start().await.unwrap();
    let baseline = redis.connected_clients().await.unwrap();
    let starter = start(&format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n\
             [telco.platform.lock.idempotency]\nwait-time = \"300ms\"\nresult-ttl = \"20s\"\n",
        redis.url()
    ))
    .await;
    let opened = redis.connected_clients().await.unwrap() - baseline;
    let idempotency = starter.idempotency().clone();
    assert_eq!(idempotency.settings().wait_time, Duration::from_millis(300));

    let runs = Arc::new(AtomicU32::new(0));
    let (first, duplicate) = {
        let call = |value: u32| {
            let (idempotency, runs) = (idempotency.clone(), Arc::clone(&runs));
            async move {
                idempotency
                    .execute(
                        "ticket-create:req-1",
                        &IdempotencyOptions::new(),
                        || async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            Ok::<_, IdempotencyError>(value)
                        },
                    )
                    .await
            }
        };
        tokio::join!(call(1), call(2))
    };
    let (first, duplicate) = (first.unwrap(), duplicate.unwrap());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(first.get(), duplicate.get());
    assert_ne!(first.is_replay(), duplicate.is_replay());
    assert_eq!(
        redis.connected_clients().await.unwrap() - baseline,
        opened,
        "no connection of its own"
    );
    let ttl: u64 = redis
        .cmd(&["PTTL", "lock:idempotency:{ticket-create:req-1}"])
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        ttl <= 20_000 && ttl > 10_000,
        "result-ttl is the configured 20 s: {ttl} ms"
    );

    // The configured duplicate wait: 300 ms, then IDEMPOTENCY_IN_PROGRESS (409).
    let held = idempotency
        .begin::<u32>("ticket-create:req-2", &IdempotencyOptions::new())
        .await
        .unwrap();
    let error = idempotency
        .execute(
            "ticket-create:req-2",
            &IdempotencyOptions::new(),
            || async { Ok::<u32, IdempotencyError>(0) },
        )
        .await
        .unwrap_err();
    assert_eq!(error.http_status(), 409, "{error}");
    drop(held);
}

/// Master/sub locks from the starter: on the Redis lock, with the configured branch wait; a
/// branch registered and released by another client of the same Redis (a consumer pod).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_locks_wait_for_a_branch_released_by_another_pod() {
    let redis = RedisServer::start().await.unwrap();
    let toml = format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n[telco.platform.lock.branches]\nwait-time = \"20s\"\n",
        redis.url()
    );
    let producer = start(&toml).await;
    let consumer = start(&toml).await;
    assert_eq!(
        producer.master_locks().branch_wait(),
        Duration::from_secs(20)
    );
    let (tokens, mut received) = tokio::sync::mpsc::unbounded_channel();
    let consumer_task = tokio::spawn(async move {
        let token: lock_starter::branches::BranchToken = received.recv().await.unwrap();
        consumer
            .master_locks()
            .release_branch(&token)
            .await
            .unwrap()
    });
    let outcome = producer
        .master_locks()
        .with_master_lock("ticket:42", Lease::Watchdog, |master| async move {
            let token = master.register_branch("search-index").await.unwrap();
            tokens.send(token).unwrap(); // the message header, in a service
        })
        .await
        .unwrap();
    assert!(outcome.is_complete(), "{:?}", outcome.branches);
    assert_eq!(
        consumer_task.await.unwrap(),
        lock_starter::branches::BranchRelease::Released
    );
    assert_eq!(
        redis.cmd(&["DBSIZE"]).await.unwrap(),
        "1",
        "only the lock's fencing counter is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switched_off_idempotent_calls_run_their_action_every_time() {
    let starter = start("[telco.platform.lock]\nenabled = false\n").await;
    let runs = AtomicU32::new(0);
    for _ in 0..2 {
        let result = starter
            .idempotency()
            .execute(
                "ticket-create:req-3",
                &IdempotencyOptions::new(),
                || async { Ok::<_, IdempotencyError>(runs.fetch_add(1, Ordering::SeqCst)) },
            )
            .await
            .unwrap();
        assert!(!result.is_replay());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
