//! One stress run: start Redis (and a fault proxy), start the workers, inject the fault until the
//! run's time is up, then check the history.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use lock_testkit::checker::{self, Report};
use lock_testkit::fenced::FencedResource;
use lock_testkit::history::{self, Event, Op, Phase, Recorder, monotonic_ns};
use lock_testkit::proxy::FaultProxy;
use lock_testkit::{RedisCluster, RedisSentinel, RedisServer};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep};

use super::Fault;
use super::workload::{self, Faults, KEY, RATE_LIMIT, REDIS, Verdict, Workload};

/// Error codes a worker may record: fail-closed lock errors, a stale write the fenced resource
/// rejected, a release that found its lease gone.
const ALLOWED_CODES: [&str; 4] = [
    "LOCK_ACQUISITION_FAILED",
    "LOCK_RELEASE_FAILED",
    "STALE",
    "NOT_HELD",
];
/// Why an overlap that nothing told its earlier holder about is still explained.
const KEY_LOSS: &str = "Redis lost the key between the two grants";
/// The worker that takes what a queue run left, after the faults.
const DRAINER: &str = "drainer";
/// The key prefix of the memory filler in the eviction fault: the only keys allowed without TTL.
const FILLER: &str = "filler:";

/// What to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// What the workers do.
    pub workload: Workload,
    /// The fault to inject.
    pub fault: Fault,
    /// Worker processes (default 8).
    pub workers: usize,
    /// How long workers start new iterations.
    pub duration: Duration,
    /// Iterations per worker at most.
    pub iterations: u64,
    /// `telco.platform.lock.watchdog-timeout` of the workers (their lease is the watchdog's).
    pub watchdog_timeout: Duration,
    /// `telco.platform.lock.redis.command-timeout` of the workers.
    pub command_timeout: Duration,
    /// Wait time of each acquire.
    pub wait: Duration,
    /// The longest a worker holds the lock around its write (a random part of it each time).
    pub hold: Duration,
    /// Time between two injections of the fault.
    pub fault_every: Duration,
    /// The `lock-worker` executable.
    pub worker_binary: PathBuf,
    /// The key (for the toolkit: the name and hash tag) the workers share.
    pub key: String,
}

impl Scenario {
    /// The short form `cargo test` runs: 8 workers for 5 s, watchdog 1 s.
    pub fn short(workload: Workload, fault: Fault, worker_binary: impl Into<PathBuf>) -> Scenario {
        Scenario {
            workload,
            fault,
            workers: 8,
            duration: Duration::from_secs(5),
            iterations: u64::MAX,
            watchdog_timeout: Duration::from_secs(1),
            command_timeout: Duration::from_millis(300),
            wait: Duration::from_secs(2),
            hold: Duration::from_millis(20),
            fault_every: match fault {
                Fault::ScriptFlush => Duration::from_millis(100),
                Fault::PauseHolder | Fault::PauseRedis | Fault::RestartRedis => {
                    Duration::from_millis(1500)
                }
                _ if fault.needs_sentinel() || fault.needs_cluster() => Duration::from_secs(2),
                _ => Duration::from_millis(600),
            },
            worker_binary: worker_binary.into(),
            key: KEY.into(),
        }
    }
}

/// What a run did and found.
#[derive(Debug)]
pub struct RunResult {
    /// What the workers did.
    pub workload: Workload,
    /// The fault injected.
    pub fault: Fault,
    /// Iterations started by all workers (acquire invocations).
    pub iterations: u64,
    /// Times the fault was injected.
    pub faults_injected: u64,
    /// The lock checker's verdict on the history (empty for a toolkit workload).
    pub report: Report,
    /// The toolkit checker's verdict on the history (`None` for the lock).
    pub verdict: Option<Verdict>,
    /// Keys left without a TTL at the end (filler keys excepted).
    pub keys_without_ttl: Vec<String>,
    /// For each killed holder: how long until someone else was granted the key.
    pub recoveries: Vec<Duration>,
    /// The bound those recoveries are held to: the lease TTL plus 1 s.
    pub recovery_bound: Duration,
    /// The longest time between two grants, from the first grant to the last.
    pub longest_without_grant: Duration,
    /// Workers that exited abnormally without being killed by the run.
    pub worker_failures: Vec<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Where the run's histories and worker logs are kept, when it found a problem.
    pub kept: Option<PathBuf>,
}

