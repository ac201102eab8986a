//! The peers' three scenarios (../shared/peers/README.md), with the same workers, keys, lease,
//! wait and hold, measured the way the peers measure them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use lock_starter::lock::{AcquireOptions, DistributedLock, Lease, ReleaseOutcome};
use serde_json::{Map, Value, json};

use crate::report::{micros, percentiles, round1, round3};

/// Lease of every acquisition: 10 s, fixed (the peers' lease; no watchdog).
const LEASE: Duration = Duration::from_secs(10);
/// Longest wait of one acquisition: 10 s.
const MAX_WAIT: Duration = Duration::from_secs(10);
/// The critical section of `contended`: 1 ms.
const HOLD: Duration = Duration::from_millis(1);

/// One of the peers' scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// 1 worker, keys `bench:u:<i mod 1000>`, no hold.
    Uncontended,
    /// 32 workers, one key each (`bench:p:<worker>`), no hold.
    Parallel,
    /// 8 workers on one key (`bench:c`), holding it 1 ms.
    Contended,
}

impl Scenario {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Parallel => "parallel",
            Scenario::Contended => "contended",
        }
    }

    pub(crate) fn workers(self) -> usize {
        match self {
            Scenario::Uncontended => 1,
            Scenario::Parallel => 32,
            Scenario::Contended => 8,
        }
    }

    fn key(self, worker: usize, cycle: usize) -> String {
        match self {
            Scenario::Uncontended => format!("bench:u:{}", cycle % 1000),
            Scenario::Parallel => format!("bench:p:{worker}"),
            Scenario::Contended => "bench:c".to_owned(),
        }
    }
}

/// How a `contended` holder spends its 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HoldSleep {
    /// `std::thread::sleep` inside `tokio::task::block_in_place`: the OS sleeps ~1.05 ms.
    Os,
    /// `tokio::time::sleep`, as the rslock peer does: Tokio's 1 ms timer wheel rounds it up
    /// to the next tick, so a hold lasts 1–2 ms and caps cycles/s well below 1,000.
    Tokio,
}

/// What the workers share in `contended`: the last release time and who holds the key, to
/// measure hand-offs and catch two holders at once.
struct Shared {
    t0: Instant,
    /// ns since `t0` at the start of the last release call; 0 = none yet.
    last_release_ns: AtomicU64,
    /// 0 = free, else worker id + 1.
    holder: AtomicUsize,
}

#[derive(Default)]
struct Stats {
    acquire_us: Vec<f64>,
    release_us: Vec<f64>,
    handoff_us: Vec<f64>,
    hold_us: Vec<f64>,
    acquisitions: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Stats {
    fn error(&mut self, message: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message());
        }
    }
}

async fn worker(
    id: usize,
    scenario: Scenario,
    hold: HoldSleep,
    lock: Arc<dyn DistributedLock>,
    shared: Arc<Shared>,
    deadline: Instant,
    fair: bool,
) -> Stats {
    let contended = scenario == Scenario::Contended;
    let mut options = AcquireOptions::new(Lease::Fixed(LEASE))
        .wait_time(MAX_WAIT)
        .expect("MAX_WAIT is a wait time");
    if fair {
        options = options.fair();
    }
    let mut stats = Stats::default();
    let mut cycle = 0;
    while Instant::now() < deadline {
        let key = scenario.key(id, cycle);
        cycle += 1;
        let started = Instant::now();
        let handle = match lock.acquire_with(&key, options).await {
            Ok(handle) => handle,
            Err(error) => {
                stats.error(|| format!("acquire {key}: {error}"));
                continue;
            }
        };
        let acquired = Instant::now();
        stats.acquire_us.push(micros(acquired - started));
        stats.acquisitions += 1;
        if contended {
            let last = shared.last_release_ns.load(SeqCst);
            if last > 0 {
                let now_ns = (acquired - shared.t0).as_nanos() as u64;
                stats
                    .handoff_us
                    .push(now_ns.saturating_sub(last) as f64 / 1e3);
            }
            if shared.holder.swap(id + 1, SeqCst) != 0 {
                stats.error(|| format!("two holders of {key} at once"));
            }
            let holding = Instant::now();
            match hold {
                HoldSleep::Os => os_sleep(HOLD),
                HoldSleep::Tokio => tokio::time::sleep(HOLD).await,
            }
            stats.hold_us.push(micros(holding.elapsed()));
            shared.holder.store(0, SeqCst);
        }
        let releasing = Instant::now();
        if contended {
            let ns = (releasing - shared.t0).as_nanos() as u64;
            shared.last_release_ns.store(ns.max(1), SeqCst);
        }
        match handle.release().await {
            Ok(ReleaseOutcome::Released) => stats.release_us.push(micros(releasing.elapsed())),
            Ok(ReleaseOutcome::NotHeld) => stats.error(|| format!("release {key}: not held")),
            Err(error) => stats.error(|| format!("release {key}: {error}")),
        }
    }
    stats
}

