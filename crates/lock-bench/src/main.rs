//! `lock-bench`: how fast the lock is, in the scenarios and JSON lines of ../shared/peers, so
//! its figures sit next to the peers' (existing lock libraries and the raw Redis limit).
//!
//! ```sh
//! cargo run --release -p lock-bench -- --duration 5                 # every scenario
//! cargo run --release -p lock-bench -- --scenario contended --duration 10
//! cargo run --release -p lock-bench -- --redis-url redis://127.0.0.1:6379 > ours.jsonl
//! scripts/bench.sh                                                  # beside the peers, one Redis
//! ```
//!
//! Without `--redis-url` it starts a private `redis-server` (loopback, free port, no
//! persistence) and stops it on exit. One JSON line per scenario goes to stdout, progress to
//! stderr. Scenarios: the peers' `uncontended`, `parallel`, `contended`; `scripts`, the
//! server-side limit of our scripts under `redis-benchmark` (impl `scripts`, one line per peer
//! scenario); `watchdog`, 10,000 watchdog leases held for three renewal periods; and the
//! toolkit peers' idempotent-execution scenarios `first`, `replay`, `duplicates`
//! (`--scenario idempotency`, or one of them: `idempotency-first`, …), each with a `raw` line
//! of the plain Redis commands beneath it; and the master/sub locks' `branches-register-release`
//! and `branches-master` (`--scenario branches`, or one of them), the first with a `raw` line of
//! its two `HSET`s; and the toolkit peers' rate-limiting scenarios `decide`, `parallel`,
//! `hot-key` and `accuracy` (`--scenario ratelimit`, or one of them: `ratelimit-decide`, …;
//! `accuracy` runs four processes of lock-bench), each also as `platform-lock-batched` (a local
//! batch of 50 permits per key), the first three each with a `raw-fred` line of one plain
//! `EVALSHA` through fred beneath it; and the toolkit peers' cache scenarios `hit`,
//! `hit-parallel`, `miss-load`, `stampede` (`--scenario cache`, or one of them: `cache-hit`, …),
//! each as impl `platform-lock` and, with the in-process tier, `platform-lock-near`, and
//! `push-delay`, a write in one process until another process' in-process tier drops the entry
//! (`cache-push-delay`). See docs/performance.md for what each field
//! means and the latest side-by-side runs.

mod branches;
mod cache;
mod cycles;
mod idempotency;
mod ratelimit;
mod redis;
mod report;
mod scripts;
mod values;
mod watchdog;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lock_starter::lock::DistributedLock;
use lock_starter::redis::{RedisClient, RedisConfig, RedisLock, RedisLockConfig};
use serde_json::{Map, Value, json};

use crate::cycles::{HoldSleep, Scenario};
use crate::redis::Target;

/// The `impl` field of our lines.
pub(crate) const IMPL: &str = "platform-lock";
/// The impl name of runs with `--fair`.
pub(crate) const IMPL_FAIR: &str = "platform-lock-fair";

