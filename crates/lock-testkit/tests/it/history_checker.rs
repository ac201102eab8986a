//! The history recorder, the fenced reference resource and the checker (no Redis needed).
//!
//! Multi-process tests spawn this test binary itself as child processes: the parent runs
//! `<this binary> history_checker::child_entry --exact --ignored` with [`CHILD_ENV`] naming the
//! child's role, and the ignored `child_entry` test does the child's work (it does nothing when
//! the variable is unset).

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::checker::{self, Report};
use lock_testkit::fenced::{self, FencedResource, WriteOutcome, WriteRecord};
use lock_testkit::history::{self, Event, Op, Phase, Recorder, monotonic_ns};
use lock_testkit::{GENEROUS, test_child};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::wait_until;

/// Set in child processes: their role.
const CHILD_ENV: &str = "LOCK_TESTKIT_HISTORY_CHILD";
/// The shared directory a child works in.
const DIR_ENV: &str = "LOCK_TESTKIT_HISTORY_DIR";
/// The child's process name in the history.
const NAME_ENV: &str = "LOCK_TESTKIT_HISTORY_NAME";
/// Writes per writer process in the concurrency test.
const WRITES_PER_CHILD: i64 = 150;
/// The error codes the synthetic lock may return.
const ALLOWED: &[&str] = &["LOCK_ACQUISITION_FAILED", "LOCK_RELEASE_FAILED"];

// ---------------------------------------------------------------------------------------------
// Child processes

