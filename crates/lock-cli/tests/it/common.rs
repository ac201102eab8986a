//! Shared set-up for the `platform-lock` tests: the binary with a test environment, the "other
//! pod" holding locks, and waiting on events with generous deadlines.

#![allow(unreachable_pub)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use lock_starter::lock::{DistributedLock, Lease, LockHandle, LostReason};
use lock_starter::redis::{
    ForceReleased, LockState, RedisClient, RedisConfig, RedisLock, RedisLockConfig,
};
use lock_testkit::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::time::Instant;

pub use lock_testkit::{PROCESS_SLACK, eventually};

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_platform-lock");

/// The environment every run gets: nothing inherited but `PATH`, the Redis at `address`,
/// short timeouts (a 3 s watchdog: the command is terminated only when renewals run over 1 s
/// late, which a loaded machine does not reach), and instance id `cli-pod`.
pub fn environment(address: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", address.to_owned()),
        ("TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT", "1s".to_owned()),
        ("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", "3s".to_owned()),
        ("TELCO_PLATFORM_LOCK_INSTANCE_ID", "cli-pod".to_owned()),
    ]
}

/// `platform-lock args…` against `address`, stdin closed, killed if the test drops it.
pub fn platform_lock(address: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command
        .args(args)
        .env_clear()
        .envs(environment(address))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `platform-lock args…` to its end (within [`PROCESS_SLACK`] plus a minute).
pub async fn cli(address: &str, args: &[&str]) -> Output {
    finish(platform_lock(address, args)).await
}

/// Runs `command` to its end (within [`PROCESS_SLACK`] plus a minute).
pub async fn finish(mut command: Command) -> Output {
    tokio::time::timeout(PROCESS_SLACK + Duration::from_secs(60), command.output())
        .await
        .expect("platform-lock did not finish")
        .expect("platform-lock runs")
}

pub fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A client of `address` holding nothing yet: the "other pod" (instance id `demo-pod`).
pub async fn other_pod(address: &str) -> RedisLock {
    let config = RedisConfig::new(address)
        .instance_id("demo-pod")
        .command_timeout(Duration::from_secs(1));
    let redis = RedisClient::connect(config).await.unwrap();
    let lock = RedisLockConfig::default().watchdog_timeout(Duration::from_secs(1));
    RedisLock::new(&redis, lock).await.unwrap()
}

/// A private redis-server, its URL, and the "other pod" (see [`other_pod`]) connected to it.
pub async fn redis_and_other_pod() -> (RedisServer, String, RedisLock) {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let pod = other_pod(&url).await;
    (redis, url, pod)
}

/// `pod` acquiring `key` with a watchdog lease.
pub async fn hold(pod: &RedisLock, key: &str) -> LockHandle {
    pod.acquire(key, Lease::Watchdog).await.unwrap()
}

/// A private redis-server, its URL, and a temporary directory for the test's files.
pub async fn redis_and_dir() -> (RedisServer, String, tempfile::TempDir) {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    (redis, url, tempfile::tempdir().unwrap())
}

/// Asserts that the holder of `handle` learns (within [`PROCESS_SLACK`]) that its lock `key` was
/// force-released, and that `pod` sees `key` released.
pub async fn assert_force_released(pod: &RedisLock, handle: &LockHandle, key: &str) {
    let reason = tokio::time::timeout(PROCESS_SLACK, handle.lost())
        .await
        .expect("the holder never learnt of the forced release");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(matches!(
        pod.status(key).await.unwrap().state,
        LockState::Released { .. }
    ));
}

/// Force-releases `key` from `pod` under a running `run` (`child`), waits for `run` to end, and
/// returns its output and how long that took from the forced release.
pub async fn lose_the_lease(
    pod: &RedisLock,
    key: &str,
    child: tokio::process::Child,
) -> (Output, Duration) {
    let forced_at = Instant::now();
    assert!(matches!(
        pod.force_release(key).await.unwrap(),
        ForceReleased::Released { .. }
    ));
    let output = tokio::time::timeout(PROCESS_SLACK, child.wait_with_output())
        .await
        .expect("run kept its command running after the lease was lost")
        .unwrap();
    (output, forced_at.elapsed())
}

/// Starts `platform-lock args…` (a `run`) with its output piped, and waits until `pod` sees
/// `key` held — by the run, since nobody else takes it in these tests.
pub async fn start_holding(
    address: &str,
    pod: &RedisLock,
    key: &str,
    args: &[&str],
) -> tokio::process::Child {
    let child = platform_lock(address, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(PROCESS_SLACK, || async {
            pod.status(key).await.unwrap().is_held()
        })
        .await,
        "platform-lock {args:?} never took lock {key}"
    );
    child
}

/// Starts `platform-lock run --key job -- sh -c script` with its output piped, and waits for
/// the script's first stdout line, which must be `ready` (so it runs, under the lock).
pub async fn start_ready(address: &str, script: &str) -> tokio::process::Child {
    spawn_ready(platform_lock(
        address,
        &["run", "--key", "job", "--", "sh", "-c", script],
    ))
    .await
}

/// Spawns `command` (a `run` whose command says `ready` first) with its output piped, and waits
/// for that first stdout line.
pub async fn spawn_ready(mut command: Command) -> tokio::process::Child {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(PROCESS_SLACK, lines.next_line())
        .await
        .expect("the command never said ready")
        .unwrap();
    assert_eq!(ready.as_deref(), Some("ready"));
    child
}

/// Asserts `output` is one failure line (`platform-lock: …` on stderr) with exit code
/// `expected` that mentions each of `mentions` (case-insensitive).
pub fn assert_one_line(label: &str, output: &Output, expected: i32, mentions: &[&str]) {
    let err = stderr(output);
    assert_eq!(code(output), expected, "{label}: {err}");
    assert_eq!(err.lines().count(), 1, "{label}: not one line: {err}");
    assert!(err.starts_with("platform-lock: "), "{label}: {err}");
    for mention in mentions {
        assert!(
            err.to_lowercase().contains(&mention.to_lowercase()),
            "{label}: no {mention:?} in: {err}"
        );
    }
}

/// Whether process `pid` still runs (a zombie waiting to be reaped does not).
pub fn alive(pid: Pid) -> bool {
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
pub struct Reap(pub Pid);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGKILL);
    }
}

/// The pid a command wrote to `file`.
pub fn read_pid(file: &Path) -> Pid {
    Pid::from_raw(
        std::fs::read_to_string(file)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    )
}
