//! The stress runner: many real worker processes on one key, one fault injected over and over,
//! the history checked afterwards. Prints one Markdown table row per workload and fault (the
//! tables of docs/reliability.md) and the problems found; exits 1 if any.
//!
//! ```text
//! scripts/soak.sh                      # every workload under every fault, 10 minutes each
//! scripts/soak.sh --duration 30s
//! scripts/soak.sh --fault pause-holder --workers 16 --duration 1h
//! scripts/soak.sh --workload queue --workload rate-limit --duration 20s
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use platform_lock_tests::stress::{Fault, Scenario, TABLE_HEADER, TOOLKIT_HEADER, Workload, run};

#[derive(Debug, Parser)]
#[command(about = "Stress the lock with real worker processes under injected faults")]
struct Args {
    /// Workloads to run (default: all), each under every fault given.
    #[arg(long, value_enum)]
    workload: Vec<Workload>,
    /// Faults to run, one run each (default: all).
    #[arg(long, value_enum)]
    fault: Vec<Fault>,
    /// Worker processes per run.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// How long each run's workers keep starting iterations, e.g. 60s or 10m (the last value
    /// given wins, so scripts/soak.sh's default can be overridden).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s", overrides_with = "duration")]
    duration: Duration,
    /// The workers' watchdog timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    watchdog_timeout: Duration,
    /// The longest a worker holds the lock around its write (a random part of it each time).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20ms")]
    hold: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let worker = match std::env::current_exe() {
        Ok(me) => me.with_file_name("lock-worker"),
        Err(e) => {
            eprintln!("cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !worker.exists() {
        eprintln!(
            "{} not found: build both with `cargo build --release -p platform-lock-tests --bins` (scripts/soak.sh does)",
            worker.display()
        );
        return ExitCode::FAILURE;
    }
    let faults = if args.fault.is_empty() {
        Fault::ALL.to_vec()
    } else {
        args.fault.clone()
    };
    let workloads = if args.workload.is_empty() {
        Workload::ALL.to_vec()
    } else {
        args.workload.clone()
    };
    let mut failed = false;
    for workload in workloads {
        let header = match workload {
            Workload::Lock => TABLE_HEADER,
            _ => TOOLKIT_HEADER,
        };
        println!("\n{workload}: {}\n\n{header}", workload.checked());
        for &fault in faults.iter().filter(|f| f.applies_to(workload)) {
            let mut scenario = Scenario::short(workload, fault, &worker);
            scenario.workers = args.workers;
            scenario.duration = args.duration;
            scenario.watchdog_timeout = args.watchdog_timeout;
            scenario.hold = args.hold;
            match run(&scenario).await {
                Ok(result) => {
                    println!("{}", result.row());
                    for problem in result.problems() {
                        failed = true;
                        eprintln!("  {workload} under {fault}: {problem}");
                    }
                }
                Err(e) => {
                    failed = true;
                    eprintln!("  {workload} under {fault}: could not run: {e}");
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
