//! The in-memory store: the conformance suite, a panicking loader, and switched-off caching.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::BoxError;
use lock_core::cache::{
    Cache, CacheError, CacheOptions, CacheStore, DisabledCaches, InMemoryCaches,
};
use tokio::task::JoinHandle;

mod conformance_suite {
    use super::*;

    lock_core::conformance_tests!(cache, async { Arc::new(InMemoryCaches::default()) });
}

fn cache(store: Arc<dyn CacheStore>) -> Cache<String> {
    Cache::new(store, "products", CacheOptions::new()).unwrap()
}

/// A get-or-load of `sku-1` whose loader runs `load`, once that loader has started.
async fn leader(
    products: &Cache<String>,
    load: impl Future<Output = Result<String, BoxError>> + Send + 'static,
) -> JoinHandle<Result<String, CacheError>> {
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let leader = tokio::spawn({
        let products = products.clone();
        async move {
            products
                .get_or_load("sku-1", || async move {
                    started.send(()).unwrap();
                    load.await
                })
                .await
        }
    });
    started_rx.recv().await.unwrap();
    leader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loader_panics_its_caller_and_fails_the_waiters() {
    let products = cache(Arc::new(InMemoryCaches::new()));
    let leader = leader(&products, async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        panic!("catalog parser bug");
        #[allow(unreachable_code)]
        Ok(String::new())
    })
    .await;
    let runs = Arc::new(AtomicU64::new(0));
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            let (products, runs) = (products.clone(), Arc::clone(&runs));
            tokio::spawn(async move {
                products
                    .get_or_load("sku-1", || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, BoxError>("loaded by a waiter".to_owned())
                    })
                    .await
            })
        })
        .collect();
    let panic = leader.await.unwrap_err();
    assert!(
        panic.is_panic(),
        "the caller that ran the loader gets its panic"
    );
    for waiter in waiters {
        let error = waiter.await.unwrap().unwrap_err();
        assert_eq!(error.code(), "CACHE_LOADER_PANICKED", "{error}");
        assert!(error.to_string().contains("catalog parser bug"), "{error}");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "no waiter ran a loader of its own"
    );
    assert_eq!(products.get("sku-1").await.unwrap(), None, "nothing cached");
    let value = products
        .get_or_load("sku-1", || async { Ok::<_, BoxError>("fixed".to_owned()) })
        .await;
    assert_eq!(value.unwrap(), "fixed", "the cache is not poisoned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_loader_hands_the_load_to_a_waiter() {
    let products = cache(Arc::new(InMemoryCaches::new()));
    let leader = leader(&products, std::future::pending()).await;
    let waiter = tokio::spawn({
        let products = products.clone();
        async move {
            products
                .get_or_load("sku-1", || async {
                    Ok::<_, BoxError>("by the waiter".to_owned())
                })
                .await
        }
    });
    leader.abort();
    let value = tokio::time::timeout(Duration::from_secs(30), waiter).await;
    assert_eq!(value.unwrap().unwrap().unwrap(), "by the waiter");
}

#[tokio::test]
async fn switched_off_caching_runs_every_loader_and_keeps_nothing() {
    let products = cache(Arc::new(DisabledCaches));
    assert_eq!(super::load_in_turn(&products, 3).await, 3);
    products.put("sku-1", &"put".to_owned()).await.unwrap();
    assert_eq!(products.get("sku-1").await.unwrap(), None);
    assert!(!products.invalidate("sku-1").await.unwrap());
    assert!(!products.clear().await.unwrap());
}

/// Every spelling of a name is one cache, as for the starter's caches.
#[tokio::test]
async fn every_spelling_of_a_name_is_one_cache() {
    let store: Arc<dyn CacheStore> = Arc::new(InMemoryCaches::new());
    let named = |name: &str| Cache::<String>::new(store.clone(), name, CacheOptions::new());
    let (code, config) = (
        named("Product_Prices").unwrap(),
        named("product-prices").unwrap(),
    );
    code.put("sku-1", &"4200".to_owned()).await.unwrap();
    assert_eq!(config.get("sku-1").await.unwrap().as_deref(), Some("4200"));
}

