//! Fair (FIFO) locks across clients and processes: waiters are granted the lock in the order they
//! queued, a waiter that dies or leaves never holds up the queue for longer than the fair waiter
//! timeout, a waiter's wait time is honoured, and no queue state outlives its waiters.

use crate::common;

use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{COMMAND_TIMEOUT, SLACK, config, eventually, server};
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, ReleaseOutcome};
use lock_redis::limits::TOMBSTONE_TTL;
use lock_redis::lock::RedisLock;
use lock_testkit::{RedisServer, test_child};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const KEY: &str = "cdc:ticket-4711";
/// The holders' lease: longer than any test, so only a release ends it.
const LONG: Duration = Duration::from_secs(300);
/// A short fair waiter timeout, so dead waiters are evicted within two seconds (with the
/// command timeout).
const PLACE: Duration = Duration::from_secs(1);
/// Set in a child process: the Redis URL its waiter connects to.
const CHILD_URL: &str = "FAIR_TEST_CHILD_REDIS_URL";

fn fair(wait: Duration) -> AcquireOptions {
    common::fixed_waiting(LONG, wait).fair()
}

async fn fair_client(redis: &RedisServer) -> RedisLock {
    common::connect(config(redis).fair_waiter_timeout(PLACE)).await
}

/// Waits until `n` fair waiters are queued for `KEY`.
async fn until_queued(redis: &RedisServer, lock: &RedisLock, n: usize) {
    assert!(
        common::queue_reaches(redis, lock, KEY, n).await,
        "expected {n} queued waiters, found {}",
        common::queued(redis, lock, KEY).await
    );
}

/// Whether `KEY`'s queue and timeout keys are both gone.
async fn no_queue_state(redis: &RedisServer, lock: &RedisLock) -> bool {
    common::integer(
        redis,
        &["EXISTS", &lock.queue_key(KEY), &lock.timeout_key(KEY)],
    )
    .await
        == 0
}

/// Starts fair waiter `i` on `lock`; on grant it records `i` in `order` and releases.
fn waiter(lock: &RedisLock, i: usize, order: &Arc<Mutex<Vec<usize>>>) -> JoinHandle<()> {
    let (lock, order) = (lock.clone(), Arc::clone(order));
    tokio::spawn(async move {
        let handle = lock
            .acquire_with(KEY, fair(Duration::from_secs(120)))
            .await
            .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        order.lock().unwrap().push(i);
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    })
}

/// A fair waiter for `KEY` in a process of its own (this test binary running
/// [`child_fair_waiter`]), to be killed mid-wait.
fn child_waiter(redis: &RedisServer) -> Child {
    test_child(module_path!(), "child_fair_waiter")
        .env(CHILD_URL, redis.url())
        .spawn()
        .expect("start the child process")
}

/// The body of [`child_waiter`]'s process: queues fairly for `KEY` and waits. Does nothing when
/// run on its own.
#[tokio::test]
#[ignore = "the body of a child process the fair-lock tests start and kill"]
async fn child_fair_waiter() {
    common::run_fair_child_waiter(CHILD_URL, KEY, PLACE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_waiters_on_five_clients_are_granted_in_the_order_they_queued() {
    let redis = server().await;
    let holder = fair_client(&redis).await;
    let clients = futures::future::join_all((0..5).map(|_| fair_client(&redis))).await;
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..50 {
        // Clients take turns, so consecutive waiters are never on the same client.
        tasks.push(waiter(&clients[i % 5], i, &order));
        until_queued(&redis, &holder, i + 1).await;
    }
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..50).collect::<Vec<_>>());
    assert!(no_queue_state(&redis, &holder).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_waiters_are_evicted_and_the_others_still_finish_in_order() {
    let redis = server().await;
    let holder = fair_client(&redis).await;
    let clients = futures::future::join_all((0..3).map(|_| fair_client(&redis))).await;
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();

    let killed_at = [0, 3, 4, 8, 12];
    let order = Arc::new(Mutex::new(Vec::new()));
    let (mut tasks, mut children) = (Vec::new(), Vec::new());
    for i in 0..15 {
        if killed_at.contains(&i) {
            children.push(child_waiter(&redis));
        } else {
            tasks.push(waiter(&clients[i % 3], i, &order));
        }
        until_queued(&redis, &holder, i + 1).await;
    }
    // SIGKILL: no clean-up runs, the places stay until they time out.
    for child in &mut children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert_eq!(common::queued(&redis, &holder, KEY).await, 15);
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    for task in tasks {
        task.await.unwrap();
    }
    let expected: Vec<usize> = (0..15).filter(|i| !killed_at.contains(i)).collect();
    assert_eq!(*order.lock().unwrap(), expected);
    assert!(no_queue_state(&redis, &holder).await);
}

#[tokio::test]
async fn a_dead_waiters_place_expires_on_its_own() {
    let redis = server().await;
    let holder = fair_client(&redis).await;
    let _held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let mut child = child_waiter(&redis);
    until_queued(&redis, &holder, 1).await;
    child.kill().unwrap();
    child.wait().unwrap();
    // Nobody calls the fair scripts any more: the keys expire with the dead waiter's place.
    let pttl = common::integer(&redis, &["PTTL", &holder.queue_key(KEY)]).await;
    // A place lasts the fair waiter timeout plus one command timeout.
    assert!(
        pttl > 0 && pttl <= (PLACE + COMMAND_TIMEOUT).as_millis() as i64,
        "queue key PTTL {pttl} ms"
    );
    assert!(eventually(SLACK, || no_queue_state(&redis, &holder)).await);
}

/// A release with a fair waiter queued publishes the message naming it: the waiter is granted
/// long before its next refresh or the holder's TTL would have had it look again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_queued_fair_waiter_it_names() {
    let redis = server().await;
    // A place kept for the longest allowed, 5 minutes: the waiter's refreshes come every 100 s.
    let place = Duration::from_secs(300);
    let holder = fair_client(&redis).await;
    let waiter = common::connect(config(&redis).fair_waiter_timeout(place)).await;
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire_with(KEY, fair(Duration::from_secs(60)))
            .await
    });
    until_queued(&redis, &holder, 1).await;
    assert!(common::one_subscriber(&redis, &holder.release_channel(KEY)).await);
    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let granted = waiting.await.unwrap();
    // Without the message it is granted only by its last look, when its 60 s wait ends.
    let took = released_at.elapsed();
    assert!(
        granted.is_ok() && took < Duration::from_secs(30),
        "the queued waiter was not woken: {granted:?} after {took:?}"
    );
}

