//! The toolkit peers' idempotent-execution scenarios (../shared/peers/README.md, "Toolkit
//! peers"; ../shared/peers/toolkit/idempotency.py): `first`, `replay` and `duplicates` on
//! `Idempotency` over a `RedisIdempotencyStore` on the lock's connections (as lock-starter
//! re-exports them), with the peer's workers, keys, action and JSON fields, so our lines sit
//! next to the Powertools peer's. `raw` (the submodule) measures the plain Redis commands an
//! idempotent call stands on.
//!
//! - `first`: 1 worker; every call a new key: claim, run the action, store its result.
//! - `replay`: 1 worker; one key, executed by the first call and replayed by every later one.
//! - `duplicates`: per round, 8 tasks wait at a barrier, then call one fresh key at once; the
//!   action sleeps 50 ms. The right answer is one execution per round and the result for every
//!   caller (7 replays), no error. Extra fields: `rounds`, and `result_spread_us`: per round,
//!   from the executing call's return to the last duplicate's.
//!
//! Every call uses `IdempotencyOptions::new()` and `IdempotencySettings::default()` (watchdog
//! lease, result kept 90 s, duplicates wait up to 200 s), the peer's result TTL. The action
//! returns the peer's `{"ticket": <key>, "ok": true}`.

pub(crate) mod raw;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use lock_starter::idempotency::{
    Idempotency, IdempotencyError, IdempotencyOptions, IdempotencySettings,
};
use lock_starter::redis::{RedisIdempotencyStore, RedisLock};
use serde_json::{Map, Value, json};
use tokio::sync::Barrier;

use crate::redis::Target;
use crate::report::{Calls, Meter, ToolkitLine, micros, percentiles, run_prefix};

/// Concurrent callers of one key per `duplicates` round: 8, the peer's threads.
pub(crate) const DUPLICATES: usize = 8;
/// How long the action runs in `duplicates`: 50 ms, the peer's.
pub(crate) const ACTION_TIME: Duration = Duration::from_millis(50);

/// One of the toolkit peer's idempotency scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    First,
    Replay,
    Duplicates,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 3] = [Scenario::First, Scenario::Replay, Scenario::Duplicates];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::First => "first",
            Scenario::Replay => "replay",
            Scenario::Duplicates => "duplicates",
        }
    }

    fn workers(self) -> usize {
        match self {
            Scenario::First | Scenario::Replay => 1,
            Scenario::Duplicates => DUPLICATES,
        }
    }
}

/// What the calls of a run counted.
#[derive(Debug, Default)]
struct Counts {
    /// The calls; a result is one that got the action's result (executed or replayed).
    calls: Calls,
    /// Of the results, replays.
    replays: u64,
}

impl Counts {
    fn record(&mut self, outcome: Result<bool, IdempotencyError>, took: Duration) {
        let outcome = match outcome {
            Ok(replayed) => {
                self.replays += u64::from(replayed);
                Ok(())
            }
            Err(error) => Err(error.to_string()),
        };
        self.calls.record(took, outcome);
    }

    fn merge(&mut self, other: Counts) {
        self.calls.merge(other.calls);
        self.replays += other.replays;
    }
}

/// The system under test: idempotent execution on a Redis lock's connections, and a count of
/// the action's runs.
struct Subject {
    idempotency: Idempotency,
    executions: Arc<AtomicU64>,
}

impl Subject {
    /// One `execute` of `key` whose action (counted) sleeps `action_time` and returns the
    /// peer's result. `Ok(true)` for a replay.
    async fn call(&self, key: &str, action_time: Duration) -> Result<bool, IdempotencyError> {
        let executions = Arc::clone(&self.executions);
        let result = self
            .idempotency
            .execute(key, &IdempotencyOptions::new(), || async move {
                executions.fetch_add(1, Relaxed);
                if !action_time.is_zero() {
                    tokio::time::sleep(action_time).await;
                }
                Ok::<_, IdempotencyError>(json!({"ticket": key, "ok": true}))
            })
            .await?;
        Ok(result.is_replay())
    }
}

