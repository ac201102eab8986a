//! The toolkit peers' rate-limiting scenarios (../shared/peers/README.md, "Rate limiting";
//! ../shared/peers/toolkit/ratelimit.py and accuracy.py): a `RateLimiter` over
//! `RedisRateLimits` on a client of its own, with the peers' workers, keys, limits and JSON
//! fields (`algorithm` `gcra`), so our lines sit next to rate-limiter-flexible's and limits'.
//!
//! - `decide`: 1 worker, one key, a limit of 1,000,000/s (burst 1,000,000) that never denies.
//! - `parallel`: 32 workers, a key each, the same limit.
//! - `hot-key`: 32 workers, one shared key, the same limit.
//! - `accuracy`: 4 processes of lock-bench × 8 workers hammer one key limited to 200/s, burst
//!   200 (see [`accuracy`]).
//!
//! Workers are Tokio tasks sharing the limiter; each calls `try_acquire(key, 1)` until the
//! duration has passed, then finishes its call. Each run first makes one untimed decision per
//! worker at once on another key. `redis_cmds_per_call` counts every command the server ran
//! from before the client connected (connection set-up and warm-up included, as the peers
//! count theirs) over the decisions; `client_cpu_s` is this process' CPU over the timed part.
//!
//! `platform-lock-batched` lines (every scenario): the same limiter with
//! [`RateLimiter::local_batch`] of [`BENCH_BATCH`], so a key's permits are charged on Redis
//! [`BENCH_BATCH`] at a time and spent in the process; the line adds `local_batch`.
//!
//! `raw-fred` lines (`decide`, `parallel`, `hot-key`): the same workers and keys, each call one
//! `EVALSHA` of [`RAW_SCRIPT`] (the peers' minimal GCRA: `TIME`, `GET`, `SET … PX`, allowed or
//! not) on a plain fred client (one connection, `TCP_NODELAY`, fred's defaults
//! otherwise), its reply not read. The gap between the two lines is what the limiter and its
//! script add on top of fred's round trip.

pub(crate) mod accuracy;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fred::prelude::{Builder, Client, ClientLike, Config, LuaInterface};
use lock_core::rate_limit::{Basis, FailurePolicy, Quota, RateLimitStore, RateLimiter};
use lock_redis::rate_limit::RedisRateLimits;
use serde_json::{Map, Value, json};

use crate::redis::Target;
use crate::report::{Meter, Spent, cpu_seconds, micros, per_call, percentiles, round1, round3};

/// The impl name of the lines with a local batch.
pub(crate) const IMPL_BATCHED: &str = "platform-lock-batched";
/// The local batch of those lines: permits charged on Redis per refill of a key.
pub(crate) const BENCH_BATCH: u32 = 50;
/// The impl name of the raw fred lines.
pub(crate) const RAW_IMPL: &str = "raw-fred";
/// The rate of `decide`, `parallel` and `hot-key`: high enough never to deny here.
const NEVER_PER_S: u32 = 1_000_000;
/// The limit's name in its Redis keys.
const LIMIT: &str = "bench";
/// The `raw-fred` script: the decision the peers' `raw-gcra` line makes (GCRA on the server's
/// clock, the TAT in µs under the key; allowed or not, nothing else), with [`RAW_ARGS`].
pub(crate) const RAW_SCRIPT: &str = "local t = redis.call('TIME')\n\
    local now = t[1] * 1000000 + t[2]\n\
    local tat = tonumber(redis.call('GET', KEYS[1])) or 0\n\
    if tat < now then tat = now end\n\
    tat = tat + ARGV[1]\n\
    if tat - now > tonumber(ARGV[2]) then return 0 end\n\
    redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000))\n\
    return 1";
/// [`RAW_SCRIPT`]'s emission interval and burst tolerance in µs: [`NEVER_PER_S`] a second.
const RAW_ARGS: [&str; 2] = ["1", "1000000"];

