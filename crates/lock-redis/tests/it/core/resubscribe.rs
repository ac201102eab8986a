//! The release subscriptions when the pub/sub connection drops and reconnects.
//!
//! A client waiting on several keys has one `SSUBSCRIBE` per release channel. Its pub/sub
//! connection is killed (`CLIENT KILL TYPE pubsub` — what an idle timeout in a proxy, NAT or
//! load balancer, Redis' `client-output-buffer-limit pubsub`, or a server restart does). The
//! client reconnects; every channel that still has a waiter must be subscribed again, or the
//! releases of those keys are missed and their waiters sit out the holder's TTL or their whole
//! wait time.
//!
//! The re-subscription is delegated to fred's `SubscriberClient::manage_subscriptions()`
//! (subscriptions.rs). In fred 10.1 its `resubscribe_all` first sends `SUBSCRIBE` and
//! `PSUBSCRIBE` with *no arguments* (this client uses neither), which Redis answers with
//! `ERR wrong number of arguments`; those unsolicited error replies are matched to the next
//! in-flight `SSUBSCRIBE`, `resubscribe_all` stops at the first error, and only the first
//! channel (lowest hash slot) is subscribed again. Nothing retries.

use crate::common;

use std::time::Duration;

use common::{SLACK, client, eventually};
use lock_core::lock::{DistributedLock, LockHandle, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

async fn client_count(redis: &RedisServer) -> usize {
    redis
        .cmd(&["CLIENT", "LIST"])
        .await
        .unwrap()
        .lines()
        .count()
}

async fn shard_subscribers(redis: &RedisServer, channel: &str) -> String {
    redis
        .cmd(&["PUBSUB", "SHARDNUMSUB", channel])
        .await
        .unwrap()
}

type Waiting = JoinHandle<(Result<LockHandle, lock_core::LockError>, Instant)>;

/// `holder` takes `names` (60 s fixed leases); `waiter` waits for each (25 s). Returns once the
/// server lists every release channel.
async fn wait_on(
    redis: &RedisServer,
    holder: &RedisLock,
    waiter: &RedisLock,
    names: &[String],
) -> (Vec<LockHandle>, Vec<Waiting>) {
    let mut held = Vec::new();
    let mut waiting = Vec::new();
    for name in names {
        held.push(common::hold(holder, name, Duration::from_secs(60)).await);
        let waiter = waiter.clone();
        let name = name.clone();
        waiting.push(tokio::spawn(async move {
            let options = common::fixed_waiting(Duration::from_secs(30), Duration::from_secs(25));
            let result = waiter.acquire_with(&name, options).await;
            (result, Instant::now())
        }));
    }
    let mut expected: Vec<String> = names.iter().map(|n| holder.release_channel(n)).collect();
    expected.sort();
    assert!(
        eventually(SLACK, || async {
            common::shard_channels(redis).await == expected
        })
        .await,
        "the waiters never all subscribed: {:?}",
        common::shard_channels(redis).await
    );
    (held, waiting)
}

/// Kills the pub/sub connection(s) and waits until the client count is back.
async fn kill_pubsub(redis: &RedisServer) {
    let clients_before = client_count(redis).await;
    let killed = redis
        .cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .await
        .unwrap();
    assert_eq!(
        killed, "1",
        "expected to kill exactly the waiter's pub/sub connection"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            client_count(redis).await >= clients_before
        })
        .await,
        "the pub/sub connection never came back"
    );
}

/// Five waiters on five keys; one pub/sub reconnect. All five channels must be subscribed on
/// the server again while the client still counts a waiter on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_channel_is_resubscribed_after_a_pubsub_reconnect() {
    let (redis, [holder, waiter]) = common::server_with().await;
    waiter.client().ping().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // let its pub/sub connection settle
    let names: Vec<String> = (0..5).map(|i| format!("resub:{i}")).collect();
    let (held, waiting) = wait_on(&redis, &holder, &waiter, &names).await;

    kill_pubsub(&redis).await;
    let mut expected: Vec<String> = names.iter().map(|n| holder.release_channel(n)).collect();
    expected.sort();
    let resubscribed = eventually(Duration::from_secs(10), || async {
        common::shard_channels(&redis).await == expected
    })
    .await;
    let mut listed = waiter.client().subscribed_channels();
    listed.sort();
    assert_eq!(
        listed, expected,
        "the client believes it is subscribed to all"
    );
    assert!(
        resubscribed,
        "after the reconnect the client still counts waiters on {} channels, but the server \
         has subscribers on only {:?}",
        expected.len(),
        common::shard_channels(&redis).await
    );
    for task in waiting {
        task.abort();
    }
    drop(held);
}

/// The consequence: after one pub/sub reconnect, releases of most keys no longer wake their
/// waiters; each sits out its whole 25 s wait (the holders' leases are 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_several_keys_are_woken_by_releases_after_a_pubsub_reconnect() {
    let (redis, [holder, waiter]) = common::server_with().await;
    waiter.client().ping().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let names: Vec<String> = (0..5).map(|i| format!("resub-wake:{i}")).collect();
    let (held, waiting) = wait_on(&redis, &holder, &waiter, &names).await;

    kill_pubsub(&redis).await;
    // Give the re-subscription every chance.
    let _ = eventually(Duration::from_secs(3), || async {
        common::shard_channels(&redis).await.len() == names.len()
    })
    .await;
    let on_server = common::shard_channels(&redis).await;

    let released_at = Instant::now();
    for handle in held {
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let mut report = Vec::new();
    let mut missed = 0;
    for (name, task) in names.iter().zip(waiting) {
        let (result, at) = task.await.unwrap();
        let woke_after = at - released_at;
        let ok = result.is_ok() && woke_after < SLACK;
        if !ok {
            missed += 1;
        }
        report.push(format!(
            "{name}: {} after {woke_after:?}",
            if result.is_ok() { "granted" } else { "FAILED" }
        ));
    }
    assert_eq!(
        missed,
        0,
        "waiters that missed the release of their key (server subscriptions at release: \
         {on_server:?}):\n{}",
        report.join("\n")
    );
}