/// Runs `scenario` for `duration` on `lock`'s connections and returns the toolkit peer's
/// fields, `redis_cmds_per_call` included (every command the server ran during the scenario
/// over the calls; the client connected before, as the peer's is).
///
/// # Errors
/// When `INFO commandstats` cannot be read, or the store cannot be set up.
pub(crate) async fn run(
    scenario: Scenario,
    target: &Target,
    lock: &RedisLock,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    let store = Arc::new(RedisIdempotencyStore::new(&lock.client()).await);
    let idempotency = Idempotency::new(store, IdempotencySettings::default())
        .map_err(|e| format!("idempotency settings: {e}"))?;
    let subject = Arc::new(Subject {
        idempotency,
        executions: Arc::new(AtomicU64::new(0)),
    });
    // Results stay 90 s: a key of an earlier run on the same Redis would replay.
    let prefix = run_prefix("i", scenario.name());

    let meter = Meter::start(target).await?;
    let deadline = meter.started() + duration;
    let mut counts = Counts::default();
    let mut rounds = 0u64;
    // Per `duplicates` round: from the executing call's return to the last duplicate's, i.e.
    // how long the stored result takes to reach every waiting duplicate.
    let mut result_spread_us = Vec::new();
    match scenario {
        Scenario::First | Scenario::Replay => {
            // On a runtime worker, as the lock's workers run: not on the thread that drives
            // the whole run.
            let subject = Arc::clone(&subject);
            let worker = tokio::spawn(async move {
                let mut counts = Counts::default();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let key = match scenario {
                        Scenario::First => format!("{prefix}:{i}"),
                        _ => prefix.clone(),
                    };
                    i += 1;
                    let t = Instant::now();
                    let outcome = subject.call(&key, Duration::ZERO).await;
                    counts.record(outcome, t.elapsed());
                }
                counts
            });
            counts = worker.await.expect("the benchmark worker panicked");
        }
        Scenario::Duplicates => {
            while Instant::now() < deadline {
                let key = Arc::new(format!("{prefix}:{rounds}"));
                rounds += 1;
                let barrier = Arc::new(Barrier::new(DUPLICATES));
                let callers: Vec<_> = (0..DUPLICATES)
                    .map(|_| {
                        let (subject, key, barrier) =
                            (Arc::clone(&subject), Arc::clone(&key), Arc::clone(&barrier));
                        tokio::spawn(async move {
                            barrier.wait().await;
                            let t = Instant::now();
                            let outcome = subject.call(&key, ACTION_TIME).await;
                            let ended = Instant::now();
                            let executed = matches!(outcome, Ok(false));
                            let mut counts = Counts::default();
                            counts.record(outcome, ended - t);
                            (counts, ended, executed)
                        })
                    })
                    .collect();
                let mut owner_ended = None;
                let mut last_ended = None;
                for caller in callers {
                    let (one, ended, executed) = caller.await.expect("a duplicate caller panicked");
                    counts.merge(one);
                    if executed {
                        owner_ended = Some(ended);
                    }
                    last_ended = last_ended.max(Some(ended));
                }
                if let (Some(owner), Some(last)) = (owner_ended, last_ended) {
                    result_spread_us.push(micros(last.saturating_duration_since(owner)));
                }
            }
        }
    }
    let spent = meter.stop(target).await?;

    let mut extras = Map::new();
    extras.insert("replays".into(), json!(counts.replays));
    if scenario == Scenario::Duplicates {
        extras.insert("rounds".into(), json!(rounds));
        extras.insert("result_spread_us".into(), percentiles(result_spread_us));
    }
    let line = ToolkitLine {
        scenario: scenario.name(),
        workers: scenario.workers() as u64,
        executions: json!(subject.executions.load(Relaxed)),
        calls: counts.calls,
        spent,
    };
    Ok(line.into_json(extras))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_results_replays_and_errors() {
        let mut counts = Counts::default();
        counts.record(Ok(false), Duration::from_micros(100));
        counts.record(Ok(true), Duration::from_micros(200));
        counts.record(
            Err(IdempotencyError::InvalidArgument {
                name: "key",
                value: String::new(),
                problem: "empty".into(),
            }),
            Duration::from_micros(300),
        );
        let mut other = Counts::default();
        other.record(Ok(true), Duration::from_micros(50));
        counts.merge(other);
        assert_eq!(
            (counts.calls.results, counts.replays, counts.calls.errors),
            (3, 2, 1),
            "{counts:?}"
        );
        assert_eq!(counts.calls.call_us.len(), 4);
        assert!(counts.calls.first_error.is_some_and(|e| e.contains("key")));
    }

    #[test]
    fn per_call_rounds_like_the_peer() {
        use crate::report::per_call;
        assert_eq!(per_call(9, 1), json!(9.0));
        assert_eq!(per_call(20, 3), json!(6.67));
        assert_eq!(per_call(5, 0), Value::Null);
    }
}
