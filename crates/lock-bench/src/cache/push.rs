//! `push-delay`: how long after a write in one process another process' in-process tier drops
//! the entry it held.
//!
//! [`run`] starts a second lock-bench (`--scenario cache-push-delay-proc`, hidden), the reader
//! ([`process`]): its own client and `RedisCaches`, a cache with the in-process tier on a store
//! that reports when each pushed change reaches the tier ([`Observed`]). For each of [`WRITES`]
//! writes, on a key of its own: the writer puts the entry (untimed); the reader hears that
//! change, then reads until its tier serves the entry, and says it is armed; the writer notes
//! the wall clock and puts a new value (even writes) or invalidates the entry (odd ones); the
//! reader notes the wall clock when that change reaches its tier, which drops the entry right
//! after, and checks that its next read goes to Redis and finds the write. `delay_us` is
//! reader's time less writer's (one machine, one wall clock); `call_us` the writes' latency.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use lock_core::BoxError;
use lock_core::cache::conformance::{Hooked, Hooks};
use lock_core::cache::{CacheError, CacheStore, CacheWatch, Change};
use lock_redis::cache::RedisCaches;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines, Stdin};
use tokio::process::{ChildStdout, Command};
use tokio::sync::mpsc;

use super::item;
use crate::redis::Target;
use crate::report::{micros, percentiles};

/// Writes measured.
pub(crate) const WRITES: u64 = 200;
/// How long the reader waits for one pushed change before it gives up.
const HEAR_WITHIN: Duration = Duration::from_secs(5);
/// How long the whole measurement may take before it counts as hung.
const HANG: Duration = Duration::from_secs(120);

