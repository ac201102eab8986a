//! The lost-lease signal. The key is deleted or overwritten behind the holder's
//! back, or Redis is frozen past the watchdog timeout: `lost()` must fire, `is_held()` must turn
//! false, and — for the freeze — both before another client can be granted the key.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{SLACK, WATCHDOG, client, server};
use lock_core::lock::{DistributedLock, Lease, LeaseStatus, LostReason, ReleaseOutcome};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_externally_deleted_watchdog_lease_is_reported_lost() {
    let (redis, [lock]) = common::server_with().await;
    let handle = lock.acquire("lost-del", Lease::Watchdog).await.unwrap();
    redis
        .cmd(&["DEL", &lock.redis_key("lost-del")])
        .await
        .unwrap();
    let reason = tokio::time::timeout(WATCHDOG + SLACK, handle.lost())
        .await
        .expect("lost() did not fire after the key was deleted");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(!handle.is_held());
    // Unregistered right after lost() fires (same watchdog pass).
    assert!(
        common::eventually(SLACK, || async { lock.watchdog_lease_count() == 0 }).await,
        "the lost lease is still registered with the watchdog"
    );
    // A renewal never re-creates the key.
    assert_eq!(
        redis
            .cmd(&["EXISTS", &lock.redis_key("lost-del")])
            .await
            .unwrap(),
        "0"
    );
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_watchdog_lease_is_reported_lost_and_the_new_owner_is_left_alone() {
    let (redis, [lock]) = common::server_with().await;
    let handle = lock.acquire("lost-over", Lease::Watchdog).await.unwrap();
    let key = lock.redis_key("lost-over");
    redis
        .cmd(&["SET", &key, "H|1|intruder|pod/x/1", "PX", "60000"])
        .await
        .unwrap();
    let reason = tokio::time::timeout(WATCHDOG + SLACK, handle.lost())
        .await
        .expect("lost() did not fire after the key was taken over");
    assert_eq!(reason, LostReason::NotOwner);
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(
        redis.cmd(&["GET", &key]).await.unwrap(),
        "H|1|intruder|pod/x/1"
    );
    let pttl: i64 = redis.cmd(&["PTTL", &key]).await.unwrap().parse().unwrap();
    assert!(pttl > 50_000, "the new owner's TTL was touched: {pttl}");
}

/// Redis frozen for 2.5 watchdog timeouts: the holder must learn it lost the lease (locally,
/// by its deadline) before Redis comes back and hands the key to another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_makes_the_holder_lose_the_lease_before_anyone_else_gets_it() {
    let redis = Arc::new(server().await);
    let (lock, other) = (client(&redis).await, client(&redis).await);
    let handle = lock.acquire("lost-pause", Lease::Watchdog).await.unwrap();
    let lost_flag = Arc::new(AtomicBool::new(false));
    let lost_task = tokio::spawn({
        let lost = handle.lost();
        let flag = Arc::clone(&lost_flag);
        async move {
            let reason = lost.await;
            flag.store(true, Ordering::SeqCst);
            (reason, Instant::now())
        }
    });
    // Let one renewal through, then freeze.
    tokio::time::sleep(WATCHDOG / 2).await;
    redis.pause().unwrap();
    let paused_at = Instant::now();
    tokio::time::sleep(WATCHDOG * 5 / 2).await;
    assert!(
        lost_flag.load(Ordering::SeqCst),
        "lost() had not fired after {:?} of a frozen Redis (watchdog timeout {WATCHDOG:?})",
        paused_at.elapsed()
    );
    assert!(!handle.is_held());
    redis.resume().unwrap();
    let options = common::watchdog_waiting(Duration::from_secs(5));
    let taken = other.acquire_with("lost-pause", options).await.unwrap();
    let taken_at = Instant::now();
    let (reason, lost_at) = lost_task.await.unwrap();
    assert_eq!(reason, LostReason::Expired);
    assert!(lost_at < taken_at);
    assert!(!handle.is_held());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert!(
        taken.is_held(),
        "the old holder's release touched the new lease"
    );
    drop(taken);
}

/// Repeated short freezes just under / around the watchdog timeout: whenever another client
/// holds the key, the first holder must not say `is_held()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_held_never_overlaps_another_holder_across_freezes() {
    let redis = Arc::new(server().await);
    let (lock, other) = (client(&redis).await, client(&redis).await);
    let freezes = [600u64, 900, 1000, 1100, 1300, 800];
    for (i, freeze) in freezes.into_iter().enumerate() {
        let name = format!("freeze-{i}");
        let handle = lock.acquire(&name, Lease::Watchdog).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200 + 37 * i as u64)).await;
        redis.pause().unwrap();
        tokio::time::sleep(Duration::from_millis(freeze)).await;
        redis.resume().unwrap();
        // Race another client for the key right away, and keep checking the first holder.
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match other
                .try_acquire(&name, Lease::Fixed(Duration::from_secs(30)))
                .await
            {
                Ok(taken) => {
                    assert!(
                        !handle.is_held(),
                        "freeze {freeze} ms: another client holds {name} while the first \
                         holder's handle says is_held(): {:?}",
                        handle.status()
                    );
                    drop(taken);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        drop(handle);
    }
}

/// Redis frozen from just after a renewal until three quarters of the watchdog timeout: two
/// renewals in a row fail, as they would on a period's schedule, but failed renewals are tried
/// again at each wake-up, so the first one after the freeze keeps the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_survives_a_freeze_that_ends_before_its_deadline() {
    let ttl = Duration::from_secs(12);
    let redis = server().await;
    let config = common::config(&redis)
        .watchdog_timeout(ttl)
        .command_timeout(Duration::from_millis(500));
    let lock = common::connect(config).await;
    let handle = lock
        .acquire("survive-pause", Lease::Watchdog)
        .await
        .unwrap();
    let deadline = || match handle.status() {
        LeaseStatus::Held { valid_until } => valid_until,
        other => panic!("the lease is {other:?}"),
    };
    let granted = deadline();
    assert!(
        common::eventually(ttl, || async { deadline() > granted }).await,
        "no renewal within the watchdog timeout"
    );
    let renewed_at = Instant::now();
    let renewed = deadline();
    redis.pause().unwrap();
    // Past the two renewals a third of the timeout apart, and their command timeouts.
    tokio::time::sleep_until(renewed_at + ttl * 3 / 4).await;
    redis.resume().unwrap();
    assert!(
        common::eventually(ttl, || async { deadline() > renewed }).await,
        "the lease was not renewed after the freeze"
    );
    assert!(handle.is_held());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}
