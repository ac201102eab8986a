//! A reply lost on the wire. A [`FaultProxy`] forwards a command to Redis, swallows the
//! reply and then closes the connection; fred reconnects and re-sends the in-flight command, so
//! Redis runs the script twice. The scripts claim to be idempotent per owner token.

use crate::common;

use std::time::Duration;

use common::{command_calls, delta, server};
use lock_core::lock::{DistributedLock, Lease, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::{FaultProxy, RedisServer, TrapAction};

/// How long the proxy keeps a trapped connection open (swallowing the reply) before closing it:
/// long enough for Redis to run the command.
const CLOSE_AFTER: Duration = Duration::from_millis(150);

/// Arms the proxy's one-shot trap: the next client→server chunk containing `marker` is
/// forwarded, its reply is swallowed, and the connection is closed [`CLOSE_AFTER`] later.
fn arm(proxy: &FaultProxy, marker: &str) {
    proxy.arm_trap(
        marker.as_bytes(),
        TrapAction::SwallowReplyThenClose(CLOSE_AFTER),
    );
}

async fn setup() -> (RedisServer, FaultProxy, RedisLock) {
    let redis = server().await;
    let (proxy, lock) = common::behind_proxy(&redis, |c| {
        c.watchdog_timeout(Duration::from_secs(3))
            .command_timeout(Duration::from_secs(2))
            .wait_time(Duration::from_secs(2))
            .instance_id("retry-pod")
    })
    .await;
    lock.client().ping().await.unwrap();
    (redis, proxy, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_is_granted_once_with_the_stored_token() {
    let (redis, proxy, lock) = setup().await;
    let before = command_calls(&redis).await;
    arm(&proxy, "retry-acquire");
    let handle = lock
        .acquire("retry-acquire", Lease::Fixed(Duration::from_secs(60)))
        .await
        .expect("the re-sent acquire must find its own grant");
    assert!(!proxy.trap_armed(), "the trap never fired");
    let after = command_calls(&redis).await;
    assert!(
        delta(&before, &after, "evalsha") >= 2,
        "the acquire was not re-sent"
    );
    let value = common::value(&redis, &lock.redis_key("retry-acquire")).await;
    assert_eq!(
        value,
        format!("H|{}|{}", handle.fencing_token(), handle.owner())
    );
    assert!(handle.is_held());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A connection that only listens on `channel`: with it, a release has someone to publish to.
async fn listen(redis: &RedisServer, channel: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", redis.port()))
        .await
        .unwrap();
    let command = format!(
        "*2\r\n$10\r\nSSUBSCRIBE\r\n${}\r\n{channel}\r\n",
        channel.len()
    );
    stream.write_all(command.as_bytes()).await.unwrap();
    assert!(common::one_subscriber(redis, channel).await);
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_reports_released() {
    let (redis, proxy, lock) = setup().await;
    let handle = common::hold(&lock, "retry-release", Duration::from_secs(60)).await;
    let _listener = listen(&redis, &lock.release_channel("retry-release")).await;
    let before = command_calls(&redis).await;
    arm(&proxy, &lock.release_channel("retry-release"));
    let outcome = handle.release().await.unwrap();
    assert!(!proxy.trap_armed(), "the trap never fired");
    let after = command_calls(&redis).await;
    assert!(
        delta(&before, &after, "evalsha") >= 2,
        "the release was not re-sent"
    );
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert_eq!(delta(&before, &after, "spublish"), 1, "published twice");
}

/// The release ran, its reply was lost, and a waiter of another client took the key (woken by
/// the release) before fred re-sent the release. The re-sent release finds the new holder and
/// reports `NotHeld` — "the lease had already ended; the critical section may have overlapped
/// another holder" — although this holder released the key itself, in time, and nothing
/// overlapped. `with_lock` logs a false "another owner may have run concurrently" warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_does_not_report_not_held_when_a_waiter_took_over() {
    let (redis, proxy, lock) = setup().await;
    let handle = common::hold(&lock, "retry-takeover", Duration::from_secs(60)).await;
    let other = common::client(&redis).await;
    let waiter = tokio::spawn(async move {
        let options = common::fixed_waiting(Duration::from_secs(60), Duration::from_secs(20));
        other.acquire_with("retry-takeover", options).await
    });
    let channel = lock.release_channel("retry-takeover");
    assert!(common::one_subscriber(&redis, &channel).await);
    arm(&proxy, &channel);
    assert!(handle.is_held());
    let outcome = handle.release().await.unwrap();
    assert!(!proxy.trap_armed(), "the trap never fired");
    let taken = waiter
        .await
        .unwrap()
        .expect("the waiter got the released key");
    assert_eq!(
        outcome,
        ReleaseOutcome::Released,
        "this holder released the key itself (the waiter got it only because of that release, \
         token {}), yet the release reports that the lease had already ended",
        taken.fencing_token()
    );
}

/// A watchdog renewal whose reply was lost is re-sent; the lease stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_whose_reply_was_lost_keeps_the_lease() {
    let (redis, proxy, lock) = setup().await;
    let handle = lock.acquire("retry-renew", Lease::Watchdog).await.unwrap();
    let before = command_calls(&redis).await;
    arm(&proxy, "retry-renew");
    assert!(
        common::eventually(Duration::from_secs(10), || async { !proxy.trap_armed() }).await,
        "no renewal passed the proxy"
    );
    // Two more ticks (1 s each).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = command_calls(&redis).await;
    assert!(delta(&before, &after, "evalsha") >= 2);
    assert!(handle.is_held(), "{:?}", handle.status());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A grant made while Redis became unreachable: the acquire's reply is lost and the proxy then
/// refuses connections for a while, so the acquisition fails with its outcome unknown and its
/// clean-up release cannot reach Redis at first. The clean-up keeps trying, and frees the key
/// soon after Redis is reachable again — not at the end of its 60 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_left_by_an_outage_is_freed_once_redis_is_back() {
    let redis = server().await;
    let (proxy, lock) = common::behind_proxy(&redis, |c| {
        c.command_timeout(Duration::from_millis(500))
            .wait_time(Duration::ZERO)
            .instance_id("outage-pod")
    })
    .await;
    lock.client().ping().await.unwrap();
    let key = lock.redis_key("outage-grant");
    arm(&proxy, "outage-grant");
    proxy.refuse_new(true);
    let error = lock
        .acquire("outage-grant", Lease::Fixed(Duration::from_secs(60)))
        .await
        .expect_err("no reply, no reconnection: the acquisition fails");
    assert!(!proxy.trap_armed(), "the trap never fired");
    // Redis did grant it: the key is held by the failed acquisition's owner token.
    let held = redis.cmd(&["GET", &key]).await.unwrap();
    assert!(held.starts_with("H|"), "{held} ({error})");
    // The outage's length (a fault held for a while, not a wait for an event): longer than a
    // single clean-up attempt, each bounded by the command timeout.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        redis.cmd(&["GET", &key]).await.unwrap().starts_with("H|"),
        "the grant was freed while Redis was unreachable?"
    );
    proxy.refuse_new(false);
    let back = tokio::time::Instant::now();
    let freed = common::eventually(Duration::from_secs(20), || async {
        !redis.cmd(&["GET", &key]).await.unwrap().starts_with("H|")
    })
    .await;
    assert!(
        freed,
        "the orphan grant was still held {:?} after Redis was reachable again (PTTL {})",
        back.elapsed(),
        redis.cmd(&["PTTL", &key]).await.unwrap()
    );
    eprintln!(
        "orphan grant freed {:?} after Redis was back",
        back.elapsed()
    );
}
