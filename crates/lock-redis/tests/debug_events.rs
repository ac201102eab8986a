//! The normal path is visible in a plain `tracing_subscriber::fmt()` log filtered with
//! `lock_core=debug,lock_redis=debug` (no `FmtSpan` setting): a grant, a watchdog renewal and a
//! release each print one `DEBUG` line with the key, the fencing token and the outcome.
//!
//! The subscriber is the test thread's default and the runtime is `current_thread`, so the
//! watchdog's task logs into it too.

mod common;

use std::time::Duration;

use common::{config, eventually, server};
use lock_core::lock::{DistributedLock, DistributedLockExt, Lease, ReleaseOutcome};
use lock_testkit::logs::CapturedLogs;

/// The `RUST_LOG` a user sets to see the lock's debug output.
const FILTER: &str = "lock_core=debug,lock_redis=debug";

fn lines_with(logs: &CapturedLogs, message: &str, key: &str) -> Vec<String> {
    logs.text()
        .lines()
        .filter(|l| l.contains(message) && l.contains(&format!("lock_key=\"{key}\"")))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_grant_a_renewal_and_a_release_each_print_a_debug_line() {
    let logs = CapturedLogs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_env_filter(FILTER)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let redis = server().await;
    let lock = common::connect(config(&redis).instance_id("debug-pod")).await;

    let key = "dbg:bill-run";
    let handle = lock.acquire(key, Lease::Watchdog).await.unwrap();
    let token = handle.fencing_token();
    let granted = lines_with(&logs, "lock granted", key);
    assert!(
        granted.len() == 1
            && granted[0].contains(" DEBUG ")
            && granted[0].contains(&format!("fencing_token={token}"))
            && granted[0].contains("outcome=\"granted\""),
        "one DEBUG line for the grant with fencing_token={token}: {granted:#?}\nlog:\n{}",
        logs.text()
    );

    // The watchdog renews every third of the 1 s watchdog timeout.
    let renewed = eventually(Duration::from_secs(20), || async {
        logs.text()
            .lines()
            .any(|l| l.contains("watchdog renewed leases") && l.contains("renewed=1"))
    })
    .await;
    assert!(
        renewed,
        "no DEBUG line for a renewal tick within 20 s:\n{}",
        logs.text()
    );

    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    let released = lines_with(&logs, "lock released", key);
    assert!(
        released.len() == 1
            && released[0].contains(" DEBUG ")
            && released[0].contains(&format!("fencing_token={token}"))
            && released[0].contains("outcome=\"released\"")
            && released[0].contains("held_ms="),
        "one DEBUG line for the release: {released:#?}\nlog:\n{}",
        logs.text()
    );

    // A section re-entering its own lease says so too.
    let nested = lock
        .with_lock(key, Lease::Watchdog, || async {
            lock.acquire(key, Lease::Watchdog)
                .await
                .unwrap()
                .hold_count()
        })
        .await
        .unwrap();
    assert_eq!(nested, 2);
    let reentered = lines_with(&logs, "lock re-entered", key);
    assert!(
        reentered.len() == 1 && reentered[0].contains("hold_count=2"),
        "one DEBUG line for the re-entry: {reentered:#?}"
    );
}
