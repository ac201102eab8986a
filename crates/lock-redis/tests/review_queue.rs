//! Review tests for the per-client FIFO queue of waiters (subscriptions.rs / acquire.rs / the
//! early wake in Inner::release).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{SLACK, client, eventually, server};
use lock_core::{AcquireOptions, DistributedLock, Lease, ReleaseOutcome};
use tokio::time::Instant;

const KEY: &str = "review";
const LONG: Duration = Duration::from_secs(120);

fn options(wait: Duration) -> AcquireOptions {
    AcquireOptions::new(Lease::Fixed(LONG)).wait(wait)
}

/// Client A runs a few tasks that take the key in turns (short critical section, short pause),
/// so A's local queue is never empty. Client B asks once with a 10 s wait. Every release of A
/// is followed — on A's own connection, before the release message even reaches B — by the
/// attempt of A's next queued waiter, so B's attempts always find the lock held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_queue_on_one_client_does_not_starve_another_client() {
    let redis = server().await;
    let a = client(&redis).await;
    let b = client(&redis).await;
    let stop = Arc::new(AtomicBool::new(false));
    let grants_a = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (a, stop, grants_a) = (a.clone(), Arc::clone(&stop), Arc::clone(&grants_a));
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let Ok(handle) = a.acquire_with(KEY, options(Duration::from_secs(60))).await else {
                    continue;
                };
                grants_a.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = handle.release().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    assert!(eventually(SLACK, || async { grants_a.load(Ordering::SeqCst) > 20 }).await);

    let started = Instant::now();
    let result = b.acquire_with(KEY, options(Duration::from_secs(10))).await;
    let waited = started.elapsed();
    let a_grants_meanwhile = grants_a.load(Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    let ok = result.is_ok();
    eprintln!("B waited {waited:?}; A granted {a_grants_meanwhile} times");
    drop(result);
    for task in tasks {
        let _ = tokio::time::timeout(SLACK * 4, task).await;
    }
    assert!(
        ok,
        "client B never got the lock in {waited:?} while client A was granted it {a_grants_meanwhile} times"
    );
}

/// The head of a queue whose future is not polled (its task is busy, or the future is parked)
/// keeps every later waiter of the client from trying, although the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_head_blocks_the_waiters_behind_it_while_the_lock_is_free() {
    let redis = server().await;
    let outsider = client(&redis).await;
    let held = outsider.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let lock = client(&redis).await;

    // The head: polled until it is queued, then parked (kept, not polled).
    let mut parked = Box::pin(lock.acquire_with(KEY, options(Duration::from_secs(60))));
    let queued = tokio::time::timeout(SLACK, async {
        loop {
            assert!(futures::poll!(parked.as_mut()).is_pending());
            if lock.queued_waiters(KEY) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(queued.is_ok(), "the head never queued");

    let second = tokio::spawn({
        let lock = lock.clone();
        async move {
            let started = Instant::now();
            let handle = lock
                .acquire_with(KEY, options(Duration::from_secs(8)))
                .await;
            (handle.is_ok(), started.elapsed())
        }
    });
    assert!(eventually(SLACK, || async { lock.queued_waiters(KEY) == 2 }).await);
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (granted, waited) = second.await.unwrap();
    drop(parked);
    assert!(granted);
    assert!(
        waited < Duration::from_secs(4),
        "the second waiter waited {waited:?} for a free lock (its whole wait)"
    );
}
