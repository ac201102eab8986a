//! The master/sub locks workload: every worker runs master invocations of one key, each
//! registering three branches that tasks of the worker release after a random delay, about half
//! of them after the master's branch wait.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use lock_starter::branches::MasterOptions;
use lock_starter::lock::Lease;
use lock_testkit::history::{Event, Op, Phase};
use tokio::time::{Instant, sleep};

use super::{Context, Faults, KEY, Verdict, completions};

/// What the checker holds the history to.
pub(super) const CHECKED: &str = "a master answers all released only once every registered branch's release began; one that timed out waited its branch wait, and named as missing every branch whose release had not begun when it returned, and none released before its wait began";

/// The branches of each invocation.
const BRANCHES: u64 = 3;
/// How long a master waits for its branches after its block returned.
const BRANCH_WAIT: Duration = Duration::from_millis(300);

pub(super) async fn work(ctx: &Context) -> io::Result<()> {
    let masters = ctx.starter.master_locks();
    let options = MasterOptions::new(Lease::Watchdog)
        .wait_time(Duration::from_secs(2))
        .and_then(|o| o.branch_wait(BRANCH_WAIT))
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut seq = 0;
    while Instant::now() < ctx.stop_at {
        seq += 1;
        ctx.invoke(Op::Execute, KEY, None, None)?;
        let outcome = masters
            .with_master_lock(KEY, options, |master| async move {
                let invocation = master.invocation();
                ctx.invoke(Op::Run, KEY, None, Some(invocation))?;
                for i in 0..BRANCHES {
                    let branch = format!("{invocation}/b{i}");
                    let token = match master.register_branch(&format!("b{i}")).await {
                        Ok(token) if token.is_registered() => token,
                        _ => continue,
                    };
                    ctx.complete(Op::Push, &branch, Ok((None, Some(invocation))), None)?;
                    // From no delay to twice the branch wait.
                    let delay = (BRANCH_WAIT * 2).mul_f64(ctx.fraction(seq * BRANCHES + i));
                    let (recorder, masters) = (Arc::clone(&ctx.recorder), masters.clone());
                    tokio::spawn(async move {
                        sleep(delay).await;
                        let _ = recorder.invoke(Op::Ack, &branch);
                        let done =
                            Event::new(recorder.process(), Op::Ack, Phase::Complete, &branch);
                        let _ = recorder.record(match masters.release_branch(&token).await {
                            Ok(release) => Event {
                                ok: Some(true),
                                reason: Some(release.as_str().to_owned()),
                                ..done
                            },
                            Err(e) => Event {
                                ok: Some(false),
                                code: Some(e.code().to_owned()),
                                ..done
                            },
                        });
                    });
                }
                ctx.complete(Op::Run, KEY, Ok((None, Some(invocation))), None)
            })
            .await;
        match outcome {
            Ok(outcome) => {
                let missing = outcome.branches.missing().join(",");
                let how = format!("{}:{missing}", outcome.branches.as_str());
                ctx.complete(
                    Op::Execute,
                    KEY,
                    Ok((None, Some(outcome.invocation))),
                    Some(&how),
                )?;
                outcome.value?;
            }
            Err(e) => {
                ctx.complete(Op::Execute, KEY, Err((e.code(), &e.to_string())), None)?;
                // Redis is down or refusing: do not spin.
                sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Ok(())
}

pub(super) fn check(events: &[Event], faults: &Faults) -> Verdict {
    let mut verdict = Verdict::default();
    // invocation → when its block ended
    let block_end: HashMap<u64, u64> = events
        .iter()
        .filter(|e| e.op == Op::Run && e.phase == Phase::Complete)
        .filter_map(|e| Some((e.token?, e.t_ns)))
        .collect();
    // "<invocation>/<branch>" registered
    let registered: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.op == Op::Push && e.ok == Some(true))
        .map(|e| e.key.as_str())
        .collect();
    // "<invocation>/<branch>" → (release invoked, completed with "released")
    let mut releases: HashMap<&str, (u64, Option<u64>)> = HashMap::new();
    for release in completions(events, Op::Ack).0 {
        let done =
            (release.done.reason.as_deref() == Some("released")).then_some(release.done.t_ns);
        releases.insert(&release.done.key, (release.invoked, done));
    }
    let (masters, _) = completions(events, Op::Execute);
    let mut outcomes: HashMap<&str, u64> = HashMap::new();
    for master in masters.iter().filter(|m| m.ok()) {
        let (Some(invocation), Some(how)) = (master.done.token, master.done.reason.as_deref())
        else {
            continue;
        };
        let (kind, missing) = how.split_once(':').unwrap_or((how, ""));
        *outcomes.entry(kind).or_default() += 1;
        let returned = master.done.t_ns;
        let Some(&ended) = block_end.get(&invocation) else {
            verdict.violations.push(format!(
                "invocation {invocation} returned without its block ending"
            ));
            continue;
        };
        let missing: BTreeSet<String> = missing
            .split(',')
            .filter(|b| !b.is_empty())
            .map(|b| format!("{invocation}/{b}"))
            .collect();
        let prefix = format!("{invocation}/");
        let mine: Vec<&str> = registered
            .iter()
            .filter(|b| b.starts_with(&prefix))
            .copied()
            .collect();
        let what = |detail: String| format!("invocation {invocation} ({kind}): {detail}");
        match kind {
            "all_released" | "timed_out" => {
                for branch in &mine {
                    let release = releases.get(branch);
                    let began = release.map_or(u64::MAX, |r| r.0);
                    if missing.contains(*branch) {
                        if release.and_then(|r| r.1).is_some_and(|done| done < ended) {
                            verdict.violations.push(what(format!(
                                "named {branch} missing, released before its wait began"
                            )));
                        }
                    } else if began > returned {
                        verdict.violations.push(what(format!(
                            "did not name {branch} missing, whose release began only after it returned"
                        )));
                    }
                }
                if kind == "timed_out" && returned - ended < BRANCH_WAIT.as_nanos() as u64 {
                    verdict.violations.push(what(format!(
                        "timed out {} ms after its block ended, before its branch wait",
                        (returned - ended) / 1_000_000
                    )));
                }
            }
            _ => {
                let why = if faults.lost_between(ended, returned) {
                    "Redis lost data"
                } else if faults.crashed_between(&master.done.process, ended, returned) {
                    "the master was stopped"
                } else {
                    "Redis failed"
                };
                verdict
                    .explained
                    .push(what(format!("missing {missing:?}: {why}")));
            }
        }
    }
    verdict.operations = masters.len() as u64;
    let mut kinds: Vec<(&str, u64)> = outcomes.into_iter().collect();
    kinds.sort_unstable();
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    verdict.counted = format!(
        "{} masters ({}), {} branches registered, {} released in time or late",
        masters.len(),
        kinds.join(", "),
        registered.len(),
        releases.values().filter(|r| r.1.is_some()).count()
    );
    verdict
}
