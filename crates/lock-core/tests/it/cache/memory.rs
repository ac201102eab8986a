//! The in-memory store: the conformance suite, a panicking loader, and switched-off caching.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::BoxError;
use lock_core::cache::conformance::CacheFactory;
use lock_core::cache::{Cache, CacheOptions, CacheStore, DisabledCaches, InMemoryCaches};

/// Clients of one in-process store.
#[derive(Default)]
struct Memory(Arc<InMemoryCaches>);

#[async_trait::async_trait]
impl CacheFactory for Memory {
    async fn client(&self) -> Arc<dyn CacheStore> {
        self.0.clone()
    }
}

mod conformance_suite {
    use super::Memory;

    lock_core::conformance_tests!(cache, async { Memory::default() });
}

fn cache(store: Arc<dyn CacheStore>) -> Cache<String> {
    Cache::new(store, "products", CacheOptions::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loader_panics_its_caller_and_fails_the_waiters() {
    let products = cache(Arc::new(InMemoryCaches::new()));
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let leader = tokio::spawn({
        let products = products.clone();
        async move {
            products
                .get_or_load("sku-1", || async move {
                    started.send(()).unwrap();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    panic!("catalog parser bug");
                    #[allow(unreachable_code)]
                    Ok::<String, BoxError>(String::new())
                })
                .await
        }
    });
    started_rx.recv().await.unwrap();
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
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let leader = tokio::spawn({
        let products = products.clone();
        async move {
            products
                .get_or_load("sku-1", || async move {
                    started.send(()).unwrap();
                    std::future::pending::<Result<String, BoxError>>().await
                })
                .await
        }
    });
    started_rx.recv().await.unwrap();
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
    let runs = Arc::new(AtomicU64::new(0));
    for _ in 0..3 {
        let runs = Arc::clone(&runs);
        let value = products
            .get_or_load("sku-1", || async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>("loaded".to_owned())
            })
            .await;
        assert_eq!(value.unwrap(), "loaded");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    products.put("sku-1", &"put".to_owned()).await.unwrap();
    assert_eq!(products.get("sku-1").await.unwrap(), None);
    assert!(!products.invalidate("sku-1").await.unwrap());
    assert!(!products.clear().await.unwrap());
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
    for n in 0..1024 {
        products
            .put(&format!("sku-{n}"), &"v".to_owned())
            .await
            .unwrap();
    }
    assert_eq!(products.get("old").await.unwrap(), None);
    let stored = store.get("products", "old").await.unwrap();
    assert!(stored.is_none());
}
