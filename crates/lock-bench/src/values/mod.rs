//! Shared values: `SharedValues` over `RedisValues` on a `RedisLock`'s connections, in the
//! fields of the idempotency lines (`calls`, `calls_per_s`, `call_us`, `redis_cmds_per_call`,
//! …). `raw` (the submodule) measures the plain Redis commands each stands on.
//!
//! - `values-get`: 1 worker, `get` of one small value.
//! - `values-set`: 1 worker, `set` with a TTL (a script: version, `SET … PX`, `SPUBLISH`).
//! - `values-cas`: 1 worker, `compare_and_set` over the version the previous call wrote.
//! - `values-wake`: a waiter on a client of its own (own connections, as another process has)
//!   and a writer; a call is one set, and `call_us` the time from the set's start until the
//!   waiter returned (the waiter's start, subscription and first read are not timed).
//! - `values-fanout`: 500 waiters on one client and one set; a call is a round of them,
//!   `call_us` the time from the set's start until the last waiter returned.
//! - `values-queue`: 1 worker; a call pushes one item, takes it and acknowledges it.

pub(crate) mod raw;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_starter::redis::{RedisLock, RedisValues};
use lock_starter::values::{Expiry, SharedValues, Versioned, Written};
use serde_json::{Map, Value, json};

use crate::redis::Target;
use crate::report::{Calls, Meter, ToolkitLine, run_prefix};

/// The waiters of one `values-fanout` round: 500.
pub(crate) const FANOUT_WAITERS: usize = 500;
const TTL: Expiry = Expiry::After(Duration::from_secs(60));
/// The longest any waiter of the scenarios waits before its call counts as an error.
const WAIT: Duration = Duration::from_secs(10);

/// One of the shared-values scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    Get,
    Set,
    Cas,
    Wake,
    Fanout,
    Queue,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 6] = [
        Scenario::Get,
        Scenario::Set,
        Scenario::Cas,
        Scenario::Wake,
        Scenario::Fanout,
        Scenario::Queue,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Get => "values-get",
            Scenario::Set => "values-set",
            Scenario::Cas => "values-cas",
            Scenario::Wake => "values-wake",
            Scenario::Fanout => "values-fanout",
            Scenario::Queue => "values-queue",
        }
    }
}

/// Shared values on `lock`'s connections.
async fn values(lock: &RedisLock) -> SharedValues {
    SharedValues::new(Arc::new(RedisValues::new(&lock.client()).await))
}

/// Runs `scenario` for `duration` and returns its line. `waiter` is a second client, on
/// connections of its own, for the scenarios that wait.
///
/// # Errors
/// When `INFO commandstats` cannot be read, or the first write fails.
pub(crate) async fn run(
    scenario: Scenario,
    target: &Target,
    lock: &RedisLock,
    waiter: &RedisLock,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    let (writer, waiter) = (values(lock).await, values(waiter).await);
    let key = run_prefix("v", scenario.name());
    let first = writer
        .set(&key, &0_u64, TTL)
        .await
        .map_err(|e| e.to_string())?;
    let meter = Meter::start(target).await?;
    let deadline = meter.started() + duration;
    let worker = tokio::spawn(async move {
        let mut counts = Calls::default();
        let mut version = first;
        let queue = writer.queue::<u64>(&key);
        let mut n = 0_u64;
        while Instant::now() < deadline {
            n += 1;
            let mut t = Instant::now();
            let outcome = match scenario {
                Scenario::Get => match writer.get::<u64>(&key).await {
                    Ok(Some(_)) => Ok(()),
                    other => Err(format!("get: {other:?}")),
                },
                Scenario::Set => writer
                    .set(&key, &n, TTL)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Scenario::Cas => match writer.compare_and_set(&key, Some(version), &n, TTL).await {
                    Ok(Written::Stored { version: next }) => {
                        version = next;
                        Ok(())
                    }
                    other => Err(format!("compare_and_set: {other:?}")),
                },
                Scenario::Wake | Scenario::Fanout => {
                    let waiters = if scenario == Scenario::Wake {
                        1
                    } else {
                        FANOUT_WAITERS
                    };
                    wake(&writer, &waiter, &key, n, waiters)
                        .await
                        .map(|set_at| t = set_at)
                }
                Scenario::Queue => queue_cycle(&queue, n).await,
            };
            counts.record(t.elapsed(), outcome);
        }
        counts
    });
    let counts = worker.await.expect("the benchmark worker panicked");
    let spent = meter.stop(target).await?;
    let mut extras = Map::new();
    if scenario == Scenario::Fanout {
        extras.insert("waiters".into(), json!(FANOUT_WAITERS));
    }
    let line = ToolkitLine {
        scenario: scenario.name(),
        workers: 1,
        executions: Value::Null,
        calls: counts,
        spent,
    };
    Ok(line.into_json(extras))
}

/// Starts `waiters` waits on `waiter` for `key` to hold `n`, waits until each has read, then
/// sets it on `writer`: returns when every waiter has returned, with when the set started.
async fn wake(
    writer: &SharedValues,
    waiter: &SharedValues,
    key: &str,
    n: u64,
    waiters: usize,
) -> Result<Instant, String> {
    let (read, mut reads) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let (waiter, key, read) = (waiter.clone(), key.to_owned(), read.clone());
            tokio::spawn(async move {
                let mut first = true;
                waiter
                    .wait_for(&key, WAIT, move |v: Option<&Versioned<u64>>| {
                        if std::mem::take(&mut first) {
                            let _ = read.send(());
                        }
                        v.is_some_and(|v| v.value == n)
                    })
                    .await
            })
        })
        .collect();
    for _ in 0..waiters {
        reads.recv().await.ok_or("a waiter ended before reading")?;
    }
    let set_at = Instant::now();
    writer.set(key, &n, TTL).await.map_err(|e| e.to_string())?;
    for task in tasks {
        let waited = task.await.map_err(|e| e.to_string())?;
        if !waited.map_err(|e| e.to_string())?.is_met() {
            return Err("a waiter timed out".into());
        }
    }
    Ok(set_at)
}

/// Pushes `n`, takes it and acknowledges it.
async fn queue_cycle(queue: &lock_starter::values::Queue<u64>, n: u64) -> Result<(), String> {
    queue.push(&n).await.map_err(|e| e.to_string())?;
    let taken = queue.take(1, WAIT).await.map_err(|e| e.to_string())?;
    match taken.items.first() {
        Some(delivery) if delivery.item == n => {}
        other => return Err(format!("took {other:?} after pushing {n}")),
    }
    queue.ack(&taken.ids()).await.map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_are_the_cli_names() {
        assert_eq!(
            Scenario::ALL.map(Scenario::name),
            [
                "values-get",
                "values-set",
                "values-cas",
                "values-wake",
                "values-fanout",
                "values-queue"
            ]
        );
    }
}