#[tokio::test(start_paused = true)]
async fn expired_entries_are_swept_from_memory() {
    let store = Arc::new(InMemoryCaches::new());
    let products = cache(store.clone());
    products
        .put_with_ttl("old", &"old".to_owned(), Duration::from_secs(1))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    // Loads' stores count as writes, as puts do: 1,024 in all, the last one sweeps.
    for n in 0..1022 {
        let key = format!("sku-{n}");
        let load = || async { Ok::<_, lock_core::BoxError>("v".to_owned()) };
        products.get_or_load(&key, load).await.unwrap();
    }
    assert_eq!(store.held(), 1023, "not swept yet");
    products.put("sku-0", &"w".to_owned()).await.unwrap();
    assert_eq!(store.held(), 1022, "the expired entry was swept");
    assert_eq!(products.get("old").await.unwrap(), None);
}

/// Every metric of the cache, labelled by the cache's name and never by a key.
#[tokio::test]
async fn each_outcome_is_counted_under_the_caches_name() {
    use lock_core::cache::NearCache;
    use lock_core::cache::telemetry::{
        HITS_TOTAL, LOAD_SECONDS, LOADS_TOTAL, MISSES_TOTAL, UNCACHED_TOTAL, UNDECODABLE_TOTAL,
    };

    let metrics = lock_testkit::metrics::CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let store = Arc::new(InMemoryCaches::new());
    let options = CacheOptions::new()
        .max_value_bytes(16)
        .unwrap()
        .near_cache(NearCache::entries(10))
        .unwrap();
    let products: Cache<String> = Cache::new(store.clone(), "products", options).unwrap();
    let loaded = products
        .get_or_load("sku-1", || async { Ok::<_, BoxError>("Fibre".to_owned()) })
        .await
        .unwrap();
    assert_eq!(loaded, "Fibre");
    let failed = products
        .get_or_load("sku-2", || async { Err::<String, BoxError>("down".into()) })
        .await;
    assert!(failed.is_err());
    products.put("sku-3", &"x".repeat(100)).await.unwrap();
    let served_from_memory = lock_testkit::eventually(Duration::from_secs(30), || async {
        products.get("sku-1").await.unwrap();
        metrics
            .take()
            .counter_at(HITS_TOTAL, "cache=products,tier=near")
            > 0
    })
    .await;
    assert!(served_from_memory, "sku-1 never served from memory");
    let counts: Cache<u32> = Cache::new(store, "products", CacheOptions::new()).unwrap();
    assert_eq!(counts.get("sku-1").await.unwrap(), None, "undecodable");

    // `take` above drained what came before the near hit: count those in a second run.
    let recorded = metrics.take();
    recorded.assert_counter(UNDECODABLE_TOTAL, "cache", "products", 1);
    // A get_or_load reads a miss twice (the second read marks the load): counted once.
    let loaded = counts
        .get_or_load("sku-1", || async { Ok::<_, BoxError>(7) })
        .await;
    assert_eq!(loaded.unwrap(), 7);
    let recorded = metrics.take();
    recorded.assert_counter(UNDECODABLE_TOTAL, "cache", "products", 1);
    recorded.assert_counter(MISSES_TOTAL, "cache", "products", 1);
    let fresh = Cache::<String>::new(
        Arc::new(InMemoryCaches::new()),
        "tariffs",
        CacheOptions::new().max_value_bytes(16).unwrap(),
    )
    .unwrap();
    fresh
        .get_or_load("t-1", || async { Ok::<_, BoxError>("Gold".to_owned()) })
        .await
        .unwrap();
    fresh.get("t-1").await.unwrap();
    let _ = fresh
        .get_or_load("t-2", || async { Err::<String, BoxError>("down".into()) })
        .await;
    fresh.put("t-3", &"x".repeat(100)).await.unwrap();
    let recorded = metrics.take();
    let at = |name, labels| recorded.counter_at(name, labels);
    assert_eq!(at(HITS_TOTAL, "cache=tariffs,tier=shared"), 1);
    assert_eq!(at(MISSES_TOTAL, "cache=tariffs"), 2);
    assert_eq!(at(LOADS_TOTAL, "cache=tariffs,outcome=loaded"), 1);
    assert_eq!(at(LOADS_TOTAL, "cache=tariffs,outcome=failed"), 1);
    assert_eq!(at(UNCACHED_TOTAL, "cache=tariffs,reason=oversize"), 1);
    assert_eq!(
        recorded.histogram(LOAD_SECONDS, "cache", "tariffs").len(),
        2
    );
}