/// Nanoseconds since the epoch: the clock both processes share.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Runs the writer here and the reader in a child process with `child_flags`, and makes the
/// line.
///
/// # Errors
/// When either side cannot connect, the reader fails, misses a change or hangs.
pub(crate) async fn run(
    target: &Target,
    child_flags: &[&str],
) -> Result<Map<String, Value>, String> {
    let name = crate::report::run_prefix("cache", "push-delay");
    let writer = super::cache(target, &name, false).await?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find lock-bench: {e}"))?;
    let mut child = Command::new(&exe)
        .args(["--redis-url", target.address.expose()])
        .args(["--scenario", "cache-push-delay-proc"])
        .args(child_flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the reader: {e}"))?;
    let mut to_reader = child.stdin.take().expect("piped stdin");
    let mut from_reader = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let measured = tokio::time::timeout(HANG, async {
        let (mut delays, mut writes) = (Vec::new(), Vec::new());
        send(&mut to_reader, &json!({ "cache": name })).await?;
        receive(&mut from_reader).await?; // its tier follows the changes
        for i in 0..WRITES {
            let key = format!("k:{i}");
            writer
                .put(&key, &item(0))
                .await
                .map_err(|e| e.to_string())?;
            send(&mut to_reader, &json!({ "arm": key })).await?;
            receive(&mut from_reader).await?;
            let (sent, started) = (wall_ns(), Instant::now());
            let written = if i % 2 == 0 {
                writer.put(&key, &item(1)).await
            } else {
                writer.invalidate(&key).await.map(drop)
            };
            writes.push(micros(started.elapsed()));
            written.map_err(|e| e.to_string())?;
            let heard = receive(&mut from_reader).await?;
            let heard = heard["heard_ns"]
                .as_u64()
                .ok_or("the reader sent no time")?;
            delays.push(heard.saturating_sub(sent) as f64 / 1e3);
        }
        Ok::<_, String>((delays, writes))
    })
    .await
    .map_err(|_| "the reader hung; killed".to_owned())?;
    drop(to_reader);
    let _ = child.wait().await;
    let (delays, writes) = measured?;
    let mut line = Map::new();
    line.insert("impl".into(), json!(super::IMPL_NEAR));
    line.insert("scenario".into(), json!("push-delay"));
    line.insert("workers".into(), json!(1));
    line.insert("calls".into(), json!(writes.len()));
    line.insert("call_us".into(), percentiles(writes));
    line.insert("results".into(), json!(delays.len()));
    line.insert("errors".into(), json!(0));
    line.insert("version".into(), json!(crate::report::VERSION));
    line.insert("delay_us".into(), percentiles(delays));
    line.insert("reader".into(), json!("another process"));
    Ok(line)
}

async fn send(to: &mut tokio::process::ChildStdin, message: &Value) -> Result<(), String> {
    to.write_all(format!("{message}\n").as_bytes())
        .await
        .map_err(|e| format!("writing to the reader: {e}"))
}

/// The reader's next line; its error, if it sent one, as the error.
async fn receive(from: &mut Lines<BufReader<ChildStdout>>) -> Result<Value, String> {
    let line = from
        .next_line()
        .await
        .map_err(|e| format!("reading the reader: {e}"))?
        .ok_or("the reader stopped (see its stderr)")?;
    let message: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
    match message["error"].as_str() {
        Some(error) => Err(format!("the reader: {error}")),
        None => Ok(message),
    }
}

/// The reader: follows the messages on stdin, answering each on stdout.
///
/// # Errors
/// When the cache cannot be set up, a change is not heard in time or a read is wrong.
pub(crate) async fn process(target: &Target) -> Result<(), String> {
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    let first = next_message(&mut input).await?.ok_or("no cache name")?;
    let name = first["cache"].as_str().ok_or("no cache name")?;
    let client = crate::connect_client(target).await?;
    let (heard, mut heard_rx) = mpsc::unbounded_channel();
    let store = Arc::new(Hooked {
        store: Arc::new(RedisCaches::new(&client).await),
        hooks: Observed {
            gets: AtomicU64::new(0),
            heard,
        },
    });
    let cache = super::cache_on(Arc::clone(&store) as Arc<dyn CacheStore>, name, true)?;
    hear(&mut heard_rx, |change| *change == Change::Live).await?;
    println!("{}", json!({ "ready": true }));
    while let Some(message) = next_message(&mut input).await? {
        let key = message["arm"].as_str().ok_or("expected arm")?;
        // The untimed put's change first, so that it cannot pass for the timed one's.
        hear(&mut heard_rx, |change| {
            *change == Change::Key(key.to_owned())
        })
        .await?;
        loop {
            let gets = store.hooks.gets();
            let got = cache.get(key).await.map_err(|e| e.to_string())?;
            if store.hooks.gets() == gets && got.as_ref().map(|i| i.id) == Some(0) {
                break; // served by the tier
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        println!("{}", json!({ "armed": true }));
        let heard_ns = hear(&mut heard_rx, |change| {
            *change == Change::Key(key.to_owned())
        })
        .await?;
        // The tier drops the entry as soon as the change reaches it: the next reads go to Redis.
        let started = Instant::now();
        loop {
            let gets = store.hooks.gets();
            let got = cache.get(key).await.map_err(|e| e.to_string())?;
            if store.hooks.gets() != gets {
                if got.is_some_and(|i| i.id == 0) {
                    return Err(format!("{key}: Redis still had the old value"));
                }
                break;
            }
            if started.elapsed() > HEAR_WITHIN {
                return Err(format!("{key}: the tier still served it after its change"));
            }
            tokio::task::yield_now().await;
        }
        println!("{}", json!({ "heard_ns": heard_ns }));
    }
    Ok(())
}

/// The next message on stdin, `None` at its end.
async fn next_message(input: &mut Lines<BufReader<Stdin>>) -> Result<Option<Value>, String> {
    let line = input.next_line().await.map_err(|e| e.to_string())?;
    line.map(|l: String| serde_json::from_str(&l).map_err(|e| format!("{e}: {l}")))
        .transpose()
}

/// Waits for a change that `wanted` picks to reach the tier; its wall-clock time.
async fn hear(
    heard: &mut mpsc::UnboundedReceiver<(Change, u64)>,
    wanted: impl Fn(&Change) -> bool,
) -> Result<u64, String> {
    let wait = async {
        while let Some((change, at)) = heard.recv().await {
            if wanted(&change) {
                return Ok(at);
            }
        }
        Err("the watch ended".to_owned())
    };
    tokio::time::timeout(HEAR_WITHIN, wait)
        .await
        .map_err(|_| format!("no change heard within {HEAR_WITHIN:?}"))?
}

/// Hooks that count a store's reads and report each change it hands to the in-process tier.
#[derive(Debug)]
struct Observed {
    gets: AtomicU64,
    heard: mpsc::UnboundedSender<(Change, u64)>,
}

impl Observed {
    fn gets(&self) -> u64 {
        self.gets.load(Ordering::Acquire)
    }
}

#[async_trait]
impl Hooks for Observed {
    fn before(&self, operation: &'static str, _key: &str) -> Result<(), CacheError> {
        if operation == "get" {
            self.gets.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    async fn watch(
        &self,
        store: &dyn CacheStore,
        cache: &str,
    ) -> Result<Box<dyn CacheWatch>, CacheError> {
        let inner = store.watch(cache).await?;
        Ok(Box::new(ObservedWatch {
            inner,
            heard: self.heard.clone(),
        }))
    }
}

/// A watch that stamps each change with the wall clock as it hands it to the tier.
#[derive(Debug)]
struct ObservedWatch {
    inner: Box<dyn CacheWatch>,
    heard: mpsc::UnboundedSender<(Change, u64)>,
}

#[async_trait]
impl CacheWatch for ObservedWatch {
    async fn next(&mut self) -> Result<Change, BoxError> {
        let change = self.inner.next().await?;
        let _ = self.heard.send((change.clone(), wall_ns()));
        Ok(change)
    }
}
