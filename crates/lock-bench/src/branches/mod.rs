//! Master/sub locks ("branches"): `MasterLocks` over a `RedisLock` and `RedisBranches` on its
//! connections (as lock-starter re-exports them), in the JSON fields of the idempotency lines
//! (`calls`, `calls_per_s`, `call_us`, `redis_cmds_per_call`, …) so bench-table renders them in
//! the same table. `raw` (the submodule) measures the plain Redis commands one branch stands on.
//!
//! - `branches-register-release`: 1 worker; master invocations of one key, each registering
//!   [`BRANCHES_PER_MASTER`] branches and releasing each right after its registration, inside the
//!   block. A call is one register + release pair; `register_us` and `release_us` time each half.
//!   Commands and script calls per call include the master's own (acquire, open, seal, wait,
//!   delete, release) spread over its pairs.
//! - `branches-master`: 1 worker; a whole master invocation per call: acquire, open the record,
//!   register one branch, release it (the same process, before the block returns), seal, wait
//!   (finds nothing pending), delete the record, release the lock.
//!
//! Every invocation uses `Lease::Watchdog` and the default branch wait (30 s). A call whose
//! registration fails open, whose release does not answer `released`, or whose master does not
//! end complete, counts as an error.

pub(crate) mod raw;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::branches::BranchRelease;
use lock_starter::branches::{BranchError, Master, MasterLocks};
use lock_starter::lock::Lease;
use lock_starter::redis::{RedisBranches, RedisLock};
use serde_json::{Map, Value, json};

use crate::redis::Target;
use crate::report::{Calls, Meter, ToolkitLine, micros, percentiles, run_prefix};

/// Branches one `branches-register-release` master registers and releases: 100.
pub(crate) const BRANCHES_PER_MASTER: usize = 100;

/// One of the master/sub-lock scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    RegisterRelease,
    Master,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 2] = [Scenario::RegisterRelease, Scenario::Master];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::RegisterRelease => "branches-register-release",
            Scenario::Master => "branches-master",
        }
    }
}

/// What the calls of a run counted.
#[derive(Debug, Default)]
struct Counts {
    /// The calls; a result is one that did what it should (registered and released; a
    /// complete master).
    calls: Calls,
    register_us: Vec<f64>,
    release_us: Vec<f64>,
    /// Master invocations run.
    masters: u64,
}

impl Counts {
    /// One register + release pair: whether both did what they should.
    fn pair(&mut self, ok: Result<(), String>, register: Duration, release: Duration) {
        self.register_us.push(micros(register));
        self.release_us.push(micros(release));
        self.calls.record(register + release, ok);
    }

    fn merge(&mut self, other: Counts) {
        self.calls.merge(other.calls);
        self.register_us.extend(other.register_us);
        self.release_us.extend(other.release_us);
        self.masters += other.masters;
    }
}

/// Registers `branch` in `master` and releases it through `masters`: `Ok` when the token is
/// registered and the release answers `released`; the two halves' times.
async fn register_and_release(
    masters: &MasterLocks,
    master: &Master,
    branch: &str,
) -> (Result<(), String>, Duration, Duration) {
    let t = Instant::now();
    let token = master.register_branch(branch).await;
    let register = t.elapsed();
    let token = match token {
        Ok(token) if token.is_registered() => token,
        Ok(_) => {
            return (
                Err(format!("{branch}: registration failed open")),
                register,
                Duration::ZERO,
            );
        }
        Err(error) => return (Err(format!("{branch}: {error}")), register, Duration::ZERO),
    };
    let t = Instant::now();
    let released = masters.release_branch(&token).await;
    let release = t.elapsed();
    let ok = match released {
        Ok(BranchRelease::Released) => Ok(()),
        Ok(other) => Err(format!("{branch}: release answered {}", other.as_str())),
        Err(error) => Err(format!("{branch}: release: {error}")),
    };
    (ok, register, release)
}

