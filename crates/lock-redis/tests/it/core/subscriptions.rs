//! The subscription manager under stress: a silently dead pub/sub connection, the last waiter
//! leaving as a new one arrives, many distinct keys, and re-entry across address spellings.

use crate::common;

use std::time::Duration;

use common::{COMMAND_TIMEOUT, SLACK, client, eventually, server};
use lock_core::lock::{DistributedLock, DistributedLockExt, Lease, ReleaseOutcome};
use lock_testkit::{FaultProxy, RedisServer, TrapAction};
use tokio::time::Instant;

/// A proxy to `redis` that silently black-holes the *first* connection that sends `SSUBSCRIBE`
/// (the command reaches Redis, then nothing more is forwarded either way and nothing is closed:
/// a NAT or load balancer that forgot an idle connection and drops its packets) and forwards
/// every other connection. Its `connections_accepted()` counts the connections made through it.
async fn forget_first_pubsub_connection_proxy(redis: &RedisServer) -> FaultProxy {
    let proxy = common::proxy(redis).await;
    proxy.arm_trap(b"SSUBSCRIBE", TrapAction::Blackhole);
    proxy
}

// ---------------------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------------------

/// design.md: "The pub/sub connection is recycled when a subscription stays unanswered for two
/// command timeouts (a middlebox that silently dropped the idle connection)". fred 10.1 never
/// arms its unresponsive check for pub/sub commands (`check_unresponsive = !kind.is_pubsub()`,
/// router/utils.rs), and the pub/sub connection carries nothing else, so a silently dead
/// pub/sub connection is never replaced: every `SSUBSCRIBE` times out, the driver retries
/// forever, and every later waiter of the client spends its wait (up to the holder's TTL) on a
/// confirmation that never comes. Here the holder releases 1 s into a 20 s wait; only the first
/// pub/sub connection is dead — a new one would work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_pubsub_connection_is_replaced_and_releases_wake_waiters_again() {
    let redis = server().await;
    let proxy = forget_first_pubsub_connection_proxy(&redis).await;
    let holder = client(&redis).await;
    let waiter = common::connect(
        common::default_config(proxy.url())
            .watchdog_timeout(common::WATCHDOG)
            .command_timeout(COMMAND_TIMEOUT)
            .instance_id("waiter-behind-nat"),
    )
    .await;
    waiter.client().ping().await.unwrap();
    // The command connection and the pub/sub connection are both up.
    assert!(eventually(SLACK, || async { proxy.connections_accepted() >= 2 }).await);
    let connections_before = proxy.connections_accepted();

    let held = common::hold(&holder, "dead-pubsub", Duration::from_secs(60)).await;
    let wait = Duration::from_secs(20);
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let options = common::fixed_waiting(Duration::from_secs(30), wait);
            let result = waiter.acquire_with("dead-pubsub", options).await;
            (result, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (result, granted_at) = waiting.await.unwrap();
    let took = granted_at - released_at;
    // Two command timeouts to notice, a reconnect, one SSUBSCRIBE: a few seconds at most.
    assert!(
        result.is_ok() && took < 2 * COMMAND_TIMEOUT + SLACK,
        "the key was released 1 s into a {wait:?} wait, but the waiter got {:?} only {took:?} \
         after the release; the pub/sub connection was never replaced (the proxy accepted {} new \
         connection(s) since the waiter started)",
        result.as_ref().map(|h| h.owner().to_owned()),
        proxy.connections_accepted() - connections_before
    );
}

/// Re-entry on Redis is keyed on `namespace()`: the address as written (password redacted) plus
/// the key prefix. design.md says "same `namespace()`, i.e. same Redis and key prefix", but two
/// clients of the same Redis, database and prefix whose URLs are spelt differently
/// (`redis://127.0.0.1:<port>` and `…/0`; likewise `localhost` vs `127.0.0.1`, or two Redis
/// users) get different namespaces. A section holding a key through one cannot re-enter it
/// through the other: the nested call waits for its own lease for its whole wait time and fails
/// closed, naming this very section's owner token as the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entry_does_not_depend_on_how_the_same_redis_address_is_spelt() {
    let (redis, [a]) = common::server_with().await;
    let b = common::connect(
        common::default_config(format!("{}/0", redis.url()))
            .watchdog_timeout(common::WATCHDOG)
            .command_timeout(COMMAND_TIMEOUT)
            .instance_id("test-pod"),
    )
    .await;
    let b2 = b.clone();
    let nested = a
        .with_lock("spelling", Lease::Watchdog, || async move {
            let options = common::watchdog_waiting(Duration::from_millis(500));
            b2.acquire_with("spelling", options)
                .await
                .map(|handle| handle.is_reentrant())
        })
        .await
        .unwrap();
    assert!(
        matches!(nested, Ok(true)),
        "same Redis, same database, same prefix — namespaces {:?} and {:?}: the section's nested \
         acquisition did not re-enter: {nested:?}",
        a.namespace(),
        b.namespace()
    );
}

// ---------------------------------------------------------------------------------------------
// Guards: risks tried that held up
// ---------------------------------------------------------------------------------------------

