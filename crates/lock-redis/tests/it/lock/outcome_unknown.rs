//! Acquisitions whose outcome is unknown — timed out against a frozen Redis,
//! cancelled by the caller mid-flight, or cut by `CLIENT KILL` — must not leave a key held by
//! nobody for the rest of a long lease.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{SLACK, client, server};
use lock_core::lock::{AcquireOptions, DistributedLock, Lease};
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use tokio::time::Instant;

async fn held_keys(redis: &RedisServer, lock: &RedisLock, names: &[String]) -> Vec<String> {
    let mut held = Vec::new();
    for name in names {
        let value = redis.cmd(&["GET", &lock.redis_key(name)]).await.unwrap();
        if value.starts_with("H|") {
            held.push(format!("{name}: {value}"));
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_against_a_frozen_redis_leave_no_grant_behind() {
    let (redis, [lock]) = common::server_with().await;
    let names: Vec<String> = (0..40).map(|i| format!("frozen:{i}")).collect();
    redis.pause().unwrap();
    let mut tasks = Vec::new();
    for (i, name) in names.iter().cloned().enumerate() {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            let options = AcquireOptions::new(Lease::Fixed(Duration::from_secs(120)))
                .wait_time(Duration::from_millis(200 * (i as u64 % 3)))
                .unwrap();
            if i % 2 == 0 {
                // Times out by itself (wait + command timeout).
                let _ = lock.acquire_with(&name, options).await;
            } else {
                // The caller gives up first and drops the future.
                let _ = tokio::time::timeout(
                    Duration::from_millis(10 + 23 * i as u64),
                    lock.acquire_with(&name, options),
                )
                .await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Stay frozen past the background releases' own command timeout too.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.resume().unwrap();
    let clean = common::eventually(SLACK, || async {
        held_keys(&redis, &lock, &names).await.is_empty()
    })
    .await;
    assert!(
        clean,
        "keys held by nobody after the freeze: {:?}",
        held_keys(&redis, &lock, &names).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_kills_during_acquire_and_release_leave_no_grant_behind() {
    let redis = Arc::new(server().await);
    let lock = client(&redis).await;
    let stop = Instant::now() + Duration::from_secs(6);
    let killer = tokio::spawn({
        let redis = Arc::clone(&redis);
        async move {
            let mut kills = 0u32;
            while Instant::now() < stop {
                tokio::time::sleep(Duration::from_millis(150 + u64::from(kills % 5) * 37)).await;
                let _ = redis.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).await;
                kills += 1;
            }
            kills
        }
    });
    let mut tasks = Vec::new();
    for t in 0..4 {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            let mut names = Vec::new();
            let mut n = 0;
            while Instant::now() < stop {
                let name = format!("kill:{t}:{n}");
                n += 1;
                names.push(name.clone());
                let options = common::fixed_waiting(Duration::from_secs(120), Duration::ZERO);
                let acquired = lock.acquire_with(&name, options).await;
                if acquired.is_err() {
                    // A caller's back-off: while the client knows it is disconnected an
                    // attempt fails at once, and without one this loop would only pile up keys.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if let Ok(handle) = acquired {
                    match n % 3 {
                        0 => drop(handle),
                        1 => {
                            let _ = handle.release().await;
                        }
                        _ => {
                            let _ =
                                tokio::time::timeout(Duration::from_millis(1), handle.release())
                                    .await;
                        }
                    }
                }
            }
            names
        }));
    }
    let mut names = Vec::new();
    for task in tasks {
        names.extend(task.await.unwrap());
    }
    let kills = killer.await.unwrap();
    assert!(kills > 10);
    let clean = common::eventually(SLACK, || async {
        held_keys(&redis, &lock, &names).await.is_empty()
    })
    .await;
    let left = held_keys(&redis, &lock, &names).await;
    assert!(
        clean,
        "{} of {} keys held by nobody after {kills} connection kills: {:?}",
        left.len(),
        names.len(),
        left
    );
}

/// Redis is down (killed). An acquire is cancelled by its caller (future dropped before fred's
/// own command timeout). Its command waits in fred's queue; the clean-up release spawned by the
/// drop times out after one command timeout and is discarded. When Redis comes back, the queued
/// acquire still runs — and grants the key to an owner that no longer exists, for the whole
/// lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_cancelled_during_an_outage_does_not_grant_the_key_to_nobody_later() {
    let (mut redis, [lock]) = common::server_with().await;
    redis.kill().await.unwrap();
    let options = common::fixed_waiting(Duration::from_secs(600), Duration::ZERO);
    // The caller gives up after 200 ms (its own request deadline).
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        lock.acquire_with("outage", options),
    )
    .await;
    // Or failed at once: a client that has seen its connection fail sends nothing.
    assert!(
        !matches!(cancelled, Ok(Ok(_))),
        "granted while Redis was down"
    );
    // Outage longer than one command timeout (1 s): the clean-up release times out.
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.restart().await.unwrap();
    // Whatever the client had queued reaches Redis once it has reconnected (a PING fails at
    // once until then).
    assert!(reconnected(&lock).await, "the client did not reconnect");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let key = lock.redis_key("outage");
    let value = redis.cmd(&["GET", &key]).await.unwrap();
    let pttl = redis.cmd(&["PTTL", &key]).await.unwrap();
    assert!(
        !value.starts_with("H|"),
        "after the outage the key is held by an acquisition that was cancelled before Redis came \
         back: {value:?}, PTTL {pttl} ms — nobody can release it; it blocks the lock for the \
         whole 600 s lease"
    );
}

/// The same with the library's own budget: `try_acquire` (wait 0) has a budget of exactly one
/// command timeout, the same as fred's own timeout of the script call, so which one fires first
/// is a race. When the budget wins, the command is dropped rather than timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_during_an_outage_does_not_grant_the_key_to_nobody_later() {
    let (mut redis, [lock]) = common::server_with().await;
    redis.kill().await.unwrap();
    let names: Vec<String> = (0..20).map(|i| format!("outage-try:{i}")).collect();
    let mut tasks = Vec::new();
    for name in names.clone() {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            lock.try_acquire(&name, Lease::Fixed(Duration::from_secs(600)))
                .await
                .is_err()
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap(), "granted while Redis was down");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.restart().await.unwrap();
    assert!(reconnected(&lock).await, "the client did not reconnect");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = held_keys(&redis, &lock, &names).await;
    assert!(
        left.is_empty(),
        "{} of {} keys held by nobody after the outage (600 s leases): {left:?}",
        left.len(),
        names.len()
    );
}

