//! The first connection: made at once, whatever the command timeout, and a connection attempt
//! that times out names the address and the timeout.

mod common;

use std::time::Duration;

use common::{config, server};
use lock_core::{DistributedLock, Lease};
use lock_redis::RedisLock;

/// With a command timeout shorter than fred's first reconnect delay (100 to 200 ms), `connect`
/// still returns connected: the first acquisition right after it is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_command_timeout_still_connects_before_the_first_acquisition() {
    let redis = server().await;
    for i in 0..10 {
        let lock = RedisLock::connect(config(&redis).command_timeout(Duration::from_millis(50)))
            .await
            .unwrap();
        let name = format!("first-{i}");
        let handle = lock
            .try_acquire(&name, Lease::Fixed(Duration::from_secs(10)))
            .await
            .unwrap_or_else(|e| panic!("the first acquisition failed: {e}"));
        let _ = handle.release().await.unwrap();
    }
}