/// The last waiter of a key leaves (its acquisition is cancelled) just as a new one arrives, at
/// varying moments relative to the driver's `SUNSUBSCRIBE`, and every fifth round the pub/sub
/// connection is killed right then (a reconnect during `SUNSUBSCRIBE`/`SSUBSCRIBE`). The new
/// waiter must still be woken by the release: a stale "confirmed" taken over from the leaving
/// subscription, a lost poke of the driver or a lost re-subscription would leave it sitting out
/// its 30 s wait (the holder's lease is 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_arriving_as_the_last_one_leaves_is_woken_by_the_release() {
    let (redis, [holder, waiter]) = common::server_with().await;
    waiter.client().ping().await.unwrap();
    let channel = holder.release_channel("churn");
    let wait = common::fixed_waiting(Duration::from_secs(30), Duration::from_secs(30));
    for round in 0..40u64 {
        let held = common::hold(&holder, "churn", Duration::from_secs(60)).await;
        let first = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.acquire_with("churn", wait).await.map(drop) }
        });
        assert!(
            eventually(SLACK, || async {
                common::shard_channels(&redis).await == [channel.clone()]
            })
            .await,
            "round {round}: the first waiter never subscribed"
        );
        first.abort();
        match round % 4 {
            0 => {}
            1 => tokio::task::yield_now().await,
            2 => tokio::time::sleep(Duration::from_millis(1)).await,
            _ => tokio::time::sleep(Duration::from_millis(round % 7)).await,
        }
        if round % 5 == 4 {
            let _ = redis.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
        }
        let second = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let result = waiter.acquire_with("churn", wait).await;
                (result, Instant::now())
            }
        });
        assert!(first.await.unwrap_err().is_cancelled());
        tokio::time::sleep(Duration::from_millis(20 + round % 30)).await;
        let released_at = Instant::now();
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        let (result, granted_at) = second.await.unwrap();
        let took = granted_at - released_at;
        let handle = result.unwrap_or_else(|e| panic!("round {round}: not granted: {e}"));
        assert!(
            took < SLACK,
            "round {round}: the new waiter noticed the release only after {took:?}"
        );
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
    assert!(
        eventually(SLACK, || async {
            waiter.client().subscribed_channels().is_empty()
                && common::shard_channels(&redis).await.is_empty()
        })
        .await,
        "subscriptions left behind: client {:?}, server {:?}",
        waiter.client().subscribed_channels(),
        common::shard_channels(&redis).await
    );
}

/// Many distinct keys: 300 waiters, one per key; half are cancelled, the other half's keys are
/// released in one burst and must all be granted promptly. Afterwards no channel entry, no server-side subscription, and — once the client is
/// dropped — no driver, dispatcher or connection task is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_distinct_keys_leave_no_channel_subscription_or_task_behind() {
    const KEYS: usize = 300;
    let (redis, [holder]) = common::server_with().await;
    holder.client().ping().await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let baseline = metrics.num_alive_tasks();

    let waiter = client(&redis).await;
    let names: Vec<String> = (0..KEYS).map(|i| format!("many:{i}")).collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(common::hold(&holder, name, Duration::from_secs(60)).await);
    }
    let mut tasks = Vec::new();
    for name in names.clone() {
        let waiter = waiter.clone();
        tasks.push(tokio::spawn(async move {
            let options = common::watchdog_waiting(Duration::from_secs(60));
            waiter.acquire_with(&name, options).await.map(drop)
        }));
    }
    assert!(
        eventually(2 * SLACK, || async {
            common::shard_channels(&redis).await.len() == KEYS
        })
        .await,
        "not every waiter subscribed: {} of {KEYS}",
        common::shard_channels(&redis).await.len()
    );
    // The metric sees them: a waiter task and a channel driver per key.
    assert!(metrics.num_alive_tasks() >= baseline + 2 * KEYS);
    // Half the waiters are cancelled; the other half's keys are released all at once, a burst
    // of messages that can overrun the dispatcher's channel (its `Lagged` path wakes everyone).
    let mut released = Vec::new();
    let mut granted = Vec::new();
    for (i, (handle, task)) in held.into_iter().zip(tasks).enumerate() {
        if i % 2 == 0 {
            released.push(tokio::spawn(async move { handle.release().await.unwrap() }));
            granted.push(task);
        } else {
            task.abort();
            assert!(task.await.unwrap_err().is_cancelled());
            drop(handle);
        }
    }
    let burst = Instant::now();
    for release in released {
        assert_eq!(release.await.unwrap(), ReleaseOutcome::Released);
    }
    for task in granted {
        task.await
            .unwrap()
            .expect("a waiter was not granted its released key");
    }
    assert!(
        burst.elapsed() < 2 * SLACK,
        "waiters took {:?} to notice a burst of {} releases",
        burst.elapsed(),
        KEYS / 2
    );
    assert!(
        eventually(2 * SLACK, || async {
            waiter.client().subscribed_channels().is_empty()
                && common::shard_channels(&redis).await.is_empty()
        })
        .await,
        "left behind: {} channel entries in the client, {} subscriptions on the server",
        waiter.client().subscribed_channels().len(),
        common::shard_channels(&redis).await.len()
    );
    drop(waiter);
    assert!(
        eventually(2 * SLACK, || async {
            metrics.num_alive_tasks() <= baseline
        })
        .await,
        "{} tasks alive after the waiting client was dropped, {baseline} before it existed",
        metrics.num_alive_tasks()
    );
}
