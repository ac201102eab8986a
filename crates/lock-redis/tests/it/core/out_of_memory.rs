//! Redis at `maxmemory` with the default `noeviction` policy. Redis still answers
//! every command; it only refuses commands that may grow memory (`SET`, …) with `-OOM`.
//!
//! New grants must fail closed — fine. But a release *frees* memory, and Redis would accept a
//! `DEL`; release.lua instead overwrites the key with a tombstone via `SET`, which is refused.
//! The release then fails and the key stays held by nobody for the rest of its lease (a fixed
//! lease may be up to 7 days), though Redis answered and could have freed it.

use crate::common;

use std::time::Duration;

use lock_core::lock::{DistributedLock, Lease, LockHandle, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;

/// Sets `maxmemory`: `"1"` fills Redis' memory at once, `"0"` lifts the limit.
async fn maxmemory(redis: &RedisServer, bytes: &str) {
    redis
        .cmd(&["CONFIG", "SET", "maxmemory", bytes])
        .await
        .unwrap();
}

/// A lock `name` held on a fixed lease of an hour, and then Redis' memory full (noeviction is
/// Redis' default policy): the server, the client, the handle and the key.
async fn held_at_maxmemory(name: &str) -> (RedisServer, RedisLock, LockHandle, String) {
    let (redis, [lock]) = common::server_with().await;
    let handle = common::hold(&lock, name, Duration::from_secs(3600)).await;
    maxmemory(&redis, "1").await;
    let key = lock.redis_key(name);
    (redis, lock, handle, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_frees_the_key_even_when_redis_is_at_maxmemory() {
    let (redis, _lock, handle, key) = held_at_maxmemory("oom").await;
    let policy = redis.cmd(&["CONFIG", "GET", "maxmemory-policy"]).await;
    assert_eq!(policy.unwrap(), "maxmemory-policy\nnoeviction");
    let outcome = handle.release().await;
    let value = redis.cmd(&["GET", &key]).await.unwrap();
    let pttl = redis.cmd(&["PTTL", &key]).await.unwrap();
    maxmemory(&redis, "0").await;
    assert!(
        matches!(outcome, Ok(ReleaseOutcome::Released)),
        "release under maxmemory: {outcome:?}; the key is still {value:?} with PTTL {pttl} ms"
    );
    assert!(
        !value.starts_with("H|"),
        "the key is still held by nobody: {value:?} (PTTL {pttl} ms)"
    );
}

/// Dropping the handle (background release) has the same problem, silently (a log line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_handle_frees_the_key_even_when_redis_is_at_maxmemory() {
    let (redis, _lock, handle, key) = held_at_maxmemory("oom-drop").await;
    drop(handle);
    let freed = common::eventually(common::SLACK, || async {
        !redis.cmd(&["GET", &key]).await.unwrap().starts_with("H|")
    })
    .await;
    let value = redis.cmd(&["GET", &key]).await.unwrap();
    let pttl = redis.cmd(&["PTTL", &key]).await.unwrap();
    maxmemory(&redis, "0").await;
    assert!(
        freed,
        "the dropped handle's key is still held by nobody: {value:?} (PTTL {pttl} ms)"
    );
}

/// Watchdog renewals only extend TTLs (`PEXPIRE`), which Redis allows at maxmemory: leases held
/// during a memory-full episode must survive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_leases_survive_a_maxmemory_episode() {
    let (redis, [lock]) = common::server_with().await;
    let handle = lock.acquire("oom-wd", Lease::Watchdog).await.unwrap();
    maxmemory(&redis, "1").await;
    tokio::time::sleep(common::WATCHDOG * 3).await;
    let held = handle.is_held();
    maxmemory(&redis, "0").await;
    assert!(
        held,
        "the watchdog lease was lost at maxmemory: {:?}",
        handle.status()
    );
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}
