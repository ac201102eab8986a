//! Shared values through Sentinel: the conformance suite on the deployment's master.

use std::sync::Arc;

use lock_core::values::SharedValues;
use lock_core::values::conformance::{ValuesFactory, run_all};
use lock_testkit::RedisSentinel;

use crate::common;

struct ThroughSentinel {
    url: String,
}

#[async_trait::async_trait]
impl ValuesFactory for ThroughSentinel {
    async fn client(&self) -> SharedValues {
        let lock = common::connect(common::config_at(self.url.clone())).await;
        super::values(&lock).await.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_values_conformance_suite_passes_through_sentinel() {
    let sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let failed = run_all(Arc::new(ThroughSentinel {
        url: sentinel.url(),
    }))
    .await;
    assert!(
        failed.is_empty(),
        "values checks failed through Sentinel: {failed:?}"
    );
    // The suite wrote to the deployment's master, not some other Redis.
    let keys = sentinel.master().cmd(&["DBSIZE"]).await.unwrap();
    assert_ne!(keys.trim(), "0", "no value was ever written to the master");
}
