//! Per-cache settings in the configuration: `caches.<name>.*` over `cache.*`, read from files
//! and variables and checked like every other key.

use std::time::Duration;

use lock_starter::config::{ConfigSources, LockSettings};
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::prelude::*;

fn load(toml: &str, env: &[(&str, &str)]) -> Result<LockSettings, String> {
    let sources = ConfigSources::from_figment(Figment::from(Toml::string(toml)))
        .env_from(env.iter().copied().chain([("POD_NAME", "pod-1")]));
    LockSettings::load(&sources).map_err(|e| e.to_string())
}

#[test]
fn a_cache_overrides_the_shared_settings_key_by_key() {
    let settings = load(
        "[telco.platform.lock.cache]\nttl = \"10m\"\nnear-cache-entries = 100\n\
         [telco.platform.lock.caches.products]\nttl = \"5m\"\n\
         [telco.platform.lock.caches.tariffs]\nmax-value-bytes = 2048\ncross-pod-load-wait = \"10s\"\n",
        &[(
            "TELCO_PLATFORM_LOCK_CACHES_PRICE_LISTS_NEAR_CACHE_ENTRIES",
            "7",
        )],
    )
    .unwrap();
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
    let of = |name| {
        let section = settings.cache_of(name);
        (
            section.ttl,
            section.max_value_bytes,
            section.near_cache_entries,
            section.cross_pod_load_wait.as_secs(),
        )
    };
    let ten_minutes = Duration::from_secs(600);
    assert_eq!(
        of("products"),
        (Duration::from_secs(300), 1_048_576, 100, 0)
    );
    assert_eq!(of("tariffs"), (ten_minutes, 2048, 100, 10));
    assert_eq!(of("price-lists"), (ten_minutes, 1_048_576, 7, 0));
    assert_eq!(of("unnamed"), (ten_minutes, 1_048_576, 100, 0));
    // A variable cannot spell `_` or lower case: its section serves those spellings too.
    assert_eq!(of("price_lists"), (ten_minutes, 1_048_576, 7, 0));
    assert_eq!(of("PRICE_LISTS"), (ten_minutes, 1_048_576, 7, 0));
    assert_eq!(of("pricelists"), (ten_minutes, 1_048_576, 100, 0));
}

/// Two sections spelt alike would be one cache on Redis: they stop start-up, naming both.
#[test]
fn two_sections_spelt_alike_are_refused() {
    let error = load(
        "[telco.platform.lock.caches.my-api]\nttl = \"1m\"\n\
         [telco.platform.lock.caches.my_api]\nttl = \"2m\"\n",
        &[],
    )
    .unwrap_err();
    assert_eq!(
        error,
        "telco.platform.lock.caches.my_api = a table (from TOML source string): the names \
         \"my-api\" and \"my_api\" are one name (compared in lower case, with - for _); \
         accepted: one section per name"
    );
}

#[test]
fn bad_cache_settings_name_the_key_the_value_and_what_is_accepted() {
    for (toml, expected) in [
        (
            "[telco.platform.lock.caches.products]\nttl = \"0\"\n",
            "telco.platform.lock.caches.products.ttl = \"0\" (from TOML source string): 0 is not accepted; accepted: a duration in ms, s, m or h",
        ),
        (
            "[telco.platform.lock.caches.products]\nttl = \"soon\"\n",
            "caches.products.ttl = \"soon\" (from TOML source string): not a duration",
        ),
        (
            "[telco.platform.lock.caches.products]\nmax-value-bytes = 0\n",
            "caches.products.max-value-bytes = 0 (from TOML source string): smaller than the minimum; accepted: a whole number from 1 to 67108864",
        ),
        (
            "[telco.platform.lock.caches.products]\nnear-cache-entries = -1\n",
            "caches.products.near-cache-entries = -1 (from TOML source string): smaller than the minimum",
        ),
        (
            "[telco.platform.lock.caches.products]\ncross-pod-load-wait = \"2h\"\n",
            "caches.products.cross-pod-load-wait = \"2h\" (from TOML source string): longer than the maximum",
        ),
        (
            "[telco.platform.lock.caches]\nproducts = \"5m\"\n",
            "caches.products = \"5m\" (from TOML source string): a value where a table is expected; accepted: a table with the keys ttl, max-value-bytes, near-cache-entries, cross-pod-load-wait",
        ),
        (
            "[telco.platform.lock]\ncaches = 5\n",
            "accepted: a table of named tables, each with the keys ttl, max-value-bytes, near-cache-entries, cross-pod-load-wait",
        ),
        (
            "[telco.platform.lock.caches.\"a\\tb\"]\nttl = \"5m\"\n",
            "telco.platform.lock.caches.a\\tb = a table (from TOML source string): the name \"a\\tb\": it contains a control character; accepted: names of 1 to 512 bytes",
        ),
        (
            "[telco.platform.lock.caches.\"a\\nb\"]\nttl = \"5m\"\n",
            "telco.platform.lock.caches.a\\nb = a table",
        ),
        (
            "[telco.platform.lock.caches.\"v1.products\"]\nttl = \"5m\"\n",
            "caches.v1.products = a table (from TOML source string): the name \"v1.products\": contains `.`, which a configuration key cannot hold; accepted: names of 1 to 512 bytes of UTF-8 with no control characters, no `.` and no whitespace at either end",
        ),
    ] {
        let error = load(toml, &[]).unwrap_err();
        assert!(
            error.contains(expected),
            "{toml}:\n{error}\nexpected: {expected}"
        );
    }
}

