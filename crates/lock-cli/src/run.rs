//! `run`: a command under a lock, like flock(1) across machines — acquire, run the command
//! under a guardian that kills it should platform-lock die, forward SIGINT and SIGTERM to it
//! (SIGKILL after a grace), terminate it if the lease is lost, release, and exit with its code.

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use lock_starter::{
    AcquireFailure, AcquireOptions, DistributedLock, Lease, LockHandle, LostReason, ReleaseOutcome,
};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use crate::Redis;
use crate::args::{EXIT_CANNOT_EXECUTE, EXIT_LEASE_LOST, EXIT_NOT_ACQUIRED, EXIT_NOT_FOUND};
use crate::guardian::{Guardian, Target};
use crate::output::Failure;
use crate::spinner::Spinner;

/// How long the command gets before SIGKILL: once the lease is lost (after SIGTERM), and from
/// the first SIGTERM — or, off a terminal, SIGINT — forwarded to it (later ones are forwarded
/// too, and do not restart it). The rest of its process group gets what is left of it after the
/// command ends.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// The exit code when platform-lock itself fails around the command (no signal handlers, no
/// guardian, no wait status).
const EXIT_RUNNER: u8 = 1;

/// `platform-lock run --key KEY [--lease D] [--wait D] -- COMMAND…`: the command's exit code
/// (128+N if a signal N ended it) once it ended and the lock was released.
pub(crate) async fn run(
    redis: &Redis,
    key: &str,
    lease: Lease,
    wait: Duration,
    command: &[String],
) -> Result<u8, Failure> {
    let handle = acquire(redis, key, lease, wait).await?;
    // Before the child exists: a SIGTERM arriving between spawn and handler would otherwise
    // kill platform-lock and orphan the command, still running but no longer under the lock.
    let (mut interrupts, mut terminates) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupts), Ok(terminates)) => (interrupts, terminates),
        (Err(error), _) | (_, Err(error)) => {
            let _ = handle.release().await;
            return Err(Failure::new(
                EXIT_RUNNER,
                format!(
                    "cannot install the SIGINT/SIGTERM handlers: {error}; the command did not run"
                ),
            ));
        }
    };
    // Also before the child exists, for the same reason with SIGKILL: the guardian kills the
    // command if platform-lock dies in any way.
    let mut guardian = match Guardian::start() {
        Ok(guardian) => guardian,
        Err(error) => {
            let _ = handle.release().await;
            return Err(Failure::new(
                EXIT_RUNNER,
                format!(
                    "cannot start the guardian process that kills the command should \
                     platform-lock die ({error}); the command did not run and the lock was \
                     released"
                ),
            ));
        }
    };
    // Off a terminal (cron, systemd, a Kubernetes job, a CI step) the command gets a process
    // group of its own, and every signal goes to that group: a shell script's workers (`sh -c
    // 'a; b'`, `make`, `xargs`) are stopped with it, rather than running on without the lock
    // once the lease is lost. On a terminal the command stays in the terminal's foreground
    // group, so it can read the terminal and Ctrl-C reaches all of its processes directly;
    // there only the command itself is signalled.
    let own_group = !std::io::stdin().is_terminal();
    let mut spawn = tokio::process::Command::new(&command[0]);
    spawn.args(&command[1..]).env(
        "PLATFORM_LOCK_FENCING_TOKEN",
        handle.fencing_token().to_string(),
    );
    if own_group {
        spawn.process_group(0);
    }
    let mut child = match spawn.spawn() {
        Ok(child) => child,
        Err(error) => {
            guardian.dismiss().await;
            let _ = handle.release().await;
            return Err(cannot_spawn(&command[0], &error));
        }
    };
    let target = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
        .map(|pid| {
            if own_group {
                Target::Group(pid)
            } else {
                Target::Process(pid)
            }
        });
    let signal_child = |signal: Signal| {
        if let Some(target) = target {
            let _ = target.signal(signal);
        }
    };
    if let Some(target) = target {
        if let Err(error) = guardian.arm(target).await {
            signal_child(Signal::SIGKILL);
            let _ = child.wait().await;
            let _ = handle.release().await;
            return Err(Failure::new(
                EXIT_RUNNER,
                format!(
                    "the guardian process went away before the command was handed to it \
                     ({error}); the command was killed and the lock released"
                ),
            ));
        }
    }
    // Whether a process of the command's group is left (the command itself once reaped).
    let group_left = || matches!(target, Some(Target::Group(pid)) if killpg(pid, None).is_ok());
    let lost = handle.lost();
    tokio::pin!(lost);
    let mut lease_lost = false;
    // When the command gets SIGKILL: set by the first signal that asks it to end (forwarded, or
    // a lost lease) and never moved, so repeated signals cannot put the end off.
    let mut grace_ends: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        let kill_at = grace_ends.filter(|_| !killed);
        tokio::select! {
            status = child.wait() => break status,
            _ = interrupts.recv() => {
                signal_child(Signal::SIGINT);
                // On a terminal SIGINT is most likely Ctrl-C, which the command got from the
                // terminal too and may handle without ending (a REPL, an editor, `less`).
                if own_group {
                    grace_ends.get_or_insert_with(|| Instant::now() + KILL_GRACE);
                }
            }
            _ = terminates.recv() => {
                signal_child(Signal::SIGTERM);
                grace_ends.get_or_insert_with(|| Instant::now() + KILL_GRACE);
            }
            reason = &mut lost, if !lease_lost => {
                lease_lost = true;
                let why = match (lease, reason) {
                    (Lease::Fixed(lease), LostReason::Expired) => format!(
                        "its fixed lease of {} ran out",
                        humantime::format_duration(lease)
                    ),
                    _ => reason.to_string(),
                };
                eprintln!(
                    "platform-lock: the lease on lock `{key}` was lost ({why}); \
                     terminating the command (SIGTERM, SIGKILL after {} s)",
                    KILL_GRACE.as_secs()
                );
                signal_child(Signal::SIGTERM);
                // A grace already running (a forwarded signal) is not extended.
                grace_ends.get_or_insert_with(|| Instant::now() + KILL_GRACE);
            }
            () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                killed = true;
                signal_child(Signal::SIGKILL);
                let _ = child.start_kill();
            }
        }
    };
    if let Some(grace_ends) = grace_ends {
        // The rest of its group gets the rest of the grace. (The command is reaped: only its
        // group, never its pid, may be signalled now.)
        while group_left() && Instant::now() < grace_ends {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if group_left() {
            signal_child(Signal::SIGKILL);
        }
    }
    // The command is reaped: its pid (and an empty group's id) may be reused by an unrelated
    // process, so the guardian stays armed only while the command's group still has members.
    let guardian = if group_left() {
        Some(guardian)
    } else {
        guardian.dismiss().await;
        None
    };
    if lease_lost {
        if let Some(guardian) = guardian {
            guardian.dismiss().await;
        }
        return Ok(EXIT_LEASE_LOST);
    }
    let released = handle.release().await;
    // Only now: should platform-lock die while releasing, what is left of the group goes too.
    if let Some(guardian) = guardian {
        guardian.dismiss().await;
    }
    match released {
        Ok(ReleaseOutcome::Released) => {}
        // The lease ended (a forced release, or a fixed lease running out) after the last
        // check and before the command finished: it did not run under the lock to its end,
        // which a caller relying on exclusion must hear, whatever the command's own code.
        Ok(ReleaseOutcome::NotHeld) => {
            eprintln!(
                "platform-lock: the lease on lock `{key}` had ended when the command finished \
                 (released by someone else, or run out); it did not hold the lock to its end"
            );
            return Ok(EXIT_LEASE_LOST);
        }
        Err(error) => eprintln!("platform-lock: warning: {error}"),
    }
    match status {
        Ok(status) => {
            let code = status
                .code()
                .or_else(|| status.signal().map(|n| 128 + n))
                .unwrap_or(1);
            Ok(u8::try_from(code).unwrap_or(1))
        }
        Err(error) => Err(Failure::new(
            EXIT_RUNNER,
            format!("waiting for the command failed: {error}"),
        )),
    }
}

