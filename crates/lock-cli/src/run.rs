//! `run`: a command under a lock, like flock(1) across machines — acquire, run the command
//! under a guardian that kills it should platform-lock die, forward SIGINT and SIGTERM to it
//! (SIGKILL after a grace), terminate it before its lease runs out or once the lease is lost,
//! stop what is left of its process group, release, and exit with its code.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use lock_starter::lock::{
    AcquireFailure, AcquireOptions, DistributedLock, Lease, LeaseStatus, LockHandle, LostReason,
    ReleaseOutcome,
};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use crate::Redis;
use crate::exit::{EXIT_CANNOT_EXECUTE, EXIT_LEASE_LOST, EXIT_NOT_ACQUIRED, EXIT_NOT_FOUND};
use crate::guardian::{Guardian, Target};
use crate::output::{Failure, say};
use crate::spinner::Spinner;

/// How long the command gets before SIGKILL: once the lease is lost (after SIGTERM), and from
/// the first SIGTERM — or, off a terminal, SIGINT — forwarded to it (later ones are forwarded
/// too, and do not restart it). The rest of its process group gets what is left of it after the
/// command ends, or all of it when the command ended by itself and left processes behind. Ahead
/// of a lease's end it is shortened so that SIGKILL lands before the lease does ([`LeaseEnd`]).
const KILL_GRACE: Duration = Duration::from_secs(5);

/// At most this long before the lease's local deadline the command gets SIGKILL (a tenth of the
/// lease's window when that is shorter): time for the kill to land and the group to be reaped
/// before Redis can expire the key and grant it to another host.
const KILL_LEAD_MAX: Duration = Duration::from_millis(250);

/// How often the guardian hears of the lease's deadline: far more often than renewals move it.
const GUARDIAN_UPDATE: Duration = Duration::from_millis(100);

/// How often the group left behind by the command is checked for members.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// When `run` ends the command ahead of its lease's local deadline (the last confirmed expiry
/// minus the client's safety margin), so that the command is dead before the key can be granted
/// to anyone else: SIGTERM once the deadline is `terminate` away, SIGKILL once it is `kill` away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LeaseEnd {
    terminate: Duration,
    kill: Duration,
}

impl LeaseEnd {
    /// The lead times for a lease whose deadline is `window` away when the command starts.
    ///
    /// A fixed lease gets the whole [`KILL_GRACE`] between SIGTERM and SIGKILL when the command
    /// has at least as long to run before it; a shorter lease is split in half: SIGTERM halfway
    /// between the start and SIGKILL. A watchdog lease normally keeps its deadline more than two
    /// thirds of its window away (a renewal every third); SIGTERM goes once a quarter or less is
    /// left — one renewal missed, and the last one sent before the deadline not confirmed a
    /// twelfth of the window after it went out — and at most `KILL_GRACE` before SIGKILL.
    fn new(lease: Lease, window: Duration) -> LeaseEnd {
        let kill = (window / 10).min(KILL_LEAD_MAX);
        let before_kill = window.saturating_sub(kill);
        let grace = match lease {
            Lease::Fixed(_) if before_kill >= 2 * KILL_GRACE => KILL_GRACE,
            Lease::Fixed(_) => before_kill / 2,
            Lease::Watchdog => (window / 4).saturating_sub(kill).min(KILL_GRACE),
        };
        LeaseEnd {
            terminate: kill + grace,
            kill,
        }
    }
}

/// The lease's local deadline while it is held and has one.
fn deadline(handle: &LockHandle) -> Option<Instant> {
    match handle.status() {
        LeaseStatus::Held { valid_until } => valid_until,
        _ => None,
    }
}

/// When the guardian is to kill the command: `run`'s own SIGKILL, ahead of the lease's local
/// deadline (`end`) or at the end of a running grace, whichever comes first; `None` when
/// neither is known (the last instant sent then stands).
fn guardian_kill(
    handle: &LockHandle,
    end: Option<LeaseEnd>,
    grace_ends: Option<Instant>,
) -> Option<Instant> {
    let lease = end
        .zip(deadline(handle))
        .map(|(end, at)| ahead_of(at, end.kill));
    match (lease, grace_ends) {
        (Some(lease), Some(grace)) => Some(lease.min(grace)),
        (lease, grace) => lease.or(grace),
    }
}

/// `deadline - lead`, or now if that has passed.
fn ahead_of(deadline: Instant, lead: Duration) -> Instant {
    deadline
        .checked_sub(lead)
        .map_or_else(Instant::now, |at| at.max(Instant::now()))
}

