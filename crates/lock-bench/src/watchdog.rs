//! `watchdog`: many watchdog leases held at once — what renewing them costs Redis and the
//! client, and whether they all survive.
//!
//! Acquires `held` locks (watchdog lease; 32 acquisitions in flight), holds them for three
//! renewal rounds (a round a renewal period, a third of the watchdog timeout), counts the
//! leases lost, and releases the rest. Reports Redis calls per round (EVALSHA calls over the
//! hold / rounds), time per round (the watchdog's own measure: taking the leases to the last
//! reply; percentiles of the rounds of the hold, and the longest since connect), Redis time per
//! renewed key (`EVALSHA` µs over the hold / `PEXPIRE` calls, one per renewed key), client CPU
//! during the hold, and memory per held lock: the client's (resident set growth from before the
//! first acquire to all held, over `held`: handles, watchdog registrations and allocator
//! overhead together; null below 1,000 locks) and the server's (`used_memory` growth over
//! `held`).

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use lock_redis::limits::RENEW_BATCH;
use lock_starter::lock::{AcquireOptions, DistributedLock, Lease, LockHandle};
use lock_starter::redis::RedisLock;
use serde_json::{Map, Value, json};

use crate::redis::Target;
use crate::report::{cpu_seconds, micros, percentiles, resident_bytes, round1, round3};

/// Acquisitions in flight while taking the locks.
const IN_FLIGHT: usize = 32;
/// Fewest locks for which `client_memory_per_lock_bytes` is reported (else null).
const MIN_LOCKS_FOR_MEMORY: usize = 1000;
/// Renewal rounds the locks are held for.
const PERIODS: u32 = 3;
/// How often the hold looks at the watchdog's stats: often enough to see every round.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// Runs the scenario with `held` locks on `lock`, connected with `watchdog_timeout`.
///
/// # Errors
/// When an acquisition fails or `INFO` cannot be read. Leases lost during the hold are
/// reported (`leases_lost`, `errors`), not an error.
pub(crate) async fn run(
    target: &Target,
    lock: &RedisLock,
    watchdog_timeout: Duration,
    held: usize,
) -> Result<Map<String, Value>, String> {
    let period = lock_redis::limits::renewal_period(watchdog_timeout);
    let rss_before = resident_bytes();
    let server_before = used_memory(target).await?;
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
    let server_held = used_memory(target).await?;

    // The hold: whole rounds only, measured by the watchdog itself. Bounded, so a run whose
    // leases were all lost (no rounds any more) still reports.
    let stats_before = lock.watchdog_stats();
    let calls_before = target.command_calls().await?;
    let renew_before = renew_stats(target).await?;
    let cpu_before = cpu_seconds();
    let hold_started = Instant::now();
    let give_up = hold_started + period * (PERIODS * 4);
    let mut seen = stats_before.ticks;
    let mut round_us = Vec::new();
    while seen < stats_before.ticks + u64::from(PERIODS) && Instant::now() < give_up {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let stats = lock.watchdog_stats();
        if stats.ticks > seen {
            seen = stats.ticks;
            round_us.push(micros(stats.last_tick));
        }
    }
    let cpu = cpu_seconds() - cpu_before;
    let hold = hold_started.elapsed();
    let calls = target.command_calls().await?.since(calls_before, 2);
    let renew = renew_stats(target).await?.since(renew_before);
    let stats = lock.watchdog_stats();
    let ticks = stats.ticks - stats_before.ticks;
    let lost = handles.iter().filter(|h| !h.is_held()).count();
    if lost > 0 {
        eprintln!("[lock-bench] {lost} of {held} watchdog leases were lost during the hold");
    }

    let mut release_us = Vec::with_capacity(held);
    let held_handles = handles.into_iter().filter(LockHandle::is_held);
    let released: Vec<Result<Duration, String>> = futures::stream::iter(held_handles)
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
    line.insert("errors".into(), json!(lost));
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
    line.insert("tick_us".into(), percentiles(round_us));
    line.insert("leases_lost".into(), json!(lost));
    line.insert(
        "renew_us_per_key".into(),
        match renew.keys {
            0 => Value::Null,
            keys => json!(round3(renew.usec as f64 / keys as f64)),
        },
    );
    line.insert("hold_s".into(), json!(round3(hold.as_secs_f64())));
    line.insert("client_memory_per_lock_bytes".into(), memory_per_lock);
    line.insert(
        "server_memory_per_lock_bytes".into(),
        json!(server_held.saturating_sub(server_before) / held as u64),
    );
    Ok(line)
}

/// Redis' `used_memory`, in bytes.
async fn used_memory(target: &Target) -> Result<u64, String> {
    let info = target.command(&["INFO", "memory"]).await?;
    info.lines()
        .find_map(|line| line.trim().strip_prefix("used_memory:"))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("INFO memory has no used_memory: {info}"))
}

/// Server time spent in `EVALSHA` and keys renewed (`PEXPIRE` calls: renew.lua makes one per
/// renewed key, and nothing else runs `PEXPIRE` during the hold), from `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RenewStats {
    usec: u64,
    keys: u64,
}

impl RenewStats {
    fn parse(info: &str) -> Self {
        let field = |wanted: &str, name: &str| {
            crate::redis::command_stats(info)
                .find(|(command, _)| *command == wanted)
                .map_or(0, |(_, stats)| crate::redis::stat_field(stats, name))
        };
        RenewStats {
            usec: field("evalsha", "usec"),
            keys: field("pexpire", "calls"),
        }
    }

    fn since(self, before: RenewStats) -> RenewStats {
        RenewStats {
            usec: self.usec.saturating_sub(before.usec),
            keys: self.keys.saturating_sub(before.keys),
        }
    }
}

async fn renew_stats(target: &Target) -> Result<RenewStats, String> {
    Ok(RenewStats::parse(
        &target.command(&["INFO", "commandstats"]).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_evalsha_time_and_pexpire_calls() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=4,usec=2400,usec_per_call=600.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_pexpire:calls=2000,usec=900,usec_per_call=0.45,rejected_calls=0,failed_calls=0\r\n";
        let stats = RenewStats::parse(info);
        assert_eq!(
            stats,
            RenewStats {
                usec: 2400,
                keys: 2000
            }
        );
        assert_eq!(
            stats.since(RenewStats {
                usec: 400,
                keys: 1000
            }),
            RenewStats {
                usec: 2000,
                keys: 1000
            }
        );
        assert_eq!(RenewStats::parse(""), RenewStats::default());
    }
}