/// Sleeps `duration` in the OS, off the runtime's worker where the runtime allows it (on a
/// current-thread runtime nothing else could run meanwhile anyway).
fn os_sleep(duration: Duration) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| std::thread::sleep(duration));
    } else {
        std::thread::sleep(duration);
    }
}

/// Runs `scenario` for `duration` and returns the peers' fields (all but
/// `redis_cmds_per_acquisition`, which the caller measures around the run). With `fair`, every
/// acquisition is a fair one, reported as impl [`crate::IMPL_FAIR`].
pub(crate) async fn run(
    scenario: Scenario,
    hold: HoldSleep,
    lock: Arc<dyn DistributedLock>,
    duration: Duration,
    fair: bool,
) -> Map<String, Value> {
    let shared = Arc::new(Shared {
        t0: Instant::now(),
        last_release_ns: AtomicU64::new(0),
        holder: AtomicUsize::new(0),
    });
    let cpu_before = crate::report::cpu_seconds();
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..scenario.workers())
        .map(|id| {
            tokio::spawn(worker(
                id,
                scenario,
                hold,
                Arc::clone(&lock),
                Arc::clone(&shared),
                deadline,
                fair,
            ))
        })
        .collect();
    let mut all = Stats::default();
    let mut per_worker = Vec::new();
    for task in tasks {
        let stats = task.await.expect("a benchmark worker panicked");
        per_worker.push(stats.acquisitions);
        all.acquisitions += stats.acquisitions;
        all.errors += stats.errors;
        all.first_error = all.first_error.or(stats.first_error);
        all.acquire_us.extend(stats.acquire_us);
        all.release_us.extend(stats.release_us);
        all.handoff_us.extend(stats.handoff_us);
        all.hold_us.extend(stats.hold_us);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = crate::report::cpu_seconds() - cpu_before;
    if let Some(error) = &all.first_error {
        eprintln!(
            "[lock-bench] {}: {} errors, first: {error}",
            scenario.name(),
            all.errors
        );
    }
    let mut line = Map::new();
    let imp = if fair { crate::IMPL_FAIR } else { crate::IMPL };
    line.insert("impl".into(), json!(imp));
    line.insert("scenario".into(), json!(scenario.name()));
    line.insert("workers".into(), json!(scenario.workers()));
    line.insert("duration_s".into(), json!(round3(elapsed)));
    line.insert("acquisitions".into(), json!(all.acquisitions));
    line.insert(
        "cycles_per_s".into(),
        json!(round1(all.acquisitions as f64 / elapsed)),
    );
    line.insert("acquire_us".into(), percentiles(all.acquire_us));
    line.insert("release_us".into(), percentiles(all.release_us));
    let handoff = if scenario == Scenario::Contended {
        percentiles(all.handoff_us)
    } else {
        Value::Null
    };
    line.insert("handoff_us".into(), handoff);
    line.insert("per_worker_min".into(), json!(per_worker.iter().min()));
    line.insert("per_worker_max".into(), json!(per_worker.iter().max()));
    line.insert("errors".into(), json!(all.errors));
    line.insert("client_cpu_s".into(), json!(round3(cpu)));
    line.insert("version".into(), json!(crate::report::VERSION));
    if scenario == Scenario::Contended {
        let hold = match hold {
            HoldSleep::Os => "os",
            HoldSleep::Tokio => "tokio",
        };
        line.insert("hold_sleep".into(), json!(hold));
        line.insert("hold_us".into(), percentiles(all.hold_us));
    }
    line
}
