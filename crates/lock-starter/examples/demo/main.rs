//! The demo: three pods race for one bill run, the winner crashes mid-run, another pod takes it
//! over once the lease lapses — and nobody ever runs it twice at once. Then four replicas share
//! a catalog warm-up through shared values (`warmup.rs`): one loads, the others wait, and when
//! the loader is killed one waiter takes over. Then three gateway replicas share one rate
//! limit (`limit.rs`) and are admitted no more than it allows together. Last, two pods share a
//! product cache with the in-process tier on (`cache.rs`): the catalog is asked once, and a
//! price change in one pod reaches the other's memory by Redis' push, not by the TTL.
//!
//! ```text
//! scripts/demo.sh          # installs redis-server if missing, builds, runs this
//! ```
//!
//! Each "pod" is a separate OS process running the `bill_run` example. Without configuration the
//! demo starts a private `redis-server` on a free loopback port; with
//! `TELCO_PLATFORM_LOCK_REDIS_ADDRESS` set it uses that Redis instead. It prints a timeline,
//! checks it, and exits non-zero if two pods ever held the period at once (or any other check
//! fails).
//!
//! With `--hold` (`scripts/demo.sh --hold`) the demo then keeps its Redis running with one more
//! pod stuck in the next period's bill run, its watchdog renewing the lease, and prints the
//! `platform-lock` commands that inspect and force-release it from another terminal. It ends
//! when the stuck pod has lost its lease to the forced release, or on Ctrl-C.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod cache;
mod limit;
mod warmup;

use clap::Parser;
use lock_testkit::RedisServer;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const PERIOD: &str = "2026-11";
const WATCHDOG_TIMEOUT: &str = "3s";
/// Redis command timeout of the pods: a third of the watchdog timeout.
const COMMAND_TIMEOUT: &str = "1s";
const BATCHES: u32 = 12;
const BATCH_TIME: &str = "400ms";
/// The first round's pods give up quickly: a retried trigger, not a queue.
const FIRST_WAIT: &str = "1s";
/// The second round's pods wait long enough to see the crashed holder's lease lapse.
const SECOND_WAIT: &str = "15s";
/// The winner is killed after writing this many batches.
const KILL_AFTER_BATCHES: u64 = 3;
/// Nothing in the demo should take this long; if it does, something hangs.
const DEADLINE: Duration = Duration::from_secs(90);
/// Pods of one round start acquiring at the same instant, this long after they are spawned
/// (so process start-up does not decide the race).
const START_DELAY: Duration = Duration::from_millis(1500);
/// The demo's keys get their own prefix, so it never touches a real service's locks.
const KEY_PREFIX: &str = "platform-lock-demo:";
/// How late after the crash the takeover may come: one watchdog timeout plus slack for a
/// loaded machine.
const TAKEOVER_BOUND: Duration = Duration::from_secs(3 + 2);

/// The period of the stuck pod `--hold` leaves running (the demo's own run is `PERIOD`).
const HELD_PERIOD: &str = "2026-12";

#[derive(Debug, Parser)]
#[command(about = "Three pods race for one bill run; the winner crashes and another takes over")]
struct Args {
    /// After the checks, keep Redis running with a pod stuck holding `bill-run:2026-12`, print
    /// the platform-lock commands to inspect and force-release it, and end once it is released.
    #[arg(long)]
    hold: bool,
}

