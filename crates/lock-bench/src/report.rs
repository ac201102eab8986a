//! Measurements shared by the scenarios: latency percentiles, client CPU and memory, and the
//! peers' JSON line.

use std::time::Duration;

use serde_json::{Map, Value, json};

/// Nearest-rank percentiles `{p50, p99, p999, max}` in µs, rounded to 0.1 µs, as the peers
/// report them; `null` for no samples.
pub(crate) fn percentiles(mut samples: Vec<f64>) -> Value {
    if samples.is_empty() {
        return Value::Null;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let at = |p: f64| {
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        round1(samples[rank - 1])
    };
    json!({"p50": at(0.5), "p99": at(0.99), "p999": at(0.999), "max": at(1.0)})
}

/// A duration in µs, the unit of every latency field.
pub(crate) fn micros(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e3
}

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// User + system CPU time of this process so far, in seconds.
pub(crate) fn cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

/// Resident set size of this process in bytes (`VmRSS` of /proc/self/status), if readable.
pub(crate) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The version reported in the `version` field.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The peers' field orders, declared in `peer_fields.json` (which the smoke tests read too):
/// `lock` as ../shared/peers/harness.py prints them, `idempotency` as
/// ../shared/peers/toolkit/idempotency.py, `ratelimit` and `cache` as
/// ../shared/peers/toolkit/measure.py. Scenarios of our own append their extra fields.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct PeerFields<'a> {
    #[serde(borrow)]
    pub(crate) lock: Vec<&'a str>,
    #[serde(borrow)]
    pub(crate) idempotency: Vec<&'a str>,
    #[serde(borrow)]
    pub(crate) ratelimit: Vec<&'a str>,
    #[serde(borrow)]
    pub(crate) cache: Vec<&'a str>,
}

pub(crate) static FIELDS: std::sync::LazyLock<PeerFields<'static>> =
    std::sync::LazyLock::new(|| {
        serde_json::from_str(include_str!("peer_fields.json")).expect("peer_fields.json parses")
    });

/// Renders `line` with `fields` first, in their order (`null` where absent), then any extra
/// fields.
pub(crate) fn to_json_line_in(line: &serde_json::Map<String, Value>, fields: &[&str]) -> String {
    let mut parts: Vec<String> = fields
        .iter()
        .map(|field| {
            let value = line.get(*field).cloned().unwrap_or(Value::Null);
            format!("{}:{}", json!(field), value)
        })
        .collect();
    parts.extend(
        line.iter()
            .filter(|(field, _)| !fields.contains(&field.as_str()))
            .map(|(field, value)| format!("{}:{}", json!(field), value)),
    );
    format!("{{{}}}", parts.join(","))
}

/// What the calls of a run counted: one latency sample each, the results and the errors.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    /// One latency sample per call, µs.
    pub(crate) call_us: Vec<f64>,
    pub(crate) results: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

impl Calls {
    /// One call that took `took`: a result, or an error.
    pub(crate) fn record(&mut self, took: std::time::Duration, outcome: Result<(), String>) {
        self.call_us.push(micros(took));
        match outcome {
            Ok(()) => self.results += 1,
            Err(error) => self.error(error),
        }
    }

    /// One error, kept if it is the first.
    pub(crate) fn error(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    /// Adds what `other` counted.
    pub(crate) fn merge(&mut self, other: Calls) {
        self.call_us.extend(other.call_us);
        self.results += other.results;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }
}

/// One line in the toolkit peers' fields and order (`../shared/peers/README.md`, "Toolkit
/// peers"): `impl` … `version`, then `extras` (a scenario's own fields), then ours,
/// `evalsha_per_call` and `client_cpu_s`. Prints the first error, if any, to stderr.
pub(crate) struct ToolkitLine {
    /// The scenario's name.
    pub(crate) scenario: &'static str,
    pub(crate) workers: u64,
    /// Times the action ran (`null` where the scenario has no action).
    pub(crate) executions: Value,
    pub(crate) calls: Calls,
    /// Wall time, server-side calls and client CPU of the scenario.
    pub(crate) spent: Spent,
}

/// What a scenario spent between [`Meter::start`] and [`Meter::stop`].
pub(crate) struct Spent {
    /// Wall time, seconds.
    pub(crate) elapsed: f64,
    /// Server-side calls, less the meter's own `INFO`.
    pub(crate) commands: crate::redis::CommandCalls,
    /// Client CPU, seconds.
    pub(crate) cpu: f64,
}

/// Measures a scenario: the server's command counts, this process' CPU time and the wall clock
/// from [`start`](Self::start) to [`stop`](Self::stop).
pub(crate) struct Meter {
    commands: crate::redis::CommandCalls,
    cpu: f64,
    started: std::time::Instant,
}

impl Meter {
    /// # Errors
    /// When `INFO commandstats` cannot be read.
    pub(crate) async fn start(target: &crate::redis::Target) -> Result<Meter, String> {
        Ok(Meter {
            commands: target.command_calls().await?,
            cpu: cpu_seconds(),
            started: std::time::Instant::now(),
        })
    }

