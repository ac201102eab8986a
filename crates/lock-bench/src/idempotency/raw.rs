//! `raw` lines of the idempotency scenarios: the plain Redis commands an idempotent call stands
//! on, run by `redis-benchmark` with one connection and one request in flight (`-c 1 -P 1`, the
//! shape of a single worker), so that our line and the Powertools peer's can be read against
//! what the server and loopback allow.
//!
//! - `first`: `SET <key> <owner> NX PX 30000` (claim) then `SET <key> <result> PX 90000` (store),
//!   on random keys (each command's run draws its own: this measures the cost, not the
//!   pairing). calls/s = one over the sum of the two commands' times per request;
//!   `call_us` is the sum of their percentiles (for p99 and max an upper bound of one call's).
//! - `replay`: `GET <key>` of a stored result.
//!
//! No `duplicates` line: plain commands do not make a duplicate wait for a result.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::idempotency::Scenario;
use crate::redis::Target;
use crate::report::per_call;
use crate::report::{round1, round3};
use crate::scripts::{CALIBRATE_N, Run, children_cpu_seconds, redis_benchmark};

/// Random keys of `first`: enough that a claim practically never meets an earlier one.
const KEYSPACE: usize = 100_000_000;
/// The stored result, the size of ours (`{"ticket": <key>, "ok": true}`).
const RESULT: &str = r#"{"ok":true,"ticket":"bench:i:first:18a3f0c2b4d5e6f7:12345"}"#;

/// `args` as owned strings, one command of a `raw` line.
pub(crate) fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// The commands of one call of `scenario`, in redis-benchmark's `__rand_int__` form; `None`
/// for `duplicates`.
fn commands(scenario: Scenario) -> Option<Vec<Vec<String>>> {
    let key = "bench:i:raw:__rand_int__";
    match scenario {
        Scenario::First => Some(vec![
            owned(&["SET", key, "bench-owner/0/0", "NX", "PX", "30000"]),
            owned(&["SET", key, RESULT, "PX", "90000"]),
        ]),
        Scenario::Replay => Some(vec![owned(&["GET", REPLAY_KEY])]),
        Scenario::Duplicates => None,
    }
}

const REPLAY_KEY: &str = "bench:i:raw:replay";

/// One call of all `runs` in sequence: calls/s and the summed percentiles.
fn combine(runs: &[Run]) -> (f64, Value) {
    let seconds_per_call: f64 = runs.iter().map(|r| 1.0 / r.requests_per_s).sum();
    let sum = |p: &str| {
        runs.iter()
            .map(|r| r.latency_us.get(p).and_then(Value::as_f64))
            .sum::<Option<f64>>()
            .map_or(Value::Null, |us| json!(round1(us)))
    };
    let latency =
        json!({"p50": sum("p50"), "p99": sum("p99"), "p999": sum("p999"), "max": sum("max")});
    (1.0 / seconds_per_call, latency)
}

/// The `raw` line of `scenario`, run for about `duration`; `None` for `duplicates`.
///
/// # Errors
/// When redis-benchmark is missing or fails, or the replayed key cannot be written.
pub(crate) async fn run(
    scenario: Scenario,
    target: &Target,
    duration: Duration,
) -> Option<Result<Map<String, Value>, String>> {
    let commands = commands(scenario)?;
    let label = format!("idempotency/{}", scenario.name());
    Some(
        async {
            if scenario == Scenario::Replay {
                target
                    .command(&["SET", REPLAY_KEY, RESULT, "PX", "90000"])
                    .await?;
            }
            measure_commands(&label, scenario.name(), target, duration, commands).await
        }
        .await,
    )
}