/// Whether `run` is in the foreground of its controlling terminal: a person at the terminal
/// started it (its input may be a pipe) and the command may read the terminal, and gets Ctrl-C
/// and Ctrl-Z from it.
fn in_terminal_foreground() -> bool {
    std::fs::File::open("/dev/tty").is_ok_and(|tty| {
        nix::unistd::tcgetpgrp(&tty).is_ok_and(|group| group == nix::unistd::getpgrp())
    })
}

/// Whether process group `group` still has a member. Members that ended are reaped first: `run`
/// is their subreaper once the command (their parent) is gone, and a zombie still counts as a
/// member to kill(2).
fn group_has_members(group: Pid) -> bool {
    let members = Pid::from_raw(-group.as_raw());
    while let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
        waitpid(members, Some(WaitPidFlag::WNOHANG))
    {}
    killpg(group, None).is_ok()
}

/// A duration for a message: `4.8 s`, or `350 ms` under a second.
fn seconds(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

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
    command: &[std::ffi::OsString],
) -> Result<u8, Failure> {
    let handle = acquire(redis, key, lease, wait).await?;
    // Before the child exists: a SIGTERM arriving between spawn and handler would otherwise
    // kill platform-lock and orphan the command, still running but no longer under the lock.
    // SIGHUP too: a closed terminal or session otherwise kills `run` with the lock held.
    let (mut interrupts, mut terminates, mut hangups) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(interrupts), Ok(terminates), Ok(hangups)) => (interrupts, terminates, hangups),
        (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
            let _ = handle.release().await;
            return Err(Failure::new(
                EXIT_RUNNER,
                format!(
                    "cannot install the SIGINT/SIGTERM/SIGHUP handlers: {error}; the command \
                     did not run"
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
    let own_group = !in_terminal_foreground();
    if own_group {
        // Processes the command leaves behind are reparented to `run` rather than to init, so
        // `run` can reap them and see its group empty before it releases the lock. Without it
        // (a kernel refusing) a parent that does not reap would leave zombies, which the wait
        // for an empty group gives up on after SIGKILL and its grace.
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
    let mut spawn = tokio::process::Command::new(&command[0]);
    spawn.args(&command[1..]).env(
        "PLATFORM_LOCK_FENCING_TOKEN",
        handle.fencing_token().to_string(),
    );
    if own_group {
        spawn.process_group(0);
    }
    // The lease's end as the command starts: a lease already over (a slow start, a lost
    // grant) does not run the command at all.
    let lease_end = match deadline(&handle).filter(|&at| at > Instant::now()) {
        Some(at) => LeaseEnd::new(lease, at - Instant::now()),
        None => {
            guardian.dismiss().await;
            let _ = handle.release().await;
            return Err(Failure::new(
                EXIT_LEASE_LOST,
                format!(
                    "the lease on lock `{key}` ended before the command could start; the \
                     command did not run"
                ),
            ));
        }
    };
    // The guardian kills the command by then should `run` be unable to (stopped, starved).
    let mut guarded_until = deadline(&handle).map(|at| ahead_of(at, lease_end.kill));
    if let Some(kill_at) = guarded_until {
        if let Err(error) = guardian.kill_at(kill_at).await {
            let _ = handle.release().await;
            return Err(guardian_gone(&error));
        }
    }
    guardian.arm_before_exec(&mut spawn, own_group);
    let mut child = match spawn.spawn() {
        Ok(child) => child,
        Err(error) => {
            guardian.dismiss().await;
            let _ = handle.release().await;
            return Err(cannot_spawn(&command[0].to_string_lossy(), &error));
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
            return Err(guardian_gone(&error));
        }
    }
    let lost = handle.lost();
    tokio::pin!(lost);
    let lease_end = Some(lease_end);
    let mut guard_updates = tokio::time::interval(GUARDIAN_UPDATE);
    let mut lease_lost = false;
    // Set once the command was told to end because its lease is about to end.
    let mut lease_ending = false;
    // When the command gets SIGKILL: set by the first signal that asks it to end (forwarded, or
    // a lost lease) and never put off; only a lease about to end brings it forward.
    let mut grace_ends: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        let kill_at = grace_ends.filter(|_| !killed);
        let terminate_at = lease_end
            .zip(deadline(&handle))
            .filter(|_| !lease_ending)
            .map(|(end, at)| ahead_of(at, end.terminate));
        tokio::select! {
            status = child.wait() => break status,
            _ = guard_updates.tick() => {
                // A renewal moved the deadline out, or a grace started: so does the guardian's
                // kill. A guardian gone cannot be re-armed; `run` still ends the command itself.
                let kill_at = guardian_kill(&handle, lease_end, grace_ends);
                if let Some(kill_at) = kill_at.filter(|&at| Some(at) != guarded_until) {
                    guarded_until = Some(kill_at);
                    let _ = guardian.kill_at(kill_at).await;
                }
            }
            _ = interrupts.recv() => {
                // On a terminal SIGINT is most likely Ctrl-C, which the command got from the
                // terminal too and may handle without ending (a REPL, an editor, `less`): a
                // second one would be a second Ctrl-C to it ("press again to force quit").
                if own_group {
                    signal_child(Signal::SIGINT);
                    grace_ends.get_or_insert_with(|| Instant::now() + KILL_GRACE);
                }
            }
            _ = terminates.recv() => {
                signal_child(Signal::SIGTERM);
                grace_ends.get_or_insert_with(|| Instant::now() + KILL_GRACE);
            }
            _ = hangups.recv() => {
                // Also on a terminal: when `run` leads the session (`ssh -t`, `tmux new`), the
                // terminal's hangup reaches it alone.
                signal_child(Signal::SIGHUP);
                grace_ends.get_or_insert_with(|| Instant::now() + KILL_GRACE);
            }
            () = sleep_until(terminate_at.unwrap_or_else(Instant::now)), if terminate_at.is_some() => {
                // A watchdog renewal may have moved the deadline out since the timer was set.
                let (Some(end), Some(at)) = (lease_end, deadline(&handle)) else { continue };
                let now = Instant::now();
                if at > now + end.terminate {
                    continue;
                }
                lease_ending = true;
                let kill_at = ahead_of(at, end.kill);
                let kill_at = grace_ends.map_or(kill_at, |ends| ends.min(kill_at));
                grace_ends = Some(kill_at);
                let why = match lease {
                    Lease::Fixed(lease) => format!(
                        "its fixed lease of {} runs out in {}",
                        lock_starter::config::format_duration(lease),
                        seconds(at - now)
                    ),
                    Lease::Watchdog => format!(
                        "its renewals are not being confirmed; it lapses in {}",
                        seconds(at - now)
                    ),
                };
                say(format_args!(
                    "platform-lock: the lease on lock `{key}` is ending ({why}); terminating \
                     the command (SIGTERM now, SIGKILL in {}) so that it is gone before the \
                     lock can be granted to anyone else",
                    seconds(kill_at - now)
                ));
                signal_child(Signal::SIGTERM);
            }
            reason = &mut lost, if !lease_lost => {
                lease_lost = true;
                let why = match (lease, reason) {
                    (Lease::Fixed(lease), LostReason::Expired) => format!(
                        "its fixed lease of {} ran out",
                        lock_starter::config::format_duration(lease)
                    ),
                    _ => reason.to_string(),
                };
                say(format_args!(
                    "platform-lock: the lease on lock `{key}` was lost ({why}); \
                     terminating the command (SIGTERM, SIGKILL after {} s)",
                    KILL_GRACE.as_secs()
                ));
                signal_child(Signal::SIGTERM);
                // A grace already running (a forwarded signal, a lease ending) is not extended.
                grace_ends.get_or_insert_with(|| Instant::now() + KILL_GRACE);
            }
            () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                killed = true;
                signal_child(Signal::SIGKILL);
                let _ = child.start_kill();
            }
        }
    };
    // A SIGKILL `run` did not send, once the guardian's instant had passed and before any
    // grace of `run`'s own ended (then the guardian only beat `run` to the same kill): `run`
    // was stopped or starved, and the guardian ended the command for its lease.
    let now = Instant::now();
    let by_guardian = !killed
        && matches!(&status, Ok(status) if status.signal() == Some(Signal::SIGKILL as i32))
        && guarded_until.is_some_and(|at| at <= now)
        && grace_ends.is_none_or(|ends| ends > now);
    if by_guardian {
        say(format_args!(
            "platform-lock: the command was killed at its lease's end by the guardian \
             (platform-lock was stopped or not scheduled in time); lock `{key}`"
        ));
        lease_ending = true;
    }
    // The command is reaped: only its group, never its pid, may be signalled now. What is left
    // of the group is stopped before the lock is released — another host granted it next must
    // not find the job's workers still running.
    let mut group_left = false;
    if let Some(Target::Group(group)) = target {
        if group_has_members(group) && grace_ends.is_none() {
            say(format_args!(
                "platform-lock: the command ended but left processes running in its process \
                 group; stopping them before releasing lock `{key}` (SIGTERM, SIGKILL after {} s)",
                KILL_GRACE.as_secs()
            ));
            signal_child(Signal::SIGTERM);
            grace_ends = Some(Instant::now() + KILL_GRACE);
        }
        // SIGKILL ahead of the lease's deadline as well; the last one seen is kept, so a lease
        // that ran out meanwhile still counts.
        let mut last_deadline = deadline(&handle);
        let mut killed_at: Option<Instant> = None;
        while group_has_members(group) {
            let kill_at = guardian_kill(&handle, lease_end, grace_ends);
            if let Some(kill_at) = kill_at.filter(|&at| Some(at) != guarded_until) {
                guarded_until = Some(kill_at);
                let _ = guardian.kill_at(kill_at).await;
            }
            let now = Instant::now();
            last_deadline = deadline(&handle).or(last_deadline);
            let lease_due = lease_end
                .zip(last_deadline)
                .is_some_and(|(end, at)| at <= now + end.kill);
            if killed_at.is_none() && (lease_due || grace_ends.is_some_and(|ends| ends <= now)) {
                signal_child(Signal::SIGKILL);
                killed_at = Some(now);
            }
            // Only zombies whose parent is not `run`, or processes in uninterruptible sleep,
            // outlive SIGKILL this long.
            if killed_at.is_some_and(|at| now >= at + KILL_GRACE) {
                say(format_args!(
                    "platform-lock: warning: processes of the command's group outlived SIGKILL \
                     by {} s (zombies, or stuck in the kernel); going on",
                    KILL_GRACE.as_secs()
                ));
                group_left = true;
                break;
            }
            tokio::time::sleep(GROUP_POLL).await;
        }
    }
    // The command is reaped: its pid (and an empty group's id) may be reused by an unrelated
    // process, so the guardian stays armed only while the command's group still has members.
    let guardian = if group_left {
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
    if lease_ending {
        // The command was ended for its lease, which said so; the lease may have run out since.
        if let Err(error) = released {
            say(format_args!("platform-lock: warning: {error}"));
        }
        return Ok(EXIT_LEASE_LOST);
    }
    match released {
        Ok(ReleaseOutcome::Released) => {}
        // The lease ended (a forced release, or a fixed lease running out) after the last
        // check and before the command finished: it did not run under the lock to its end,
        // which a caller relying on exclusion must hear, whatever the command's own code.
        Ok(ReleaseOutcome::NotHeld) => {
            say(format_args!(
                "platform-lock: the lease on lock `{key}` had ended when the command finished \
                 (released by someone else, or run out); it did not hold the lock to its end"
            ));
            return Ok(EXIT_LEASE_LOST);
        }
        Err(error) => say(format_args!("platform-lock: warning: {error}")),
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

/// The failure when the guardian went away before the command was handed to it.
fn guardian_gone(error: &std::io::Error) -> Failure {
    Failure::new(
        EXIT_RUNNER,
        format!(
            "the guardian process went away before the command was handed to it ({error}); \
             the command did not run on, and the lock was released"
        ),
    )
}

/// Acquires `key`, showing the spinner on a terminal while it waits.
async fn acquire(
    redis: &Redis,
    key: &str,
    lease: Lease,
    wait: Duration,
) -> Result<LockHandle, Failure> {
    // A bad key or wait is a usage error, reported before a spinner would show it as waited for.
    let options = AcquireOptions::new(lease)
        .wait_time(wait)
        .and_then(|options| options.validate(key).map(|()| options))
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

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn a_long_fixed_lease_gets_the_whole_grace_before_its_end() {
        let end = LeaseEnd::new(Lease::Fixed(ms(60_000)), ms(59_395));
        assert_eq!(end.kill, KILL_LEAD_MAX);
        assert_eq!(end.terminate, KILL_LEAD_MAX + KILL_GRACE);
    }

    #[test]
    fn a_short_fixed_lease_is_split_in_half() {
        // 1 s: SIGKILL 100 ms before the deadline, SIGTERM halfway to that.
        let end = LeaseEnd::new(Lease::Fixed(ms(1_000)), ms(1_000));
        assert_eq!(end.kill, ms(100));
        assert_eq!(end.terminate, ms(100 + 450));
        // Just under twice the grace before SIGKILL: half of it.
        let end = LeaseEnd::new(Lease::Fixed(ms(10_000)), ms(10_000));
        assert_eq!(end.terminate, ms(250 + 4_875));
    }

    #[test]
    fn a_watchdog_lease_is_ended_once_its_renewals_went_unconfirmed() {
        // The default 30 s: the whole grace once 5.25 s are left (a quarter would be 7.5 s).
        let end = LeaseEnd::new(Lease::Watchdog, ms(30_000));
        assert_eq!(end.terminate, KILL_LEAD_MAX + KILL_GRACE);
        // 3 s: a quarter left (750 ms), SIGKILL 250 ms before the deadline.
        let end = LeaseEnd::new(Lease::Watchdog, ms(3_000));
        assert_eq!((end.terminate, end.kill), (ms(750), ms(250)));
    }

    #[test]
    fn a_window_already_gone_kills_at_once() {
        let end = LeaseEnd::new(Lease::Fixed(ms(100)), Duration::ZERO);
        assert_eq!((end.terminate, end.kill), (Duration::ZERO, Duration::ZERO));
    }
}
