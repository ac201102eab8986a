//! The pub/sub connection is silently dead while the command connection works.
//!
//! This is what an idle TCP connection through a NAT, firewall or load balancer with an idle
//! timeout looks like: the pub/sub connection of a client idles whenever nobody waits (the
//! command connection stays busy with watchdog renewals), the middlebox forgets it, and from
//! then on everything sent on it vanishes without an error — fred configures no TCP keepalive.
//! The design's answer is "no release notifications; waiting for the holder's TTL instead".
//!
//! A [`FaultProxy`] sits between the client and Redis and black-holes any connection that sends
//! `SSUBSCRIBE` (after that command: both directions, nothing forwarded, nothing closed).

use crate::common;

use std::time::Duration;

use common::server;
use lock_core::lock::DistributedLock;
use lock_testkit::{FaultProxy, RedisServer, TrapAction};
use tokio::time::Instant;

/// A proxy to `redis` that black-holes every connection that sends `SSUBSCRIBE`: the command
/// reaches Redis, then nothing more is forwarded on that connection, either way, and nothing is
/// closed.
async fn blackhole_proxy(redis: &RedisServer) -> FaultProxy {
    let proxy = common::proxy(redis).await;
    proxy.arm_trap_repeating(b"SSUBSCRIBE", TrapAction::Blackhole);
    proxy
}

const WAIT: Duration = Duration::from_secs(3);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Six waiters of one client, on six keys whose holders' fixed leases end after 300 ms. The
/// command connection answers every call at once; only release notifications are unavailable.
/// Falling back to the holder's TTL, every waiter should get its key within about 300 ms, and
/// certainly within its 3 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_fall_back_to_the_holders_ttl_when_the_pubsub_connection_is_dead() {
    let redis = server().await;
    let proxy = blackhole_proxy(&redis).await;
    let holder = common::client(&redis).await;
    let waiter = common::connect(
        common::default_config(proxy.url())
            .watchdog_timeout(Duration::from_secs(1))
            .command_timeout(COMMAND_TIMEOUT)
            .wait_time(WAIT)
            .instance_id("waiter-behind-nat"),
    )
    .await;
    // The command connection through the proxy is healthy.
    waiter.client().ping().await.unwrap();

    let keys: Vec<String> = (0..6).map(|i| format!("blackhole:{i}")).collect();
    let mut held = Vec::new();
    for key in &keys {
        held.push(common::hold(&holder, key, Duration::from_millis(300)).await);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for key in keys.clone() {
        let waiter = waiter.clone();
        tasks.push(tokio::spawn(async move {
            let options = common::fixed_waiting(Duration::from_secs(30), WAIT);
            let result = waiter.acquire_with(&key, options).await;
            (key, result, started.elapsed())
        }));
    }
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for task in tasks {
        let (key, result, took) = task.await.unwrap();
        assert!(
            took <= WAIT + COMMAND_TIMEOUT + common::SLACK,
            "{key}: the acquire took {took:?}, beyond wait + one command timeout"
        );
        match result {
            Ok(_handle) => report.push(format!("{key}: granted after {took:?}")),
            Err(e) => {
                report.push(format!("{key}: FAILED after {took:?}: {e}"));
                failures.push(key);
            }
        }
    }
    drop(held);
    assert!(
        failures.is_empty(),
        "keys free since 300 ms were not granted within the {WAIT:?} wait while Redis answered \
         every command; only the pub/sub connection was dead:\n{}",
        report.join("\n")
    );
}

/// One waiter alone: the key frees after 300 ms, but the wait (500 ms) is shorter than one
/// command timeout (2 s), the time the subscription takes to fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_wait_is_not_spent_entirely_on_a_dead_subscription() {
    let redis = server().await;
    let proxy = blackhole_proxy(&redis).await;
    let holder = common::client(&redis).await;
    let waiter = common::connect(
        common::default_config(proxy.url())
            .command_timeout(Duration::from_secs(2))
            .instance_id("waiter-behind-nat"),
    )
    .await;
    waiter.client().ping().await.unwrap();
    let _held = common::hold(&holder, "blackhole:short", Duration::from_millis(300)).await;
    let wait = Duration::from_millis(500);
    let started = Instant::now();
    let result = waiter
        .acquire_with(
            "blackhole:short",
            common::fixed_waiting(Duration::from_secs(30), wait),
        )
        .await;
    let took = started.elapsed();
    let handle = result.unwrap_or_else(|e| panic!("not granted after {took:?}: {e}"));
    // The holder's lease ended at 300 ms; a TTL-based waiter retries then, not at 1 s.
    assert!(
        took < wait + Duration::from_millis(700),
        "granted only after {took:?} (wait {wait:?}): the waiter sat in a dead SSUBSCRIBE for a \
         whole command timeout instead of retrying when the holder's TTL ran out"
    );
    drop(handle);
}

/// Cancelled waiters still cost a full command timeout each: the subscription manager runs
/// their `SSUBSCRIBE` although nobody waits for the answer any more, one after the other. Ten
/// acquisitions cancelled after 20 ms queue ten seconds of dead subscriptions in front of the
/// next waiter, whose key frees after 300 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiters_do_not_queue_dead_subscriptions_in_front_of_later_ones() {
    let redis = server().await;
    let proxy = blackhole_proxy(&redis).await;
    let holder = common::client(&redis).await;
    let waiter = common::connect(
        common::default_config(proxy.url())
            .command_timeout(COMMAND_TIMEOUT)
            .instance_id("waiter-behind-nat"),
    )
    .await;
    waiter.client().ping().await.unwrap();
    let mut held = Vec::new();
    for i in 0..10 {
        let key = format!("cancelled:{i}");
        held.push(common::hold(&holder, &key, Duration::from_secs(60)).await);
        let options = common::watchdog_waiting(Duration::from_secs(30));
        let _ = tokio::time::timeout(
            Duration::from_millis(20),
            waiter.acquire_with(&key, options),
        )
        .await;
    }
    let _short = common::hold(&holder, "cancelled:last", Duration::from_millis(300)).await;
    let started = Instant::now();
    let result = waiter
        .acquire_with(
            "cancelled:last",
            common::fixed_waiting(Duration::from_secs(30), WAIT),
        )
        .await;
    let took = started.elapsed();
    assert!(
        result.is_ok(),
        "a key free after 300 ms was not granted within the {WAIT:?} wait ({took:?}) because ten \
         cancelled waiters' subscriptions were still being attempted ahead of it: {}",
        result.unwrap_err()
    );
}
