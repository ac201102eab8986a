//! `bench-table`: the Markdown table of a side-by-side run (JSON lines of `lock-bench` and
//! ../shared/peers), with each line's throughput as a ratio of `raw` and of our `scripts` limit,
//! and client CPU per acquisition.
//!
//! ```sh
//! cargo run --release -p lock-bench --bin bench-table -- results.jsonl > table.md
//! ```
//!
//! Lines that are not result objects (or carry an `error`) are listed under the table instead;
//! lock-bench's `watchdog` line gets a table of its own, and so do the idempotent-execution
//! lines (scenarios `first`, `replay`, `duplicates` of lock-bench and the toolkit peers), with
//! calls/s as a ratio of `raw`; the master/sub-lock lines (`branches-register-release`,
//! `branches-master`) and the shared-values lines (`values-*`) share the idempotency table's
//! columns and go in it. Rate-limiting lines (those with an `algorithm` field: lock-bench's and
//! the toolkit peers' `decide`, `parallel`, `hot-key`, `accuracy`) get a table of their own,
//! with calls/s as a ratio of the best peer's (not `raw-*`, not ours) and of `raw-gcra`, call
//! p50 as a ratio of `raw-fred`'s, and `accuracy`'s admissions against the bound. Cache lines
//! (`hit`, `hit-parallel`, `miss-load`, `stampede` of lock-bench and the toolkit peers) get one
//! too, with calls/s as a ratio of the best peer's and of `raw-hget`, and lock-bench's
//! `push-delay` line a table of its own.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;

use clap::Parser;
use serde_json::Value;

#[derive(Parser)]
#[command(
    about = "Markdown table of a side-by-side benchmark run (JSON lines of lock-bench and the peers)"
)]
struct Args {
    /// JSON-lines results file, or `-` for stdin.
    input: String,
}

/// Scenario order of the table, then impl order within a scenario.
const SCENARIOS: [&str; 3] = ["uncontended", "parallel", "contended"];
/// The same for the idempotency table, which also takes the master/sub-lock and shared-values
/// lines.
const TOOLKIT_SCENARIOS: [&str; 11] = [
    "first",
    "replay",
    "duplicates",
    "branches-register-release",
    "branches-master",
    "values-get",
    "values-set",
    "values-cas",
    "values-wake",
    "values-fanout",
    "values-queue",
];
const TOOLKIT_IMPLS: [&str; 3] = ["platform-lock", "raw", "powertools"];
/// The same for the rate-limiting table.
const RATELIMIT_SCENARIOS: [&str; 4] = ["decide", "parallel", "hot-key", "accuracy"];
const RATELIMIT_IMPLS: [&str; 8] = [
    "platform-lock",
    "raw-fred",
    "raw-gcra",
    "raw-incr",
    "rate-limiter-flexible",
    "limits-moving-window",
    "limits-fixed-window",
    "limits-sliding-window-counter",
];
/// The same for the cache table.
const CACHE_SCENARIOS: [&str; 4] = ["hit", "hit-parallel", "miss-load", "stampede"];
const CACHE_IMPLS: [&str; 6] = [
    "platform-lock",
    "platform-lock-near",
    "raw-hget",
    "raw-get",
    "cached",
    "cache-manager",
];
const IMPLS: [&str; 8] = [
    "platform-lock",
    "scripts",
    "raw",
    "rslock",
    "redis-py",
    "python-redis-lock",
    "node-redlock",
    "redis-semaphore",
];

