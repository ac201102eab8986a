//! Each checker fed the violation it exists to catch, and the same history with a fault that
//! explains it.

use lock_testkit::history::{Event, Op, Phase};

use super::faults::{Faults, REDIS};
use super::{Workload, check, rate_limit};

const MS: u64 = 1_000_000;

/// An event of `process` at `ms`.
fn at(ms: u64, process: &str, op: Op, phase: Phase, key: &str) -> Event {
    Event {
        t_ns: ms * MS,
        ..Event::new(process, op, phase, key)
    }
}

fn invoke(ms: u64, process: &str, op: Op, value: Option<i64>) -> Event {
    Event {
        value,
        ..at(ms, process, op, Phase::Invoke, "k")
    }
}

fn ok(ms: u64, process: &str, op: Op, value: Option<i64>, reason: Option<&str>) -> Event {
    Event {
        ok: Some(true),
        value,
        reason: reason.map(str::to_owned),
        ..at(ms, process, op, Phase::Complete, "k")
    }
}

fn failed(ms: u64, process: &str, op: Op, reason: &str) -> Event {
    Event {
        ok: Some(false),
        code: Some("E".into()),
        reason: Some(reason.into()),
        ..at(ms, process, op, Phase::Complete, "k")
    }
}

/// Redis lost data between `from` and `to` ms.
fn loss(from: u64, to: u64) -> Event {
    Event {
        value: Some((from * MS) as i64),
        ..at(to, REDIS, Op::Crash, Phase::Complete, "")
    }
}

fn crash(ms: u64, process: &str) -> Event {
    at(ms, process, Op::Crash, Phase::Complete, "")
}

fn with(mut history: Vec<Event>, fault: Event) -> Vec<Event> {
    history.push(fault);
    history.sort_by_key(|e| e.t_ns);
    history
}

fn assert_caught(workload: Workload, history: &[Event], expected: &str) {
    let verdict = check(workload, history);
    assert!(
        verdict.violations.iter().any(|v| v.contains(expected)),
        "{workload}: expected a violation containing {expected:?}, got {verdict:#?}"
    );
}

fn assert_explained(workload: Workload, history: &[Event]) {
    let verdict = check(workload, history);
    assert!(
        verdict.violations.is_empty() && !verdict.explained.is_empty(),
        "{workload}: expected only explained departures, got {verdict:#?}"
    );
}

fn deliver(ms: u64, process: &str, item: i64) -> Event {
    Event {
        ok: Some(true),
        value: Some(item),
        ..at(ms, process, Op::Deliver, Phase::Complete, "k")
    }
}

#[test]
fn the_queue_checker_catches_a_confirmed_push_never_delivered() {
    let history = vec![
        invoke(0, "a", Op::Push, Some(1)),
        ok(1, "a", Op::Push, Some(1), None),
        invoke(2, "a", Op::Push, Some(2)),
        ok(3, "a", Op::Push, Some(2), None),
        deliver(4, "b", 1),
    ];
    assert_caught(Workload::Queue, &history, "item 2");
    assert_explained(Workload::Queue, &with(history, loss(3, 10)));
}

#[test]
fn the_queue_checker_catches_an_acknowledged_item_delivered_again() {
    let history = vec![
        invoke(0, "a", Op::Push, Some(1)),
        ok(1, "a", Op::Push, Some(1), None),
        deliver(2, "b", 1),
        invoke(3, "b", Op::Ack, Some(1)),
        ok(4, "b", Op::Ack, Some(1), None),
        deliver(10, "c", 1),
    ];
    assert_caught(Workload::Queue, &history, "after the first acknowledged it");
    assert_explained(Workload::Queue, &with(history, crash(3, "b")));
}

#[test]
fn the_queue_checker_catches_an_item_never_pushed() {
    let history = vec![deliver(2, "b", 7)];
    assert_caught(Workload::Queue, &history, "never pushed");
}

#[test]
fn the_queue_checker_explains_a_redelivery_after_a_failed_acknowledgement() {
    let history = vec![
        invoke(0, "a", Op::Push, Some(1)),
        ok(1, "a", Op::Push, Some(1), None),
        deliver(2, "b", 1),
        invoke(3, "b", Op::Ack, Some(1)),
        failed(4, "b", Op::Ack, "timeout"),
        deliver(1500, "c", 1),
    ];
    assert_explained(Workload::Queue, &history);
}

fn admitted(ms: u64, process: &str) -> [Event; 2] {
    [
        invoke(ms, process, Op::Admit, None),
        ok(ms + 1, process, Op::Admit, None, None),
    ]
}

#[test]
fn the_rate_limit_checker_catches_a_window_above_its_bound() {
    // 100/s, burst 10: 12 admitted within 10 ms.
    let history: Vec<Event> = (0..12)
        .flat_map(|i| admitted(i, if i % 2 == 0 { "a" } else { "b" }))
        .collect();
    let verdict = rate_limit::check_bound(&history, &Faults::new(&history), 100.0, 10.0);
    assert!(
        verdict.violations.iter().any(|v| v.contains("12 admitted")),
        "{verdict:#?}"
    );
    let history = with(history, loss(5, 6));
    let verdict = rate_limit::check_bound(&history, &Faults::new(&history), 100.0, 10.0);
    assert!(
        verdict.violations.is_empty() && !verdict.explained.is_empty(),
        "{verdict:#?}"
    );
}

