//! Shared values as the starter wires them: on the Redis connections, and switched off.

use std::time::Duration;

use lock_starter::prelude::*;

use crate::common::{on_redis, starter};
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use tracing::instrument::WithSubscriber;

const LONG: Duration = Duration::from_secs(60);

/// Two services on one Redis share values: one waits, the other writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_starters_on_one_redis_share_values_and_wake_each_other() {
    let redis = RedisServer::start().await.unwrap();
    let config = on_redis(&redis);
    let (waiting, writing) = (starter(&config).await, starter(&config).await);
    let waiter = tokio::spawn(async move {
        waiting
            .values()
            .wait_for_value("catalog:warm-up", &"done".to_owned(), LONG)
            .await
    });
    writing
        .values()
        .set("catalog:warm-up", "done", Expiry::After(LONG))
        .await
        .unwrap();
    let waited = tokio::time::timeout(lock_testkit::SLACK, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(waited.is_met(), "{waited:?}");
    let stored = redis
        .cmd(&["GET", "lock:values:{catalog:warm-up}"])
        .await
        .unwrap();
    assert!(stored.ends_with(":\"done\""), "{stored}");
}

/// `enabled = false`: values still work, in this process only, and one `WARN` at start-up says
/// they are not shared and where the switch was set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_values_work_in_process_and_warn_once_at_start_up() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let starter = starter("[telco.platform.lock]\nenabled = false\n")
        .with_subscriber(subscriber)
        .await;
    let values = starter.values();
    let version = values.set("flag", &true, Expiry::Never).await.unwrap();
    let read = values.get::<bool>("flag").await.unwrap().unwrap();
    assert_eq!((read.value, read.version), (true, version));
    let text = logs.text();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("shared values"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("not shared with other replicas"),
        "{text}"
    );
    assert!(
        warnings[0].contains("detail=telco.platform.lock.enabled = false from"),
        "{text}"
    );
}