/// A loaded value that JSON cannot hold (a map keyed by tuples) is returned every time,
/// never cached, and counted, in every mode.
#[tokio::test]
async fn a_loaded_value_that_does_not_serialize_is_returned_uncached() {
    use std::collections::HashMap;

    use lock_core::cache::telemetry::UNCACHED_TOTAL;

    let metrics = lock_testkit::metrics::CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let stores: [Arc<dyn CacheStore>; 2] =
        [Arc::new(InMemoryCaches::new()), Arc::new(DisabledCaches)];
    for store in stores {
        let routes: Cache<HashMap<(u8, u8), u8>> =
            Cache::new(store, "routes", CacheOptions::new()).unwrap();
        let runs = AtomicU64::new(0);
        for _ in 0..2 {
            let loaded = routes
                .get_or_load("r-1", || async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, BoxError>(HashMap::from([((1, 2), 3)]))
                })
                .await
                .unwrap();
            assert_eq!(loaded, HashMap::from([((1, 2), 3)]));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2, "nothing was cached");
        assert_eq!(routes.get("r-1").await.unwrap(), None);
    }
    let recorded = metrics.take();
    assert_eq!(
        recorded.counter_at(UNCACHED_TOTAL, "cache=routes,reason=unserializable"),
        4
    );
}

/// Two tasks whose loaders each ask for the other's key (two requests for a product and its
/// bundle): the second to wait is refused instead of both waiting for ever, and both return.
#[tokio::test(start_paused = true)]
async fn loaders_in_two_tasks_waiting_on_each_other_are_refused_not_deadlocked() {
    let products: Cache<String> = Cache::new(
        Arc::new(InMemoryCaches::new()),
        "products",
        CacheOptions::new(),
    )
    .unwrap();
    let both_loading = Arc::new(tokio::sync::Barrier::new(2));
    let request = |key: &'static str, other: &'static str| {
        let (products, both_loading) = (products.clone(), Arc::clone(&both_loading));
        tokio::spawn(async move {
            let loader = || async {
                both_loading.wait().await;
                let got = products
                    .get_or_load(other, || async { Ok::<_, BoxError>(other.to_owned()) })
                    .await;
                Ok::<_, BoxError>(match got {
                    Ok(value) => format!("{key} with {value}"),
                    Err(error) => error.code().to_owned(),
                })
            };
            products.get_or_load(key, loader).await
        })
    };
    let (a, b) = (request("a", "b"), request("b", "a"));
    let both = tokio::time::timeout(Duration::from_secs(60), async { (a.await, b.await) })
        .await
        .expect("no deadlock");
    let mut outcomes = [both.0.unwrap().unwrap(), both.1.unwrap().unwrap()];
    outcomes.sort();
    let refused = outcomes
        .iter()
        .filter(|o| *o == "CACHE_INVALID_ARGUMENT")
        .count();
    assert_eq!(refused, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .any(|o| o.contains(" with CACHE_INVALID_ARGUMENT")),
        "the other waited for the refused one's load: {outcomes:?}"
    );
}

/// A loader that asks its own cache for its own key, directly or through another key's load,
/// gets an error at once instead of waiting for itself; another key loads as usual.
#[tokio::test(start_paused = true)]
async fn a_loader_asking_for_its_own_key_is_refused_not_deadlocked() {
    let products: Cache<String> = Cache::new(
        Arc::new(InMemoryCaches::new()),
        "products",
        CacheOptions::new(),
    )
    .unwrap();
    let inner = |key: &'static str| {
        let products = products.clone();
        async move {
            let got = products.get_or_load(key, || async { Ok::<_, BoxError>("inner".to_owned()) });
            Ok::<_, BoxError>(match got.await {
                Ok(value) => value,
                Err(error) => format!("{} {error}", error.code()),
            })
        }
    };
    let own = products.get_or_load("a", || inner("a"));
    let own = tokio::time::timeout(Duration::from_secs(60), own)
        .await
        .expect("no deadlock");
    let own = own.unwrap();
    assert!(own.starts_with("CACHE_INVALID_ARGUMENT invalid key \"a\": get_or_load of it in cache `products` was called from inside its own loader"), "{own}");

    let other = products.get_or_load("b", || inner("c")).await.unwrap();
    assert_eq!(other, "inner", "another key loads");

    let through = products.get_or_load("x", || {
        let products = products.clone();
        async move {
            let got = products.get_or_load("y", || inner("x")).await;
            Ok::<_, BoxError>(got.unwrap())
        }
    });
    let through = tokio::time::timeout(Duration::from_secs(60), through)
        .await
        .expect("no deadlock");
    assert!(
        through.unwrap().starts_with("CACHE_INVALID_ARGUMENT"),
        "x → y → x"
    );
}
