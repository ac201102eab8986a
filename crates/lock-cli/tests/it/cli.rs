//! The `platform-lock` binary against private redis-servers: what on-call sees and the exit
//! codes scripts rely on.

use std::process::Stdio;
use std::time::Duration;

use crate::common::{
    PROCESS_SLACK, assert_force_released, assert_one_line, cli, code, finish, hold, lose_the_lease,
    other_pod, platform_lock, redis_and_other_pod, start_holding, stderr, stdout,
};
use lock_starter::lock::{AcquireOptions, DistributedLock, Lease, ReleaseOutcome};
use lock_testkit::RedisServer;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_list_and_release_a_lock_held_by_another_pod() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let handle = hold(&pod, "bill-run:2026-11").await;
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
    // A list cut off by --limit says so.
    let _other = hold(&pod, "bill-run:2026-12").await;
    let cut = stdout(&cli(&url, &["list", "--limit", "1", "bill-run:*"]).await);
    assert!(cut.contains("… and more: the first 1 shown"), "{cut}");
    let whole = stdout(&cli(&url, &["list", "--limit", "2", "bill-run:*"]).await);
    assert!(!whole.contains("and more"), "{whole}");
    let cut = cli(&url, &["list", "--json", "--limit", "1", "bill-run:*"]).await;
    let cut: serde_json::Value = serde_json::from_slice(&cut.stdout).unwrap();
    assert_eq!(
        (cut["more"].as_bool(), cut["locks"].as_array().map(Vec::len)),
        (Some(true), Some(1))
    );

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
    assert_force_released(&pod, &handle, "bill-run:2026-11").await;

    let again = cli(&url, &["release", "--force", "--yes", "bill-run:2026-11"]).await;
    assert_eq!(code(&again), 0);
    assert!(stdout(&again).contains("not held"), "{}", stdout(&again));
}

/// A lock its holder released within its minimum hold is held, and `status` and `list` say why
/// it is still held (text and JSON) rather than showing a plain holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_list_say_a_lock_is_kept_for_its_minimum_hold() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let options = AcquireOptions::new(Lease::Watchdog)
        .hold_at_least(Duration::from_secs(60))
        .unwrap();
    let handle = pod.acquire_with("reaper", options).await.unwrap();
    let live = cli(&url, &["status", "--json", "reaper"]).await;
    let live: serde_json::Value = serde_json::from_slice(&live.stdout).unwrap();
    assert_eq!(live["keptForMinimumHold"], false, "{live}");
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);

    let status = cli(&url, &["status", "reaper"]).await;
    let text = stdout(&status);
    assert!(
        text.contains(
            "state:          held (released by its holder, kept until its minimum hold ends)"
        ),
        "{text}"
    );
    let json = cli(&url, &["status", "--json", "reaper"]).await;
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (&json["state"], &json["keptForMinimumHold"]),
        (&"held".into(), &true.into())
    );
    assert!(
        json["ttlMs"].as_u64().is_some_and(|ttl| ttl <= 60_000),
        "{json}"
    );
    let list = stdout(&cli(&url, &["list"]).await);
    assert!(
        list.contains("(released, kept for its minimum hold)"),
        "{list}"
    );
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
    let (_redis, url, pod) = redis_and_other_pod().await;
    let _held = hold(&pod, "job").await;
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
    assert!(started.elapsed() < PROCESS_SLACK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_terminates_its_command_when_the_lease_is_lost() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let child = start_holding(
        &url,
        &pod,
        "job",
        &["run", "--key", "job", "--", "sleep", "60"],
    )
    .await;
    let (output, took) = lose_the_lease(&pod, "job", child).await;
    // The watchdog notices within a third of its 1 s timeout; SIGTERM ends `sleep` at once.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(code(&output), 70, "{}", stderr(&output));
    assert!(stderr(&output).contains("was lost"), "{}", stderr(&output));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_configuration_and_an_unreachable_redis_are_one_line_each() {
    let closed = lock_testkit::ClosedPort::new().unwrap();
    let nowhere = format!("redis://:n0wh3re-pw@127.0.0.1:{}", closed.port());
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
        if expected == 1 {
            // What failed, why, what to do.
            for mention in [
                "failed at Redis",
                "Connection refused",
                "check that Redis is up",
            ] {
                assert!(err.contains(mention), "{args:?}: no {mention:?} in {err}");
            }
        }
    }
    let mut bad = platform_lock(&nowhere, &["status", "job"]);
    bad.env("TELCO_PLATFORM_LOCK_WAIT_TIME", "5 parsecs");
    let output = bad.output().await.unwrap();
    assert_eq!(code(&output), 78, "{}", stderr(&output));
    assert!(stderr(&output).contains("wait-time"));
    let mut off = platform_lock(&nowhere, &["run", "--key", "job", "--", "true"]);
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
    let redis = RedisServer::start_with_password(PASSWORD).await.unwrap();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", redis.port());
    let pod = other_pod(&url).await;
    let held = hold(&pod, "held").await;
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
    assert_eq!(codes, [0, 0, 0, 0, 75, 4, 2, 0, 2, 2, 78], "{outputs:?}");
    for (args, output) in &outputs {
        let all = format!("{}{}", stdout(output), stderr(output));
        assert!(
            !all.contains(PASSWORD),
            "{args:?} leaked the password: {all}"
        );
    }
    drop(held);
}