#[derive(Debug, Parser)]
#[command(
    about = "Benchmarks platform-lock in the scenarios and JSON schema of ../shared/peers",
    allow_negative_numbers = true,
    after_help = "Exit codes: 0 all scenarios ran (a scenario's errors are in its JSON line), 1 a scenario could not run, 2 bad arguments."
)]
struct Args {
    /// Redis to measure, `redis://[:password@]host[:port][/db]`. Default: a private redis-server
    /// started for the run.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Scenario to run.
    #[arg(long, value_enum, default_value_t = Which::All)]
    scenario: Which,
    /// Seconds each scenario runs (the peers' flag; fractions allowed, 0.1..=3600).
    #[arg(long, default_value_t = 5.0, value_parser = parse_duration_secs)]
    duration: f64,
    /// How a `contended` holder sleeps its 1 ms (see docs/performance.md).
    #[arg(long, value_enum, default_value_t = HoldSleep::Os)]
    hold_sleep: HoldSleep,
    /// Tokio runtime flavour of the client (the peers' rslock uses the multi-thread one).
    #[arg(long, value_enum, default_value_t = Flavour::MultiThread)]
    runtime: Flavour,
    /// Watchdog leases held at once in `watchdog` (1..=1000000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    watchdog_locks: u32,
    /// Watchdog timeout in `watchdog`, e.g. 3s (renewal every third of it; 1s..=1h).
    #[arg(long, default_value = "3s", value_parser = parse_watchdog_timeout)]
    watchdog_timeout: Duration,
    /// Make every acquisition of `uncontended`, `parallel` and `contended` a fair one
    /// (AcquireOptions::fair); reported as impl `platform-lock-fair`.
    #[arg(long)]
    fair: bool,
    /// Install a Prometheus metrics recorder first, as a service exporting the lock's metrics
    /// would; lines get `"metrics_recorder": "prometheus"`. Without it the `metrics` facade has
    /// no recorder and every metric call is a no-op.
    #[arg(long)]
    prometheus: bool,
    /// The local batch of the limiter of an `accuracy` process (set by `accuracy`).
    #[arg(long, default_value_t = 0, hide = true)]
    local_batch: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    All,
    Uncontended,
    Parallel,
    Contended,
    Scripts,
    Watchdog,
    /// `first`, `replay` and `duplicates` of idempotent execution, with their `raw` lines.
    Idempotency,
    /// `first` alone, with its `raw` line.
    IdempotencyFirst,
    /// `replay` alone, with its `raw` line.
    IdempotencyReplay,
    /// `duplicates` alone (no `raw` line: plain commands do not wait for a result).
    IdempotencyDuplicates,
    /// `branches-register-release` (with its `raw` line) and `branches-master`.
    Branches,
    /// 100 branches registered and released per master, per pair, with its `raw` line.
    BranchesRegisterRelease,
    /// A whole master invocation with one branch.
    BranchesMaster,
    /// Every shared-values scenario, with their `raw` lines.
    Values,
    /// `get` of one value, with its `raw` line.
    ValuesGet,
    /// `set` with a TTL, with its `raw` line.
    ValuesSet,
    /// `compare_and_set` over the last version, with its `raw` line.
    ValuesCas,
    /// Set → a waiter on other connections returns.
    ValuesWake,
    /// Set → 500 waiters return.
    ValuesFanout,
    /// Push, take and acknowledge one item, with a `raw` line.
    ValuesQueue,
    /// Every rate-limiting scenario, with their `raw-fred` lines.
    Ratelimit,
    /// One worker deciding on one key, with its `raw-fred` line.
    RatelimitDecide,
    /// 32 workers, a key each, with its `raw-fred` line.
    RatelimitParallel,
    /// 32 workers on one key, with its `raw-fred` line.
    RatelimitHotKey,
    /// 4 processes × 8 workers against 200/s, burst 200.
    RatelimitAccuracy,
    /// One of the processes `ratelimit-accuracy` starts.
    #[value(hide = true)]
    RatelimitAccuracyProc,
    /// Every cache scenario, without and with the in-process tier, and `push-delay`.
    Cache,
    /// One worker getting one present entry.
    CacheHit,
    /// 32 workers getting random ones of 1,000 present entries.
    CacheHitParallel,
    /// One worker getting-or-loading a new key after another.
    CacheMissLoad,
    /// 200 callers at once per round getting-or-loading one absent key, a 50 ms loader.
    CacheStampede,
    /// A write → another process' in-process tier drops the entry.
    CachePushDelay,
    /// The reading process `cache-push-delay` starts.
    #[value(hide = true)]
    CachePushDelayProc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Flavour {
    MultiThread,
    CurrentThread,
}

/// Whether `--scenario` selects the peer scenario `scenario`.
fn runs(which: Which, scenario: Scenario) -> bool {
    matches!(
        (which, scenario),
        (Which::All, _)
            | (Which::Uncontended, Scenario::Uncontended)
            | (Which::Parallel, Scenario::Parallel)
            | (Which::Contended, Scenario::Contended)
    )
}

/// Whether `--scenario` selects the idempotency scenario `scenario`.
fn runs_idempotency(which: Which, scenario: idempotency::Scenario) -> bool {
    use idempotency::Scenario as S;
    matches!(
        (which, scenario),
        (Which::All | Which::Idempotency, _)
            | (Which::IdempotencyFirst, S::First)
            | (Which::IdempotencyReplay, S::Replay)
            | (Which::IdempotencyDuplicates, S::Duplicates)
    )
}

/// Whether `--scenario` selects the master/sub-lock scenario `scenario`.
fn runs_branches(which: Which, scenario: branches::Scenario) -> bool {
    use branches::Scenario as S;
    matches!(
        (which, scenario),
        (Which::All | Which::Branches, _)
            | (Which::BranchesRegisterRelease, S::RegisterRelease)
            | (Which::BranchesMaster, S::Master)
    )
}

/// Whether `--scenario` selects the shared-values scenario `scenario`.
fn runs_values(which: Which, scenario: values::Scenario) -> bool {
    use values::Scenario as S;
    matches!(
        (which, scenario),
        (Which::All | Which::Values, _)
            | (Which::ValuesGet, S::Get)
            | (Which::ValuesSet, S::Set)
            | (Which::ValuesCas, S::Cas)
            | (Which::ValuesWake, S::Wake)
            | (Which::ValuesFanout, S::Fanout)
            | (Which::ValuesQueue, S::Queue)
    )
}

/// Whether `--scenario` selects the rate-limiting scenario `scenario`.
fn runs_ratelimit(which: Which, scenario: ratelimit::Scenario) -> bool {
    use ratelimit::Scenario as S;
    matches!(
        (which, scenario),
        (Which::All | Which::Ratelimit, _)
            | (Which::RatelimitDecide, S::Decide)
            | (Which::RatelimitParallel, S::Parallel)
            | (Which::RatelimitHotKey, S::HotKey)
            | (Which::RatelimitAccuracy, S::Accuracy)
    )
}

/// Whether `--scenario` selects the cache scenario `scenario`.
fn runs_cache(which: Which, scenario: cache::Scenario) -> bool {
    use cache::Scenario as S;
    matches!(
        (which, scenario),
        (Which::All | Which::Cache, _)
            | (Which::CacheHit, S::Hit)
            | (Which::CacheHitParallel, S::HitParallel)
            | (Which::CacheMissLoad, S::MissLoad)
            | (Which::CacheStampede, S::Stampede)
    )
}

fn parse_duration_secs(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds (e.g. 5 or 0.5)"))?;
    if !(0.1..=3600.0).contains(&secs) {
        return Err(format!(
            "{secs} s is out of range; accepted: 0.1 to 3600 seconds"
        ));
    }
    Ok(secs)
}

fn parse_watchdog_timeout(text: &str) -> Result<Duration, String> {
    let timeout = lock_starter::config::parse_duration(text)?;
    let (min, max) = (
        lock_core::lock::MIN_WATCHDOG_TIMEOUT,
        lock_core::lock::MAX_WATCHDOG_TIMEOUT,
    );
    if !(min..=max).contains(&timeout) {
        let range = lock_starter::config::duration_range(min, max);
        return Err(format!("{text} is out of range; accepted: {range}"));
    }
    Ok(timeout)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut runtime = match args.runtime {
        Flavour::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        Flavour::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    // Timer slack 1 ns on every runtime thread: the kernel's default of 50 µs would stretch the
    // 1 ms hold of `contended` by up to 5 %, and with it every cycle.
    runtime.on_thread_start(|| {
        let _ = nix::sys::prctl::set_timerslack(1);
    });
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lock-bench: could not start the Tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        tokio::select! {
            code = run(args) => code,
            // Returning (rather than dying on the signal) stops the private redis-server and
            // removes its directory.
            _ = tokio::signal::ctrl_c() => {
                eprintln!("lock-bench: interrupted");
                ExitCode::from(130)
            }
        }
    })
}

