//! A shutdown that runs while an acquisition's script is in flight: whatever that script grants
//! must be handed back before a complete summary is returned — a process exits right after.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{SLACK, config, eventually, server};
use lock_core::lock::{DistributedLock, Lease};

/// One-way latency of the proxy: the acquire script's reply is surely still on its way when the
/// shutdown starts, and a clean-up release takes a round trip of 2 × this.
const LATENCY: Duration = Duration::from_millis(40);

/// Each iteration: a fresh client behind a slow proxy starts `try_acquire` (or a fair one) on a
/// task of its own; the shutdown runs once the script is on its way (odd iterations: once Redis
/// shows the grant, so only the reply is in flight; even ones: right after the task was polled,
/// the script maybe not run yet). A complete summary must mean the key is free in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_an_acquisition_in_flight() {
    let redis = server().await;
    let proxy = common::proxy(&redis).await;
    let mut granted_before_shutdown = 0;
    for i in 0..30 {
        let name = format!("in-flight-{i}");
        let lock = Arc::new(common::connect(config(&redis).address(proxy.url())).await);
        proxy.set_latency(LATENCY);
        let key = lock.redis_key(&name);
        let fair = i % 4 == 3;
        let acquiring = {
            let lock = Arc::clone(&lock);
            let name = name.clone();
            tokio::spawn(async move {
                let options = common::fixed_waiting(Duration::from_secs(30), Duration::ZERO);
                let options = if fair { options.fair() } else { options };
                lock.acquire_lease(&name, options).await
            })
        };
        if i % 2 == 1 {
            let granted = eventually(SLACK, || async {
                redis.cmd(&["EXISTS", &key]).await.unwrap() == "1"
            })
            .await;
            assert!(granted, "iteration {i}: the acquire script never ran");
            granted_before_shutdown += 1;
        } else {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
        let summary = lock.shutdown(Duration::from_secs(5)).await;
        let held = redis.cmd(&["GET", &key]).await.unwrap();
        assert!(
            summary.is_complete(),
            "iteration {i}: summary {summary} after an acquisition in flight"
        );
        assert!(
            held.is_empty() || held.starts_with("R|"),
            "iteration {i}: shutdown returned complete ({summary}) while the key is still held: {held:?}"
        );
        let result = acquiring.await.unwrap();
        assert!(
            result.is_err(),
            "iteration {i}: an acquisition in flight at shutdown was granted"
        );
        proxy.set_latency(Duration::ZERO);
    }
    assert_eq!(granted_before_shutdown, 15);
}

/// A shutdown that cannot wait long enough for an acquisition in flight says so: it is counted
/// as pending, not reported complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_still_in_flight_at_the_deadline_is_pending() {
    let redis = server().await;
    let proxy = common::proxy(&redis).await;
    let lock = Arc::new(common::connect(config(&redis).address(proxy.url())).await);
    let key = lock.redis_key("slow");
    proxy.set_latency(Duration::from_millis(500));
    let acquiring = {
        let lock = Arc::clone(&lock);
        tokio::spawn(async move {
            lock.try_acquire("slow", Lease::Fixed(Duration::from_secs(30)))
                .await
        })
    };
    let granted = eventually(SLACK, || async {
        redis.cmd(&["EXISTS", &key]).await.unwrap() == "1"
    })
    .await;
    assert!(granted, "the acquire script never ran");
    // The clean-up release needs a round trip of 1 s; the shutdown waits 50 ms.
    let summary = lock.shutdown(Duration::from_millis(50)).await;
    assert!(
        !summary.is_complete() && summary.pending >= 1,
        "a grant still being handed back was not reported: {summary}"
    );
    assert!(acquiring.await.unwrap().is_err());
    // It goes on in the background: the key is freed soon after.
    let freed = eventually(SLACK, || async {
        let held = redis.cmd(&["GET", &key]).await.unwrap();
        held.is_empty() || held.starts_with("R|")
    })
    .await;
    assert!(freed, "the background clean-up never freed the key");
}
