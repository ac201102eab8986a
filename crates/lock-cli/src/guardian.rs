//! The guardian of `run`: a small process (this binary, re-executed as the hidden `guardian`
//! subcommand) that SIGKILLs the command if `platform-lock run` dies without ending it — SIGKILL,
//! the OOM killer, a crash — or cannot end it in time — stopped (SIGSTOP, Ctrl-Z), or not
//! scheduled — so the command cannot go on running after its lease stops being renewed.
//!
//! It holds the read end of a pipe whose write end only the wrapper holds (close-on-exec, so the
//! command never inherits it). The command's process names itself as the target on that pipe
//! between fork and exec, so no instant of the command runs unguarded. When the kernel closes
//! the write end — the wrapper ended, whatever ended it — the guardian reads EOF. If the wrapper
//! told it `done` first, the command had ended and the guardian just exits; otherwise it kills
//! the target it was given. The wrapper also tells it, before the command starts and after each
//! renewal or grace, the instant by which the command must be dead (its SIGKILL ahead of the
//! lease's local deadline or at a grace's end, on `CLOCK_MONOTONIC`, which both processes read
//! alike); the guardian kills the target then, unless the wrapper sent another instant
//! meanwhile. A parent-death signal (`PR_SET_PDEATHSIG`) is not used: it follows the spawning
//! *thread*, not the process, and EOF already arrives on every kind of death.

use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};

/// The hidden subcommand the wrapper re-executes this binary with.
pub(crate) const SUBCOMMAND: &str = "guardian";

/// The wrapper's last word on a normal end: the command ended, nothing is to be killed.
const DONE: &str = "done";
/// The order naming the instant (ns of `CLOCK_MONOTONIC`) by which the command must be dead.
const KILL_AT: &str = "kill-at";

/// How long a normal end waits for the guardian to exit after `done`, so that it does not
/// outlive `run`; it exits at once, and a stopped one must not hold `run` up.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// What the guardian kills if the wrapper dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The command's own process group: the command and every process it started there.
    Group(Pid),
    /// Only the command (on a terminal it shares the terminal's foreground group with the
    /// shell's job, which is not the guardian's to kill).
    Process(Pid),
}

impl Target {
    /// Sends `signal` to the target.
    pub(crate) fn signal(self, signal: Signal) -> nix::Result<()> {
        match self {
            Target::Group(pid) => killpg(pid, signal),
            Target::Process(pid) => kill(pid, signal),
        }
    }

    /// Writes the order line the guardian reads; allocates nothing, so a forked child may call it.
    fn write_order(self, out: &mut impl Write) -> std::io::Result<()> {
        match self {
            Target::Group(pid) => writeln!(out, "group {pid}"),
            Target::Process(pid) => writeln!(out, "process {pid}"),
        }
    }

    /// The order line the guardian reads.
    #[cfg(test)]
    fn order(self) -> String {
        let mut line = Vec::new();
        self.write_order(&mut line).expect("writing to a Vec");
        String::from_utf8(line).expect("an order is ASCII")
    }
}

/// What the wrapper has told the guardian so far.
#[derive(Debug, Default, PartialEq, Eq)]
struct Orders {
    /// The last target named; `None` once the wrapper said `done`.
    target: Option<Target>,
    /// The last `kill-at` instant, ns of `CLOCK_MONOTONIC`.
    kill_at: Option<u64>,
    done: bool,
}

impl Orders {
    /// Takes in one order line; a broken one is ignored.
    fn take(&mut self, line: &str) {
        let pid = |pid: &str| pid.parse().ok().map(Pid::from_raw);
        match line.split_once(' ') {
            _ if line == DONE => self.done = true,
            Some(("group", id)) => self.target = pid(id).map(Target::Group),
            Some(("process", id)) => self.target = pid(id).map(Target::Process),
            Some((KILL_AT, at)) => self.kill_at = at.parse().ok().or(self.kill_at),
            _ => {}
        }
    }

    /// What is to be killed now, if anything: the target, unless the wrapper said `done`.
    fn target(&self) -> Option<Target> {
        // Pid 0 and negative ids mean "my group" / "every process" to kill(2): never a target.
        self.target.filter(|target| match target {
            Target::Group(pid) | Target::Process(pid) => !self.done && pid.as_raw() > 0,
        })
    }

