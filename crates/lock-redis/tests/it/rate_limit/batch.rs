//! Local batches on one redis-server: two clients stay within the bound, a refill is one
//! `EVALSHA` per batch, and without a batch every decision is one.

use crate::common;

use std::time::Duration;

use common::{command_calls, delta, server};
use lock_core::rate_limit::FailurePolicy;

use super::{limiter, store};

/// Two clients with batches of 10, four tasks each, offered requests without pause for 2 s
/// against 50/1s with a burst of 10: the whole run admits at most burst + rate × its length
/// (each permit spent was charged on the server first, from rest), and the limit still admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_batches_admit_at_most_burst_plus_rate() {
    let redis = server().await;
    let mut limiters = Vec::new();
    for _ in 0..2 {
        let store = store(&common::client(&redis).await).await;
        let api = limiter(&store, "api", "50/1s", FailurePolicy::FailClosed);
        api.set_quota(api.quota().with_burst(10).unwrap());
        limiters.push(api.local_batch(10).unwrap());
    }
    let started = tokio::time::Instant::now();
    let offer = Duration::from_secs(2);
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let api = limiters[task % 2].clone();
            tokio::spawn(async move {
                let mut admitted = 0u32;
                while started.elapsed() < offer {
                    let decision = api.try_acquire("client", 1).await.unwrap();
                    if decision.allowed {
                        admitted += 1;
                    } else {
                        // A held denial answers at once: wait as a caller would.
                        tokio::time::sleep(decision.retry_after).await;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let bound = 10.0 + 50.0 * elapsed;
    assert!(
        f64::from(admitted) <= bound,
        "{admitted} admitted in {elapsed:.2} s, bound {bound:.1}"
    );
    assert!(admitted >= 30, "the limit admitted at its rate: {admitted}");
}

/// Below the limit, 1,000 decisions of one key with batches of 25 are 40 `EVALSHA`s; without a
/// batch, 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refill_is_one_evalsha_per_batch_and_off_by_default() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let plain = limiter(&store, "api", "1000000/1s", FailurePolicy::FailClosed);
    assert_eq!(plain.local_batch_size(), 0);
    let batched = plain.clone().local_batch(25).unwrap();
    // The script loaded and the connections up before counting.
    plain.try_acquire("warm", 1).await.unwrap();

    let before = command_calls(&redis).await;
    for _ in 0..1000 {
        assert!(batched.try_acquire("hot", 1).await.unwrap().allowed);
    }
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "evalsha"), 1000 / 25);

    for _ in 0..1000 {
        assert!(plain.try_acquire("hot", 1).await.unwrap().allowed);
    }
    let plain_after = command_calls(&redis).await;
    assert_eq!(delta(&after, &plain_after, "evalsha"), 1000);
}