    pub(crate) fn started(&self) -> std::time::Instant {
        self.started
    }

    /// # Errors
    /// When `INFO commandstats` cannot be read.
    pub(crate) async fn stop(self, target: &crate::redis::Target) -> Result<Spent, String> {
        let elapsed = self.started.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        let commands = target.command_calls().await?.since(self.commands, 1);
        Ok(Spent {
            elapsed,
            commands,
            cpu,
        })
    }
}

/// A key prefix of its own for this run of `scenario`, so that an earlier run's records on the
/// same Redis stay out of it: `bench:<kind>:<scenario>:<nanoseconds since the epoch, hex>`.
pub(crate) fn run_prefix(kind: &str, scenario: &str) -> String {
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("bench:{kind}:{scenario}:{run_id:x}")
}

impl ToolkitLine {
    pub(crate) fn into_json(self, extras: Map<String, Value>) -> Map<String, Value> {
        if let Some(error) = &self.calls.first_error {
            eprintln!(
                "[lock-bench] {}: {} errors, first: {error}",
                self.scenario, self.calls.errors
            );
        }
        let calls = self.calls.call_us.len() as u64;
        let mut line = Map::new();
        line.insert("impl".into(), json!(crate::IMPL));
        line.insert("scenario".into(), json!(self.scenario));
        line.insert("workers".into(), json!(self.workers));
        line.insert("duration_s".into(), json!(round3(self.spent.elapsed)));
        line.insert("calls".into(), json!(calls));
        line.insert(
            "calls_per_s".into(),
            json!(round1(calls as f64 / self.spent.elapsed)),
        );
        line.insert("call_us".into(), percentiles(self.calls.call_us));
        line.insert("executions".into(), self.executions);
        line.insert("results".into(), json!(self.calls.results));
        line.insert("errors".into(), json!(self.calls.errors));
        line.insert(
            "redis_cmds_per_call".into(),
            per_call(self.spent.commands.total, calls),
        );
        line.insert("version".into(), json!(VERSION));
        line.extend(extras);
        line.insert(
            "evalsha_per_call".into(),
            per_call(self.spent.commands.evalsha, calls),
        );
        line.insert("client_cpu_s".into(), json!(round3(self.spent.cpu)));
        line
    }
}

/// `n / calls` to two decimals, as the peer rounds it; `null` without calls.
pub(crate) fn per_call(n: u64, calls: u64) -> Value {
    match calls {
        0 => Value::Null,
        c => json!((n as f64 / c as f64 * 100.0).round() / 100.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p = percentiles(samples);
        assert_eq!(p["p50"], 500.0);
        assert_eq!(p["p99"], 990.0);
        assert_eq!(p["p999"], 999.0);
        assert_eq!(p["max"], 1000.0);
        assert_eq!(percentiles(Vec::new()), Value::Null);
        assert_eq!(percentiles(vec![7.0])["p50"], 7.0);
    }

    #[test]
    fn peer_fields_come_first_in_their_order() {
        let mut line = serde_json::Map::new();
        line.insert("extra".into(), json!(1));
        line.insert("version".into(), json!("x"));
        line.insert("impl".into(), json!("platform-lock"));
        let text = to_json_line_in(&line, &FIELDS.lock);
        assert!(
            text.starts_with(r#"{"impl":"platform-lock","scenario":null"#),
            "{text}"
        );
        assert!(text.ends_with(r#""version":"x","extra":1}"#), "{text}");
        let parsed: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed.as_object().map(|o| o.len()), Some(16));
    }

    #[test]
    fn toolkit_lines_take_the_toolkit_peers_order() {
        let mut line = serde_json::Map::new();
        line.insert("replays".into(), json!(7));
        line.insert("calls".into(), json!(8));
        line.insert("impl".into(), json!("platform-lock"));
        let text = to_json_line_in(&line, &FIELDS.idempotency);
        assert!(
            text.starts_with(r#"{"impl":"platform-lock","scenario":null,"workers":null,"duration_s":null,"calls":8,"#),
            "{text}"
        );
        assert!(text.ends_with(r#""version":null,"replays":7}"#), "{text}");
        assert!(!text.contains("acquisitions"), "{text}");
    }

    #[test]
    fn process_figures_are_readable() {
        assert!(cpu_seconds() >= 0.0);
        assert!(resident_bytes().is_some_and(|b| b > 0));
    }
}