impl RunResult {
    /// Everything that makes the run a failure.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = match &self.verdict {
            Some(verdict) => verdict.violations.clone(),
            None => self.report.violations(),
        };
        problems.extend(
            self.keys_without_ttl
                .iter()
                .map(|k| format!("key without TTL left behind: {k}")),
        );
        problems.extend(
            self.recoveries
                .iter()
                .filter(|r| **r > self.recovery_bound)
                .map(|r| {
                    format!(
                        "the lock stayed taken {} ms after its holder was killed (bound {} ms)",
                        r.as_millis(),
                        self.recovery_bound.as_millis()
                    )
                }),
        );
        problems.extend(self.worker_failures.iter().cloned());
        if let Some(kept) = &self.kept {
            problems.push(format!(
                "histories and worker logs kept in {}",
                kept.display()
            ));
        }
        if self.fault != Fault::None && self.faults_injected == 0 {
            problems.push("the fault was never injected".into());
        }
        match &self.verdict {
            None if self.report.grants == 0 => problems.push("no lock was ever granted".into()),
            Some(verdict) if verdict.operations == 0 => {
                problems.push("no operation ever completed".into())
            }
            _ => {}
        }
        problems
    }

    /// One Markdown table row: a toolkit run's, the columns of [`TOOLKIT_HEADER`], or the
    /// lock's ([`table_row`](Self::table_row)).
    pub fn row(&self) -> String {
        let Some(verdict) = &self.verdict else {
            return self.table_row();
        };
        let problems = self.problems();
        format!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            self.workload,
            self.fault,
            self.faults_injected,
            verdict.counted,
            verdict.explained.len(),
            self.keys_without_ttl.len(),
            if problems.is_empty() {
                "ok".to_owned()
            } else {
                format!("**{} problems**", problems.len())
            }
        )
    }

    /// One Markdown table row, the columns of [`TABLE_HEADER`].
    pub fn table_row(&self) -> String {
        let overlaps = self.report.overlaps.len();
        let explained = self.report.overlaps.iter().filter(|o| o.explained).count();
        // Explained only by a key loss: neither lost() nor the fenced resource told the holder.
        let undetected = match self
            .report
            .overlaps
            .iter()
            .filter(|o| o.explanation == KEY_LOSS)
            .count()
        {
            0 => String::new(),
            n => format!(", {n} by key loss alone"),
        };
        let recovery = self
            .recoveries
            .iter()
            .max()
            .map_or("–".to_owned(), |r| format!("{} ms", r.as_millis()));
        let problems = self.problems();
        format!(
            "| {} | {} | {} | {} | {} | {} | {} ({} explained{}) | {} | {} | {} | {} | {} ms | {} |",
            self.fault,
            self.iterations,
            self.faults_injected,
            self.report.grants,
            self.report.duplicate_tokens.len() + self.report.order_violations.len(),
            self.report.acked_writes,
            overlaps,
            explained,
            undetected,
            self.report.stale_writes_rejected,
            self.report.stale_writes_accepted.len()
                + self.report.acked_writes_missing.len()
                + self.report.acked_writes_duplicated.len(),
            self.keys_without_ttl.len(),
            recovery,
            self.longest_without_grant.as_millis(),
            if problems.is_empty() {
                "ok".to_owned()
            } else {
                format!("**{} problems**", problems.len())
            }
        )
    }
}

/// The header matching a toolkit run's [`RunResult::row`].
pub const TOOLKIT_HEADER: &str = "| workload | fault | faults injected | counted | departures explained by the fault | keys leaked | verdict |\n|---|---|---|---|---|---|---|";

/// The header matching [`RunResult::table_row`].
pub const TABLE_HEADER: &str = "| fault | iterations | faults injected | grants | duplicate or out-of-order tokens | acked writes | overlapping beliefs | stale writes rejected | stale accepted / acked lost or doubled | keys leaked | lock free after kill (max) | longest without a grant | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";

