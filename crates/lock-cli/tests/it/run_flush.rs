//! Every way `platform-lock` ends flushes the lock's background releases first, so a grant it
//! handed back is gone from Redis when the process is: here, a grant whose replicas did not
//! confirm it (`min-replicas = 1` on a Redis without replicas), released in the background.

use crate::common::{assert_one_line, finish, platform_lock, stderr};
use lock_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_the_replicas_did_not_confirm_is_released_before_exit_and_the_hint_names_replication()
 {
    let redis = RedisServer::start().await.unwrap();
    let mut run = platform_lock(&redis.url(), &["run", "--key", "job", "--", "true"]);
    run.env("TELCO_PLATFORM_LOCK_MIN_REPLICAS", "1")
        .env("TELCO_PLATFORM_LOCK_REPLICA_SYNC_TIMEOUT", "100ms")
        // A lease long enough that only the release, not its end, can have freed the key.
        .env("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", "30s");
    let output = finish(run).await;
    assert_one_line(
        "min-replicas without replicas",
        &output,
        1,
        &[
            "0 of the 1 replicas",
            "INFO replication",
            "telco.platform.lock.min-replicas",
            "telco.platform.lock.replica-sync-timeout (now 100 ms)",
        ],
    );
    let err = stderr(&output);
    assert!(
        !err.contains("redis.address"),
        "points at the address: {err}"
    );
    // The process is gone: whatever it left at the key stays there.
    let value = redis.cmd(&["GET", "lock:{job}"]).await.unwrap();
    let ttl = redis.cmd(&["PTTL", "lock:{job}"]).await.unwrap();
    assert!(
        !value.starts_with("H|"),
        "the key is still held after exit: {value} (PTTL {ttl} ms)"
    );
}
