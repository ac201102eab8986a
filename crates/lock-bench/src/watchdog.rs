//! `watchdog`: many watchdog leases held at once — what renewing them costs Redis and the
//! client.
//!
//! Acquires `held` locks (watchdog lease; 32 acquisitions in flight), holds them for three
//! renewal periods (a third of the watchdog timeout each), checks every one is still held, and
//! releases them. Reports Redis calls per renewal tick (EVALSHA calls over the hold / ticks),
//! time per tick (the watchdog's own measure: snapshot to last reply), client CPU during the
//! hold, and client memory per held lock (resident set growth from before the first acquire to
//! all held, over `held`: handles, watchdog registrations and allocator overhead together; null
//! below 1,000 locks).

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use lock_starter::redis::{RENEW_BATCH, RedisLock};
use lock_starter::{AcquireOptions, DistributedLock, Lease, LockHandle};
use serde_json::{Map, Value, json};

use crate::redis::Target;
use crate::report::{cpu_seconds, micros, percentiles, resident_bytes, round1, round3};

/// Acquisitions in flight while taking the locks.
const IN_FLIGHT: usize = 32;
/// Fewest locks for which `client_memory_per_lock_bytes` is reported (else null).
const MIN_LOCKS_FOR_MEMORY: usize = 1000;
/// Renewal periods the locks are held for.
const PERIODS: u32 = 3;

/// Runs the scenario with `held` locks on `lock`, connected with `watchdog_timeout`.
///
/// # Errors
/// When an acquisition fails, a lease is lost during the hold, or `INFO` cannot be read.
pub(crate) async fn run(
    target: &Target,
    lock: &RedisLock,
    watchdog_timeout: Duration,
    held: usize,
) -> Result<Map<String, Value>, String> {
    let period = watchdog_timeout / 3;
    let rss_before = resident_bytes();
    let started = Instant::now();
    let mut handles: Vec<LockHandle> = Vec::with_capacity(held);
    let mut acquire_us = Vec::with_capacity(held);
    let mut acquiring = futures::stream::iter(0..held)
        .map(|i| async move {
            let key = format!("bench:w:{i}");
            let t = Instant::now();
            lock.acquire_with(&key, AcquireOptions::new(Lease::Watchdog))
                .await
                .map(|handle| (handle, t.elapsed()))
                .map_err(|e| format!("acquire {key}: {e}"))
        })
        .buffer_unordered(IN_FLIGHT);
    while let Some(result) = acquiring.next().await {
        let (handle, took) = result?;
        handles.push(handle);
        acquire_us.push(micros(took));
    }
    drop(acquiring);
    let rss_held = resident_bytes();

    // The hold: whole ticks only, measured by the watchdog itself.
    let stats_before = lock.watchdog_stats();
    let calls_before = target.command_calls().await?;
    let cpu_before = cpu_seconds();
    let hold_started = Instant::now();
    let deadline = hold_started + period * PERIODS + period / 2;
    while lock.watchdog_stats().ticks < stats_before.ticks + u64::from(PERIODS) {
        if Instant::now() > deadline + period * 10 {
            return Err(format!(
                "the watchdog did not tick {PERIODS} times in {:?}",
                hold_started.elapsed()
            ));
        }
        tokio::time::sleep(period / 20).await;
    }
    let cpu = cpu_seconds() - cpu_before;
    let hold = hold_started.elapsed();
    let calls = target.command_calls().await?.since(calls_before, 1);
    let stats = lock.watchdog_stats();
    let ticks = stats.ticks - stats_before.ticks;
    let lost = handles.iter().filter(|h| !h.is_held()).count();
    if lost > 0 {
        return Err(format!(
            "{lost} of {held} watchdog leases were lost during the hold"
        ));
    }

    let mut release_us = Vec::with_capacity(held);
    let released: Vec<Result<Duration, String>> = futures::stream::iter(handles)
        .map(|handle| async move {
            let t = Instant::now();
            let key = handle.key().to_owned();
            handle
                .release()
                .await
                .map(|_| t.elapsed())
                .map_err(|e| format!("release {key}: {e}"))
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for result in released {
        release_us.push(micros(result?));
    }

    // The resident set grows in pages and arenas: below ~1,000 locks the quotient says more
    // about the allocator than about a lock.
    let memory_per_lock = match (rss_before, rss_held) {
        (Some(before), Some(after)) if held >= MIN_LOCKS_FOR_MEMORY => {
            json!(after.saturating_sub(before) / held as u64)
        }
        _ => Value::Null,
    };
    let mut line = Map::new();
    line.insert("impl".into(), json!(crate::IMPL));
    line.insert("scenario".into(), json!("watchdog"));
    line.insert("workers".into(), json!(IN_FLIGHT));
    line.insert(
        "duration_s".into(),
        json!(round3(started.elapsed().as_secs_f64())),
    );
    line.insert("acquisitions".into(), json!(held));
    line.insert("acquire_us".into(), percentiles(acquire_us));
    line.insert("release_us".into(), percentiles(release_us));
    line.insert("errors".into(), json!(0));
    line.insert("client_cpu_s".into(), json!(round3(cpu)));
    line.insert("version".into(), json!(crate::report::VERSION));
    line.insert("held".into(), json!(held));
    line.insert("renewal_period_ms".into(), json!(period.as_millis() as u64));
    line.insert("batch_size".into(), json!(RENEW_BATCH));
    line.insert("ticks".into(), json!(ticks));
    line.insert(
        "calls_per_tick".into(),
        json!(round1(calls.evalsha as f64 / ticks.max(1) as f64)),
    );
    line.insert(
        "calls_per_tick_bound".into(),
        json!(held.div_ceil(RENEW_BATCH)),
    );
    line.insert(
        "last_tick_us".into(),
        json!(round1(micros(stats.last_tick))),
    );
    line.insert(
        "longest_tick_us".into(),
        json!(round1(micros(stats.longest_tick))),
    );
    line.insert("hold_s".into(), json!(round3(hold.as_secs_f64())));
    line.insert("client_memory_per_lock_bytes".into(), memory_per_lock);
    Ok(line)
}
