//! Redis' error replies, each against a real redis-server: a key of the wrong type, a value that
//! is not a lock, a read-only replica, maxmemory, a busy script, a flushed script cache, missing
//! credentials or ACL permissions, a replica without its primary, too few replicas, loading.
//!
//! Every refusal must fail closed with a typed cause: `LOCK_ACQUISITION_FAILED`, reason
//! `backend_unavailable` (never `held_by_another_owner`), the source chain ending in
//! `RedisFailure::Refused` with the expected `Refusal`, the critical section not run, and the
//! key left as it was. A flushed script cache is not a refusal: the script is reloaded once.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::Setup;
use common::{SLACK, WATCHDOG, command_calls, delta, eventually, server};
use lock_core::lock::{DistributedLock, DistributedLockExt, Lease, ReleaseOutcome};
use lock_core::{AcquireFailure, LockError};
use lock_redis::RedisFailure;
use lock_redis::lock::RedisLock;
use lock_testkit::{RedisServer, TestkitError};
use tokio::time::Instant;

/// Deadline for server state changes that involve a second process or a reload (replication
/// link up, dataset loaded) on a loaded machine.
const SLOW: Duration = Duration::from_secs(60);

/// Settings for clients whose commands Redis refuses: a 5 s command timeout, so that a reply
/// delayed on a loaded machine still arrives as the refusal instead of a client-side timeout.
fn patient_config(redis: &RedisServer) -> Setup {
    common::config(redis).command_timeout(Duration::from_secs(5))
}

async fn patient(redis: &RedisServer) -> RedisLock {
    common::connect(patient_config(redis)).await
}

/// Runs `with_lock` on lock `name` and checks that it failed closed as an unavailable
/// backend, not as contention, without running the critical section. Returns the error.
async fn refused_acquire(lock: &RedisLock, name: &str) -> LockError {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let options = common::fixed_waiting(Duration::from_secs(60), Duration::from_millis(500));
    let err = lock
        .with_lock(name, options, || async move {
            flag.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert!(!ran.load(Ordering::SeqCst), "the critical section ran");
    assert_eq!(err.code(), "LOCK_ACQUISITION_FAILED", "{err}");
    assert_eq!(err.http_status(), 503);
    let details = err.details();
    assert_eq!(details["reason"], "backend_unavailable", "{err}");
    assert_ne!(details["reason"], "held_by_another_owner");
    assert!(!details.contains_key("holder"), "{details:?}");
    assert_eq!(details["lockKey"], name);
    assert!(
        matches!(
            err.acquire_failure(),
            Some(AcquireFailure::BackendUnavailable { .. })
        ),
        "{err:?}"
    );
    err
}

/// Follows `std::error::Error::source` from `err` to the `RedisFailure`, checks that it is a
/// refusal named `expected` (`Refusal::as_str`) and that `Display` says Redis refused; returns
/// Redis' message.
fn assert_refused<'e>(err: &'e LockError, expected: &str) -> &'e str {
    let failure = common::redis_failure(err);
    let RedisFailure::Refused {
        refusal, message, ..
    } = failure
    else {
        panic!("expected the refusal `{expected}`, got {failure:?}");
    };
    assert_eq!(refusal.as_str(), expected, "{err}");
    assert_eq!(failure.refusal(), Some(*refusal));
    let text = err.to_string();
    assert!(
        text.contains("Redis refused the") && text.contains(message.as_str()),
        "{text}"
    );
    // The real message, for the record (`--nocapture`).
    eprintln!("{expected}: {text}");
    message
}

async fn exists(redis: &RedisServer, key: &str) -> bool {
    redis.cmd(&["EXISTS", key]).await.unwrap() == "1"
}

/// `INFO <section>` field `name`.
async fn info_field(redis: &RedisServer, section: &str, name: &str) -> Option<String> {
    let info = redis.cmd(&["INFO", section]).await.ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::to_owned)
}

