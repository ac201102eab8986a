//! The cache on one redis-server: the conformance suite, the stored form, an unused cache
//! expiring with no client running, clearing a million entries in one call, keys of another
//! type repaired by a clear, Redis killed or stopped mid-run, and the in-process tier flushed
//! when its subscription's connection is killed.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{GENEROUS, SLACK, command_calls, delta, eventually, server};
use lock_core::BoxError;
use lock_core::cache::{Cache, CacheOptions, NearCache};
use lock_testkit::RedisServer;
use tokio::time::Instant;

use super::store;

mod conformance {
    use super::server;
    use crate::suites::Suite;

    lock_core::conformance_tests!(cache, async { Suite(server().await) });
}

async fn cache_on(redis: &RedisServer, options: CacheOptions) -> Cache<String> {
    let store = store(&common::client(redis).await).await;
    Cache::new(store, "products", options).unwrap()
}

/// One hash of `<deadline>:<JSON>` and one sorted set of deadlines, both expiring with the
/// last entry; a read is one `HGET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_is_one_hash_and_its_deadlines_and_a_read_is_one_hget() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    assert_eq!(
        store.cache_keys("products"),
        ["lock:cache:{products}", "lock:cache:{products}:deadlines"]
    );
    assert_eq!(
        store.change_channel("products"),
        "lock:cache:{products}:changed"
    );
    let products: Cache<String> = Cache::new(store, "products", CacheOptions::new()).unwrap();
    products
        .put_with_ttl("sku-1", &"Fibre 1000".to_owned(), Duration::from_secs(60))
        .await
        .unwrap();
    let stored = redis
        .cmd(&["HGET", "lock:cache:{products}", "sku-1"])
        .await
        .unwrap();
    let (deadline, json) = stored.trim().split_once(':').unwrap();
    assert_eq!(json, "\"Fibre 1000\"");
    let score = redis
        .cmd(&["ZSCORE", "lock:cache:{products}:deadlines", "sku-1"])
        .await
        .unwrap();
    assert_eq!(score.trim(), deadline);
    for key in ["lock:cache:{products}", "lock:cache:{products}:deadlines"] {
        let ttl = common::integer(&redis, &["PTTL", key]).await;
        assert!(ttl > 55_000 && ttl <= 60_000, "{key}: PTTL {ttl}");
    }
    let before = command_calls(&redis).await;
    for _ in 0..10 {
        assert_eq!(
            products.get("sku-1").await.unwrap().as_deref(),
            Some("Fibre 1000")
        );
    }
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "hget"), 10);
    assert_eq!(delta(&before, &after, "evalsha"), 0);
}

/// Reads of one cache made together go as one `HMGET`, and each gets its own field's value,
/// a missing one included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_of_a_cache_share_an_hmget_and_each_gets_its_own_value() {
    let redis = server().await;
    let products = cache_on(&redis, CacheOptions::new()).await;
    for i in 0..32 {
        products
            .put(&format!("sku-{i}"), &format!("value-{i}"))
            .await
            .unwrap();
    }
    let before = command_calls(&redis).await;
    let reads = (0..64).map(|i| {
        let products = products.clone();
        async move { (i, products.get(&format!("sku-{i}")).await.unwrap()) }
    });
    for (i, value) in futures::future::join_all(reads).await {
        assert_eq!(value, (i < 32).then(|| format!("value-{i}")), "sku-{i}");
    }
    let after = command_calls(&redis).await;
    let (hget, hmget) = (
        delta(&before, &after, "hget"),
        delta(&before, &after, "hmget"),
    );
    assert!(
        hmget >= 1 && hget + hmget < 64,
        "{hget} HGET and {hmget} HMGET for 64 reads"
    );
}

/// No read waits on another read's future: one that started a collection and is then neither
/// polled nor dropped, or dropped, holds up no other read of its cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_never_waits_on_another_reads_future() {
    use lock_core::cache::CacheStore;
    let redis = server().await;
    let (proxy, lock) = common::behind_proxy(&redis, |setup| setup).await;
    let store = store(&lock).await;
    let products: Cache<String> =
        Cache::new(store.clone(), "products", CacheOptions::new()).unwrap();
    products.put("sku-2", &"two".to_owned()).await.unwrap();
    // Every read stays in flight past the polls below.
    proxy.set_latency(Duration::from_millis(200));
    let mut alone = Box::pin(store.get("products", "sku-3"));
    assert!(futures::poll!(&mut alone).is_pending());
    let mut started = Box::pin(store.get("products", "sku-1"));
    assert!(futures::poll!(&mut started).is_pending());
    // `started` is kept and not polled: a read made now still gets its answer.
    let entry = tokio::time::timeout(SLACK, store.get("products", "sku-2"))
        .await
        .expect("a read waited on an unpolled one")
        .unwrap()
        .expect("present");
    assert_eq!(entry.value, b"\"two\"");
    // From another task too, and after the starter is dropped.
    let spawned = {
        let store = store.clone();
        tokio::spawn(async move { store.get("products", "sku-2").await })
    };
    drop(started);
    let entry = tokio::time::timeout(SLACK, spawned)
        .await
        .expect("a read waited on a dropped one")
        .unwrap()
        .unwrap();
    assert!(entry.is_some());
    assert_eq!(alone.await.unwrap(), None);
}