struct Worker {
    name: String,
    child: Child,
    killed: bool,
}

/// The Redis the workers use: one server, a primary and one replica behind three Sentinels, or
/// a Cluster of three masters with a replica each.
/// One per run, so the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Topology {
    Single(RedisServer),
    Sentinel(RedisSentinel),
    Cluster(RedisCluster),
}

impl Topology {
    /// The server that takes writes now (for a Cluster: the first node).
    fn primary(&self) -> &RedisServer {
        match self {
            Topology::Single(redis) => redis,
            Topology::Sentinel(sentinel) => sentinel.master(),
            Topology::Cluster(cluster) => &cluster.nodes()[0],
        }
    }

    /// Every running data node.
    fn data_nodes(&self) -> Vec<&RedisServer> {
        match self {
            Topology::Single(redis) => vec![redis],
            Topology::Sentinel(sentinel) => sentinel.nodes().iter().collect(),
            Topology::Cluster(cluster) => cluster.nodes().iter().collect(),
        }
        .into_iter()
        .filter(|node| node.pid().is_some())
        .collect()
    }

    /// The one server of a fault that is not a failover.
    fn single(&mut self) -> &mut RedisServer {
        match self {
            Topology::Single(redis) => redis,
            Topology::Sentinel(_) | Topology::Cluster(_) => {
                unreachable!("only failovers run on Sentinel or a Cluster")
            }
        }
    }

    fn url(&self) -> String {
        match self {
            Topology::Single(redis) => redis.url(),
            Topology::Sentinel(sentinel) => sentinel.url(),
            Topology::Cluster(cluster) => cluster.url(),
        }
    }
}