fn main() -> ExitCode {
    let path = Args::parse().input;
    let read = if path == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(&path)
    };
    let text = match read {
        Ok(text) => text,
        Err(error) => {
            eprintln!("bench-table: cannot read {path}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let Parsed {
        results,
        toolkit,
        ratelimit,
        cache,
        problems,
    } = parse(&text);
    if results.is_empty() && toolkit.is_empty() && ratelimit.is_empty() && cache.is_empty() {
        eprintln!("bench-table: {path}: no result lines");
        for problem in problems {
            eprintln!("  {problem}");
        }
        return ExitCode::FAILURE;
    }
    let mut tables = Vec::new();
    if !results.is_empty() {
        tables.push(table(&results));
    }
    tables.extend(watchdog_table(&text));
    if !toolkit.is_empty() {
        tables.push(toolkit_table(&toolkit));
    }
    if !ratelimit.is_empty() {
        tables.push(ratelimit_table(&ratelimit));
    }
    if !cache.is_empty() {
        tables.push(cache_table(&cache));
    }
    tables.extend(push_delay_table(&text));
    print!("{}", tables.join("\n"));
    for problem in problems {
        println!("\n- not in the table: {problem}");
    }
    ExitCode::SUCCESS
}

/// lock-bench's `watchdog` line (the last one, if several) as a table of its own.
fn watchdog_table(text: &str) -> Option<String> {
    let line = last_line(text, "watchdog")?;
    let field = |name: &str| match &line[name] {
        Value::Null => "–".to_owned(),
        Value::String(text) => text.clone(),
        value => value.to_string(),
    };
    Some(format!(
        "| watchdog | held | renewal period ms | calls per tick (bound) | last / longest tick µs | client CPU s over the hold | client memory per lock bytes |\n\
         |---|---:|---:|---:|---:|---:|---:|\n\
         | {} | {} | {} | {} ({}) | {} / {} | {} | {} |\n",
        field("impl"),
        field("held"),
        field("renewal_period_ms"),
        field("calls_per_tick"),
        field("calls_per_tick_bound"),
        field("last_tick_us"),
        field("longest_tick_us"),
        field("client_cpu_s"),
        field("client_memory_per_lock_bytes"),
    ))
}

/// lock-bench's `push-delay` line (the last one, if several) as a table of its own.
fn push_delay_table(text: &str) -> Option<String> {
    let line = last_line(text, "push-delay")?;
    let of = |field: &str, p: &str| us(&line, field, p);
    Some(format!(
        "| push-delay | reader | writes | delay p50 / p99 / max µs | write p50 / p99 µs | errors |\n\
         |---|---|---:|---:|---:|---:|\n\
         | {} | {} | {} | {} / {} / {} | {} / {} | {} |\n",
        line["impl"].as_str().unwrap_or("?"),
        line["reader"].as_str().unwrap_or("?"),
        num(&line, "calls", 0),
        of("delay_us", "p50"),
        of("delay_us", "p99"),
        of("delay_us", "max"),
        of("call_us", "p50"),
        of("call_us", "p99"),
        num(&line, "errors", 0),
    ))
}

/// The last line of `scenario` without an error.
fn last_line(text: &str, scenario: &str) -> Option<Value> {
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["scenario"] == scenario && v.get("error").is_none_or(Value::is_null))
}

/// Result lines by (scenario position, impl position, impl name), in table order.
type Results = BTreeMap<(usize, usize, String), Value>;

/// The result lines of a run by table, and the lines left out.
#[derive(Default)]
struct Parsed {
    results: Results,
    toolkit: Results,
    ratelimit: Results,
    cache: Results,
    problems: Vec<String>,
}

/// Result lines by (scenario, impl) — the lock's, the idempotency ones, the rate-limiting ones,
/// the cache ones; later lines replace earlier ones. Also the lines left out.
fn parse(text: &str) -> Parsed {
    let Parsed {
        mut results,
        mut toolkit,
        mut ratelimit,
        mut cache,
        mut problems,
    } = Parsed::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            problems.push(format!(
                "not JSON: {}",
                line.chars().take(80).collect::<String>()
            ));
            continue;
        };
        let field = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned()
        };
        let (scenario, imp) = (field("scenario"), field("impl"));
        if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
            problems.push(format!("{imp} / {scenario}: {error}"));
            continue;
        }
        // Before the lock's scenarios: both have a `parallel`.
        if value.get("algorithm").is_some() {
            let Some(s) = RATELIMIT_SCENARIOS.iter().position(|s| *s == scenario) else {
                problems.push(format!("{imp} / {scenario}: not a scenario of the table"));
                continue;
            };
            ratelimit.insert((s, impl_position(&RATELIMIT_IMPLS, &imp), imp), value);
            continue;
        }
        if let Some(s) = CACHE_SCENARIOS.iter().position(|s| *s == scenario) {
            cache.insert((s, impl_position(&CACHE_IMPLS, &imp), imp), value);
            continue;
        }
        if let Some(s) = TOOLKIT_SCENARIOS.iter().position(|s| *s == scenario) {
            toolkit.insert((s, impl_position(&TOOLKIT_IMPLS, &imp), imp), value);
            continue;
        }
        let Some(s) = SCENARIOS.iter().position(|s| *s == scenario) else {
            if scenario != "watchdog" && scenario != "push-delay" {
                problems.push(format!("{imp} / {scenario}: not a scenario of the table"));
            }
            continue; // lock-bench's `watchdog` and `push-delay` lines have tables of their own
        };
        results.insert((s, impl_position(&IMPLS, &imp), imp), value);
    }
    Parsed {
        results,
        toolkit,
        ratelimit,
        cache,
        problems,
    }
}