/// One master invocation of `key` whose block runs `branches` register + release pairs; the
/// pairs' counts, and whether the master ended complete (all released, none unregistered).
async fn invocation(
    masters: &MasterLocks,
    key: &str,
    branches: usize,
) -> (Counts, Result<(), String>) {
    let inner = masters.clone();
    let outcome = masters
        .with_master_lock(key, Lease::Watchdog, |master| async move {
            let mut counts = Counts::default();
            for i in 0..branches {
                let (ok, register, release) =
                    register_and_release(&inner, &master, &format!("b{i}")).await;
                counts.pair(ok, register, release);
            }
            Ok::<_, BranchError>(counts)
        })
        .await;
    match outcome {
        Ok(outcome) => {
            let complete = if outcome.is_complete() {
                Ok(())
            } else {
                Err(format!(
                    "master ended {} (unregistered: {:?})",
                    outcome.branches.as_str(),
                    outcome.unregistered
                ))
            };
            let mut counts = outcome.value.unwrap_or_default();
            counts.masters = 1;
            (counts, complete)
        }
        Err(error) => (Counts::default(), Err(format!("master: {error}"))),
    }
}

/// Runs `scenario` for `duration` on `lock`'s connections and returns its line:
/// the idempotency lines' fields (`redis_cmds_per_call` over every command the server ran during
/// the scenario), plus `evalsha_per_call`, `masters`, `client_cpu_s` and, in
/// `branches-register-release`, `branches_per_master`, `register_us` and `release_us`.
///
/// # Errors
/// When `INFO commandstats` cannot be read.
pub(crate) async fn run(
    scenario: Scenario,
    target: &Target,
    lock: &RedisLock,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    let masters = MasterLocks::new(
        Arc::new(lock.clone()),
        Arc::new(RedisBranches::new(&lock.client()).await),
    );
    let key = run_prefix("b", scenario.name());

    let meter = Meter::start(target).await?;
    let deadline = meter.started() + duration;
    // On a runtime worker, as the lock's workers run: not on the thread that drives the run.
    let worker = tokio::spawn(async move {
        let mut counts = Counts::default();
        while Instant::now() < deadline {
            match scenario {
                Scenario::RegisterRelease => {
                    let (one, complete) = invocation(&masters, &key, BRANCHES_PER_MASTER).await;
                    counts.merge(one);
                    if let Err(error) = complete {
                        counts.calls.error(error);
                    }
                }
                Scenario::Master => {
                    let t = Instant::now();
                    let (one, complete) = invocation(&masters, &key, 1).await;
                    let took = t.elapsed();
                    let pair = match (one.calls.errors, one.calls.first_error.clone()) {
                        (0, _) => complete,
                        (_, error) => Err(error.unwrap_or_default()),
                    };
                    counts.masters += one.masters;
                    counts.calls.record(took, pair);
                }
            }
        }
        counts
    });
    let counts = worker.await.expect("the benchmark worker panicked");
    let spent = meter.stop(target).await?;

    let mut extras = Map::new();
    extras.insert("masters".into(), json!(counts.masters));
    if scenario == Scenario::RegisterRelease {
        extras.insert("branches_per_master".into(), json!(BRANCHES_PER_MASTER));
        extras.insert("register_us".into(), percentiles(counts.register_us));
        extras.insert("release_us".into(), percentiles(counts.release_us));
    }
    let line = ToolkitLine {
        scenario: scenario.name(),
        workers: 1,
        executions: Value::Null,
        calls: counts.calls,
        spent,
    };
    Ok(line.into_json(extras))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_pairs_and_errors() {
        let mut counts = Counts::default();
        counts.pair(
            Ok(()),
            Duration::from_micros(100),
            Duration::from_micros(50),
        );
        counts.pair(
            Err("b1: registration failed open".into()),
            Duration::from_micros(30),
            Duration::ZERO,
        );
        let mut other = Counts {
            masters: 1,
            ..Counts::default()
        };
        other.calls.error("master: down".into());
        counts.merge(other);
        let calls = &counts.calls;
        assert_eq!((calls.results, calls.errors, counts.masters), (1, 2, 1));
        assert_eq!(calls.call_us, [150.0, 30.0]);
        assert_eq!(counts.release_us, [50.0, 0.0]);
        assert!(calls.first_error.as_ref().is_some_and(|e| e.contains("b1")));
    }

    #[test]
    fn scenario_names_are_the_cli_names() {
        assert_eq!(
            Scenario::ALL.map(Scenario::name),
            ["branches-register-release", "branches-master"]
        );
    }
}
