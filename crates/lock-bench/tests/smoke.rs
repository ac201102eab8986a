//! A short run of every scenario against a private redis-server (the benchmark itself is not
//! part of CI): the lines parse, carry the peers' fields, and say what the protocol promises —
//! one script call per acquire and per release, no two holders, every contended worker served,
//! one renewal call per batch per tick, one execution per key of idempotent execution with the
//! result for every duplicate, one cache load per key and round. No timing is asserted (beyond
//! the action's own 50 ms).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn lock_bench(args: &[&str]) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_lock-bench"))
        .args(args)
        .output()
        .expect("lock-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "lock-bench {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The `(impl, scenario)` of each line, in order.
fn names(lines: &[Value]) -> Vec<(&str, &str)> {
    lines
        .iter()
        .map(|l| (l["impl"].as_str().unwrap(), l["scenario"].as_str().unwrap()))
        .collect()
}

/// The peers' field orders by kind of line, as lock-bench declares them.
fn peer_fields() -> serde_json::Map<String, Value> {
    serde_json::from_str(include_str!("../src/peer_fields.json")).unwrap()
}

/// Asserts that `line`'s fields start with the peers' fields of `kind`, in that order.
fn assert_fields_start_with(line: &Value, kind: &str) {
    let fields = peer_fields()[kind].clone();
    let fields: Vec<&str> = fields
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let keys: Vec<&str> = line
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys[..fields.len()], *fields, "field order: {line}");
}

/// The declared field orders are the peers' own, where the peers' folder is next to this
/// repository (../shared/peers, as scripts/bench.sh expects it); skipped elsewhere.
#[test]
fn the_declared_fields_are_the_peers() {
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peers");
    if !peers.join("harness.py").exists() {
        eprintln!("skipped: no peers at {}", peers.display());
        return;
    }
    let python = |dir: &Path, expression: &str| -> Value {
        let output = Command::new("python3")
            .current_dir(dir)
            .args([
                "-c",
                &format!("import json, sys; sys.path.insert(0, '.'); {expression}"),
            ])
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let declared = peer_fields();
    let harness = python(&peers, "import harness; print(json.dumps(harness.FIELDS))");
    assert_eq!(declared["lock"], harness);
    let measure = python(
        &peers.join("toolkit"),
        "import measure; print(json.dumps(measure.FIELDS))",
    );
    for kind in ["ratelimit", "cache"] {
        assert_eq!(declared[kind], measure[kind], "{kind}");
    }
}

/// The table bench-table prints from `lines`, written to a JSON-lines file named `file`.
fn bench_table(lines: &[Value], file: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join(file);
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&results, text.join("\n")).unwrap();
    let table = Command::new(env!("CARGO_BIN_EXE_bench-table"))
        .arg(&results)
        .output()
        .unwrap();
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    String::from_utf8(table.stdout).unwrap()
}

#[test]
fn the_peer_scenarios_emit_the_peers_schema_and_keep_the_protocols_promises() {
    for (scenario, workers) in [("uncontended", 1), ("parallel", 32), ("contended", 8)] {
        let lines = lock_bench(&["--scenario", scenario, "--duration", "1"]);
        let [line] = lines.as_slice() else {
            panic!("{scenario}: expected one line, got {lines:?}");
        };
        assert_fields_start_with(line, "lock");
        assert_eq!(line["impl"], "platform-lock");
        assert_eq!(line["workers"], workers);
        assert_eq!(line["errors"], 0, "{scenario}: {line}");
        assert!(line["acquisitions"].as_u64().unwrap() > 0, "{line}");
        assert!(
            line["per_worker_min"].as_u64().unwrap() > 0,
            "{scenario}: a starved worker: {line}"
        );
        for field in ["acquire_us", "release_us"] {
            assert!(line[field]["p50"].as_f64().unwrap() <= line[field]["max"].as_f64().unwrap());
        }
        let evalsha = line["evalsha_per_acquisition"].as_f64().unwrap();
        if scenario == "contended" {
            // A release wakes one queued waiter, whose attempt is granted: 2 calls per cycle,
            // plus the first waiter's check when its subscription was confirmed, and on a
            // CPU-starved machine (2.16 measured with both cores busy) a head that is scheduled
            // late and tries once more. Waking every waiter would cost about 8 per cycle.
            assert!(
                (2.0..2.5).contains(&evalsha),
                "{evalsha} script calls per cycle: {line}"
            );
            assert!(line["handoff_us"]["p50"].as_f64().unwrap() > 0.0);
            assert!(line["ping_us"]["p50"].as_f64().unwrap() > 0.0);
        } else {
            assert_eq!(
                evalsha, 2.0,
                "{scenario}: one acquire and one release call: {line}"
            );
            assert!(line["handoff_us"].is_null());
        }
    }
}

#[test]
fn the_watchdog_scenario_renews_in_one_call_per_batch_per_tick() {
    let lines = lock_bench(&[
        "--scenario",
        "watchdog",
        "--watchdog-locks",
        "1200",
        "--watchdog-timeout",
        "1s",
    ]);
    let [line] = lines.as_slice() else {
        panic!("expected one line, got {lines:?}");
    };
    assert_eq!(line["held"], 1200);
    assert_eq!(line["ticks"], 3);
    assert_eq!(line["calls_per_tick_bound"], 3);
    assert_eq!(line["calls_per_tick"], 3.0, "{line}");
    assert_eq!(line["leases_lost"], 0, "{line}");
    assert!(
        line["client_memory_per_lock_bytes"].as_u64().is_some(),
        "{line}"
    );
    // Every key stored and renewed shows on the server.
    assert!(
        line["server_memory_per_lock_bytes"].as_u64() > Some(0),
        "{line}"
    );
    assert!(line["renew_us_per_key"].as_f64() > Some(0.0), "{line}");
    assert!(line["tick_us"]["p50"].as_f64() > Some(0.0), "{line}");
}

#[test]
fn the_scripts_limit_runs_redis_benchmark_and_the_table_and_chart_read_the_lines() {
    let lines = lock_bench(&["--scenario", "scripts", "--duration", "0.2"]);
    let scenarios: Vec<&str> = lines
        .iter()
        .map(|l| l["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(scenarios, ["uncontended", "parallel", "contended"]);
    assert!(
        lines
            .iter()
            .all(|l| l["impl"] == "scripts" && l["cycles_per_s"].as_f64().unwrap() > 0.0)
    );

    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results.jsonl");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&results, text.join("\n")).unwrap();
    let table = Command::new(env!("CARGO_BIN_EXE_bench-table"))
        .arg(&results)
        .output()
        .unwrap();
    assert!(table.status.success());
    let table = String::from_utf8(table.stdout).unwrap();
    assert_eq!(
        table.lines().filter(|l| l.contains("| scripts |")).count(),
        3,
        "{table}"
    );

    let svg = dir.path().join("latency.svg");
    let chart = Command::new(env!("CARGO_BIN_EXE_bench-chart"))
        .args([Path::new("--input"), &results, Path::new("--output"), &svg])
        .output()
        .unwrap();
    assert!(
        chart.status.success(),
        "{}",
        String::from_utf8_lossy(&chart.stderr)
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("scripts"));
}

#[test]
fn the_idempotency_scenarios_emit_the_toolkit_schema_and_keep_the_contract() {
    let lines = lock_bench(&["--scenario", "idempotency", "--duration", "0.5"]);
    let names = names(&lines);
    assert_eq!(
        names,
        [
            ("platform-lock", "first"),
            ("raw", "first"),
            ("platform-lock", "replay"),
            ("raw", "replay"),
            ("platform-lock", "duplicates"),
        ]
    );
    for line in &lines {
        assert_fields_start_with(line, "idempotency");
        assert_eq!(line["errors"], 0, "{line}");
        assert!(line["calls_per_s"].as_f64().unwrap() > 0.0, "{line}");
    }
    let [first, raw_first, replay, raw_replay, duplicates] = lines.as_slice() else {
        unreachable!()
    };
    let calls = |line: &Value| line["calls"].as_u64().unwrap();

    // Every call of `first` runs the action: one claim and one completion script call.
    assert_eq!(first["executions"].as_u64(), Some(calls(first)), "{first}");
    assert_eq!(first["results"].as_u64(), Some(calls(first)), "{first}");
    assert_eq!(first["replays"], 0, "{first}");
    assert_eq!(first["evalsha_per_call"], 2.0, "{first}");
    // `replay` runs it once, then one script call per replay.
    assert_eq!(replay["executions"], 1, "{replay}");
    assert_eq!(
        replay["replays"].as_u64(),
        Some(calls(replay) - 1),
        "{replay}"
    );
    assert_eq!(replay["evalsha_per_call"], 1.0, "{replay}");
    // The right answer to 8 concurrent duplicates: one execution, every caller the result.
    let rounds = duplicates["rounds"].as_u64().unwrap();
    assert!(rounds > 0, "{duplicates}");
    assert_eq!(
        duplicates["executions"].as_u64(),
        Some(rounds),
        "{duplicates}"
    );
    assert_eq!(calls(duplicates), 8 * rounds, "{duplicates}");
    assert_eq!(
        duplicates["results"].as_u64(),
        Some(8 * rounds),
        "{duplicates}"
    );
    assert_eq!(
        duplicates["replays"].as_u64(),
        Some(7 * rounds),
        "{duplicates}"
    );
    // Each caller waited for the 50 ms action.
    assert!(
        duplicates["call_us"]["p50"].as_f64().unwrap() >= 50_000.0,
        "{duplicates}"
    );
    // The raw lines: SET NX + SET per first call, one GET per replay (plus redis-benchmark's
    // set-up, a few commands over thousands of calls).
    for (line, commands) in [(raw_first, 2.0), (raw_replay, 1.0)] {
        let per_call = line["redis_cmds_per_call"].as_f64().unwrap();
        assert!((commands..commands + 0.01).contains(&per_call), "{line}");
    }

    let table = bench_table(&lines, "toolkit.jsonl");
    assert!(
        table.starts_with("| scenario | impl | calls/s | × raw |"),
        "{table}"
    );
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains("**platform-lock**"))
            .count(),
        3,
        "{table}"
    );
    assert!(!table.contains("not in the table"), "{table}");
}

#[test]
fn the_rate_limit_scenarios_emit_the_toolkit_schema_and_keep_the_limit() {
    let lines = lock_bench(&["--scenario", "ratelimit", "--duration", "0.5"]);
    let names = names(&lines);
    assert_eq!(
        names,
        [
            ("platform-lock", "decide"),
            ("platform-lock-batched", "decide"),
            ("raw-fred", "decide"),
            ("platform-lock", "parallel"),
            ("platform-lock-batched", "parallel"),
            ("raw-fred", "parallel"),
            ("platform-lock", "hot-key"),
            ("platform-lock-batched", "hot-key"),
            ("raw-fred", "hot-key"),
            ("platform-lock", "accuracy"),
            ("platform-lock-batched", "accuracy"),
        ]
    );
    for line in &lines {
        assert_fields_start_with(line, "ratelimit");
        assert_eq!(line["errors"], 0, "{line}");
        assert!(line["calls"].as_u64().unwrap() > 0, "{line}");
    }
    let calls = |line: &Value| line["calls"].as_u64().unwrap();
    for line in lines.iter().filter(|l| l["impl"] == "platform-lock") {
        assert_eq!(line["algorithm"], "gcra", "{line}");
        let decided = line["admitted"].as_u64().unwrap() + line["denied"].as_u64().unwrap();
        assert_eq!(decided, calls(line), "{line}");
        if line["scenario"] != "accuracy" {
            // A limit of 1,000,000/s never denies here. One worker's decisions are a script call
            // each (and one for its warm-up); 32 workers' share script calls.
            assert_eq!(line["denied"], 0, "{line}");
            let evalsha = line["evalsha_per_call"].as_f64().unwrap();
            if line["scenario"] == "decide" {
                assert!(evalsha >= 1.0, "{line}");
            } else {
                assert!(evalsha < 1.0, "{line}");
            }
        }
    }
    for line in lines
        .iter()
        .filter(|l| l["impl"] == "platform-lock-batched")
    {
        assert_eq!(line["local_batch"], 50, "{line}");
        let decided = line["admitted"].as_u64().unwrap() + line["denied"].as_u64().unwrap();
        assert_eq!(decided, calls(line), "{line}");
        if line["scenario"] != "accuracy" {
            // A refill of 50 per key: at most one script call per 50 decisions, plus set-up.
            assert_eq!(line["denied"], 0, "{line}");
            let evalsha = line["evalsha_per_call"].as_f64().unwrap();
            assert!(evalsha < 0.5, "{line}");
        }
    }
    for accuracy in lines.iter().filter(|l| l["scenario"] == "accuracy") {
        assert_eq!(accuracy["workers"], 32, "{accuracy}");
        assert_eq!(
            (&accuracy["limit_per_s"], &accuracy["burst"]),
            (&Value::from(200), &Value::from(200)),
            "{accuracy}"
        );
        // GCRA admits at most the burst plus the rate over the time its decisions took, local
        // batches or not: each permit spent was charged first.
        let admitted = accuracy["admitted"].as_f64().unwrap();
        assert!(admitted > 0.0, "{accuracy}");
        assert!(
            admitted <= accuracy["bound"].as_f64().unwrap(),
            "{accuracy}"
        );
    }

    let table = bench_table(&lines, "ratelimit.jsonl");
    assert!(
        table.starts_with("| scenario | impl | calls/s | × best peer | × raw-gcra |"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 2 + 11, "{table}");
}

#[test]
fn the_cache_scenarios_emit_the_toolkit_schema_and_load_once_per_key() {
    let lines = lock_bench(&["--scenario", "cache", "--duration", "0.3"]);
    let names = names(&lines);
    let mut expected = Vec::new();
    for scenario in ["hit", "hit-parallel", "miss-load", "stampede"] {
        expected.push(("platform-lock", scenario));
        expected.push(("platform-lock-near", scenario));
    }
    expected.push(("platform-lock-near", "push-delay"));
    assert_eq!(names, expected);
    for line in &lines {
        assert_fields_start_with(line, "cache");
        assert_eq!(line["errors"], 0, "{line}");
        assert_eq!(
            line["results"], line["calls"],
            "every call got its value: {line}"
        );
        let scenario = line["scenario"].as_str().unwrap();
        match scenario {
            "hit" if line["impl"] == "platform-lock" => {
                assert_eq!(line["redis_cmds_per_call"], 1.0, "one HGET: {line}");
            }
            // 32 readers at once: their reads share HMGETs.
            "hit-parallel" if line["impl"] == "platform-lock" => {
                let commands = line["redis_cmds_per_call"].as_f64().unwrap();
                assert!(commands > 0.0 && commands < 1.0, "shared HMGETs: {line}");
            }
            // A warm in-process tier sends Redis nothing.
            "hit" | "hit-parallel" => assert_eq!(line["redis_cmds_per_call"], 0.0, "{line}"),
            "miss-load" => assert_eq!(line["loader_runs"], line["calls"], "{line}"),
            "stampede" => assert_eq!(line["loader_runs_per_round"], 1.0, "{line}"),
            _ => {
                assert_eq!(line["calls"], 200, "{line}");
                assert!(line["delay_us"]["p50"].as_f64().unwrap() > 0.0, "{line}");
            }
        }
    }
}

#[test]
fn bad_arguments_are_refused_naming_what_is_accepted() {
    for (args, expected) in [
        (&["--duration", "0"][..], "accepted: 0.1 to 3600 seconds"),
        (&["--duration", "-1"][..], "accepted: 0.1 to 3600 seconds"),
        (
            &["--redis-url", "redis://:s3cret@h:1/abc"][..],
            "redis://:***@h:1/abc",
        ),
        (&["--duration", "soon"][..], "not a number of seconds"),
        (&["--watchdog-timeout", "10ms"][..], "accepted"),
        (&["--redis-url", "rediss://x:1"][..], "expected redis://"),
        (&["--scenario", "fast"][..], "possible values"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_lock-bench"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("s3cret"), "a password shown: {stderr}");
    }
}

#[test]
fn an_unreachable_redis_is_one_clear_line_not_one_per_scenario() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let output = Command::new(env!("CARGO_BIN_EXE_lock-bench"))
        .args(["--redis-url", "redis://:s3cret@127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot reach Redis at 127.0.0.1:1"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(output.stdout.is_empty());
}