/// Where `imp` stands in a table's `impls`: after all of them when not listed.
fn impl_position(impls: &[&str], imp: &str) -> usize {
    impls.iter().position(|i| *i == imp).unwrap_or(impls.len())
}

/// The idempotent-execution lines: calls/s (and as a ratio of `raw`), call latency, Redis
/// commands per call, and what `duplicates` is about: executions, results, errors.
fn toolkit_table(results: &Results) -> String {
    let mut out = String::from(
        "| scenario | impl | calls/s | × raw | call p50 / p99 µs | Redis cmds / call | calls | executions | results | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for ((s, _, imp), v) in results {
        let ratio = ratio(rate(v), rate_of(results, *s, "raw"));
        let num = |field: &str, digits: usize| num(v, field, digits);
        let us = |p: &str| us(v, "call_us", p);
        let name = shown_impl(imp);
        out.push_str(&format!(
            "| {} | {name} | {} | {ratio} | {} / {} | {} | {} | {} | {} | {} |\n",
            TOOLKIT_SCENARIOS[*s],
            num("calls_per_s", 0),
            us("p50"),
            us("p99"),
            num("redis_cmds_per_call", 2),
            num("calls", 0),
            num("executions", 0),
            num("results", 0),
            num("errors", 0),
        ));
    }
    out
}

/// The rate-limiting lines: calls/s against the best peer and `raw-gcra`, call latency (p50
/// against `raw-fred`'s), Redis commands and client CPU per call, denials and errors, and for
/// `accuracy` the admissions over the bound and the busiest second.
fn ratelimit_table(results: &Results) -> String {
    let mut out = String::from(
        "| scenario | impl | calls/s | × best peer | × raw-gcra | call p50 / p99 µs | p50 × raw-fred | Redis cmds / call | client CPU µs / call | denied | errors | admitted / bound | max in any 1 s |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let p50 = |v: &Value| {
        v.get("call_us")
            .and_then(|d| d.get("p50"))
            .and_then(Value::as_f64)
    };
    for ((s, _, imp), v) in results {
        let scenario = RATELIMIT_SCENARIOS[*s];
        let others = || results.iter().filter(|((os, _, _), _)| os == s);
        let of = |other: &str| others().find(|((_, _, oi), _)| oi == other).map(|(_, o)| o);
        let best_peer = best_peer(results, *s);
        let ratio = |x: Option<f64>, base: Option<f64>| match (x, base) {
            // Throughput ratios say nothing in `accuracy`, where the limit sets the pace.
            (Some(_), Some(_)) if scenario == "accuracy" => "–".to_owned(),
            _ => ratio(x, base),
        };
        let num = |field: &str, digits: usize| num(v, field, digits);
        let us = |p: &str| us(v, "call_us", p);
        let cpu = cpu_per_call(v);
        let name = shown_impl(imp);
        out.push_str(&format!(
            "| {scenario} | {name} | {} | {} | {} | {} / {} | {} | {} | {cpu} | {} | {} | {} | {} |\n",
            num("calls_per_s", 0),
            ratio(rate(v), best_peer),
            ratio(rate(v), of("raw-gcra").and_then(rate)),
            us("p50"),
            us("p99"),
            ratio(p50(v), of("raw-fred").and_then(p50)),
            num("redis_cmds_per_call", 2),
            num("denied", 0),
            num("errors", 0),
            num("admitted_over_bound", 3),
            num("max_in_any_1s_window", 0),
        ));
    }
    out
}

