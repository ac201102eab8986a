//! Shared values across OS processes: 500 waiters in four processes woken by one set, a
//! single-flight runner SIGKILLed mid-run, a queue consumer SIGKILLed holding taken items, and a
//! 100,000-item queue drained in bounded takes.

use crate::common;

use std::collections::BTreeSet;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{GENEROUS, SLACK, command_calls, delta, eventually, server};
use lock_core::values::{Expiry, Flight, MIN_FLIGHT_TTL, Progress, SharedValues, WhenBusy};
use lock_testkit::{RedisServer, command_at};
use tokio::time::Instant;

const URL: &str = "VALUES_CHILD_URL";
const RESULT_LINE: &str = "VALUES_RESULT ";
const WAITERS_PER_PROCESS: usize = 125;
const PROCESSES: usize = 4;

async fn redis_cmd(url: &str, args: &[&str]) -> String {
    let port = url.rsplit(':').next().unwrap().parse().unwrap();
    command_at("127.0.0.1", port, None, args).await.unwrap()
}

/// Shared values of a client of its own on the Redis at `url`.
async fn values_at(url: &str) -> SharedValues {
    let config = common::default_config(url).instance_id(format!("pod-{}", std::process::id()));
    super::values(&common::connect(config).await).await.0
}

/// Starts the ignored test `body` of this module against `redis`.
fn spawn_child(redis: &RedisServer, body: &str) -> Child {
    common::spawn_child(module_path!(), body, URL, redis)
}

/// 500 waiters in four processes, one set: one publish, no read by any waiter for it, and
/// every waiter returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_waiters_in_four_processes_wake_on_one_set() {
    let redis = server().await;
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| spawn_child(&redis, "child_waiters"))
        .collect();
    let url = redis.url();
    let ready = eventually(GENEROUS, || async {
        redis_cmd(&url, &["GET", "ready"]).await == PROCESSES.to_string()
    });
    assert!(ready.await, "the children's waiters did not all read");
    let before = command_calls(&redis).await;
    values_at(&url)
        .await
        .set("fan-out", "done", Expiry::After(GENEROUS))
        .await
        .unwrap();
    for child in children {
        assert_eq!(
            common::result_line(child, RESULT_LINE).await,
            format!("met {WAITERS_PER_PROCESS}")
        );
    }
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "spublish"), 1);
    assert_eq!(
        delta(&before, &after, "evalsha"),
        1,
        "the set, and nothing else"
    );
    assert_eq!(
        delta(&before, &after, "get"),
        1,
        "only the set script's own GET: no waiter read for it"
    );
}

/// One of the four processes: 125 waiters for `fan-out` = "done"; tells the parent once each
/// has read, then prints how many were met.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_waiters() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let values = values_at(&url).await;
    // Predicate calls: before the set, one per read of a waiter.
    let reads = Arc::new(AtomicUsize::new(0));
    let wait = || {
        let (values, reads) = (values.clone(), Arc::clone(&reads));
        tokio::spawn(async move {
            values
                .wait_for(
                    "fan-out",
                    GENEROUS,
                    move |v: Option<&lock_core::values::Versioned<String>>| {
                        reads.fetch_add(1, Ordering::SeqCst);
                        v.is_some_and(|v| v.value == "done")
                    },
                )
                .await
        })
    };
    // The first waiter subscribes. It reads once, and once more if it hears the confirmation
    // after that read: both reads are over before the others start.
    let mut waiters = vec![wait()];
    let channel = "lock:values:{fan-out}:written";
    let subscribed = eventually(GENEROUS, || async {
        let reply = redis_cmd(&url, &["PUBSUB", "SHARDNUMSUB", channel]).await;
        reply
            .lines()
            .nth(1)
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
            >= 1
    });
    assert!(subscribed.await);
    eventually(SLACK, || async { reads.load(Ordering::SeqCst) >= 2 }).await;
    let primed = reads.load(Ordering::SeqCst);
    // The others join the confirmed subscription: each reads exactly once.
    waiters.extend((1..WAITERS_PER_PROCESS).map(|_| wait()));
    let all_read = eventually(GENEROUS, || async {
        reads.load(Ordering::SeqCst) == primed + WAITERS_PER_PROCESS - 1
    });
    assert!(all_read.await);
    redis_cmd(&url, &["INCR", "ready"]).await;
    let mut met = 0;
    for waiter in waiters {
        if waiter.await.unwrap().unwrap().is_met() {
            met += 1;
        }
    }
    println!("{RESULT_LINE}met {met}");
}

