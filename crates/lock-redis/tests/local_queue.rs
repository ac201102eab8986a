//! One client's waiters for a key form a FIFO queue: they are granted the lock in the order they
//! asked, a task that releases and asks again queues behind them, only the head tries when the
//! lock may be free (one attempt per release, not one per waiter), and a head that leaves —
//! cancelled or timed out — hands its turn to the next.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{SLACK, client, command_calls, delta, eventually, one_subscriber, server};
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, LockHandle, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const KEY: &str = "queue";
/// The outside holder's lease: far longer than any test, so only a release can end it.
const LONG: Duration = Duration::from_secs(120);

fn options(wait: Duration) -> AcquireOptions {
    common::fixed_waiting(LONG, wait)
}

/// Starts acquisition `i` on `lock` and returns once it is queued (the `n`th waiter), so the
/// order of arrival is the order of `i`. On grant it records `i` in `order` and releases.
async fn queue_waiter(
    lock: &RedisLock,
    i: usize,
    n: usize,
    order: &Arc<Mutex<Vec<usize>>>,
) -> JoinHandle<()> {
    let task = tokio::spawn({
        let (lock, order) = (lock.clone(), Arc::clone(order));
        async move {
            let handle = lock
                .acquire_with(KEY, options(Duration::from_secs(60)))
                .await;
            let handle = handle.unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            order.lock().unwrap().push(i);
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        }
    });
    let queued = eventually(SLACK, || async { lock.queued_waiters(KEY) == n }).await;
    assert!(
        queued,
        "waiter {i} never queued (queued: {})",
        lock.queued_waiters(KEY)
    );
    task
}

/// Queues waiters `ids` on `lock`, one after the other, in that order.
async fn queue_waiters(
    lock: &RedisLock,
    ids: std::ops::Range<usize>,
    order: &Arc<Mutex<Vec<usize>>>,
) -> Vec<JoinHandle<()>> {
    let already = lock.queued_waiters(KEY);
    let mut tasks = Vec::new();
    for (n, i) in ids.enumerate() {
        tasks.push(queue_waiter(lock, i, already + n + 1, order).await);
    }
    tasks
}

/// Waits for every waiter task to finish (each releases what it was granted).
async fn all_served(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        tokio::time::timeout(SLACK * 4, task)
            .await
            .expect("a waiter hung")
            .unwrap();
    }
}