/// Acquires `key`, showing the spinner on a terminal while it waits.
async fn acquire(
    redis: &Redis,
    key: &str,
    lease: Lease,
    wait: Duration,
) -> Result<LockHandle, Failure> {
    let options = AcquireOptions::new(lease).wait(wait);
    // A bad key is a usage error, reported before a spinner would show it as waited for.
    options
        .validate(key)
        .map_err(|error| redis.failure(&format!("acquiring lock `{key}`"), &error))?;
    let spinner = Spinner::start(&redis.lock, key);
    let acquired = redis.lock.acquire_with(key, options).await;
    if let Some(spinner) = spinner {
        spinner.stop().await;
    }
    acquired.map_err(|error| match error.acquire_failure() {
        Some(AcquireFailure::HeldByAnotherOwner { .. } | AcquireFailure::WaitersAhead { .. }) => {
            Failure::new(
                EXIT_NOT_ACQUIRED,
                format!(
                    "{error}; the command did not run — try again later or wait longer (--wait)"
                ),
            )
        }
        _ => redis.failure(&format!("acquiring lock `{key}`"), &error),
    })
}

/// The one line for a command that could not be started, with the shell's exit codes: 127 when
/// it was not found, 126 when it could not be executed.
fn cannot_spawn(program: &str, error: &std::io::Error) -> Failure {
    if error.kind() == std::io::ErrorKind::NotFound {
        // ENOENT is also what a script whose #! interpreter is missing gets.
        return Failure::new(
            EXIT_NOT_FOUND,
            format!(
                "cannot run `{program}`: command not found ({error}); check the name and PATH \
                 (for a script, its #! line); the lock was released"
            ),
        );
    }
    Failure::new(
        EXIT_CANNOT_EXECUTE,
        format!(
            "cannot run `{program}`: not executable ({error}); check that it is a program or a \
             script with a #! line and execute permission (chmod +x); the lock was released"
        ),
    )
}