    /// The orders of `text`, a line each.
    #[cfg(test)]
    fn of(text: &str) -> Orders {
        let mut orders = Orders::default();
        text.lines().for_each(|line| orders.take(line));
        orders
    }
}

/// `CLOCK_MONOTONIC` now, in ns.
fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always there on Linux");
    u64::try_from(now.tv_sec()).unwrap_or(0) * 1_000_000_000
        + u64::try_from(now.tv_nsec()).unwrap_or(0)
}

/// The wrapper's side: the guardian process and the write end of its pipe.
pub(crate) struct Guardian {
    process: Child,
    orders: ChildStdin,
}

impl Guardian {
    /// Starts the guardian, before the command exists, so no command runs unguarded for want of
    /// one. Its stdout and stderr are not the wrapper's: a reader of `run`'s output must see
    /// EOF when `run` and its command are gone. It gets a process group of its own, so a signal
    /// for the wrapper's group (`timeout -k`, a terminal's Ctrl-C) does not take it along.
    ///
    /// # Errors
    /// The spawn error: this binary could not be executed again.
    pub(crate) fn start() -> std::io::Result<Guardian> {
        // The running binary itself, even if it was replaced or deleted since it started.
        let program = match std::path::Path::new("/proc/self/exe") {
            path if path.exists() => path.to_path_buf(),
            _ => std::env::current_exe()?,
        };
        let mut process = tokio::process::Command::new(program)
            // Named so in `ps`, not `/proc/self/exe`.
            .arg0("platform-lock")
            .arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let orders = process
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the guardian's stdin is not a pipe"))?;
        Ok(Guardian { process, orders })
    }

    /// Makes the process `command` spawns arm the guardian with itself (its own process group
    /// when `own_group`) before it executes the command, so a wrapper killed right after the
    /// spawn still takes the command along. A guardian already gone fails the spawn.
    // `pre_exec` and a borrowed raw descriptor are the only ways to act between fork and exec.
    #[allow(unsafe_code)]
    pub(crate) fn arm_before_exec(&self, command: &mut tokio::process::Command, own_group: bool) {
        let orders = self.orders.as_raw_fd();
        let arm = move || {
            let pid = nix::unistd::getpid();
            let target = if own_group {
                Target::Group(pid)
            } else {
                Target::Process(pid)
            };
            let mut line = [0_u8; 32];
            let mut rest = &mut line[..];
            target.write_order(&mut rest)?;
            let length = 32 - rest.len();
            // SAFETY: `orders` is the wrapper's open write end, inherited by the forked child
            // and closed only at exec.
            let orders = unsafe { BorrowedFd::borrow_raw(orders) };
            match nix::unistd::write(orders, &line[..length]) {
                Ok(written) if written == length => Ok(()),
                Ok(_) => Err(std::io::Error::other("the guardian took part of its order")),
                Err(errno) => Err(errno.into()),
            }
        };
        // SAFETY: the hook runs in the forked child of a multi-threaded process, where only
        // async-signal-safe operations are sound. It calls getpid(2) and write(2) and formats
        // into a stack buffer; nothing allocates or takes a lock.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(arm);
        }
    }

    /// Tells the guardian again, from the wrapper, what to kill should the wrapper die: finds
    /// out whether the guardian is still there.
    ///
    /// # Errors
    /// The guardian is gone (someone killed it): the command is not guarded.
    pub(crate) async fn arm(&mut self, target: Target) -> std::io::Result<()> {
        let mut line = Vec::new();
        target.write_order(&mut line)?;
        self.orders.write_all(&line).await?;
        self.orders.flush().await
    }

    /// Tells the guardian the instant by which the command must be dead: it kills the target
    /// then, should the wrapper not have ended it or sent a later instant.
    ///
    /// # Errors
    /// The guardian is gone (someone killed it): the command is not guarded.
    pub(crate) async fn kill_at(&mut self, at: tokio::time::Instant) -> std::io::Result<()> {
        let ahead = at.saturating_duration_since(tokio::time::Instant::now());
        let at = monotonic_ns().saturating_add(u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX));
        self.orders
            .write_all(format!("{KILL_AT} {at}\n").as_bytes())
            .await?;
        self.orders.flush().await
    }

    /// A normal end: the guardian kills nothing and exits, and is waited for (at most
    /// [`EXIT_WAIT`]) so it does not outlive `run`.
    pub(crate) async fn dismiss(self) {
        let Guardian {
            mut process,
            mut orders,
        } = self;
        // A guardian that went away has nothing left to do either.
        let _ = orders.write_all(format!("{DONE}\n").as_bytes()).await;
        drop(orders);
        let _ = tokio::time::timeout(EXIT_WAIT, process.wait()).await;
    }
}