/// A Redis user whose ACL lacks `+scan`: `list` says that listing needs SCAN, that the user
/// lacks the permission (Redis' NOPERM), and which grant to add — not fred's "Expected bulk
/// string array from SCAN", and not "check that Redis is up".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_as_a_redis_user_without_scan_says_the_permission_is_missing() {
    let redis = RedisServer::start().await.unwrap();
    // Everything but SCAN, so nothing else can be what fails.
    redis.add_user("ops", "ops-Pa55", &["-scan"]).await.unwrap();
    let url = redis.url().replace("redis://", "redis://ops:ops-Pa55@");
    let pod = other_pod(&redis.url()).await;
    let _held = hold(&pod, "bill-run:2026-11").await;
    let status = cli(&url, &["status", "bill-run:2026-11"]).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));

    for args in [&["list"][..], &["list", "--json", "bill-run:*"][..]] {
        let output = cli(&url, args).await;
        let label = format!("{args:?}");
        assert_one_line(
            &label,
            &output,
            1,
            &[
                "listing locks",
                "refused the SCAN",
                "permission",
                "NOPERM",
                "+scan",
                "docs/design.md",
            ],
        );
        let err = stderr(&output);
        assert!(!err.contains("Expected bulk string"), "{label}: {err}");
        assert!(!err.contains("check that Redis is up"), "{label}: {err}");
        assert!(
            !err.contains("ops-Pa55"),
            "{label} leaked the password: {err}"
        );
        assert!(stdout(&output).is_empty(), "{label}: {}", stdout(&output));
    }
}

/// `platform-lock run --key job OPTION VALUE -- echo ran`.
fn run_echo_ran<'a>(option: &'a str, value: &'a str) -> Vec<&'a str> {
    vec!["run", "--key", "job", option, value, "--", "echo", "ran"]
}

