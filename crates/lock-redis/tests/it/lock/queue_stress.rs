//! Stress of the per-client waiter queue: one client's queued waiters, a second client's waiters, cancellations at random
//! points (while queued, while head, with the attempt in flight), handles dropped instead of
//! released, and try_acquire (wait 0) barging in. Every holder lets go within a few ms and leases
//! are long, so a gap of seconds between two grants means a lost wake-up: everybody asleep while
//! the lock is free.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{SLACK, eventually};
use lock_core::lock::DistributedLock;
use lock_redis::lock::RedisLock;
use lock_testkit::Rng;
use tokio::time::Instant;

const KEY: &str = "queue-stress";
const LONG: Duration = Duration::from_secs(120);

async fn worker(
    lock: RedisLock,
    seed: u64,
    stop: Arc<AtomicBool>,
    grants: Arc<Mutex<Vec<Instant>>>,
    cancelled: Arc<AtomicU64>,
) {
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::SeqCst) {
        let roll = rng.below(100);
        let options = if roll < 5 {
            common::fixed_waiting(LONG, Duration::ZERO)
        } else {
            common::fixed_waiting(LONG, Duration::from_secs(60))
        };
        let acquisition = lock.acquire_with(KEY, options);
        let result = if (5..25).contains(&roll) {
            // Cancelled at a random point: before the attempt, in flight, queued, as the head.
            let budget =
                Duration::from_micros(rng.below(if roll % 2 == 0 { 30_000 } else { 300_000 }));
            match tokio::time::timeout(budget, acquisition).await {
                Ok(result) => result,
                Err(_) => {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
            }
        } else {
            acquisition.await
        };
        let Ok(handle) = result else { continue };
        grants.lock().unwrap().push(Instant::now());
        tokio::time::sleep(Duration::from_micros(rng.below(3_000))).await;
        if rng.below(4) == 0 {
            drop(handle); // released in the background
        } else {
            let _ = handle.release().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lost_wake_ups_under_random_cancellation_and_barging() {
    let (redis, [a, b]) = common::server_with().await;
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let cancelled = Arc::new(AtomicU64::new(0));
    let seed = lock_testkit::seed("QUEUE_STRESS_SEED");
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let lock = if i < 6 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(worker(
            lock,
            seed.wrapping_add(i * 7919),
            Arc::clone(&stop),
            Arc::clone(&grants),
            Arc::clone(&cancelled),
        )));
    }
    let killer = {
        let stop = Arc::clone(&stop);
        let port = redis.port();
        tokio::spawn(async move {
            let mut kills = 0;
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(700)).await;
                let _ = lock_testkit::command_at(
                    "127.0.0.1",
                    port,
                    None,
                    &["CLIENT", "KILL", "TYPE", "pubsub"],
                )
                .await;
                kills += 1;
            }
            kills
        })
    };
    tokio::time::sleep(Duration::from_secs(12)).await;
    stop.store(true, Ordering::SeqCst);
    eprintln!("pubsub kills {}", killer.await.unwrap());
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("a worker hung")
            .unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let max_gap = grants
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    eprintln!(
        "{} grants, {} cancellations, longest gap {max_gap:?}",
        grants.len(),
        cancelled.load(Ordering::SeqCst)
    );
    assert!(grants.len() > 100);
    // Measured at most ~150 ms (pub/sub kills included); a lost wake-up sleeps until a 60 s wait
    // or a 120 s lease ends. SLACK leaves room for a loaded machine.
    assert!(
        max_gap < SLACK,
        "longest gap between grants {max_gap:?}: a lost wake-up"
    );
    // Nothing left queued or subscribed.
    assert!(
        eventually(SLACK, || async {
            a.queued_waiters(KEY) == 0 && b.queued_waiters(KEY) == 0
        })
        .await
    );
    assert!(
        eventually(SLACK, || async {
            a.client().subscribed_channels().is_empty()
                && b.client().subscribed_channels().is_empty()
        })
        .await
    );
}