#[tokio::test]
async fn a_dropped_waiter_leaves_the_queue_at_once_and_hands_its_turn_on() {
    let redis = server().await;
    let holder = fair_client(&redis).await;
    let (first, second) = (fair_client(&redis).await, fair_client(&redis).await);
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let dropped = tokio::spawn({
        let first = first.clone();
        async move {
            first
                .acquire_with(KEY, fair(Duration::from_secs(120)))
                .await
        }
    });
    until_queued(&redis, &holder, 1).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let next = waiter(&second, 1, &order);
    until_queued(&redis, &holder, 2).await;
    dropped.abort();
    // Well before the place would time out: the dropped waiter took it out itself.
    let left = eventually(PLACE / 2, || async {
        common::queued(&redis, &holder, KEY).await == 1
    })
    .await;
    assert!(left, "the dropped waiter's place is still queued");
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    next.await.unwrap();
    assert_eq!(*order.lock().unwrap(), [1]);
    assert!(no_queue_state(&redis, &holder).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_outwait_their_wait_time_leave_no_queue_state_behind() {
    let redis = server().await;
    let holder = fair_client(&redis).await;
    let waiters = fair_client(&redis).await;
    let baseline = common::integer(&redis, &["DBSIZE"]).await;
    let _held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();

    let tasks: Vec<_> = (0..10u64)
        .map(|i| {
            let lock = waiters.clone();
            let wait = Duration::from_millis(400 + 100 * i);
            tokio::spawn(async move {
                let started = Instant::now();
                let error = lock.acquire_with(KEY, fair(wait)).await.unwrap_err();
                (wait, started.elapsed(), error)
            })
        })
        .collect();
    for task in tasks {
        let (wait, took, error) = task.await.unwrap();
        assert_eq!(
            error.details()["reason"],
            "held_by_another_owner",
            "{error}"
        );
        // No early give-up; no overrun beyond the one command timeout the contract allows.
        assert!(took >= wait, "gave up after {took:?} of a {wait:?} wait");
        assert!(
            took <= wait + COMMAND_TIMEOUT + Duration::from_millis(500),
            "returned after {took:?} for a {wait:?} wait"
        );
    }
    assert!(no_queue_state(&redis, &holder).await);
    assert_eq!(common::integer(&redis, &["DBSIZE"]).await, baseline + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_fair_waiters_on_a_thousand_keys_leave_dbsize_at_its_baseline() {
    let redis = server().await;
    let holder = fair_client(&redis).await;
    let clients = futures::future::join_all((0..4).map(|_| fair_client(&redis))).await;
    let baseline = common::integer(&redis, &["DBSIZE"]).await;
    let keys: Vec<String> = (0..1000).map(|i| format!("cdc:entity-{i}")).collect();

    let held = futures::future::try_join_all(
        keys.iter()
            .map(|key| holder.acquire(key, Lease::Fixed(LONG))),
    )
    .await
    .unwrap();
    // Half the waiters outlast their holder's release and get the lock; the other half give
    // up while the lock is still held. The short ones are waited for first: a short waiter
    // still queued when the keys are released (a loaded machine starts tasks late) would be
    // granted too.
    let spawn_waiters = |even: bool, wait: Duration| -> Vec<_> {
        keys.iter()
            .enumerate()
            .filter(|(i, _)| (i % 2 == 0) == even)
            .map(|(i, key)| {
                let (lock, key) = (clients[i % 4].clone(), key.clone());
                tokio::spawn(async move {
                    match lock.acquire_with(&key, fair(wait)).await {
                        Ok(handle) => {
                            let released = handle.release().await.unwrap();
                            assert_eq!(released, ReleaseOutcome::Released);
                            true
                        }
                        Err(error) => {
                            assert_eq!(error.details()["reason"], "held_by_another_owner");
                            false
                        }
                    }
                })
            })
            .collect()
    };
    let long = spawn_waiters(true, Duration::from_secs(60));
    let short = spawn_waiters(false, Duration::from_millis(300));
    for task in short {
        assert!(
            !task.await.unwrap(),
            "a short waiter got a lock that was held"
        );
    }
    let all_queued = eventually(Duration::from_secs(30), || async {
        let reply = redis
            .cmd(&["EVAL", COUNT_QUEUES, "0", "*:queue"])
            .await
            .unwrap();
        reply.trim() == "500"
    })
    .await;
    assert!(all_queued, "the long waiters did not all queue");
    for handle in held {
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let mut granted = 0;
    for task in long {
        granted += usize::from(task.await.unwrap());
    }
    assert_eq!(granted, 500);
    let queues = redis
        .cmd(&["EVAL", COUNT_QUEUES, "0", "*:queue"])
        .await
        .unwrap();
    let timeouts = redis
        .cmd(&["EVAL", COUNT_QUEUES, "0", "*:timeout"])
        .await
        .unwrap();
    assert_eq!((queues.trim(), timeouts.trim()), ("0", "0"));
    // What is left are the releases' tombstones, which expire on their own.
    let back = eventually(TOMBSTONE_TTL + SLACK * 2, || async {
        common::integer(&redis, &["DBSIZE"]).await == baseline
    })
    .await;
    assert!(
        back,
        "DBSIZE {} ≠ baseline {baseline}",
        common::integer(&redis, &["DBSIZE"]).await
    );
}

/// Counts the keys matching ARGV[1] with SCAN (never KEYS).
const COUNT_QUEUES: &str = "local n, cursor = 0, '0' \
    repeat local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000) \
    cursor = r[1] n = n + #r[2] until cursor == '0' return n";

#[tokio::test]
async fn a_fair_try_defers_to_queued_waiters_until_their_places_time_out() {
    let redis = server().await;
    let lock = fair_client(&redis).await;
    // A waiter that queued and died, as its process would have left it.
    let time = redis.cmd(&["TIME"]).await.unwrap();
    let seconds: i64 = time.lines().next().unwrap().trim().parse().unwrap();
    let evicted_at = (seconds * 1000 + 2_000).to_string();
    redis
        .cmd(&["ZADD", &lock.queue_key(KEY), "1", "dead-pod/1/1"])
        .await
        .unwrap();
    redis
        .cmd(&["ZADD", &lock.timeout_key(KEY), &evicted_at, "dead-pod/1/1"])
        .await
        .unwrap();

    let error = lock
        .acquire_with(KEY, fair(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(error.details()["reason"], "waiters_ahead", "{error}");
    assert_eq!(error.details()["waitersAhead"], "1");
    // A non-fair acquisition may take the free lock ahead of the queue.
    let barging = lock.try_acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    assert_eq!(barging.release().await.unwrap(), ReleaseOutcome::Released);

    // A fair waiter is granted once the dead waiter's place has timed out.
    let started = Instant::now();
    let handle = lock
        .acquire_with(KEY, fair(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(no_queue_state(&redis, &lock).await);
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn fair_grants_carry_increasing_fencing_tokens_and_the_lease_asked_for() {
    let redis = server().await;
    let lock = fair_client(&redis).await;
    let first = lock.acquire_with(KEY, fair(Duration::ZERO)).await.unwrap();
    let pttl = common::integer(&redis, &["PTTL", &lock.redis_key(KEY)]).await;
    assert!(pttl > 0 && pttl <= LONG.as_millis() as i64, "PTTL {pttl}");
    let token = first.fencing_token();
    let next = common::spawn_grant(&lock, KEY, fair(Duration::from_secs(30)));
    until_queued(&redis, &lock, 1).await;
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(next.await.unwrap().0 > token);
}

#[tokio::test]
async fn a_fair_acquisition_fails_closed_at_once_when_redis_is_down() {
    let mut redis = server().await;
    let lock = fair_client(&redis).await;
    redis.kill().await.unwrap();
    let wait = Duration::from_secs(60);
    let started = Instant::now();
    let error = lock.acquire_with(KEY, fair(wait)).await.unwrap_err();
    // Not after the whole wait: only a waiter that holds a place keeps trying.
    assert!(
        started.elapsed() < wait / 2,
        "failed after {:?}",
        started.elapsed()
    );
    assert_eq!(error.details()["reason"], "backend_unavailable", "{error}");
}