/// Runs `scenario` and checks its history.
///
/// # Errors
/// A description of what could not be set up (Redis, the proxy, a worker process).
pub async fn run(scenario: &Scenario) -> Result<RunResult, String> {
    let started = Instant::now();
    let dir = tempfile::tempdir().map_err(|e| format!("run directory: {e}"))?;
    let mut builder = RedisServer::builder();
    if scenario.fault == Fault::Evict {
        builder = builder.args(["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"]);
    }
    let mut topology = if scenario.fault.needs_cluster() {
        Topology::Cluster(RedisCluster::start().await.map_err(|e| e.to_string())?)
    } else if scenario.fault.needs_sentinel() {
        Topology::Sentinel(RedisSentinel::start().await.map_err(|e| e.to_string())?)
    } else {
        Topology::Single(builder.start().await.map_err(|e| e.to_string())?)
    };
    let proxy = if scenario.fault.needs_proxy() {
        Some(
            FaultProxy::start(("127.0.0.1", topology.primary().port()))
                .await
                .map_err(|e| format!("fault proxy: {e}"))?,
        )
    } else {
        None
    };
    let address = proxy
        .as_ref()
        .map_or_else(|| topology.url(), FaultProxy::url);
    let controller = Recorder::create(&dir.path().join("history"), "controller")
        .map_err(|e| format!("history: {e}"))?;
    FencedResource::open(&dir.path().join("resource")).map_err(|e| format!("resource: {e}"))?;

    let mut evictions = Evictions::default();
    let mut workers = Vec::new();
    for i in 0..scenario.workers {
        workers.push(spawn_worker(
            scenario,
            dir.path(),
            &address,
            (&format!("worker-{i}"), i),
            scenario.duration,
        )?);
    }

    let redis_key = format!("lock:{{{}}}", scenario.key);
    let stop_at = started + scenario.duration;
    let mut faults_injected = 0;
    let mut replacements = 0;
    while Instant::now() + scenario.fault_every < stop_at {
        sleep(scenario.fault_every).await;
        let target = match scenario.fault {
            Fault::KillHolder | Fault::PauseHolder => {
                let turn = faults_injected;
                victim(scenario, &topology, &redis_key, &workers, turn, dir.path()).await
            }
            _ => None,
        };
        let injected = match scenario.fault {
            Fault::None => false,
            Fault::KillHolder => {
                let Some(victim) = target else { continue };
                let worker = &mut workers[victim];
                let _ = worker.child.start_kill();
                let _ = worker.child.wait().await;
                worker.killed = true;
                record_crash(&controller, &worker.name, &scenario.key);
                replacements += 1;
                let name = format!("{}.r{replacements}", worker.name);
                let remaining = stop_at.saturating_duration_since(Instant::now());
                let ordinal = workers.len();
                workers.push(spawn_worker(
                    scenario,
                    dir.path(),
                    &address,
                    (&name, ordinal),
                    remaining,
                )?);
                true
            }
            Fault::PauseHolder => {
                let Some(victim) = target else { continue };
                let pid = workers[victim].child.id().map(|p| Pid::from_raw(p as i32));
                if let Some(pid) = pid {
                    let _ = kill(pid, Signal::SIGSTOP);
                    if scenario.workload != Workload::Lock {
                        // The toolkit checkers count a stop as the end of what the victim
                        // believed; the lock's checker must find it out by the lock's signals.
                        record_crash(&controller, &workers[victim].name, "");
                    }
                    sleep(scenario.watchdog_timeout * 3 / 2).await;
                    let _ = kill(pid, Signal::SIGCONT);
                }
                pid.is_some()
            }
            Fault::PauseRedis => {
                let redis = topology.single();
                redis.pause().map_err(|e| e.to_string())?;
                sleep(scenario.watchdog_timeout * 3 / 2).await;
                redis.resume().map_err(|e| e.to_string())?;
                true
            }
            Fault::RestartRedis => {
                let from = monotonic_ns();
                let redis = topology.single();
                redis.kill().await.map_err(|e| e.to_string())?;
                redis.restart().await.map_err(|e| e.to_string())?;
                record_key_loss(&controller, &scenario.key, from);
                true
            }
            Fault::ClientKill => {
                let redis = topology.primary();
                let normal = redis.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).await;
                let pubsub = redis.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
                normal.is_ok() || pubsub.is_ok()
            }
            Fault::ScriptFlush => topology.primary().cmd(&["SCRIPT", "FLUSH"]).await.is_ok(),
            Fault::Evict => {
                let redis = topology.primary();
                for i in 0..8 {
                    let filler = format!("{FILLER}{}", faults_injected * 8 + i);
                    let _ = redis.cmd(&["SETRANGE", &filler, "262143", "x"]).await;
                }
                evictions.look(redis, &controller, &scenario.key).await;
                true
            }
            Fault::SentinelFailover
            | Fault::SentinelFailoverSynced
            | Fault::SentinelLaggingFailover
            | Fault::SentinelLaggingFailoverSynced => {
                let Topology::Sentinel(sentinel) = &topology else {
                    unreachable!("failovers run on Sentinel")
                };
                let from = monotonic_ns();
                if scenario.fault.lags() {
                    sentinel
                        .cut_off_replica()
                        .await
                        .map_err(|e| e.to_string())?;
                    sleep(Duration::from_secs(1)).await;
                }
                sentinel.failover().await.map_err(|e| e.to_string())?;
                // The old primary takes writes until it is demoted: they are lost as well.
                sentinel
                    .demote_old_master()
                    .await
                    .map_err(|e| e.to_string())?;
                if scenario.fault.loses_keys() {
                    record_key_loss(&controller, &scenario.key, from);
                }
                true
            }
            Fault::SentinelKillPrimary | Fault::SentinelKillPrimarySynced => {
                let Topology::Sentinel(sentinel) = &mut topology else {
                    unreachable!("failovers run on Sentinel")
                };
                let from = monotonic_ns();
                sentinel.kill_master().await.map_err(|e| e.to_string())?;
                if scenario.fault.loses_keys() {
                    record_key_loss(&controller, &scenario.key, from);
                }
                sentinel
                    .restart_replica()
                    .await
                    .map_err(|e| e.to_string())?;
                true
            }
            Fault::ClusterFailover | Fault::ClusterMigrateSlot => {
                let Topology::Cluster(cluster) = &topology else {
                    unreachable!("Cluster faults run on a Cluster")
                };
                let master = cluster
                    .node_for_key(&redis_key)
                    .await
                    .map_err(|e| e.to_string())?;
                if scenario.fault == Fault::ClusterFailover {
                    cluster.failover(master).await.map_err(|e| e.to_string())?;
                } else {
                    let slot = cluster
                        .slot_for_key(&redis_key)
                        .await
                        .map_err(|e| e.to_string())?;
                    let masters = cluster.masters().await.map_err(|e| e.to_string())?;
                    let to = masters.iter().copied().find(|port| *port != master);
                    let to = to.ok_or("a Cluster with one master")?;
                    cluster
                        .migrate_slot(slot, to)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                true
            }
            Fault::ClusterKillMaster | Fault::ClusterKillMasterSynced => {
                let Topology::Cluster(cluster) = &mut topology else {
                    unreachable!("Cluster faults run on a Cluster")
                };
                let master = cluster
                    .node_for_key(&redis_key)
                    .await
                    .map_err(|e| e.to_string())?;
                let from = monotonic_ns();
                let heir = cluster
                    .kill_master(master)
                    .await
                    .map_err(|e| e.to_string())?;
                if scenario.fault.loses_keys() {
                    record_key_loss(&controller, &scenario.key, from);
                }
                cluster
                    .restart_node(master, heir)
                    .await
                    .map_err(|e| e.to_string())?;
                true
            }
            Fault::Latency => {
                if let Some(proxy) = &proxy {
                    let ms = 5 + (monotonic_ns() / 1000) % 76;
                    proxy.set_latency(Duration::from_millis(ms));
                    sleep(scenario.fault_every / 2).await;
                    proxy.set_latency(Duration::ZERO);
                }
                true
            }
            Fault::DropConnections => {
                if let Some(proxy) = &proxy {
                    proxy.drop_connections();
                }
                true
            }
        };
        faults_injected += u64::from(injected);
    }

    let mut worker_failures = finish(&mut workers, scenario).await;
    if scenario.fault == Fault::Evict {
        // The workers' own writes evict keys too, after the last filler as well.
        evictions
            .look(topology.primary(), &controller, &scenario.key)
            .await;
    }
    if scenario.workload == Workload::Queue {
        // What the workers left in the queue, taken once the faults are over.
        let mut drainer = vec![spawn_worker(
            scenario,
            dir.path(),
            &address,
            (DRAINER, workers.len()),
            Duration::ZERO,
        )?];
        worker_failures.extend(finish(&mut drainer, scenario).await);
    }
    let events = history::load(&dir.path().join("history")).map_err(|e| format!("history: {e}"))?;
    let (report, verdict) = if scenario.workload == Workload::Lock {
        let resource = FencedResource::open(&dir.path().join("resource"))
            .map_err(|e| format!("resource: {e}"))?;
        let accepted = resource.accepted().map_err(|e| format!("resource: {e}"))?;
        let mut report = checker::check(&events, &accepted, &ALLOWED_CODES);
        explain_key_losses(&mut report, &events, scenario.fault);
        (report, None)
    } else {
        (
            Report::default(),
            Some(workload::check(scenario.workload, &events)),
        )
    };
    let recovery_bound = scenario.watchdog_timeout + Duration::from_secs(1);
    let mut keys_without_ttl = Vec::new();
    for node in topology.data_nodes() {
        keys_without_ttl.extend(self::keys_without_ttl(node).await);
    }
    keys_without_ttl.sort();
    keys_without_ttl.dedup();
    let mut result = RunResult {
        workload: scenario.workload,
        fault: scenario.fault,
        iterations: events
            .iter()
            .filter(|e| e.op == Op::Acquire && e.phase == Phase::Invoke)
            .count() as u64,
        faults_injected,
        report,
        verdict,
        keys_without_ttl,
        recoveries: recoveries(&events),
        recovery_bound,
        longest_without_grant: longest_without_grant(&events),
        worker_failures,
        elapsed: started.elapsed(),
        kept: None,
    };
    if !result.problems().is_empty() {
        result.kept = Some(dir.keep());
    }
    Ok(result)
}

