//! `accuracy`, as the peers' accuracy.py runs it: [`PROCESSES`] OS processes of lock-bench,
//! [`WORKERS`] workers each, hammer one limit of 200/s with a burst of 200 from one instant on
//! the wall clock, and the admissions are held against the ideal bound.
//!
//! [`run`] starts the processes (`--scenario ratelimit-accuracy-proc`, hidden), each of which
//! ([`process`]) connects, warms up on another key and prints `{"ready": true}`. Once all are
//! ready it sends each `{"start", "duration", "key"}` on stdin (start 0.3 s ahead, a fresh key);
//! each hammers from `start` until `start + duration` (a denied worker asks again at once),
//! records the wall-clock time right after every admission and prints those times with its
//! latencies and counts. The merged line adds `limit_per_s`, `burst`, `bound` = burst + limit ×
//! `duration_s` (from the start until the last worker finished), `admitted_over_bound` and
//! `max_in_any_1s_window`, the most admissions in any window [t, t + 1 s).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::{
    Decider, NEVER_PER_S, Scenario, Tally, batched, hammer, impl_name, limiter, store, wall_clock,
    warm_up,
};
use crate::redis::Target;
use crate::report::{Meter, Spent, cpu_seconds, round1, round3, run_prefix};

/// Processes hammering the limit.
pub(crate) const PROCESSES: usize = 4;
/// Workers in each.
pub(crate) const WORKERS: usize = 8;
/// The limit per second, and its burst.
pub(crate) const LIMIT_PER_S: u32 = 200;
/// How far ahead of the go message the processes start.
const START_AHEAD: Duration = Duration::from_millis(300);
/// Beyond the duration, how long the processes may take before they count as hung.
const HANG: Duration = Duration::from_secs(60);

/// Runs the processes for `duration`, `child_flags` added to theirs, their limiters with a local
/// batch of `batch` (0: none), and returns the merged line.
///
/// # Errors
/// When a process cannot start, fails, hangs or prints no result, or `INFO commandstats` cannot
/// be read.
pub(crate) async fn run(
    target: &Target,
    duration: Duration,
    child_flags: &[&str],
    batch: u32,
) -> Result<Map<String, Value>, String> {
    let batch_flag = batch.to_string();
    // Around the processes, their connecting and warm-up included, as the peers count it.
    let meter = Meter::start(target).await?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find lock-bench: {e}"))?;
    let mut children = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args(["--redis-url", target.address.expose()])
                .args(["--scenario", "ratelimit-accuracy-proc"])
                .args(child_flags)
                .args(["--local-batch", &batch_flag])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot start a process: {e}"))
        })
        .collect::<Result<Vec<Child>, String>>()?;
    let (start, results) = tokio::time::timeout(
        START_AHEAD + duration + HANG,
        drive(&mut children, duration),
    )
    .await
    .map_err(|_| "a process hung; killed".to_owned())??;
    let commands = meter.stop(target).await?.commands;

    let mut tally = Tally::default();
    let mut cpu = 0.0;
    for result in &results {
        let numbers = |field: &str| -> Vec<f64> {
            result[field]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default()
        };
        let count = |field: &str| result[field].as_u64().unwrap_or(0);
        let admit_wall = numbers("admit_wall");
        tally.merge(Tally {
            call_us: numbers("call_us"),
            admitted: admit_wall.len() as u64,
            denied: count("denied"),
            errors: count("errors"),
            first_error: result["first_error"].as_str().map(str::to_owned),
            admit_wall,
            end_wall: result["end_wall"].as_f64().unwrap_or(0.0),
        });
        cpu += result["cpu_s"].as_f64().unwrap_or(0.0);
    }
    tally.admit_wall.sort_by(f64::total_cmp);
    let (most, at) = max_in_window(&tally.admit_wall, 1.0);
    if let (Some(at), Some(first)) = (at, tally.admit_wall.first()) {
        eprintln!(
            "[lock-bench] accuracy: {most} admitted in [{:.3} s, {:.3} s) after the start; first admission at {:.3} s",
            at - start,
            at - start + 1.0,
            first - start
        );
    }
    let span = tally.end_wall - start;
    let limit = f64::from(LIMIT_PER_S);
    let bound = limit + limit * span;
    let admitted = tally.admitted;
    let spent = Spent {
        elapsed: span,
        commands,
        cpu,
    };
    let mut line = super::line(
        impl_name(batch),
        Scenario::Accuracy,
        PROCESSES * WORKERS,
        tally,
        &spent,
    );
    line.insert("limit_per_s".into(), json!(LIMIT_PER_S));
    line.insert("burst".into(), json!(LIMIT_PER_S));
    line.insert("bound".into(), json!(round1(bound)));
    line.insert(
        "admitted_over_bound".into(),
        json!(round3(admitted as f64 / bound)),
    );
    line.insert("max_in_any_1s_window".into(), json!(most));
    if batch > 0 {
        line.insert("local_batch".into(), json!(batch));
        // The whole run counts from rest; a window starting later may also see the permits
        // each process held at its start.
        line.insert(
            "window_bound".into(),
            json!(2 * LIMIT_PER_S + PROCESSES as u32 * batch),
        );
    }
    Ok(line)
}

