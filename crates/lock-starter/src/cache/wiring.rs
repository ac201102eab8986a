//! Wiring of the cache: how its store is built when the builder was given none.

use std::sync::Arc;

use lock_core::cache::{CacheStore, DisabledCaches, InMemoryCaches};
use lock_redis::RedisClient;
use lock_redis::cache::RedisCaches;

use crate::wiring::{Building, Wired};

impl Wired for dyn CacheStore {
    const NAME: &'static str = "cache";
    const KEPT: &'static str = "caches";

    fn disabled(detail: &str) -> Arc<Self> {
        tracing::warn!(%detail, "caching is switched off: every get_or_load runs its loader");
        Arc::new(DisabledCaches)
    }

    fn on_redis(client: &RedisClient) -> Building<'_, Self> {
        Box::pin(async move { Arc::new(RedisCaches::new(client).await) as Arc<Self> })
    }

    fn in_process() -> Arc<Self> {
        Arc::new(InMemoryCaches::new())
    }
}