/// Starts worker `name`; `ordinal` is a number no other worker of the run has.
fn spawn_worker(
    scenario: &Scenario,
    dir: &Path,
    address: &str,
    (name, ordinal): (&str, usize),
    duration: Duration,
) -> Result<Worker, String> {
    let log = std::fs::File::create(dir.join(format!("{name}.log")))
        .map_err(|e| format!("{name} log: {e}"))?;
    let mut command = Command::new(&scenario.worker_binary);
    if name == DRAINER {
        command.arg("--drain");
    }
    let child = command
        .arg("--run-dir")
        .arg(dir)
        .arg(format!("--workload={}", scenario.workload))
        .arg(format!("--ordinal={ordinal}"))
        .args(["--key", &scenario.key])
        .arg(format!("--duration={}ms", duration.as_millis()))
        .arg(format!("--iterations={}", scenario.iterations))
        .arg(format!("--wait={}ms", scenario.wait.as_millis()))
        .arg(format!("--hold={}ms", scenario.hold.as_millis()))
        .env("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", address)
        .env("TELCO_PLATFORM_LOCK_INSTANCE_ID", name)
        .env(
            "TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT",
            format!("{}ms", scenario.watchdog_timeout.as_millis()),
        )
        .env(
            "TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT",
            format!("{}ms", scenario.command_timeout.as_millis()),
        )
        .env(
            "TELCO_PLATFORM_LOCK_MIN_REPLICAS",
            scenario.fault.min_replicas().to_string(),
        )
        .env(
            format!(
                "TELCO_PLATFORM_LOCK_RATE_LIMITS_{}_RATE",
                RATE_LIMIT.0.to_uppercase()
            ),
            RATE_LIMIT.1,
        )
        .env(
            format!(
                "TELCO_PLATFORM_LOCK_RATE_LIMITS_{}_BURST",
                RATE_LIMIT.0.to_uppercase()
            ),
            RATE_LIMIT.2.to_string(),
        )
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn {name} ({}): {e}", scenario.worker_binary.display()))?;
    Ok(Worker {
        name: name.to_owned(),
        child,
        killed: false,
    })
}