#[test]
fn a_misspelt_key_of_a_cache_is_a_warning() {
    let settings = load("[telco.platform.lock.caches.products]\ntll = \"5m\"\n", &[]).unwrap();
    let warnings = settings.warnings().join("\n");
    assert!(
        warnings.contains("unknown key telco.platform.lock.caches.products.tll"),
        "{warnings}"
    );
}

/// `LockStarter::cache` takes the cache's own settings.
#[tokio::test]
async fn the_starter_builds_each_cache_with_its_own_settings() {
    let config = Figment::from(Toml::string(
        "[telco.platform.lock]\nenabled = false\n\
         [telco.platform.lock.caches.products]\nttl = \"5m\"\nnear-cache-entries = 10\n",
    ));
    let starter = LockStarter::builder()
        .figment(config)
        .build()
        .await
        .unwrap();
    let products: Cache<String> = starter.cache("products").unwrap();
    let others: Cache<String> = starter.cache("others").unwrap();
    assert_eq!(products.options().entry_ttl(), Duration::from_secs(300));
    assert!(products.options().near_tier().is_some());
    assert_eq!(others.options().entry_ttl(), Duration::from_secs(3600));
    assert_eq!(others.options().near_tier(), None);
}

/// How many loader runs concurrent misses of one key, one per cache of `caches`, take; each
/// caller is checked to get the loaded value. Paused time.
async fn loader_runs(caches: Vec<Cache<String>>) -> u64 {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    let runs = Arc::new(AtomicU64::new(0));
    let (release, released) = tokio::sync::watch::channel(false);
    let mut callers = Vec::new();
    for cache in caches {
        let (runs, mut released) = (Arc::clone(&runs), released.clone());
        callers.push(tokio::spawn(async move {
            cache
                .get_or_load("sku-1", || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let _ = released.wait_for(|go| *go).await;
                    Ok::<_, std::io::Error>("Fibre".to_owned())
                })
                .await
        }));
    }
    // Paused time: this sleep ends once every caller is blocked.
    tokio::time::sleep(Duration::from_millis(1)).await;
    release.send_replace(true);
    for caller in callers {
        assert_eq!(caller.await.unwrap().unwrap(), "Fibre");
    }
    runs.load(Ordering::SeqCst)
}

/// `cross-pod-load-wait` wires loads across pods: two pods (two starters on shared in-process
/// stores) run one loader for concurrent misses of a key.
#[tokio::test(start_paused = true)]
async fn a_cross_pod_load_wait_runs_one_loader_for_every_pod() {
    use lock_starter::cache::{CacheStore, InMemoryCaches};
    use lock_starter::values::{InMemoryValues, ValueStore};
    use std::sync::Arc;

    let (values, caches) = (
        Arc::new(InMemoryValues::new()) as Arc<dyn ValueStore>,
        Arc::new(InMemoryCaches::new()) as Arc<dyn CacheStore>,
    );
    let mut pods = Vec::new();
    for _ in 0..2 {
        let config = Figment::from(Toml::string(
            "[telco.platform.lock.caches.products]\ncross-pod-load-wait = \"30s\"\n",
        ));
        let starter = LockStarter::builder()
            .figment(config)
            .lock(Arc::new(lock_starter::lock::InMemoryLock::new()))
            .value_store(Arc::clone(&values))
            .cache_store(Arc::clone(&caches))
            .build()
            .await
            .unwrap();
        pods.push(starter.cache("products").unwrap());
    }
    assert_eq!(loader_runs(pods).await, 1);
}