/// Reads in a `buffer_unordered` stream, with a read of the same cache in the loop body: the
/// body's read is answered while the stream's reads wait to be polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_buffered_stream_hold_up_no_other_read() {
    use futures::StreamExt;
    use lock_core::cache::CacheStore;
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let mut reads = futures::stream::iter(0..64)
        .map(|i| {
            let store = store.clone();
            async move { store.get("products", &format!("sku-{i}")).await }
        })
        .buffer_unordered(8);
    let mut done = 0;
    while let Some(read) = reads.next().await {
        read.unwrap();
        let related = tokio::time::timeout(SLACK, store.get("products", "related")).await;
        assert!(
            related.is_ok(),
            "the loop body's read hung after {done} items"
        );
        done += 1;
    }
    assert_eq!(done, 64);
}

/// A field without the `<deadline>:` prefix (written by something else, or cut short) is a
/// miss, not a failure: the loader runs once, its value overwrites the field, the next read hits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_without_a_deadline_is_a_miss_and_is_overwritten() {
    let redis = server().await;
    let products = cache_on(&redis, CacheOptions::new()).await;
    let signed = "+99999999999999:\"Fibre 1000\"";
    for stored in ["\"Fibre 1000\"", "17:", "x:\"Fibre 1000\"", "", signed] {
        redis
            .cmd(&["HSET", "lock:cache:{products}", "sku-1", stored])
            .await
            .unwrap();
        let runs = AtomicU64::new(0);
        for _ in 0..2 {
            let value = products
                .get_or_load("sku-1", || async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, BoxError>("loaded".to_owned())
                })
                .await
                .unwrap();
            assert_eq!(value, "loaded", "{stored:?}");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{stored:?}");
    }
}

/// Every write, invalidations included, removes up to 100 write stamps older than their
/// window: a service that invalidates far more than it puts keeps the deadlines set bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_sweeps_old_write_stamps() {
    let redis = server().await;
    let products = cache_on(&redis, CacheOptions::new()).await;
    products.put("sku-0", &"live".to_owned()).await.unwrap();
    // 150 stamps from long ago (scored just above STAMPS = 2^50, stamps.lua).
    let old = "for i = 1, 150 do redis.call('ZADD', KEYS[1], 1125899906842625, '\\1old-' .. i) end";
    let deadlines = "lock:cache:{products}:deadlines";
    redis.cmd(&["EVAL", old, "1", deadlines]).await.unwrap();
    let stale_args = ["ZCOUNT", deadlines, "1125899906842625", "1125899906842625"];
    let stale = || common::integer(&redis, &stale_args);
    assert_eq!(stale().await, 150);
    products.invalidate("sku-0").await.unwrap();
    assert_eq!(stale().await, 50, "an invalidation sweeps 100");
    products.invalidate("never-put").await.unwrap();
    assert_eq!(stale().await, 0);
}

/// A cache's keys overwritten with another type fail its writes and make its reads miss; a
/// clear deletes them and the cache works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_repairs_keys_overwritten_with_another_type() {
    let redis = server().await;
    let products = cache_on(&redis, CacheOptions::new()).await;
    for key in ["lock:cache:{products}:deadlines", "lock:cache:{products}"] {
        redis.cmd(&["SET", key, "foreign"]).await.unwrap();
        let error = products
            .put("sku-1", &"Fibre".to_owned())
            .await
            .unwrap_err();
        assert_eq!(error.code(), "CACHE_UNAVAILABLE", "{key}: {error}");
        let loaded = products
            .get_or_load("sku-1", || async { Ok::<_, BoxError>("loaded".to_owned()) })
            .await;
        assert_eq!(loaded.unwrap(), "loaded", "{key}: a read misses and loads");
        products
            .clear()
            .await
            .expect("a clear deletes the foreign key");
        products.put("sku-1", &"Fibre".to_owned()).await.unwrap();
        assert_eq!(
            products.get("sku-1").await.unwrap().as_deref(),
            Some("Fibre")
        );
        products.clear().await.unwrap();
    }
}