#[derive(Debug, Clone)]
struct Event {
    t_us: u64,
    pod: String,
    event: String,
    fields: Value,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("demo failed: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<bool, String> {
    let (address, private_redis) = redis().await?;
    let pod_binary = sibling_binary("bill_run")?;
    let ledger = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let start_us = now_us();
    let mut timeline = Timeline {
        start_us,
        events: Vec::new(),
    };

    println!("platform-lock demo: the bill run of {PERIOD} must run on exactly one pod");
    println!(
        "  lock key bill-run:{PERIOD}, watchdog lease (watchdog-timeout {WATCHDOG_TIMEOUT}, renewed every third)"
    );
    println!(
        "  {BATCHES} batches of {BATCH_TIME}; ledger {}",
        ledger.path().display()
    );
    println!();
    println!("Round 1: three pods are triggered at once (wait-time {FIRST_WAIT})");
    let mut pods: BTreeMap<String, Child> = BTreeMap::new();
    pods.extend(spawn_round(
        1..=3,
        FIRST_WAIT,
        &pod_binary,
        &address,
        ledger.path(),
        &tx,
    )?);

    // Let the winner write a few batches, then crash it.
    let mut exited = 0;
    let winner = loop {
        let event = next_event(&mut rx).await?;
        if event.event == "exited" {
            exited += 1;
            if exited == 3 {
                return Err(
                    "every pod exited before the bill run got going (see their output above)"
                        .into(),
                );
            }
            continue;
        }
        timeline.show(&event);
        let done = event.fields["batch"].as_u64().map(|b| b + 1);
        let is_kill_point = event.event == "batch_done" && done == Some(KILL_AFTER_BATCHES);
        let pod = event.pod.clone();
        timeline.events.push(event);
        if is_kill_point {
            break pod;
        }
    };
    let mut victim = pods.remove(&winner).expect("the winner is one of the pods");
    timeline.kill(&winner, &mut victim).await?;

    println!();
    println!("Round 2: two pods are triggered again (a scheduler retry; wait-time {SECOND_WAIT})");
    println!(
        "  {winner}'s lease is still in Redis but no longer renewed: it lapses within {WATCHDOG_TIMEOUT}"
    );
    pods.extend(spawn_round(
        4..=5,
        SECOND_WAIT,
        &pod_binary,
        &address,
        ledger.path(),
        &tx,
    )?);
    drop(tx);
    while let Some(event) = tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .map_err(|_| "a pod hangs: no event for 90 s".to_owned())?
    {
        if event.event == "exited" {
            continue;
        }
        timeline.record(event);
    }
    for (name, mut child) in pods {
        let status = child.wait().await.map_err(|e| format!("{name}: {e}"))?;
        if !matches!(status.code(), Some(0 | 75)) {
            println!("  {name} exited with {status}");
        }
    }

    println!();
    let passed = check(&timeline, &winner, ledger.path());
    let passed = warmup::run(&address).await? && passed;
    let passed = limit::run(&address).await? && passed;
    let passed = cache::run(&address).await? && passed;
    println!();
    println!(
        "{}",
        if passed {
            "Demo passed."
        } else {
            "Demo FAILED."
        }
    );
    if !passed {
        return Ok(false);
    }
    if args.hold {
        return hold(
            &address,
            private_redis.is_some(),
            &pod_binary,
            ledger.path(),
            &timeline,
        )
        .await;
    }
    println!("Run `scripts/demo.sh --hold` to end with a pod holding a lock you can inspect and");
    println!(
        "force-release with the platform-lock CLI (docs/operations.md, \"The `platform-lock` CLI\")."
    );
    Ok(true)
}

/// `--hold`: a pod stuck in its bill run (one batch that never ends) holds `bill-run:2026-12`
/// on a renewed watchdog lease until somebody force-releases it; returns once it has noticed.
async fn hold(
    address: &str,
    private_redis: bool,
    pod_binary: &Path,
    ledger: &Path,
    timeline: &Timeline,
) -> Result<bool, String> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let run = PodRun {
        name: "pod-6",
        period: HELD_PERIOD,
        batch_time: "24h",
        wait_time: FIRST_WAIT,
        start_at_unix_ms: now_us() / 1000,
    };
    // Its own ledger: the demo's one is complete, and a completed period is not run again.
    let mut pod = spawn_pod(pod_binary, &run, address, &ledger.join(HELD_PERIOD), &tx)?;
    drop(tx);
    println!();
    println!("Hold: pod-6 is triggered for {HELD_PERIOD} and gets stuck in its first batch");
    loop {
        let event = next_event(&mut rx).await?;
        if event.event != "exited" {
            timeline.show(&event);
        }
        match event.event.as_str() {
            "acquired" => break,
            "exited" | "not_acquired" | "config_error" => {
                return Err("pod-6 did not acquire bill-run:2026-12 (see above)".into());
            }
            _ => {}
        }
    }
    // Yours is shown as given unless it holds credentials, which stay off the screen.
    let shown_address = if private_redis || !address.contains('@') {
        address.to_owned()
    } else {
        "...   # your address, as set in the demo's terminal (it holds a password)".to_owned()
    };
    let cli = std::env::current_exe()
        .ok()
        .and_then(|me| Some(me.parent()?.parent()?.join("platform-lock")))
        .filter(|cli| cli.exists());
    println!();
    println!("Its watchdog keeps renewing the lease, so it never lapses. From another terminal:");
    println!();
    println!("  export TELCO_PLATFORM_LOCK_REDIS_ADDRESS={shown_address}");
    println!("  export TELCO_PLATFORM_LOCK_KEY_PREFIX={KEY_PREFIX}");
    println!("  platform-lock list");
    println!("  platform-lock status bill-run:{HELD_PERIOD}");
    println!("  platform-lock release --force bill-run:{HELD_PERIOD}");
    println!();
    match cli {
        Some(cli) => println!(
            "(platform-lock: `cargo install --path crates/lock-cli`, or {})",
            cli.display()
        ),
        None => println!("(platform-lock: `cargo install --path crates/lock-cli`)"),
    }
    if private_redis {
        println!("Waiting for the forced release (Ctrl-C ends the demo and stops its Redis)...");
    } else {
        println!("Waiting for the forced release (Ctrl-C ends the demo)...");
    }
    let lost = loop {
        let event = tokio::select! {
            event = rx.recv() => event,
            _ = tokio::signal::ctrl_c() => {
                println!("Interrupted; pod-6 still held the lock.");
                return Ok(true);
            }
        };
        let Some(event) = event else {
            return Err("pod-6 exited without losing its lease (see above)".into());
        };
        if event.event == "exited" {
            continue;
        }
        timeline.show(&event);
        if event.event == "lease_lost" {
            break event;
        }
    };
    let status = tokio::time::timeout(DEADLINE, pod.wait())
        .await
        .map_err(|_| "pod-6 did not stop after losing its lease".to_owned())?
        .map_err(|e| format!("pod-6: {e}"))?;
    println!();
    println!(
        "  [ok] pod-6 lost its lease ({}) and stopped its run ({status})",
        lost.fields["reason"].as_str().unwrap_or("?")
    );
    Ok(true)
}

