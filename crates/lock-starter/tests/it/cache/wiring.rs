//! Caches as the starter wires them: shared through Redis with the configured options, and
//! switched off without a single Redis command.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lock_starter::cache::NearCache;
use lock_starter::prelude::*;

use crate::common::starter;
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use tracing::instrument::WithSubscriber;

/// Two services on one Redis share a cache, with the options of `telco.platform.lock.cache.*`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_starters_on_one_redis_share_a_cache_with_the_configured_options() {
    let redis = RedisServer::start().await.unwrap();
    let config = format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n\
         [telco.platform.lock.cache]\nttl = \"10m\"\nmax-value-bytes = 4096\nnear-cache-entries = 500\n",
        redis.url()
    );
    let (a, b) = (starter(&config).await, starter(&config).await);
    let (a, b): (Cache<String>, Cache<String>) =
        (a.cache("products").unwrap(), b.cache("products").unwrap());
    let options = a.options();
    assert_eq!(options.entry_ttl(), Duration::from_secs(600));
    assert_eq!(options.value_limit(), 4096);
    assert_eq!(options.near_tier(), Some(NearCache::Entries(500)));
    a.put("sku-1", &"Fibre 1000".to_owned()).await.unwrap();
    assert_eq!(b.get("sku-1").await.unwrap().as_deref(), Some("Fibre 1000"));
    let ttl: i64 = redis
        .cmd(&["PTTL", "lock:cache:{products}"])
        .await
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 590_000 && ttl <= 600_000, "PTTL {ttl}");
}

/// `enabled = false`: every `get_or_load` runs its loader, nothing reaches Redis, and one
/// `WARN` at start-up says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_caching_loads_every_time_and_sends_no_command() {
    let redis = RedisServer::start().await.unwrap();
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let config = format!(
        "[telco.platform.lock]\nenabled = false\n\
         [telco.platform.lock.redis]\naddress = \"{}\"\n\
         [telco.platform.lock.cache]\nnear-cache-entries = 100\n",
        redis.url()
    );
    let before = redis.command_calls().await.unwrap();
    let starter = starter(&config).with_subscriber(subscriber).await;
    let products: Cache<String> = starter.cache("products").unwrap();
    let runs = AtomicU32::new(0);
    for _ in 0..3 {
        let value = products
            .get_or_load("sku-1", || async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>("loaded".to_owned())
            })
            .await;
        assert_eq!(value.unwrap(), "loaded");
    }
    products.put("sku-1", &"put".to_owned()).await.unwrap();
    assert_eq!(products.get("sku-1").await.unwrap(), None);
    products.clear().await.unwrap();
    let after = redis.command_calls().await.unwrap();
    let sent: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
    // The first INFO commandstats of this test, and nothing else.
    assert_eq!(sent, 1, "{before:?} -> {after:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let text = logs.text();
    assert_eq!(text.matches("caching is switched off").count(), 1, "{text}");
    assert!(
        text.contains("telco.platform.lock.enabled = false"),
        "{text}"
    );
}

/// A name that is not a valid key is refused with the argument named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_cache_name_is_refused() {
    let starter = starter("[telco.platform.lock]\nenabled = false\n").await;
    let error = starter.cache::<String>("bad\nname").unwrap_err();
    assert_eq!(error.code(), "CACHE_INVALID_ARGUMENT");
    assert_eq!(error.details()["argument"], "cache", "{error}");
    let empty = starter.cache::<String>("").unwrap_err();
    assert_eq!(
        empty.to_string(),
        "invalid cache \"\": it is empty; accepted: names of 1 to 512 bytes of UTF-8 with no \
         control characters and no whitespace at either end"
    );
    for untrimmed in [" ", "products "] {
        let error = starter.cache::<String>(untrimmed).unwrap_err();
        assert!(
            error
                .to_string()
                .ends_with("begins or ends with whitespace; accepted: names of 1 to 512 bytes of UTF-8 with no control characters and no whitespace at either end"),
            "{error}"
        );
    }
    assert!(starter.cache::<String>("product catalog").is_ok());
}

/// A name no section can be written for still names a cache, and a warning says it takes the
/// shared settings.
#[tokio::test]
async fn a_cache_name_with_a_dot_is_warned_about() {
    let starter = starter("[telco.platform.lock]\nenabled = false\n").await;
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    tracing::subscriber::with_default(subscriber, || {
        starter.cache::<String>("catalog.products").unwrap();
    });
    assert!(
        logs.text().contains(
            "cache \"catalog.products\" cannot have a section of its own (a configuration key \
             cannot hold `.`) and takes telco.platform.lock.cache.*"
        ),
        "{}",
        logs.text()
    );
}

/// One cache name asked for with two value types is warned about once: each type would read
/// the other's entries as a miss.
#[tokio::test]
async fn a_cache_name_asked_for_with_two_types_is_warned_about_once() {
    let starter = starter("[telco.platform.lock]\nenabled = false\n").await;
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    tracing::subscriber::with_default(subscriber, || {
        starter.cache::<String>("products").unwrap();
        starter.cache::<String>("products").unwrap();
        starter.cache::<String>("prices").unwrap();
        for _ in 0..3 {
            starter.cache::<u32>("products").unwrap();
        }
    });
    let text = logs.text();
    assert_eq!(
        text.matches("is asked for with values of").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(
            "cache \"products\" is asked for with values of u32 after alloc::string::String"
        ),
        "{text}"
    );
}