/// The worker a kill or a stop hits: the lock's holder; for the toolkit a worker in the middle
/// of a run (an idempotent action, a single-flight action, a master's block) if one is, else the
/// next live worker in turn.
async fn victim(
    scenario: &Scenario,
    topology: &Topology,
    redis_key: &str,
    workers: &[Worker],
    turn: u64,
    dir: &Path,
) -> Option<usize> {
    if scenario.workload == Workload::Lock {
        return holder(topology.primary(), redis_key, workers).await;
    }
    let live: Vec<usize> = (0..workers.len()).filter(|&i| !workers[i].killed).collect();
    if scenario.workload.runs_actions() {
        let events = history::load(&dir.join("history")).unwrap_or_default();
        let mut running: BTreeMap<&str, bool> = BTreeMap::new();
        for event in events.iter().filter(|e| e.op == Op::Run) {
            running.insert(&event.process, event.phase == Phase::Invoke);
        }
        let runner = live
            .iter()
            .copied()
            .find(|&i| running.get(workers[i].name.as_str()) == Some(&true));
        if runner.is_some() {
            return runner;
        }
    }
    live.get(turn as usize % live.len().max(1)).copied()
}

/// The worker holding the key now, read from Redis (`H|<token>|<owner>…`, owner
/// `<instance id>/…`).
async fn holder(redis: &RedisServer, redis_key: &str, workers: &[Worker]) -> Option<usize> {
    let value = redis.cmd(&["GET", redis_key]).await.ok()?;
    let owner = value.strip_prefix("H|")?.split('|').nth(1)?;
    let name = owner.split('/').next()?;
    workers.iter().position(|w| w.name == name && !w.killed)
}

/// Marks that Redis may have lost `key` somewhere between `from` and now (ns): a `Crash` of the
/// process `redis` at now, with the window's start in `value`.
fn record_key_loss(controller: &Recorder, key: &str, from: u64) {
    let _ = controller.record(Event {
        reason: Some("key loss".to_owned()),
        value: i64::try_from(from).ok(),
        ..Event::new(REDIS, Op::Crash, Phase::Complete, key)
    });
}