/// One pod process: which bill run it is triggered for, and how.
struct PodRun<'a> {
    name: &'a str,
    period: &'a str,
    batch_time: &'a str,
    wait_time: &'a str,
    start_at_unix_ms: u64,
}

/// The Redis to use: `TELCO_PLATFORM_LOCK_REDIS_ADDRESS`, or a private server started here
/// (kept alive by the returned value, stopped when it drops).
async fn redis() -> Result<(String, Option<RedisServer>), String> {
    if let Ok(address) = std::env::var("TELCO_PLATFORM_LOCK_REDIS_ADDRESS") {
        println!("Using the Redis at TELCO_PLATFORM_LOCK_REDIS_ADDRESS");
        return Ok((address, None));
    }
    let server = RedisServer::start()
        .await
        .map_err(|e| format!("could not start a private redis-server: {e}"))?;
    println!(
        "Started a private redis-server on 127.0.0.1:{} (stopped when the demo ends)",
        server.port()
    );
    Ok((server.url(), Some(server)))
}

/// The `bill_run` example, built next to this one.
fn sibling_binary(name: &str) -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = me.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found; build it first: cargo build -p lock-starter --examples (scripts/demo.sh does)",
            path.display()
        ))
    }
}

/// Pods `numbers` of the bill run, waiting `wait_time` for the lock, all triggered at once when
/// [`START_DELAY`] has passed.
fn spawn_round(
    numbers: std::ops::RangeInclusive<u32>,
    wait_time: &str,
    binary: &Path,
    address: &str,
    ledger: &Path,
    events: &mpsc::UnboundedSender<Event>,
) -> Result<Vec<(String, Child)>, String> {
    let start_at = now_us() / 1000 + START_DELAY.as_millis() as u64;
    numbers
        .map(|n| {
            let name = format!("pod-{n}");
            let run = PodRun {
                name: &name,
                period: PERIOD,
                batch_time: BATCH_TIME,
                wait_time,
                start_at_unix_ms: start_at,
            };
            let child = spawn_pod(binary, &run, address, ledger, events)?;
            Ok((name, child))
        })
        .collect()
}

