//! A tariff-cache warm-up job that fails open: every replica runs it at start-up, one at a time
//! is enough, and a cold cache hurts more than a second warm-up.
//!
//! Loading the tariff table into the shared cache twice only costs database reads; not loading
//! it makes every rating request slow. So the job asks for fail open at this one call site
//! (`with_lock_fail_open`): under the lock when Redis grants it, and otherwise — another
//! replica warming for longer than the wait time, Redis unreachable, or the lock disabled —
//! unguarded, with a `WARN` on stderr and the reason printed. Everything else in a service keeps
//! the fail-closed default (see docs/failure-policy.md).
//!
//! ```text
//! TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379 \
//!   cargo run -p lock-starter --example fail_open -- --warm-time 3s
//! ```
//! Start a second one within those 3 s (`-- --wait 500ms`) to see it run unguarded with reason
//! `wait_time_elapsed`; point the address at a port nothing listens on to see
//! `backend_unavailable`; set `TELCO_PLATFORM_LOCK_ENABLED=false` to see `lock_disabled`.

mod common;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_starter::prelude::*;

#[derive(Debug, Parser)]
#[command(
    about = "Warm the shared tariff cache; one replica at a time if Redis allows, but always warm it (fail open)",
    after_help = "Configuration: TELCO_PLATFORM_LOCK_* environment variables (e.g. \
TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379). See docs/configuration.md.\n\
Exit codes: 0 the cache was warmed (guarded or unguarded), 1 the warm-up itself failed, \
2 bad arguments, 78 bad configuration."
)]
struct Args {
    /// Name of the cache to warm; the lock key is `cache-warm:<cache>`.
    #[arg(long, default_value = "tariffs")]
    cache: String,
    /// How long to wait for a replica already warming before warming anyway, e.g. 500ms
    /// (default: telco.platform.lock.wait-time).
    #[arg(long, value_parser = humantime::parse_duration)]
    wait: Option<Duration>,
    /// How long one warm-up takes, e.g. 3s.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    warm_time: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    let starter = match common::start().await {
        Ok(starter) => starter,
        Err(code) => return code,
    };
    // The configured lock, or one that says "disabled" on every acquisition: fail-open calls
    // then run unguarded, so this job needs no special case for a service without the lock.
    let lock = starter.lock_or_disabled();

    let key = format!("cache-warm:{}", args.cache);
    let mut options = AcquireOptions::new(Lease::Watchdog);
    if let Some(wait) = args.wait {
        options = match options.wait_time(wait) {
            Ok(options) => options,
            Err(error) => {
                eprintln!("--wait: {error}");
                return ExitCode::from(2);
            }
        };
    }
    let warmed = match lock
        .with_lock_fail_open(&key, options, || warm(&args.cache, args.warm_time))
        .await
    {
        Ok(warmed) => warmed,
        // Only a bad key or wait gets here (a bug): the warm-up did not run.
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    // Flushes the release before the process ends (nothing to do when the lock is disabled).
    starter.shutdown().await;
    let how = match warmed.unguarded() {
        None => format!("guarded by lock `{key}`"),
        Some(unguarded) => format!(
            "UNGUARDED, reason {}: {}",
            unguarded.reason(),
            unguarded.error()
        ),
    };
    // The warm-up's own result is the value, whichever way it ran.
    match warmed.into_value() {
        Ok(entries) => {
            println!("cache {}: warmed {entries} entries, {how}", args.cache);
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("cache {}: warm-up failed ({error}), {how}", args.cache);
            ExitCode::FAILURE
        }
    }
}

/// Stands in for `SELECT … FROM tariff` and writing each row to the shared cache.
async fn warm(cache: &str, duration: Duration) -> Result<u32, String> {
    if cache.is_empty() {
        return Err("no cache named".to_owned());
    }
    tokio::time::sleep(duration).await;
    Ok(1_000 + cache.len() as u32 * 37)
}