fn record_crash(controller: &Recorder, process: &str, key: &str) {
    let _ = controller.record(Event::new(process, Op::Crash, Phase::Complete, key));
}

/// Redis' eviction count as last looked at, to turn evictions into key-loss windows.
struct Evictions {
    count: u64,
    /// When the last look was sent: later evictions belong to the next window.
    since: u64,
}

impl Default for Evictions {
    fn default() -> Self {
        Evictions {
            count: 0,
            since: monotonic_ns(),
        }
    }
}

impl Evictions {
    /// Records a key loss over the window since the last look if Redis evicted anything in it:
    /// it may have been the lock key.
    async fn look(&mut self, redis: &RedisServer, controller: &Recorder, key: &str) {
        let sent = monotonic_ns();
        let Ok(info) = redis.cmd(&["INFO", "stats"]).await else {
            return;
        };
        let count = info
            .lines()
            .find_map(|l| l.strip_prefix("evicted_keys:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        if count > self.count {
            record_key_loss(controller, key, self.since);
            self.count = count;
        }
        self.since = sent;
    }
}

/// Waits for the workers to finish their last iteration (killing any that hang) and reports the
/// ones that failed on their own.
async fn finish(workers: &mut [Worker], scenario: &Scenario) -> Vec<String> {
    let deadline =
        Instant::now() + scenario.wait + scenario.watchdog_timeout * 4 + Duration::from_secs(20);
    let mut failures = Vec::new();
    for worker in workers.iter_mut() {
        if worker.killed {
            continue;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, worker.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => failures.push(format!("{} exited with {status}", worker.name)),
            Ok(Err(e)) => failures.push(format!("{}: {e}", worker.name)),
            Err(_) => {
                let _ = worker.child.start_kill();
                failures.push(format!("{} hung at the end of the run", worker.name));
            }
        }
    }
    failures
}

/// The longest time between two consecutive grants of the key to anyone, or from the last grant
/// to the last acquisition started.
fn longest_without_grant(events: &[Event]) -> Duration {
    let mut granted: Vec<u64> = events
        .iter()
        .filter(|e| e.op == Op::Acquire && e.phase == Phase::Complete && e.ok == Some(true))
        .map(|e| e.t_ns)
        .collect();
    granted.sort_unstable();
    let last_asked = events
        .iter()
        .filter(|e| e.op == Op::Acquire && e.phase == Phase::Invoke)
        .map(|e| e.t_ns)
        .max();
    if let (Some(&last), Some(asked)) = (granted.last(), last_asked) {
        granted.push(asked.max(last));
    }
    let longest = granted.windows(2).map(|w| w[1] - w[0]).max();
    Duration::from_nanos(longest.unwrap_or(0))
}

/// For each killed holder: the time from its SIGKILL to the next grant of the key to anyone.
fn recoveries(events: &[Event]) -> Vec<Duration> {
    let mut recoveries = Vec::new();
    for crash in events
        .iter()
        .filter(|e| e.op == Op::Crash && e.process != REDIS)
    {
        // Only a holder at the time of the kill counts: its last acquire was granted and it had
        // not started a release.
        let last = events
            .iter()
            .rfind(|e| e.process == crash.process && e.t_ns <= crash.t_ns && e.op != Op::Crash);
        let was_holding = last.is_some_and(|e| {
            (e.op == Op::Acquire && e.phase == Phase::Complete && e.ok == Some(true))
                || (e.op == Op::Write)
        });
        if !was_holding {
            continue;
        }
        let next_grant = events.iter().find(|e| {
            e.t_ns > crash.t_ns
                && e.op == Op::Acquire
                && e.phase == Phase::Complete
                && e.ok == Some(true)
        });
        if let Some(next) = next_grant {
            recoveries.push(Duration::from_nanos(next.t_ns - crash.t_ns));
        }
    }
    recoveries
}

/// When Redis lost keys (restart without persistence, eviction), two holders can believe they
/// hold the key at once: the lock cannot know. Such overlaps are explained by the loss if a
/// data-loss window lies between the two grants. A grant is made at Redis somewhere between its
/// acquire's invocation and completion, so the first grant counts from its invocation: a slow
/// process may record its grant after the loss that ends it.
fn explain_key_losses(report: &mut Report, events: &[Event], fault: Fault) {
    if !fault.loses_keys() {
        return;
    }
    let faults = Faults::new(events);
    // (process, token) → (acquire invoked, acquire completed); events are in time order.
    let mut invoked: BTreeMap<&str, u64> = BTreeMap::new();
    let mut grants: BTreeMap<(&str, u64), (u64, u64)> = BTreeMap::new();
    for e in events.iter().filter(|e| e.op == Op::Acquire) {
        match (e.phase, e.ok, e.token) {
            (Phase::Invoke, ..) => {
                invoked.insert(&e.process, e.t_ns);
            }
            (Phase::Complete, Some(true), Some(token)) => {
                let from = invoked.get(e.process.as_str()).copied().unwrap_or(e.t_ns);
                grants.insert((&e.process, token), (from, e.t_ns));
            }
            _ => {}
        }
    }
    for overlap in report.overlaps.iter_mut().filter(|o| !o.explained) {
        let first = grants.get(&(overlap.first.as_str(), overlap.first_token));
        let second = grants.get(&(overlap.second.as_str(), overlap.second_token));
        if let (Some(&(first, _)), Some(&(_, second))) = (first, second) {
            if faults.lost_between(first, second) {
                overlap.explained = true;
                overlap.explanation = KEY_LOSS.into();
            }
        }
    }
}

async fn keys_without_ttl(redis: &RedisServer) -> Vec<String> {
    let mut leaked = Vec::new();
    let Ok(keys) = redis.cmd(&["KEYS", "*"]).await else {
        return leaked;
    };
    for key in keys
        .lines()
        .filter(|k| !k.is_empty() && !k.starts_with(FILLER))
    {
        if redis.cmd(&["PTTL", key]).await.ok().as_deref() == Some("-1") {
            leaked.push(key.to_owned());
        }
    }
    leaked
}

#[cfg(test)]
mod tests {
    use lock_testkit::checker::Overlap;