async fn run(args: Args) -> ExitCode {
    let prometheus = if args.prometheus {
        match metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder() {
            Ok(handle) => Some(handle),
            Err(error) => {
                eprintln!("lock-bench: could not install the Prometheus recorder: {error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let (target, _server) = match &args.redis_url {
        Some(url) => match Target::parse(url) {
            Ok(target) => (target, None),
            Err(error) => {
                eprintln!("lock-bench: {error}");
                return ExitCode::from(2);
            }
        },
        None => match Target::private().await {
            Ok((target, server)) => {
                eprintln!("[lock-bench] private redis-server at {}", target.shown());
                (target, Some(server))
            }
            Err(error) => {
                eprintln!("lock-bench: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    // One clear error up front rather than the same one from every scenario.
    if let Err(error) = target.command(&["PING"]).await {
        eprintln!("lock-bench: {error}");
        return ExitCode::FAILURE;
    }
    if args.scenario == Which::RatelimitAccuracyProc {
        // One of `accuracy`'s processes: its lines go to the lock-bench that started it.
        return child_exit(ratelimit::accuracy::process(&target, args.local_batch).await);
    }
    if args.scenario == Which::CachePushDelayProc {
        // The reader of `push-delay`: it answers the lock-bench that started it.
        return child_exit(cache::push::process(&target).await);
    }
    let duration = Duration::from_secs_f64(args.duration);
    let peer_scenarios = [
        Scenario::Uncontended,
        Scenario::Parallel,
        Scenario::Contended,
    ];
    let mut failed = false;
    // A failed scenario prints the peers' error line: {"impl", "scenario", "error"}. Lines of
    // the lock's scenarios take the lock peers' field order, idempotency lines the toolkit's.
    let mut emit_in =
        |fields: &[&str], imp: &str, scenario: &str, result: Result<Map<String, Value>, String>| {
            match result {
                Ok(mut line) => {
                    line.insert("runtime".into(), json!(runtime_name(args.runtime)));
                    if prometheus.is_some() {
                        line.insert("metrics_recorder".into(), json!("prometheus"));
                    }
                    println!("{}", report::to_json_line_in(&line, fields));
                }
                Err(error) => {
                    failed = true;
                    eprintln!("lock-bench: {imp} / {scenario}: {error}");
                    println!(
                        "{}",
                        json!({"impl": imp, "scenario": scenario, "error": error})
                    );
                }
            }
        };
    for scenario in peer_scenarios {
        if !runs(args.scenario, scenario) {
            continue;
        }
        eprintln!("[lock-bench] {} ({:.1}s)", scenario.name(), args.duration);
        // The yardstick of handoff_us: a PING round trip through the same client stack, on a
        // client of its own so the PINGs stay out of the scenario's command counts.
        let ping = if scenario == Scenario::Contended {
            match connect(&target, None).await {
                Ok(lock) => ping_round_trips(&lock).await,
                Err(_) => Value::Null,
            }
        } else {
            Value::Null
        };
        let result = measured(&target, |lock| async move {
            let lock: Arc<dyn DistributedLock> = Arc::new(lock);
            cycles::run(scenario, args.hold_sleep, lock, duration, args.fair).await
        })
        .await;
        let result = result.map(|mut line| {
            if !ping.is_null() {
                line.insert("ping_us".into(), ping);
            }
            line
        });
        emit_in(
            &report::FIELDS.lock,
            if args.fair { IMPL_FAIR } else { IMPL },
            scenario.name(),
            result,
        );
    }
    if matches!(args.scenario, Which::All | Which::Scripts) {
        for scenario in peer_scenarios {
            eprintln!(
                "[lock-bench] scripts/{} ({:.1}s)",
                scenario.name(),
                args.duration
            );
            let result = match connect(&target, None).await {
                Ok(lock) => scripts::run(scenario, &target, &lock, duration).await,
                Err(error) => Err(error),
            };
            emit_in(&report::FIELDS.lock, "scripts", scenario.name(), result);
        }
    }
    if matches!(args.scenario, Which::All | Which::Watchdog) {
        eprintln!("[lock-bench] watchdog ({} locks)", args.watchdog_locks);
        let result = match connect(&target, Some(args.watchdog_timeout)).await {
            Ok(lock) => {
                watchdog::run(
                    &target,
                    &lock,
                    args.watchdog_timeout,
                    args.watchdog_locks as usize,
                )
                .await
            }
            Err(error) => Err(error),
        };
        emit_in(&report::FIELDS.lock, IMPL, "watchdog", result);
    }
    for scenario in idempotency::Scenario::ALL {
        if !runs_idempotency(args.scenario, scenario) {
            continue;
        }
        let name = scenario.name();
        eprintln!("[lock-bench] idempotency/{name} ({:.1}s)", args.duration);
        let result = match connect(&target, None).await {
            Ok(lock) => idempotency::run(scenario, &target, &lock, duration).await,
            Err(error) => Err(error),
        };
        emit_in(&report::FIELDS.idempotency, IMPL, name, result);
        if let Some(result) = idempotency::raw::run(scenario, &target, duration).await {
            emit_in(&report::FIELDS.idempotency, "raw", name, result);
        }
    }
    for scenario in branches::Scenario::ALL {
        if !runs_branches(args.scenario, scenario) {
            continue;
        }
        let name = scenario.name();
        eprintln!("[lock-bench] {name} ({:.1}s)", args.duration);
        let result = match connect(&target, None).await {
            Ok(lock) => branches::run(scenario, &target, &lock, duration).await,
            Err(error) => Err(error),
        };
        emit_in(&report::FIELDS.idempotency, IMPL, name, result);
        let commands = branches::raw::commands(scenario);
        if let Some(result) = idempotency::raw::run_named(name, &target, duration, commands).await {
            emit_in(&report::FIELDS.idempotency, "raw", name, result);
        }
    }
    for scenario in values::Scenario::ALL {
        if !runs_values(args.scenario, scenario) {
            continue;
        }
        let name = scenario.name();
        eprintln!("[lock-bench] {name} ({:.1}s)", args.duration);
        let result = match (connect(&target, None).await, connect(&target, None).await) {
            (Ok(lock), Ok(waiter)) => {
                values::run(scenario, &target, &lock, &waiter, duration).await
            }
            (Err(error), _) | (_, Err(error)) => Err(error),
        };
        emit_in(&report::FIELDS.idempotency, IMPL, name, result);
        let commands = values::raw::commands(scenario);
        if let Some(result) = idempotency::raw::run_named(name, &target, duration, commands).await {
            emit_in(&report::FIELDS.idempotency, "raw", name, result);
        }
    }
    // `accuracy`'s processes run as this one does.
    let mut child_flags = vec!["--runtime", runtime_name(args.runtime)];
    if args.prometheus {
        child_flags.push("--prometheus");
    }
    for scenario in ratelimit::Scenario::ALL {
        if !runs_ratelimit(args.scenario, scenario) {
            continue;
        }
        let name = scenario.name();
        eprintln!("[lock-bench] ratelimit/{name} ({:.1}s)", args.duration);
        let result = ratelimit::run(scenario, &target, duration, &child_flags, 0).await;
        emit_in(&report::FIELDS.ratelimit, IMPL, name, result);
        let batched = ratelimit::IMPL_BATCHED;
        eprintln!(
            "[lock-bench] ratelimit/{name} {batched} ({:.1}s)",
            args.duration
        );
        let batch = ratelimit::BENCH_BATCH;
        let result = ratelimit::run(scenario, &target, duration, &child_flags, batch).await;
        emit_in(&report::FIELDS.ratelimit, batched, name, result);
        if let Some(result) = ratelimit::raw(scenario, &target, duration).await {
            emit_in(&report::FIELDS.ratelimit, ratelimit::RAW_IMPL, name, result);
        }
    }
    for scenario in cache::Scenario::ALL {
        if !runs_cache(args.scenario, scenario) {
            continue;
        }
        let name = scenario.name();
        for (near, imp) in [(false, IMPL), (true, cache::IMPL_NEAR)] {
            eprintln!("[lock-bench] cache/{name} {imp} ({:.1}s)", args.duration);
            let result = cache::run(scenario, near, &target, duration).await;
            emit_in(&report::FIELDS.cache, imp, name, result);
        }
    }
    if matches!(
        args.scenario,
        Which::All | Which::Cache | Which::CachePushDelay
    ) {
        eprintln!(
            "[lock-bench] cache/push-delay ({} writes)",
            cache::push::WRITES
        );
        let result = cache::push::run(&target, &child_flags).await;
        emit_in(
            &report::FIELDS.cache,
            cache::IMPL_NEAR,
            "push-delay",
            result,
        );
    }
    if let Some(handle) = &prometheus {
        // Shows the recorder really saw the lock's metrics.
        for line in handle.render().lines() {
            if line.starts_with(lock_core::lock::telemetry::ACQUISITIONS_TOTAL) {
                eprintln!("[lock-bench] recorded: {line}");
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The exit of a scenario's child process: its error, if any, as a line to the lock-bench
/// that started it.
fn child_exit(outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!("{}", json!({ "error": error }));
            ExitCode::FAILURE
        }
    }
}

/// Percentiles of 1,000 sequential PINGs on `lock`'s connection (after 100 to warm up).
async fn ping_round_trips(lock: &RedisLock) -> Value {
    let mut samples = Vec::with_capacity(1000);
    let client = lock.client();
    for i in 0..1100 {
        match client.ping().await {
            Ok(rtt) if i >= 100 => samples.push(report::micros(rtt)),
            Ok(_) => {}
            Err(_) => return Value::Null,
        }
    }
    report::percentiles(samples)
}

fn runtime_name(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::MultiThread => "multi-thread",
        Flavour::CurrentThread => "current-thread",
    }
}

async fn connect(target: &Target, watchdog_timeout: Option<Duration>) -> Result<RedisLock, String> {
    let mut config = RedisLockConfig::default();
    if let Some(timeout) = watchdog_timeout {
        config = config.watchdog_timeout(timeout);
    }
    let redis = connect_client(target).await?;
    let lock = RedisLock::new(&redis, config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    // Fail here, naming the cause, rather than as a scenario full of errors.
    lock.client()
        .ping()
        .await
        .map_err(|e| format!("Redis does not answer: {e}"))?;
    Ok(lock)
}

/// A client of its own to `target`.
async fn connect_client(target: &Target) -> Result<RedisClient, String> {
    RedisClient::connect(RedisConfig::from(target.address.clone()).instance_id("lock-bench"))
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// Runs `body` on a fresh client, adding `redis_cmds_per_acquisition` (every command the
/// server ran, the client's connection set-up included, as the peers' harness counts them) and
/// `evalsha_per_acquisition` (script calls alone: 2.0 means no attempt was wasted).
async fn measured<F, Fut>(target: &Target, body: F) -> Result<Map<String, Value>, String>
where
    F: FnOnce(RedisLock) -> Fut,
    Fut: Future<Output = Map<String, Value>>,
{
    let before = target.command_calls().await?;
    let lock = connect(target, None).await?;
    let mut line = body(lock.clone()).await;
    let calls = target.command_calls().await?.since(before, 1);
    let acquisitions = line
        .get("acquisitions")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let per = |n: u64| match acquisitions {
        0 => Value::Null,
        a => json!((n as f64 / a as f64 * 100.0).round() / 100.0),
    };
    line.insert("redis_cmds_per_acquisition".into(), per(calls.total));
    line.insert("evalsha_per_acquisition".into(), per(calls.evalsha));
    Ok(line)
}
