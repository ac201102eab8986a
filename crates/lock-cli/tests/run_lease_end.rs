//! How `run` reports a lease that ended under its command, the switch that only `run` honours,
//! and the arguments and warnings found in a new user's trial.

mod common;

use common::{SLACK, assert_one_line, cli, code, other_pod, platform_lock, start_holding, stderr};
use lock_starter::redis::ForceReleased;
use lock_testkit::RedisServer;

/// A forced release the watchdog cannot see (a fixed lease has none) before the command ends:
/// the command finished without the lock, and exit 0 would tell the caller it ran exclusively.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_found_ended_when_the_command_finishes_exits_70() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let pod = other_pod(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let run = [
        "run", "--key", "job", "--lease", "5m", "--", "sh", "-c", &script,
    ];
    let child = start_holding(&url, &pod, "job", &run).await;
    assert!(matches!(
        pod.force_release("job").await.unwrap(),
        ForceReleased::Released { .. }
    ));
    std::fs::write(&go, b"").unwrap();
    let output = tokio::time::timeout(SLACK, child.wait_with_output())
        .await
        .expect("run did not end with its command")
        .unwrap();
    assert_one_line(
        "lease ended before the command finished",
        &output,
        70,
        &["had ended when the command finished", "job"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_that_runs_out_is_named_as_such() {
    let redis = RedisServer::start().await.unwrap();
    let output = tokio::time::timeout(
        SLACK,
        platform_lock(
            &redis.url(),
            &["run", "--key", "job", "--lease", "1s", "--", "sleep", "60"],
        )
        .output(),
    )
    .await
    .expect("run kept its command past the fixed lease")
    .unwrap();
    assert_eq!(code(&output), 70, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("its fixed lease of 1s ran out"),
        "{}",
        stderr(&output)
    );
}

/// `enabled = false` is the service's switch: `run` takes the lock as a service would and
/// refuses, while inspecting and releasing only read Redis and still work for on-call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_run_refuses_when_the_lock_is_disabled() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    let disabled = |args: &[&str]| {
        let mut command = platform_lock(&url, args);
        command.env("TELCO_PLATFORM_LOCK_ENABLED", "false");
        common::finish(command)
    };
    let status = disabled(&["status", "job"]).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    let list = disabled(&["list"]).await;
    assert_eq!(code(&list), 0, "{}", stderr(&list));
    let run = disabled(&["run", "--key", "job", "--", "true"]).await;
    assert_one_line("run while disabled", &run, 78, &["disabled"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_and_unitless_durations_are_refused_by_name() {
    let redis = RedisServer::start().await.unwrap();
    let url = redis.url();
    for (args, mention) in [
        (["--lease", "-1s"], "negative durations are not accepted"),
        (["--wait", "-5s"], "negative durations are not accepted"),
        (["--lease", "abc"], "not a duration"),
        (["--wait", "5"], "a duration takes a unit"),
    ] {
        let mut full = vec!["run", "--key", "job"];
        full.extend(args);
        full.extend(["--", "true"]);
        let output = cli(&url, &full).await;
        assert_one_line(&format!("{args:?}"), &output, 2, &[mention]);
    }
}

/// A misspelt variable prefix is ignored by the configuration, which warns; the CLI shows the
/// warning, since a `list` under the wrong settings would otherwise just find nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_warnings_are_shown() {
    let redis = RedisServer::start().await.unwrap();
    let mut command = platform_lock(&redis.url(), &["list"]);
    command.env("TELCO_PLATFROM_LOCK_KEY_PREFIX", "billing:");
    let output = common::finish(command).await;
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("TELCO_PLATFROM_LOCK_KEY_PREFIX is ignored"),
        "{}",
        stderr(&output)
    );
}
