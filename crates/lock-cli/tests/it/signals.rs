//! `platform-lock run` forwards SIGTERM and SIGINT to its command (no terminal involved: the
//! signal goes to platform-lock's pid only, as a process supervisor or `kill` sends it), exits
//! with the command's code, and releases the lock; a command that ignores them is killed after
//! the grace.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{
    PROCESS_SLACK, Reap, alive, code, read_pid, redis_and_other_pod, start_ready, stderr,
};
use lock_starter::lock::{DistributedLock, Lease, ReleaseOutcome};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The documented grace between the first forwarded signal and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// A command that traps `trap_signal`, writes `got-<name>` to `file` when it arrives and exits
/// `exit_code`; it says `ready` on stdout once the trap is set. Waiting with the `wait` builtin,
/// which a trapped signal interrupts at once (a foreground `sleep` would delay the trap).
fn trapping_command(trap_signal: &str, file: &Path, exit_code: u8) -> String {
    let name = trap_signal.to_lowercase();
    format!(
        "trap 'echo got-{name} > \"{}\"; exit {exit_code}' {trap_signal}; echo ready; \
         while :; do sleep 1 & wait $!; done",
        file.display()
    )
}

/// Runs the trapping command under lock `job`, sends `signal` to platform-lock once the command
/// runs, and checks the command got it, platform-lock exited with its code, and the lock is free.
async fn forwards(signal: Signal, trap_signal: &str, exit_code: u8) {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("received");
    let script = trapping_command(trap_signal, &file, exit_code);
    let child = start_ready(&url, &script).await;
    assert!(
        pod.status("job").await.unwrap().is_held(),
        "the command runs without the lock"
    );

    let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    kill(pid, signal).unwrap();
    let output = tokio::time::timeout(PROCESS_SLACK, child.wait_with_output())
        .await
        .expect("platform-lock did not end after the signal")
        .unwrap();
    // platform-lock itself exited (it did not die of the signal), with the command's code.
    assert_eq!(code(&output), i32::from(exit_code), "{}", stderr(&output));
    let received = std::fs::read_to_string(&file).expect("the command never got the signal");
    assert_eq!(
        received.trim(),
        format!("got-{}", trap_signal.to_lowercase())
    );
    // Released on the way out, not left to the watchdog TTL.
    assert!(
        !pod.status("job").await.unwrap().is_held(),
        "the lock is still held after platform-lock exited"
    );
    let next = pod.try_acquire("job", Lease::Watchdog).await.unwrap();
    assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_forwards_sigterm_to_its_command_and_exits_with_its_code() {
    forwards(Signal::SIGTERM, "TERM", 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_forwards_sigint_to_its_command_and_exits_with_its_code() {
    forwards(Signal::SIGINT, "INT", 130).await;
}

/// A hangup (the session or terminal `run` was started from closes) ends the command and
/// releases the lock, rather than killing `run` and leaving the lock to its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_forwards_sighup_to_its_command_and_exits_with_its_code() {
    forwards(Signal::SIGHUP, "HUP", 129).await;
}

/// A supervisor that sends SIGTERM again and again (and never SIGKILL) to a command that
/// ignores it: the first forwarded signal starts the 5 s grace, the command is killed when it
/// ends (exit 128+9), and the lock is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_sigterms_kill_a_command_that_ignores_them_after_the_grace() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("shell.pid");
    let script = format!(
        "trap '' TERM; echo $$ > '{}'; echo ready; while :; do sleep 1; done",
        pid_file.display()
    );
    let mut child = start_ready(&url, &script).await;
    let shell = read_pid(&pid_file);
    let _reap = Reap(shell);
    let run = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    let first_signal = Instant::now();
    let status = loop {
        kill(run, Signal::SIGTERM).unwrap();
        match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
            Ok(status) => break status.unwrap(),
            Err(_) if first_signal.elapsed() < GRACE + PROCESS_SLACK => {}
            Err(_) => {
                panic!("SIGTERMs for {:?} never escalated", first_signal.elapsed());
            }
        }
    };
    let took = first_signal.elapsed();
    assert_eq!(status.code(), Some(128 + 9), "{status:?}");
    assert!(took >= GRACE, "killed before the grace: {took:?}");
    assert!(!alive(shell), "the command outlived run");
    assert!(
        !pod.status("job").await.unwrap().is_held(),
        "the lock is still held after run exited"
    );
}
