//! The cache's conformance suite: the behaviour every [`CacheStore`] backend shows through a
//! [`Cache`] (feature `conformance`).
//!
//! Implement [`CacheFactory`] for a backend, then expand
//! `lock_core::conformance_tests!(cache, …)` or call [`run_all`], as the
//! [harness](crate::conformance) describes. Checks wait on events with generous deadlines.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::BoxError;
use crate::cache::{Cache, CacheError, CacheOptions, CacheStore, CacheWatch, Change, NearCache};
use crate::conformance::{SLACK, unique_key};

mod hooked;

pub use hooked::{Hooked, Hooks};

/// The TTL of the expiry checks: long enough that no check's next command comes after it on
/// a loaded machine.
const SHORT_TTL: Duration = Duration::from_secs(1);
/// How long a slow loader takes: long enough for every concurrent caller to join it.
const SLOW_LOAD: Duration = Duration::from_millis(300);

/// Builds clients of one shared backend for the suite.
#[async_trait]
pub trait CacheFactory: Send + Sync + 'static {
    /// A new client of the shared backend, on connections of its own, as another process would
    /// have.
    async fn client(&self) -> Arc<dyn CacheStore>;
}

/// A store shared in one process is its own factory: every client is that store.
#[async_trait]
impl<S: CacheStore + 'static> CacheFactory for Arc<S> {
    async fn client(&self) -> Arc<dyn CacheStore> {
        Arc::clone(self) as Arc<dyn CacheStore>
    }
}

/// A product as a catalog caches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Product {
    sku: String,
    price_cents: u64,
}

/// The next release's product: a field the stored entries lack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ProductV2 {
    sku: String,
    price_cents: u64,
    currency: String,
}

fn product(sku: &str, price_cents: u64) -> Product {
    Product {
        sku: sku.to_owned(),
        price_cents,
    }
}

async fn cache<V>(factory: &dyn CacheFactory, name: &str, options: CacheOptions) -> Cache<V>
where
    V: Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    Cache::new(factory.client().await, name, options).expect("a valid cache")
}

async fn read(cache: &Cache<Product>, key: &str) -> Option<Product> {
    cache.get(key).await.expect("a valid key")
}