fn spawn_child(role: &str, dir: &Path, name: &str) -> Child {
    test_child(module_path!(), "child_entry")
        .env(CHILD_ENV, role)
        .env(DIR_ENV, dir)
        .env(NAME_ENV, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the test binary as a child")
}

/// Waits for `child` to exit successfully within [`GENEROUS`]; returns its stdout.
fn wait_success(mut child: Child, what: &str) -> String {
    let started = Instant::now();
    loop {
        if child.try_wait().expect("poll the child").is_some() {
            break;
        }
        if started.elapsed() > GENEROUS {
            let _ = child.kill();
            panic!("{what}: child did not exit within {GENEROUS:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let output = child
        .wait_with_output()
        .expect("collect the child's output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what}: child failed: {output:?}\n{stdout}"
    );
    stdout
}

/// The work of a child process; ignored in the parent test run, and a no-op if run there.
#[test]
#[ignore = "helper: runs only in the child processes spawn_child starts"]
fn child_entry() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var(DIR_ENV).expect("DIR_ENV is set"));
    let name = std::env::var(NAME_ENV).expect("NAME_ENV is set");
    match role.as_str() {
        "clock" => println!("MONOTONIC_NS={}", monotonic_ns()),
        "writer" => fenced_writer(&dir, &name),
        "looper" => fenced_looper(&dir, &name),
        other => panic!("unknown child role {other:?}"),
    }
}

/// Waits for `<dir>/go`, then races the other writers: mostly the next token after the
/// highest it read (two writers often pick the same one), every fifth write a stale token.
fn fenced_writer(dir: &Path, name: &str) {
    let resource = FencedResource::open(&dir.join("resource")).expect("open the resource");
    let recorder = Recorder::create(&dir.join("history"), name).expect("create the recorder");
    let child: i64 = name
        .trim_start_matches("writer-")
        .parse()
        .expect("writer-<n>");
    wait_until("the go file", GENEROUS, || dir.join("go").exists());
    for i in 0..WRITES_PER_CHILD {
        let key = if i % 2 == 0 { "k1" } else { "k2" };
        let (_, highest) = resource.read(key).expect("read");
        let token = if i % 5 == 4 { highest } else { highest + 1 };
        resource
            .write_recorded(&recorder, key, token, child * 1_000_000 + i)
            .expect("write");
    }
}

/// Writes the next token, forever (until killed, or for at most [`GENEROUS`]).
fn fenced_looper(dir: &Path, name: &str) {
    let resource = FencedResource::open(&dir.join("resource")).expect("open the resource");
    let recorder = Recorder::create(&dir.join("history"), name).expect("create the recorder");
    let started = Instant::now();
    let mut value = 0;
    while started.elapsed() < GENEROUS {
        let (_, highest) = resource.read("k").expect("read");
        value += 1;
        resource
            .write_recorded(&recorder, "k", highest + 1, value)
            .expect("write");
    }
}

// ---------------------------------------------------------------------------------------------
// history

#[test]
fn monotonic_clock_is_shared_by_processes() {
    let dir = tempfile::tempdir().unwrap();
    let before = monotonic_ns();
    let stdout = wait_success(spawn_child("clock", dir.path(), "clock"), "clock child");
    let after = monotonic_ns();
    let child: u64 = stdout
        .lines()
        .find_map(|l| l.split_once("MONOTONIC_NS=").map(|(_, n)| n.trim()))
        .expect("the child printed its clock")
        .parse()
        .unwrap();
    assert!(
        before < child && child < after,
        "{before} < {child} < {after}"
    );
}

#[test]
fn recorder_round_trips_and_skips_a_truncated_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::create(dir.path(), "pod-a").unwrap();
    assert_eq!(recorder.path(), dir.path().join("pod-a.jsonl"));
    recorder.invoke(Op::Acquire, "bill-run").unwrap();
    recorder
        .complete_ok(Op::Acquire, "bill-run", Some(7), None)
        .unwrap();
    recorder.invoke(Op::Write, "bill-run").unwrap();
    recorder
        .complete_err(
            Op::Write,
            "bill-run",
            Some(7),
            fenced::WRITE_REJECTED,
            fenced::STALE,
        )
        .unwrap();
    recorder
        .record(Event::lost("pod-a", "bill-run", Some(7)))
        .unwrap();
    recorder.record(Event::crash("pod-b", "")).unwrap();

    let events = history::load(dir.path()).unwrap();
    let summary: Vec<_> = events
        .iter()
        .map(|e| (e.process.as_str(), e.op, e.phase, e.token, e.ok))
        .collect();
    assert_eq!(
        summary,
        [
            ("pod-a", Op::Acquire, Phase::Invoke, None, None),
            ("pod-a", Op::Acquire, Phase::Complete, Some(7), Some(true)),
            ("pod-a", Op::Write, Phase::Invoke, None, None),
            ("pod-a", Op::Write, Phase::Complete, Some(7), Some(false)),
            ("pod-a", Op::Lost, Phase::Complete, Some(7), None),
            ("pod-b", Op::Crash, Phase::Complete, None, None),
        ]
    );
    assert_eq!(events[3].code.as_deref(), Some("FENCED_WRITE_REJECTED"));
    assert_eq!(events[3].reason.as_deref(), Some("stale"));
    assert!(events.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));

    // The wire format: snake_case names, absent fields left out.
    let text = fs::read_to_string(recorder.path()).unwrap();
    let first = text.lines().next().unwrap();
    assert!(
        first.contains(r#""op":"acquire","phase":"invoke","key":"bill-run""#),
        "{first}"
    );
    assert!(
        !first.contains("null") && !first.contains("token"),
        "{first}"
    );

    // A process killed in the middle of a line leaves it truncated: skipped.
    let mut file = OpenOptions::new()
        .append(true)
        .open(recorder.path())
        .unwrap();
    file.write_all(br#"{"process":"pod-a","t_ns":123,"op":"wri"#)
        .unwrap();
    drop(file);
    assert_eq!(history::load(dir.path()).unwrap(), events);

    // The same process restarted: the partial line is cut off, new lines load.
    drop(recorder);
    let restarted = Recorder::create(dir.path(), "pod-a").unwrap();
    restarted.invoke(Op::Acquire, "bill-run").unwrap();
    let reloaded = history::load(dir.path()).unwrap();
    assert_eq!(reloaded.len(), events.len() + 1);
    assert_eq!(reloaded[..events.len()], events[..]);

    // A damaged line that is not the last one is an error naming the file and line.
    let mut file = OpenOptions::new()
        .append(true)
        .open(restarted.path())
        .unwrap();
    file.write_all(b"garbage\n").unwrap();
    restarted.invoke(Op::Release, "bill-run").unwrap();
    let error = history::load(dir.path()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert!(error.to_string().contains("pod-a.jsonl:8"), "{error}");

    assert_eq!(
        Recorder::create(dir.path(), "a/b").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn load_merges_files_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let a = Recorder::create(dir.path(), "a").unwrap();
    let b = Recorder::create(dir.path(), "b").unwrap();
    let at = |process: &str, t_ns| Event {
        t_ns,
        ..Event::new(process, Op::Acquire, Phase::Invoke, "k")
    };
    a.record(at("a", 30)).unwrap();
    b.record(at("b", 20)).unwrap();
    a.record(at("a", 10)).unwrap();
    b.record(at("b", 40)).unwrap();
    // The controller records a crash of `a` into its own file.
    let controller = Recorder::create(dir.path(), "controller").unwrap();
    controller
        .record(Event {
            t_ns: 25,
            ..Event::crash("a", "")
        })
        .unwrap();
    fs::write(dir.path().join("notes.txt"), "not a history").unwrap();

    let order: Vec<(String, u64)> = history::load(dir.path())
        .unwrap()
        .into_iter()
        .map(|e| (e.process, e.t_ns))
        .collect();
    let expected = [("a", 10), ("b", 20), ("a", 25), ("a", 30), ("b", 40)];
    assert_eq!(
        order,
        expected.map(|(p, t)| (p.to_owned(), t)),
        "sorted by t_ns across files"
    );
}

// ---------------------------------------------------------------------------------------------
// fenced

#[test]
fn fenced_resource_accepts_only_strictly_greater_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let resource = FencedResource::open(dir.path()).unwrap();
    assert_eq!(resource.read("k").unwrap(), (0, 0));
    assert_eq!(
        resource.write("k", 0, "w", 1).unwrap(),
        WriteOutcome::Rejected { highest: 0 }
    );
    assert_eq!(
        resource.write("k", 5, "w", 50).unwrap(),
        WriteOutcome::Accepted
    );
    assert_eq!(
        resource.write("k", 5, "v", 51).unwrap(),
        WriteOutcome::Rejected { highest: 5 },
        "an equal token is stale"
    );
    assert_eq!(
        resource.write("k", 4, "v", 40).unwrap(),
        WriteOutcome::Rejected { highest: 5 }
    );
    assert_eq!(
        resource.write("k", 6, "v", 60).unwrap(),
        WriteOutcome::Accepted
    );
    assert_eq!(
        resource.write("other", 1, "v", -1).unwrap(),
        WriteOutcome::Accepted,
        "keys are independent"
    );
    assert_eq!(resource.read("k").unwrap(), (60, 6));
    assert_eq!(resource.read("other").unwrap(), (-1, 1));
    assert_eq!(resource.rejected_count().unwrap(), 3);

    let accepted = resource.accepted().unwrap();
    let summary: Vec<(&str, u64, &str, i64)> = accepted
        .iter()
        .map(|r| (r.key.as_str(), r.token, r.writer.as_str(), r.value))
        .collect();
    assert_eq!(
        summary,
        [("k", 5, "w", 50), ("k", 6, "v", 60), ("other", 1, "v", -1)]
    );
    assert!(accepted.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));

    // A second open of the directory (another process, in effect) shares the register.
    let other = FencedResource::open(dir.path()).unwrap();
    assert_eq!(other.read("k").unwrap(), (60, 6));
    assert_eq!(
        other.write("k", 6, "x", 0).unwrap(),
        WriteOutcome::Rejected { highest: 6 }
    );
    assert_eq!(
        other.write("k", 9, "x", 90).unwrap(),
        WriteOutcome::Accepted
    );
    let clone = resource.clone();
    assert_eq!(clone.read("k").unwrap(), (90, 9));
    assert_eq!(resource.rejected_count().unwrap(), 4);
    assert_eq!(resource.accepted().unwrap().len(), 4);
}

#[test]
fn fenced_resource_cuts_off_a_partial_line_of_a_killed_writer() {
    let dir = tempfile::tempdir().unwrap();
    let resource = FencedResource::open(dir.path()).unwrap();
    assert_eq!(
        resource.write("k", 1, "w", 10).unwrap(),
        WriteOutcome::Accepted
    );
    let mut log = OpenOptions::new()
        .append(true)
        .open(dir.path().join("fenced-accepted.log"))
        .unwrap();
    log.write_all(br#"{"key":"k","token":2,"wri"#).unwrap();
    drop(log);

    let other = FencedResource::open(dir.path()).unwrap();
    assert_eq!(
        other.read("k").unwrap(),
        (10, 1),
        "the partial write was not accepted"
    );
    assert_eq!(
        other.write("k", 2, "v", 20).unwrap(),
        WriteOutcome::Accepted
    );
    assert_eq!(resource.accepted().unwrap().len(), 2);
    assert_eq!(resource.read("k").unwrap(), (20, 2));
}

/// Several OS processes race on two keys, many with equal tokens; the log never holds an equal
/// or decreasing token per key, and every write a writer saw accepted is in it exactly once.
#[test]
fn concurrent_writer_processes_never_accept_a_stale_token_nor_lose_a_write() {
    const WRITERS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let resource = FencedResource::open(&dir.path().join("resource")).unwrap();
    let children: Vec<Child> = (0..WRITERS)
        .map(|i| spawn_child("writer", dir.path(), &format!("writer-{i}")))
        .collect();
    fs::write(dir.path().join("go"), "").unwrap();
    for (i, child) in children.into_iter().enumerate() {
        wait_success(child, &format!("writer-{i}"));
    }

    let accepted = resource.accepted().unwrap();
    assert_strictly_increasing(&accepted);
    let events = history::load(&dir.path().join("history")).unwrap();
    let completed = |ok: bool| {
        events
            .iter()
            .filter(|e| e.op == Op::Write && e.phase == Phase::Complete && e.ok == Some(ok))
            .count()
    };
    assert_eq!(
        completed(true) + completed(false),
        WRITERS * WRITES_PER_CHILD as usize
    );
    assert_eq!(completed(true), accepted.len(), "acked = accepted");
    assert_eq!(completed(false) as u64, resource.rejected_count().unwrap());
    // Every fifth write of each writer is stale by construction, and equal tokens race.
    assert!(completed(false) >= WRITERS * WRITES_PER_CHILD as usize / 5);
    for key in ["k1", "k2"] {
        let last = accepted.iter().rev().find(|r| r.key == key).unwrap();
        assert_eq!(resource.read(key).unwrap(), (last.value, last.token));
    }
    let writers: std::collections::BTreeSet<&str> =
        accepted.iter().map(|r| r.writer.as_str()).collect();
    assert!(
        writers.len() > 1,
        "more than one process won writes: {writers:?}"
    );

    let report = checker::check(&events, &accepted, ALLOWED);
    assert!(report.violations().is_empty(), "{report}");
    assert_eq!(report.acked_writes, accepted.len() as u64);
    assert_eq!(report.accepted_but_not_acked, 0);
    assert_eq!(report.stale_writes_rejected, completed(false) as u64);
}

/// A writer SIGKILLed at a random point (possibly holding the file lock, possibly between the
/// accepted write and its completion record) leaves a usable resource and a loadable history.
#[test]
fn a_writer_killed_mid_write_leaves_a_consistent_resource_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let resource = FencedResource::open(&dir.path().join("resource")).unwrap();
    let controller = Recorder::create(&dir.path().join("history"), "controller").unwrap();
    let survivor = Recorder::create(&dir.path().join("history"), "survivor").unwrap();
    let mut looper = spawn_child("looper", dir.path(), "looper");
    wait_until("the looper has written 50 times", GENEROUS, || {
        resource.read("k").map(|(value, _)| value).unwrap_or(0) >= 50
    });
    controller.record(Event::crash("looper", "")).unwrap();
    kill(Pid::from_raw(looper.id() as i32), Signal::SIGKILL).unwrap();
    looper.wait().unwrap();

    let (_, highest) = resource.read("k").unwrap();
    let outcome = resource
        .write_recorded(&survivor, "k", highest + 1, -1)
        .unwrap();
    assert_eq!(outcome, WriteOutcome::Accepted);
    assert_eq!(
        resource
            .write_recorded(&survivor, "k", highest, -2)
            .unwrap(),
        WriteOutcome::Rejected {
            highest: highest + 1
        }
    );

    let accepted = resource.accepted().unwrap();
    assert_strictly_increasing(&accepted);
    let events = history::load(&dir.path().join("history")).unwrap();
    let report = checker::check(&events, &accepted, ALLOWED);
    assert!(report.violations().is_empty(), "{report}");
    assert!(report.accepted_but_not_acked <= 1, "{report}");
    assert_eq!(
        report.acked_writes + report.accepted_but_not_acked,
        accepted.len() as u64
    );
    assert_eq!(report.stale_writes_rejected, 1);
}

fn assert_strictly_increasing(accepted: &[WriteRecord]) {
    let mut highest: HashMap<&str, u64> = HashMap::new();
    for record in accepted {
        let previous = highest.insert(&record.key, record.token).unwrap_or(0);
        assert!(
            record.token > previous,
            "key {}: token {} accepted after {previous}",
            record.key,
            record.token
        );
    }
}

// ---------------------------------------------------------------------------------------------
// checker on synthetic histories

fn ev(t_ns: u64, process: &str, op: Op, phase: Phase, key: &str) -> Event {
    Event {
        t_ns,
        ..Event::new(process, op, phase, key)
    }
}

fn inv(t_ns: u64, process: &str, op: Op, key: &str) -> Event {
    ev(t_ns, process, op, Phase::Invoke, key)
}

fn ok(
    t_ns: u64,
    process: &str,
    op: Op,
    key: &str,
    token: Option<u64>,
    value: Option<i64>,
) -> Event {
    Event {
        token,
        value,
        ok: Some(true),
        ..ev(t_ns, process, op, Phase::Complete, key)
    }
}

fn err(
    t_ns: u64,
    process: &str,
    op: Op,
    key: &str,
    token: Option<u64>,
    code: &str,
    reason: &str,
) -> Event {
    Event {
        token,
        ok: Some(false),
        code: Some(code.to_owned()),
        reason: Some(reason.to_owned()),
        ..ev(t_ns, process, op, Phase::Complete, key)
    }
}

fn lost(t_ns: u64, process: &str, key: &str, token: u64) -> Event {
    Event {
        t_ns,
        ..Event::lost(process, key, Some(token))
    }
}

fn crash(t_ns: u64, victim: &str, key: &str) -> Event {
    Event {
        t_ns,
        ..Event::crash(victim, key)
    }
}

/// An acquire invoked at `from`, granted `token` at `to`.
fn grant(from: u64, to: u64, process: &str, key: &str, token: u64) -> [Event; 2] {
    [
        inv(from, process, Op::Acquire, key),
        ok(to, process, Op::Acquire, key, Some(token), None),
    ]
}

/// A write invoked at `from`, acked at `to`.
fn acked(from: u64, to: u64, process: &str, key: &str, token: u64, value: i64) -> [Event; 2] {
    [
        inv(from, process, Op::Write, key),
        ok(to, process, Op::Write, key, Some(token), Some(value)),
    ]
}

/// A write invoked at `from`, rejected as stale at `to`.
fn fenced_off(from: u64, to: u64, process: &str, key: &str, token: u64) -> [Event; 2] {
    [
        inv(from, process, Op::Write, key),
        err(
            to,
            process,
            Op::Write,
            key,
            Some(token),
            fenced::WRITE_REJECTED,
            fenced::STALE,
        ),
    ]
}

/// A release invoked at `from`, completed at `to`.
fn release(from: u64, to: u64, process: &str, key: &str) -> [Event; 2] {
    [
        inv(from, process, Op::Release, key),
        ok(to, process, Op::Release, key, None, None),
    ]
}

fn record(key: &str, token: u64, writer: &str, value: i64, t_ns: u64) -> WriteRecord {
    WriteRecord {
        key: key.to_owned(),
        token,
        writer: writer.to_owned(),
        value,
        t_ns,
    }
}

fn history(parts: &[&[Event]]) -> Vec<Event> {
    parts.iter().flat_map(|p| p.iter().cloned()).collect()
}

/// Asserts that the only violations are `expected` (count per kind prefix).
fn assert_violations(report: &Report, expected: &[(&str, usize)]) {
    let violations = report.violations();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for v in &violations {
        *counts.entry(v.split(':').next().unwrap()).or_default() += 1;
    }
    let expected: HashMap<&str, usize> = expected.iter().copied().collect();
    assert_eq!(counts, expected, "{report}");
}

/// Two processes take turns, a third is refused twice, a write is fenced off outside any
/// belief interval, a writer is killed between its accepted write and the ack.
#[test]
fn a_clean_history_has_no_violations() {
    let events = history(&[
        &grant(10, 20, "a", "k", 100),
        &[inv(15, "c", Op::Acquire, "k")],
        &[err(
            25,
            "c",
            Op::Acquire,
            "k",
            None,
            "LOCK_ACQUISITION_FAILED",
            "held_by_another_owner",
        )],
        &acked(30, 40, "a", "k", 100, 1),
        &release(50, 60, "a", "k"),
        &grant(55, 80, "b", "k", 200),
        &acked(90, 100, "b", "k", 200, 2),
        &release(110, 120, "b", "k"),
        // a's late write with its old token: fenced off, and a believed nothing any more.
        &fenced_off(130, 140, "a", "k", 100),
        &[inv(150, "c", Op::Acquire, "k")],
        &[err(
            160,
            "c",
            Op::Acquire,
            "k",
            None,
            "LOCK_ACQUISITION_FAILED",
            "backend_unavailable",
        )],
        &grant(170, 180, "a", "k", 300),
        &[inv(190, "a", Op::Write, "k")],
        &[crash(200, "a", "")],
        &grant(205, 220, "b", "k", 400),
        &release(230, 240, "b", "k"),
    ]);
    let accepted = [
        record("k", 100, "a", 1, 35),
        record("k", 200, "b", 2, 95),
        record("k", 300, "a", 3, 195),
    ];
    let report = checker::check(&events, &accepted, ALLOWED);
    assert_violations(&report, &[]);
    assert_eq!(report.grants, 4);
    assert_eq!(report.failed_acquires, 2);
    assert_eq!(
        report.failures_by_code,
        [
            ("FENCED_WRITE_REJECTED".to_owned(), 1),
            ("LOCK_ACQUISITION_FAILED".to_owned(), 2)
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(report.acked_writes, 2);
    assert_eq!(report.accepted_but_not_acked, 1);
    assert_eq!(report.stale_writes_rejected, 1);
    assert!(report.overlaps.is_empty(), "{report}");
    let text = report.to_string();
    assert!(text.contains("grants: 4, failed acquires: 2"), "{text}");
    assert!(
        text.contains("overlaps: 0 explained, 0 unexplained"),
        "{text}"
    );
    assert!(text.ends_with("violations: none"), "{text}");
    // Shuffled input is ordered by t_ns first.
    let mut reversed = events.clone();
    reversed.reverse();
    assert!(
        checker::check(&reversed, &accepted, ALLOWED)
            .violations()
            .is_empty()
    );
}

#[test]
fn a_duplicate_token_is_reported() {
    // Concurrent acquisitions (no order constraint), the first released before the second is
    // granted (no overlap): only the token is wrong.
    let events = history(&[
        &grant(10, 20, "a", "k", 5),
        &grant(12, 40, "b", "k", 5),
        &release(30, 35, "a", "k"),
        &release(50, 55, "b", "k"),
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[("duplicate token", 1)]);
    assert!(
        report.duplicate_tokens[0].contains("token 5 granted 2 times"),
        "{report}"
    );
}

#[test]
fn an_order_violation_is_reported_and_concurrent_grants_are_not() {
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &release(30, 35, "a", "k"),
        &grant(40, 50, "b", "k", 7),
        &release(60, 65, "b", "k"),
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[("order violation", 1)]);
    assert!(report.order_violations[0].contains("token 10"), "{report}");

    // b invoked before a's grant completed: either order is linearizable.
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &release(30, 35, "a", "k"),
        &grant(15, 50, "b", "k", 7),
        &release(60, 65, "b", "k"),
    ]);
    assert_violations(&checker::check(&events, &[], ALLOWED), &[]);
}

#[test]
fn a_missing_acked_write_is_reported() {
    let events = history(&[
        &grant(10, 20, "a", "k", 1),
        &acked(30, 40, "a", "k", 1, 42),
        &release(50, 60, "a", "k"),
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[("acked write missing", 1)]);
    assert_eq!(report.acked_writes, 1);
    // Also when the log holds the token with another value.
    let report = checker::check(&events, &[record("k", 1, "a", 41, 35)], ALLOWED);
    assert_violations(&report, &[("acked write missing", 1)]);
    assert_eq!(report.accepted_but_not_acked, 1, "41 was never acked");
}

#[test]
fn a_duplicated_acked_write_is_reported() {
    let events = history(&[
        &grant(10, 20, "a", "k", 1),
        &acked(30, 40, "a", "k", 1, 42),
        &release(50, 60, "a", "k"),
    ]);
    let accepted = [record("k", 1, "a", 42, 35), record("k", 1, "a", 42, 36)];
    let report = checker::check(&events, &accepted, ALLOWED);
    assert_violations(&report, &[("acked write duplicated", 1)]);
    assert_eq!(report.accepted_but_not_acked, 0);
}

#[test]
fn a_stale_write_accepted_is_reported() {
    // a is stopped (the controller records it) with its write in flight; b takes over and
    // writes; a resumes and its old write is accepted after b's: the resource did not fence.
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &[inv(25, "a", Op::Write, "k")],
        &[crash(30, "a", "")],
        &grant(40, 50, "b", "k", 20),
        &acked(60, 70, "b", "k", 20, 2),
        &release(80, 85, "b", "k"),
        &[ok(90, "a", Op::Write, "k", Some(10), Some(1))],
    ]);
    let accepted = [record("k", 20, "b", 2, 65), record("k", 10, "a", 1, 88)];
    let report = checker::check(&events, &accepted, ALLOWED);
    assert_violations(&report, &[("stale write accepted", 1)]);
    assert!(
        report.stale_writes_accepted[0].contains("token 10"),
        "{report}"
    );
    assert!(
        report.overlaps.is_empty(),
        "the crash ended a's belief: {report}"
    );
}

#[test]
fn an_unexplained_overlap_is_reported() {
    // b is granted while a still believes it holds the key, and a's write is acked meanwhile.
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &grant(30, 40, "b", "k", 20),
        &acked(50, 60, "a", "k", 10, 1),
        &release(70, 75, "a", "k"),
        &release(80, 85, "b", "k"),
    ]);
    let accepted = [record("k", 10, "a", 1, 55)];
    let report = checker::check(&events, &accepted, ALLOWED);
    assert_violations(&report, &[("unexplained overlap", 1)]);
    let overlap = &report.overlaps[0];
    assert_eq!(
        (
            overlap.key.as_str(),
            overlap.first.as_str(),
            overlap.second.as_str()
        ),
        ("k", "a", "b")
    );
    assert_eq!((overlap.first_token, overlap.second_token), (10, 20));
    assert_eq!(
        overlap.overlap_ns, 30,
        "from b's grant (40) to a's release invoke (70)"
    );
    assert!(!overlap.explained);
    assert!(
        overlap.explanation.contains("1 acked"),
        "{}",
        overlap.explanation
    );
    assert!(
        report
            .to_string()
            .contains("overlaps: 0 explained, 1 unexplained")
    );

    // An overlap in which the earlier holder wrote nothing is unexplained too.
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &grant(30, 40, "b", "k", 20),
        &release(70, 75, "a", "k"),
        &release(80, 85, "b", "k"),
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[("unexplained overlap", 1)]);
    assert!(
        report.overlaps[0].explanation.contains("no write"),
        "{report}"
    );
}

