//! `platform-lock run` and the processes of its command: a lost lease must stop the whole command — also
//! the processes it started — and a command that ignores SIGTERM is killed after the grace;
//! `run` killed with SIGKILL takes its command along, through its guardian process.

use std::time::Duration;

use crate::common::{
    PROCESS_SLACK, Reap, alive, cli, code, eventually, lose_the_lease, other_pod, platform_lock,
    read_pid, redis_and_dir, start_ready, stderr,
};
use lock_testkit::RedisServer;
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// The parent and the process group of process `pid`, from `/proc/PID/stat`.
fn parent_and_group(pid: Pid) -> Option<(Pid, Pid)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: state, parent, process group.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(1);
    let mut next = || fields.next()?.parse().ok().map(Pid::from_raw);
    Some((next()?, next()?))
}

/// The running processes whose parent is `parent`.
fn children_of(parent: Pid) -> Vec<Pid> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .map(Pid::from_raw)
        .filter(|&pid| parent_and_group(pid).is_some_and(|(of, _)| of == parent) && alive(pid))
        .collect()
}

/// Starts `sh -c script` under lock `job`, waits for its `ready` line, force-releases the lock
/// and returns platform-lock's output and how long it took from the forced release.
async fn lose_the_lease_of(url: &str, script: &str) -> (std::process::Output, Duration) {
    let pod = other_pod(url).await;
    let child = start_ready(url, script).await;
    lose_the_lease(&pod, "job", child).await
}

/// A job script that starts a worker process (as `sh -c 'a; b'`, a shell script or `make` do)
/// must not leave that worker running without the lock once the lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_processes_the_command_started() {
    let (_redis, url, dir) = redis_and_dir().await;
    let pid_file = dir.path().join("worker.pid");
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > '{}'; echo ready; wait",
        pid_file.display()
    );
    let (output, _) = lose_the_lease_of(&url, &script).await;
    assert_eq!(code(&output), 70, "{}", stderr(&output));
    let worker = read_pid(&pid_file);
    let _reap = Reap(worker);
    let stopped = eventually(PROCESS_SLACK, || async { !alive(worker) }).await;
    assert!(
        stopped,
        "the command's worker (pid {worker}) still runs without the lock after the lease was lost"
    );
}

/// A command that ignores SIGTERM is killed 5 s later, and run still exits 70.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
    let (_redis, url, dir) = redis_and_dir().await;
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

/// The OOM killer or `kill -9` ends platform-lock itself: its command — and a worker the command
/// started — must not run on without the lock (the lease lapses within one watchdog timeout,
/// then another host starts the same job). The guardian kills them; nothing is left holding
/// the output pipes either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_run_takes_its_command_and_the_processes_it_started_along() {
    let (_redis, url, dir) = redis_and_dir().await;
    let (shell_file, worker_file) = (dir.path().join("shell.pid"), dir.path().join("worker.pid"));
    let script = format!(
        "echo $$ > '{}'; sleep 300 & echo $! > '{}'; echo ready; wait",
        shell_file.display(),
        worker_file.display()
    );
    let mut child = start_ready(&url, &script).await;
    let (shell, worker) = (read_pid(&shell_file), read_pid(&worker_file));
    let (_reap_shell, _reap_worker) = (Reap(shell), Reap(worker));
    let mut errors = child.stderr.take().unwrap();

    let killed_at = Instant::now();
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let gone = eventually(PROCESS_SLACK, || async { !alive(shell) && !alive(worker) }).await;
    let took = killed_at.elapsed();
    eprintln!("{took:?} after run's SIGKILL, its command and worker were gone: {gone}");
    assert!(
        gone,
        "after run was SIGKILLed, its command (pid {shell}, alive {}) or its worker (pid \
         {worker}, alive {}) still runs without the lock",
        alive(shell),
        alive(worker)
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    // EOF on run's stderr: no process (the guardian included) holds it any more.
    let mut rest = Vec::new();
    tokio::time::timeout(PROCESS_SLACK, errors.read_to_end(&mut rest))
        .await
        .expect("something still holds run's stderr open")
        .unwrap();
}

