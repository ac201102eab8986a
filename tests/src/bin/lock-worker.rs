//! One stress worker: a consumer process that loops acquire → guarded read-modify-write on the
//! fenced resource → release, or one of the toolkit's workloads, recording every step in its
//! history file.
//!
//! Started by the stress controller (`platform_lock_tests::stress`), never by hand. The toolkit
//! comes from lock-starter and the environment (`TELCO_PLATFORM_LOCK_*`); the instance id names
//! the worker in the history.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_starter::prelude::*;
use lock_testkit::fenced::{FencedResource, WriteOutcome};
use lock_testkit::history::{Event, Op, Phase, Recorder, monotonic_ns};
use platform_lock_tests::consumer::{lock_from_environment, parse_lease};
use platform_lock_tests::stress::{Context, Workload, workload};
use tokio::time::Instant;

#[derive(Debug, Parser)]
struct Args {
    /// What to do.
    #[arg(long, value_enum, default_value = "lock")]
    workload: Workload,
    /// A number no other worker of the run has.
    #[arg(long, default_value_t = 0)]
    ordinal: u64,
    /// Take what the workload left (after the run) instead of working.
    #[arg(long)]
    drain: bool,
    /// The run directory: history/ and resource/ live below it.
    #[arg(long)]
    run_dir: PathBuf,
    /// The lock key every worker contends for.
    #[arg(long)]
    key: String,
    /// Stop starting new iterations after this long.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Stop after this many iterations.
    #[arg(long, default_value_t = u64::MAX)]
    iterations: u64,
    /// `watchdog` or a fixed lease such as `800ms`.
    #[arg(long, default_value = "watchdog")]
    lease: String,
    /// Wait time of each acquire.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    wait: Duration,
    /// The longest time between reading the resource and writing it back (a random part of it
    /// each time), which widens the window a paused holder can fall into.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20ms")]
    hold: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let name = std::env::var("TELCO_PLATFORM_LOCK_INSTANCE_ID").unwrap_or_else(|_| "worker".into());
    let lease = match parse_lease(&args.lease) {
        Ok(lease) => lease,
        Err(e) => {
            eprintln!("{name}: bad --lease {:?}: {e}", args.lease);
            return ExitCode::from(2);
        }
    };
    if args.workload != Workload::Lock {
        return toolkit(args, name).await;
    }
    let (recorder, resource) = match (
        Recorder::create(&args.run_dir.join("history"), &name),
        FencedResource::open(&args.run_dir.join("resource")),
    ) {
        (Ok(r), Ok(f)) => (r, f),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{name}: cannot open the run directory: {e}");
            return ExitCode::from(2);
        }
    };
    let lock = match lock_from_environment().await {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(78);
        }
    };
    let worker = Worker {
        name,
        key: args.key.clone(),
        recorder,
        resource,
    };
    let stop_at = Instant::now() + args.duration;
    let options = match AcquireOptions::new(lease).wait_time(args.wait) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("--wait: {error}");
            return ExitCode::from(2);
        }
    };
    let mut iteration = 0;
    while iteration < args.iterations && Instant::now() < stop_at {
        iteration += 1;
        if let Err(e) = worker.iterate(&*lock, options, args.hold, iteration).await {
            eprintln!("{}: history or resource I/O failed: {e}", worker.name);
            return ExitCode::from(3);
        }
    }
    ExitCode::SUCCESS
}

/// Runs a toolkit workload.
async fn toolkit(args: Args, name: String) -> ExitCode {
    let recorder = match Recorder::create(&args.run_dir.join("history"), &name) {
        Ok(recorder) => recorder,
        Err(e) => {
            eprintln!("{name}: cannot open the run directory: {e}");
            return ExitCode::from(2);
        }
    };
    let starter = match LockStarter::builder().build().await {
        Ok(starter) => starter,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(78);
        }
    };
    let ctx = Context {
        name,
        ordinal: args.ordinal,
        recorder: std::sync::Arc::new(recorder),
        starter,
        stop_at: Instant::now() + args.duration,
        hold: args.hold,
    };
    let done = if args.drain {
        workload::finish(args.workload, &ctx).await
    } else {
        workload::work(args.workload, &ctx).await
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: history I/O failed: {e}", ctx.name);
            ExitCode::from(3)
        }
    }
}

struct Worker {
    name: String,
    key: String,
    recorder: Recorder,
    resource: FencedResource,
}

impl Worker {
    fn record_lost(&self, key: &str, token: u64, reason: LostReason) -> std::io::Result<()> {
        self.recorder.record(Event {
            process: self.name.clone(),
            t_ns: monotonic_ns(),
            op: Op::Lost,
            phase: Phase::Complete,
            key: key.to_owned(),
            token: Some(token),
            ok: Some(false),
            code: None,
            reason: Some(reason.to_string()),
            value: None,
        })
    }

    /// acquire → read → (hold) → fenced write → release, each step recorded.
    async fn iterate(
        &self,
        lock: &dyn DistributedLock,
        options: AcquireOptions,
        hold: Duration,
        iteration: u64,
    ) -> std::io::Result<()> {
        let key = self.key.as_str();
        self.recorder.invoke(Op::Acquire, key)?;
        let handle = match lock.acquire_with(key, options).await {
            Ok(handle) => handle,
            Err(error) => {
                let details = error.details();
                self.recorder.complete_err(
                    Op::Acquire,
                    key,
                    None,
                    error.code(),
                    &details["reason"],
                )?;
                if details["reason"] != "held_by_another_owner" {
                    // Redis is down or refusing: do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                return Ok(());
            }
        };
        let token = handle.fencing_token();
        self.recorder
            .complete_ok(Op::Acquire, key, Some(token), None)?;

        let (value, _) = self.resource.read(key)?;
        // A pseudo-random hold from the iteration and the token; no RNG state to keep.
        let hold = hold.mul_f64(((iteration * 7919 + token) % 1000) as f64 / 1000.0);
        let lost = handle.lost();
        tokio::pin!(lost);
        let mut told = false;
        tokio::select! {
            reason = &mut lost => {
                told = true;
                self.record_lost(key, token, reason)?;
            }
            () = tokio::time::sleep(hold) => {
                self.recorder.invoke(Op::Write, key)?;
                match self.resource.write(key, token, &self.name, value + 1)? {
                    WriteOutcome::Accepted => {
                        self.recorder.complete_ok(Op::Write, key, Some(token), Some(value + 1))?
                    }
                    WriteOutcome::Rejected { .. } => {
                        self.recorder
                            .complete_err(Op::Write, key, Some(token), "STALE", "stale")?
                    }
                }
            }
        }

        // Like a service would before reporting its work done: did the lease hold throughout?
        // (A holder paused past its lease learns it here when it resumes.)
        if let (LeaseStatus::Lost(reason), false) = (handle.status(), told) {
            self.record_lost(key, token, reason)?;
        }
        self.recorder.invoke(Op::Release, key)?;
        match handle.release().await {
            Ok(ReleaseOutcome::Released) => {
                self.recorder
                    .complete_ok(Op::Release, key, Some(token), None)?
            }
            Ok(ReleaseOutcome::NotHeld) => {
                self.recorder
                    .complete_err(Op::Release, key, Some(token), "NOT_HELD", "not_held")?
            }
            Err(error) => self.recorder.complete_err(
                Op::Release,
                key,
                Some(token),
                error.code(),
                &error.details()["reason"],
            )?,
        }
        Ok(())
    }
}