#[test]
fn an_overlap_after_lost_fired_is_explained() {
    // a's lease is lost (lost() fires at 30) before b is granted at 40; a releases at 50.
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &[lost(30, "a", "k", 10)],
        &grant(25, 40, "b", "k", 20),
        &[inv(50, "a", Op::Release, "k")],
        &[err(
            55,
            "a",
            Op::Release,
            "k",
            Some(10),
            "LOCK_RELEASE_FAILED",
            "not_held",
        )],
        &release(60, 65, "b", "k"),
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[]);
    assert_eq!(report.overlaps.len(), 1);
    let overlap = &report.overlaps[0];
    assert!(overlap.explained);
    assert_eq!(overlap.overlap_ns, 10);
    assert!(
        overlap.explanation.contains("lost()"),
        "{}",
        overlap.explanation
    );
    assert!(
        report
            .to_string()
            .contains("overlaps: 1 explained, 0 unexplained")
    );

    // lost() that fired only after b's grant (a paused holder learning it on resume) explains
    // the overlap only if a acked no write inside it.
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &grant(25, 40, "b", "k", 20),
        &[lost(45, "a", "k", 10)],
        &release(50, 55, "a", "k"),
        &release(60, 65, "b", "k"),
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[]);
    assert!(
        report.overlaps[0].explanation.contains("after b's grant"),
        "{}",
        report.overlaps[0]
    );

    // A write acked at 44: one the resource accepted at 43, inside the overlap, is not
    // explained; one it accepted at 22, while a held the key (a was paused between the
    // acceptance and its ack), is.
    for (invoked, accepted_at, violations) in [
        (41, 43, &[("unexplained overlap", 1)][..]),
        (21, 22, &[][..]),
    ] {
        let events = history(&[
            &grant(10, 20, "a", "k", 10),
            &grant(25, 40, "b", "k", 20),
            &acked(invoked, 44, "a", "k", 10, 1),
            &[lost(45, "a", "k", 10)],
            &release(50, 55, "a", "k"),
            &release(60, 65, "b", "k"),
        ]);
        let accepted = [record("k", 10, "a", 1, accepted_at)];
        let report = checker::check(&events, &accepted, ALLOWED);
        assert_violations(&report, violations);
    }
}