/// The `raw` line of the scenario `name`, of one call made of `commands` in sequence, run for
/// about `duration`; `None` for a scenario without a `raw` line (no `commands`).
///
/// # Errors
/// As [`measure_commands`].
pub(crate) async fn run_named(
    name: &str,
    target: &Target,
    duration: Duration,
    commands: Option<Vec<Vec<String>>>,
) -> Option<Result<Map<String, Value>, String>> {
    Some(measure_commands(name, name, target, duration, commands?).await)
}

/// The `raw` line named `scenario` of one call made of `commands` in sequence (redis-benchmark's
/// `__rand_int__` form, random keys out of 100,000,000), calibrated to run for about `duration`;
/// announced on stderr as `label`.
///
/// # Errors
/// When redis-benchmark is missing or fails, or `INFO commandstats` cannot be read.
pub(crate) async fn measure_commands(
    label: &str,
    scenario: &str,
    target: &Target,
    duration: Duration,
    commands: Vec<Vec<String>>,
) -> Result<Map<String, Value>, String> {
    eprintln!("[lock-bench] {label} raw ({:.1}s)", duration.as_secs_f64());
    let before = target.command_calls().await?;
    let cpu_before = children_cpu_seconds();
    let started = Instant::now();
    let bench = target.clone();
    let (calls, rate, latency) = tokio::task::spawn_blocking(move || {
        let call = |n: u64| -> Result<Vec<Run>, String> {
            commands
                .iter()
                .map(|command| redis_benchmark(&bench, 1, 1, n, Some(KEYSPACE), command))
                .collect()
        };
        let (calibration, _) = combine(&call(CALIBRATE_N)?);
        let n = CALIBRATE_N.max((calibration * duration.as_secs_f64()) as u64);
        let (rate, latency) = combine(&call(n)?);
        Ok::<_, String>((CALIBRATE_N + n, rate, latency))
    })
    .await
    .map_err(|e| format!("redis-benchmark runner failed: {e}"))??;
    let elapsed = started.elapsed().as_secs_f64();
    let commands = target.command_calls().await?.since(before, 1);

    let mut line = Map::new();
    line.insert("impl".into(), json!("raw"));
    line.insert("scenario".into(), json!(scenario));
    line.insert("workers".into(), json!(1));
    line.insert("duration_s".into(), json!(round3(elapsed)));
    line.insert("calls".into(), json!(calls));
    line.insert("calls_per_s".into(), json!(round1(rate)));
    line.insert("call_us".into(), latency);
    line.insert("executions".into(), Value::Null);
    line.insert("results".into(), json!(calls));
    line.insert("errors".into(), json!(0));
    // redis-benchmark's own set-up (CONFIG GET per run) included.
    line.insert(
        "redis_cmds_per_call".into(),
        per_call(commands.total, calls),
    );
    line.insert("version".into(), json!(crate::report::VERSION));
    line.insert(
        "client_cpu_s".into(),
        json!(round3(children_cpu_seconds() - cpu_before)),
    );
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(requests_per_s: f64, p50: f64, p99: f64) -> Run {
        Run {
            requests_per_s,
            latency_us: json!({"p50": p50, "p99": p99, "p999": null, "max": p99}),
        }
    }

    #[test]
    fn a_call_is_its_commands_in_sequence() {
        let (rate, latency) = combine(&[run(10_000.0, 50.0, 90.0), run(10_000.0, 40.0, 80.0)]);
        assert!((rate - 5000.0).abs() < 1e-6, "{rate}");
        assert_eq!(latency["p50"], 90.0);
        assert_eq!(latency["p99"], 170.0);
        assert_eq!(
            latency["p999"],
            Value::Null,
            "a missing percentile stays missing"
        );
    }

    #[test]
    fn first_claims_then_stores_and_replay_reads() {
        let first = commands(Scenario::First).expect("first");
        assert_eq!(first.len(), 2);
        assert!(first[0].contains(&"NX".to_owned()));
        assert_eq!(commands(Scenario::Replay).expect("replay")[0][0], "GET");
        assert!(commands(Scenario::Duplicates).is_none());
    }
}
