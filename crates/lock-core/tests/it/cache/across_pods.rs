//! Loads run once for every pod (`Cache::load_across_pods`), two caches on one store standing
//! for two pods. Paused time: a short sleep returns only once every other task is blocked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::BoxError;
use lock_core::cache::telemetry::{HITS_TOTAL, MISSES_TOTAL};
use lock_core::cache::{Cache, CacheOptions, InMemoryCaches};
use lock_core::values::{InMemoryValues, SharedValues};

const WAIT: Duration = Duration::from_secs(30);

/// Two pods' caches of `products`, sharing a store and the values their loads are guarded on.
fn pods() -> [Cache<String>; 2] {
    let store = Arc::new(InMemoryCaches::new());
    let values = SharedValues::new(Arc::new(InMemoryValues::new()));
    [0, 1].map(|_| {
        Cache::new(store.clone(), "products", CacheOptions::new())
            .unwrap()
            .load_across_pods(values.clone(), WAIT)
            .unwrap()
    })
}

/// Lets every other task run until it blocks.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_misses_in_two_pods_run_one_loader() {
    misses_in_two_pods_run_one_loader("sku-1").await;
}

/// A key as long as keys may be: its guard is a digest, still one per key.
#[tokio::test(start_paused = true)]
async fn a_key_too_long_to_name_its_guard_still_runs_one_loader() {
    misses_in_two_pods_run_one_loader(&"k".repeat(lock_core::MAX_KEY_BYTES)).await;
}

/// 50 concurrent misses of `key` in each of two pods: one loader run, one miss per pod.
async fn misses_in_two_pods_run_one_loader(key: &str) {
    let metrics = lock_testkit::metrics::CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let runs = Arc::new(AtomicU64::new(0));
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let (release, released) = tokio::sync::watch::channel(false);
    let mut callers = Vec::new();
    for pod in pods() {
        for _ in 0..50 {
            let (pod, runs, started) = (pod.clone(), Arc::clone(&runs), started.clone());
            let (mut released, key) = (released.clone(), key.to_owned());
            callers.push(tokio::spawn(async move {
                pod.get_or_load(&key, || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let _ = started.send(());
                    let _ = released.wait_for(|go| *go).await;
                    Ok::<_, BoxError>("Fibre".to_owned())
                })
                .await
            }));
        }
    }
    started_rx.recv().await.unwrap();
    settle().await;
    release.send_replace(true);
    for caller in callers {
        assert_eq!(caller.await.unwrap().unwrap(), "Fibre");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one loader for both pods");
    let recorded = metrics.take();
    let (misses, hits) = (MISSES_TOTAL, HITS_TOTAL);
    assert_eq!(
        recorded.counter(misses, "cache", "products"),
        2,
        "one per pod"
    );
    assert_eq!(recorded.counter_at(hits, "cache=products,tier=shared"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_loader_error_in_one_pod_reaches_the_others_waiter() {
    let [a, b] = pods();
    let (started, started_rx) = tokio::sync::oneshot::channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let loading = tokio::spawn(async move {
        a.get_or_load("sku-1", || async move {
            started.send(()).unwrap();
            released.await.unwrap();
            Err::<String, BoxError>("the catalog is down".into())
        })
        .await
    });
    started_rx.await.unwrap();
    let runs = Arc::new(AtomicU64::new(0));
    let waiting = tokio::spawn({
        let runs = Arc::clone(&runs);
        async move {
            b.get_or_load("sku-1", || async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>("loaded in b".to_owned())
            })
            .await
        }
    });
    settle().await;
    release.send(()).unwrap();
    let failed = loading.await.unwrap().unwrap_err();
    assert_eq!(failed.code(), "CACHE_LOAD_FAILED");
    let error = waiting.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "CACHE_LOAD_FAILED", "{error}");
    assert!(error.to_string().contains("the catalog is down"), "{error}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "b did not load");
}

#[tokio::test]
async fn a_cloned_cache_is_refused() {
    let cache: Cache<String> = Cache::new(
        Arc::new(InMemoryCaches::new()),
        "products",
        CacheOptions::new(),
    )
    .unwrap();
    let _clone = cache.clone();
    let values = SharedValues::new(Arc::new(InMemoryValues::new()));
    let error = cache.load_across_pods(values, WAIT).unwrap_err();
    assert_eq!(error.code(), "CACHE_INVALID_ARGUMENT");
    assert!(error.to_string().contains("before cloning"), "{error}");
}
