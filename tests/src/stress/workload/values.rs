//! The values workload: every worker counts one shared value up by compare-and-set, and every
//! few rounds waits for it to change.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use lock_starter::values::{Expiry, Waited, Written};
use lock_testkit::history::{Event, Op};
use tokio::time::{Instant, sleep};

use super::{Context, Faults, KEY, Verdict, completions};

/// What the checker holds the history to.
pub(super) const CHECKED: &str = "no compare-and-set confirmed on a stale version (no value confirmed twice, none below one confirmed before it began); no wait times out while a confirmed write happened inside it";

/// The TTL of the counter.
const TTL: Duration = Duration::from_secs(60);
/// How long a wait for a change lasts.
const WAIT: Duration = Duration::from_secs(3);
/// A write must have been confirmed this long before a wait timed out for the wait to have
/// missed it (the publication's delivery takes time).
const MARGIN: u64 = 1_000_000_000;

pub(super) async fn work(ctx: &Context) -> io::Result<()> {
    let values = ctx.starter.values();
    let mut seq = 0;
    while Instant::now() < ctx.stop_at {
        seq += 1;
        let Ok(current) = values.get::<i64>(KEY).await else {
            sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (mut since, count) = current.map_or((None, 0), |v| (Some(v.version), v.value));
        ctx.invoke(Op::Set, KEY, Some(count + 1), since)?;
        match values
            .compare_and_set(KEY, since, &(count + 1), Expiry::After(TTL))
            .await
        {
            Ok(Written::Stored { version }) => {
                since = Some(version);
                ctx.complete(Op::Set, KEY, Ok((Some(count + 1), Some(version))), None)?
            }
            Ok(Written::Refused { .. }) => {
                ctx.complete(Op::Set, KEY, Err(("REFUSED", "refused")), None)?
            }
            Err(e) => ctx.complete(Op::Set, KEY, Err((e.code(), &e.to_string())), None)?,
        }
        if seq % 4 == 0 {
            ctx.invoke(Op::Wait, KEY, None, since)?;
            match values.wait_for_change::<i64>(KEY, since, WAIT).await {
                Ok(Waited::Met(seen)) => ctx.complete(
                    Op::Wait,
                    KEY,
                    Ok((seen.as_ref().map(|v| v.value), seen.map(|v| v.version))),
                    None,
                )?,
                Ok(Waited::TimedOut(_)) => {
                    ctx.complete(Op::Wait, KEY, Err(("TIMED_OUT", "timed_out")), None)?
                }
                Err(e) => ctx.complete(Op::Wait, KEY, Err((e.code(), &e.to_string())), None)?,
            }
        }
        sleep(ctx.hold(seq)).await;
    }
    Ok(())
}

pub(super) fn check(events: &[Event], faults: &Faults) -> Verdict {
    let mut verdict = Verdict::default();
    let (sets, _) = completions(events, Op::Set);
    let confirmed: Vec<_> = sets.iter().filter(|s| s.ok()).collect();

    // The same value confirmed twice: two writes from one version.
    let mut by_value: HashMap<i64, Vec<(u64, u64, &str)>> = HashMap::new();
    for set in &confirmed {
        if let Some(value) = set.value {
            by_value.entry(value).or_default().push((
                set.invoked,
                set.done.t_ns,
                &set.done.process,
            ));
        }
    }
    // Once Redis lost the counter, it counts from 1 again: one line for all such repeats.
    let mut repeated_after_loss = 0;
    for (value, writes) in &by_value {
        for pair in writes.windows(2) {
            if faults.lost_between(pair[0].0, pair[1].1) {
                repeated_after_loss += 1;
            } else {
                verdict.violations.push(format!(
                    "{value} was confirmed to {} and to {}",
                    pair[0].2, pair[1].2
                ));
            }
        }
    }
    if repeated_after_loss > 0 {
        verdict.explained.push(format!(
            "{repeated_after_loss} values confirmed again after Redis lost the counter"
        ));
    }

    // A value at or below one confirmed before its write began: a write on a stale version.
    let mut by_end: Vec<_> = confirmed.clone();
    by_end.sort_by_key(|s| s.done.t_ns);
    let mut by_start = confirmed.clone();
    by_start.sort_by_key(|s| s.invoked);
    let mut highest: Option<(i64, u64)> = None;
    let mut next = 0;
    for set in &by_start {
        while next < by_end.len() && by_end[next].done.t_ns < set.invoked {
            let earlier = by_end[next];
            if let Some(value) = earlier.value {
                if highest.is_none_or(|(v, _)| value > v) {
                    highest = Some((value, earlier.invoked));
                }
            }
            next += 1;
        }
        if let (Some((high, since)), Some(value)) = (highest, set.value) {
            if value < high {
                let what = format!(
                    "{} wrote {value} after {high} was confirmed",
                    set.done.process
                );
                if faults.lost_between(since, set.done.t_ns) {
                    verdict.explained.push(format!("{what}: Redis lost data"));
                    // The counter starts again from here.
                    highest = Some((value, set.invoked));
                } else {
                    verdict.violations.push(what);
                }
            }
        }
    }

    // A wait that timed out although a write was confirmed inside it.
    let (waits, _) = completions(events, Op::Wait);
    let mut timed_out = 0;
    for wait in waits
        .iter()
        .filter(|w| w.done.reason.as_deref() == Some("timed_out"))
    {
        timed_out += 1;
        let missed = by_start
            .iter()
            .find(|s| s.invoked > wait.invoked && s.done.t_ns + MARGIN < wait.done.t_ns);
        if let Some(missed) = missed {
            verdict.violations.push(format!(
                "{}'s wait timed out although {} confirmed {} inside it",
                wait.done.process,
                missed.done.process,
                missed.value.unwrap_or_default()
            ));
        }
    }
    verdict.operations = sets.len() as u64;
    verdict.counted = format!(
        "{} compare-and-sets: {} confirmed; {} waits: {} met, {timed_out} timed out",
        sets.len(),
        confirmed.len(),
        waits.len(),
        waits.iter().filter(|w| w.ok()).count()
    );
    verdict
}