    use super::*;

    const MS: u64 = 1_000_000;

    fn acquire(ms: u64, process: &str, phase: Phase, token: Option<u64>) -> Event {
        Event {
            t_ns: ms * MS,
            ok: token.map(|_| true),
            token,
            ..Event::new(process, Op::Acquire, phase, KEY)
        }
    }

    /// `a` invokes at 10 ms and Redis grants at once; the key is evicted and the loss looked
    /// at by 15 ms; `a` records its grant only at 20 ms, and `b` is granted at 30 ms.
    #[test]
    fn a_loss_before_a_slow_grant_is_recorded_still_explains_the_overlap() {
        let events = vec![
            acquire(10, "a", Phase::Invoke, None),
            Event {
                value: Some((12 * MS) as i64),
                t_ns: 15 * MS,
                ..Event::new(REDIS, Op::Crash, Phase::Complete, KEY)
            },
            acquire(20, "a", Phase::Complete, Some(1)),
            acquire(25, "b", Phase::Invoke, None),
            acquire(30, "b", Phase::Complete, Some(2)),
        ];
        let overlap = |first: &str, first_token, second: &str, second_token| Overlap {
            key: KEY.into(),
            first: first.into(),
            second: second.into(),
            first_token,
            second_token,
            overlap_ns: 10 * MS,
            explained: false,
            explanation: String::new(),
        };
        let mut report = Report {
            overlaps: vec![overlap("a", 1, "b", 2), overlap("b", 2, "a", 1)],
            ..Report::default()
        };
        explain_key_losses(&mut report, &events, Fault::Evict);
        assert!(report.overlaps[0].explained, "{:?}", report.overlaps[0]);
        // A loss before the first acquire began explains nothing.
        assert!(!report.overlaps[1].explained, "{:?}", report.overlaps[1]);
    }
}