fn spawn_pod(
    binary: &Path,
    run: &PodRun<'_>,
    address: &str,
    ledger: &Path,
    events: &mpsc::UnboundedSender<Event>,
) -> Result<Child, String> {
    let mut command = pod_command(binary, run.name, address);
    command
        .args(["--period", run.period, "--batches", &BATCHES.to_string()])
        .args(["--batch-time", run.batch_time, "--ledger"])
        .arg(ledger)
        .arg(format!("--start-at-unix-ms={}", run.start_at_unix_ms))
        .env("TELCO_PLATFORM_LOCK_WAIT_TIME", run.wait_time)
        .env("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", WATCHDOG_TIMEOUT);
    spawn(command, run.name, events)
}

/// A pod process of `binary` named `name` on the Redis at `address`, under the demo's prefix.
fn pod_command(binary: &Path, name: &str, address: &str) -> Command {
    let mut command = Command::new(binary);
    command
        .env("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", address)
        .env("TELCO_PLATFORM_LOCK_INSTANCE_ID", name)
        // At most a third of the short watchdog timeout, so one slow renewal cannot outlast
        // a lease (the library warns otherwise).
        .env("TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT", COMMAND_TIMEOUT)
        .env("TELCO_PLATFORM_LOCK_KEY_PREFIX", KEY_PREFIX);
    command
}

/// Starts `command` as pod `name`: its JSON events on stdout and its log lines on stderr join
/// `events`, and an `exited` event follows its last line.
fn spawn(
    mut command: Command,
    name: &str,
    events: &mpsc::UnboundedSender<Event>,
) -> Result<Child, String> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn {name}: {e}"))?;
    // The pod's log lines join the timeline, labelled with the pod.
    let stderr = child.stderr.take().expect("piped stderr");
    let (log_events, log_name) = (events.clone(), name.to_owned());
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let event = Event {
                t_us: now_us(),
                pod: log_name.clone(),
                event: "log".into(),
                fields: Value::String(line),
            };
            if log_events.send(event).is_err() {
                return;
            }
        }
    });
    let stdout = child.stdout.take().expect("piped stdout");
    let (events, name) = (events.clone(), name.to_owned());
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let event = match serde_json::from_str::<Value>(&line) {
                Ok(fields) => Event {
                    t_us: fields["t_us"].as_u64().unwrap_or_else(now_us),
                    pod: name.clone(),
                    event: fields["event"].as_str().unwrap_or("?").to_owned(),
                    fields,
                },
                Err(_) => Event {
                    t_us: now_us(),
                    pod: name.clone(),
                    event: "output".into(),
                    fields: Value::String(line),
                },
            };
            if events.send(event).is_err() {
                return;
            }
        }
        let _ = events.send(Event {
            t_us: now_us(),
            pod: name,
            event: "exited".into(),
            fields: Value::Null,
        });
    });
    Ok(child)
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<Event>) -> Result<Event, String> {
    match tokio::time::timeout(DEADLINE, rx.recv()).await {
        Ok(Some(event)) => Ok(event),
        Ok(None) => Err("every pod exited before the run got going".into()),
        Err(_) => Err("no event for 90 s".into()),
    }
}

struct Timeline {
    start_us: u64,
    events: Vec<Event>,
}

impl Timeline {
    fn show(&self, event: &Event) {
        let at = event.t_us.saturating_sub(self.start_us) as f64 / 1e6;
        println!("  {at:>7.3}s  {:<6}  {}", event.pod, describe(event));
    }

    /// Shows `event` and keeps it.
    fn record(&mut self, event: Event) {
        self.show(&event);
        self.events.push(event);
    }

    /// Kills the pod `name` with SIGKILL, waits for it to exit, and records its death.
    async fn kill(&mut self, name: &str, child: &mut Child) -> Result<(), String> {
        child
            .start_kill()
            .map_err(|e| format!("SIGKILL {name}: {e}"))?;
        let _ = child.wait().await;
        self.record(Event {
            t_us: now_us(),
            pod: name.to_owned(),
            event: "killed".into(),
            fields: Value::Null,
        });
        Ok(())
    }
}

/// A scene's checks, one printed line each.
struct Checks {
    ok: bool,
}

impl Checks {
    /// Starts the list under its heading.
    fn new() -> Self {
        println!("Checks:");
        Checks { ok: true }
    }

    /// Prints one check.
    fn report(&mut self, passed: bool, text: String) {
        println!("  [{}] {text}", if passed { "ok" } else { "FAILED" });
        self.ok &= passed;
    }

    /// Whether every check passed.
    fn passed(self) -> bool {
        self.ok
    }
}