/// The cache lines: calls/s against the best peer and `raw-hget`, call latency, Redis commands
/// and client CPU per call, loader runs (per round in `stampede`), results and errors.
fn cache_table(results: &Results) -> String {
    let mut out = String::from(
        "| scenario | impl | calls/s | × best peer | × raw-hget | call p50 / p99 µs | Redis cmds / call | client CPU µs / call | loader runs | per round | results | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for ((s, _, imp), v) in results {
        let num = |field: &str, digits: usize| num(v, field, digits);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} |\n",
            CACHE_SCENARIOS[*s],
            shown_impl(imp),
            num("calls_per_s", 0),
            ratio(rate(v), best_peer(results, *s)),
            ratio(rate(v), rate_of(results, *s, "raw-hget")),
            us(v, "call_us", "p50"),
            us(v, "call_us", "p99"),
            num("redis_cmds_per_call", 2),
            cpu_per_call(v),
            num("loader_runs", 0),
            num("loader_runs_per_round", 2),
            num("results", 0),
            num("errors", 0),
        ));
    }
    out
}

/// A line's `calls_per_s`.
fn rate(v: &Value) -> Option<f64> {
    v.get("calls_per_s").and_then(Value::as_f64)
}

/// The calls/s of `imp` in scenario `s`.
fn rate_of(results: &Results, s: usize, imp: &str) -> Option<f64> {
    results
        .iter()
        .find(|((os, _, oi), _)| *os == s && oi == imp)
        .and_then(|(_, o)| rate(o))
}

/// The best calls/s in scenario `s` of a peer: neither ours (`platform-lock*`) nor `raw*`.
fn best_peer(results: &Results, s: usize) -> Option<f64> {
    results
        .iter()
        .filter(|((os, _, oi), _)| {
            *os == s && !oi.starts_with("platform-lock") && !oi.starts_with("raw")
        })
        .filter_map(|(_, o)| rate(o))
        .reduce(f64::max)
}

/// `x / base` to two decimals; `–` without both.
fn ratio(x: Option<f64>, base: Option<f64>) -> String {
    match (x, base) {
        (Some(x), Some(b)) if b > 0.0 => format!("{:.2}", x / b),
        _ => "–".to_owned(),
    }
}

/// A line's number `field` to `digits` decimals; `–` when absent.
fn num(v: &Value, field: &str, digits: usize) -> String {
    v.get(field)
        .and_then(Value::as_f64)
        .map_or("–".to_owned(), |x| format!("{x:.digits$}"))
}

/// Percentile `p` of a line's latency `field` in whole µs; `–` when absent.
fn us(v: &Value, field: &str, p: &str) -> String {
    v.get(field)
        .and_then(|d| d.get(p))
        .and_then(Value::as_f64)
        .map_or("–".to_owned(), |x| format!("{x:.0}"))
}

/// A line's client CPU per call in µs; `–` without calls.
fn cpu_per_call(v: &Value) -> String {
    match (
        v.get("client_cpu_s").and_then(Value::as_f64),
        v.get("calls").and_then(Value::as_f64),
    ) {
        (Some(cpu), Some(calls)) if calls > 0.0 => format!("{:.1}", cpu / calls * 1e6),
        _ => "–".to_owned(),
    }
}

/// An impl's name, ours in bold.
fn shown_impl(imp: &str) -> String {
    if imp.starts_with("platform-lock") {
        format!("**{imp}**")
    } else {
        imp.to_owned()
    }
}

