//! Applying one entity's change events in order with a fair lock.
//!
//! Change events (CDC) for ticket `4711` arrive at several pods in turn; each pod applies the
//! event it received under the lock `cdc:ticket-4711`. Applying takes longer than the gap
//! between events, so the pods queue for the lock. With `AcquireOptions::fair` the lock is
//! granted in the order the pods' acquire calls reach Redis — here, the order the events
//! arrived — whichever pod they are on; `--unfair` shows what the default (non-fair) lock makes
//! of the same stream.
//!
//! The arrival of an event is modelled by starting its acquisition `--every` after the previous
//! one. Two acquisitions started within the scheduler's and the network's jitter of each other
//! (a few milliseconds on a busy machine) can reach Redis in the other order; no lock can order
//! requests that are effectively simultaneous, so `--every` must be at least 5 ms.
//!
//! ```text
//! TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379 \
//!   cargo run -p lock-starter --example cdc_apply -- --events 20 --pods 3
//! ```
//! Each pod is its own Redis client, as separate processes would be.

mod common;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use lock_starter::lock::limits::DEFAULT_SHUTDOWN_TIMEOUT;
use lock_starter::prelude::*;

#[derive(Debug, Parser)]
#[command(
    about = "Apply one entity's change events in arrival order across pods (fair lock)",
    after_help = "Configuration: TELCO_PLATFORM_LOCK_* environment variables (e.g. \
TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379). See docs/configuration.md.\n\
Exit codes: 0 every event applied in arrival order, 1 an event was applied out of order or \
not at all, 2 bad arguments, 78 bad configuration or lock disabled."
)]
struct Args {
    /// Number of change events.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    events: u32,
    /// Number of pods (Redis clients) the events are spread over.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=32))]
    pods: u32,
    /// Time between two events' arrival, at least 5ms, e.g. 10ms.
    #[arg(long, default_value = "10ms", value_parser = parse_every)]
    every: Duration,
    /// How long applying one event takes, e.g. 20ms.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    apply_time: Duration,
    /// Use the default (non-fair) lock instead, to compare.
    #[arg(long)]
    unfair: bool,
}

/// `--every`: a duration of at least 5 ms (see the module docs).
fn parse_every(text: &str) -> Result<Duration, String> {
    let every = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if every < Duration::from_millis(5) {
        return Err(format!(
            "{} is too close: acquisitions started less than 5ms apart may reach Redis in either order",
            humantime::format_duration(every)
        ));
    }
    Ok(every)
}

/// One pod's lock, as lock-starter configures it from the environment.
async fn configured_lock() -> Result<Arc<dyn DistributedLock>, Box<dyn std::error::Error>> {
    Ok(LockStarter::builder().build().await?.lock()?)
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    let mut pods = Vec::new();
    for _ in 0..args.pods {
        match configured_lock().await {
            Ok(lock) => pods.push(lock),
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::from(78);
            }
        }
    }

    let applied = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut arrivals = tokio::time::interval(args.every);
    for seq in 1..=args.events {
        arrivals.tick().await;
        let pod = ((seq - 1) % args.pods) as usize;
        let lock = Arc::clone(&pods[pod]);
        let applied = Arc::clone(&applied);
        let mut options = AcquireOptions::new(Lease::Watchdog)
            .wait_time(Duration::from_secs(60))
            .expect("60 s is a wait time");
        if !args.unfair {
            options = options.fair();
        }
        let apply_time = args.apply_time;
        tasks.push(tokio::spawn(async move {
            lock.with_lock("cdc:ticket-4711", options, || async move {
                // Stands in for applying the event to the ticket's row.
                tokio::time::sleep(apply_time).await;
                applied.lock().unwrap().push(seq);
                println!("pod {pod}: applied event {seq}");
            })
            .await
        }));
    }
    let mut failed = false;
    for task in tasks {
        if let Err(error) = task.await.expect("apply task") {
            eprintln!("{error}");
            failed = true;
        }
    }
    // Each pod's client releases in the background; flush before the process ends.
    for pod in &pods {
        pod.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
    }
    let applied = applied.lock().unwrap().clone();
    let in_order = applied.windows(2).all(|w| w[0] < w[1]);
    let mode = if args.unfair { "non-fair" } else { "fair" };
    if in_order && !failed && applied.len() == args.events as usize {
        println!(
            "{mode} lock: all {} events applied in arrival order",
            args.events
        );
        ExitCode::SUCCESS
    } else {
        println!("{mode} lock: events applied in the order {applied:?}");
        ExitCode::FAILURE
    }
}