fn describe(event: &Event) -> String {
    let f = &event.fields;
    match event.event.as_str() {
        "started" if event.pod.starts_with("app-") => "started, needs the catalog".into(),
        "started" if event.pod.starts_with("shop-") => format!(
            "started as the {} (near-cache-entries {})",
            f["role"].as_str().unwrap_or("?"),
            f["near_cache_entries"]
        ),
        "started" => format!("triggered, acquiring {}", f["key"].as_str().unwrap_or("?")),
        "acquired" => format!("ACQUIRED the lock (fencing token {})", f["fencing_token"]),
        "not_acquired" => {
            let d = &f["details"];
            let text = |k: &str| d[k].as_str().unwrap_or("?").to_owned();
            if text("reason") == "held_by_another_owner" {
                format!(
                    "fail closed: {} (HTTP {}), held by {} (TTL {} ms), gave up after {} ms",
                    text("code"),
                    f["http_status"],
                    text("holder"),
                    text("holderTtlMs"),
                    text("waitedMs")
                )
            } else {
                format!(
                    "fail closed: {} (HTTP {}): {}",
                    text("code"),
                    f["http_status"],
                    text("message")
                )
            }
        }
        "batch_done" => format!(
            "batch {}/{} written",
            f["batch"].as_u64().unwrap_or(0) + 1,
            f["of"]
        ),
        "batch_skipped" => format!(
            "batch {} already in the ledger, skipped",
            f["batch"].as_u64().unwrap_or(0) + 1
        ),
        "killed" => "*** SIGKILL (crash mid-run): it stops renewing ***".into(),
        "completed" => "bill run completed".into(),
        "already_completed" => format!(
            "bill run already completed by {}, nothing to do",
            f["by"].as_str().unwrap_or("?")
        ),
        "releasing" => "work done, releasing".into(),
        "released" => format!("release: {}", f["outcome"].as_str().unwrap_or("?")),
        "lease_lost" => format!("LEASE LOST: {}", f["reason"].as_str().unwrap_or("?")),
        "write_refused" => format!(
            "ledger refused a stale write: {}",
            f["reason"].as_str().unwrap_or("?")
        ),
        "config_error" => format!(
            "configuration error: {}",
            f["message"].as_str().unwrap_or("?")
        ),
        "loading" => "LOADING the catalog under the single-flight guard".into(),
        "step" => format!("load step {} done, progress reported", f["step"]),
        "loaded" => format!("catalog loaded ({} items)", f["items"]),
        "joined" => format!(
            "got the catalog loaded by {} without loading it",
            f["loaded_by"].as_str().unwrap_or("?")
        ),
        "still_loading" => format!("gave up waiting: still loading at step {}", f["step"]),
        "failed" => format!("failed: {}", f["message"].as_str().unwrap_or("?")),
        "catalog_call" => format!(
            "CATALOG CALL for {} (a miss: the loader runs)",
            f["sku"].as_str().unwrap_or("?")
        ),
        "read" => {
            let from = match f["served_from"].as_str().unwrap_or("?") {
                "loaded" => "from the catalog, now cached",
                "shared" => "from Redis",
                "near" => "from its own memory",
                other => other,
            };
            format!(
                "read {}: {} {from}",
                f["sku"].as_str().unwrap_or("?"),
                price(&f["price_cents"])
            )
        }
        "price_changed" => format!(
            "price of {} changed to {}: put returned after {:.1} ms",
            f["sku"].as_str().unwrap_or("?"),
            price(&f["price_cents"]),
            event
                .t_us
                .saturating_sub(f["put_started_us"].as_u64().unwrap_or(event.t_us))
                as f64
                / 1e3
        ),
        "done" if event.pod.starts_with("shop-") && f["reads"].is_u64() => format!(
            "finished its {} reads: {} from memory, {} from Redis, {} loaded",
            f["reads"], f["near"], f["shared"], f["loaded"]
        ),
        "done" if event.pod.starts_with("shop-") => "finished its reads".into(),
        "output" => f.as_str().unwrap_or_default().to_owned(),
        "log" => format!("log: {}", f.as_str().unwrap_or_default()),
        "done" if event.pod.starts_with("gw-") => format!(
            "offered client-42's requests: {} admitted, {} denied",
            f["admitted"], f["denied"]
        ),
        other => other.to_owned(),
    }
}