/// Waits (tolerantly) for the clean-up release an acquisition that failed starts in the
/// background, so that the key is checked after it too: `evalsha` ran `calls` more times.
async fn settle(redis: &RedisServer, before: &std::collections::HashMap<String, u64>, calls: u64) {
    let _ = eventually(SLACK, || async {
        delta(before, &command_calls(redis).await, "evalsha") >= calls
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_at_the_lock_key_is_refused_as_wrong_type_and_left_alone() {
    let redis = server().await;
    let lock = patient(&redis).await;
    let key = lock.redis_key("wrong-type");
    redis.cmd(&["HSET", &key, "field", "value"]).await.unwrap();
    let before = command_calls(&redis).await;

    let err = refused_acquire(&lock, "wrong-type").await;
    let message = assert_refused(&err, "wrong_type");
    assert!(message.starts_with("WRONGTYPE"), "{message}");
    assert!(
        err.to_string()
            .contains("change the key prefix (key_prefix)"),
        "{err}"
    );

    settle(&redis, &before, 2).await;
    assert_eq!(redis.cmd(&["TYPE", &key]).await.unwrap(), "hash");
    assert_eq!(redis.cmd(&["HGETALL", &key]).await.unwrap(), "field\nvalue");
    assert_eq!(redis.cmd(&["PTTL", &key]).await.unwrap(), "-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_that_is_not_a_lock_is_refused_as_not_a_lock_and_left_alone() {
    let redis = server().await;
    let lock = patient(&redis).await;
    let key = lock.redis_key("not-a-lock");
    redis.cmd(&["SET", &key, "hello"]).await.unwrap();
    let before = command_calls(&redis).await;

    let err = refused_acquire(&lock, "not-a-lock").await;
    let message = assert_refused(&err, "not_a_lock");
    assert!(
        message.starts_with("LOCKVALUE") && message.contains(&key),
        "{message}"
    );

    settle(&redis, &before, 2).await;
    assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), "hello");
    assert_eq!(redis.cmd(&["PTTL", &key]).await.unwrap(), "-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_the_acquisition_as_read_only() {
    let primary = server().await;
    let replica = server().await;
    let port = primary.port().to_string();
    replica
        .cmd(&["REPLICAOF", "127.0.0.1", &port])
        .await
        .unwrap();
    let linked = eventually(SLOW, || async {
        info_field(&replica, "replication", "master_link_status")
            .await
            .as_deref()
            == Some("up")
    })
    .await;
    assert!(linked, "the replica never linked to its primary");

    let lock = patient(&replica).await;
    let err = refused_acquire(&lock, "on-a-replica").await;
    let message = assert_refused(&err, "read_only");
    assert!(message.starts_with("READONLY"), "{message}");
    assert!(err.to_string().contains("at the primary"), "{err}");

    let key = lock.redis_key("on-a-replica");
    assert!(!exists(&replica, &key).await);
    assert!(!exists(&primary, &key).await);
}

/// A primary demoted while the lock is held (a failover the client did not notice): the release
/// is refused, reported as `LOCK_RELEASE_FAILED` with the typed cause, and the key is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_redis_refuses_is_release_failed_with_the_refusal() {
    let redis = server().await;
    // The new "primary" is frozen: the replication link never comes up, so the demoted server
    // keeps its data (a full sync would replace it) and only refuses writes.
    let frozen = server().await;
    frozen.pause().unwrap();
    let lock = patient(&redis).await;
    let handle = common::hold(&lock, "demoted", Duration::from_secs(60)).await;
    let key = lock.redis_key("demoted");
    let value = redis.cmd(&["GET", &key]).await.unwrap();
    assert!(value.starts_with("H|"), "{value}");

    let port = frozen.port().to_string();
    redis.cmd(&["REPLICAOF", "127.0.0.1", &port]).await.unwrap();
    assert_eq!(
        info_field(&redis, "replication", "role").await.as_deref(),
        Some("slave")
    );

    let err = handle.release().await.unwrap_err();
    assert_eq!(err.code(), "LOCK_RELEASE_FAILED", "{err}");
    assert_eq!(err.http_status(), 503);
    assert_eq!(err.details()["reason"], "release_failed");
    assert!(matches!(err, LockError::ReleaseFailed { .. }), "{err:?}");
    let message = assert_refused(&err, "read_only");
    assert!(message.starts_with("READONLY"), "{message}");
    assert!(err.to_string().contains("still ends at its TTL"), "{err}");
    assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), value);

    redis.cmd(&["REPLICAOF", "NO", "ONE"]).await.unwrap();
    frozen.resume().unwrap();
}