/// The acquire is already on the wire when the connection drops (Redis frozen, then killed —
/// a crash or a failover). fred keeps the in-flight command to re-send after reconnecting. The
/// caller gives up (its own deadline, or `try_acquire`'s budget of one command timeout, which
/// races fred's own timeout); that drop spawns the clean-up release, which is queued behind the
/// acquire, times out during the outage and is discarded (fred skips timed-out commands), while
/// the dropped — not timed-out — acquire is re-sent when Redis is back. It grants the key to an
/// owner that no longer exists, for the whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_acquire_cut_by_a_crash_does_not_grant_the_key_to_nobody_after_recovery() {
    let (mut redis, [lock]) = common::server_with().await;
    lock.client().ping().await.unwrap();
    redis.pause().unwrap();
    let options = common::fixed_waiting(Duration::from_secs(600), Duration::ZERO);
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        lock.acquire_with("crash", options),
    )
    .await;
    assert!(cancelled.is_err(), "expected the caller's timeout to fire");
    tokio::time::sleep(Duration::from_millis(200)).await;
    redis.kill().await.unwrap(); // the frozen server dies; its connections drop
    // Down for longer than one command timeout (1 s).
    let down_ms = std::env::var("ADVERSARIAL_DOWN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    tokio::time::sleep(Duration::from_millis(down_ms)).await;
    redis.restart().await.unwrap();
    let key = lock.redis_key("crash");
    // Give the client its reconnect delay (<= 2 s) to flush what it kept.
    let granted_to_nobody = common::eventually(Duration::from_secs(5), || async {
        redis.cmd(&["GET", &key]).await.unwrap().starts_with("H|")
    })
    .await;
    let value = redis.cmd(&["GET", &key]).await.unwrap();
    let pttl = redis.cmd(&["PTTL", &key]).await.unwrap();
    assert!(
        !granted_to_nobody,
        "after recovery the key is held by the cancelled acquisition: {value:?}, PTTL {pttl} ms; \
         nobody can release it, the lock is blocked for the whole 600 s lease"
    );
}

/// The same through `try_acquire` alone (no caller deadline): its budget (wait 0 + one command
/// timeout) and fred's timeout of the script call are equal, and the budget usually fires first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_try_acquire_cut_by_a_crash_does_not_grant_the_key_to_nobody_after_recovery() {
    let (mut redis, [lock]) = common::server_with().await;
    lock.client().ping().await.unwrap();
    redis.pause().unwrap();
    let names: Vec<String> = (0..10).map(|i| format!("crash-try:{i}")).collect();
    let mut tasks = Vec::new();
    for name in names.clone() {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            let result = lock
                .try_acquire(&name, Lease::Fixed(Duration::from_secs(600)))
                .await;
            result.is_err()
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap());
    }
    redis.kill().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.restart().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = held_keys(&redis, &lock, &names).await;
    assert!(
        left.is_empty(),
        "{} of {} keys granted to nobody after the crash (600 s leases): {left:?}",
        left.len(),
        names.len()
    );
}

/// A release that got no answer is sent again in the background, so the key is freed once Redis
/// is reachable, long before its 120 s TTL. Also when the caller stops waiting for the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_release_is_sent_again_once_redis_answers() {
    let redis = server().await;
    let (proxy, lock) = common::behind_proxy(&redis, |setup| setup).await;
    let lease = Lease::Fixed(Duration::from_secs(120));
    let failed = lock.acquire("unanswered", lease).await.unwrap();
    let cancelled = lock.acquire("abandoned", lease).await.unwrap();
    proxy.blackhole(true);
    let released = failed.release().await;
    assert!(released.is_err(), "{released:?}");
    let gave_up = tokio::time::timeout(Duration::from_millis(50), cancelled.release()).await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    // What was sent is lost with the connections.
    proxy.drop_connections();
    proxy.blackhole(false);
    let names = ["unanswered".to_owned(), "abandoned".to_owned()];
    let freed = common::eventually(lock_testkit::GENEROUS, || async {
        held_keys(&redis, &lock, &names).await.is_empty()
    })
    .await;
    assert!(freed, "{:?}", held_keys(&redis, &lock, &names).await);
}

/// Whether `lock`'s client answers a PING within a generous deadline: it reconnects in the
/// background after a restart (100 ms doubling to 2 s).
async fn reconnected(lock: &RedisLock) -> bool {
    common::eventually(Duration::from_secs(30), || async {
        lock.client().ping().await.is_ok()
    })
    .await
}
