//! What the workers do: the lock's loop, or one of the toolkit's capabilities, each with the
//! checker that judges its history.
//!
//! A toolkit workload records its own operations ([`Op::Push`] to [`Op::Execute`]) with the
//! same recorder as the lock's, and its checker returns a [`Verdict`]: what it counted, and the
//! violations of the capability's contract that no fault of the run explains.

mod branches;
mod cache;
mod faults;
mod idempotency;
mod queue;
mod rate_limit;
mod single_flight;
mod values;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use lock_starter::LockStarter;
use lock_testkit::history::{Event, Op, Phase, Recorder};
use tokio::time::Instant;

pub use faults::{Faults, REDIS};

/// The key (and hash tag) every workload uses, so that a Cluster fault hits all of it.
pub const KEY: &str = "stress";
/// The rate limit the rate-limit workload is configured with: 100 per second, burst 10.
pub const RATE_LIMIT: (&str, &str, u32) = ("stress", "100/1s", 10);

/// What the workers of a run do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Workload {
    /// Acquire → fenced read-modify-write → release (the lock's own checker).
    Lock,
    /// Idempotent calls: every worker calls each new idempotency key.
    Idempotency,
    /// A counter by compare-and-set, and waits for its changes.
    Values,
    /// A single-flight action every worker starts.
    SingleFlight,
    /// Push, take and acknowledge items of one queue.
    Queue,
    /// Decisions of one rate limit shared by every worker.
    RateLimit,
    /// Reads, puts and invalidations of one cache with an in-process tier.
    Cache,
    /// Master invocations of one key, each waiting for three branches.
    Branches,
}

impl Workload {
    /// Every workload, the lock first.
    pub const ALL: [Workload; 8] = [
        Workload::Lock,
        Workload::Idempotency,
        Workload::Values,
        Workload::SingleFlight,
        Workload::Queue,
        Workload::RateLimit,
        Workload::Cache,
        Workload::Branches,
    ];

    /// The kebab-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Lock => "lock",
            Workload::Idempotency => "idempotency",
            Workload::Values => "values",
            Workload::SingleFlight => "single-flight",
            Workload::Queue => "queue",
            Workload::RateLimit => "rate-limit",
            Workload::Cache => "cache",
            Workload::Branches => "branches",
        }
    }

    /// Whether its workers record runs of an action ([`Op::Run`]): a kill then aims at a
    /// worker in the middle of one.
    pub fn runs_actions(self) -> bool {
        matches!(
            self,
            Workload::Idempotency | Workload::SingleFlight | Workload::Branches
        )
    }

    /// What its checker holds the history to, one line for the table's legend.
    pub fn checked(self) -> &'static str {
        match self {
            Workload::Lock => "no duplicate token, no stale write accepted, overlaps explained",
            Workload::Idempotency => idempotency::CHECKED,
            Workload::Values => values::CHECKED,
            Workload::SingleFlight => single_flight::CHECKED,
            Workload::Queue => queue::CHECKED,
            Workload::RateLimit => rate_limit::CHECKED,
            Workload::Cache => cache::CHECKED,
            Workload::Branches => branches::CHECKED,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an operation ended: ok with its `value` and `token`, or failed with a `code` and a
/// `reason`.
type Outcome<'a> = Result<(Option<i64>, Option<u64>), (&'a str, &'a str)>;

/// One toolkit worker process.
#[derive(Debug)]
pub struct Context {
    /// The worker's name in the history.
    pub name: String,
    /// A number no other worker of the run has, for numbering items and runs.
    pub ordinal: u64,
    /// The worker's history.
    pub recorder: Arc<Recorder>,
    /// The toolkit, configured from the environment as a service's is.
    pub starter: LockStarter,
    /// When to stop starting new operations.
    pub stop_at: Instant,
    /// The longest an action holds what it took (a random part of it each time).
    pub hold: Duration,
}

impl Context {
    /// A number unique across the run: the worker's ordinal, then `seq`.
    fn unique(&self, seq: u64) -> i64 {
        (self.ordinal * 1_000_000_000 + seq) as i64
    }

    /// A pseudo-random fraction from 0 to 1, from `seq`: no RNG state to keep.
    fn fraction(&self, seq: u64) -> f64 {
        ((seq * 7919 + self.ordinal * 104_729) % 1000) as f64 / 1000.0
    }

    /// A pseudo-random part of the hold, from `seq`.
    fn hold(&self, seq: u64) -> Duration {
        self.hold.mul_f64(self.fraction(seq))
    }

    /// Records that `op` on `key` starts now, about `value` (and `token`).
    fn invoke(&self, op: Op, key: &str, value: Option<i64>, token: Option<u64>) -> io::Result<()> {
        self.recorder.record(Event {
            value,
            token,
            ..Event::new(&self.name, op, Phase::Invoke, key)
        })
    }

    /// Records a completion of `op` on `key` with `ok`, `value`, `token` and `reason`.
    fn complete(
        &self,
        op: Op,
        key: &str,
        outcome: Outcome<'_>,
        reason: Option<&str>,
    ) -> io::Result<()> {
        self.complete_at(
            Event::new(&self.name, op, Phase::Complete, key),
            outcome,
            reason,
        )
    }

    /// As [`Context::complete`], for a completion `event` made earlier (its time kept).
    fn complete_at(
        &self,
        mut event: Event,
        outcome: Outcome<'_>,
        reason: Option<&str>,
    ) -> io::Result<()> {
        match outcome {
            Ok((value, token)) => {
                event.ok = Some(true);
                event.value = value;
                event.token = token;
                event.reason = reason.map(str::to_owned);
            }
            Err((code, why)) => {
                event.ok = Some(false);
                event.code = Some(code.to_owned());
                event.reason = Some(why.to_owned());
            }
        }
        self.recorder.record(event)
    }
}

/// What a toolkit checker found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Operations completed (the unit depends on the workload).
    pub operations: u64,
    /// What was counted, for the table.
    pub counted: String,
    /// Departures from the contract that a fault of the run explains.
    pub explained: Vec<String>,
    /// Departures that nothing explains: each one a failure of the run.
    pub violations: Vec<String>,
}

