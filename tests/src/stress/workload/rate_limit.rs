//! The rate-limit workload: every worker asks one shared limit, failing closed, every few
//! milliseconds; the checker bounds the admissions of every window.

use std::io;
use std::time::Duration;

use lock_starter::rate_limit::{Basis, FailurePolicy};
use lock_testkit::history::{Event, Op};
use tokio::time::{Instant, sleep};

use super::{Context, Faults, KEY, RATE_LIMIT, Verdict, completions};

/// What the checker holds the history to.
pub(super) const CHECKED: &str = "in every window, at most burst + rate × its length admitted, across all workers (a window that spans a data loss is reported, not failed)";

/// The longest window the checker looks at, in ns: the excess of a window over its bound is
/// largest in short ones, and looking at every window would cost the square of the history.
const LONGEST_WINDOW: u64 = 5_000_000_000;

/// Admissions a window may pass its bound by: Redis decides on its wall clock, the history
/// is timed on the host's monotonic clock, and NTP may slew one against the other (500 ppm of
/// a 5 s window at 100/s is a quarter of an admission).
const SLEW: f64 = 0.5;

/// The pause between two decisions of one worker.
const PACE: Duration = Duration::from_millis(4);

pub(super) async fn work(ctx: &Context) -> io::Result<()> {
    let limiter = match ctx
        .starter
        .rate_limiter(RATE_LIMIT.0, FailurePolicy::FailClosed)
    {
        Ok(limiter) => limiter,
        Err(e) => return Err(io::Error::other(e.to_string())),
    };
    while Instant::now() < ctx.stop_at {
        ctx.invoke(Op::Admit, KEY, None, None)?;
        match limiter.try_acquire(KEY, 1).await {
            Ok(decision) if decision.allowed && decision.basis == Basis::Counted => {
                ctx.complete(Op::Admit, KEY, Ok((None, None)), None)?
            }
            Ok(decision) if decision.allowed => {
                // Only a fail-open or disabled limiter admits uncounted: neither is configured.
                let basis = format!("{:?}", decision.basis);
                ctx.complete(Op::Admit, KEY, Ok((None, None)), Some(&basis))?
            }
            Ok(decision) => {
                let basis = format!("{:?}", decision.basis);
                ctx.complete(Op::Admit, KEY, Err(("DENIED", &basis)), None)?
            }
            Err(e) => ctx.complete(Op::Admit, KEY, Err((e.code(), &e.to_string())), None)?,
        }
        sleep(PACE).await;
    }
    Ok(())
}

pub(super) fn check(events: &[Event], faults: &Faults) -> Verdict {
    let (_, rate, burst) = RATE_LIMIT;
    let per_second: f64 = rate
        .strip_suffix("/1s")
        .and_then(|n| n.parse().ok())
        .expect("the workload's rate is <count>/1s");
    check_bound(events, faults, per_second, f64::from(burst))
}

/// Every window from an admission's invoke to another's completion holds every admission
/// invoked and completed inside it; their count may not pass `burst + rate × length`.
pub(super) fn check_bound(
    events: &[Event],
    faults: &Faults,
    per_second: f64,
    burst: f64,
) -> Verdict {
    let mut verdict = Verdict::default();
    let (calls, _) = completions(events, Op::Admit);
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    let mut denied = 0;
    for call in &calls {
        if call.ok() {
            if let Some(basis) = &call.done.reason {
                verdict.violations.push(format!(
                    "{} was admitted uncounted ({basis}) by a fail-closed limiter",
                    call.done.process
                ));
            }
            admitted.push((call.invoked, call.done.t_ns));
        } else {
            denied += 1;
        }
    }
    admitted.sort_unstable();
    // The worst window: the most admissions above the bound, and where it was.
    let mut worst = (f64::MIN, 0usize, 0u64);
    let mut worst_explained = (f64::MIN, 0usize, 0u64);
    // Completions of the admissions invoked at or after the window's start, ascending.
    let mut ends: Vec<u64> = Vec::with_capacity(admitted.len());
    for &(start, end) in admitted.iter().rev() {
        let at = ends.partition_point(|&e| e < end);
        ends.insert(at, end);
        let loss = faults.next_loss_after(start);
        for (k, &last) in ends.iter().enumerate() {
            if last - start > LONGEST_WINDOW {
                // A longer window only adds rate × time to its bound.
                break;
            }
            let count = k + 1;
            let seconds = (last - start) as f64 / 1e9;
            let excess = count as f64 - (burst + per_second * seconds);
            let spans_loss = loss.is_some_and(|from| from < last);
            let slot = if spans_loss {
                &mut worst_explained
            } else {
                &mut worst
            };
            if excess > slot.0 {
                *slot = (excess, count, last - start);
            }
        }
    }
    let describe = |(_, count, span): (f64, usize, u64)| {
        let ms = span / 1_000_000;
        let bound = burst + per_second * span as f64 / 1e9;
        format!("{count} admitted in {ms} ms, bound {bound:.1}")
    };
    if worst.0 > SLEW {
        verdict.violations.push(describe(worst));
    }
    if worst_explained.0 > SLEW {
        verdict.explained.push(format!(
            "{} across a data loss (the limit's state was lost)",
            describe(worst_explained)
        ));
    }
    verdict.operations = calls.len() as u64;
    verdict.counted = format!(
        "{} decisions: {} admitted, {denied} denied; fullest window {}",
        calls.len(),
        admitted.len(),
        if admitted.is_empty() {
            "none".to_owned()
        } else {
            describe(worst)
        }
    );
    verdict
}
