//! Crashes across real processes: a pod holding a lock is SIGKILLed and the lock frees itself
//! within its lease, handing over to a pod that was waiting.

use std::process::Stdio;
use std::time::Duration;

use lock_starter::prelude::*;
use lock_testkit::{RedisServer, SLACK};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::{Instant, timeout};

struct Pod {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Pod {
    fn spawn(
        redis: &RedisServer,
        name: &str,
        key: &str,
        lease: &str,
        wait: &str,
        watchdog: &str,
    ) -> Pod {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lock-holder"))
            .args([key, lease])
            .env("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", redis.url())
            .env("TELCO_PLATFORM_LOCK_INSTANCE_ID", name)
            .env("TELCO_PLATFORM_LOCK_WAIT_TIME", wait)
            .env("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", watchdog)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn lock-holder");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Pod { child, lines }
    }

    async fn next_line(&mut self, within: Duration) -> String {
        timeout(within, self.lines.next_line())
            .await
            .expect("no output from the pod in time")
            .expect("read the pod's output")
            .expect("the pod exited without a word")
    }

    async fn kill(mut self) -> Instant {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
        Instant::now()
    }
}

async fn client(redis: &RedisServer) -> std::sync::Arc<dyn DistributedLock> {
    let figment = lock_starter::figment::Figment::from(
        lock_starter::figment::providers::Serialized::default(
            "telco.platform.lock.redis.address",
            redis.url(),
        ),
    );
    LockStarter::builder()
        .figment(figment)
        .build()
        .await
        .unwrap()
        .lock()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_watchdog_lease_passes_to_a_waiting_pod_within_one_watchdog_timeout() {
    let redis = RedisServer::start().await.unwrap();
    let watchdog = Duration::from_secs(2);
    let mut first = Pod::spawn(&redis, "pod-a", "bill-run:2026-11", "watchdog", "1s", "2s");
    let acquired = first.next_line(SLACK * 2).await;
    assert!(acquired.starts_with("ACQUIRED pod-a/"), "{acquired}");

    // A second pod waits for it (long wait), a third gives up and names the holder.
    let mut second = Pod::spawn(&redis, "pod-b", "bill-run:2026-11", "watchdog", "30s", "2s");
    let mut third = Pod::spawn(&redis, "pod-c", "bill-run:2026-11", "watchdog", "0s", "2s");
    let refused = third.next_line(SLACK * 2).await;
    let holder = acquired.split(' ').nth(1).unwrap();
    assert_eq!(
        refused,
        format!("NOT_ACQUIRED held_by_another_owner {holder}")
    );

    // Hold well past the watchdog timeout: the watchdog keeps the lease alive.
    tokio::time::sleep(watchdog * 2).await;
    let check = client(&redis).await;
    assert!(
        check
            .try_acquire("bill-run:2026-11", Lease::Watchdog)
            .await
            .is_err()
    );

    let killed_at = first.kill().await;
    let took_over = second.next_line(watchdog + SLACK).await;
    let after = killed_at.elapsed();
    assert!(took_over.starts_with("ACQUIRED pod-b/"), "{took_over}");
    assert!(after <= watchdog + SLACK, "took {after:?} after the crash");
    let first_token: u64 = acquired.rsplit(' ').next().unwrap().parse().unwrap();
    let second_token: u64 = took_over.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(second_token > first_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_fixed_lease_ends_on_time_and_not_before() {
    let redis = RedisServer::start().await.unwrap();
    let lease = Duration::from_secs(3);
    let before_grant = Instant::now();
    let mut holder = Pod::spawn(&redis, "reaper-1", "msisdn-reaper", "3s", "1s", "30s");
    let line = holder.next_line(SLACK * 2).await;
    assert!(line.starts_with("ACQUIRED reaper-1/"), "{line}");
    holder.kill().await;
    let lock = client(&redis).await;
    let handle = lock
        .acquire_with(
            "msisdn-reaper",
            AcquireOptions::new(Lease::Watchdog)
                .wait_time(Duration::from_secs(20))
                .unwrap(),
        )
        .await
        .expect("the crashed holder's fixed lease never ended");
    let granted_after = before_grant.elapsed();
    assert!(
        granted_after >= lease,
        "granted after {granted_after:?}, inside the {lease:?} lease"
    );
    assert!(
        granted_after <= lease + SLACK * 2,
        "granted after {granted_after:?}"
    );
    drop(handle);
}