/// `platform-lock guardian`: waits for EOF on stdin, then kills the target it was given unless
/// it was told `done`. Exit code 0, or [`crate::exit::EXIT_USAGE`] when started by hand on a
/// terminal (it would read orders from the keyboard).
pub(crate) fn main() -> ExitCode {
    // Signals meant for the command's group, its job or its session (it shares the session)
    // must not end the guardian before it can do its one job; SIGKILL still can.
    let mut blocked = SigSet::empty();
    for signal in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        blocked.add(signal);
    }
    let _ = blocked.thread_block();
    if std::io::stdin().is_terminal() {
        eprintln!(
            "platform-lock: `{SUBCOMMAND}` is started by `platform-lock run` with a pipe on \
             stdin, not by hand; use `platform-lock run`"
        );
        return ExitCode::from(crate::exit::EXIT_USAGE);
    }
    let mut orders = Orders::default();
    let (mut pending, mut chunk) = (Vec::new(), [0_u8; 512]);
    let stdin = std::io::stdin();
    loop {
        let now = monotonic_ns();
        if let Some(target) = orders
            .target()
            .filter(|_| orders.kill_at.is_some_and(|at| at <= now))
        {
            let _ = target.signal(Signal::SIGKILL);
            // Killed once: nothing of it is left, and its id may be reused.
            (orders.target, orders.kill_at) = (None, None);
        }
        // No timeout without a target: the instant is checked again when one arrives.
        let deadline = orders.kill_at.filter(|_| orders.target().is_some());
        let wait = deadline.map_or(nix::poll::PollTimeout::NONE, |at| {
            let ms = at.saturating_sub(now).div_ceil(1_000_000).min(60_000);
            nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX)
        });
        let mut fds = [nix::poll::PollFd::new(
            stdin.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, wait) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            // Fail closed: as at EOF.
            Err(_) => break,
        }
        // From the descriptor itself: `Stdin`'s buffer could keep a newer order from `poll`.
        match nix::unistd::read(stdin.as_fd(), &mut chunk) {
            // EOF (the wrapper ended) or a read error, which is treated alike: fail closed.
            Ok(0) | Err(_) => break,
            Ok(read) => pending.extend_from_slice(&chunk[..read]),
        }
        while let Some(end) = pending.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            orders.take(String::from_utf8_lossy(&line).trim_end());
        }
    }
    if let Some(target) = orders.target() {
        let _ = target.signal(Signal::SIGKILL);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_name_the_target_unless_the_wrapper_said_done() {
        let group = Target::Group(Pid::from_raw(4711));
        let process = Target::Process(Pid::from_raw(42));
        assert_eq!(Orders::of(&group.order()).target(), Some(group));
        assert_eq!(Orders::of(&process.order()).target(), Some(process));
        assert_eq!(
            Orders::of(&format!("{}{DONE}\n", group.order())).target(),
            None
        );
        // The wrapper died before the command existed, or wrote something broken.
        assert_eq!(Orders::of("").target(), None);
        assert_eq!(Orders::of("group 0\n").target(), None);
        assert_eq!(Orders::of("group -1\n").target(), None);
        assert_eq!(Orders::of("group 12x\n").target(), None);
    }

    #[test]
    fn the_last_kill_instant_given_holds_and_a_broken_one_changes_nothing() {
        let orders = Orders::of("kill-at 100\ngroup 7\nkill-at 250\nkill-at soon\n");
        assert_eq!(orders.kill_at, Some(250));
        assert_eq!(orders.target(), Some(Target::Group(Pid::from_raw(7))));
    }
}