/// At `maxmemory` with `noeviction`: a new grant is refused as out of memory, and a lock taken
/// before memory filled up can still be released (release.lua is `allow-oom`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_maxmemory_grants_are_refused_as_out_of_memory_and_releases_still_work() {
    let redis = RedisServer::builder()
        .args(["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"])
        .start()
        .await
        .unwrap();
    let lock = patient(&redis).await;
    let held = common::hold(&lock, "taken-before", Duration::from_secs(60)).await;

    // Limit memory to 3 MB above what is used now and fill it with ~2 MB values until Redis
    // refuses: the last accepted value overshoots the limit by about 1 MB, so no small free
    // (a connection closing) brings Redis back under it.
    let used: u64 = info_field(&redis, "memory", "used_memory")
        .await
        .unwrap()
        .parse()
        .unwrap();
    let limit = (used + 3 * 1024 * 1024).to_string();
    redis
        .cmd(&["CONFIG", "SET", "maxmemory", &limit])
        .await
        .unwrap();
    let mut full = false;
    for i in 0..64 {
        match redis
            .cmd(&["SETRANGE", &format!("fill:{i}"), "2000000", "x"])
            .await
        {
            Ok(_) => {}
            Err(TestkitError::Redis { message, .. }) if message.starts_with("OOM") => {
                full = true;
                break;
            }
            Err(other) => panic!("filling memory: {other}"),
        }
    }
    assert!(full, "Redis never refused a write with OOM");

    let err = refused_acquire(&lock, "during-the-fill").await;
    let message = assert_refused(&err, "out_of_memory");
    assert!(message.starts_with("OOM"), "{message}");
    let key = lock.redis_key("during-the-fill");
    assert!(!exists(&redis, &key).await);

    let held_key = lock.redis_key("taken-before");
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let tombstone = redis.cmd(&["GET", &held_key]).await.unwrap();
    assert!(tombstone.starts_with("R|"), "{tombstone}");

    // Memory freed: grants work again.
    redis
        .cmd(&["CONFIG", "SET", "maxmemory", "0"])
        .await
        .unwrap();
    lock.try_acquire("during-the-fill", Lease::Watchdog)
        .await
        .unwrap();
}

/// A script that runs past `busy-reply-threshold` blocks Redis: acquisitions are refused as
/// busy; after `SCRIPT KILL` they succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_redis_refuses_as_busy_and_grants_again_after_script_kill() {
    let redis = Arc::new(
        RedisServer::builder()
            .args(["--busy-reply-threshold", "100"])
            .start()
            .await
            .unwrap(),
    );
    let lock = patient(&redis).await;
    let looping = {
        let redis = Arc::clone(&redis);
        tokio::spawn(async move {
            redis
                .cmd(&["EVAL", "local i = 0 while true do i = i + 1 end", "0"])
                .await
        })
    };
    let busy = eventually(SLOW, || async {
        matches!(
            redis.cmd(&["PING"]).await,
            Err(TestkitError::Redis { message, .. }) if message.starts_with("BUSY")
        )
    })
    .await;
    assert!(busy, "Redis never became busy");

    let err = refused_acquire(&lock, "busy").await;
    let message = assert_refused(&err, "busy");
    assert!(message.starts_with("BUSY"), "{message}");
    assert!(err.to_string().contains("SCRIPT KILL"), "{err}");

    redis.cmd(&["SCRIPT", "KILL"]).await.unwrap();
    // The looping script's caller gets its error (or gave up on its own timeout).
    assert!(looping.await.unwrap().is_err());
    let answers = eventually(SLACK, || async {
        redis.cmd(&["PING"]).await.ok().as_deref() == Some("PONG")
    })
    .await;
    assert!(answers, "Redis stayed busy after SCRIPT KILL");
    assert!(!exists(&redis, &lock.redis_key("busy")).await);

    let options = common::watchdog_waiting(Duration::from_secs(5));
    let handle = lock.acquire_with("busy", options).await.unwrap();
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

