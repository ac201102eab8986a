//! Key, prefix and instance-id edge cases round-tripping through Redis — braces,
//! `%`, unicode, 512-byte names, owner tokens containing `|`, `/`, braces and spaces.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::{SLACK, command_calls, config, server};
use lock_core::lock::{DistributedLock, Lease, ReleaseOutcome};
use tokio::time::Instant;

fn names() -> Vec<String> {
    vec![
        "{".into(),
        "}".into(),
        "{}".into(),
        "}{".into(),
        "a{b}c".into(),
        "%".into(),
        "%7B".into(),
        "%257B".into(),
        "%7D}".into(),
        "ünï cødé 🔒".into(),
        " leading and trailing ".into(),
        "a}:released".into(),
        "\u{2028}line-separator".into(),
        "x".repeat(512),
        "%".repeat(512),
        "{".repeat(512),
        "é".repeat(256),
        "H|1|fake-owner".into(),
    ]
}

/// Every edge-case name: granted, stored under its own key with a TTL, reported to another
/// client as held by the right owner, released, and its release wakes a waiter of another
/// client (pub/sub works on the encoded channel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_case_names_round_trip_and_wake_waiters() {
    let redis = server().await;
    let odd_instance = "pod 7/ü {x}%:H:9";
    let holder = common::connect(config(&redis).instance_id(odd_instance)).await;
    let waiter = common::client(&redis).await;
    let mut keys = HashSet::new();
    for name in names() {
        let key = holder.redis_key(&name);
        assert!(keys.insert(key.clone()), "{name:?} collides: {key}");
        let handle = holder
            .acquire(&name, Lease::Fixed(Duration::from_secs(60)))
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert!(handle.owner().starts_with(odd_instance));
        let value = redis.cmd(&["GET", &key]).await.unwrap();
        assert_eq!(
            value,
            format!("H|{}|{}", handle.fencing_token(), handle.owner()),
            "{name:?}"
        );
        let pttl: i64 = redis.cmd(&["PTTL", &key]).await.unwrap().parse().unwrap();
        assert!(pttl > 50_000, "{name:?}: PTTL {pttl}");

        let err = waiter
            .try_acquire(&name, Lease::Watchdog)
            .await
            .expect_err("a held key was granted");
        assert_eq!(err.details()["reason"], "held_by_another_owner", "{name:?}");
        assert_eq!(err.details()["holder"], handle.owner(), "{name:?}");

        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            let name = name.clone();
            async move {
                let options =
                    common::fixed_waiting(Duration::from_secs(60), Duration::from_secs(30));
                let result = waiter.acquire_with(&name, options).await;
                (result, Instant::now())
            }
        });
        let channel = holder.release_channel(&name);
        assert!(
            common::one_subscriber(&redis, &channel).await,
            "{name:?}: the waiter never subscribed to {channel:?}"
        );
        let released_at = Instant::now();
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        let (result, at) = waiting.await.unwrap();
        let next = result.unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert!(
            at - released_at < SLACK,
            "{name:?}: the waiter was not woken by the release"
        );
        assert!(next.fencing_token() > 0);
        assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// Names one byte too long, empty, or with control characters are rejected before any Redis
/// call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_never_reach_redis() {
    let (redis, [lock]) = common::server_with().await;
    let before = command_calls(&redis).await;
    for name in [
        String::new(),
        "x".repeat(513),
        "é".repeat(256) + "x",
        "a\nb".into(),
        "\u{85}nel".into(),
    ] {
        let err = lock.try_acquire(&name, Lease::Watchdog).await.unwrap_err();
        assert_eq!(err.code(), "LOCK_INVALID_ARGUMENT", "{name:?}");
    }
    let after = command_calls(&redis).await;
    assert_eq!(common::delta(&before, &after, "evalsha"), 0);
}

/// Two clients with prefixes that differ only slightly never see each other's locks; a prefix
/// with `%` and unicode works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_keep_lock_spaces_apart() {
    let redis = server().await;
    let prefixes = ["lock:", "lock", "lock::", "锁%:", "lock:%7B"];
    let mut locks = Vec::new();
    for prefix in prefixes {
        locks.push(common::connect(config(&redis).key_prefix(prefix)).await);
    }
    let mut handles = Vec::new();
    for (lock, prefix) in locks.iter().zip(prefixes) {
        let handle = lock
            .try_acquire("{shared}", Lease::Fixed(Duration::from_secs(60)))
            .await
            .unwrap_or_else(|e| panic!("prefix {prefix:?}: {e}"));
        assert!(lock.redis_key("{shared}").starts_with(prefix));
        handles.push(handle);
    }
    assert_eq!(
        redis.cmd(&["DBSIZE"]).await.unwrap(),
        prefixes.len().to_string()
    );
    for handle in handles {
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
}