/// A runner in another process is SIGKILLed mid-run: until its guard expires callers see it
/// running with its progress, and then a waiting caller runs the action within 4/3 TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runners_guard_expires_and_a_waiter_runs() {
    let redis = server().await;
    let mut child = spawn_child(&redis, "child_runner");
    let url = redis.url();
    let running = eventually(GENEROUS, || async {
        redis_cmd(&url, &["GET", "running"]).await == "1"
    });
    assert!(running.await, "the child never ran");
    let values = values_at(&url).await;
    let busy = values
        .single_flight(
            "warm-up",
            MIN_FLIGHT_TTL,
            WhenBusy::Report,
            |_: Progress<u32>| async { unreachable!("ran while the child ran") as u32 },
        )
        .await
        .unwrap();
    let Flight::RunningElsewhere { owner, progress } = busy else {
        panic!("{busy:?}");
    };
    assert!(
        owner.starts_with(&format!("pod-{}/", child.id())),
        "{owner}"
    );
    assert_eq!(progress, Some(3));
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let ran = values
        .single_flight(
            "warm-up",
            MIN_FLIGHT_TTL,
            WhenBusy::Wait(GENEROUS),
            |_: Progress<u32>| async { 7 },
        )
        .await
        .unwrap();
    assert_eq!(ran, Flight::Ran(7));
    let took = killed.elapsed();
    assert!(
        took < MIN_FLIGHT_TTL * 4 / 3 + SLACK,
        "ran {took:?} after the kill"
    );
}

/// The runner: reports progress 3, says so, and runs until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_runner() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let values = values_at(&url).await;
    let _ = values
        .single_flight(
            "warm-up",
            MIN_FLIGHT_TTL,
            WhenBusy::Report,
            |progress: Progress<u32>| async move {
                progress.report(&3).await.unwrap();
                redis_cmd(&url, &["SET", "running", "1"]).await;
                std::future::pending::<u32>().await
            },
        )
        .await;
}

/// A consumer in another process takes 30 of 100 items and is SIGKILLed before acknowledging:
/// they come back after the visibility timeout, and every item is handled, none lost, and
/// none twice but those 30 (at least once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumers_items_come_back() {
    let redis = server().await;
    let url = redis.url();
    let queue = values_at(&url).await.queue::<u32>("jobs");
    queue.push_all(&(0..100).collect::<Vec<_>>()).await.unwrap();
    let mut child = spawn_child(&redis, "child_consumer");
    let took = eventually(GENEROUS, || async {
        redis_cmd(&url, &["GET", "took"]).await == "30"
    });
    assert!(took.await, "the child never took its items");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut handled = Vec::new();
    let deadline = Instant::now() + GENEROUS;
    while !queue.is_empty().await.unwrap() {
        assert!(
            Instant::now() < deadline,
            "items left: {}",
            queue.len().await.unwrap()
        );
        let taken = queue.take(50, Duration::from_secs(1)).await.unwrap();
        handled.extend(taken.items.iter().map(|d| (d.item, d.deliveries)));
        queue.ack(&taken.ids()).await.unwrap();
        if taken.items.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let items: BTreeSet<u32> = handled.iter().map(|(item, _)| *item).collect();
    assert_eq!(items, (0..100).collect(), "every item once");
    assert_eq!(handled.len(), 100, "no item handled twice here");
    let redelivered: BTreeSet<u32> = handled
        .iter()
        .filter(|(_, d)| *d == 2)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        redelivered,
        (0..30).collect(),
        "the killed consumer's items, delivered twice"
    );
}

/// The consumer: takes 30 items for 1 s, says so, and never acknowledges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_consumer() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let queue = values_at(&url).await.queue::<u32>("jobs");
    let taken = queue.take(30, Duration::from_secs(1)).await.unwrap();
    redis_cmd(&url, &["SET", "took", &taken.items.len().to_string()]).await;
    std::future::pending::<()>().await;
}

/// 100,000 items pushed in batches are drained in takes of at most 1,000, in order, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_items_drain_in_bounded_takes() {
    const ITEMS: u32 = 100_000;
    let redis = server().await;
    let queue = values_at(&redis.url()).await.queue::<u32>("bulk");
    for batch in (0..ITEMS).collect::<Vec<_>>().chunks(1_000) {
        queue.push_all(batch).await.unwrap();
    }
    assert_eq!(queue.len().await.unwrap(), u64::from(ITEMS));
    let mut next = 0;
    while next < ITEMS {
        let taken = queue.take(1_000, GENEROUS).await.unwrap();
        assert!(!taken.items.is_empty() && taken.items.len() <= 1_000);
        for delivery in &taken.items {
            assert_eq!(delivery.item, next, "in push order");
            next += 1;
        }
        queue.ack(&taken.ids()).await.unwrap();
    }
    assert!(queue.is_empty().await.unwrap());
    assert_eq!(queue.take(1_000, GENEROUS).await.unwrap().items, []);
}
