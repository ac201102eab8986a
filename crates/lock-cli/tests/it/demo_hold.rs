//! The README's operations walk-through, end to end: `scripts/demo.sh --hold` leaves a pod
//! holding a lock, and `platform-lock` — with exactly the settings the demo prints — lists it,
//! shows its holder and force-releases it, after which the pod loses its lease and the demo
//! ends successfully.
//!
//! The demo is lock-starter's `demo` example; `cargo test --workspace` builds it next to this
//! test (`target/<profile>/examples/demo`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

/// The demo's own rounds take about 10 s; this is for a loaded 2-core machine.
const DEMO_DEADLINE: Duration = Duration::from_secs(180);
const HELD_KEY: &str = "bill-run:2026-12";

fn demo_binary() -> PathBuf {
    let me = std::env::current_exe().expect("test binary path");
    let profile_dir = me
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let demo = profile_dir.join("examples").join("demo");
    assert!(
        demo.exists(),
        "{} is missing: build it with `cargo build -p lock-starter --examples` \
         (`cargo test --workspace` does)",
        demo.display()
    );
    demo
}

/// Reads the demo's stdout until `marker`, returning the lines read.
async fn read_until(lines: &mut Lines<BufReader<ChildStdout>>, marker: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.expect("demo stdout") {
            let done = line.contains(marker);
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    };
    let found = tokio::time::timeout(DEMO_DEADLINE, read).await;
    assert!(
        matches!(found, Ok(true)),
        "the demo did not print {marker:?}; its output:\n{}",
        seen.join("\n")
    );
    seen
}

/// `platform-lock args…` with only the environment the demo told the operator to export.
async fn platform_lock(exports: &[(String, String)], args: &[&str]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_platform-lock"));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(exports.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("platform-lock did not finish")
        .expect("platform-lock runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_inspects_and_releases_the_lock_the_demo_holds() {
    let mut demo = Command::new(demo_binary())
        .arg("--hold")
        .env_remove("TELCO_PLATFORM_LOCK_REDIS_ADDRESS")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the demo");
    let mut lines = BufReader::new(demo.stdout.take().expect("piped")).lines();
    let printed = read_until(&mut lines, "Waiting for the forced release").await;

    let exports: Vec<(String, String)> = printed
        .iter()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .filter_map(|assignment| assignment.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let names: Vec<&str> = exports.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "TELCO_PLATFORM_LOCK_KEY_PREFIX"
        ],
        "the demo prints the settings the CLI needs; it printed:\n{}",
        printed.join("\n")
    );
    for command in [
        "platform-lock list",
        "platform-lock status",
        "release --force",
    ] {
        assert!(
            printed.iter().any(|line| line.contains(command)),
            "the demo shows `{command}`"
        );
    }

    let list = platform_lock(&exports, &["list", "--json"]).await;
    assert!(list.status.success(), "list: {list:?}");
    let listed: Value = serde_json::from_slice(&list.stdout).expect("list --json is JSON");
    let entry = listed["locks"]
        .as_array()
        .unwrap_or_else(|| panic!("no locks array: {listed}"))
        .iter()
        .find(|lock| lock["lock"] == HELD_KEY)
        .unwrap_or_else(|| panic!("{HELD_KEY} is listed: {listed:?}"));
    assert_eq!(entry["instanceId"], "pod-6", "{entry}");

    let status = platform_lock(&exports, &["status", HELD_KEY, "--json"]).await;
    assert!(status.status.success(), "status: {status:?}");
    let status: Value = serde_json::from_slice(&status.stdout).expect("status --json is JSON");
    assert_eq!(status["state"], "held", "{status}");
    assert_eq!(status["instanceId"], "pod-6", "{status}");

    let release = platform_lock(&exports, &["release", "--force", "--yes", HELD_KEY]).await;
    assert!(release.status.success(), "release: {release:?}");
    assert!(
        String::from_utf8_lossy(&release.stdout).contains("held by pod-6"),
        "{release:?}"
    );

    let rest = read_until(&mut lines, "lost its lease").await;
    let exit = tokio::time::timeout(DEMO_DEADLINE, demo.wait())
        .await
        .expect("the demo ends once the pod has lost its lease")
        .expect("demo exit status");
    assert!(
        exit.success(),
        "demo exited {exit}; last lines:\n{}",
        rest.join("\n")
    );
    assert!(
        rest.iter().any(|line| line.contains("LEASE LOST")),
        "the pod reports the lost lease:\n{}",
        rest.join("\n")
    );
}
