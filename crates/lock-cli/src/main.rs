//! `platform-lock`: operations on the distributed locks of a configured Redis — the status of a
//! lock, the held locks, a forced release for on-call runbooks, and running a command while
//! holding a lock (flock(1) across machines).
//!
//! It reads the same configuration as `lock-starter` (built-in defaults, then `--config` TOML
//! files, then `TELCO_PLATFORM_LOCK_*` variables). Exit codes: see [`AFTER_HELP`].

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lock_starter::config::{ConfigSources, LockSettings};
use lock_starter::redis::{ForceReleased, LockState, LockStatus, RedisFailure, RedisLock};
use lock_starter::{
    AcquireFailure, AcquireOptions, DistributedLock, Lease, LockError, LockErrorCode,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

/// Exit codes and configuration, shown by `--help`.
const AFTER_HELP: &str = "\
Configuration: the lock-starter's sources — built-in defaults, then each --config TOML file \
(later wins), then TELCO_PLATFORM_LOCK_* environment variables (e.g. \
TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379). See docs/configuration.md.

Exit codes:
  0    done (release: also when the lock was not held)
  1    Redis unavailable or refusing; release declined at the prompt
  2    bad arguments (including release --force without --yes when stdin is not a terminal)
  70   run: the lease was lost while the command ran; the command was terminated
  75   run: the lock was not acquired within --wait (held by another owner)
  78   bad configuration, or the lock is disabled (telco.platform.lock.enabled = false)
  126, 127  run: the command could not be executed / was not found
  other run: the command's own exit code; 128+N when it was killed by signal N";

/// `run`: how long the command gets between SIGTERM and SIGKILL once the lease is lost.
const KILL_GRACE: Duration = Duration::from_secs(5);

const EXIT_REDIS: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_LEASE_LOST: u8 = 70;
const EXIT_NOT_ACQUIRED: u8 = 75;
const EXIT_CONFIG: u8 = 78;

#[derive(Debug, Parser)]
#[command(
    name = "platform-lock",
    version,
    about = "Inspect, list and force-release distributed locks; run a command under a lock",
    after_help = AFTER_HELP
)]
struct Cli {
    /// A TOML configuration file (telco.platform.lock.* keys); repeat for more, later wins.
    #[arg(long = "config", global = true, value_name = "FILE")]
    config: Vec<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a lock: holder (instance id), remaining TTL, hold count, fencing token, waiters.
    Status {
        /// The lock's name, e.g. bill-run:2026-11.
        key: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List held locks (found with SCAN, never KEYS) with holder and TTL.
    List {
        /// Glob over lock names (Redis MATCH syntax), e.g. 'bill-run:*'. Default: all.
        pattern: Option<String>,
        /// At most this many locks.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print one JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Release a lock whoever holds it (runbooks' "force unlock"); its waiters are woken.
    Release {
        /// Required: this releases another process's lock.
        #[arg(long, required = true)]
        force: bool,
        /// Do not ask for confirmation (needed when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// The lock's name.
        key: String,
    },
    /// Run COMMAND while holding the lock, like flock(1) across machines.
    ///
    /// The lease is a watchdog lease (renewed while this process lives) unless --lease is
    /// given. If the lease is lost, the command gets SIGTERM, then SIGKILL 5 s later, and
    /// platform-lock exits 70. SIGINT and SIGTERM sent to platform-lock are forwarded to the
    /// command. The command sees the grant's fencing token in PLATFORM_LOCK_FENCING_TOKEN.
    Run {
        /// The lock's name.
        #[arg(long)]
        key: String,
        /// A fixed lease instead of the watchdog, e.g. 30s: the lock ends after it even if the
        /// command still runs (the command is then terminated).
        #[arg(long, value_parser = humantime::parse_duration)]
        lease: Option<Duration>,
        /// How long to wait for the lock, e.g. 0s (one attempt) or 2m. Default: the configured
        /// telco.platform.lock.wait-time (5 s).
        #[arg(long, value_parser = humantime::parse_duration)]
        wait: Option<Duration>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            if !error.use_stderr() {
                // --help, --version
                let _ = error.print();
                return ExitCode::SUCCESS;
            }
            let rendered = error.render().to_string();
            let line = rendered.lines().next().unwrap_or("error: bad arguments");
            eprintln!("platform-lock: {line} (see platform-lock --help)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("platform-lock: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    let sources = cli
        .config
        .iter()
        .fold(ConfigSources::new(), |sources, file| {
            sources.toml_file(file)
        });
    let settings = match LockSettings::load(&sources) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("platform-lock: bad configuration: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if !settings.enabled {
        let why = settings
            .describe("enabled")
            .unwrap_or_else(|| "telco.platform.lock.enabled = false".into());
        eprintln!("platform-lock: the lock is disabled ({why}); enable it to use this tool");
        return ExitCode::from(EXIT_CONFIG);
    }
    let config = lock_starter::redis_config(&settings);
    let address = config.redacted_address();
    let lock = match RedisLock::connect(config).await {
        Ok(lock) => lock,
        Err(error) => {
            eprintln!("platform-lock: bad configuration: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let ops = Ops { lock, address };
    match cli.command {
        Command::Status { key, json } => ops.status(&key, json).await,
        Command::List {
            pattern,
            limit,
            json,
        } => ops.list(pattern.as_deref(), limit, json).await,
        Command::Release { key, yes, .. } => ops.release(&key, yes).await,
        Command::Run {
            key,
            lease,
            wait,
            command,
        } => {
            let lease = lease.map_or(Lease::Watchdog, Lease::Fixed);
            let wait = wait.unwrap_or(settings.wait_time);
            ops.run(&key, lease, wait, &command).await
        }
    }
}

struct Ops {
    lock: RedisLock,
    /// The Redis address with its password as `***`: the only form ever printed.
    address: String,
}

impl Ops {
    /// One line for a failed Redis operation, and its exit code.
    fn fail(&self, what: &str, error: &LockError) -> ExitCode {
        if error.code() == LockErrorCode::LockInvalidArgument {
            eprintln!("platform-lock: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
        let cause = RedisFailure::find(error).map_or_else(|| error.to_string(), |f| f.to_string());
        eprintln!(
            "platform-lock: {what} failed at Redis {}: {cause}; check that Redis is up and \
             telco.platform.lock.redis.address is right",
            self.address
        );
        ExitCode::from(EXIT_REDIS)
    }

    async fn status(&self, key: &str, json: bool) -> ExitCode {
        match self.lock.status(key).await {
            Ok(status) if json => {
                println!("{}", status_json(&status));
                ExitCode::SUCCESS
            }
            Ok(status) => {
                print_status(&status);
                ExitCode::SUCCESS
            }
            Err(error) => self.fail(&format!("reading lock `{key}`"), &error),
        }
    }

    async fn list(&self, pattern: Option<&str>, limit: usize, json: bool) -> ExitCode {
        let held = match self.lock.list(pattern, limit).await {
            Ok(held) => held,
            Err(error) => return self.fail("listing locks", &error),
        };
        if json {
            for status in &held {
                println!("{}", status_json(status));
            }
        } else if held.is_empty() {
            println!("no held locks match {}", pattern.unwrap_or("*"));
        } else {
            println!(
                "{:<40} {:<24} {:>10} FENCING TOKEN",
                "LOCK", "HOLDER", "TTL"
            );
            for status in &held {
                if let LockState::Held {
                    instance_id,
                    fencing_token,
                    ttl,
                    ..
                } = &status.state
                {
                    println!(
                        "{:<40} {:<24} {:>10} {fencing_token}",
                        status.name,
                        instance_id,
                        fmt_ttl(*ttl)
                    );
                }
            }
        }
        ExitCode::SUCCESS
    }

    async fn release(&self, key: &str, yes: bool) -> ExitCode {
        let status = match self.lock.status(key).await {
            Ok(status) => status,
            Err(error) => return self.fail(&format!("reading lock `{key}`"), &error),
        };
        let LockState::Held {
            holder,
            fencing_token,
            ..
        } = &status.state
        else {
            println!("lock `{key}` is not held; nothing to release");
            return ExitCode::SUCCESS;
        };
        if !yes {
            if !std::io::stdin().is_terminal() {
                eprintln!(
                    "platform-lock: refusing to force-release lock `{key}` without confirmation: \
                     stdin is not a terminal; add --yes"
                );
                return ExitCode::from(EXIT_USAGE);
            }
            eprint!("Release lock {key} held by {holder} (token {fencing_token})? [y/N] ");
            let _ = std::io::stderr().flush();
            let mut answer = String::new();
            let _ = std::io::stdin().lock().read_line(&mut answer);
            if !matches!(answer.trim(), "y" | "Y" | "yes") {
                eprintln!("platform-lock: not released");
                return ExitCode::from(EXIT_REDIS);
            }
        }
        match self.lock.force_release(key).await {
            Ok(ForceReleased::Released {
                holder,
                fencing_token,
                notified_clients,
                ..
            }) => {
                println!(
                    "released lock `{key}` held by {holder} (fencing token {fencing_token}); \
                     {notified_clients} waiting client(s) notified"
                );
                ExitCode::SUCCESS
            }
            Ok(_) => {
                println!("lock `{key}` was no longer held; nothing changed");
                ExitCode::SUCCESS
            }
            Err(error) => self.fail(&format!("releasing lock `{key}`"), &error),
        }
    }

    async fn run(&self, key: &str, lease: Lease, wait: Duration, command: &[String]) -> ExitCode {
        let spinner = std::io::stderr()
            .is_terminal()
            .then(|| tokio::spawn(spin(self.lock.clone(), key.to_owned())));
        let options = AcquireOptions::new(lease).wait(wait);
        let acquired = self.lock.acquire_lease(key, options).await;
        if let Some(spinner) = spinner {
            spinner.abort();
            let _ = spinner.await;
            eprint!("\r\x1b[2K");
        }
        let handle = match acquired {
            Ok(handle) => handle,
            Err(error) => {
                return match error.acquire_failure() {
                    Some(
                        AcquireFailure::HeldByAnotherOwner { .. }
                        | AcquireFailure::WaitersAhead { .. },
                    ) => {
                        eprintln!(
                            "platform-lock: {error}; the command did not run — try again later \
                             or wait longer (--wait)"
                        );
                        ExitCode::from(EXIT_NOT_ACQUIRED)
                    }
                    _ => self.fail(&format!("acquiring lock `{key}`"), &error),
                };
            }
        };
        let mut child = match tokio::process::Command::new(&command[0])
            .args(&command[1..])
            .env(
                "PLATFORM_LOCK_FENCING_TOKEN",
                handle.fencing_token().to_string(),
            )
            .spawn()
        {
            Ok(child) => child,
            Err(error) => {
                let _ = handle.release().await;
                let code = if error.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                eprintln!("platform-lock: cannot run `{}`: {error}", command[0]);
                return ExitCode::from(code);
            }
        };
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        let signal_child = |signal: Signal| {
            if let Some(pid) = pid {
                let _ = kill(pid, signal);
            }
        };
        let (mut interrupts, mut terminates) = match (
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
        ) {
            (Ok(i), Ok(t)) => (i, t),
            _ => {
                eprintln!("platform-lock: cannot install signal handlers");
                let _ = child.start_kill();
                let _ = child.wait().await;
                return ExitCode::FAILURE;
            }
        };
        let lost = handle.lost();
        tokio::pin!(lost);
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = interrupts.recv() => signal_child(Signal::SIGINT),
                _ = terminates.recv() => signal_child(Signal::SIGTERM),
                reason = &mut lost => {
                    eprintln!(
                        "platform-lock: the lease on lock `{key}` was lost ({reason}); \
                         terminating the command (SIGTERM, SIGKILL after {} s)",
                        KILL_GRACE.as_secs()
                    );
                    signal_child(Signal::SIGTERM);
                    if tokio::time::timeout(KILL_GRACE, child.wait()).await.is_err() {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                    return ExitCode::from(EXIT_LEASE_LOST);
                }
            }
        };
        if let Err(error) = handle.release().await {
            eprintln!("platform-lock: warning: {error}");
        }
        match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                let code = status
                    .code()
                    .or_else(|| status.signal().map(|n| 128 + n))
                    .unwrap_or(1);
                ExitCode::from(u8::try_from(code).unwrap_or(1))
            }
            Err(error) => {
                eprintln!("platform-lock: waiting for the command failed: {error}");
                ExitCode::FAILURE
            }
        }
    }
}

/// A spinner on stderr naming the current holder, while `run` waits for the lock.
async fn spin(lock: RedisLock, key: String) {
    const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
    let mut holder = String::from("…");
    for tick in 0usize.. {
        if tick % 10 == 0 {
            if let Ok(status) = lock.status(&key).await {
                holder = match status.state {
                    LockState::Held { instance_id, .. } => instance_id,
                    _ => "nobody".into(),
                };
            }
        }
        eprint!(
            "\r\x1b[2K{} waiting for lock {key}, held by {holder}",
            FRAMES[tick % FRAMES.len()]
        );
        let _ = std::io::stderr().flush();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn fmt_ttl(ttl: Option<Duration>) -> String {
    match ttl {
        Some(ttl) => format!("{:.1}s", ttl.as_secs_f64()),
        None => "none".into(),
    }
}

fn print_status(status: &LockStatus) {
    println!("lock:           {}", status.name);
    println!("redis key:      {}", status.redis_key);
    match &status.state {
        LockState::Held {
            holder,
            instance_id,
            fencing_token,
            ttl,
        } => {
            println!("state:          held");
            println!("holder:         {instance_id} (owner token {holder})");
            println!("ttl:            {}", fmt_ttl(*ttl));
            println!(
                "hold count:     {} (re-entry is counted in the holding process)",
                status.hold_count()
            );
            println!("fencing token:  {fencing_token}");
        }
        LockState::Released {
            released_by,
            fencing_token,
            ttl,
        } => {
            println!("state:          released (by {released_by})");
            println!("fencing token:  {fencing_token} (last grant)");
            println!("tombstone ttl:  {}", fmt_ttl(*ttl));
        }
        _ => println!("state:          free"),
    }
    println!("fair waiters:   {}", status.fair_waiters);
    println!("waiting clients: {}", status.subscribed_clients);
}

fn status_json(status: &LockStatus) -> serde_json::Value {
    let ttl_ms = |ttl: &Option<Duration>| ttl.map(|t| t.as_millis() as u64);
    let mut value = json!({
        "lock": status.name,
        "redisKey": status.redis_key,
        "holdCount": status.hold_count(),
        "fairWaiters": status.fair_waiters,
        "subscribedClients": status.subscribed_clients,
    });
    let state = match &status.state {
        LockState::Held {
            holder,
            instance_id,
            fencing_token,
            ttl,
        } => json!({"state": "held", "holder": holder, "instanceId": instance_id,
                    "fencingToken": fencing_token, "ttlMs": ttl_ms(ttl)}),
        LockState::Released {
            released_by,
            fencing_token,
            ttl,
        } => json!({"state": "released", "releasedBy": released_by,
                    "fencingToken": fencing_token, "ttlMs": ttl_ms(ttl)}),
        _ => json!({"state": "free"}),
    };
    if let (Some(value), serde_json::Value::Object(state)) = (value.as_object_mut(), state) {
        value.extend(state);
    }
    value
}
