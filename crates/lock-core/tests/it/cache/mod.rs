//! The cache on the in-memory backend, switched off, and on a failing store.

mod across_pods;
mod memory;
mod outage;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lock_core::BoxError;
use lock_core::cache::Cache;

/// Gets or loads `sku-1` from `products` `times` times in turn, each miss loading `"loaded"`;
/// returns how many loaders ran.
async fn load_in_turn(products: &Cache<String>, times: usize) -> u64 {
    let runs = Arc::new(AtomicU64::new(0));
    for _ in 0..times {
        let runs = Arc::clone(&runs);
        let value = products
            .get_or_load("sku-1", || async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>("loaded".to_owned())
            })
            .await;
        assert_eq!(value.unwrap(), "loaded");
    }
    runs.load(Ordering::SeqCst)
}
