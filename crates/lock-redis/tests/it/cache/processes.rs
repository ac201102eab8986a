//! The cache across OS processes: 200 concurrent misses in each of four processes run the
//! loader at most once per process (once in all with loads across pods, whose cost in Redis
//! calls is measured too), and a put in one process evicts the entry from another process'
//! in-process tier.

use crate::common;

use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{GENEROUS, server};
use lock_core::BoxError;
use lock_core::cache::{Cache, CacheOptions, NearCache};
use lock_core::values::SharedValues;
use lock_redis::values::RedisValues;
use lock_testkit::{RedisServer, command_at};
use std::io::{BufRead, BufReader};
use tokio::time::Instant;

const URL: &str = "CACHE_CHILD_URL";
const RESULT_LINE: &str = "CACHE_RESULT ";
const PROCESSES: usize = 4;
const CALLERS: usize = 200;

async fn cache_at(url: &str, options: CacheOptions) -> Cache<String> {
    let lock = common::connect(common::default_config(url)).await;
    Cache::new(super::store(&lock).await, "catalog", options).unwrap()
}

/// Starts the ignored test `body` of this module against `redis`.
fn spawn_child(redis: &RedisServer, body: &str) -> Child {
    common::spawn_child(module_path!(), body, URL, redis)
}

/// Four processes, 200 concurrent misses of one key each: at most one loader run per process,
/// and every caller gets the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_in_four_processes_load_once_per_process() {
    let redis = server().await;
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| spawn_child(&redis, "child_stampede"))
        .collect();
    let total = stampede_outcome(&redis, children).await;
    assert!(total >= 1, "someone loaded");
}

/// The same with loads across pods: one loader run in all four processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_in_four_processes_load_once_across_pods() {
    let redis = server().await;
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| spawn_child(&redis, "child_stampede_across_pods"))
        .collect();
    let total = stampede_outcome(&redis, children).await;
    assert_eq!(total, 1, "one load across the four processes");
}

/// Checks each stampede child's result and the stored entry; the loader runs in all.
async fn stampede_outcome(redis: &RedisServer, children: Vec<Child>) -> u64 {
    let mut total = 0;
    for child in children {
        let line = common::result_line(child, RESULT_LINE).await;
        let (runs, served) = line.split_once(' ').unwrap();
        let (runs, served): (u64, usize) = (runs.parse().unwrap(), served.parse().unwrap());
        assert!(runs <= 1, "a process ran its loader {runs} times");
        assert_eq!(served, CALLERS, "every caller got the value");
        total += runs;
    }
    let stored = redis
        .cmd(&["HGET", "lock:cache:{catalog}", "sku-1"])
        .await
        .unwrap();
    assert!(stored.trim().ends_with(":\"loaded\""), "{stored}");
    total
}

/// The body of a stampede child: 200 concurrent get-or-loads of one key, the loader taking
/// 200 ms; prints the loader runs and the callers served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_stampede() {
    stampede(false).await;
}

/// [`child_stampede`] with loads across pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_stampede_across_pods() {
    stampede(true).await;
}

async fn stampede(across_pods: bool) {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let lock = common::connect(common::default_config(&url)).await;
    let mut catalog =
        Cache::new(super::store(&lock).await, "catalog", CacheOptions::new()).unwrap();
    if across_pods {
        let values = SharedValues::new(Arc::new(RedisValues::new(&lock.client()).await));
        catalog = catalog.load_across_pods(values, GENEROUS).unwrap();
    }
    let runs = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (catalog, runs) = (catalog.clone(), Arc::clone(&runs));
            tokio::spawn(async move {
                catalog
                    .get_or_load("sku-1", || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Ok::<_, BoxError>("loaded".to_owned())
                    })
                    .await
            })
        })
        .collect();
    let mut served = 0;
    for caller in callers {
        served += usize::from(caller.await.unwrap().unwrap() == "loaded");
    }
    println!("{RESULT_LINE}{} {served}", runs.load(Ordering::SeqCst));
}