/// The cache's keys expire with its last entry, with no client running; a put removes expired
/// entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_cache_disappears_with_no_client_running() {
    let redis = server().await;
    {
        let products = cache_on(&redis, CacheOptions::new()).await;
        for n in 0..3 {
            let key = format!("sku-{n}");
            products
                .put_with_ttl(&key, &key, Duration::from_millis(300))
                .await
                .unwrap();
        }
        products.put("kept", &"kept".to_owned()).await.unwrap();
        let swept = eventually(GENEROUS, || async {
            let other = Duration::from_millis(300);
            products
                .put_with_ttl("trigger", &"t".to_owned(), other)
                .await
                .unwrap();
            common::integer(&redis, &["HLEN", "lock:cache:{products}"]).await == 2
        });
        assert!(swept.await, "a put removes the expired entries");
        products.invalidate("kept").await.unwrap();
        products
            .put_with_ttl("last", &"l".to_owned(), Duration::from_millis(500))
            .await
            .unwrap();
    }
    let gone = eventually(GENEROUS, || async {
        common::integer(
            &redis,
            &[
                "EXISTS",
                "lock:cache:{products}",
                "lock:cache:{products}:deadlines",
            ],
        )
        .await
            == 0
    });
    assert!(gone.await, "both keys expire with the last entry");
}

/// A million entries are cleared in one call that never shows in `SLOWLOG`: the keys are
/// unlinked and freed off the main thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_entries_clear_in_one_call_off_the_slow_log() {
    let redis = server().await;
    let products = cache_on(&redis, CacheOptions::new()).await;
    products.put("sku-0", &"live".to_owned()).await.unwrap();
    let fill = "local deadline = redis.call('TIME')[1] * 1000 + 3600000 \
        for i = ARGV[1], ARGV[2] do \
          redis.call('HSET', KEYS[1], 'sku-' .. i, deadline .. ':\"v\"') \
          redis.call('ZADD', KEYS[2], deadline, 'sku-' .. i) \
        end return 1";
    for start in (1..1_000_000).step_by(100_000) {
        let (from, to) = (start.to_string(), (start + 99_999).min(999_999).to_string());
        let keys = ["lock:cache:{products}", "lock:cache:{products}:deadlines"];
        redis
            .cmd(&["EVAL", fill, "2", keys[0], keys[1], &from, &to])
            .await
            .unwrap();
    }
    assert_eq!(
        common::integer(&redis, &["HLEN", "lock:cache:{products}"]).await,
        1_000_000
    );
    redis
        .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"])
        .await
        .unwrap();
    redis.cmd(&["SLOWLOG", "RESET"]).await.unwrap();
    let before = command_calls(&redis).await;
    assert!(products.clear().await.unwrap());
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "evalsha"), 1, "one call");
    assert_eq!(
        delta(&before, &after, "scan") + delta(&before, &after, "keys"),
        0
    );
    assert_eq!(
        common::integer(&redis, &["SLOWLOG", "LEN"]).await,
        0,
        "nothing took 10 ms"
    );
    assert_eq!(products.get("sku-0").await.unwrap(), None);
    assert_eq!(products.get("sku-500000").await.unwrap(), None);
}

/// Redis killed mid-run: reads are misses, `get_or_load` returns the loader's value within one
/// command timeout, writes report the failure, and the cache works again once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_run_loads_uncached_and_recovers() {
    let mut redis = server().await;
    let products = cache_on(&redis, CacheOptions::new()).await;
    products.put("sku-1", &"cached".to_owned()).await.unwrap();
    redis.kill().await.unwrap();
    let runs = Arc::new(AtomicU64::new(0));
    for _ in 0..3 {
        let started = Instant::now();
        let runs = Arc::clone(&runs);
        let value = products
            .get_or_load("sku-1", || async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>("loaded".to_owned())
            })
            .await
            .unwrap();
        assert_eq!(value, "loaded");
        assert!(
            started.elapsed() < common::COMMAND_TIMEOUT + SLACK,
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "loaded each time, never cached"
    );
    let error = products.invalidate("sku-1").await.unwrap_err();
    assert_eq!(error.code(), "CACHE_UNAVAILABLE", "{error}");
    redis.restart().await.unwrap();
    let back = eventually(GENEROUS, || async {
        products.put("sku-1", &"again".to_owned()).await.is_ok()
    });
    assert!(back.await, "puts work again");
    assert_eq!(
        products.get("sku-1").await.unwrap().as_deref(),
        Some("again")
    );
}

