//! Fencing tokens against a real redis-server: strictly increasing per key across clients, across
//! leases that expire without a release and across a restart without persistence; about the
//! Redis clock; counting up from a tombstone even when the clock is behind it, and above a grant
//! lost in a rollback to an older tombstone. And the price of
//! it: no key is left behind once leases and tombstones have ended.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{SLACK, client, eventually, server};
use lock_core::lock::{DistributedLock, Lease, LockHandle, LostReason, ReleaseOutcome};
use lock_redis::limits::TOMBSTONE_TTL;
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use tokio::time::Instant;

/// Keys (up to 10) that have no TTL, checked over the whole keyspace in one server-side pass.
const KEYS_WITHOUT_TTL: &str = "local bad = {} \
    for _, k in ipairs(redis.call('KEYS', '*')) do \
      if redis.call('PTTL', k) == -1 then \
        bad[#bad + 1] = k \
        if #bad >= 10 then break end \
      end \
    end \
    return bad";

async fn keys_without_ttl(redis: &RedisServer) -> String {
    redis.cmd(&["EVAL", KEYS_WITHOUT_TTL, "0"]).await.unwrap()
}

async fn dbsize(redis: &RedisServer) -> u64 {
    redis.cmd(&["DBSIZE"]).await.unwrap().parse().unwrap()
}

/// Redis `TIME` in microseconds.
async fn redis_time_us(redis: &RedisServer) -> u64 {
    let reply = redis.cmd(&["TIME"]).await.unwrap();
    let mut parts = reply.lines().map(|p| p.trim().parse::<u64>().unwrap());
    let (secs, micros) = (parts.next().unwrap(), parts.next().unwrap());
    secs * 1_000_000 + micros
}

/// The fencing token stored in the lock key, with the owner it is stored for.
async fn stored_grant(redis: &RedisServer, redis_key: &str) -> (u64, String) {
    let value = redis.cmd(&["GET", redis_key]).await.unwrap();
    let mut fields = value.split('|');
    assert_eq!(
        fields.next(),
        Some("H"),
        "{redis_key} is not held: {value:?}"
    );
    let token = fields.next().unwrap().parse().unwrap();
    (token, fields.next().unwrap().to_owned())
}

