//! `LockStarter::shutdown` at the end of `main` flushes the release of a handle dropped just
//! before: a program that acquires, drops its handle, shuts down and returns, run as a separate
//! OS process again and again against a real redis-server, leaves the key free every time.
//!
//! The program is the ignored test `child_acquires_drops_and_exits`, run by this test binary
//! re-executing itself (`lock_testkit::test_child`); a test returning ends the child's runtime
//! and then its process, as a return from `main` would.

use std::time::Duration;

use lock_starter::prelude::*;
use lock_testkit::{RedisServer, test_child};

/// Set (to anything) only in the child processes: the ignored test then runs the program.
const CHILD: &str = "LOCK_SHUTDOWN_TEST_CHILD";
/// Set in a child that should return without calling shutdown, for comparison.
const SKIP_SHUTDOWN: &str = "LOCK_SHUTDOWN_TEST_SKIP";
const KEY: &str = "bill-run:2026-11";
const REDIS_KEY: &str = "lock:{bill-run:2026-11}";
const RUNS: usize = 50;

/// The program: acquire a watchdog lease, drop the handle, shut down, return. Does nothing in an
/// ordinary test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the program the tests below run as a child process"]
async fn child_acquires_drops_and_exits() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let starter = LockStarter::builder().build().await.unwrap();
    let lock = starter.lock().unwrap();
    let handle = lock.acquire(KEY, Lease::Watchdog).await.unwrap();
    drop(handle);
    if std::env::var_os(SKIP_SHUTDOWN).is_none() {
        let summary = starter.shutdown().await;
        assert!(summary.is_complete(), "{summary}");
    }
}

/// Runs the program once in a process of its own against `redis`; panics if it failed.
async fn run_child(redis: &RedisServer, shutdown: bool) {
    let mut child = test_child(module_path!(), "child_acquires_drops_and_exits");
    child
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env(CHILD, "1")
        .env("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", redis.url())
        .env("TELCO_PLATFORM_LOCK_INSTANCE_ID", "exiting-pod");
    if !shutdown {
        child.env(SKIP_SHUTDOWN, "1");
    }
    let mut child = tokio::process::Command::from(child);
    child.kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), child.output())
        .await
        .expect("the child process did not finish")
        .unwrap();
    assert!(
        output.status.success(),
        "the child failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether the lock key holds a grant (`H|…`) right now; a release leaves a tombstone.
async fn granted(redis: &RedisServer) -> bool {
    redis
        .cmd(&["GET", REDIS_KEY])
        .await
        .unwrap()
        .starts_with("H|")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_drops_its_handle_and_shuts_down_leaves_the_key_free_every_time() {
    let redis = RedisServer::start().await.unwrap();
    for run in 1..=RUNS {
        run_child(&redis, true).await;
        // Checked once the process is gone: nothing of it can release the key any more.
        assert!(
            !granted(&redis).await,
            "run {run}: the key is still held after the process exited"
        );
    }
}

/// Without the shutdown, the same program leaves the key held some of the time (the background
/// release loses the race with the process exit). Timing-dependent, so not part of the suite:
/// `cargo test -p lock-starter --test it -- --ignored shutdown::without_shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "shows the race the shutdown closes; its count depends on timing"]
async fn without_shutdown_the_key_is_left_held_some_of_the_time() {
    let redis = RedisServer::start().await.unwrap();
    let mut left_held = 0;
    for _ in 0..RUNS {
        run_child(&redis, false).await;
        if granted(&redis).await {
            left_held += 1;
            // Free it for the next run rather than wait out the 30 s watchdog lease.
            redis.cmd(&["DEL", REDIS_KEY]).await.unwrap();
        }
    }
    println!("without shutdown: the key was left held after {left_held} of {RUNS} runs");
    assert!(left_held > 0, "the race did not show in {RUNS} runs");
}