async fn held_elsewhere(redis: &lock_testkit::RedisServer) -> (RedisLock, LockHandle) {
    let outsider = client(redis).await;
    let held = outsider.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    (outsider, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_client_are_granted_in_arrival_order() {
    let redis = server().await;
    let (_outsider, held) = held_elsewhere(&redis).await;
    let lock = client(&redis).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks = queue_waiters(&lock, 0..20, &order).await;
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    all_served(tasks).await;
    assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    assert_eq!(lock.queued_waiters(KEY), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_releases_and_asks_again_queues_behind_the_waiters() {
    let (_redis, [lock]) = common::server_with().await;
    let held = lock.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks = queue_waiters(&lock, 0..3, &order).await;
    // The holder releases and asks again at once: it must not take the lock back before the
    // three waiters had their turn.
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let again = lock
        .acquire_with(KEY, options(Duration::from_secs(60)))
        .await
        .unwrap();
    order.lock().unwrap().push(99);
    drop(again);
    all_served(tasks).await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 99]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_cost_one_attempt_per_release() {
    let redis = server().await;
    let (_outsider, held) = held_elsewhere(&redis).await;
    let lock = client(&redis).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks = queue_waiters(&lock, 0..5, &order).await;
    let channel = lock.release_channel(KEY);
    assert!(one_subscriber(&redis, &channel).await);
    let before = command_calls(&redis).await;
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    all_served(tasks).await;
    let calls = delta(&before, &command_calls(&redis).await, "evalsha");
    // 1 outside release + 5 grants + 5 releases; at most one more: the first waiter's re-check
    // once its subscription was confirmed may fall after `before`. Waking all five on every
    // release would cost 5 + 4 + 3 + 2 + 1 attempts.
    assert!(
        (11..=12).contains(&calls),
        "{calls} script calls for 5 queued waiters"
    );
    assert_eq!(*order.lock().unwrap(), (0..5).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_head_hands_its_turn_to_the_next_waiter() {
    let redis = server().await;
    let (_outsider, held) = held_elsewhere(&redis).await;
    let lock = client(&redis).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let head = queue_waiter(&lock, 0, 1, &order).await;
    let next = queue_waiter(&lock, 1, 2, &order).await;
    head.abort();
    assert!(head.await.unwrap_err().is_cancelled());
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 1 }).await);

    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    tokio::time::timeout(SLACK, next)
        .await
        .expect("the next waiter was not woken")
        .unwrap();
    assert!(released_at.elapsed() < SLACK);
    assert_eq!(*order.lock().unwrap(), vec![1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_wait_ran_out_hands_its_turn_to_the_next_waiter() {
    let redis = server().await;
    let (_outsider, held) = held_elsewhere(&redis).await;
    let lock = client(&redis).await;
    let short = tokio::spawn({
        let lock = lock.clone();
        async move {
            lock.acquire_with(KEY, options(Duration::from_millis(300)))
                .await
        }
    });
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 1 }).await);
    let order = Arc::new(Mutex::new(Vec::new()));
    let next = queue_waiter(&lock, 1, 2, &order).await;
    let error = short.await.unwrap().expect_err("the head's wait ran out");
    assert!(error.to_string().contains("held"), "{error}");
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 1 }).await);

    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    tokio::time::timeout(SLACK, next)
        .await
        .expect("the next waiter was not woken")
        .unwrap();
    assert_eq!(*order.lock().unwrap(), vec![1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_waiter_wakes_when_the_previous_waiters_lease_ends_unreleased() {
    let redis = server().await;
    let (_outsider, held) = held_elsewhere(&redis).await;
    let lock = client(&redis).await;
    // The first waiter gets a short fixed lease and keeps its handle without releasing: no
    // release message will come, so the next waiter must wake when that lease ends.
    let short_lease = Duration::from_millis(800);
    let first = tokio::spawn({
        let lock = lock.clone();
        async move {
            let options = common::fixed_waiting(short_lease, Duration::from_secs(60));
            let handle = lock.acquire_with(KEY, options).await.unwrap();
            (handle, Instant::now())
        }
    });
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 1 }).await);
    let second = tokio::spawn({
        let lock = lock.clone();
        async move {
            let handle = lock
                .acquire_with(KEY, options(Duration::from_secs(60)))
                .await;
            (handle, Instant::now())
        }
    });
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 2 }).await);

    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (first_handle, first_at) = first.await.unwrap();
    let (second_handle, second_at) = tokio::time::timeout(SLACK * 2, second)
        .await
        .expect("the second waiter slept past the first one's lease")
        .unwrap();
    second_handle.expect("the second waiter was not granted the expired lease");
    assert!(second_at - first_at >= short_lease - Duration::from_millis(50));
    assert!(!first_handle.is_held());
}

/// A client whose queue for a key never empties (tasks taking it in turns) must not starve
/// another client's waiter: once a release shows other clients waiting, this client's head
/// learns of releases by the release message, like theirs, instead of ahead of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_queue_on_one_client_does_not_starve_another_client() {
    let (_redis, [busy, other]) = common::server_with().await;
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (busy, stop, grants) = (busy.clone(), Arc::clone(&stop), Arc::clone(&grants));
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let Ok(handle) = busy
                    .acquire_with(KEY, options(Duration::from_secs(60)))
                    .await
                else {
                    continue;
                };
                grants.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = handle.release().await;
            }
        }));
    }
    assert!(eventually(SLACK, || async { grants.load(Ordering::SeqCst) > 20 }).await);

    let result = other
        .acquire_with(KEY, options(Duration::from_secs(20)))
        .await;
    stop.store(true, Ordering::SeqCst);
    let granted = result.is_ok();
    drop(result);
    all_served(tasks).await;
    assert!(granted, "the other client's waiter starved for 20 s");
}

/// Queued waiters have chosen to wait: a Redis outage shorter than the command timeout does not
/// fail them (one after the other, as each head's attempt failed and woke the next); they retry
/// and are granted once Redis is back. A longer one fails them (`it/lost_connection.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_outlive_a_short_outage() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("lock_redis=trace,fred=off")
        .with_test_writer()
        .try_init();
    let mut redis = server().await;
    // A command timeout well past the outage below, on a loaded machine too.
    let config = common::config(&redis).command_timeout(Duration::from_secs(15));
    let lock = common::connect(config).await;
    let held = lock.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks = queue_waiters(&lock, 0..3, &order).await;
    assert!(one_subscriber(&redis, &lock.release_channel(KEY)).await);

    redis.kill().await.unwrap();
    // The holder lets go while Redis is down: the release is held until Redis answers (or the
    // command timeout), and wakes the head, whose attempt waits or fails too.
    let release = tokio::spawn(held.release());
    // Back after a while, empty (no persistence): the lock is free.
    let down_until = Instant::now() + Duration::from_secs(3);
    tokio::time::sleep_until(down_until).await;
    redis.restart().await.unwrap();
    let _ = release.await.unwrap();

    // Each waiter panics if its acquisition fails; all are served within their 60 s wait.
    all_served(tasks).await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
}