/// Reads `key` until `wanted`, failing after `within` plus [`SLACK`].
async fn read_until(cache: &Cache<Product>, key: &str, wanted: Option<&Product>, within: Duration) {
    let deadline = Instant::now() + within + SLACK;
    loop {
        let value = read(cache, key).await;
        if value.as_ref() == wanted {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{key}` still reads {value:?}, not {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loader that counts its runs.
#[derive(Debug, Default, Clone)]
struct Runs(Arc<AtomicU64>);

impl Runs {
    fn count(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn loader(
        &self,
        value: Product,
    ) -> impl FnOnce() -> std::future::Ready<Result<Product, BoxError>> + use<> {
        let runs = Arc::clone(&self.0);
        move || {
            runs.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(value))
        }
    }
}

/// An entry put by one client is read by another, with a TTL no longer than it was given.
pub async fn a_put_is_read_by_another_client(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let writer: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    let reader: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    assert_eq!(read(&reader, "sku-1").await, None);
    writer
        .put("sku-1", &product("sku-1", 4200))
        .await
        .expect("confirmed");
    assert_eq!(read(&reader, "sku-1").await, Some(product("sku-1", 4200)));
    let store = factory.client().await;
    let entry = store
        .get(&name, "sku-1")
        .await
        .expect("a read")
        .expect("live");
    assert!(entry.expires_in <= crate::cache::DEFAULT_TTL, "{entry:?}");
    assert!(
        entry.expires_in + SLACK >= crate::cache::DEFAULT_TTL,
        "{entry:?}"
    );
}

/// Reads made at the same time, of present and absent entries, each get their own entry.
pub async fn concurrent_reads_each_get_their_own_entry(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let writer: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    let reader: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    for i in (0..40).step_by(2) {
        let sku = format!("sku-{i}");
        writer
            .put(&sku, &product(&sku, i))
            .await
            .expect("confirmed");
    }
    let reads = (0..40).map(|i| {
        let reader = reader.clone();
        async move { (i, read(&reader, &format!("sku-{i}")).await) }
    });
    for (i, entry) in futures::future::join_all(reads).await {
        let sku = format!("sku-{i}");
        assert_eq!(entry, (i % 2 == 0).then(|| product(&sku, i)), "{sku}");
    }
}

/// An entry is gone after its TTL and is not returned again; a re-put replaces the value and
/// its TTL together.
pub async fn entries_expire_after_their_own_ttl(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let products: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    products
        .put("long", &product("long", 1))
        .await
        .expect("confirmed");
    products
        .put("short", &product("short", 1))
        .await
        .expect("confirmed");
    products
        .put_with_ttl("short", &product("short", 2), SHORT_TTL)
        .await
        .expect("confirmed");
    let store = factory.client().await;
    let entry = store.get(&name, "short").await.expect("a read");
    assert!(
        entry.is_some_and(|e| e.expires_in <= SHORT_TTL),
        "the re-put's TTL holds"
    );
    read_until(&products, "short", None, SHORT_TTL).await;
    assert_eq!(
        read(&products, "short").await,
        None,
        "an expired entry stays gone"
    );
    assert_eq!(read(&products, "long").await, Some(product("long", 1)));
}

/// Invalidation removes one entry and says whether it was live.
pub async fn invalidate_removes_one_entry(factory: &dyn CacheFactory) {
    let products: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    products
        .put("a", &product("a", 1))
        .await
        .expect("confirmed");
    products
        .put("b", &product("b", 2))
        .await
        .expect("confirmed");
    assert!(products.invalidate("a").await.expect("confirmed"));
    assert!(!products.invalidate("a").await.expect("confirmed"));
    assert_eq!(read(&products, "a").await, None);
    assert_eq!(read(&products, "b").await, Some(product("b", 2)));
}

/// Clear removes every entry of one cache, and no other cache's.
pub async fn clear_removes_every_entry_of_the_cache(factory: &dyn CacheFactory) {
    let products: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    let other: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    for n in 0..100 {
        let key = format!("sku-{n}");
        products
            .put(&key, &product(&key, n))
            .await
            .expect("confirmed");
    }
    other
        .put("sku-0", &product("sku-0", 7))
        .await
        .expect("confirmed");
    assert!(products.clear().await.expect("confirmed"));
    assert!(
        !products.clear().await.expect("confirmed"),
        "nothing left to clear"
    );
    for n in [0, 50, 99] {
        assert_eq!(read(&products, &format!("sku-{n}")).await, None);
    }
    assert_eq!(read(&other, "sku-0").await, Some(product("sku-0", 7)));
    products
        .put("sku-1", &product("sku-1", 1))
        .await
        .expect("confirmed");
    assert_eq!(read(&products, "sku-1").await, Some(product("sku-1", 1)));
}

/// A stored entry of an older shape, or truncated bytes, is a miss: the loader runs once, the
/// entry is overwritten and the next read hits.
pub async fn an_undecodable_entry_is_a_miss_and_is_overwritten(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let old: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    let new: Cache<ProductV2> = cache(factory, &name, CacheOptions::new()).await;
    old.put("sku-1", &product("sku-1", 4200))
        .await
        .expect("confirmed");
    let store = factory.client().await;
    let ttl = Duration::from_secs(60);
    store
        .put(&name, "sku-2", b"{\"sku\":\"sku-2\",\"pri", ttl)
        .await
        .expect("confirmed");
    for key in ["sku-1", "sku-2"] {
        assert_eq!(
            new.get(key).await.expect("a valid key"),
            None,
            "{key} reads as a miss"
        );
        let runs = Arc::new(AtomicU64::new(0));
        let loaded = ProductV2 {
            sku: key.to_owned(),
            price_cents: 4300,
            currency: "EUR".to_owned(),
        };
        let load = |runs: Arc<AtomicU64>, loaded: ProductV2| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, BoxError>(loaded)
        };
        let got = new
            .get_or_load(key, || load(Arc::clone(&runs), loaded.clone()))
            .await
            .expect("loaded");
        assert_eq!(got, loaded);
        let again = new
            .get_or_load(key, || load(Arc::clone(&runs), loaded.clone()))
            .await
            .expect("a hit");
        assert_eq!(again, loaded);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "{key}: loaded once, then read"
        );
    }
}

/// Concurrent misses of one key in one process run one loader, and every caller gets its
/// value.
pub async fn concurrent_misses_run_one_loader(factory: &dyn CacheFactory) {
    let products: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    let runs = Runs::default();
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let (products, runs) = (products.clone(), runs.clone());
            tokio::spawn(async move {
                products
                    .get_or_load("sku-1", || async move {
                        let value = runs.loader(product("sku-1", 1))().await;
                        tokio::time::sleep(SLOW_LOAD).await;
                        value
                    })
                    .await
            })
        })
        .collect();
    for caller in callers {
        assert_eq!(
            caller.await.expect("no panic").expect("loaded"),
            product("sku-1", 1)
        );
    }
    assert_eq!(runs.count(), 1, "one loader for 50 concurrent misses");
}

/// A loader's error reaches every caller that waited on it, and nothing is cached.
pub async fn a_loader_error_reaches_every_waiter_and_caches_nothing(factory: &dyn CacheFactory) {
    let products: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    let runs = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let (products, runs) = (products.clone(), Arc::clone(&runs));
            tokio::spawn(async move {
                products
                    .get_or_load("sku-1", || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(SLOW_LOAD).await;
                        Err::<Product, _>(std::io::Error::other("catalog down"))
                    })
                    .await
            })
        })
        .collect();
    for caller in callers {
        let error = caller.await.expect("no panic").unwrap_err();
        assert_eq!(error.code(), "CACHE_LOAD_FAILED", "{error}");
        assert!(error.to_string().contains("catalog down"), "{error}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        read(&products, "sku-1").await,
        None,
        "a failed load caches nothing"
    );
    let runs = Runs::default();
    let value = products
        .get_or_load("sku-1", runs.loader(product("sku-1", 1)))
        .await;
    assert_eq!(value.expect("loaded"), product("sku-1", 1));
    assert_eq!(runs.count(), 1, "the next call loads again");
}

/// A slow load of one key does not hold up a read or a load of another.
pub async fn a_slow_load_never_blocks_another_key(factory: &dyn CacheFactory) {
    let products: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    products
        .put("b", &product("b", 2))
        .await
        .expect("confirmed");
    let release = Arc::new(Notify::new());
    let slow = tokio::spawn({
        let (products, release) = (products.clone(), Arc::clone(&release));
        async move {
            products
                .get_or_load("a", || async move {
                    release.notified().await;
                    Ok::<_, BoxError>(product("a", 1))
                })
                .await
        }
    });
    let within = tokio::time::timeout(SLACK, async {
        assert_eq!(read(&products, "b").await, Some(product("b", 2)));
        let runs = Runs::default();
        products
            .get_or_load("c", runs.loader(product("c", 3)))
            .await
    })
    .await;
    assert_eq!(
        within
            .expect("not blocked by the load of a")
            .expect("loaded"),
        product("c", 3)
    );
    release.notify_one();
    assert_eq!(
        slow.await.expect("no panic").expect("loaded"),
        product("a", 1)
    );
}

/// A value above the cache's cap is returned and not cached.
pub async fn a_value_above_the_cap_is_returned_not_cached(factory: &dyn CacheFactory) {
    let options = CacheOptions::new()
        .max_value_bytes(16)
        .expect("a valid cap");
    let products: Cache<Product> = cache(factory, &unique_key("cache"), options).await;
    let big = product("a-sku-with-a-long-name", 1);
    let runs = Runs::default();
    for _ in 0..2 {
        let value = products.get_or_load("big", runs.loader(big.clone())).await;
        assert_eq!(value.expect("loaded"), big);
    }
    assert_eq!(runs.count(), 2, "not cached, so loaded each time");
    products.put("big", &big).await.expect("confirmed");
    assert_eq!(read(&products, "big").await, None);
}

/// A watch reports another client's puts, invalidations and clears of its cache, after its
/// first [`Change::Live`].
pub async fn a_watch_reports_every_change_of_its_cache(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let store = factory.client().await;
    let mut watch = store.watch(&name).await.expect("a watch");
    assert_eq!(next(&mut watch).await, Change::Live);
    let writer: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    let other: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    other
        .put("sku-1", &product("sku-1", 1))
        .await
        .expect("confirmed");
    writer
        .put("sku-1", &product("sku-1", 1))
        .await
        .expect("confirmed");
    assert_eq!(next(&mut watch).await, Change::Key("sku-1".to_owned()));
    writer.invalidate("sku-1").await.expect("confirmed");
    assert_eq!(next(&mut watch).await, Change::Key("sku-1".to_owned()));
    writer.clear().await.expect("confirmed");
    assert_eq!(next(&mut watch).await, Change::Cleared);
}

async fn next(watch: &mut Box<dyn CacheWatch>) -> Change {
    let next = tokio::time::timeout(SLACK, watch.next()).await;
    next.expect("a change in time").expect("the watch goes on")
}

/// Counts the reads that reach the store, to tell the in-process tier's hits apart.
#[derive(Debug, Default)]
struct CountedReads(AtomicU64);

impl Hooks for CountedReads {
    fn before(&self, operation: &'static str, _key: &str) -> Result<(), CacheError> {
        if operation == "get" {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// The in-process tier serves repeated reads without the store, and drops an entry another
/// client puts, invalidates or clears.
pub async fn the_near_tier_drops_what_another_client_changes(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let counted = Arc::new(Hooked {
        store: factory.client().await,
        hooks: CountedReads::default(),
    });
    let options = CacheOptions::new()
        .near_cache(NearCache::entries(100))
        .expect("valid");
    let near: Cache<Product> = Cache::new(counted.clone(), &name, options).expect("valid");
    let writer: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    let served_from_memory = |expected: Product| {
        let (near, counted) = (near.clone(), Arc::clone(&counted));
        async move {
            let deadline = Instant::now() + SLACK;
            loop {
                let before = counted.hooks.0.load(Ordering::SeqCst);
                let value = near.get("sku-1").await.expect("a valid key");
                if value.as_ref() == Some(&expected)
                    && counted.hooks.0.load(Ordering::SeqCst) == before
                {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "not served from memory: {value:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    writer
        .put("sku-1", &product("sku-1", 1))
        .await
        .expect("confirmed");
    served_from_memory(product("sku-1", 1)).await;
    writer
        .put("sku-1", &product("sku-1", 2))
        .await
        .expect("confirmed");
    read_until(&near, "sku-1", Some(&product("sku-1", 2)), Duration::ZERO).await;
    served_from_memory(product("sku-1", 2)).await;
    writer.invalidate("sku-1").await.expect("confirmed");
    read_until(&near, "sku-1", None, Duration::ZERO).await;
    writer
        .put("sku-1", &product("sku-1", 3))
        .await
        .expect("confirmed");
    served_from_memory(product("sku-1", 3)).await;
    writer.clear().await.expect("confirmed");
    read_until(&near, "sku-1", None, Duration::ZERO).await;
}

/// Bad names, keys, TTLs and options are rejected before anything is sent.
pub async fn invalid_arguments_are_rejected(factory: &dyn CacheFactory) {
    let store = factory.client().await;
    let error = Cache::<Product>::new(Arc::clone(&store), "", CacheOptions::new()).unwrap_err();
    assert_eq!(error.details()["argument"], "cache", "{error}");
    let products: Cache<Product> =
        Cache::new(store, &unique_key("cache"), CacheOptions::new()).expect("a valid cache");
    for key in ["", "bad\nkey"] {
        let error = products.get(key).await.unwrap_err();
        assert_eq!(error.code(), "CACHE_INVALID_ARGUMENT", "{error}");
        assert_eq!(error.details()["argument"], "key", "{error}");
    }
    let error = products
        .put_with_ttl("sku-1", &product("sku-1", 1), Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(error.details()["argument"], "ttl", "{error}");
    assert!(
        error.to_string().contains("accepted: 1 ms to 720 h"),
        "{error}"
    );
    assert!(CacheOptions::new().max_value_bytes(0).is_err());
    assert!(
        CacheOptions::new()
            .near_cache(NearCache::entries(0))
            .is_err()
    );
}

/// Starts a `get_or_load` of `key` whose loader, once running, waits for the returned
/// `Notify` and then gives `read-before-the-write`.
async fn load_held_open(
    cache: &Cache<Product>,
    key: &str,
) -> (
    tokio::task::JoinHandle<Result<Product, CacheError>>,
    Arc<Notify>,
) {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let slow = tokio::spawn({
        let (cache, key) = (cache.clone(), key.to_owned());
        let (started, release) = (Arc::clone(&started), Arc::clone(&release));
        async move {
            let load = || async move {
                started.notify_one();
                release.notified().await;
                Ok::<_, BoxError>(product("read-before-the-write", 1))
            };
            cache.get_or_load(&key, load).await
        }
    });
    started.notified().await;
    (slow, release)
}

/// A put or an invalidate made while a load of its key is in flight wins over that load: a
/// later caller does not wait for it, and its value is not stored over the write.
pub async fn a_write_during_a_load_wins_over_it(factory: &dyn CacheFactory) {
    let cache: Cache<Product> = cache(factory, &unique_key("cache"), CacheOptions::new()).await;
    for invalidate in [false, true] {
        let key = unique_key("sku");
        let (slow, release) = load_held_open(&cache, &key).await;
        let after = if invalidate {
            cache.invalidate(&key).await.expect("invalidated");
            product("loaded-after-the-write", 3)
        } else {
            cache
                .put(&key, &product("written", 2))
                .await
                .expect("stored");
            product("written", 2)
        };
        let load = || async { Ok::<_, BoxError>(product("loaded-after-the-write", 3)) };
        let read_after = tokio::time::timeout(SLACK, cache.get_or_load(&key, load))
            .await
            .expect("a caller after the write waited for the load begun before it");
        assert_eq!(read_after.expect("a value"), after);
        release.notify_one();
        let slow = slow.await.expect("no panic").expect("loaded");
        assert_eq!(
            slow.sku, "read-before-the-write",
            "its caller gets what it loaded"
        );
        assert_eq!(
            read(&cache, &key).await,
            Some(after),
            "the load's value was stored over the write"
        );
    }
}

/// A put, invalidate or clear by another client while a load of its key is in flight wins over
/// that load: the value read before the write is returned to its caller, not stored, and a
/// caller that joined the load after the write reads or loads again.
pub async fn another_clients_write_during_a_load_wins_over_it(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let loading: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    let writing: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    for write in ["put", "invalidate", "clear"] {
        let key = unique_key("sku");
        let (slow, release) = load_held_open(&loading, &key).await;
        let after = match write {
            "put" => {
                let written = product("written", 2);
                writing.put(&key, &written).await.expect("stored");
                Some(written)
            }
            "invalidate" => {
                writing.invalidate(&key).await.expect("invalidated");
                None
            }
            _ => {
                writing.clear().await.expect("cleared");
                None
            }
        };
        // Joins the load in flight: this client has not seen the write.
        let later = || async { Ok::<_, BoxError>(product("loaded-after-the-write", 3)) };
        let mut joined = Box::pin(loading.get_or_load(&key, later));
        assert!(futures::poll!(&mut joined).is_pending());
        release.notify_one();
        let slow = slow.await.expect("no panic").expect("loaded");
        assert_eq!(
            slow.sku, "read-before-the-write",
            "its caller gets what it loaded"
        );
        for cache in [&loading, &writing] {
            assert_eq!(
                read(cache, &key).await,
                after,
                "a load begun before the {write} stored its value over it"
            );
        }
        let joined = tokio::time::timeout(SLACK, joined).await.expect("returned");
        assert_eq!(
            joined.expect("a value"),
            after.unwrap_or_else(|| product("loaded-after-the-write", 3)),
            "a caller that came after the {write} got the value read before it"
        );
    }
}

/// Another client writing a key during every load of it costs the callers that joined a load
/// one more load at most, and none of them an error when that load fails: each gets a value.
pub async fn writes_during_every_load_cost_one_more_load_at_most(factory: &dyn CacheFactory) {
    let name = unique_key("cache");
    let loading: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    let writing: Cache<Product> = cache(factory, &name, CacheOptions::new()).await;
    for second_load_fails in [false, true] {
        let key = unique_key("sku");
        let runs = Arc::new(AtomicU64::new(0));
        let mut callers: Vec<_> = (0..10)
            .map(|_| {
                let (loading, writing, key) = (loading.clone(), writing.clone(), key.clone());
                let runs = Arc::clone(&runs);
                Box::pin(async move {
                    let written = key.clone();
                    let load = || async move {
                        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                        tokio::task::yield_now().await; // so that the others join
                        writing.invalidate(&written).await.expect("invalidated");
                        if second_load_fails && run > 1 {
                            return Err(BoxError::from("the source is down"));
                        }
                        Ok(product(&format!("run-{run}"), run))
                    };
                    loading.get_or_load(&key, load).await
                })
            })
            .collect();
        // The first leads the load; the others join it before it ends.
        for caller in &mut callers {
            assert!(futures::poll!(caller.as_mut()).is_pending());
        }
        let got = tokio::time::timeout(SLACK, futures::future::join_all(callers))
            .await
            .expect("every caller returned");
        let runs = runs.load(Ordering::SeqCst);
        assert!(runs <= 2, "{runs} loads for 10 callers of one key");
        for value in got {
            let value = value.expect("a value, whatever the later load did");
            assert!(value.sku.starts_with("run-"), "{value:?}");
        }
    }
}

crate::conformance::run_all!(CacheFactory, cache_conformance_checks);

/// The cache's checks, declared once: expands to `$callback! { $($prefix)* <every check>, }`.
#[doc(hidden)]
#[macro_export]
macro_rules! cache_conformance_checks {
    ($callback:path; $($prefix:tt)*) => {
        $callback! { $($prefix)*
            a_put_is_read_by_another_client,
            concurrent_reads_each_get_their_own_entry,
            entries_expire_after_their_own_ttl,
            invalidate_removes_one_entry,
            clear_removes_every_entry_of_the_cache,
            an_undecodable_entry_is_a_miss_and_is_overwritten,
            concurrent_misses_run_one_loader,
            a_loader_error_reaches_every_waiter_and_caches_nothing,
            a_slow_load_never_blocks_another_key,
            a_write_during_a_load_wins_over_it,
            another_clients_write_during_a_load_wins_over_it,
            writes_during_every_load_cost_one_more_load_at_most,
            a_value_above_the_cap_is_returned_not_cached,
            a_watch_reports_every_change_of_its_cache,
            the_near_tier_drops_what_another_client_changes,
            invalid_arguments_are_rejected,
        }
    };
    ($callback:ident) => {
        $crate::cache_conformance_checks! { $callback; }
    };
}
#[doc(hidden)]
pub use crate::cache_conformance_checks as checks;