/// 1,000 grants of one key, alternating between two clients (two connections, two owner
/// spaces); every 100th grant is a fixed lease left to expire — not released — so that the next
/// grant finds no key and no tombstone and must take its token from the server clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_across_two_clients_and_expired_leases() {
    const NAME: &str = "fence:alternating";
    let redis = server().await;
    let clients = [client(&redis).await, client(&redis).await];
    let redis_key = clients[0].redis_key(NAME);
    let options = common::fixed_waiting(Duration::from_secs(30), SLACK);
    let mut tokens: Vec<(usize, u64, &'static str)> = Vec::with_capacity(1000);
    let mut expired = 0;
    for i in 0..1000 {
        let lock = &clients[i % 2];
        if i % 100 == 50 {
            let handle = lock
                .acquire_with(
                    NAME,
                    common::fixed_waiting(Duration::from_millis(150), SLACK),
                )
                .await
                .unwrap();
            tokens.push((i, handle.fencing_token(), "expired"));
            // Not released: the lease runs out, and Redis drops the key (no tombstone).
            let reason = tokio::time::timeout(SLACK, handle.lost())
                .await
                .expect("a 150 ms fixed lease did not end");
            assert_eq!(reason, LostReason::Expired);
            let gone = eventually(SLACK, || async {
                redis.cmd(&["EXISTS", &redis_key]).await.unwrap() == "0"
            })
            .await;
            assert!(gone, "the expired lease's key is still there");
            // Its release finds nothing and writes nothing (no tombstone appears).
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
            assert_eq!(redis.cmd(&["EXISTS", &redis_key]).await.unwrap(), "0");
            expired += 1;
            continue;
        }
        let handle = lock.acquire_with(NAME, options).await.unwrap();
        if i % 10 == 0 {
            // The handle's token is the one Redis stored for this owner.
            let (stored, owner) = stored_grant(&redis, &redis_key).await;
            assert_eq!(stored, handle.fencing_token());
            assert_eq!(owner, handle.owner());
        }
        tokens.push((i, handle.fencing_token(), "released"));
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(expired, 10);
    assert_eq!(tokens.len(), 1000);
    for pair in tokens.windows(2) {
        let ((i, a, how_a), (j, b, _)) = (pair[0], pair[1]);
        assert!(
            b > a,
            "grant {j} (client {}) got token {b}, not above grant {i}'s {a} ({how_a}, client {})",
            j % 2,
            i % 2
        );
    }
}

/// Writes a tombstone at `redis_key` whose token is five seconds ahead of the Redis clock,
/// inside the tombstone TTL as the design allows; returns that token.
async fn tombstone_ahead(redis: &RedisServer, redis_key: &str) -> u64 {
    let ahead = redis_time_us(redis).await + 5_000_000;
    let value = format!("R|{ahead}|earlier-pod/0000000000000000/7");
    let ttl = TOMBSTONE_TTL.as_millis().to_string();
    let args = ["SET", redis_key, &value, "PX", &ttl];
    redis.cmd(&args).await.unwrap();
    ahead
}

/// The clock stepped back (or a tombstone came from a server whose clock ran ahead): a tombstone
/// whose token is ahead of the Redis clock must still be counted up from, by exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_count_up_from_a_tombstone_that_is_ahead_of_the_redis_clock() {
    const NAME: &str = "fence:ahead";
    let (redis, [lock, other]) = common::server_with().await;
    let redis_key = lock.redis_key(NAME);
    let ahead = tombstone_ahead(&redis, &redis_key).await;
    let lease = Lease::Fixed(Duration::from_secs(30));
    let mut expected = ahead;
    for (n, lock) in [&lock, &other, &lock].into_iter().enumerate() {
        let handle = lock.try_acquire(NAME, lease).await.unwrap();
        expected += 1;
        assert_eq!(
            handle.fencing_token(),
            expected,
            "grant {n} did not count up from the tombstone ({ahead}) but took something else"
        );
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// A failover to a replica that had the key's older tombstone but not a grant made since (lost
/// with the old primary; `min-replicas` 0) — emulated on one server by putting the older
/// tombstone back. The next grant must still be above the lost one: counting up from the
/// tombstone alone would hand out the lost grant's token a second time; the server clock has
/// moved past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_rollback_to_an_older_tombstone_is_above_the_lost_grant() {
    const NAME: &str = "fence:rollback";
    let (redis, [lock]) = common::server_with().await;
    let redis_key = lock.redis_key(NAME);
    let lease = Lease::Fixed(Duration::from_secs(30));
    let first = lock.try_acquire(NAME, lease).await.unwrap();
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let tombstone = redis.cmd(&["GET", &redis_key]).await.unwrap();
    assert!(tombstone.starts_with("R|"), "no tombstone: {tombstone}");

    let lost = lock.try_acquire(NAME, lease).await.unwrap();
    // The failover: the new primary has the tombstone, not the grant.
    redis
        .cmd(&[
            "SET",
            &redis_key,
            &tombstone,
            "PX",
            &TOMBSTONE_TTL.as_millis().to_string(),
        ])
        .await
        .unwrap();
    let next = lock.try_acquire(NAME, lease).await.unwrap();
    assert!(
        next.fencing_token() > lost.fencing_token(),
        "the grant after the rollback got {}, not above the lost grant's {} (tombstone {tombstone})",
        next.fencing_token(),
        lost.fencing_token()
    );
    assert_eq!(lost.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
}

/// Ten thousand locks on distinct names — a third released (leaving tombstones), the rest left
/// to expire — leave nothing behind: DBSIZE returns to its baseline once leases and tombstones
/// have ended, and no key ever lacks a TTL meanwhile (no per-name counter, no eternal
/// tombstone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dbsize_returns_to_its_baseline_after_ten_thousand_locks_end() {
    const LOCKS: usize = 10_000;
    const TASKS: usize = 64;
    let redis = Arc::new(server().await);
    let lock = client(&redis).await;
    let baseline = dbsize(&redis).await;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let kept: Arc<Mutex<Vec<(String, LockHandle)>>> = Arc::default();
    let retries = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (lock, next, kept, retries) = (
            lock.clone(),
            Arc::clone(&next),
            Arc::clone(&kept),
            Arc::clone(&retries),
        );
        tasks.push(tokio::spawn(async move {
            let mut released = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= LOCKS {
                    return released;
                }
                let name = format!("many:{i}");
                // 200 ms to 1 s, spread deterministically.
                let lease = Lease::Fixed(Duration::from_millis(200 + (i as u64 * 7919) % 801));
                let handle = acquire_retrying(&lock, &name, lease, &retries).await;
                if i % 3 == 0 {
                    // Normally Released; NotHeld only if this machine stalled past the lease.
                    let _ = handle.release().await.unwrap();
                    released += 1;
                } else {
                    kept.lock().unwrap().push((name, handle));
                }
            }
        }));
    }
    let mut released = 0;
    for task in tasks {
        released += task.await.unwrap();
    }
    let kept = std::mem::take(&mut *kept.lock().unwrap());
    eprintln!(
        "{LOCKS} locks in {:?} ({released} released, {} left to expire, {} retries); DBSIZE {}",
        started.elapsed(),
        kept.len(),
        retries.load(Ordering::Relaxed),
        dbsize(&redis).await
    );
    assert_eq!(released + kept.len(), LOCKS);

    // The unreleased leases run out in Redis on their own (at most 1 s each). Keep their handles
    // until then: dropping one earlier would release it and leave a tombstone instead.
    let kept_keys: Vec<String> = kept.iter().map(|(name, _)| lock.redis_key(name)).collect();
    let mut exists = vec!["EXISTS"];
    exists.extend(kept_keys.iter().map(String::as_str));
    let mut samples = 0;
    let expired = eventually(Duration::from_secs(1) + SLACK * 2, || {
        samples += 1;
        let (redis, exists) = (&redis, &exists);
        async move {
            let no_ttl = keys_without_ttl(redis).await;
            assert!(no_ttl.is_empty(), "keys without a TTL: {no_ttl}");
            redis.cmd(exists).await.unwrap() == "0"
        }
    })
    .await;
    assert!(
        expired,
        "unreleased fixed leases of at most 1 s still exist: {} of {}",
        redis.cmd(&exists).await.unwrap(),
        kept_keys.len()
    );
    // Their releases now find nothing and write nothing.
    drop(kept);

    // Tombstones live TOMBSTONE_TTL (10 s) after their release; allow 4x that.
    let deadline = TOMBSTONE_TTL * 4;
    let waiting = Instant::now();
    let mut last;
    let back = loop {
        samples += 1;
        let no_ttl = keys_without_ttl(&redis).await;
        assert!(no_ttl.is_empty(), "keys without a TTL: {no_ttl}");
        last = dbsize(&redis).await;
        if last == baseline || waiting.elapsed() > deadline {
            break last == baseline;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        back,
        "DBSIZE is {last}, not back to {baseline} after {:?}; e.g. {:?}",
        waiting.elapsed(),
        redis.cmd(&["SCAN", "0", "COUNT", "20"]).await.unwrap()
    );
    eprintln!(
        "DBSIZE back to {baseline} {:?} after the last lock ({samples} samples, no key without TTL)",
        waiting.elapsed()
    );
}

