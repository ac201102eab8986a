//! Idempotent execution on the in-memory store: the conformance suite, and what the protocol
//! does on Tokio's paused clock (leases, delayed start, manual completion, cancellation).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::idempotency::{
    Begun, Claim, DisabledIdempotencyStore, Idempotency, IdempotencyError, IdempotencyOptions,
    IdempotencySettings, IdempotencyStore, Idempotent, InMemoryIdempotencyStore, NotStored,
};
use lock_core::lock::Lease;

mod conformance {
    use super::*;

    lock_core::conformance_tests!(idempotency, async {
        Arc::new(InMemoryIdempotencyStore::new())
    });
}

fn on(store: &Arc<InMemoryIdempotencyStore>) -> Idempotency {
    Idempotency::new(store.clone(), IdempotencySettings::default()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_crashed_owners_record_frees_itself_within_the_watchdog_timeout() {
    let store = Arc::new(InMemoryIdempotencyStore::new());
    let idempotency = on(&store);
    // A first caller that never completes and stops renewing: a crashed process.
    let crashed = store.new_owner();
    let claim = store
        .claim("create:1", &crashed, "", Duration::from_secs(30), None)
        .await;
    assert_eq!(claim.unwrap(), Claim::Owner);
    let started = tokio::time::Instant::now();
    let result = idempotency
        .execute("create:1", &IdempotencyOptions::new(), || async {
            Ok::<_, IdempotencyError>(5)
        })
        .await
        .unwrap();
    assert_eq!(result, Idempotent::Executed(5));
    let waited = started.elapsed();
    assert!(
        waited <= Duration::from_secs(30),
        "took over after {waited:?}"
    );
    assert!(
        waited >= Duration::from_secs(29),
        "took over before the lease ended: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_keeps_a_long_action_owned_past_its_timeout() {
    let store = Arc::new(InMemoryIdempotencyStore::new());
    let idempotency = on(&store);
    let runs = Arc::new(AtomicUsize::new(0));
    let long = {
        let (idempotency, runs) = (idempotency.clone(), Arc::clone(&runs));
        tokio::spawn(async move {
            idempotency
                .execute("report:7", &IdempotencyOptions::new(), || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(95)).await; // 3 watchdog timeouts
                    Ok::<_, IdempotencyError>(String::from("done"))
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let duplicate = idempotency
        .execute("report:7", &IdempotencyOptions::new(), || async {
            Ok::<_, IdempotencyError>(String::from("again"))
        })
        .await
        .unwrap();
    assert_eq!(duplicate, Idempotent::Replayed("done".to_owned()));
    assert_eq!(
        long.await.unwrap().unwrap(),
        Idempotent::Executed("done".to_owned())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_start_lets_a_burst_join_the_first_caller() {
    let store = Arc::new(InMemoryIdempotencyStore::new());
    let idempotency = on(&store);
    let options = IdempotencyOptions::new()
        .delayed_start(Duration::from_millis(500))
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for i in 0..5_u64 {
        let (idempotency, options, runs) =
            (idempotency.clone(), options.clone(), Arc::clone(&runs));
        calls.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100 * i)).await; // a burst over 400 ms
            idempotency
                .execute("notify:9", &options, || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, IdempotencyError>(i)
                })
                .await
        }));
    }
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().into_inner(), 0);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn begin_completes_after_the_commit_and_abandon_lets_a_retry_run() {
    let store = Arc::new(InMemoryIdempotencyStore::new());
    let idempotency = on(&store);
    let options = IdempotencyOptions::new();
    // Rolled back: abandon, and the retry runs.
    let Begun::Owner(scope) = idempotency.begin::<u32>("tx:1", &options).await.unwrap() else {
        panic!("a fresh key is owned");
    };
    assert!(scope.abandon().await.unwrap());
    let Begun::Owner(scope) = idempotency.begin::<u32>("tx:1", &options).await.unwrap() else {
        panic!("an abandoned key is owned again");
    };
    // Committed: complete, and the retry replays.
    scope.complete(&41_u32).await.unwrap();
    assert!(matches!(
        idempotency.begin::<u32>("tx:1", &options).await.unwrap(),
        Begun::Replayed(41)
    ));
    // A stored result can be forgotten on purpose.
    assert!(idempotency.forget("tx:1").await.unwrap());
    assert!(matches!(
        idempotency.begin::<u32>("tx:1", &options).await.unwrap(),
        Begun::Owner(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_frees_the_key_at_once() {
    let store = Arc::new(InMemoryIdempotencyStore::new());
    let idempotency = on(&store);
    let call = {
        let idempotency = idempotency.clone();
        tokio::spawn(async move {
            idempotency
                .execute("create:2", &IdempotencyOptions::new(), || {
                    std::future::pending::<Result<(), IdempotencyError>>()
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    call.abort();
    let _ = call.await;
    tokio::task::yield_now().await;
    let claim = store
        .claim(
            "create:2",
            &store.new_owner(),
            "",
            Duration::from_secs(1),
            None,
        )
        .await;
    assert_eq!(
        claim.unwrap(),
        Claim::Owner,
        "the dropped call abandoned its record"
    );
}

#[tokio::test]
async fn a_result_that_does_not_fit_is_a_typed_error_of_complete() {
    let store = Arc::new(InMemoryIdempotencyStore::new());
    let settings = IdempotencySettings {
        max_result_bytes: 8,
        ..IdempotencySettings::default()
    };
    let idempotency = Idempotency::new(store.clone(), settings).unwrap();
    let Begun::Owner(scope) = idempotency
        .begin::<String>("big:1", &IdempotencyOptions::new())
        .await
        .unwrap()
    else {
        panic!("owned");
    };
    let error = scope
        .complete("far more than eight bytes")
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            IdempotencyError::ResultNotStored {
                reason: NotStored::TooLarge { size: 27, max: 8 },
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.code(), "IDEMPOTENCY_RESULT_NOT_STORED");
    let claim = store
        .claim(
            "big:1",
            &store.new_owner(),
            "",
            Duration::from_secs(1),
            None,
        )
        .await;
    assert_eq!(claim.unwrap(), Claim::Owner, "no record is left behind");
}

#[tokio::test]
async fn a_stored_result_of_another_type_is_unreadable_not_re_run() {
    let idempotency = Idempotency::in_memory();
    let options = IdempotencyOptions::new();
    idempotency
        .execute("typed:1", &options, || async {
            Ok::<_, IdempotencyError>(String::from("text"))
        })
        .await
        .unwrap();
    let error = idempotency
        .execute("typed:1", &options, || async {
            Ok::<u64, IdempotencyError>(1)
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "IDEMPOTENCY_RESULT_UNREADABLE", "{error}");
}

#[tokio::test]
async fn bad_keys_and_options_name_what_is_wrong_and_run_nothing() {
    let idempotency = Idempotency::in_memory();
    let never = || async { panic!("must not run") as Result<(), IdempotencyError> };
    let error = idempotency
        .execute("", &IdempotencyOptions::new(), never)
        .await
        .unwrap_err();
    assert!(
        error.to_string().starts_with(
            "invalid idempotency key \"\": it is empty; an idempotency key is 1 to 512 bytes"
        ),
        "{error}"
    );
    assert_eq!(error.http_status(), 500);
    // Each option is refused where it is set, naming the option, the value and the range.
    let options = IdempotencyOptions::new;
    let cases = [
        (
            options().wait_time(Duration::from_secs(7200)),
            "invalid wait_time \"2 h\": accepted: 0 to 1 h",
        ),
        (
            options().result_ttl(Duration::from_millis(10)),
            "invalid result_ttl \"10 ms\": accepted: 1 s to 168 h",
        ),
        (
            options().delayed_start(Duration::from_secs(3601)),
            "invalid delayed_start \"3601 s\": accepted: 0 to 1 h",
        ),
        (
            options().lease(Lease::Fixed(Duration::from_millis(50))),
            "invalid lease \"50 ms\"",
        ),
        (
            options().fingerprint("f".repeat(513)),
            "invalid fingerprint \"ffff",
        ),
    ];
    for (set, expected) in cases {
        let error = set.unwrap_err();
        assert!(error.to_string().starts_with(expected), "{error}");
        assert_eq!(error.code(), "IDEMPOTENCY_INVALID_ARGUMENT");
    }
    assert!(
        options()
            .fingerprint("f".repeat(513))
            .unwrap_err()
            .to_string()
            .ends_with("accepted: at most 512 bytes (pass a hash of the request)")
    );
    assert!(options().wait_time(Duration::from_secs(3600)).is_ok());
    assert!(options().fingerprint("f".repeat(512)).is_ok());
    // A delayed start that a fixed lease would not outlast is refused by the call, in
    // either order of setting, and nothing runs.
    let fixed = Lease::Fixed(Duration::from_millis(300));
    for delayed in [
        options()
            .lease(fixed)
            .unwrap()
            .delayed_start(Duration::from_secs(1)),
        options()
            .delayed_start(Duration::from_millis(300))
            .unwrap()
            .lease(fixed),
    ] {
        let error = idempotency
            .execute("delayed", &delayed.unwrap(), never)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "IDEMPOTENCY_INVALID_ARGUMENT");
        assert!(
            error.to_string().ends_with(
                "accepted: shorter than the fixed lease (300 ms), which the wait spends"
            ),
            "{error}"
        );
    }
    let shorter = options()
        .lease(fixed)
        .unwrap()
        .delayed_start(Duration::from_millis(299));
    let ran = idempotency
        .execute("delayed", &shorter.unwrap(), || async {
            Ok::<_, IdempotencyError>(1)
        })
        .await;
    assert_eq!(ran.unwrap().into_inner(), 1);
    let bad = IdempotencySettings {
        max_result_bytes: 0,
        ..IdempotencySettings::default()
    };
    let error = Idempotency::new(Arc::new(InMemoryIdempotencyStore::new()), bad).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("invalid max_result_bytes \"0\": accepted: 1 to"),
        "{error}"
    );
}

#[tokio::test]
async fn disabled_runs_the_action_every_time() {
    let idempotency = Idempotency::new(
        Arc::new(DisabledIdempotencyStore::new("enabled = false")),
        IdempotencySettings::default(),
    )
    .unwrap();
    let runs = AtomicUsize::new(0);
    for _ in 0..3 {
        let result = idempotency
            .execute("create:3", &IdempotencyOptions::new(), || async {
                Ok::<_, IdempotencyError>(runs.fetch_add(1, Ordering::SeqCst))
            })
            .await
            .unwrap();
        assert!(!result.is_replay());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}
