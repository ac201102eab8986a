//! The single-flight guard when its caller is cancelled while Redis holds a command back
//! (`CLIENT PAUSE … WRITE`), and when its action blocks a runtime thread.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{GENEROUS, connect, eventually, server};
use lock_core::values::{Expiry, Flight, Progress, SharedValues, ValuesError, WhenBusy};
use lock_testkit::{RedisServer, command_at};
use tokio::sync::oneshot;

/// A guard TTL no check waits out: a guard left behind shows.
const HOUR: Duration = Duration::from_secs(3600);

/// Holds writes on `redis` back for 1 s.
async fn pause_writes(port: u16) {
    command_at(
        "127.0.0.1",
        port,
        None,
        &["CLIENT", "PAUSE", "1000", "WRITE"],
    )
    .await
    .unwrap();
}

/// Returns once the pause is over: a write on `values`' connection, behind what it sent before.
async fn after_the_pause(values: &SharedValues) {
    let ttl = Expiry::After(Duration::from_secs(60));
    values.set("after-the-pause", &0u32, ttl).await.unwrap();
}

async fn absent_eventually(values: &SharedValues, key: &str) -> bool {
    eventually(GENEROUS, || async {
        values
            .get::<serde_json::Value>(key)
            .await
            .unwrap()
            .is_none()
    })
    .await
}

/// The next caller of `key` runs the action: no guard or outcome was left behind.
async fn runs_anew(values: &SharedValues, key: &str) {
    let next = values
        .single_flight(key, HOUR, WhenBusy::Report, |_: Progress<()>| async {
            2u32
        })
        .await
        .unwrap();
    assert_eq!(next, Flight::Ran(2));
}

/// Two clients of a private Redis, whose commands outwait a pause.
async fn two_clients() -> (RedisServer, SharedValues, SharedValues) {
    let redis = server().await;
    let config = || common::config(&redis).command_timeout(Duration::from_secs(10));
    let (a, b) = (connect(config()).await, connect(config()).await);
    let (a, b) = (super::values(&a).await.0, super::values(&b).await.0);
    (redis, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_dropped_while_its_claim_is_held_back_leaves_no_guard() {
    let (redis, values, other) = two_clients().await;
    let ran = Arc::new(AtomicBool::new(false));
    pause_writes(redis.port()).await;
    let call = values.single_flight("held-claim", HOUR, WhenBusy::Report, {
        let ran = Arc::clone(&ran);
        |_: Progress<u32>| async move { ran.store(true, Ordering::SeqCst) }
    });
    let cancelled = tokio::time::timeout(Duration::from_millis(200), call).await;
    assert!(
        cancelled.is_err(),
        "the claim was not held back: {cancelled:?}"
    );
    after_the_pause(&values).await;
    assert!(
        absent_eventually(&values, "held-claim").await,
        "a claim with no caller left is a guard nobody runs under"
    );
    assert!(!ran.load(Ordering::SeqCst));
    runs_anew(&other, "held-claim").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_timed_out_leaves_no_guard_once_redis_ran_it() {
    let redis = server().await;
    let config = common::config(&redis).command_timeout(Duration::from_millis(300));
    let values = super::values(&connect(config).await).await.0;
    pause_writes(redis.port()).await;
    let call = values.single_flight(
        "timed-out-claim",
        HOUR,
        WhenBusy::Report,
        |_: Progress<()>| async { panic!("the action ran although its claim was not confirmed") },
    );
    let claimed: Result<Flight<(), ()>, _> = call.await;
    assert!(
        matches!(claimed, Err(ValuesError::Unavailable { .. })),
        "{claimed:?}"
    );
    // A read answered on this connection comes after the claim, which Redis ran at the end of
    // the pause.
    let answered = eventually(GENEROUS, || async {
        values
            .get::<serde_json::Value>("after-the-claim")
            .await
            .is_ok()
    })
    .await;
    assert!(answered, "the client never answered again");
    assert!(
        absent_eventually(&values, "timed-out-claim").await,
        "a claim its caller was told failed is a guard nobody runs under"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_dropped_while_its_outcome_is_held_back_leaves_no_outcome() {
    let (redis, values, other) = two_clients().await;
    let (returned, returning) = oneshot::channel();
    let port = redis.port();
    let runner = tokio::spawn({
        let values = values.clone();
        async move {
            let action = |_: Progress<()>| async move {
                pause_writes(port).await;
                returned.send(()).unwrap();
                1u32
            };
            values
                .single_flight("held-outcome", HOUR, WhenBusy::Report, action)
                .await
        }
    });
    // The action returned in the poll that sent this, and its outcome went out to Redis.
    returning.await.unwrap();
    runner.abort();
    assert!(runner.await.unwrap_err().is_cancelled());
    after_the_pause(&values).await;
    assert!(
        absent_eventually(&values, "held-outcome").await,
        "an outcome kept for the guard's TTL is joined by every later caller"
    );
    runs_anew(&other, "held-outcome").await;
}

/// An action that blocks its thread past the guard's TTL (CPU-bound work with no `.await`)
/// keeps its guard: renewals come from a task of their own, on the runtime's other thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_blocking_its_thread_keeps_its_guard() {
    let (_redis, values, other) = two_clients().await;
    let ttl = Duration::from_secs(3);
    let (started, starting) = oneshot::channel();
    let (finish, finishing) = std::sync::mpsc::channel::<()>();
    let runner = tokio::spawn({
        let values = values.clone();
        async move {
            let action = |_: Progress<()>| async move {
                started.send(()).unwrap();
                let _ = finishing.recv_timeout(GENEROUS);
                1u32
            };
            values
                .single_flight("blocking", ttl, WhenBusy::Report, action)
                .await
        }
    });
    starting.await.unwrap();
    tokio::time::sleep(ttl + ttl / 3).await;
    let seen = other
        .single_flight("blocking", ttl, WhenBusy::Report, |_: Progress<()>| async {
            2u32
        })
        .await
        .unwrap();
    finish.send(()).unwrap();
    assert!(
        matches!(seen, Flight::RunningElsewhere { .. }),
        "the guard lapsed while its action ran: {seen:?}"
    );
    assert_eq!(runner.await.unwrap().unwrap(), Flight::Ran(1));
}
