//! The cache through Sentinel: the conformance suite on the deployment's master.

use lock_core::cache::conformance::run_all;

use crate::suites::assert_passes_through_sentinel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_conformance_suite_passes_through_sentinel() {
    assert_passes_through_sentinel("cache", |factory| run_all(factory)).await;
}