/// A price in cents as currency units, such as 42.00.
fn price(cents: &Value) -> String {
    match cents.as_u64() {
        Some(cents) => format!("{}.{:02}", cents / 100, cents % 100),
        None => "?".into(),
    }
}

/// Checks the timeline; prints one line per check and returns whether all passed.
fn check(timeline: &Timeline, winner: &str, ledger: &Path) -> bool {
    let events = &timeline.events;
    let mut checks = Checks::new();

    let round_one = ["pod-1", "pod-2", "pod-3"];
    let acquired_first: Vec<&Event> = events
        .iter()
        .filter(|e| e.event == "acquired" && round_one.contains(&e.pod.as_str()))
        .collect();
    checks.report(
        acquired_first.len() == 1,
        format!(
            "exactly one of the three racing pods ran the bill run ({})",
            acquired_first.len()
        ),
    );
    let winner_owner = acquired_first
        .first()
        .map(|e| e.fields["owner"].as_str().unwrap_or(""));
    let losers_named_holder = events
        .iter()
        .filter(|e| e.event == "not_acquired" && round_one.contains(&e.pod.as_str()))
        .all(|e| {
            e.fields["details"]["reason"] == "held_by_another_owner"
                && Some(e.fields["details"]["holder"].as_str().unwrap_or("")) == winner_owner
        });
    let losers = events
        .iter()
        .filter(|e| e.event == "not_acquired" && round_one.contains(&e.pod.as_str()))
        .count();
    checks.report(
        losers == 2 && losers_named_holder,
        format!("the other two failed closed naming {winner} as the holder ({losers} did)"),
    );

    // Holding intervals: from "acquired" (printed after the grant) to "releasing" (printed before
    // the release call) or the SIGKILL. A pod works only inside its interval, so two intervals
    // overlapping means two pods ran the bill run at once.
    let mut holds: Vec<(u64, u64, &str)> = Vec::new();
    for acquired in events.iter().filter(|e| e.event == "acquired") {
        let end = events
            .iter()
            .find(|e| {
                e.pod == acquired.pod
                    && e.t_us >= acquired.t_us
                    && matches!(e.event.as_str(), "releasing" | "killed")
            })
            .map_or(u64::MAX, |e| e.t_us);
        holds.push((acquired.t_us, end, &acquired.pod));
    }
    holds.sort();
    let overlaps: Vec<String> = holds
        .windows(2)
        .filter(|w| w[1].0 < w[0].1)
        .map(|w| format!("{} and {}", w[0].2, w[1].2))
        .collect();
    checks.report(
        overlaps.is_empty(),
        if overlaps.is_empty() {
            format!(
                "no two pods held bill-run:{PERIOD} at once ({} holds)",
                holds.len()
            )
        } else {
            format!("TWO HOLDERS AT ONCE: {}", overlaps.join(", "))
        },
    );

    let killed_at = events.iter().find(|e| e.event == "killed").map(|e| e.t_us);
    let takeover = events
        .iter()
        .find(|e| e.event == "acquired" && killed_at.is_some_and(|k| e.t_us > k));
    match (killed_at, takeover) {
        (Some(killed), Some(next)) => {
            let lapse = Duration::from_micros(next.t_us - killed);
            checks.report(
                lapse <= TAKEOVER_BOUND,
                format!(
                    "{} took over {:.2}s after {winner} crashed (bound: watchdog-timeout {WATCHDOG_TIMEOUT} + 2 s slack)",
                    next.pod,
                    lapse.as_secs_f64()
                ),
            )
        }
        _ => checks.report(false, "no pod took the run over after the crash".into()),
    }

    let tokens: Vec<u64> = events
        .iter()
        .filter(|e| e.event == "acquired")
        .filter_map(|e| e.fields["fencing_token"].as_u64())
        .collect();
    checks.report(
        tokens.windows(2).all(|w| w[0] < w[1]),
        format!(
            "fencing tokens increased with every grant ({} grants; they count up from the Redis clock in µs)",
            tokens.len()
        ),
    );

    let missing: Vec<u32> = (0..BATCHES)
        .filter(|b| !ledger.join(format!("batch-{b:03}")).exists())
        .collect();
    let completed = ledger.join("completed").exists();
    checks.report(
        missing.is_empty() && completed,
        format!(
            "the ledger has all {BATCHES} batches and the completed marker (missing: {missing:?})"
        ),
    );
    checks.passed()
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
