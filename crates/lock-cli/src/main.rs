//! `platform-lock`: operations on the distributed locks of a configured Redis — the status of a
//! lock, the held locks, a forced release for on-call runbooks, and running a command while
//! holding a lock (flock(1) across machines).
//!
//! It reads the same configuration as `lock-starter` (built-in defaults, then `--config` TOML
//! files, then `TELCO_PLATFORM_LOCK_*` variables). Exit codes: see [`args::AFTER_HELP`].

mod args;
mod exit;
mod guardian;
mod inspect;
mod output;
mod release;
mod run;
mod spinner;

use std::process::ExitCode;

use lock_starter::config::{ConfigSources, LockSettings};
use lock_starter::lock::limits::DEFAULT_SHUTDOWN_TIMEOUT;
use lock_starter::lock::{DistributedLock, Lease, LockError};
use lock_starter::redis::{RedisClient, RedisLock};

use crate::args::{Cli, Command};
use crate::exit::EXIT_CONFIG;
use crate::output::Failure;

fn main() -> ExitCode {
    // `run`'s guardian: not a command for people (so not in clap's), and nothing else to do
    // before it blocks — no configuration, no runtime, no threads.
    if std::env::args_os().skip(1).eq([guardian::SUBCOMMAND]) {
        return guardian::main();
    }
    let cli = match args::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // Configuration warnings (a misspelt TELCO_PLATFORM_LOCK_* variable, an unknown key) are
    // logged by lock-starter; without a subscriber they would be lost, and with them the reason
    // a `list` finds nothing under the wrong key prefix. The library's other warnings (Redis
    // unreachable, a lost lease) would repeat what the command's one line says. RUST_LOG
    // overrides this.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error,lock_starter=warn".into()),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("platform-lock: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}

/// Runs the subcommand; `Ok` carries the exit code (`run` passes its command's through).
async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let settings = load_settings(&cli)?;
    if matches!(cli.command, Command::Run { .. }) {
        refuse_if_disabled(&settings)?;
    }
    let redis = Redis::connect(&settings).await?;
    let result = match cli.command {
        Command::Status { key, json } => inspect::status(&redis, &key, json).await.map(|()| 0),
        Command::List {
            pattern,
            limit,
            json,
        } => inspect::list(&redis, pattern.as_deref(), limit, json)
            .await
            .map(|()| 0),
        Command::Release { key, yes, .. } => release::force(&redis, &key, yes).await.map(|()| 0),
        Command::Run {
            key,
            lease,
            wait,
            command,
        } => {
            let lease = lease.map_or(Lease::Watchdog, Lease::Fixed);
            let wait = wait.unwrap_or(settings.wait_time);
            run::run(&redis, &key, lease, wait, &command).await
        }
    };
    redis.flush().await;
    result
}

/// The lock-starter's settings from its sources and the `--config` files.
fn load_settings(cli: &Cli) -> Result<LockSettings, Failure> {
    let sources = cli
        .config
        .iter()
        .fold(ConfigSources::new(), |sources, file| {
            sources.toml_file(file)
        });
    LockSettings::load(&sources)
        .map_err(|error| Failure::new(EXIT_CONFIG, format!("bad configuration: {error}")))
}

/// `run` takes the lock as the service would, so it honours `enabled = false`; `status`, `list`
/// and `release` only look at Redis, which on-call may need to do whatever a service's switch
/// says.
fn refuse_if_disabled(settings: &LockSettings) -> Result<(), Failure> {
    if !settings.enabled {
        let why = settings
            .describe("enabled")
            .unwrap_or_else(|| "telco.platform.lock.enabled = false".into());
        return Err(Failure::new(
            EXIT_CONFIG,
            format!("the lock is disabled ({why}); enable it to run a command under the lock"),
        ));
    }
    Ok(())
}

/// The configured Redis, as every subcommand talks to it.
pub(crate) struct Redis {
    pub(crate) lock: RedisLock,
    /// The Redis address with its password as `***`: the only form ever printed.
    pub(crate) address: String,
    /// `telco.platform.lock.key-prefix`, which `status` and `list` name beside the address.
    pub(crate) key_prefix: String,
    /// `telco.platform.lock.replica-sync-timeout`, for the hint when replicas do not confirm.
    replica_sync_timeout: std::time::Duration,
}

impl Redis {
    async fn connect(settings: &LockSettings) -> Result<Redis, Failure> {
        let config = settings.redis_config();
        let address = config.redacted_address();
        // Mapped as the service's start-up maps it: the full key and where it was set.
        let connected = match RedisClient::connect(config).await {
            Ok(redis) => RedisLock::new(&redis, settings.lock_config()).await,
            Err(error) => Err(error),
        };
        let lock = connected.map_err(|error| {
            let error = match settings.start_error(error) {
                lock_starter::StartError::Config(error) => error.to_string(),
                lock_starter::StartError::Lock(error) => error.to_string(),
                other => other.to_string(),
            };
            Failure::new(EXIT_CONFIG, format!("bad configuration: {error}"))
        })?;
        Ok(Redis {
            lock,
            address,
            key_prefix: settings.key_prefix.clone(),
            replica_sync_timeout: settings.replica_sync_timeout,
        })
    }

    /// The one line for a failed Redis operation `what`, e.g. "reading lock `k`".
    pub(crate) fn failure(&self, what: &str, error: &LockError) -> Failure {
        Failure::redis(what, &self.address, self.replica_sync_timeout, error)
    }

    /// Every subcommand ends here, whichever way it ends: a release still in the background (a
    /// dropped handle, a grant handed back after replicas did not confirm it) would otherwise
    /// be cut off by the process exit, leaving the key held for its whole lease.
    async fn flush(&self) {
        let summary = self.lock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
        if !summary.is_complete() {
            eprintln!(
                "platform-lock: warning: lock releases unfinished at exit ({summary}); those \
                 leases end at their TTL"
            );
        }
    }
}