#[test]
fn an_overlap_whose_writes_were_fenced_off_is_explained() {
    // a is paused (a GC pause: no controller record) past its lease; b is granted and writes;
    // a wakes up, writes with its old token and is fenced off, then learns it lost the lease.
    let events = history(&[
        &grant(10, 20, "a", "k", 10),
        &grant(30, 40, "b", "k", 20),
        &acked(45, 50, "b", "k", 20, 2),
        &fenced_off(60, 65, "a", "k", 10),
        &[lost(70, "a", "k", 10)],
        &release(80, 85, "a", "k"),
        &release(90, 95, "b", "k"),
    ]);
    let accepted = [record("k", 20, "b", 2, 48)];
    let report = checker::check(&events, &accepted, ALLOWED);
    assert_violations(&report, &[]);
    assert_eq!(report.stale_writes_rejected, 1);
    let overlap = &report.overlaps[0];
    assert!(overlap.explained);
    assert_eq!(overlap.overlap_ns, 40);
    assert!(
        overlap.explanation.contains("rejected as stale"),
        "{}",
        overlap.explanation
    );
}

#[test]
fn an_untyped_error_code_is_reported() {
    let events = history(&[
        &[inv(10, "a", Op::Acquire, "k")],
        &[err(
            20,
            "a",
            Op::Acquire,
            "k",
            None,
            "IO_ERROR",
            "broken pipe",
        )],
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[("untyped error", 1)]);
    assert!(report.untyped_errors[0].contains("IO_ERROR"), "{report}");
    assert_eq!(report.failed_acquires, 1);
    assert_eq!(report.failures_by_code["IO_ERROR"], 1);

    // A failure without a code is untyped as well.
    let events = history(&[
        &[inv(10, "a", Op::Acquire, "k")],
        &[Event {
            ok: Some(false),
            ..ev(20, "a", Op::Acquire, Phase::Complete, "k")
        }],
    ]);
    let report = checker::check(&events, &[], ALLOWED);
    assert_violations(&report, &[("untyped error", 1)]);
    assert_eq!(report.failures_by_code["<none>"], 1);
}

#[test]
fn a_crash_or_the_end_of_a_killed_process_history_ends_its_belief() {
    // a is stopped at 30 (the controller records Crash), b is granted at 50; after a resumes it
    // acks a write with its old token (b had not written yet, so the fence let it through).
    let after_resume = history(&[
        &grant(10, 20, "a", "k", 10),
        &grant(40, 50, "b", "k", 20),
        &acked(60, 65, "a", "k", 10, 1),
        &release(70, 75, "a", "k"),
        &release(80, 85, "b", "k"),
    ]);
    let accepted = [record("k", 10, "a", 1, 62)];
    let without_crash = checker::check(&after_resume, &accepted, ALLOWED);
    assert_violations(&without_crash, &[("unexplained overlap", 1)]);
    let mut with_crash = after_resume.clone();
    with_crash.push(crash(30, "a", ""));
    let report = checker::check(&with_crash, &accepted, ALLOWED);
    assert_violations(&report, &[]);
    assert!(report.overlaps.is_empty(), "{report}");

    // A crash of another key leaves this key's belief open.
    let mut other_key = after_resume.clone();
    other_key.push(crash(30, "a", "other"));
    assert_violations(
        &checker::check(&other_key, &accepted, ALLOWED),
        &[("unexplained overlap", 1)],
    );

    // Killed without a record: a's history ends with its write in flight (its line truncated
    // or never written); it believed until its last event, before b's grant.
    let truncated = history(&[
        &grant(10, 20, "a", "k", 10),
        &[inv(25, "a", Op::Write, "k")],
        &grant(40, 50, "b", "k", 20),
        &release(60, 65, "b", "k"),
    ]);
    let accepted = [record("k", 10, "a", 1, 26)];
    let report = checker::check(&truncated, &accepted, ALLOWED);
    assert_violations(&report, &[]);
    assert!(report.overlaps.is_empty(), "{report}");
    assert_eq!(report.accepted_but_not_acked, 1);
}