/// Asking for a cache in every request is cheap and keeps its promises: every call with one
/// name (as configured or as a variable spells it) and type gives the same cache, whose loads
/// in flight are shared; another type is another cache.
#[tokio::test(start_paused = true)]
async fn a_cache_asked_for_twice_is_the_same_cache() {
    let config = Figment::from(Toml::string(
        "[telco.platform.lock.caches.product-prices]\nttl = \"5m\"\n",
    ));
    let starter = LockStarter::builder()
        .figment(config)
        .lock(std::sync::Arc::new(lock_starter::lock::InMemoryLock::new()))
        .build()
        .await
        .unwrap();
    let names = ["product-prices", "PRODUCT_PRICES", "product-prices"];
    let caches: Vec<Cache<String>> = names
        .map(|name| starter.clone().cache(name).unwrap())
        .into();
    assert!(caches.iter().all(|cache| cache.name() == "product-prices"));
    assert_eq!(loader_runs(caches).await, 1);
    let other_type: Cache<u64> = starter.cache("product-prices").unwrap();
    assert_eq!(
        other_type.get("sku-1").await.unwrap(),
        None,
        "a String entry is not a u64"
    );
}

/// A misspelt key of a named section gets the same "did you mean" as any other key, in files
/// and variables, for the name it was written with.
#[test]
fn a_misspelt_named_key_gets_a_suggestion() {
    for (toml, env, expected) in [
        (
            "[telco.platform.lock.caches.products]\ntll = \"5m\"\n",
            None,
            "did you mean telco.platform.lock.caches.products.ttl?",
        ),
        (
            "",
            Some(("TELCO_PLATFORM_LOCK_CACHE_PRODUCTS_TTL", "5m")),
            "did you mean TELCO_PLATFORM_LOCK_CACHES_PRODUCTS_TTL?",
        ),
        (
            "",
            Some((
                "TELCO_PLATFORM_LOCK_CACHES_PRICE_LISTS_CROSS_POD_LOAD_WIAT",
                "5s",
            )),
            "did you mean TELCO_PLATFORM_LOCK_CACHES_PRICE_LISTS_CROSS_POD_LOAD_WAIT?",
        ),
        (
            "[telco.platform.lock.rate-limits.api]\nrate = \"1/1s\"\nbrust = 2\n",
            None,
            "did you mean telco.platform.lock.rate-limits.api.burst?",
        ),
    ] {
        let env: Vec<(&str, &str)> = env.into_iter().collect();
        let settings = load(toml, &env).unwrap();
        let warnings = settings.warnings().join("\n");
        assert!(warnings.contains(expected), "{toml}{env:?}:\n{warnings}");
    }
}

/// A cache asked for by a name no section has, while a section spelt nearly so is configured,
/// gets the shared settings and a warning naming that section; a name spelt alike does not.
#[tokio::test]
async fn a_cache_near_a_configured_section_is_warned_about() {
    let config = "[telco.platform.lock]\nenabled = false\n\
                  [telco.platform.lock.caches.product]\nnear-cache-entries = 1000\n\
                  [telco.platform.lock.caches.price-lists]\nttl = \"1m\"\n";
    let starter = LockStarter::builder()
        .figment(Figment::from(Toml::string(config)))
        .build()
        .await
        .unwrap();
    let (logs, subscriber) = lock_testkit::logs::CapturedLogs::scoped(tracing::Level::WARN);
    tracing::subscriber::with_default(subscriber, || {
        for name in ["products", "product", "price_lists", "tariffs"] {
            starter.cache::<String>(name).unwrap();
        }
    });
    let text = logs.text();
    let warned: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warned.len(), 1, "{text}");
    assert!(
        warned[0].contains(
            "cache \"products\" has no section of its own and takes telco.platform.lock.cache.*; \
             did you mean the configured telco.platform.lock.caches.product?"
        ),
        "{text}"
    );
}

/// The settings in force are logged at DEBUG, named sections included, so that a section
/// that did not apply is seen missing.
#[test]
fn named_sections_are_logged_at_debug() {
    let (logs, subscriber) = lock_testkit::logs::CapturedLogs::scoped(tracing::Level::DEBUG);
    tracing::subscriber::with_default(subscriber, || {
        load(
            "[telco.platform.lock.caches.products]\nnear-cache-entries = 1000\n\
             [telco.platform.lock.rate-limits.api]\nrate = \"5/10s\"\n",
            &[],
        )
        .unwrap();
    });
    let text = logs.text();
    for line in [
        "telco.platform.lock.caches.products: ttl 1 h, max-value-bytes 1048576, near-cache-entries 1000, cross-pod-load-wait 0",
        "telco.platform.lock.rate-limits.api: 5/10s, local-batch 0",
    ] {
        assert!(text.contains(line), "no {line:?} in {text}");
    }
}
