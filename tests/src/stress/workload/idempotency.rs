//! The idempotency workload: a new idempotency key every 230 ms, and every worker calls it once,
//! so that its duplicates run at once.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::time::Duration;

use lock_starter::idempotency::{IdempotencyError, IdempotencyOptions, Idempotent, Unstored};
use lock_testkit::history::{Event, Op, Phase, monotonic_ns};
use tokio::time::{Instant, sleep};

use super::{Call, Context, Faults, Verdict, completions};

/// What the checker holds the history to.
pub(super) const CHECKED: &str = "an action runs once per key unless its earlier run was killed or stopped, was not stored (and its caller was told), or Redis lost data; every caller that gets a result gets the stored one, never a zombie's";

/// The outcome of a call whose result may or may not have been stored.
const UNCONFIRMED: &str = "unconfirmed";
/// How long each key is the current one, in ns: out of step with the faults (every 600 ms
/// in the short form), so that kills land at every point of a key's life.
const SLOT: u64 = 230_000_000;
/// How long a duplicate waits for the running caller.
const WAIT: Duration = Duration::from_secs(3);

pub(super) async fn work(ctx: &Context) -> io::Result<()> {
    let idempotency = ctx.starter.idempotency();
    let options = IdempotencyOptions::new()
        .wait_time(WAIT)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut seq = 0;
    let mut last = 0;
    while Instant::now() < ctx.stop_at {
        let slot = monotonic_ns() / SLOT;
        if slot == last {
            sleep(Duration::from_nanos(SLOT - monotonic_ns() % SLOT) + ctx.hold(seq) / 4).await;
            continue;
        }
        last = slot;
        seq += 1;
        let key = format!("stress-{slot}");
        let run = ctx.unique(seq);
        // Long enough that a kill often lands while a run is on.
        let hold = ctx.hold(seq) * 5;
        ctx.invoke(Op::Execute, &key, None, None)?;
        let result = idempotency
            .execute(&key, &options, || async {
                ctx.invoke(Op::Run, &key, Some(run), None)?;
                sleep(hold).await;
                ctx.complete(Op::Run, &key, Ok((Some(run), None)), None)?;
                Ok::<_, Failure>(run)
            })
            .await;
        let outcome = match &result {
            Ok(Idempotent::Executed(v)) => Ok((Some(*v), "executed")),
            Ok(Idempotent::Replayed(v)) => Ok((Some(*v), "replayed")),
            Ok(Idempotent::Unstored(v, Unstored::Unconfirmed)) => Ok((Some(*v), UNCONFIRMED)),
            Ok(Idempotent::Unstored(v, _)) => Ok((Some(*v), "unstored")),
            Err(Failure::Idempotency(e)) => Err((e.code(), e.to_string())),
            Err(Failure::History(e)) => return Err(io::Error::new(e.kind(), e.to_string())),
        };
        match outcome {
            Ok((value, how)) => ctx.complete(Op::Execute, &key, Ok((value, None)), Some(how))?,
            Err((code, why)) => ctx.complete(Op::Execute, &key, Err((code, &why)), None)?,
        }
    }
    Ok(())
}

/// Why an idempotent call of the workload failed.
#[derive(Debug)]
enum Failure {
    Idempotency(IdempotencyError),
    History(io::Error),
}

impl From<IdempotencyError> for Failure {
    fn from(error: IdempotencyError) -> Self {
        Failure::Idempotency(error)
    }
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Self {
        Failure::History(error)
    }
}

pub(super) fn check(events: &[Event], faults: &Faults) -> Verdict {
    let mut verdict = Verdict::default();
    // key → its runs (start, process, run number), in start order
    let mut runs: BTreeMap<&str, Vec<(u64, &str, i64)>> = BTreeMap::new();
    for run in events
        .iter()
        .filter(|e| e.op == Op::Run && e.phase == Phase::Invoke)
    {
        runs.entry(&run.key).or_default().push((
            run.t_ns,
            &run.process,
            run.value.unwrap_or_default(),
        ));
    }
    let (calls, _) = completions(events, Op::Execute);
    // (key, process) → the outcome of that process's call
    let outcome: HashMap<(&str, &str), &Call<'_>> = calls
        .iter()
        .map(|c| ((c.done.key.as_str(), c.done.process.as_str()), c))
        .collect();
    let how = |key: &str, process: &str| {
        outcome
            .get(&(key, process))
            .map(|c| c.done.reason.as_deref().unwrap_or("failed"))
    };
    // Its caller was told the result was stored.
    let stored = |key: &str, process: &str| how(key, process) == Some("executed");
    // The result may have been stored: told so, not told either way, or killed first.
    let maybe_stored = |key: &str, process: &str| {
        matches!(how(key, process), None | Some("executed" | UNCONFIRMED))
    };
    let mut reruns = 0;
    for (key, list) in &runs {
        for (i, later) in list.iter().enumerate().skip(1) {
            reruns += 1;
            for earlier in &list[..i] {
                let what = format!("{key} ran in {} and again in {}", earlier.1, later.1);
                let why = if stored(key, earlier.1) {
                    faults.explain(earlier.1, earlier.0, later.0)
                } else {
                    Some("its earlier caller was not told its result was stored")
                };
                verdict.judge(what, why);
            }
        }
    }
    // Every result a caller got must be the one stored: the same for every caller of a key,
    // and from a run whose caller was told it was stored.
    let mut results: BTreeMap<&str, BTreeMap<i64, Vec<&str>>> = BTreeMap::new();
    for call in calls.iter().filter(|c| c.ok()) {
        let how = call.done.reason.as_deref();
        if matches!(how, Some("executed" | "replayed")) {
            if let Some(value) = call.value {
                results
                    .entry(&call.done.key)
                    .or_default()
                    .entry(value)
                    .or_default()
                    .push(&call.done.process);
            }
        }
    }
    let run_of: HashMap<i64, (&str, &str)> = runs
        .iter()
        .flat_map(|(key, list)| list.iter().map(move |r| (r.2, (*key, r.1))))
        .collect();
    for (key, by_value) in &results {
        for value in by_value.keys() {
            match run_of.get(value) {
                Some((_, process)) if maybe_stored(key, process) => {}
                Some((_, process)) => verdict.violations.push(format!(
                    "{key}: callers got run {value} of {process}, whose caller was told it was not stored"
                )),
                None => verdict
                    .violations
                    .push(format!("{key}: callers got {value}, which never ran")),
            }
        }
        if by_value.len() > 1 {
            let first = runs.get(key).and_then(|l| l.first()).map_or(0, |r| r.0);
            let what = format!("{key}: callers got {} different results", by_value.len());
            let why = faults
                .lost_between(first, u64::MAX)
                .then_some("Redis lost data");
            verdict.judge(what, why);
        }
    }
    let count = |how: &str| {
        calls
            .iter()
            .filter(|c| c.done.reason.as_deref() == Some(how))
            .count()
    };
    verdict.operations = calls.len() as u64;
    verdict.counted = format!(
        "{} keys, {} calls: {} executed, {} replayed, {} unstored, {} unconfirmed, {} failed; {reruns} runs after a key's first",
        runs.len(),
        calls.len(),
        count("executed"),
        count("replayed"),
        count("unstored"),
        count(UNCONFIRMED),
        calls.iter().filter(|c| !c.ok()).count()
    );
    verdict
}
