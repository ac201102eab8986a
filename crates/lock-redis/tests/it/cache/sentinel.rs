//! The cache through Sentinel: the conformance suite on the deployment's master.

use std::sync::Arc;

use lock_core::cache::CacheStore;
use lock_core::cache::conformance::{CacheFactory, run_all};
use lock_testkit::RedisSentinel;

use crate::common;

struct ThroughSentinel {
    url: String,
}

#[async_trait::async_trait]
impl CacheFactory for ThroughSentinel {
    async fn client(&self) -> Arc<dyn CacheStore> {
        let lock = common::connect(common::config_at(self.url.clone())).await;
        super::store(&lock).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_conformance_suite_passes_through_sentinel() {
    let sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let url = sentinel.url();
    let failed = run_all(Arc::new(ThroughSentinel { url })).await;
    assert!(
        failed.is_empty(),
        "cache checks failed through Sentinel: {failed:?}"
    );
    let keys = sentinel.master().cmd(&["DBSIZE"]).await.unwrap();
    assert_ne!(keys.trim(), "0", "no entry was ever written to the master");
}
