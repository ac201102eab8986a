//! `scripts`: the server-side limit of our own protocol — `redis-benchmark` running our acquire
//! and release scripts back to back on a scenario's keys, the way the `raw` peer runs
//! `SET NX PX` and its release: N acquires, then N releases, for `-c W -P 1` and `-c 1 -P W`,
//! best of the two; cycles/s = requests/s / 2.
//!
//! An upper bound rather than an exact figure: with one owner token for every call, only the
//! first acquire of a key takes the grant path (GET, TIME, SET); later ones find their own grant
//! and take the re-grant path (GET, PEXPIRE), and only the first release of a key writes the
//! tombstone and publishes (GET, SET, SPUBLISH); later ones find their own tombstone (GET).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::cycles::Scenario;
use crate::redis::Target;
use crate::report::{round1, round3};

const OWNER: &str = "bench-owner/0/0";
/// Requests of the calibration run that sizes the measured one.
pub(crate) const CALIBRATE_N: u64 = 10_000;

/// One `redis-benchmark` run: requests/s and its latency percentiles in µs.
pub(crate) struct Run {
    pub(crate) requests_per_s: f64,
    /// `{p50, p99, p999, max}` µs, from redis-benchmark's percentile table.
    pub(crate) latency_us: Value,
}

/// Runs `command` `n` times with redis-benchmark: `clients` connections (`-c`), `pipeline`
/// requests in flight per connection (`-P`), `__rand_int__` drawn from `keyspace` (`-r`).
///
/// # Errors
/// When redis-benchmark is missing, fails, or its summary cannot be read.
pub(crate) fn redis_benchmark(
    target: &Target,
    clients: usize,
    pipeline: usize,
    n: u64,
    keyspace: Option<usize>,
    command: &[String],
) -> Result<Run, String> {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", &target.host, "-p", &target.port.to_string()]);
    if let Some(password) = &target.password {
        cmd.args(["-a", password]);
    }
    cmd.args([
        "-c",
        &clients.to_string(),
        "-P",
        &pipeline.to_string(),
        "-n",
        &n.to_string(),
    ]);
    if let Some(keys) = keyspace {
        cmd.args(["-r", &keys.to_string()]);
    }
    cmd.args(command);
    let output = cmd
        .output()
        .map_err(|e| format!("could not run redis-benchmark (install redis-tools): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "redis-benchmark failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout).replace('\r', "\n");
    parse(&text).ok_or_else(|| "could not read redis-benchmark's summary".to_owned())
}

/// Reads "throughput summary: X requests per second" and the "Latency by percentile
/// distribution" table (`<percent>% <= <ms> milliseconds` lines).
fn parse(text: &str) -> Option<Run> {
    let requests_per_s: f64 = text
        .split("throughput summary: ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let table = text
        .split("Latency by percentile distribution:")
        .nth(1)?
        .split("Cumulative distribution")
        .next()?;
    let distribution: Vec<(f64, f64)> = table
        .lines()
        .filter_map(|line| {
            let (percent, rest) = line.trim().split_once("% <= ")?;
            let ms = rest.split_whitespace().next()?;
            Some((percent.parse().ok()?, ms.parse::<f64>().ok()? * 1000.0))
        })
        .collect();
    let at = |q: f64| {
        distribution
            .iter()
            .find(|(percent, _)| *percent >= q)
            .map_or(Value::Null, |(_, us)| json!(round1(*us)))
    };
    Some(Run {
        requests_per_s,
        latency_us: json!({"p50": at(50.0), "p99": at(99.0), "p999": at(99.9), "max": at(100.0)}),
    })
}

/// Key, key-space size (`-r`) and release channel of `scenario`'s keys in redis-benchmark's
/// `__rand_int__` form, under the lock's key layout.
fn keys(
    scenario: Scenario,
    lock: &lock_starter::redis::RedisLock,
) -> (String, Option<usize>, String) {
    let (name, keyspace) = match scenario {
        Scenario::Uncontended => ("bench:u:__rand_int__", Some(1000)),
        Scenario::Parallel => ("bench:p:__rand_int__", Some(32)),
        Scenario::Contended => ("bench:c", None),
    };
    (lock.redis_key(name), keyspace, lock.release_channel(name))
}

/// Runs the limit for `scenario`'s keys and workers for about `duration`.
///
/// # Errors
/// When redis-benchmark is missing or fails, or a script cannot be loaded.
pub(crate) async fn run(
    scenario: Scenario,
    target: &Target,
    lock: &lock_starter::redis::RedisLock,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    let acquire_sha = target
        .command(&["SCRIPT", "LOAD", lock_redis::scripts::ACQUIRE_SCRIPT])
        .await?;
    let release_sha = target
        .command(&["SCRIPT", "LOAD", lock_redis::scripts::RELEASE_SCRIPT])
        .await?;
    let (key, keyspace, channel) = keys(scenario, lock);
    let lease_ms = "10000";
    let tombstone_ms = lock_redis::limits::TOMBSTONE_TTL.as_millis().to_string();
    let acquire: Vec<String> = ["EVALSHA", &acquire_sha, "1", &key, OWNER, lease_ms]
        .map(str::to_owned)
        .into();
    let release: Vec<String> = [
        "EVALSHA",
        &release_sha,
        "1",
        &key,
        OWNER,
        &channel,
        &tombstone_ms,
    ]
    .map(str::to_owned)
    .into();

    let workers = scenario.workers();
    let mut configs = vec![(workers, 1)];
    if workers > 1 {
        configs.push((1, workers));
    }
    let target = target.clone();
    let cpu_before = children_cpu_seconds();
    let started = Instant::now();
    let measured = tokio::task::spawn_blocking(move || {
        let mut sent = 0;
        let mut best: Option<(f64, Value, Value)> = None;
        let per_config = duration.as_secs_f64() / configs.len() as f64;
        for (clients, pipeline) in configs {
            let cycle = |n: u64| -> Result<(f64, Value, Value), String> {
                let a = redis_benchmark(&target, clients, pipeline, n, keyspace, &acquire)?;
                let r = redis_benchmark(&target, clients, pipeline, n, keyspace, &release)?;
                let cycles = n as f64 / (n as f64 / a.requests_per_s + n as f64 / r.requests_per_s);
                Ok((cycles, a.latency_us, r.latency_us))
            };
            let (rate, _, _) = cycle(CALIBRATE_N)?;
            let n = CALIBRATE_N.max((rate * per_config) as u64);
            let result = cycle(n)?;
            sent += CALIBRATE_N + n;
            eprintln!(
                "[lock-bench] scripts/{} -c {clients} -P {pipeline}: {:.0} cycles/s",
                scenario.name(),
                result.0
            );
            if best.as_ref().is_none_or(|b| result.0 > b.0) {
                best = Some(result);
            }
        }
        Ok::<_, String>((sent, best.expect("at least one configuration")))
    })
    .await
    .map_err(|e| format!("redis-benchmark runner failed: {e}"))??;
    let (sent, (cycles, acquire_us, release_us)) = measured;

    let mut line = Map::new();
    line.insert("impl".into(), json!("scripts"));
    line.insert("scenario".into(), json!(scenario.name()));
    line.insert("workers".into(), json!(workers));
    line.insert(
        "duration_s".into(),
        json!(round3(started.elapsed().as_secs_f64())),
    );
    line.insert("acquisitions".into(), json!(sent));
    line.insert("cycles_per_s".into(), json!(round1(cycles)));
    line.insert("acquire_us".into(), acquire_us);
    line.insert("release_us".into(), release_us);
    line.insert("errors".into(), json!(0));
    line.insert(
        "client_cpu_s".into(),
        json!(round3(children_cpu_seconds() - cpu_before)),
    );
    line.insert("version".into(), json!(crate::report::VERSION));
    Ok(line)
}

/// CPU of finished child processes (redis-benchmark), in seconds.
pub(crate) fn children_cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_CHILDREN) else {
        return 0.0;
    };
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_redis_benchmark_output() {
        let text = "Summary:\n  throughput summary: 81234.56 requests per second\n\
                    Latency by percentile distribution:\n0.000% <= 0.023 milliseconds (cumulative count 1)\n\
                    50.000% <= 0.055 milliseconds (cumulative count 5)\n99.000% <= 0.111 milliseconds (cumulative count 9)\n\
                    99.900% <= 0.207 milliseconds (cumulative count 10)\n100.000% <= 0.399 milliseconds (cumulative count 10)\n\
                    Cumulative distribution of latencies:\n";
        let run = parse(text).expect("parsed");
        assert_eq!(run.requests_per_s, 81234.56);
        assert_eq!(run.latency_us["p50"], 55.0);
        assert_eq!(run.latency_us["p999"], 207.0);
        assert_eq!(run.latency_us["max"], 399.0);
        assert!(parse("no summary here").is_none());
    }
}
