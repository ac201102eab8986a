//! A failing store: reads are misses, loads return their value uncached, writes report it, and
//! the in-process tier serves nothing while the change stream is down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::BoxError;
use lock_core::cache::conformance::{Hooked, Hooks};
use lock_core::cache::{
    Cache, CacheError, CacheOptions, CacheStore, CacheWatch, Change, InMemoryCaches, NearCache,
};
use tokio::sync::mpsc;

/// Hooks of an in-memory store that fails while `down` is set, and whose watch the test
/// drives.
#[derive(Debug)]
struct Flaky {
    down: AtomicBool,
    reads: AtomicU64,
    changes: std::sync::Mutex<Option<mpsc::UnboundedReceiver<Change>>>,
}

impl Flaky {
    fn new() -> (Arc<Hooked<Self>>, mpsc::UnboundedSender<Change>) {
        let (send, receive) = mpsc::unbounded_channel();
        let hooks = Flaky {
            down: AtomicBool::new(false),
            reads: AtomicU64::new(0),
            changes: std::sync::Mutex::new(Some(receive)),
        };
        let store = Arc::new(InMemoryCaches::new());
        (Arc::new(Hooked { store, hooks }), send)
    }
}

#[derive(Debug)]
struct DrivenWatch(mpsc::UnboundedReceiver<Change>);

#[async_trait]
impl CacheWatch for DrivenWatch {
    async fn next(&mut self) -> Result<Change, BoxError> {
        self.0.recv().await.ok_or_else(|| "the test ended".into())
    }
}

#[async_trait]
impl Hooks for Flaky {
    fn before(&self, operation: &'static str, key: &str) -> Result<(), CacheError> {
        if operation == "get" {
            self.reads.fetch_add(1, Ordering::SeqCst);
        }
        if self.down.load(Ordering::SeqCst) {
            let cause = "connection refused";
            return Err(CacheError::unavailable(operation, "products", key, cause));
        }
        Ok(())
    }

    async fn watch(&self, _: &dyn CacheStore, _: &str) -> Result<Box<dyn CacheWatch>, CacheError> {
        let changes = self.changes.lock().unwrap().take();
        match changes {
            Some(changes) => Ok(Box::new(DrivenWatch(changes))),
            None => Err(CacheError::unavailable(
                "watch",
                "products",
                "*",
                "one watch only",
            )),
        }
    }
}

#[tokio::test]
async fn a_failing_store_is_a_miss_and_loads_are_returned_uncached() {
    let metrics = lock_testkit::metrics::CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let (flaky, _changes) = Flaky::new();
    let products: Cache<String> =
        Cache::new(flaky.clone(), "products", CacheOptions::new()).unwrap();
    products.put("sku-1", &"cached".to_owned()).await.unwrap();
    flaky.hooks.down.store(true, Ordering::SeqCst);
    assert_eq!(
        products.get("sku-1").await.unwrap(),
        None,
        "a failed read is a miss"
    );
    assert_eq!(
        super::load_in_turn(&products, 2).await,
        2,
        "loaded, not cached"
    );
    let uncached = lock_core::cache::telemetry::UNCACHED_TOTAL;
    let recorded = metrics.take();
    assert_eq!(
        recorded.counter_at(uncached, "cache=products,reason=unavailable"),
        2
    );
    let error = products.invalidate("sku-1").await.unwrap_err();
    assert_eq!(error.code(), "CACHE_UNAVAILABLE", "{error}");
    assert_eq!(error.http_status(), 503);
    assert!(products.put("sku-1", &"x".to_owned()).await.is_err());
    flaky.hooks.down.store(false, Ordering::SeqCst);
    assert_eq!(
        products.get("sku-1").await.unwrap(),
        Some("cached".to_owned())
    );
}

/// Waits until a read of `key` is served without the store.
async fn until_served_from_memory(products: &Cache<String>, flaky: &Hooked<Flaky>, key: &str) {
    let served = lock_testkit::eventually(Duration::from_secs(30), || async {
        let before = flaky.hooks.reads.load(Ordering::SeqCst);
        let value = products.get(key).await.unwrap();
        value.is_some() && flaky.hooks.reads.load(Ordering::SeqCst) == before
    })
    .await;
    assert!(served, "`{key}` never served from memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_near_tier_serves_nothing_while_its_change_stream_is_down() {
    let (flaky, changes) = Flaky::new();
    let options = CacheOptions::new()
        .near_cache(NearCache::entries(10))
        .unwrap();
    let products: Cache<String> = Cache::new(flaky.clone(), "products", options).unwrap();
    products.put("sku-1", &"v1".to_owned()).await.unwrap();
    let reads = flaky.hooks.reads.load(Ordering::SeqCst);
    products.get("sku-1").await.unwrap();
    products.get("sku-1").await.unwrap();
    assert_eq!(
        flaky.hooks.reads.load(Ordering::SeqCst),
        reads + 2,
        "not live yet: every read goes to the store"
    );
    changes.send(Change::Live).unwrap();
    until_served_from_memory(&products, &flaky, "sku-1").await;
    changes.send(Change::Down).unwrap();
    let flushed = lock_testkit::eventually(Duration::from_secs(30), || async {
        let before = flaky.hooks.reads.load(Ordering::SeqCst);
        products.get("sku-1").await.unwrap();
        flaky.hooks.reads.load(Ordering::SeqCst) > before
    })
    .await;
    assert!(flushed, "a down stream stops the tier serving");
    for _ in 0..3 {
        let before = flaky.hooks.reads.load(Ordering::SeqCst);
        products.get("sku-1").await.unwrap();
        assert_eq!(
            flaky.hooks.reads.load(Ordering::SeqCst),
            before + 1,
            "still down: from the store"
        );
    }
    changes.send(Change::Live).unwrap();
    until_served_from_memory(&products, &flaky, "sku-1").await;
    changes.send(Change::Key("sku-1".to_owned())).unwrap();
    let evicted = lock_testkit::eventually(Duration::from_secs(30), || async {
        let before = flaky.hooks.reads.load(Ordering::SeqCst);
        products.get("sku-1").await.unwrap();
        flaky.hooks.reads.load(Ordering::SeqCst) > before
    })
    .await;
    assert!(evicted, "a change of the key evicts it");
}

#[tokio::test(start_paused = true)]
async fn the_near_tier_drops_an_entry_at_its_ttl() {
    let (flaky, changes) = Flaky::new();
    let options = CacheOptions::new()
        .near_cache(NearCache::bytes(1 << 20))
        .unwrap();
    let products: Cache<String> = Cache::new(flaky.clone(), "products", options).unwrap();
    changes.send(Change::Live).unwrap();
    products
        .put_with_ttl("sku-1", &"v1".to_owned(), Duration::from_secs(10))
        .await
        .unwrap();
    until_served_from_memory(&products, &flaky, "sku-1").await;
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        products.get("sku-1").await.unwrap(),
        None,
        "expired in memory too"
    );
}
