//! Who holds a contended key, as the error tells it: a task spawned inside `with_lock` that asks
//! for the section's key contends (re-entry is per task) and is told the key is held by this
//! process — not by "another owner", which reads as another pod — while a holder in another OS
//! process is still another owner.

use crate::common;

use std::time::Duration;

use common::{client, config, eventually, server};
use lock_core::lock::{AcquireOptions, DistributedLock, DistributedLockExt, Lease};
use lock_testkit::test_child;

const KEY: &str = "bill-run:2026-11";
/// The Redis URL handed to the child process.
const CHILD_URL: &str = "HELD_BY_THIS_PROCESS_CHILD_URL";

fn once() -> AcquireOptions {
    common::watchdog_waiting(Duration::from_millis(200))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_spawned_inside_with_lock_is_told_its_own_process_holds_the_key() {
    let (redis, [lock]) = common::server_with().await;
    // Another client of the same process is the same process too.
    let other_client = client(&redis).await;
    let (section_owner, errors) = lock
        .with_lock(KEY, Lease::Watchdog, || async {
            let owner = lock.acquire(KEY, Lease::Watchdog).await.unwrap();
            let spawned = tokio::spawn({
                let (lock, other_client) = (lock.clone(), other_client.clone());
                async move {
                    let same = lock.acquire_with(KEY, once()).await.unwrap_err();
                    let other = other_client.acquire_with(KEY, once()).await.unwrap_err();
                    (same, other)
                }
            });
            (owner.owner().to_owned(), spawned.await.unwrap())
        })
        .await
        .unwrap();
    for error in [errors.0, errors.1] {
        assert_eq!(error.details()["reason"], "held_by_another_owner");
        assert_eq!(error.details()["holder"], section_owner);
        let message = error.to_string();
        assert!(
            message.contains("held by this process") && !message.contains("another owner"),
            "{message}"
        );
    }
}

/// The body of the child process: holds `KEY` until killed. Does nothing when run on its own.
#[tokio::test]
#[ignore = "the body of a child process a test starts and kills"]
async fn child_holder() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let lock = common::connect(common::default_config(url).instance_id("child-pod")).await;
    let _held = common::hold(&lock, KEY, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_in_another_process_is_another_owner() {
    let redis = server().await;
    let lock = common::connect(config(&redis)).await;
    let mut child = test_child(module_path!(), "child_holder")
        .env(CHILD_URL, redis.url())
        .spawn()
        .expect("start the child process");
    let redis_key = lock.redis_key(KEY);
    let held = eventually(Duration::from_secs(30), || async {
        redis.cmd(&["EXISTS", &redis_key]).await.unwrap_or_default() == "1"
    })
    .await;
    let result = lock.acquire_with(KEY, once()).await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(held, "the child process never took {KEY}");
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("held by another owner `child-pod/") && !message.contains("this process"),
        "{message}"
    );
}