/// One grant; retried when this (possibly loaded) machine took so long that a short lease ran
/// out before the grant arrived, or a command timed out.
async fn acquire_retrying(
    lock: &RedisLock,
    name: &str,
    lease: Lease,
    retries: &AtomicUsize,
) -> LockHandle {
    let mut attempts = 0;
    loop {
        match lock.try_acquire(name, lease).await {
            Ok(handle) => return handle,
            Err(err) if attempts < 5 => {
                eprintln!("retrying {name}: {err}");
                assert_ne!(err.details()["reason"], "held_by_another_owner", "{err}");
                attempts += 1;
                retries.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => panic!("{name} not granted after {attempts} retries: {err}"),
        }
    }
}

/// After a restart without persistence, every key — released ones with tombstones, and ones
/// still held by a watchdog lease at the kill — continues above its old token, and the first
/// token is the Redis clock: at least the `TIME` read just before the acquire, at most the one
/// read just after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_first_token_of_every_key_is_the_redis_clock() {
    const KEYS: usize = 40;
    let (mut redis, [lock]) = common::server_with().await;
    let names: Vec<String> = (0..KEYS).map(|i| format!("restart:{i}")).collect();
    let mut before = Vec::new();
    let mut held = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut last = 0;
        for _ in 0..3 {
            let handle = lock.acquire(name, Lease::Watchdog).await.unwrap();
            assert!(handle.fencing_token() > last);
            last = handle.fencing_token();
            if i % 4 == 0 && held.len() < KEYS / 4 {
                held.push(handle);
                break;
            }
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        }
        before.push(last);
    }
    redis.kill().await.unwrap();
    redis.restart().await.unwrap();
    assert_eq!(dbsize(&redis).await, 0);
    // The client reconnects in the background (100 ms doubling to 2 s).
    let reconnected = eventually(Duration::from_secs(20), || async {
        lock.client().ping().await.is_ok()
    })
    .await;
    assert!(
        reconnected,
        "the client did not reconnect after the restart"
    );

    let lease = Lease::Fixed(Duration::from_secs(30));
    for (name, before) in names.iter().zip(before) {
        let (time_before, handle, time_after) = loop {
            let time_before = redis_time_us(&redis).await;
            match lock.try_acquire(name, lease).await {
                Ok(handle) => break (time_before, handle, redis_time_us(&redis).await),
                // A command may still hit the old connection right after the restart.
                Err(err) if err.details()["reason"] == "backend_unavailable" => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => panic!("{name} after the restart: {err}"),
            }
        };
        let token = handle.fencing_token();
        assert!(
            token > before,
            "{name}: token {token} after the restart is not above {before} from before it"
        );
        assert!(
            (time_before..=time_after).contains(&token),
            "{name}: first token {token} after the restart is not the Redis clock \
             (TIME {time_before} before the acquire, {time_after} after)"
        );
    }
    drop(held);
}