/// Each bad input gives one line saying what is wrong and what to do, with the documented
/// exit code, and the command does not run (or, when it cannot be started, the lock is given
/// back at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_one_line_each_with_the_documented_code() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("no-execute-permission.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    let script = script.to_str().unwrap();
    let usage = [
        "<COMMAND>",
        "usage: platform-lock run --key <KEY> -- <COMMAND>",
    ];
    let bad_durations = [
        ("--lease", "0s", "100 ms to 168 h"),
        ("--lease", "50ms", "100 ms to 168 h"),
        ("--lease", "abc", "durations look like 500ms"),
        ("--lease", "99999999999999999s", "100 ms to 168 h"),
        ("--lease", "18446744073709551616s", "too large"),
        ("--wait", "2h", "0 to 1 h (0 is one attempt)"),
        (
            "--wait",
            "18446744073709551615s",
            "0 to 1 h (0 is one attempt)",
        ),
    ];
    let mut cases: Vec<(Vec<&str>, i32, Vec<&str>)> = bad_durations
        .iter()
        .map(|&(option, value, says)| (run_echo_ran(option, value), 2, vec![option, says]))
        .collect();
    cases.extend([
        (
            vec!["run", "--key", "", "--", "echo", "ran"],
            2,
            vec!["invalid lock key", "empty", "1 to 512 bytes"],
        ),
        (vec!["status", ""], 2, vec!["invalid lock key", "empty"]),
        (
            vec!["release", "--force", "--yes", ""],
            2,
            vec!["invalid lock key", "empty"],
        ),
        (
            vec!["list", ""],
            2,
            vec!["pattern is empty", "leave it out"],
        ),
        (vec!["list", "bill-run\n*"], 2, vec!["control character"]),
        (
            vec!["list", "--limit", "0"],
            2,
            vec!["--limit", "at least 1"],
        ),
        (vec!["run", "--key", "job", "--"], 2, usage.to_vec()),
        (vec!["run", "--key", "job"], 2, usage.to_vec()),
        (
            vec!["run", "--key", "job", "--", "/nonexistent/command"],
            127,
            vec!["cannot run `/nonexistent/command`", "not found", "PATH"],
        ),
        (
            vec!["run", "--key", "job", "--", ""],
            127,
            vec!["not found", "PATH"],
        ),
        (
            vec!["run", "--key", "job", "--", script],
            126,
            vec!["not executable", "chmod +x"],
        ),
        (
            vec!["run", "--key", "job", "--", "/"],
            126,
            vec!["not executable"],
        ),
    ]);
    for (args, expected, mentions) in cases {
        let output = cli(&url, &args).await;
        assert_one_line(&format!("{args:?}"), &output, expected, &mentions);
        assert!(!stdout(&output).contains("ran"), "{args:?} ran the command");
        assert!(
            !pod.status("job").await.unwrap().is_held(),
            "{args:?} left the lock held"
        );
    }
}

/// A wrong or missing password is a configuration error (exit 78): it says to fix the
/// credentials in the address, not to check that Redis is up; an unknown host is one readable
/// line too (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_and_unknown_hosts_say_what_to_fix() {
    const PASSWORD: &str = "cli-R1ght-pw";
    let redis = RedisServer::start_with_password(PASSWORD).await.unwrap();
    let port = redis.port();
    for (address, refusal) in [
        (
            format!("redis://:{PASSWORD}-wrong@127.0.0.1:{port}"),
            "WRONGPASS",
        ),
        (
            format!("redis://nobody:{PASSWORD}@127.0.0.1:{port}"),
            "WRONGPASS",
        ),
        (format!("redis://127.0.0.1:{port}"), "NOAUTH"),
    ] {
        for args in [
            &["status", "job"][..],
            &["list"][..],
            &["run", "--key", "job", "--", "echo", "ran"][..],
        ] {
            let output = cli(&address, args).await;
            let label = format!("{args:?} as {}", address.replace(PASSWORD, "***"));
            assert_one_line(
                &label,
                &output,
                78,
                &[
                    refusal,
                    "put the right user and password in the address",
                    // The full key and where the address came from, as the service says it.
                    "bad configuration: telco.platform.lock.redis.address = \"redis://",
                    "(from environment variable TELCO_PLATFORM_LOCK_REDIS_ADDRESS)",
                    "accepted: an address with a user and password Redis accepts",
                ],
            );
            assert!(
                !stderr(&output).contains("redis-sentinel://"),
                "{label}: the URL grammar is no help for refused credentials"
            );
            assert!(
                !stderr(&output).contains("check that Redis is up"),
                "{label}"
            );
            assert!(
                !stderr(&output).contains(PASSWORD),
                "{label} leaked the password"
            );
            assert!(!stdout(&output).contains("ran"), "{label} ran the command");
        }
    }
    // However the resolver answers here (no such host, no DNS at all), one line, and not
    // Rust's `Debug` of the I/O error.
    let output = cli("redis://no-such-host.invalid:6379", &["status", "job"]).await;
    assert_one_line("unknown host", &output, 1, &["no-such-host.invalid"]);
    assert!(!stderr(&output).contains("Custom {"), "{}", stderr(&output));
}