/// Right after connecting, fred runs the same `resubscribe_all` once (its reconnect event also
/// fires on the first connect). A waiter whose `SSUBSCRIBE` is in flight at that moment can get
/// one of the stray `ERR wrong number of arguments for 'subscribe'/'psubscribe'` replies instead
/// of its own: it is told "no release notifications" (a warning) and waits for the holder's TTL,
/// although the server did subscribe the channel — which then also leaks on the server.
///
/// The window is the first moments of the pub/sub connection, so each round starts a fresh
/// client (a pod that just started) with five waiters at once; the test fails on
/// the first round where the client's own view and the server's differ, after checking that
/// the waiter really misses its release. If no round hits the window the test passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_started_right_after_connect_are_woken_by_releases() {
    let (redis, [holder]) = common::server_with().await;
    for round in 0..12u64 {
        let names: Vec<String> = (0..5).map(|i| format!("fresh:{round}:{i}")).collect();
        let mut held = Vec::new();
        for name in &names {
            held.push(common::hold(&holder, name, Duration::from_secs(60)).await);
        }
        let waiter = client(&redis).await;
        tokio::time::sleep(Duration::from_millis(round % 3)).await;
        let mut waiting = Vec::new();
        for name in names.clone() {
            let waiter = waiter.clone();
            waiting.push(tokio::spawn(async move {
                let options =
                    common::fixed_waiting(Duration::from_secs(30), Duration::from_secs(20));
                let result = waiter.acquire_with(&name, options).await;
                (result, Instant::now())
            }));
        }
        let mut expected: Vec<String> = names.iter().map(|n| holder.release_channel(n)).collect();
        expected.sort();
        let on_server = eventually(SLACK, || async {
            common::shard_channels(&redis).await == expected
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut listed = waiter.client().subscribed_channels();
        listed.sort();
        if on_server && listed == expected {
            for task in waiting {
                task.abort();
            }
            drop(held);
            drop(waiter);
            // Let the aborted waiters' subscriptions go before the next round.
            let _ = eventually(SLACK, || async {
                common::shard_channels(&redis).await.is_empty()
            })
            .await;
            continue;
        }
        let server_before = common::shard_channels(&redis).await.len();
        let released_at = Instant::now();
        for handle in held {
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        }
        let mut report = Vec::new();
        for (name, task) in names.iter().zip(waiting) {
            let (result, at) = task.await.unwrap();
            report.push(format!(
                "{name}: {} {:?} after its release",
                if result.is_ok() { "granted" } else { "FAILED" },
                at - released_at
            ));
        }
        // Every waiter is done; whatever the server still lists has no local waiter.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let leaked = common::shard_channels(&redis).await;
        panic!(
            "round {round}: a freshly connected client lost track of a subscription: the server \
             listed {server_before} channels, the client tracks {} ({listed:?}); the untracked \
             waiter is not woken by its release:\n{}\nserver-side subscriptions left with no \
             waiter: {leaked:?}",
            listed.len(),
            report.join("\n")
        );
    }
}

/// The re-subscription after a reconnect can fail (here: the server refuses it once with
/// `NOPERM`; in production a `LOADING` reply after a restart, a timeout, a failover). Nothing
/// retries it: the client keeps counting the channel as subscribed, so later waiters on the key
/// join the dead subscription and are never woken by a release either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_resubscription_is_retried_and_later_releases_still_wake_waiters() {
    let (redis, [holder, waiter]) = common::server_with().await;
    let held = common::hold(&holder, "resub-3", Duration::from_secs(60)).await;
    let channel = holder.release_channel("resub-3");
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let options = common::fixed_waiting(Duration::from_secs(30), Duration::from_secs(25));
            let result = waiter.acquire_with("resub-3", options).await;
            (result, Instant::now())
        }
    });
    assert!(
        eventually(SLACK, || async {
            shard_subscribers(&redis, &channel).await == format!("{channel}\n1")
        })
        .await
    );
    let clients_before = client_count(&redis).await;
    // Refuse channels for a moment and drop the pub/sub connection.
    redis
        .cmd(&["ACL", "SETUSER", "default", "resetchannels"])
        .await
        .unwrap();
    let _ = redis
        .cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            client_count(&redis).await >= clients_before
        })
        .await,
        "the pub/sub connection never came back"
    );
    // Let its re-subscription attempt run into the refusal, then allow channels again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis
        .cmd(&["ACL", "SETUSER", "default", "allchannels"])
        .await
        .unwrap();
    // A healthy client would now re-subscribe (the channel still has a waiter).
    let resubscribed = eventually(Duration::from_secs(5), || async {
        shard_subscribers(&redis, &channel).await == format!("{channel}\n1")
    })
    .await;

    let listed = waiter.client().subscribed_channels();
    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (result, acquired_at) = waiting.await.unwrap();
    let handle = result.expect("the waiter did not get the lock");
    let woke_after = acquired_at - released_at;
    assert!(
        woke_after < SLACK,
        "the waiter took {woke_after:?} to notice the release: the channel was never \
         re-subscribed after the failed attempt (re-subscribed: {resubscribed}; the client \
         listed it as subscribed at the release: {listed:?})"
    );
    drop(handle);
}
