//! A catalog warm-up that every replica needs and one should do: the first replica to start
//! loads the catalog under a single-flight guard and reports its progress; the others wait for
//! its outcome instead of loading it too. If the loader crashes, its guard expires and a waiting
//! replica takes over.
//!
//! ```text
//! TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379 \
//!   cargo run -p lock-starter --example catalog_warmup -- --steps 5
//! ```
//!
//! It prints one JSON event per line on stdout (the demo reads them) and logs to stderr.
//! Exit codes: 0 loaded here or by another replica, 75 still loading elsewhere when the wait
//! ended, 78 bad configuration, 1 Redis unavailable.

mod common;
#[path = "common/events.rs"]
mod events;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_starter::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use events::{POD, emit, failed, start, wait_until};

/// The warm-up's guard key; every replica uses the same one.
const KEY: &str = "catalog:warm-up";

#[derive(Debug, Parser)]
#[command(about = "Warm the catalog up on one replica while the others wait for it")]
struct Args {
    /// Steps the load takes.
    #[arg(long, default_value_t = 5)]
    steps: u32,
    /// Time one step takes, e.g. 400ms.
    #[arg(long, default_value = "400ms", value_parser = humantime::parse_duration)]
    step_time: Duration,
    /// The guard's TTL: how soon a crashed loader's guard expires (renewed every third).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    guard_ttl: Duration,
    /// How long a replica waits for another's load before giving up.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    wait: Duration,
    /// TOML configuration file (the environment overrides it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Wait until this Unix time (ms) before starting, so replicas race for real (the demo).
    #[arg(long, hide = true)]
    start_at_unix_ms: Option<u64>,
}

/// What a load produces; the waiters get the loader's copy.
#[derive(Debug, Serialize, Deserialize)]
struct Catalog {
    items: u32,
    loaded_by: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    let starter = match start(args.config.as_deref()).await {
        Ok(starter) => starter,
        Err(code) => return code,
    };
    let _ = POD.set(starter.settings().instance_id.clone());
    wait_until(args.start_at_unix_ms).await;
    emit("started", json!({ "key": KEY }));
    let flight = starter
        .values()
        .single_flight(KEY, args.guard_ttl, WhenBusy::Wait(args.wait), |progress| {
            load(&args, progress)
        })
        .await;
    let code = match flight {
        Ok(Flight::Ran(catalog)) => {
            emit("loaded", json!({ "items": catalog.items }));
            ExitCode::SUCCESS
        }
        Ok(Flight::Joined(catalog)) => {
            emit(
                "joined",
                json!({ "items": catalog.items, "loaded_by": catalog.loaded_by }),
            );
            ExitCode::SUCCESS
        }
        Ok(Flight::RunningElsewhere { owner, progress }) => {
            emit("still_loading", json!({ "owner": owner, "step": progress }));
            ExitCode::from(75)
        }
        Err(error) => failed(&error),
    };
    starter.shutdown().await;
    code
}

/// The load itself: one step at a time, each reported to the waiting replicas.
async fn load(args: &Args, progress: Progress<u32>) -> Catalog {
    emit("loading", json!({ "owner": progress.owner() }));
    for step in 1..=args.steps {
        tokio::time::sleep(args.step_time).await;
        if let Err(error) = progress.report(&step).await {
            emit(
                "progress_not_reported",
                json!({ "message": error.to_string() }),
            );
        }
        emit("step", json!({ "step": step }));
    }
    Catalog {
        items: 1_204,
        loaded_by: POD.get().cloned().unwrap_or_default(),
    }
}