fn table(results: &Results) -> String {
    let mut out = String::from(
        "| scenario | impl | cycles/s | × raw | × scripts | acquire p50 / p99 µs | release p50 µs | handoff p50 µs | per-worker min/max | Redis cmds / acq | client CPU µs / acq | server CPU µs / acq | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cycles = |v: &Value| v.get("cycles_per_s").and_then(Value::as_f64);
    for ((s, _, imp), v) in results {
        let of = |other: &str| {
            results
                .iter()
                .find(|((os, _, oi), _)| os == s && oi == other)
                .and_then(|(_, o)| cycles(o))
        };
        let ratio = |base: Option<f64>| ratio(cycles(v), base);
        let us = |field: &str, p: &str| us(v, field, p);
        let number = |field: &str| v.get(field).and_then(Value::as_f64);
        let spread = match (number("per_worker_min"), number("per_worker_max")) {
            (Some(min), Some(max)) if max > 0.0 => format!("{:.2}", min / max),
            _ => "–".to_owned(),
        };
        // Not for raw and scripts: redis-benchmark runs twice (two pipelining set-ups) and
        // reports the better run's acquisitions only.
        let per_acquisition = |field: &str| match (number(field), number("acquisitions")) {
            (Some(cpu), Some(n)) if n > 0.0 && imp != "raw" && imp != "scripts" => {
                format!("{:.1}", cpu / n * 1e6)
            }
            _ => "–".to_owned(),
        };
        let cpu = per_acquisition("client_cpu_s");
        let server_cpu = per_acquisition("server_cpu_s");
        let name = if imp == "platform-lock" {
            format!("**{imp}**")
        } else {
            imp.clone()
        };
        out.push_str(&format!(
            "| {} | {name} | {} | {} | {} | {} / {} | {} | {} | {spread} | {} | {cpu} | {server_cpu} | {} |\n",
            SCENARIOS[*s],
            cycles(v).map_or("–".to_owned(), |c| format!("{c:.0}")),
            ratio(of("raw")),
            ratio(of("scripts")),
            us("acquire_us", "p50"),
            us("acquire_us", "p99"),
            us("release_us", "p50"),
            us("handoff_us", "p50"),
            num(v, "redis_cmds_per_acquisition", 1),
            num(v, "errors", 0),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table's rows, below its header.
    fn rows(table: &str) -> Vec<&str> {
        table.lines().skip(2).collect()
    }

    /// `text` parsed, asserting how many lines went to each table: the lock's, the toolkit's,
    /// rate limiting's, the cache's, and how many were left out.
    fn parsed(text: &str, counts: [usize; 5]) -> Parsed {
        let parsed = parse(text);
        let found = [
            parsed.results.len(),
            parsed.toolkit.len(),
            parsed.ratelimit.len(),
            parsed.cache.len(),
            parsed.problems.len(),
        ];
        assert_eq!(found, counts, "{:?}", parsed.problems);
        parsed
    }

    #[test]
    fn ratios_against_raw_and_scripts() {
        let text = r#"{"impl":"raw","scenario":"parallel","cycles_per_s":1000.0}
{"impl":"scripts","scenario":"parallel","cycles_per_s":800.0}
{"impl":"platform-lock","scenario":"parallel","cycles_per_s":400.0,"acquisitions":4000,"client_cpu_s":0.2,"server_cpu_s":0.1,"per_worker_min":90,"per_worker_max":100}
{"impl":"rslock","scenario":"contended","error":"peer exited 1"}
not json"#;
        let Parsed { results, .. } = parsed(text, [3, 0, 0, 0, 2]);
        let table = table(&results);
        let ours = table
            .lines()
            .find(|l| l.contains("platform-lock"))
            .expect("our row");
        assert!(ours.contains("| 400 | 0.40 | 0.50 |"), "{ours}");
        assert!(ours.contains("| 0.90 |"), "per-worker spread: {ours}");
        assert!(
            ours.contains("| 50.0 | 25.0 |"),
            "client and server CPU µs per acquisition: {ours}"
        );
        // Ours first within a scenario.
        let rows = rows(&table);
        assert!(rows[0].contains("platform-lock"), "{table}");
    }

    #[test]
    fn the_watchdog_line_gets_a_table_of_its_own() {
        let text = r#"{"impl":"platform-lock","scenario":"watchdog","held":10000,"renewal_period_ms":1000,"calls_per_tick":20.0,"calls_per_tick_bound":20,"last_tick_us":39000.5,"longest_tick_us":41000.0,"client_cpu_s":0.05,"client_memory_per_lock_bytes":919}"#;
        parsed(text, [0; 5]);
        let table = watchdog_table(text).expect("a watchdog table");
        assert!(
            table.contains("| 10000 | 1000 | 20.0 (20) | 39000.5 / 41000.0 | 0.05 | 919 |"),
            "{table}"
        );
        assert!(watchdog_table("{}").is_none());
    }

    #[test]
    fn branches_lines_go_in_the_idempotency_table_after_its_scenarios() {
        let text = r#"{"impl":"platform-lock","scenario":"branches-master","calls_per_s":2000.0,"call_us":{"p50":450.0,"p99":900.0},"redis_cmds_per_call":20.0,"calls":6000,"executions":null,"results":6000,"errors":0}
{"impl":"raw","scenario":"branches-register-release","calls_per_s":10000.0,"call_us":{"p50":90.0,"p99":150.0},"redis_cmds_per_call":2.0,"calls":30000,"executions":null,"results":30000,"errors":0}
{"impl":"platform-lock","scenario":"branches-register-release","calls_per_s":5000.0,"call_us":{"p50":190.0,"p99":400.0},"redis_cmds_per_call":7.1,"calls":15000,"executions":null,"results":15000,"errors":0}
{"impl":"platform-lock","scenario":"replay","calls_per_s":20000.0,"call_us":{"p50":40.0,"p99":120.0},"redis_cmds_per_call":2.0,"calls":60000,"executions":1,"results":60000,"errors":0}"#;
        let Parsed { toolkit, .. } = parsed(text, [0, 4, 0, 0, 0]);
        let table = toolkit_table(&toolkit);
        let rows = rows(&table);
        assert_eq!(rows.len(), 4, "{table}");
        assert!(rows[0].starts_with("| replay |"), "{table}");
        assert!(
            rows[1].contains(
                "| branches-register-release | **platform-lock** | 5000 | 0.50 | 190 / 400 | 7.10 |"
            ),
            "{table}"
        );
        assert!(
            rows[2].contains("| branches-register-release | raw | 10000 | 1.00 |"),
            "{table}"
        );
        assert!(
            rows[3].contains(
                "| branches-master | **platform-lock** | 2000 | – | 450 / 900 | 20.00 | 6000 | – |"
            ),
            "{table}"
        );
    }

    #[test]
    fn idempotency_lines_get_a_table_of_their_own() {
        let text = r#"{"impl":"powertools","scenario":"duplicates","calls_per_s":100.0,"call_us":{"p50":4400.0,"p99":59000.0},"redis_cmds_per_call":2.94,"calls":112,"executions":14,"results":14,"errors":98}
{"impl":"platform-lock","scenario":"first","calls_per_s":3000.0,"call_us":{"p50":300.0,"p99":500.0},"redis_cmds_per_call":9.0,"calls":15000,"executions":15000,"results":15000,"errors":0}
{"impl":"raw","scenario":"first","calls_per_s":6000.0,"call_us":{"p50":150.0,"p99":200.0},"redis_cmds_per_call":2.0,"calls":30000,"executions":null,"results":30000,"errors":0}
{"impl":"platform-lock","scenario":"duplicates","calls_per_s":150.0,"call_us":{"p50":51000.0,"p99":52000.0},"redis_cmds_per_call":3.5,"calls":800,"executions":100,"results":800,"errors":0}"#;
        let Parsed { toolkit, .. } = parsed(text, [0, 4, 0, 0, 0]);
        let table = toolkit_table(&toolkit);
        let rows = rows(&table);
        assert_eq!(rows.len(), 4, "{table}");
        assert!(
            rows[0].contains("| first | **platform-lock** | 3000 | 0.50 | 300 / 500 | 9.00 |"),
            "{table}"
        );
        assert!(rows[1].contains("| first | raw | 6000 | 1.00 |"), "{table}");
        assert!(
            rows[2].contains("| duplicates | **platform-lock** |"),
            "ours first: {table}"
        );
        assert!(
            rows[3].contains("| powertools | 100 | – | 4400 / 59000 | 2.94 | 112 | 14 | 14 | 98 |"),
            "{table}"
        );
    }

    #[test]
    fn rate_limit_lines_get_a_table_of_their_own_beside_the_lock_parallel() {
        let text = r#"{"impl":"platform-lock","scenario":"parallel","cycles_per_s":400.0}
{"impl":"raw-gcra","scenario":"parallel","calls":90000,"calls_per_s":40000.0,"call_us":{"p50":700.0,"p99":900.0},"client_cpu_s":1.8,"algorithm":"gcra"}
{"impl":"platform-lock","scenario":"parallel","calls":60000,"calls_per_s":30000.0,"call_us":{"p50":900.0,"p99":3000.0},"redis_cmds_per_call":4.0,"client_cpu_s":1.2,"denied":0,"errors":0,"algorithm":"gcra","bound":null}
{"impl":"rate-limiter-flexible","scenario":"parallel","calls_per_s":20000.0,"call_us":{"p50":1500.0,"p99":2500.0},"algorithm":"fixed-window"}
{"impl":"limits-fixed-window","scenario":"parallel","calls_per_s":5000.0,"algorithm":"fixed-window"}
{"impl":"raw-fred","scenario":"decide","calls_per_s":25000.0,"call_us":{"p50":30.0,"p99":90.0},"algorithm":"evalsha"}
{"impl":"platform-lock","scenario":"decide","calls_per_s":20000.0,"call_us":{"p50":36.0,"p99":100.0},"algorithm":"gcra"}
{"impl":"platform-lock","scenario":"accuracy","calls_per_s":40000.0,"call_us":{"p50":600.0,"p99":2000.0},"denied":9000,"errors":0,"algorithm":"gcra","admitted_over_bound":0.995,"max_in_any_1s_window":399}"#;
        let Parsed { ratelimit, .. } = parsed(text, [1, 0, 7, 0, 0]);
        let table = ratelimit_table(&ratelimit);
        let rows = rows(&table);
        assert!(
            rows[0].starts_with("| decide | **platform-lock** | 20000 | – | – | 36 / 100 | 1.20 |"),
            "{table}"
        );
        assert!(
            rows[2].starts_with(
                "| parallel | **platform-lock** | 30000 | 1.50 | 0.75 | 900 / 3000 | – | 4.00 | 20.0 | 0 | 0 | – | – |"
            ),
            "{table}"
        );
        assert!(
            rows[6].starts_with("| accuracy | **platform-lock** | 40000 | – | – | 600 / 2000 |"),
            "{table}"
        );
        assert!(rows[6].ends_with("| 9000 | 0 | 0.995 | 399 |"), "{table}");
    }

    #[test]
    fn cache_lines_get_a_table_of_their_own_and_push_delay_another() {
        let text = r#"{"impl":"raw-hget","scenario":"hit-parallel","calls_per_s":100000.0,"call_us":{"p50":300.0,"p99":900.0},"loader_runs":null,"results":null,"errors":0}
{"impl":"cached","scenario":"hit-parallel","calls_per_s":40000.0,"call_us":{"p50":800.0,"p99":1500.0},"results":120000,"errors":0}
{"impl":"platform-lock-near","scenario":"hit-parallel","calls":3000000,"calls_per_s":1000000.0,"call_us":{"p50":1.0,"p99":4.0},"loader_runs":null,"results":3000000,"errors":0,"redis_cmds_per_call":0.0,"client_cpu_s":3.0}
{"impl":"platform-lock","scenario":"stampede","calls":4000,"calls_per_s":3500.0,"call_us":{"p50":51000.0,"p99":53000.0},"loader_runs":20,"rounds":20,"loader_runs_per_round":1.0,"results":4000,"errors":0}
{"impl":"platform-lock-near","scenario":"push-delay","reader":"another process","calls":200,"call_us":{"p50":80.0,"p99":200.0},"errors":0,"delay_us":{"p50":60.0,"p99":150.0,"max":400.0}}"#;
        let Parsed { cache, .. } = parsed(text, [0, 0, 0, 4, 0]);
        let table = cache_table(&cache);
        let rows = rows(&table);
        assert_eq!(rows.len(), 4, "{table}");
        assert!(
            rows[0].starts_with(
                "| hit-parallel | **platform-lock-near** | 1000000 | 25.00 | 10.00 | 1 / 4 | 0.00 | 1.0 | – | – | 3000000 | 0 |"
            ),
            "{table}"
        );
        assert!(
            rows[1].starts_with("| hit-parallel | raw-hget | 100000 | 2.50 | 1.00 |"),
            "{table}"
        );
        assert!(
            rows[3].ends_with("| 20 | 1.00 | 4000 | 0 |"),
            "loader runs per round: {table}"
        );
        let push = push_delay_table(text).expect("a push-delay table");
        assert!(
            push.contains(
                "| platform-lock-near | another process | 200 | 60 / 150 / 400 | 80 / 200 | 0 |"
            ),
            "{push}"
        );
    }
}
