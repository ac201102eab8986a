//! Wake-ups of queued waiters that the per-client waiter queue must neither lose nor turn into
//! failures: a remote release after fencing tokens went back, and a busy Redis failing one
//! queued waiter after the other.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{SLACK, client, command_calls, delta, eventually, one_subscriber};
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, ReleaseOutcome};
use tokio::time::Instant;

const KEY: &str = "queue-wakeups";
const LONG: Duration = Duration::from_secs(120);

fn options(wait: Duration) -> AcquireOptions {
    common::fixed_waiting(LONG, wait)
}

/// Fencing tokens went back: the last grants were made while the server clock was an hour ahead
/// (emulated with a tombstone carrying such a token), then the key was lost (a restart without
/// persistence, a failover that lost the last write — emulated with FLUSHALL) and the clock is
/// right again. A remote client's release now carries a token below the local queue's
/// `newest_grant`, and the dispatcher drops it: the local head sleeps until the remote holder's
/// TTL although the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_release_wakes_the_head_after_fencing_tokens_went_back() {
    let (redis, [lock, remote]) = common::server_with().await;
    let key = lock.redis_key(KEY);
    let now_us = u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap();
    let ahead = now_us + 3_600_000_000;
    redis
        .cmd(&["SET", &key, &format!("R|{ahead}|ghost"), "PX", "60000"])
        .await
        .unwrap();
    let first = remote.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();

    let w1 = tokio::spawn({
        let lock = lock.clone();
        async move {
            lock.acquire_with(KEY, options(Duration::from_secs(30)))
                .await
        }
    });
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 1 }).await);
    let w2 = tokio::spawn({
        let lock = lock.clone();
        async move {
            let handle = lock
                .acquire_with(KEY, options(Duration::from_secs(30)))
                .await;
            (handle, Instant::now())
        }
    });
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 2 }).await);
    assert!(one_subscriber(&redis, &lock.release_channel(KEY)).await);

    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let h1 = w1.await.unwrap().expect("the first waiter is granted");
    assert!(h1.fencing_token() > ahead);

    // The key is lost; the clock is right again.
    redis.cmd(&["FLUSHALL"]).await.unwrap();
    let second = remote.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    assert!(second.fencing_token() < h1.fencing_token());

    // The first waiter lets go (its grant is gone): the second waiter, woken, tries and finds
    // the remote grant.
    let before = command_calls(&redis).await;
    assert_eq!(h1.release().await.unwrap(), ReleaseOutcome::NotHeld);
    // (Waits for the second waiter's attempt; before the change no attempt follows.)
    let _ = eventually(SLACK, || async {
        delta(&before, &command_calls(&redis).await, "evalsha") >= 2
    })
    .await;

    // The remote holder releases: the lock is free.
    let released_at = Instant::now();
    assert_eq!(second.release().await.unwrap(), ReleaseOutcome::Released);
    let (handle, granted_at) = tokio::time::timeout(SLACK * 2, w2)
        .await
        .expect("the head slept through the remote release (message dropped by newest_grant)")
        .unwrap();
    handle.expect("the second waiter is granted");
    assert!(granted_at - released_at < SLACK);
}

/// A script running past `busy-reply-threshold` makes Redis
/// answer BUSY for a moment. The holder's release is refused, but it wakes the head early; the
/// head's attempt is refused too, it leaves, the next tries at once, is refused, leaves, ... —
/// the whole queue fails within milliseconds, although the holder's lease (3 s) ends well
/// within their 30 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_moment_does_not_fail_every_queued_waiter() {
    let redis = std::sync::Arc::new(
        lock_testkit::RedisServer::builder()
            .args(["--busy-reply-threshold", "100"])
            .start()
            .await
            .unwrap(),
    );
    let lock = client(&redis).await;
    let held = common::hold(&lock, KEY, Duration::from_secs(3)).await;
    let mut waiters = Vec::new();
    for n in 1..=3 {
        let lock2 = lock.clone();
        waiters.push(tokio::spawn(async move {
            let handle = lock2
                .acquire_with(KEY, options(Duration::from_secs(30)))
                .await?;
            let _ = handle.release().await;
            Ok::<(), lock_core::LockError>(())
        }));
        assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == n }).await);
    }
    assert!(one_subscriber(&redis, &lock.release_channel(KEY)).await);

    let looping = {
        let redis = std::sync::Arc::clone(&redis);
        tokio::spawn(async move {
            redis
                .cmd(&["EVAL", "local i = 0 while true do i = i + 1 end", "0"])
                .await
        })
    };
    let busy = eventually(SLACK, || async {
        redis
            .cmd(&["PING"])
            .await
            .is_err_and(|e| e.to_string().contains("BUSY"))
    })
    .await;
    assert!(busy, "Redis never became busy");
    // The holder lets go while Redis is busy: refused (its lease ends at its TTL, in 3 s).
    assert!(held.release().await.is_err());
    redis.cmd(&["SCRIPT", "KILL"]).await.unwrap();
    let _ = looping.await;

    let mut failures = Vec::new();
    for waiter in waiters {
        let result = tokio::time::timeout(Duration::from_secs(40), waiter)
            .await
            .expect("a waiter hung")
            .unwrap();
        if let Err(error) = result {
            failures.push(error.to_string());
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 3 queued waiters (30 s wait each) failed on one BUSY moment: {failures:#?}",
        failures.len()
    );
}