/// One of the toolkit peers' rate-limiting scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    Decide,
    Parallel,
    HotKey,
    Accuracy,
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 4] = [
        Scenario::Decide,
        Scenario::Parallel,
        Scenario::HotKey,
        Scenario::Accuracy,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Decide => "decide",
            Scenario::Parallel => "parallel",
            Scenario::HotKey => "hot-key",
            Scenario::Accuracy => "accuracy",
        }
    }

    /// Workers of one process.
    fn workers(self) -> usize {
        match self {
            Scenario::Decide => 1,
            Scenario::Parallel | Scenario::HotKey => 32,
            Scenario::Accuracy => accuracy::WORKERS,
        }
    }

    /// The key of worker `worker`, under the run's `tag`.
    fn key(self, tag: &str, worker: usize) -> String {
        match self {
            Scenario::Decide => format!("{tag}:decide"),
            Scenario::Parallel => format!("{tag}:p:{worker}"),
            Scenario::HotKey => format!("{tag}:hot"),
            Scenario::Accuracy => format!("{tag}:acc"),
        }
    }
}

/// What makes one decision: our limiter, or the raw script through fred.
#[derive(Debug, Clone)]
enum Decider {
    Limiter(RateLimiter),
    Raw { client: Client, sha: Arc<str> },
}

impl Decider {
    /// `Ok(true)` when admitted, `Ok(false)` when denied; a store failure is an error.
    async fn decide(&self, key: &str) -> Result<bool, String> {
        match self {
            Decider::Limiter(limiter) => {
                let decision = limiter
                    .try_acquire(key, 1)
                    .await
                    .map_err(|e| e.to_string())?;
                match decision.basis {
                    Basis::Counted => Ok(decision.allowed),
                    basis => Err(format!("the store failed: decided {basis:?}")),
                }
            }
            Decider::Raw { client, sha } => client
                .evalsha::<fred::types::Value, _, _, _>(&**sha, key, RAW_ARGS.to_vec())
                .await
                .map(|_| true)
                .map_err(|e| e.to_string()),
        }
    }
}

/// What the workers of a run counted.
#[derive(Debug, Default)]
struct Tally {
    call_us: Vec<f64>,
    admitted: u64,
    denied: u64,
    errors: u64,
    first_error: Option<String>,
    /// Wall-clock seconds right after each admitting decision, when asked for.
    admit_wall: Vec<f64>,
    /// Wall-clock seconds when the last worker finished.
    end_wall: f64,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.call_us.extend(other.call_us);
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.admit_wall.extend(other.admit_wall);
        self.end_wall = self.end_wall.max(other.end_wall);
    }
}

/// Seconds since the epoch: the clock the processes of `accuracy` share.
fn wall_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `workers` tasks decide on `key_of(worker)` until `deadline`, each finishing its call;
/// with `stamps`, the wall-clock time after every admission is kept.
async fn hammer(
    decider: &Decider,
    key_of: impl Fn(usize) -> String,
    workers: usize,
    deadline: Instant,
    stamps: bool,
) -> Tally {
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (decider, key) = (decider.clone(), key_of(worker));
            tokio::spawn(async move {
                let mut tally = Tally::default();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let outcome = decider.decide(&key).await;
                    let wall = stamps.then(wall_clock);
                    tally.call_us.push(micros(t.elapsed()));
                    match outcome {
                        Ok(true) => {
                            tally.admitted += 1;
                            tally.admit_wall.extend(wall);
                        }
                        Ok(false) => tally.denied += 1,
                        Err(error) => {
                            tally.errors += 1;
                            tally.first_error.get_or_insert(error);
                        }
                    }
                }
                tally.end_wall = wall_clock();
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        all.merge(task.await.expect("a rate-limit worker panicked"));
    }
    all
}

/// One decision per worker at once on `key`, untimed: connections, the script.
async fn warm_up(decider: &Decider, key: &str, workers: usize) -> Result<(), String> {
    let decisions = (0..workers).map(|_| decider.decide(key));
    for outcome in futures::future::join_all(decisions).await {
        outcome.map_err(|e| format!("warm-up: {e}"))?;
    }
    Ok(())
}

/// The rate-limit store on a client of its own.
async fn store(target: &Target) -> Result<Arc<dyn RateLimitStore>, String> {
    let client = crate::connect_client(target).await?;
    Ok(Arc::new(RedisRateLimits::new(&client).await))
}