/// A normal end takes the guardian along: it is a child of `run` in a process group of its
/// own while the command runs, and gone once `run` exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guardian_runs_beside_the_command_and_ends_with_run() {
    let (_redis, url, dir) = redis_and_dir().await;
    let (shell_file, go) = (dir.path().join("shell.pid"), dir.path().join("go"));
    let script = format!(
        "echo $$ > '{}'; echo ready; while [ ! -e '{}' ]; do sleep 0.05; done",
        shell_file.display(),
        go.display()
    );
    let mut child = start_ready(&url, &script).await;
    let shell = read_pid(&shell_file);
    let _reap_shell = Reap(shell);
    let run = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    let guardians: Vec<Pid> = children_of(run)
        .into_iter()
        .filter(|&pid| pid != shell)
        .collect();
    let [guardian] = guardians[..] else {
        panic!("run (pid {run}) has no guardian beside its command: {guardians:?}");
    };
    let _reap_guardian = Reap(guardian);
    let groups = [run, shell, guardian].map(|pid| parent_and_group(pid).unwrap().1);
    assert_eq!(groups[2], guardian, "the guardian's group: {groups:?}");
    assert!(
        groups[..2].iter().all(|&group| group != guardian),
        "{groups:?}"
    );

    std::fs::write(&go, b"").unwrap();
    let mut errors = String::new();
    let mut stderr_pipe = child.stderr.take().unwrap();
    tokio::time::timeout(PROCESS_SLACK, stderr_pipe.read_to_string(&mut errors))
        .await
        .expect("something still holds run's stderr open after its command ended")
        .unwrap();
    let status = tokio::time::timeout(PROCESS_SLACK, child.wait())
        .await
        .expect("run did not end with its command")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{errors}");
    assert!(
        eventually(PROCESS_SLACK, || async { !alive(guardian) }).await,
        "the guardian (pid {guardian}) outlived run"
    );
}

/// The command exits while a worker it started in the background still runs: the worker is
/// stopped before the lock is released, so another host granted the lock next never runs the job
/// beside it. The command's exit code stays run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_end_stops_the_commands_background_workers_before_releasing() {
    let (_redis, url, dir) = redis_and_dir().await;
    let (pid_file, log) = (dir.path().join("worker.pid"), dir.path().join("worker.log"));
    let script = format!(
        "(while true; do echo A-worker >> '{}'; sleep 0.3; done) & echo $! > '{}'; exit 3",
        log.display(),
        pid_file.display()
    );
    let errors = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let mut a = platform_lock(
        &url,
        &[
            "run", "--wait", "0s", "--key", "job", "--", "sh", "-c", &script,
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(errors)
    .spawn()
    .unwrap();
    let status = tokio::time::timeout(PROCESS_SLACK, a.wait())
        .await
        .expect("run did not end after its command exited")
        .unwrap();
    let worker = read_pid(&pid_file);
    let _reap = Reap(worker);
    let a_errors = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(
        !alive(worker),
        "run ended (and released the lock) while the command's worker (pid {worker}) still runs"
    );
    assert_eq!(status.code(), Some(3), "{a_errors}");
    assert_eq!(a_errors.lines().count(), 1, "{a_errors}");
    assert!(
        a_errors.contains("stopping them before releasing"),
        "{a_errors}"
    );
    let b = cli(
        &url,
        &["run", "--wait", "0s", "--key", "job", "--", "echo", "B"],
    )
    .await;
    assert_eq!(code(&b), 0, "{}", stderr(&b));
}

/// A worker left behind that ignores SIGTERM gets the whole 5 s grace before SIGKILL, also when
/// the watchdog lease is shorter and renewed meanwhile (the guardian hears of the renewals).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_left_behind_gets_the_whole_grace_under_a_short_watchdog() {
    let (_redis, url, dir) = redis_and_dir().await;
    // The command exits once the worker ignores SIGTERM: a SIGTERM before its trap would end it.
    let trapped = dir.path().join("trapped");
    let script = format!(
        "(trap '' TERM; : > '{0}'; while true; do sleep 0.1; done) & \
         while [ ! -e '{0}' ]; do sleep 0.01; done; exit 0",
        trapped.display()
    );
    let started = std::time::Instant::now();
    let output = cli(&url, &["run", "--key", "job", "--", "sh", "-c", &script]).await;
    let took = started.elapsed();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        took >= Duration::from_secs(5),
        "SIGKILL before the grace: {took:?}"
    );
}

/// A closed stderr (the terminal or pipe went away with a hangup) does not end `run` mid-run:
/// its command's code is still its exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stderr_does_not_end_run() {
    let (_redis, url, _dir) = redis_and_dir().await;
    let mut run = platform_lock(
        &url,
        &[
            "run",
            "--key",
            "job",
            "--",
            "sh",
            "-c",
            "sleep 300 & exit 3",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    drop(run.stderr.take());
    let status = tokio::time::timeout(PROCESS_SLACK, run.wait())
        .await
        .expect("run did not end")
        .unwrap();
    assert_eq!(status.code(), Some(3));
}
