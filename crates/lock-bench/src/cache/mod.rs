//! The toolkit peers' cache scenarios (../shared/peers/README.md, "Cache"; toolkit/cache.js and
//! toolkit/cached/): a `Cache<Item>` over `RedisCaches` on a client of its own, with the peers'
//! workers, keys, value and JSON fields, so our lines sit next to `cached`'s and cache-manager's.
//!
//! - `hit`: 1 worker, `get` of one present entry.
//! - `hit-parallel`: 32 workers, `get` of a random one of 1,000 present entries.
//! - `miss-load`: 1 worker, `get_or_load` of a new key; the loader returns at once.
//! - `stampede`: 200 callers at once per round, `get_or_load` of one absent key with a 50 ms
//!   loader; rounds repeat with a new key until the duration.
//!
//! Impl `platform-lock` reads Redis on every `get` (one `HGET`); `platform-lock-near` adds an
//! in-process tier of [`NEAR_ENTRIES`], filled before the clock starts (every entry read until
//! a whole pass of reads sends Redis nothing). As the peers do, entries are written and the
//! load scenarios' cache connected with one load before the clock starts, and
//! `redis_cmds_per_call` counts `INFO commandstats` around the timed part only. Workers are
//! Tokio tasks sharing the cache; `loader_runs` counts the loader's runs in the timed part.
//! `push-delay` is in [`push`].

pub(crate) mod push;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_core::cache::{Cache, CacheError, CacheOptions, CacheStore, NearCache};
use lock_redis::cache::RedisCaches;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::redis::Target;
use crate::report::{Meter, cpu_seconds, micros, per_call, percentiles, round1, round3};

/// The impl name of the lines with the in-process tier.
pub(crate) const IMPL_NEAR: &str = "platform-lock-near";
/// The entries' TTL, as the peers set it: it outlives any run.
const TTL: Duration = Duration::from_secs(600);
/// `hit-parallel`'s key space.
const ENTRIES: u64 = 1000;
/// Callers per `stampede` round.
const STAMPEDE_CALLERS: usize = 200;
/// How long `stampede`'s loader takes.
const LOAD_TIME: Duration = Duration::from_millis(50);
/// The in-process tier's bound: every entry of a run fits.
const NEAR_ENTRIES: u64 = 10_000;
/// Passes of reads that may go by before the in-process tier serves every entry.
const WARM_PASSES: usize = 100;

/// The cached value: the peers' small JSON object, ~200 bytes as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Item {
    id: u64,
    name: String,
    price_cents: u32,
    currency: String,
    tags: Vec<String>,
    stock: u32,
    description: String,
}

/// The peers' value for `id`.
pub(crate) fn item(id: u64) -> Item {
    Item {
        id,
        name: format!("widget-{id:06}"),
        price_cents: 1999,
        currency: "EUR".into(),
        tags: ["alpha", "beta", "gamma"].map(String::from).to_vec(),
        stock: 42,
        description: "a small cached record, padded to about two hundred bytes of JSON ......"
            .into(),
    }
}

/// One of the toolkit peers' cache scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    Hit,
    HitParallel,
    MissLoad,
    Stampede,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 4] = [
        Scenario::Hit,
        Scenario::HitParallel,
        Scenario::MissLoad,
        Scenario::Stampede,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Hit => "hit",
            Scenario::HitParallel => "hit-parallel",
            Scenario::MissLoad => "miss-load",
            Scenario::Stampede => "stampede",
        }
    }

    /// Workers (`stampede`: callers per round).
    fn workers(self) -> usize {
        match self {
            Scenario::Hit | Scenario::MissLoad => 1,
            Scenario::HitParallel => 32,
            Scenario::Stampede => STAMPEDE_CALLERS,
        }
    }

    /// Present entries of the `hit` scenarios.
    fn entries(self) -> u64 {
        match self {
            Scenario::Hit => 1,
            _ => ENTRIES,
        }
    }

    fn is_hit(self) -> bool {
        matches!(self, Scenario::Hit | Scenario::HitParallel)
    }
}

/// What the calls of a run counted.
#[derive(Debug, Default)]
struct Tally {
    call_us: Vec<f64>,
    results: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    /// Records one call that started at `started` and returned `got`, expecting item `id`.
    fn record(&mut self, started: Instant, got: Result<Option<Item>, CacheError>, id: u64) {
        self.call_us.push(micros(started.elapsed()));
        match got {
            Ok(Some(item)) if item.id == id => self.results += 1,
            Ok(other) => self.fail(format!("expected item {id}, got {other:?}")),
            Err(error) => self.fail(error.to_string()),
        }
    }