/// A limiter named [`LIMIT`] on `store` admitting `count` per second with a burst of `count`;
/// it fails closed, so that a store failure counts as an error rather than an admission.
fn limiter(store: &Arc<dyn RateLimitStore>, count: u32) -> Result<RateLimiter, String> {
    let quota = Quota::new(count, Duration::from_secs(1)).and_then(|q| q.with_burst(count));
    quota
        .and_then(|quota| {
            RateLimiter::new(Arc::clone(store), LIMIT, quota, FailurePolicy::FailClosed)
        })
        .map_err(|e| e.to_string())
}

/// The impl name of our lines with a local batch of `batch` (0: none).
pub(crate) fn impl_name(batch: u32) -> &'static str {
    if batch > 0 { IMPL_BATCHED } else { crate::IMPL }
}

/// Runs our line of `scenario` for `duration`, with a local batch of `batch` (0: none);
/// `accuracy` starts `accuracy::PROCESSES` child processes of this binary with `child_flags`
/// added to theirs.
///
/// # Errors
/// When `INFO commandstats` cannot be read, the limiter cannot be set up or the warm-up fails;
/// for `accuracy`, when a child process fails.
pub(crate) async fn run(
    scenario: Scenario,
    target: &Target,
    duration: Duration,
    child_flags: &[&str],
    batch: u32,
) -> Result<Map<String, Value>, String> {
    if scenario == Scenario::Accuracy {
        return accuracy::run(target, duration, child_flags, batch).await;
    }
    // Before connecting: the set-up counts, as the peers count theirs.
    let meter = Meter::start(target).await?;
    let limiter = batched(limiter(&store(target).await?, NEVER_PER_S)?, batch)?;
    timed(
        impl_name(batch),
        scenario,
        Decider::Limiter(limiter),
        target,
        meter,
        duration,
    )
    .await
}

/// `limiter` with a local batch of `batch` (0: none).
fn batched(limiter: RateLimiter, batch: u32) -> Result<RateLimiter, String> {
    limiter.local_batch(batch).map_err(|e| e.to_string())
}

/// The `raw-fred` line of `scenario`; `None` for `accuracy`.
///
/// # Errors
/// When the raw client cannot connect or load the script, or `INFO commandstats` cannot be read.
pub(crate) async fn raw(
    scenario: Scenario,
    target: &Target,
    duration: Duration,
) -> Option<Result<Map<String, Value>, String>> {
    if scenario == Scenario::Accuracy {
        return None;
    }
    eprintln!(
        "[lock-bench] ratelimit/{} {RAW_IMPL} ({:.1}s)",
        scenario.name(),
        duration.as_secs_f64()
    );
    Some(
        async {
            let meter = Meter::start(target).await?;
            let failed = |e: fred::error::Error| format!("raw fred client: {e}");
            let config = Config::from_url(target.address.expose()).map_err(failed)?;
            let client = Builder::from_config(config)
                .with_connection_config(|c| c.tcp.nodelay = Some(true))
                .build()
                .map_err(failed)?;
            client.init().await.map_err(failed)?;
            let sha: String = client.script_load(RAW_SCRIPT).await.map_err(failed)?;
            let decider = Decider::Raw {
                client: client.clone(),
                sha: sha.into(),
            };
            let line = timed(RAW_IMPL, scenario, decider, target, meter, duration).await;
            let _ = client.quit().await;
            line
        }
        .await,
    )
}