impl Verdict {
    /// Files the departure `what` as explained by `why`, or as a violation without one.
    fn judge(&mut self, what: String, why: Option<&str>) {
        match why {
            Some(why) => self.explained.push(format!("{what}: {why}")),
            None => self.violations.push(what),
        }
    }
}

/// Runs `workload`'s loop until `ctx.stop_at`.
///
/// # Errors
/// The history could not be written.
pub async fn work(workload: Workload, ctx: &Context) -> io::Result<()> {
    match workload {
        Workload::Lock => unreachable!("the lock's loop is lock-worker's own"),
        Workload::Idempotency => idempotency::work(ctx).await,
        Workload::Values => values::work(ctx).await,
        Workload::SingleFlight => single_flight::work(ctx).await,
        Workload::Queue => queue::work(ctx).await,
        Workload::RateLimit => rate_limit::work(ctx).await,
        Workload::Cache => cache::work(ctx).await,
        Workload::Branches => branches::work(ctx).await,
    }
}

/// After the run, with the faults over: takes what the workload left for a last look (the
/// queue's items).
///
/// # Errors
/// The history could not be written.
pub async fn finish(workload: Workload, ctx: &Context) -> io::Result<()> {
    match workload {
        Workload::Queue => queue::drain(ctx).await,
        _ => Ok(()),
    }
}

/// Judges a toolkit run's history.
pub fn check(workload: Workload, events: &[Event]) -> Verdict {
    let faults = Faults::new(events);
    match workload {
        Workload::Lock => unreachable!("the lock's history goes to lock_testkit::checker"),
        Workload::Idempotency => idempotency::check(events, &faults),
        Workload::Values => values::check(events, &faults),
        Workload::SingleFlight => single_flight::check(events, &faults),
        Workload::Queue => queue::check(events, &faults),
        Workload::RateLimit => rate_limit::check(events, &faults),
        Workload::Cache => cache::check(events, &faults),
        Workload::Branches => branches::check(events, &faults),
    }
}

/// One completed operation of the history.
#[derive(Debug, Clone, Copy)]
struct Call<'a> {
    /// When it was invoked (its completion's time when no invoke was recorded).
    invoked: u64,
    /// The value of its completion, or else of its invoke.
    value: Option<i64>,
    /// Its completion.
    done: &'a Event,
}

impl Call<'_> {
    fn ok(&self) -> bool {
        self.done.ok == Some(true)
    }
}

/// The completions of `op`, each paired with its invoke (the process's oldest open invoke of
/// the same op and key), in completion order; and the invokes that never completed.
fn completions(events: &[Event], op: Op) -> (Vec<Call<'_>>, Vec<&Event>) {
    use std::collections::{HashMap, VecDeque};
    let mut open: HashMap<(&str, &str), VecDeque<&Event>> = HashMap::new();
    let mut done = Vec::new();
    for event in events.iter().filter(|e| e.op == op) {
        let slot = open
            .entry((event.process.as_str(), event.key.as_str()))
            .or_default();
        match event.phase {
            Phase::Invoke => slot.push_back(event),
            Phase::Complete => {
                let invoke = slot.pop_front();
                done.push(Call {
                    invoked: invoke.map_or(event.t_ns, |i| i.t_ns),
                    value: event.value.or(invoke.and_then(|i| i.value)),
                    done: event,
                });
            }
        }
    }
    let unfinished = open.into_values().flatten().collect();
    (done, unfinished)
}

#[cfg(test)]
mod tests;