/// `SCRIPT FLUSH` between the grant and the watchdog's renewals: the renewal script is reloaded
/// once (`NOSCRIPT` is not an error to the caller) and the lease stays held for three watchdog
/// timeouts, far past its 1 s TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renewals_reload_their_script_after_script_flush() {
    let (redis, [lock]) = common::server_with().await;
    let handle = lock
        .acquire("flushed-renewal", Lease::Watchdog)
        .await
        .unwrap();
    let key = lock.redis_key("flushed-renewal");
    let before = command_calls(&redis).await;
    redis.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    let flushed = Instant::now();

    // Watch the lease over three watchdog timeouts (each tick renews for one timeout).
    while flushed.elapsed() < WATCHDOG * 3 {
        assert!(handle.is_held(), "lease lost: {:?}", handle.status());
        let value = redis.cmd(&["GET", &key]).await.unwrap();
        assert!(
            value.starts_with("H|") && value.ends_with(handle.owner()),
            "{value}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(handle.is_held(), "lease lost: {:?}", handle.status());
    let after = command_calls(&redis).await;
    assert!(
        delta(&before, &after, "script|load") >= 1,
        "renew.lua was never reloaded: {after:?}"
    );
    assert!(
        delta(&before, &after, "evalsha") >= 3,
        "too few renewals: {after:?}"
    );
    let pttl: i64 = redis.cmd(&["PTTL", &key]).await.unwrap().parse().unwrap();
    assert!(pttl > 0, "PTTL {pttl}");
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A missing password: fred's connection set-up meets `NOAUTH`. No retry can cure that, so it
/// is a configuration error at connect (`LOCK_INVALID_ARGUMENT` naming the address), not an
/// outage every acquisition would report (tests/credentials.rs has the other refusals).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_password_fails_connect_naming_noauth() {
    let redis = RedisServer::start_with_password("s3cret").await.unwrap();
    let err = common::try_connect(patient_config(&redis))
        .await
        .expect_err("connected without the password");
    assert_eq!(err.code(), "LOCK_INVALID_ARGUMENT", "{err}");
    assert_eq!(err.details()["argument"], "address", "{err}");
    let text = err.to_string();
    assert!(text.contains("NOAUTH"), "{text}");
    assert!(
        text.contains(&redis.url()),
        "the address is not named: {text}"
    );
    eprintln!("no auth: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_acl_access_to_the_lock_keys_is_refused_as_no_permission() {
    let redis = server().await;
    let address = common::user_without_lock_keys(&redis).await;
    let lock = common::connect(patient_config(&redis).address(&address)).await;
    let err = refused_acquire(&lock, "no-permission").await;
    let message = assert_refused(&err, "no_permission");
    assert!(message.starts_with("NOPERM"), "{message}");
    assert!(
        !err.to_string().contains(":pw@"),
        "the password leaked: {err}"
    );
    assert!(!exists(&redis, &lock.redis_key("no-permission")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_its_primary_is_refused_as_master_down() {
    let redis = server().await;
    let frozen = server().await;
    frozen.pause().unwrap();
    let lock = patient(&redis).await;
    redis
        .cmd(&["CONFIG", "SET", "replica-serve-stale-data", "no"])
        .await
        .unwrap();
    let port = frozen.port().to_string();
    redis.cmd(&["REPLICAOF", "127.0.0.1", &port]).await.unwrap();

    let err = refused_acquire(&lock, "master-down").await;
    let message = assert_refused(&err, "master_down");
    assert!(message.starts_with("MASTERDOWN"), "{message}");

    redis.cmd(&["REPLICAOF", "NO", "ONE"]).await.unwrap();
    assert!(!exists(&redis, &lock.redis_key("master-down")).await);
    frozen.resume().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_are_refused_as_no_replicas() {
    let redis = RedisServer::builder()
        .args(["--min-replicas-to-write", "1"])
        .start()
        .await
        .unwrap();
    let lock = patient(&redis).await;
    let err = refused_acquire(&lock, "no-replicas").await;
    let message = assert_refused(&err, "no_replicas");
    assert!(message.starts_with("NOREPLICAS"), "{message}");
    assert!(!exists(&redis, &lock.redis_key("no-replicas")).await);
}

/// While Redis loads its dataset (here `DEBUG RELOAD`, slowed down per key) acquisitions are
/// refused as loading; once loaded they succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loading_redis_is_refused_as_loading_and_grants_once_loaded() {
    let redis = Arc::new(
        RedisServer::builder()
            .args([
                "--enable-debug-command",
                "yes",
                "--loading-process-events-interval-bytes",
                "1024",
            ])
            .start()
            .await
            .unwrap(),
    );
    let lock = patient(&redis).await;
    redis.cmd(&["DEBUG", "POPULATE", "10000"]).await.unwrap();
    // 500 µs per key: loading takes about five seconds.
    redis
        .cmd(&["CONFIG", "SET", "key-load-delay", "500"])
        .await
        .unwrap();
    let reloading = {
        let redis = Arc::clone(&redis);
        tokio::spawn(async move { redis.cmd(&["DEBUG", "RELOAD"]).await })
    };
    let loading = eventually(SLOW, || async {
        info_field(&redis, "persistence", "loading")
            .await
            .as_deref()
            == Some("1")
    })
    .await;
    assert!(loading, "Redis never started loading");

    let err = refused_acquire(&lock, "loading").await;
    let message = assert_refused(&err, "loading");
    assert!(message.starts_with("LOADING"), "{message}");

    let loaded = eventually(SLOW, || async {
        info_field(&redis, "persistence", "loading")
            .await
            .as_deref()
            == Some("0")
    })
    .await;
    assert!(loaded, "Redis never finished loading");
    let _ = reloading.await;
    redis
        .cmd(&["CONFIG", "SET", "key-load-delay", "0"])
        .await
        .unwrap();
    assert!(!exists(&redis, &lock.redis_key("loading")).await);
    let options = common::watchdog_waiting(Duration::from_secs(5));
    lock.acquire_with("loading", options).await.unwrap();
}