/// Warms up and runs `scenario` in this process with `decider`, and makes `imp`'s line.
async fn timed(
    imp: &str,
    scenario: Scenario,
    decider: Decider,
    target: &Target,
    meter: Meter,
    duration: Duration,
) -> Result<Map<String, Value>, String> {
    let workers = scenario.workers();
    let tag = crate::report::run_prefix("rl", scenario.name());
    warm_up(&decider, &format!("{tag}:warm"), workers).await?;
    let (cpu, started) = (cpu_seconds(), Instant::now());
    let tally = hammer(
        &decider,
        |w| scenario.key(&tag, w),
        workers,
        started + duration,
        false,
    )
    .await;
    let (elapsed, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let spent = Spent {
        elapsed,
        cpu,
        ..meter.stop(target).await?
    };
    let mut line = line(imp, scenario, workers, tally, &spent);
    if imp == RAW_IMPL {
        // Its reply is not read, as the peers' raw lines read none.
        line.insert("admitted".into(), Value::Null);
        line.insert("denied".into(), Value::Null);
        line.insert("algorithm".into(), json!("evalsha"));
    }
    if imp == IMPL_BATCHED {
        line.insert("local_batch".into(), json!(BENCH_BATCH));
    }
    Ok(line)
}

/// The line of `tally` in the toolkit peers' rate-limit fields (accuracy's own added by
/// [`accuracy`]), then `evalsha_per_call`.
fn line(
    imp: &str,
    scenario: Scenario,
    workers: usize,
    tally: Tally,
    spent: &Spent,
) -> Map<String, Value> {
    if let Some(error) = &tally.first_error {
        eprintln!(
            "[lock-bench] {imp} / {}: {} errors, first: {error}",
            scenario.name(),
            tally.errors
        );
    }
    let calls = tally.call_us.len() as u64;
    let mut line = Map::new();
    line.insert("impl".into(), json!(imp));
    line.insert("scenario".into(), json!(scenario.name()));
    line.insert("workers".into(), json!(workers));
    line.insert("duration_s".into(), json!(round3(spent.elapsed)));
    line.insert("calls".into(), json!(calls));
    line.insert(
        "calls_per_s".into(),
        json!(round1(calls as f64 / spent.elapsed)),
    );
    line.insert("call_us".into(), percentiles(tally.call_us));
    line.insert("admitted".into(), json!(tally.admitted));
    line.insert("denied".into(), json!(tally.denied));
    line.insert("errors".into(), json!(tally.errors));
    line.insert(
        "redis_cmds_per_call".into(),
        per_call(spent.commands.total, calls),
    );
    line.insert("client_cpu_s".into(), json!(round3(spent.cpu)));
    line.insert("version".into(), json!(crate::report::VERSION));
    line.insert("algorithm".into(), json!("gcra"));
    line.insert(
        "evalsha_per_call".into(),
        per_call(spent.commands.evalsha, calls),
    );
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_take_the_peers_names_workers_and_keys() {
        assert_eq!(
            Scenario::ALL.map(Scenario::name),
            ["decide", "parallel", "hot-key", "accuracy"]
        );
        assert_eq!(Scenario::ALL.map(Scenario::workers), [1, 32, 32, 8]);
        assert_ne!(
            Scenario::Parallel.key("t", 0),
            Scenario::Parallel.key("t", 1)
        );
        assert_eq!(Scenario::HotKey.key("t", 0), Scenario::HotKey.key("t", 31));
    }

    #[test]
    fn the_limits_are_the_peers() {
        let store: Arc<dyn RateLimitStore> =
            Arc::new(lock_core::rate_limit::InMemoryRateLimits::new());
        let never = limiter(&store, NEVER_PER_S).unwrap().quota();
        assert_eq!(never.emission_interval(), Duration::from_micros(1));
        assert_eq!(never.burst(), 1_000_000);
        let accuracy = limiter(&store, accuracy::LIMIT_PER_S).unwrap().quota();
        assert_eq!(
            (accuracy.count(), accuracy.period(), accuracy.burst()),
            (200, Duration::from_secs(1), 200)
        );
    }

    #[test]
    fn tallies_merge() {
        let mut a = Tally {
            call_us: vec![1.0],
            admitted: 1,
            end_wall: 5.0,
            ..Tally::default()
        };
        a.merge(Tally {
            call_us: vec![2.0, 3.0],
            denied: 1,
            errors: 1,
            first_error: Some("x".into()),
            admit_wall: vec![4.0],
            end_wall: 6.0,
            ..Tally::default()
        });
        assert_eq!(a.call_us.len(), 3);
        assert_eq!((a.admitted, a.denied, a.errors), (1, 1, 1));
        assert_eq!((a.first_error.as_deref(), a.end_wall), (Some("x"), 6.0));
    }
}
