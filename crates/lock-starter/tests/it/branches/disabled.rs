//! Master/sub locks as the starter wires them: switched off with `enabled = false`.

use lock_starter::branches::BranchesOutcome;
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::prelude::*;
use lock_testkit::logs::CapturedLogs;
use tracing::instrument::WithSubscriber;

/// `enabled = false`: the block runs, its branch runs untracked, and the log says where the
/// switch was set, as an `INFO` (nothing is wrong), not a `WARN` with an empty error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_master_says_where_it_was_switched_off() {
    let config = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    let starter = LockStarter::builder()
        .figment(config)
        .build()
        .await
        .unwrap();
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let outcome = starter
        .master_locks()
        .with_master_lock("ticket:4711", Lease::Watchdog, |master| async move {
            master.register_branch("search-index").await
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    let token = outcome.value.unwrap();
    assert!(!token.is_registered());
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert_eq!(outcome.unregistered, ["search-index"]);
    let text = logs.text();
    assert!(!text.contains(" WARN "), "{text}");
    assert!(!text.contains("error="), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("master/sub locks are disabled"))
        .unwrap_or_else(|| panic!("no line for the untracked branch: {text}"));
    assert!(line.contains(" INFO "), "{line}");
    assert!(
        line.contains("detail=\"telco.platform.lock.enabled = false from"),
        "{line}"
    );
    assert!(line.contains("branch=\"search-index\""), "{line}");
}

/// `enabled = false` takes master locks' exclusion across pods away: one `WARN` at start-up
/// says so, naming the switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_master_locks_warn_once_at_start_up() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let config = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    let starter = LockStarter::builder()
        .figment(config)
        .build()
        .with_subscriber(subscriber)
        .await
        .unwrap();
    let _ = starter.master_locks();
    let text = logs.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("master locks hold a lock of this process only"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains(" WARN "), "{}", lines[0]);
    assert!(
        lines[0].contains("telco.platform.lock.enabled = false"),
        "{}",
        lines[0]
    );
}
