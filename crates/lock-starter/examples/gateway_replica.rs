//! One replica of a gateway that shares a rate limit with the others: it offers requests of
//! one client as fast as it can for a while, each checked against the limit `api` on Redis,
//! and reports how many were admitted.
//!
//! ```text
//! TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379 \
//! TELCO_PLATFORM_LOCK_RATE_LIMITS_API_RATE=20/1s \
//!   cargo run -p lock-starter --example gateway_replica -- --for 3s
//! ```
//!
//! It prints one JSON event per line on stdout (the demo reads them) and logs to stderr.
//! Exit codes: 0 done, 78 bad configuration, 1 the limit could not be checked.

mod common;
#[path = "common/events.rs"]
mod events;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_starter::prelude::*;
use lock_starter::rate_limit::Basis;
use serde_json::json;

use events::{POD, config_error, emit, now_us, start, wait_until};

/// The shared limit, configured under `telco.platform.lock.rate-limits.api`.
const LIMIT: &str = "api";

#[derive(Debug, Parser)]
#[command(about = "Offer requests against a rate limit shared with other replicas")]
struct Args {
    /// How long to offer requests, e.g. 3s.
    #[arg(long = "for", default_value = "3s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// The client whose requests these are.
    #[arg(long, default_value = "client-42")]
    client: String,
    /// Wait until this Unix time (ms) before starting, so replicas run together (the demo).
    #[arg(long, hide = true)]
    start_at_unix_ms: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    let starter = match start(None).await {
        Ok(starter) => starter,
        Err(code) => return code,
    };
    let _ = POD.set(starter.settings().instance_id.clone());
    let limiter = match starter.rate_limiter(LIMIT, FailurePolicy::FailClosed) {
        Ok(limiter) => limiter,
        Err(error) => return config_error(error),
    };
    wait_until(args.start_at_unix_ms).await;
    let (started, mut admitted, mut denied) = (now_us(), 0u32, 0u32);
    let until = tokio::time::Instant::now() + args.duration;
    while tokio::time::Instant::now() < until {
        match limiter.try_acquire(&args.client, 1).await {
            Ok(decision) if matches!(decision.basis, Basis::FailedOpen | Basis::FailedClosed) => {
                emit(
                    "failed",
                    json!({ "basis": format!("{:?}", decision.basis) }),
                );
                return ExitCode::FAILURE;
            }
            Ok(decision) if decision.allowed => admitted += 1,
            Ok(_) => denied += 1,
            Err(error) => return config_error(error),
        }
    }
    let quota = limiter.quota();
    emit(
        "done",
        json!({
            "admitted": admitted, "denied": denied, "started_us": started,
            "rate": quota.count(), "period_s": quota.period().as_secs_f64(), "burst": quota.burst(),
        }),
    );
    ExitCode::SUCCESS
}