/// Waits until every process is ready, sends them the go message and collects their results:
/// (the start, wall-clock seconds; each process' result).
async fn drive(children: &mut [Child], duration: Duration) -> Result<(f64, Vec<Value>), String> {
    let mut outputs = Vec::new();
    for child in children.iter_mut() {
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        out.read_line(&mut line)
            .await
            .map_err(|e| format!("reading a process: {e}"))?;
        let ready: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if ready["ready"] != true {
            return Err(ready["error"].as_str().map_or_else(
                || "a process stopped before it was ready (see its stderr)".to_owned(),
                str::to_owned,
            ));
        }
        outputs.push(out);
    }
    let start = wall_clock() + START_AHEAD.as_secs_f64();
    let key = Scenario::Accuracy.key(&run_prefix("rl", "accuracy"), 0);
    let go = json!({"start": start, "duration": duration.as_secs_f64(), "key": key});
    for child in children.iter_mut() {
        // Dropped after the write: end of input.
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin
            .write_all(format!("{go}\n").as_bytes())
            .await
            .map_err(|e| format!("writing to a process: {e}"))?;
    }
    let mut results = Vec::new();
    for (child, mut out) in children.iter_mut().zip(outputs) {
        let mut text = String::new();
        out.read_to_string(&mut text)
            .await
            .map_err(|e| format!("reading a process: {e}"))?;
        let status = child
            .wait()
            .await
            .map_err(|e| format!("waiting for a process: {e}"))?;
        let result: Value = text
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| format!("a process exited ({status}) without a result"))?;
        if let Some(error) = result["error"].as_str() {
            return Err(error.to_owned());
        }
        results.push(result);
    }
    Ok((start, results))
}

/// One of the processes, its limiter with a local batch of `batch` (0: none): connects, warms
/// up, says it is ready, then hammers as told on stdin and prints its admissions' wall-clock
/// times, latencies and counts as one JSON line.
///
/// # Errors
/// When the limiter cannot be set up, the warm-up fails or the go message cannot be read.
pub(crate) async fn process(target: &Target, batch: u32) -> Result<(), String> {
    let store = store(target).await?;
    let never = Decider::Limiter(limiter(&store, NEVER_PER_S)?);
    let limited = Decider::Limiter(batched(limiter(&store, LIMIT_PER_S)?, batch)?);
    let tag = run_prefix("rl", "accuracy-proc");
    warm_up(&never, &format!("{tag}:warm"), WORKERS).await?;
    println!("{}", json!({"ready": true}));

    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("reading the go message: {e}"))?;
    let go: Value = serde_json::from_str(&line).map_err(|e| format!("the go message: {e}"))?;
    let (Some(start), Some(duration), Some(key)) = (
        go["start"].as_f64(),
        go["duration"].as_f64(),
        go["key"].as_str(),
    ) else {
        return Err(format!(
            "the go message lacks start, duration or key: {line}"
        ));
    };
    tokio::time::sleep(Duration::from_secs_f64((start - wall_clock()).max(0.0))).await;
    // All processes stop together, at start + duration on the wall clock.
    let left = Duration::from_secs_f64((start + duration - wall_clock()).max(0.0));
    let cpu = cpu_seconds();
    let tally = hammer(
        &limited,
        |_| key.to_owned(),
        WORKERS,
        Instant::now() + left,
        true,
    )
    .await;
    println!(
        "{}",
        json!({
            "admit_wall": tally.admit_wall,
            "call_us": tally.call_us.iter().map(|us| round1(*us)).collect::<Vec<_>>(),
            "denied": tally.denied,
            "errors": tally.errors,
            "first_error": tally.first_error,
            "end_wall": tally.end_wall,
            "cpu_s": round3(cpu_seconds() - cpu),
        })
    );
    Ok(())
}

/// The most of the sorted `stamps` in any half-open window [t, t + `width`), and that t.
fn max_in_window(stamps: &[f64], width: f64) -> (usize, Option<f64>) {
    let (mut best, mut at, mut end) = (0, None, 0);
    for (i, &t) in stamps.iter().enumerate() {
        while end < stamps.len() && stamps[end] < t + width {
            end += 1;
        }
        if end - i > best {
            (best, at) = (end - i, Some(t));
        }
    }
    (best, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_window_is_half_open() {
        assert_eq!(max_in_window(&[], 1.0), (0, None));
        let stamps = [0.0, 0.5, 0.99, 1.0, 1.2, 1.3, 2.5];
        // [0.5, 1.5) holds 0.5, 0.99, 1.0, 1.2, 1.3; [0, 1) only three.
        assert_eq!(max_in_window(&stamps, 1.0), (5, Some(0.5)));
        assert_eq!(max_in_window(&[3.0, 3.0, 3.0], 1.0), (3, Some(3.0)));
    }
}