    fn fail(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    fn merge(&mut self, other: Tally) {
        self.call_us.extend(other.call_us);
        self.results += other.results;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }
}

/// The cache `name` on a client and store of its own, with the in-process tier if `near`.
pub(crate) async fn cache(target: &Target, name: &str, near: bool) -> Result<Cache<Item>, String> {
    let store: Arc<dyn CacheStore> =
        Arc::new(RedisCaches::new(&crate::connect_client(target).await?).await);
    cache_on(store, name, near)
}

/// The cache `name` on `store`, with the peers' TTL and the in-process tier if `near`.
pub(crate) fn cache_on(
    store: Arc<dyn CacheStore>,
    name: &str,
    near: bool,
) -> Result<Cache<Item>, String> {
    let mut options = CacheOptions::new().ttl(TTL).map_err(|e| e.to_string())?;
    if near {
        let tier = NearCache::entries(NEAR_ENTRIES);
        options = options.near_cache(tier).map_err(|e| e.to_string())?;
    }
    Cache::new(store, name, options).map_err(|e| e.to_string())
}

/// Runs `scenario` for `duration`, with the in-process tier if `near`, and makes its line.
///
/// # Errors
/// When the cache cannot be set up, the set-up fails or `INFO commandstats` cannot be read.
pub(crate) async fn run(
    scenario: Scenario,
    near: bool,
    target: &Target,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    let name = crate::report::run_prefix("cache", scenario.name());
    let cache = cache(target, &name, near).await?;
    let keys: Arc<[String]> = (0..scenario.entries())
        .map(|id| format!("e:{id}"))
        .collect();
    let loads = Arc::new(AtomicU64::new(0));
    if scenario.is_hit() {
        for (id, key) in (0..).zip(keys.iter()) {
            cache.put(key, &item(id)).await.map_err(|e| e.to_string())?;
        }
        if near {
            warm(&cache, &keys, target).await?;
        }
    } else {
        let warm_up = cache.get_or_load("warm", || async { Ok::<_, Infallible>(item(7)) });
        warm_up.await.map_err(|e| format!("warm-up: {e}"))?;
    }
    let meter = Meter::start(target).await?;
    let (cpu, started) = (cpu_seconds(), Instant::now());
    let deadline = started + duration;
    let (tally, rounds) = match scenario {
        Scenario::Hit | Scenario::HitParallel => {
            (getters(&cache, &keys, scenario, deadline).await, 0)
        }
        Scenario::MissLoad => (miss_load(&cache, &loads, deadline).await, 0),
        Scenario::Stampede => stampede(&cache, &loads, deadline).await,
    };
    let (elapsed, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let commands = meter.stop(target).await?.commands.total;
    if let Some(error) = &tally.first_error {
        eprintln!(
            "[lock-bench] cache/{}: {} errors, first: {error}",
            scenario.name(),
            tally.errors
        );
    }
    let loader_runs = loads.load(Ordering::Relaxed);
    let calls = tally.call_us.len() as u64;
    let mut line = Map::new();
    line.insert(
        "impl".into(),
        json!(if near { IMPL_NEAR } else { crate::IMPL }),
    );
    line.insert("scenario".into(), json!(scenario.name()));
    line.insert("workers".into(), json!(scenario.workers()));
    line.insert("duration_s".into(), json!(round3(elapsed)));
    line.insert("calls".into(), json!(calls));
    line.insert("calls_per_s".into(), json!(round1(calls as f64 / elapsed)));
    line.insert("call_us".into(), percentiles(tally.call_us));
    line.insert(
        "loader_runs".into(),
        json!((!scenario.is_hit()).then_some(loader_runs)),
    );
    line.insert("rounds".into(), json!((rounds > 0).then_some(rounds)));
    line.insert(
        "loader_runs_per_round".into(),
        json!((rounds > 0).then(|| (loader_runs as f64 / rounds as f64 * 100.0).round() / 100.0)),
    );
    line.insert("results".into(), json!(tally.results));
    line.insert("errors".into(), json!(tally.errors));
    line.insert("redis_cmds_per_call".into(), per_call(commands, calls));
    line.insert("client_cpu_s".into(), json!(round3(cpu)));
    line.insert("version".into(), json!(crate::report::VERSION));
    Ok(line)
}

/// Reads every entry until a whole pass is served by the in-process tier (Redis ran nothing
/// but the check's own `INFO`).
async fn warm(cache: &Cache<Item>, keys: &[String], target: &Target) -> Result<(), String> {
    for _ in 0..WARM_PASSES {
        let before = target.command_calls().await?;
        for key in keys {
            cache.get(key).await.map_err(|e| e.to_string())?;
        }
        if target.command_calls().await?.since(before, 1).total == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "the in-process tier still sent reads to Redis after {WARM_PASSES} passes"
    ))
}

/// `hit`/`hit-parallel`: the scenario's workers get present entries until `deadline`.
async fn getters(
    cache: &Cache<Item>,
    keys: &Arc<[String]>,
    scenario: Scenario,
    deadline: Instant,
) -> Tally {
    let tasks: Vec<_> = (0..scenario.workers() as u64)
        .map(|worker| {
            let (cache, keys) = (cache.clone(), Arc::clone(keys));
            tokio::spawn(async move {
                let (mut tally, mut x) = (Tally::default(), 0x9E37_79B9_7F4A_7C15 ^ (worker + 1));
                let n = keys.len() as u64;
                loop {
                    let started = Instant::now();
                    if started >= deadline {
                        break tally;
                    }
                    // xorshift64: a cheap random key.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let id = x % n;
                    let got = cache.get(&keys[id as usize]).await;
                    tally.record(started, got, id);
                    // An in-process hit never waits: let the other workers run.
                    tokio::task::coop::consume_budget().await;
                }
            })
        })
        .collect();
    join(tasks).await
}

/// `miss-load`: `get_or_load` of a new key after another, with a loader that returns at once.
async fn miss_load(cache: &Cache<Item>, loads: &Arc<AtomicU64>, deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    for i in 0u64.. {
        let started = Instant::now();
        if started >= deadline {
            break;
        }
        let key = format!("m:{i}");
        let got = cache.get_or_load(&key, || loader(Arc::clone(loads), Duration::ZERO));
        tally.record(started, got.await.map(Some), 7);
    }
    tally
}

/// `stampede`: rounds of [`STAMPEDE_CALLERS`] callers asking for a new key at once; returns the
/// calls and the rounds.
async fn stampede(cache: &Cache<Item>, loads: &Arc<AtomicU64>, deadline: Instant) -> (Tally, u64) {
    let (mut all, mut rounds) = (Tally::default(), 0);
    while Instant::now() < deadline {
        let key: Arc<str> = format!("s:{rounds}").into();
        let start = Arc::new(tokio::sync::Barrier::new(STAMPEDE_CALLERS));
        let callers: Vec<_> = (0..STAMPEDE_CALLERS)
            .map(|_| {
                let (cache, loads) = (cache.clone(), Arc::clone(loads));
                let (key, start) = (Arc::clone(&key), Arc::clone(&start));
                tokio::spawn(async move {
                    start.wait().await; // all callers ask at once
                    let started = Instant::now();
                    let got = cache.get_or_load(&key, || loader(loads, LOAD_TIME)).await;
                    let mut tally = Tally::default();
                    tally.record(started, got.map(Some), 7);
                    tally
                })
            })
            .collect();
        all.merge(join(callers).await);
        rounds += 1;
    }
    (all, rounds)
}

/// The load scenarios' loader: counts its run, takes `time`, returns item 7.
async fn loader(loads: Arc<AtomicU64>, time: Duration) -> Result<Item, Infallible> {
    loads.fetch_add(1, Ordering::Relaxed);
    if !time.is_zero() {
        tokio::time::sleep(time).await;
    }
    Ok(item(7))
}

async fn join(tasks: Vec<tokio::task::JoinHandle<Tally>>) -> Tally {
    let mut all = Tally::default();
    for task in tasks {
        all.merge(task.await.expect("a cache worker panicked"));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_take_the_peers_names_and_workers() {
        assert_eq!(
            Scenario::ALL.map(Scenario::name),
            ["hit", "hit-parallel", "miss-load", "stampede"]
        );
        assert_eq!(Scenario::ALL.map(Scenario::workers), [1, 32, 1, 200]);
        assert_eq!(Scenario::ALL.map(Scenario::entries), [1, 1000, 1000, 1000]);
    }

    #[test]
    fn the_value_is_the_peers_200_byte_object() {
        let text = serde_json::to_string(&item(7)).unwrap();
        assert!(
            (180..=220).contains(&text.len()),
            "{} bytes: {text}",
            text.len()
        );
        assert!(text.starts_with(r#"{"id":7,"name":"widget-000007","price_cents":1999,"#));
    }
}