#[test]
fn the_rate_limit_checker_passes_the_burst_then_the_rate() {
    // 10 at once, then one every 10 ms: exactly the bound of every window.
    let mut history: Vec<Event> = (0..10).flat_map(|_| admitted(0, "a")).collect();
    history.extend((1..50).flat_map(|i| admitted(i * 10, "b")));
    history.sort_by_key(|e| e.t_ns);
    let verdict = rate_limit::check_bound(&history, &Faults::new(&history), 100.0, 10.0);
    assert!(verdict.violations.is_empty(), "{verdict:#?}");
}

#[test]
fn the_rate_limit_checker_catches_an_uncounted_admission() {
    let history = vec![
        invoke(0, "a", Op::Admit, None),
        ok(1, "a", Op::Admit, None, Some("FailedOpen")),
    ];
    assert_caught(Workload::RateLimit, &history, "uncounted");
}

fn set(from: u64, to: u64, process: &str, value: i64) -> [Event; 2] {
    [
        invoke(from, process, Op::Set, Some(value)),
        ok(to, process, Op::Set, Some(value), None),
    ]
}

#[test]
fn the_values_checker_catches_one_value_confirmed_twice() {
    let history: Vec<Event> = [set(0, 2, "a", 1), set(1, 3, "b", 1)].concat();
    assert_caught(Workload::Values, &history, "1 was confirmed to a and to b");
    assert_explained(Workload::Values, &with(history, loss(1, 2)));
}

#[test]
fn the_values_checker_catches_a_write_below_a_confirmed_one() {
    let history: Vec<Event> = [set(0, 1, "a", 1), set(2, 3, "a", 2), set(4, 5, "b", 2)]
        .concat()
        .into_iter()
        .chain([
            invoke(6, "c", Op::Set, Some(1)),
            ok(7, "c", Op::Set, Some(1), None),
        ])
        .collect();
    assert_caught(
        Workload::Values,
        &history,
        "c wrote 1 after 2 was confirmed",
    );
}

#[test]
fn the_values_checker_catches_a_wait_that_missed_a_write() {
    let history: Vec<Event> = [
        invoke(0, "w", Op::Wait, None),
        invoke(10, "a", Op::Set, Some(1)),
        ok(11, "a", Op::Set, Some(1), None),
        failed(3000, "w", Op::Wait, "timed_out"),
    ]
    .into();
    assert_caught(Workload::Values, &history, "w's wait timed out");
}

fn run(from: u64, to: u64, process: &str, number: i64) -> [Event; 2] {
    [
        invoke(from, process, Op::Run, Some(number)),
        ok(to, process, Op::Run, Some(number), None),
    ]
}

#[test]
fn the_single_flight_checker_catches_two_runs_at_once() {
    let history: Vec<Event> = [run(0, 100, "a", 1), run(50, 150, "b", 2)].concat();
    assert_caught(Workload::SingleFlight, &history, "overlapped");
    assert_explained(
        Workload::SingleFlight,
        &with(history.clone(), crash(20, "a")),
    );
    let told = vec![
        invoke(0, "a", Op::Run, Some(1)),
        failed(100, "a", Op::Run, "guard_lost"),
        invoke(50, "b", Op::Run, Some(2)),
        ok(150, "b", Op::Run, Some(2), None),
    ];
    let mut told = told;
    told.sort_by_key(|e| e.t_ns);
    assert_explained(Workload::SingleFlight, &told);
}

#[test]
fn the_single_flight_checker_catches_a_join_of_a_run_that_never_happened() {
    let history: Vec<Event> = run(0, 10, "a", 1)
        .into_iter()
        .chain([ok(20, "b", Op::Execute, Some(9), Some("joined"))])
        .collect();
    assert_caught(Workload::SingleFlight, &history, "never ran");
}

fn call(from: u64, to: u64, process: &str, result: i64, how: &str) -> [Event; 2] {
    [
        invoke(from, process, Op::Execute, None),
        ok(to, process, Op::Execute, Some(result), Some(how)),
    ]
}

#[test]
fn the_idempotency_checker_catches_a_second_run_after_a_stored_result() {
    let history: Vec<Event> = [
        call(0, 20, "a", 1, "executed").to_vec(),
        run(1, 10, "a", 1).to_vec(),
        call(30, 50, "b", 2, "executed").to_vec(),
        run(31, 40, "b", 2).to_vec(),
    ]
    .concat();
    let mut history = history;
    history.sort_by_key(|e| e.t_ns);
    assert_caught(Workload::Idempotency, &history, "ran in a and again in b");
    assert_caught(Workload::Idempotency, &history, "2 different results");
    assert_explained(Workload::Idempotency, &with(history, loss(20, 30)));
}

