//! A bill-run coordinator pod: the bill run of one billing period runs on exactly one pod.
//!
//! Every pod that is triggered for a period calls this; the lock (`bill-run:<period>`, watchdog
//! lease) lets one of them run it and makes the others fail closed with the holder's name. The
//! run is resumable: batches already in the ledger are skipped, so a pod taking over from a
//! crashed one carries on where it stopped. Each batch write is fenced: the ledger refuses a
//! fencing token lower than one it has seen.
//!
//! ```text
//! TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379 \
//!   cargo run -p lock-starter --example bill_run -- --period 2026-11 --ledger /tmp/ledger
//! ```
//!
//! It prints one JSON event per line on stdout (the demo reads them) and logs to stderr.
//! Exit codes: 0 run completed or found completed, 75 lock not acquired, 78 bad configuration,
//! 1 lease lost or stale write refused.

mod common;
#[path = "common/events.rs"]
mod events;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_starter::prelude::*;
use serde_json::json;

use events::{POD, config_error, emit, start, wait_until};

#[derive(Debug, Parser)]
#[command(
    about = "Run the bill run of one billing period, on exactly one pod",
    after_help = "Configuration: TELCO_PLATFORM_LOCK_* environment variables (e.g. \
TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379), over --config. \
See docs/configuration.md.\n\
Exit codes: 0 run completed or already completed, 75 lock not acquired (fail closed), \
78 bad configuration or lock disabled, 1 lease lost or stale write refused."
)]
struct Args {
    /// Billing period to run, e.g. 2026-11.
    #[arg(long, default_value = "2026-11")]
    period: String,
    /// Number of subscriber batches in the run.
    #[arg(long, default_value_t = 10)]
    batches: u32,
    /// Time one batch takes, e.g. 400ms.
    #[arg(long, default_value = "400ms", value_parser = humantime::parse_duration)]
    batch_time: Duration,
    /// Directory of the shared ledger (stands in for the billing database).
    #[arg(long)]
    ledger: PathBuf,
    /// TOML configuration file (the environment overrides it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Wait until this Unix time (ms) before acquiring, so pods started one by one race for
    /// real (used by the demo).
    #[arg(long, hide = true)]
    start_at_unix_ms: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    let starter = match start(args.config.as_deref()).await {
        Ok(starter) => starter,
        Err(code) => return code,
    };
    let lock = match starter.lock() {
        Ok(lock) => lock,
        Err(error) => return config_error(error),
    };
    let _ = POD.set(starter.settings().instance_id.clone());
    let ledger = Ledger::new(&args.ledger);
    let key = format!("bill-run:{}", args.period);
    wait_until(args.start_at_unix_ms).await;
    emit("started", json!({ "key": key }));

    let handle = match lock.acquire(&key, Lease::Watchdog).await {
        Ok(handle) => handle,
        Err(error) => {
            let details = error.details();
            emit(
                "not_acquired",
                json!({ "http_status": error.http_status(), "details": details }),
            );
            starter.shutdown().await;
            return ExitCode::from(75);
        }
    };
    let token = handle.fencing_token();
    emit(
        "acquired",
        json!({ "key": key, "owner": handle.owner(), "fencing_token": token }),
    );

    let code = run(&args, &ledger, &handle).await;
    // Emitted before the release call: from here on this pod does no more work, so the demo's
    // overlap check ends this pod's hold here (never later than Redis frees the key).
    emit("releasing", json!({}));
    let outcome = handle.release().await;
    let outcome = match outcome {
        Ok(ReleaseOutcome::Released) => "released".to_owned(),
        Ok(ReleaseOutcome::NotHeld) => "the lease had already ended".to_owned(),
        Err(error) => format!("release not confirmed: {error}"),
    };
    emit("released", json!({ "outcome": outcome }));
    // Last: flushes any release still in the background before the process ends.
    starter.shutdown().await;
    code
}

/// The bill run itself: skips what the ledger already has, stops if the lease is lost.
async fn run(args: &Args, ledger: &Ledger, handle: &LockHandle) -> ExitCode {
    if let Some(by) = ledger.completed_by() {
        emit("already_completed", json!({ "by": by }));
        return ExitCode::SUCCESS;
    }
    let lost = handle.lost();
    tokio::pin!(lost);
    for batch in 0..args.batches {
        if ledger.has_batch(batch) {
            emit(
                "batch_skipped",
                json!({ "batch": batch, "reason": "already in the ledger" }),
            );
            continue;
        }
        tokio::select! {
            reason = &mut lost => {
                emit("lease_lost", json!({ "reason": reason.to_string() }));
                return ExitCode::FAILURE;
            }
            () = tokio::time::sleep(args.batch_time) => {}
        }
        if let Err(refused) = ledger.write_batch(batch, handle.owner(), handle.fencing_token()) {
            emit(
                "write_refused",
                json!({ "batch": batch, "reason": refused }),
            );
            return ExitCode::FAILURE;
        }
        emit("batch_done", json!({ "batch": batch, "of": args.batches }));
    }
    ledger.complete(handle.owner());
    emit("completed", json!({ "batches": args.batches }));
    ExitCode::SUCCESS
}

/// The shared ledger: one file per finished batch, a `completed` marker, and a `fence` file with
/// the highest fencing token that wrote to it.
struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("create the ledger directory");
        Ledger {
            dir: dir.to_owned(),
        }
    }

    fn has_batch(&self, batch: u32) -> bool {
        self.dir.join(format!("batch-{batch:03}")).exists()
    }

    fn completed_by(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("completed")).ok()
    }

    /// Refuses a write whose fencing token is lower than the highest one seen.
    fn write_batch(&self, batch: u32, owner: &str, token: u64) -> Result<(), String> {
        let fence = self.dir.join("fence");
        let highest: u64 = std::fs::read_to_string(&fence)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        if token < highest {
            return Err(format!("stale fencing token {token} < {highest}"));
        }
        std::fs::write(&fence, token.to_string()).map_err(|e| e.to_string())?;
        std::fs::write(
            self.dir.join(format!("batch-{batch:03}")),
            format!("{owner} {token}"),
        )
        .map_err(|e| e.to_string())
    }

    fn complete(&self, owner: &str) {
        std::fs::write(self.dir.join("completed"), owner).expect("write the completed marker");
    }
}