/// A stopped server (`SIGSTOP`): 200 concurrent reads, which share `HMGET`s, and 200
/// concurrent loads through the in-process tier each end within the command timeout, the reads
/// missing and the loads returning their values; nothing loaded meanwhile is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_holds_up_no_read_or_load() {
    let redis = server().await;
    let plain = cache_on(&redis, CacheOptions::new()).await;
    let near = cache_on(
        &redis,
        CacheOptions::new()
            .near_cache(NearCache::entries(100))
            .unwrap(),
    )
    .await;
    for i in 0..50 {
        plain.put(&format!("k{i}"), &format!("v{i}")).await.unwrap();
    }
    redis.pause().unwrap();
    let gets = (0..200).map(|i| {
        let plain = plain.clone();
        async move { plain.get(&format!("k{}", i % 60)).await }
    });
    let loads = (0..200).map(|i| {
        let near = near.clone();
        let load = move || async move { Ok::<_, BoxError>(format!("loaded{i}")) };
        async move { near.get_or_load(&format!("k{}", i % 60), load).await }
    });
    let both = futures::future::join(
        futures::future::join_all(gets),
        futures::future::join_all(loads),
    );
    let (gets, loads) = tokio::time::timeout(GENEROUS, both)
        .await
        .expect("a read or load waited on the stopped server beyond its command timeout");
    assert!(gets.into_iter().all(|g| g.unwrap().is_none()));
    assert!(loads.into_iter().all(|l| l.unwrap().starts_with("loaded")));
    redis.resume().unwrap();
    let back = eventually(GENEROUS, || async {
        plain.put("k1", &"again".to_owned()).await.is_ok()
    });
    assert!(back.await);
    assert_eq!(near.get("k1").await.unwrap().as_deref(), Some("again"));
    for i in 50..60 {
        let key = format!("k{i}");
        assert_eq!(plain.get(&key).await.unwrap(), None, "{key} was stored");
    }
}

/// Waits until a read of `key` is served from memory (no `HGET` reaches Redis).
async fn until_served_from_memory(
    redis: &RedisServer,
    cache: &Cache<String>,
    key: &str,
    value: &str,
) {
    let served = eventually(GENEROUS, || async {
        let before = command_calls(redis).await;
        let read = cache.get(key).await.unwrap();
        let after = command_calls(redis).await;
        read.as_deref() == Some(value) && delta(&before, &after, "hget") == 0
    });
    assert!(served.await, "`{key}` is never served from memory");
}

/// The in-process tier's subscription connection killed: the tier is flushed and reads go
/// to Redis until it is subscribed again; then it serves the newer value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscription_connection_flushes_the_near_tier() {
    let redis = server().await;
    let options = CacheOptions::new()
        .near_cache(NearCache::entries(100))
        .unwrap();
    let near = cache_on(&redis, options).await;
    let writer = cache_on(&redis, CacheOptions::new()).await;
    writer.put("sku-1", &"v1".to_owned()).await.unwrap();
    until_served_from_memory(&redis, &near, "sku-1", "v1").await;

    redis
        .cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .await
        .unwrap();
    let flushed = eventually(GENEROUS, || async {
        let before = command_calls(&redis).await;
        near.get("sku-1").await.unwrap();
        delta(&before, &command_calls(&redis).await, "hget") == 1
    });
    assert!(
        flushed.await,
        "the tier stops serving once its connection is gone"
    );
    writer.put("sku-1", &"v2".to_owned()).await.unwrap();
    until_served_from_memory(&redis, &near, "sku-1", "v2").await;
    for _ in 0..10 {
        assert_eq!(near.get("sku-1").await.unwrap().as_deref(), Some("v2"));
    }
}

/// The tier's connections silently dead (a partition, or a middlebox that forgot them: no
/// error, no reset): the watch's probe goes unheard and the tier stops serving, so it never
/// serves what changed elsewhere for longer than the probe's bound (about 7 s) — not until the
/// entry's TTL (1 h). Healed, it serves the newer value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silently_dead_connections_stop_the_near_tier() {
    let redis = server().await;
    let proxy = common::proxy(&redis).await;
    let config = common::default_config(proxy.url()).command_timeout(Duration::from_millis(500));
    let behind = store(&common::connect(config).await).await;
    let options = CacheOptions::new()
        .near_cache(NearCache::entries(100))
        .unwrap();
    let near: Cache<String> = Cache::new(behind, "products", options).unwrap();
    let writer = cache_on(&redis, CacheOptions::new()).await;
    writer.put("sku-1", &"v1".to_owned()).await.unwrap();
    until_served_from_memory(&redis, &near, "sku-1", "v1").await;

    proxy.blackhole(true);
    writer.put("sku-1", &"v2".to_owned()).await.unwrap();
    let stopped = eventually(GENEROUS, || async {
        near.get("sku-1").await.unwrap().as_deref() != Some("v1")
    });
    assert!(stopped.await, "the tier serves v1 until the entry's TTL");
    proxy.blackhole(false);
    let healed = eventually(GENEROUS, || async {
        near.get("sku-1").await.unwrap().as_deref() == Some("v2")
    });
    assert!(healed.await, "v2 is read once the connections work again");
}
