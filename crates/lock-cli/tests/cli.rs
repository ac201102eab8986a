//! The `platform-lock` binary against private redis-servers: what on-call sees and the exit
//! codes scripts rely on.

use std::process::{Output, Stdio};
use std::time::Duration;

use lock_starter::redis::{ForceReleased, LockState, RedisLock, RedisLockConfig};
use lock_starter::{DistributedLock, Lease, LostReason};
use lock_testkit::RedisServer;
use tokio::process::Command;
use tokio::time::Instant;

/// Generous upper bound for anything that should happen "promptly" on a loaded machine.
const SLACK: Duration = Duration::from_secs(15);

fn platform_lock(address: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_platform-lock"));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", address)
        .env("TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT", "1s")
        .env("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", "1s")
        .env("TELCO_PLATFORM_LOCK_INSTANCE_ID", "cli-pod")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `platform-lock args…` to its end (within [`SLACK`] plus a minute).
async fn cli(address: &str, args: &[&str]) -> Output {
    tokio::time::timeout(
        SLACK + Duration::from_secs(60),
        platform_lock(address, args).output(),
    )
    .await
    .expect("platform-lock did not finish")
    .expect("platform-lock runs")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A client of `address` holding nothing yet: the "other pod" (instance id `demo-pod`).
async fn other_pod(address: &str) -> RedisLock {
    RedisLock::connect(
        RedisLockConfig::new(address)
            .instance_id("demo-pod")
            .watchdog_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap()
}

async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + SLACK;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_list_and_release_a_lock_held_by_another_pod() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let pod = other_pod(&url).await;
    let handle = pod
        .acquire("bill-run:2026-11", Lease::Watchdog)
        .await
        .unwrap();
    let token = handle.fencing_token().to_string();

    let status = cli(&url, &["status", "bill-run:2026-11"]).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    let text = stdout(&status);
    for expected in [
        "state:          held",
        "demo-pod",
        &token,
        "hold count:     1",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }

    let json = cli(&url, &["status", "--json", "bill-run:2026-11"]).await;
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["state"], "held");
    assert_eq!(json["instanceId"], "demo-pod");
    assert_eq!(json["holdCount"], 1);
    assert_eq!(json["fencingToken"].as_u64(), Some(handle.fencing_token()));
    assert!(
        json["ttlMs"].as_u64().is_some_and(|ttl| ttl <= 1_000),
        "{json}"
    );

    let list = cli(&url, &["list", "bill-run:*"]).await;
    assert_eq!(code(&list), 0, "{}", stderr(&list));
    let line = stdout(&list)
        .lines()
        .find(|line| line.starts_with("bill-run:2026-11 "))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("not listed:\n{}", stdout(&list)));
    assert!(line.contains("demo-pod") && line.contains(&token), "{line}");
    let none = cli(&url, &["list", "reaper*"]).await;
    assert!(!stdout(&none).contains("bill-run"), "{}", stdout(&none));

    // Not a terminal and no --yes: refused, nothing changed.
    let refused = cli(&url, &["release", "--force", "bill-run:2026-11"]).await;
    assert_eq!(code(&refused), 2);
    assert_eq!(stderr(&refused).lines().count(), 1, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--yes"));
    assert!(pod.status("bill-run:2026-11").await.unwrap().is_held());

    let released = cli(&url, &["release", "--force", "--yes", "bill-run:2026-11"]).await;
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    assert!(
        stdout(&released).contains("demo-pod"),
        "{}",
        stdout(&released)
    );
    let reason = tokio::time::timeout(SLACK, handle.lost())
        .await
        .expect("the holder never learnt of the forced release");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(matches!(
        pod.status("bill-run:2026-11").await.unwrap().state,
        LockState::Released { .. }
    ));

    let again = cli(&url, &["release", "--force", "--yes", "bill-run:2026-11"]).await;
    assert_eq!(code(&again), 0);
    assert!(stdout(&again).contains("not held"), "{}", stdout(&again));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_the_lock_and_passes_the_commands_exit_code_through() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let three = cli(&url, &["run", "--key", "job", "--", "sh", "-c", "exit 3"]).await;
    assert_eq!(code(&three), 3, "{}", stderr(&three));
    let killed = cli(
        &url,
        &["run", "--key", "job", "--", "sh", "-c", "kill -TERM $$"],
    )
    .await;
    assert_eq!(code(&killed), 128 + 15, "{}", stderr(&killed));

    // The lock is held while the command runs, and the command sees its fencing token.
    let pod = other_pod(&url).await;
    let script = format!(
        "{} status --json job; echo token=$PLATFORM_LOCK_FENCING_TOKEN",
        env!("CARGO_BIN_EXE_platform-lock")
    );
    let inside = cli(&url, &["run", "--key", "job", "--", "sh", "-c", &script]).await;
    assert_eq!(code(&inside), 0, "{}", stderr(&inside));
    let out = stdout(&inside);
    let status: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(status["state"], "held", "{out}");
    assert_eq!(status["instanceId"], "cli-pod");
    assert!(
        out.contains(&format!("token={}", status["fencingToken"])),
        "{out}"
    );
    // Released afterwards.
    assert!(!pod.status("job").await.unwrap().is_held());
    let missing = cli(&url, &["run", "--key", "job", "--", "/nonexistent/command"]).await;
    assert_eq!(code(&missing), 127);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_75_without_running_the_command_when_the_lock_is_held_elsewhere() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let pod = other_pod(&url).await;
    let _held = pod.acquire("job", Lease::Watchdog).await.unwrap();
    let started = Instant::now();
    let output = cli(
        &url,
        &["run", "--key", "job", "--wait", "0s", "--", "echo", "ran"],
    )
    .await;
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    assert!(!stdout(&output).contains("ran"));
    assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
    assert!(stderr(&output).contains("demo-pod"), "{}", stderr(&output));
    assert!(started.elapsed() < SLACK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_terminates_its_command_when_the_lease_is_lost() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let pod = other_pod(&url).await;
    let child = platform_lock(&url, &["run", "--key", "job", "--", "sleep", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(|| async { pod.status("job").await.unwrap().is_held() }).await,
        "run never took the lock"
    );
    let forced_at = Instant::now();
    assert!(matches!(
        pod.force_release("job").await.unwrap(),
        ForceReleased::Released { .. }
    ));
    let output = tokio::time::timeout(SLACK, child.wait_with_output())
        .await
        .expect("run kept its command running after the lease was lost")
        .unwrap();
    // The watchdog notices within a third of its 1 s timeout; SIGTERM ends `sleep` at once.
    assert!(
        forced_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        forced_at.elapsed()
    );
    assert_eq!(code(&output), 70, "{}", stderr(&output));
    assert!(stderr(&output).contains("was lost"), "{}", stderr(&output));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_configuration_and_an_unreachable_redis_are_one_line_each() {
    let free_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("redis://:n0wh3re-pw@127.0.0.1:{free_port}");
    for (args, expected) in [
        (&["frobnicate"][..], 2),
        (&["run", "--key", "job"][..], 2),
        (
            &["run", "--key", "job", "--wait", "soon", "--", "true"][..],
            2,
        ),
        (&["status"][..], 2),
        (&["status", "job"][..], 1),
        (&["list"][..], 1),
        (&["release", "--force", "--yes", "job"][..], 1),
        (&["run", "--key", "job", "--", "true"][..], 1),
    ] {
        let output = cli(&nowhere, args).await;
        let err = stderr(&output);
        assert_eq!(code(&output), expected, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("platform-lock: "), "{args:?}: {err}");
        assert!(
            !err.contains("n0wh3re-pw"),
            "{args:?} leaked the password: {err}"
        );
    }
    let mut bad = platform_lock(&nowhere, &["status", "job"]);
    bad.env("TELCO_PLATFORM_LOCK_WAIT_TIME", "5 parsecs");
    let output = bad.output().await.unwrap();
    assert_eq!(code(&output), 78, "{}", stderr(&output));
    assert!(stderr(&output).contains("wait-time"));
    let mut off = platform_lock(&nowhere, &["status", "job"]);
    off.env("TELCO_PLATFORM_LOCK_ENABLED", "false");
    let output = off.output().await.unwrap();
    assert_eq!(code(&output), 78, "{}", stderr(&output));
    assert!(stderr(&output).contains("disabled"));
    let help = cli(&nowhere, &["--help"]).await;
    assert_eq!(code(&help), 0);
    assert!(stdout(&help).contains("75   run: the lock was not acquired"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_in_the_address_never_appears_in_any_output() {
    const PASSWORD: &str = "cli-S3cret-pw";
    let redis = RedisServer::builder()
        .args(["--requirepass", PASSWORD])
        .start()
        .await
        .unwrap();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", redis.port());
    let pod = other_pod(&url).await;
    let held = pod.acquire("held", Lease::Watchdog).await.unwrap();
    let mut outputs = Vec::new();
    for args in [
        &["status", "held"][..],
        &["status", "--json", "held"][..],
        &["list"][..],
        &["list", "--json"][..],
        &["run", "--key", "held", "--wait", "0s", "--", "true"][..],
        &["run", "--key", "free", "--", "sh", "-c", "exit 4"][..],
        &["release", "--force", "held"][..],
        &["release", "--force", "--yes", "held"][..],
        &["status", ""][..],
        &["bogus"][..],
    ] {
        outputs.push((args, cli(&url, args).await));
    }
    // Wrong password: an authentication failure must not echo the configured one either.
    let wrong = format!("redis://:{PASSWORD}-wrong@127.0.0.1:{}", redis.port());
    outputs.push((
        &["status", "held"][..],
        cli(&wrong, &["status", "held"]).await,
    ));
    let codes: Vec<i32> = outputs.iter().map(|(_, output)| code(output)).collect();
    assert_eq!(codes, [0, 0, 0, 0, 75, 4, 2, 0, 2, 2, 1], "{outputs:?}");
    for (args, output) in &outputs {
        let all = format!("{}{}", stdout(output), stderr(output));
        assert!(
            !all.contains(PASSWORD),
            "{args:?} leaked the password: {all}"
        );
    }
    drop(held);
}
