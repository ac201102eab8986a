//! Adversarial review of `platform-lock run`: a lost lease must stop the whole command — also
//! the processes it started — and a command that ignores SIGTERM is killed after the grace.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{SLACK, cli, code, eventually, other_pod, start_ready, stderr};
use lock_starter::redis::ForceReleased;
use lock_testkit::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

/// Whether process `pid` still runs (a zombie waiting to be reaped does not).
fn alive(pid: Pid) -> bool {
    if kill(pid, None).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Kills `pid` when dropped, so a failing test leaves no stray process.
struct Reap(Pid);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGKILL);
    }
}

fn read_pid(file: &Path) -> Pid {
    Pid::from_raw(
        std::fs::read_to_string(file)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    )
}

/// Starts `sh -c script` under lock `job`, waits for its `ready` line, force-releases the lock
/// and returns platform-lock's output and how long it took from the forced release.
async fn lose_the_lease_of(url: &str, script: &str) -> (std::process::Output, Duration) {
    let pod = other_pod(url).await;
    let child = start_ready(url, script).await;
    let forced_at = Instant::now();
    assert!(matches!(
        pod.force_release("job").await.unwrap(),
        ForceReleased::Released { .. }
    ));
    let output = tokio::time::timeout(SLACK, child.wait_with_output())
        .await
        .expect("run kept its command running after the lease was lost")
        .unwrap();
    (output, forced_at.elapsed())
}

/// A job script that starts a worker process (as `sh -c 'a; b'`, a shell script or `make` do)
/// must not leave that worker running without the lock once the lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_processes_the_command_started() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("worker.pid");
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > '{}'; echo ready; wait",
        pid_file.display()
    );
    let (output, _) = lose_the_lease_of(&url, &script).await;
    assert_eq!(code(&output), 70, "{}", stderr(&output));
    let worker = read_pid(&pid_file);
    let _reap = Reap(worker);
    let stopped = eventually(|| async { !alive(worker) }).await;
    assert!(
        stopped,
        "the command's worker (pid {worker}) still runs without the lock after the lease was lost"
    );
}

/// A command that ignores SIGTERM is killed 5 s later, and run still exits 70.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("shell.pid");
    let script = format!(
        "trap '' TERM; echo $$ > '{}'; echo ready; while :; do sleep 1; done",
        pid_file.display()
    );
    let (output, took) = lose_the_lease_of(&url, &script).await;
    let shell = read_pid(&pid_file);
    let _reap = Reap(shell);
    assert_eq!(code(&output), 70, "{}", stderr(&output));
    assert!(
        took >= Duration::from_secs(5),
        "killed before the grace: {took:?}"
    );
    assert!(!alive(shell), "the command outlived platform-lock");
}

/// A command killed by a signal exits 128+N; plain codes pass through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_deaths_and_exit_codes_pass_through() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    for (script, expected) in [
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
        ("exit 3", 3),
        ("exit 255", 255),
    ] {
        let output = cli(&url, &["run", "--key", "job", "--", "sh", "-c", script]).await;
        assert_eq!(code(&output), expected, "{script}: {}", stderr(&output));
    }
}