/// A put in this process evicts the entry from another process' in-process tier: the child
/// serves `v1` from memory, then reads `v2` after the put.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_in_one_process_evicts_the_entry_in_another() {
    let redis = server().await;
    let writer = cache_at(&redis.url(), CacheOptions::new()).await;
    writer.put("sku-1", &"v1".to_owned()).await.unwrap();
    let mut child = spawn_child(&redis, "child_near_reader");
    let (lines, mut results) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some((_, result)) = line.split_once(RESULT_LINE) {
                let _ = lines.send(result.to_owned());
            }
        }
    });
    let mut next_result = async || {
        let result = tokio::time::timeout(GENEROUS, results.recv()).await;
        result
            .expect("the child reports in time")
            .expect("the child runs")
    };
    assert_eq!(next_result().await, "v1 from memory");
    writer.put("sku-1", &"v2".to_owned()).await.unwrap();
    assert_eq!(next_result().await, "v2");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The body of a near-tier reader: reports once `sku-1` is served from memory, then reads
/// until the value changes and reports the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_near_reader() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let options = CacheOptions::new()
        .near_cache(NearCache::entries(10))
        .unwrap();
    let catalog = cache_at(&url, options).await;
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let hgets = async || {
        let stats = command_at("127.0.0.1", port, None, &["INFO", "commandstats"]).await;
        let stats = stats.unwrap();
        let calls = stats.split("cmdstat_hget:calls=").nth(1).unwrap_or("0");
        calls.split(',').next().unwrap().parse::<u64>().unwrap()
    };
    let started = Instant::now();
    loop {
        let before = hgets().await;
        let read = catalog.get("sku-1").await.unwrap();
        if read.as_deref() == Some("v1") && hgets().await == before {
            break;
        }
        assert!(started.elapsed() < GENEROUS, "never served from memory");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("{RESULT_LINE}v1 from memory");
    loop {
        let read = catalog.get("sku-1").await.unwrap();
        if read.as_deref() != Some("v1") {
            println!("{RESULT_LINE}{}", read.unwrap_or_default());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    std::future::pending::<()>().await;
}

/// What loading across pods adds to a miss: the Redis calls of one miss and load, with and
/// without it (scripts' inner calls counted, as `INFO commandstats` counts them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_across_pods_costs_a_few_more_calls() {
    let redis = server().await;
    let lock = common::connect(common::default_config(redis.url())).await;
    let store = super::store(&lock).await;
    let values = SharedValues::new(Arc::new(RedisValues::new(&lock.client()).await));
    let plain: Cache<String> = Cache::new(store.clone(), "plain", CacheOptions::new()).unwrap();
    let across: Cache<String> = Cache::new(store, "across", CacheOptions::new())
        .unwrap()
        .load_across_pods(values, GENEROUS)
        .unwrap();
    let mut calls = Vec::new();
    for cache in [&plain, &across] {
        // One miss of another key first, so that scripts are loaded and the clock read.
        for key in ["warm", "sku-1"] {
            let before = common::command_calls(&redis).await;
            let loaded = cache.get_or_load(key, || async { Ok::<_, BoxError>("v".to_owned()) });
            assert_eq!(loaded.await.unwrap(), "v");
            let after = common::command_calls(&redis).await;
            let total: u64 = after
                .iter()
                .filter(|(name, _)| name.as_str() != "info")
                .map(|(name, n)| n - before.get(name).copied().unwrap_or(0))
                .sum();
            if key == "sku-1" {
                calls.push(total);
            }
        }
    }
    println!(
        "calls per miss: {} plain, {} across pods",
        calls[0], calls[1]
    );
    assert!(calls[1] > calls[0], "the guard costs calls: {calls:?}");
    // Measured: 10 and 26, the guard's three scripts and a second `HGET`.
    assert!(
        calls[1] <= calls[0] + 20,
        "a few more calls, not a loop: {calls:?}"
    );
}
