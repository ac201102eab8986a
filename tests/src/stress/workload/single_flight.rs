//! The single-flight workload: every worker starts one shared single-flight action over and
//! over, waiting for the runner's outcome when another runs it.

use std::collections::HashSet;
use std::io;
use std::time::Duration;

use lock_starter::values::{Flight, WhenBusy};
use lock_testkit::history::{Event, Op, Phase};
use tokio::time::{Instant, sleep};

use super::{Context, Faults, KEY, Verdict, completions};

/// What the checker holds the history to.
pub(super) const CHECKED: &str = "no two runs at once unless the earlier runner was stopped, lost its guard (and was told) or Redis lost data; a joined caller gets the outcome of a run that happened";

/// The guard's TTL.
const TTL: Duration = Duration::from_secs(1);
/// How long a caller waits for another's run.
const WAIT: Duration = Duration::from_secs(3);

pub(super) async fn work(ctx: &Context) -> io::Result<()> {
    let values = ctx.starter.values();
    let mut seq = 0;
    while Instant::now() < ctx.stop_at {
        seq += 1;
        let run = ctx.unique(seq);
        let hold = ctx.hold(seq);
        let flight = values
            .single_flight::<i64, (), _, _>(KEY, TTL, WhenBusy::Wait(WAIT), |progress| async move {
                // A history that cannot be written fails the run at its end (the worker exits).
                let _ = ctx.invoke(Op::Run, KEY, Some(run), None);
                sleep(hold).await;
                // The run ends when its work does, before the report releases the guard: a
                // completion stamped after the report would overlap the next run by as long as
                // this process is held up in between.
                let ended = Event::new(&ctx.name, Op::Run, Phase::Complete, KEY);
                let outcome = match progress.report(&()).await {
                    Ok(true) => Ok((Some(run), None)),
                    Ok(false) => Err(("GUARD_LOST", "guard_lost")),
                    Err(ref e) => Err((e.code(), "unconfirmed")),
                };
                let _ = ctx.complete_at(ended, outcome, None);
                run
            })
            .await;
        match flight {
            Ok(Flight::Joined(run)) => {
                ctx.complete(Op::Execute, KEY, Ok((Some(run), None)), Some("joined"))?
            }
            Ok(_) => {}
            Err(_) => sleep(Duration::from_millis(50)).await,
        }
    }
    Ok(())
}

pub(super) fn check(events: &[Event], faults: &Faults) -> Verdict {
    let mut verdict = Verdict::default();
    let (done, unfinished) = completions(events, Op::Run);
    // (start, end, process, run, told it lost its guard)
    let mut runs: Vec<(u64, u64, &str, i64, bool)> = done
        .iter()
        .map(|r| {
            let lost = r.done.reason.as_deref() == Some("guard_lost");
            let run = r.value.unwrap_or_default();
            (r.invoked, r.done.t_ns, r.done.process.as_str(), run, lost)
        })
        .collect();
    for run in unfinished {
        // Killed while running: the run ended with the kill.
        let end = events
            .iter()
            .find(|e| e.op == Op::Crash && e.process == run.process && e.t_ns >= run.t_ns)
            .map_or(u64::MAX, |e| e.t_ns);
        let number = run.value.unwrap_or_default();
        runs.push((run.t_ns, end, run.process.as_str(), number, false));
    }
    runs.sort_unstable_by_key(|r| r.0);
    let mut overlaps = 0;
    for (i, later) in runs.iter().enumerate() {
        for earlier in runs[..i].iter().filter(|e| e.1 > later.0) {
            overlaps += 1;
            let what = format!(
                "run {} of {} overlapped run {} of {} by {} ms",
                earlier.3,
                earlier.2,
                later.3,
                later.2,
                (earlier.1.min(later.1) - later.0) / 1_000_000
            );
            let why = if earlier.4 {
                Some("the earlier runner was told it lost its guard")
            } else {
                faults.explain(earlier.2, earlier.0, later.0)
            };
            verdict.judge(what, why);
        }
    }
    let ran: HashSet<i64> = runs.iter().map(|r| r.3).collect();
    let joined: Vec<_> = events
        .iter()
        .filter(|e| e.op == Op::Execute && e.phase == Phase::Complete)
        .collect();
    for join in &joined {
        if let Some(run) = join.value.filter(|r| !ran.contains(r)) {
            verdict.violations.push(format!(
                "{} joined run {run}, which never ran",
                join.process
            ));
        }
    }
    verdict.operations = runs.len() as u64;
    verdict.counted = format!(
        "{} runs, {} callers joined a run, {overlaps} overlaps",
        runs.len(),
        joined.len()
    );
    verdict
}