/// `platform-lock status … | head -1` and the like: a reader that stops reading is not a
/// failure (no panic, exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_goes_away_is_no_failure() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let _held = hold(&pod, "held").await;
    for args in [
        &["status", "held"][..],
        &["status", "--json", "held"][..],
        &["list"][..],
        &["list", "--json"][..],
        &["release", "--force", "--yes", "free"][..],
    ] {
        // A pipe whose reader is gone before platform-lock writes: every write fails (EPIPE).
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let mut command = platform_lock(&url, args);
        command.stdout(Stdio::from(writer)).stderr(Stdio::piped());
        let output = finish(command).await;
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).is_empty(), "{args:?}: {}", stderr(&output));
    }
}

/// Redis answered, so "check that Redis is up" would send on-call the wrong way: a key under
/// the prefix that holds something else points at the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_key_that_holds_no_lock_points_at_the_key_prefix() {
    let redis = RedisServer::start().await.unwrap();
    redis
        .cmd(&["SET", "lock:{garbage}", "hello"])
        .await
        .unwrap();
    let output = cli(&redis.url(), &["status", "garbage"]).await;
    assert_one_line(
        "status of a non-lock key",
        &output,
        1,
        &[
            "holds no lock value",
            "DEL it once nothing needs it",
            "key-prefix",
        ],
    );
    assert!(!stderr(&output).contains("check that Redis is up"));
}

/// `list` finding nothing must say where it looked: at the wrong key prefix (or Redis) "no held
/// locks" is a wrong answer. Text and JSON name the Redis (password as `***`) and the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_status_name_the_redis_and_key_prefix_they_searched() {
    const PASSWORD: &str = "cli-prefix-pw";
    let redis = RedisServer::start_with_password(PASSWORD).await.unwrap();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", redis.port());
    let shown = format!("redis://:***@127.0.0.1:{}", redis.port());
    let pod = other_pod(&url).await;
    let _held = hold(&pod, "bill-run:2026-11").await;
    let with_prefix = |args: &'static [&'static str], prefix: &'static str| {
        let mut command = platform_lock(&url, args);
        command.env("TELCO_PLATFORM_LOCK_KEY_PREFIX", prefix);
        finish(command)
    };

    // The service's prefix (the default) and a wrong one.
    for (prefix, found) in [("lock:", true), ("billing:lock:", false)] {
        let list = with_prefix(&["list"], prefix).await;
        assert_eq!(code(&list), 0, "{}", stderr(&list));
        let first = stdout(&list).lines().next().unwrap_or_default().to_owned();
        let at = format!("at Redis {shown} under key prefix `{prefix}`");
        assert!(first.contains(&at), "{prefix}: no {at:?} in {first:?}");
        assert_eq!(first.starts_with("no held locks"), !found, "{first}");

        let json = with_prefix(&["list", "--json"], prefix).await;
        let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(json["redis"], shown.as_str(), "{json}");
        assert_eq!(json["keyPrefix"], prefix, "{json}");
        assert_eq!(json["pattern"], "*", "{json}");
        let locks = json["locks"].as_array().unwrap();
        assert_eq!(locks.len(), usize::from(found), "{json}");

        let status = with_prefix(&["status", "bill-run:2026-11"], prefix).await;
        let text = stdout(&status);
        for line in [
            format!("redis:          {shown}"),
            format!("key prefix:     {prefix}"),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        let status = with_prefix(&["status", "--json", "bill-run:2026-11"], prefix).await;
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(status["redis"], shown.as_str(), "{status}");
        assert_eq!(status["keyPrefix"], prefix, "{status}");
        assert_eq!(status["state"], if found { "held" } else { "free" });
    }
}

/// The command's arguments pass through as bytes, as flock(1) passes them: a file name in
/// Latin-1 is not refused for not being UTF-8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_are_not_utf8_pass_through() {
    use std::os::unix::ffi::OsStrExt;
    let redis = RedisServer::start().await.unwrap();
    let mut command = platform_lock(
        &redis.url(),
        &[
            "run",
            "--key",
            "job",
            "--",
            "sh",
            "-c",
            "printf %s \"$1\" | od -An -tx1",
            "sh",
        ],
    );
    command.arg(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    let output = finish(command).await;
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        stdout(&output).split_whitespace().collect::<Vec<_>>(),
        ["63", "61", "66", "e9"]
    );
}
