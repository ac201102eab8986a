//! The MSISDN reservation reaper: a scheduled task that every replica runs, where each tick's
//! sweep must run on one replica only.
//!
//! Each tick tries the lock `msisdn-reaper` once (no waiting) with a fixed lease that bounds the
//! sweep and a minimum hold: if another replica swept this tick, this one skips it. A fixed
//! lease suits a short, bounded sweep: it hard-expires even if the sweeping pod hangs, so the
//! next tick can run. The minimum hold keeps the key after a short sweep, so a replica whose
//! tick comes a little later does not find it free and sweep the same tick again; it must be
//! longer than the replicas' tick skew and shorter than the tick period.
//!
//! ```text
//! TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379 \
//!   cargo run -p lock-starter --example msisdn_reaper -- --ticks 5 --every 2s
//! ```
//! Start it in several terminals to watch the replicas share the ticks.

mod common;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_starter::prelude::*;

#[derive(Debug, Parser)]
#[command(
    about = "Reap expired MSISDN reservations; one replica per tick",
    after_help = "Configuration: TELCO_PLATFORM_LOCK_* environment variables (e.g. \
TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379). See docs/configuration.md.\n\
Exit codes: 0 all ticks ran (a tick another replica swept, or Redis was down, is skipped), \
1 an unexpected lock error, 2 bad arguments, 78 bad configuration or lock disabled."
)]
struct Args {
    /// Number of ticks to run before exiting.
    #[arg(long, default_value_t = 5)]
    ticks: u32,
    /// Time between ticks, e.g. 2s.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    every: Duration,
    /// Lease of one sweep: the longest a sweep may hold the lock, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// The minimum hold of a sweep's lock, from the grant: at most the lease, e.g. 1s.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    hold_at_least: Duration,
    /// How long one sweep takes, e.g. 300ms.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    sweep_time: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    // A bad lease or hold is a bug in the caller, not a reason to skip ticks: refuse it up front.
    let options = AcquireOptions::new(Lease::Fixed(args.lease))
        .hold_at_least(args.hold_at_least)
        .and_then(|options| options.wait_time(Duration::ZERO))
        .and_then(|options| options.validate("msisdn-reaper").map(|()| options));
    let options = match options {
        Ok(options) => options,
        Err(error) => {
            eprintln!("--lease / --hold-at-least: {error}");
            return ExitCode::from(2);
        }
    };
    let starter = match common::start().await {
        Ok(starter) => starter,
        Err(code) => return code,
    };
    let lock = match starter.lock() {
        Ok(lock) => lock,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(78);
        }
    };
    let mut ticks = tokio::time::interval(args.every);
    for tick in 1..=args.ticks {
        ticks.tick().await;
        let swept = lock
            .with_lock("msisdn-reaper", options, || sweep(tick, args.sweep_time))
            .await;
        match swept {
            Ok(count) => println!("tick {tick}: swept {count} expired reservations"),
            Err(error) => match error.acquire_failure() {
                Some(AcquireFailure::HeldByAnotherOwner { holder, .. }) => {
                    println!("tick {tick}: skipped, {holder} swept it")
                }
                // Redis down or slow: skip the tick (fail closed); the next tick tries again.
                Some(_) => println!("tick {tick}: skipped, {error}"),
                None => {
                    eprintln!("tick {tick}: {error}");
                    starter.shutdown().await;
                    return ExitCode::FAILURE;
                }
            },
        }
    }
    // Last: flushes any release still in the background before the process ends.
    starter.shutdown().await;
    ExitCode::SUCCESS
}

/// Stands in for `UPDATE msisdn SET state = 'FREE' WHERE state = 'RESERVED' AND reserved_until < now()`.
async fn sweep(tick: u32, duration: Duration) -> u32 {
    tokio::time::sleep(duration).await;
    (tick * 7 + std::process::id()) % 20
}