/// KNOWN GAP: design.md allows the Redis clock to step back by up to the
/// tombstone TTL "also across a restart without persistence". After a step back of `s`, tokens
/// count up from the last one and run up to `s` ahead of the clock; if the key is then lost
/// (restart without persistence, failover, eviction) before the clock catches up, the next grant
/// takes the clock's value — below the earlier token. Simulated exactly: a tombstone 5 s ahead
/// of the clock is the state a 5 s step back leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "known gap: a clock step back inside the tombstone TTL followed by a key loss reorders tokens"]
async fn a_clock_step_back_followed_by_a_restart_keeps_tokens_increasing() {
    const NAME: &str = "fence:step-back";
    let (mut redis, [lock]) = common::server_with().await;
    let redis_key = lock.redis_key(NAME);
    let ahead = tombstone_ahead(&redis, &redis_key).await;
    let lease = Lease::Fixed(Duration::from_secs(30));
    let before = lock.try_acquire(NAME, lease).await.unwrap();
    let before_token = before.fencing_token();
    assert_eq!(before_token, ahead + 1);
    drop(before);
    redis.kill().await.unwrap();
    redis.restart().await.unwrap();
    let after = loop {
        match lock.try_acquire(NAME, lease).await {
            Ok(handle) => break handle,
            Err(err) if err.details()["reason"] == "backend_unavailable" => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("after the restart: {err}"),
        }
    };
    assert!(
        after.fencing_token() > before_token,
        "token went backwards across the restart: {} after {before_token}",
        after.fencing_token()
    );
}
