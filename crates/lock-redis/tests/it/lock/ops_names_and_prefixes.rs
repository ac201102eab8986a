//! The operators' API (`status`, `list`, `force_release`) with odd names, glob patterns, other
//! prefixes and keys that are not locks, against a real redis-server.

use crate::common;

use std::time::Duration;

use common::{SLACK, client, config, server};
use lock_core::lock::{DistributedLock, Lease, LostReason, ReleaseOutcome};
use lock_redis::lock::{ForceReleased, LockState, RedisLock};

const LEASE: Lease = Lease::Fixed(Duration::from_secs(30));

async fn names(lock: &RedisLock, pattern: Option<&str>) -> Vec<String> {
    let mut names: Vec<String> = lock
        .list(pattern, 100)
        .await
        .unwrap_or_else(|e| panic!("list({pattern:?}) failed: {e}"))
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.sort();
    names
}

/// A pattern is matched against lock *names*, as documented ("held locks whose names match the
/// glob"), so a pattern naming `%`, `{` or `}` must find the lock, although its key holds them
/// percent-encoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_patterns_match_names_with_percent_and_braces() {
    let (_redis, [holder]) = common::server_with().await;
    let mut handles = Vec::new();
    for name in ["50%", "a{b}", "x}y", "plain"] {
        handles.push(holder.acquire(name, LEASE).await.unwrap());
    }
    assert_eq!(names(&holder, Some("50%")).await, ["50%"]);
    assert_eq!(names(&holder, Some("5*%")).await, ["50%"]);
    assert_eq!(names(&holder, Some("a{b}")).await, ["a{b}"]);
    assert_eq!(names(&holder, Some("a{*")).await, ["a{b}"]);
    assert_eq!(names(&holder, Some("*}*")).await, ["a{b}", "x}y"]);
    assert_eq!(names(&holder, None).await, ["50%", "a{b}", "plain", "x}y"]);
}

/// Names holding glob metacharacters, matched literally with `\` escapes or as globs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_handles_glob_metacharacters_and_unicode_in_names() {
    let (_redis, [holder]) = common::server_with().await;
    let mut handles = Vec::new();
    for name in ["a*b", "a?b", "a[1]", "a\\b", "aXb", "ünï cødé"] {
        handles.push(holder.acquire(name, LEASE).await.unwrap());
    }
    assert_eq!(names(&holder, Some("a\\*b")).await, ["a*b"]);
    assert_eq!(names(&holder, Some("a\\?b")).await, ["a?b"]);
    assert_eq!(names(&holder, Some("a\\[1\\]")).await, ["a[1]"]);
    assert_eq!(names(&holder, Some("a\\\\b")).await, ["a\\b"]);
    assert_eq!(
        names(&holder, Some("a?b")).await,
        ["a*b", "a?b", "aXb", "a\\b"]
    );
    assert_eq!(names(&holder, Some("ünï*")).await, ["ünï cødé"]);
}

/// One key under the prefix that holds something else than a lock value must not make the whole
/// listing fail: on-call runs `list` exactly when something is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_skips_a_key_under_the_prefix_that_holds_no_lock_value() {
    let (redis, [holder]) = common::server_with().await;
    let _held = holder.acquire("real", LEASE).await.unwrap();
    redis
        .cmd(&["SET", "lock:{garbage}", "hello"])
        .await
        .unwrap();
    redis
        .cmd(&["SET", "lock:{half}", "H|notanumber|x"])
        .await
        .unwrap();
    redis.cmd(&["HSET", "lock:{hash}", "f", "v"]).await.unwrap();
    redis.cmd(&["SET", "lock:plain-key", "v"]).await.unwrap();
    assert_eq!(names(&holder, None).await, ["real"]);
    // status of such a key itself is an error naming it, not a panic.
    let error = holder.status("garbage").await.unwrap_err();
    assert!(error.to_string().contains("no lock value"), "{error}");
}

/// A custom prefix with glob metacharacters lists its own locks only, not those of a prefix the
/// unescaped glob would also match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_with_a_custom_prefix_sees_only_its_own_locks() {
    let redis = server().await;
    let odd = common::connect(config(&redis).key_prefix("app*[1]?:")).await;
    let other = common::connect(config(&redis).key_prefix("appX1Y:")).await;
    let plain = client(&redis).await;
    let _a = odd.acquire("mine", LEASE).await.unwrap();
    let _b = other.acquire("theirs", LEASE).await.unwrap();
    let _c = plain.acquire("default", LEASE).await.unwrap();
    assert_eq!(names(&odd, None).await, ["mine"]);
    assert_eq!(names(&other, None).await, ["theirs"]);
    assert_eq!(names(&plain, None).await, ["default"]);
    assert_eq!(
        odd.status("mine").await.unwrap().redis_key,
        "app*[1]?:{mine}"
    );
}

/// The limit counts held locks, not keys scanned: tombstones and queues are skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_limit_counts_held_locks_only() {
    let (_redis, [holder]) = common::server_with().await;
    for i in 0..30 {
        let released = holder.acquire(&format!("gone-{i}"), LEASE).await.unwrap();
        assert_eq!(released.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let mut handles = Vec::new();
    for i in 0..5 {
        handles.push(holder.acquire(&format!("held-{i}"), LEASE).await.unwrap());
    }
    assert_eq!(holder.list(None, 3).await.unwrap().len(), 3);
    assert_eq!(holder.list(None, 5).await.unwrap().len(), 5);
    assert_eq!(holder.list(None, usize::MAX).await.unwrap().len(), 5);
}

/// After a forced release: the old holder's watchdog reports the lease lost, its release is
/// `NotHeld` and frees nothing of the new holder, and fencing tokens keep increasing — also over
/// a second forced release of the new holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_holder_never_frees_a_new_holder_after_forced_releases() {
    let (_redis, [old, new, ops]) = common::server_with().await;
    let first = old.acquire("forced", Lease::Watchdog).await.unwrap();
    let t1 = first.fencing_token();
    assert!(matches!(
        ops.force_release("forced").await.unwrap(),
        ForceReleased::Released { fencing_token, .. } if fencing_token == t1
    ));
    // A second forced release and one of the old grant find nothing.
    assert_eq!(
        ops.force_release("forced").await.unwrap(),
        ForceReleased::NotHeld
    );
    assert_eq!(
        ops.force_release_grant("forced", t1).await.unwrap(),
        ForceReleased::NotHeld
    );
    let second = new.acquire("forced", Lease::Watchdog).await.unwrap();
    let t2 = second.fencing_token();
    assert!(t2 > t1);
    let reason = tokio::time::timeout(SLACK, first.lost())
        .await
        .expect("the old holder's watchdog never reported the lease lost");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(!first.is_held());
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert!(matches!(
        ops.status("forced").await.unwrap().state,
        LockState::Held { fencing_token, .. } if fencing_token == t2
    ));
    // The old grant's token no longer names the lock.
    assert!(matches!(
        ops.force_release_grant("forced", t1).await.unwrap(),
        ForceReleased::HolderChanged { fencing_token, .. } if fencing_token == t2
    ));
    assert!(second.is_held());
    assert!(matches!(
        ops.force_release("forced").await.unwrap(),
        ForceReleased::Released { .. }
    ));
    let third = old.acquire("forced", LEASE).await.unwrap();
    assert!(third.fencing_token() > t2);
    assert_eq!(second.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert!(third.is_held());
    assert_eq!(third.release().await.unwrap(), ReleaseOutcome::Released);
}