#[test]
fn the_idempotency_checker_catches_a_replay_of_a_zombies_result() {
    let mut history: Vec<Event> = [
        call(0, 20, "a", 1, "unstored").to_vec(),
        run(1, 10, "a", 1).to_vec(),
        call(30, 50, "b", 1, "replayed").to_vec(),
    ]
    .concat();
    history.sort_by_key(|e| e.t_ns);
    assert_caught(Workload::Idempotency, &history, "told it was not stored");
}

#[test]
fn the_idempotency_checker_explains_a_run_after_an_unstored_one() {
    let mut history: Vec<Event> = [
        call(0, 20, "a", 1, "unstored").to_vec(),
        run(1, 10, "a", 1).to_vec(),
        call(30, 50, "b", 2, "executed").to_vec(),
        run(31, 40, "b", 2).to_vec(),
    ]
    .concat();
    history.sort_by_key(|e| e.t_ns);
    assert_explained(Workload::Idempotency, &history);
}

fn keyed(mut event: Event, key: &str) -> Event {
    event.key = key.into();
    event
}

fn put(from: u64, to: u64, process: &str, key: &str, version: Option<i64>) -> [Event; 2] {
    [
        keyed(invoke(from, process, Op::Set, version), key),
        keyed(ok(to, process, Op::Set, version, None), key),
    ]
}

fn read(from: u64, to: u64, process: &str, key: &str, version: i64) -> [Event; 2] {
    [
        keyed(invoke(from, process, Op::Get, None), key),
        keyed(ok(to, process, Op::Get, Some(version), None), key),
    ]
}

#[test]
fn the_cache_checker_catches_a_value_of_another_key() {
    let history: Vec<Event> = [put(0, 1, "a", "c2", Some(12)), read(2, 3, "b", "c1", 12)].concat();
    assert_caught(Workload::Cache, &history, "another key");
}

#[test]
fn the_cache_checker_catches_an_entry_past_its_ttl() {
    let history: Vec<Event> = [
        put(0, 1, "a", "c1", Some(11)),
        read(500, 501, "b", "c1", 11),
    ]
    .concat();
    assert_caught(Workload::Cache, &history, "past its TTL");
}

#[test]
fn the_cache_checker_catches_a_value_served_after_its_invalidation_arrived() {
    let history: Vec<Event> = [
        put(0, 1, "a", "c1", Some(11)),
        put(2, 3, "a", "c1", None),
        read(300, 301, "b", "c1", 11),
    ]
    .concat();
    assert_caught(Workload::Cache, &history, "a's invalidation returned");
    assert_explained(Workload::Cache, &with(history.clone(), crash(100, "b")));
    // Within the push bound, the old value may still be served.
    let soon: Vec<Event> = [
        put(0, 1, "a", "c1", Some(11)),
        put(2, 3, "a", "c1", Some(21)),
        read(100, 101, "b", "c1", 11),
    ]
    .concat();
    assert!(check(Workload::Cache, &soon).violations.is_empty());
}

/// A master invocation 7 of three branches, its block ending at 10 ms, returning `how` at
/// `returned` ms; branch `b<i>` released from `releases[i]` ms (1 ms each), if given.
fn master(returned: u64, how: &str, releases: [Option<u64>; 3]) -> Vec<Event> {
    let mut history = vec![
        invoke(0, "m", Op::Execute, None),
        Event {
            token: Some(7),
            ..ok(10, "m", Op::Run, None, None)
        },
        Event {
            token: Some(7),
            ..ok(returned, "m", Op::Execute, None, Some(how))
        },
    ];
    for (i, release) in releases.iter().enumerate() {
        let branch = format!("7/b{i}");
        history.push(keyed(ok(5, "m", Op::Push, None, None), &branch));
        if let Some(at) = release {
            history.push(keyed(invoke(*at, "m", Op::Ack, None), &branch));
            history.push(keyed(
                ok(at + 1, "m", Op::Ack, None, Some("released")),
                &branch,
            ));
        }
    }
    history.sort_by_key(|e| e.t_ns);
    history
}

#[test]
fn the_branches_checker_passes_a_master_that_waited_and_named_the_missing() {
    let history = master(320, "timed_out:b2", [Some(2), Some(100), Some(400)]);
    let verdict = check(Workload::Branches, &history);
    assert!(verdict.violations.is_empty(), "{verdict:#?}");
}

#[test]
fn the_branches_checker_catches_a_master_that_answered_all_released_early() {
    let history = master(50, "all_released:", [Some(2), Some(20), Some(400)]);
    assert_caught(Workload::Branches, &history, "did not name 7/b2 missing");
}

#[test]
fn the_branches_checker_catches_a_master_that_timed_out_before_its_wait() {
    let history = master(100, "timed_out:b2", [Some(2), Some(20), None]);
    assert_caught(Workload::Branches, &history, "before its branch wait");
}

#[test]
fn the_branches_checker_catches_a_branch_named_missing_though_released() {
    let history = master(320, "timed_out:b0,b2", [Some(2), Some(20), None]);
    assert_caught(Workload::Branches, &history, "named 7/b0 missing");
}
