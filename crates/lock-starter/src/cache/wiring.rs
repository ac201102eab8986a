//! Wiring of the cache: the store by the defaults-then-overrides rule.

use std::sync::Arc;

use lock_core::cache::{CacheStore, DisabledCaches, InMemoryCaches};
use lock_redis::RedisClient;
use lock_redis::cache::RedisCaches;

/// Where the caches of a started service live.
pub(crate) enum Store<'a> {
    /// `enabled = false`: nothing cached; the detail says where it was switched off.
    Disabled(&'a str),
    /// The builder's override.
    Custom(Arc<dyn CacheStore>),
    /// On the Redis client's connections.
    Redis(&'a RedisClient),
    /// A custom lock and no store: in this process only.
    InProcess,
}

pub(crate) async fn build(store: Store<'_>) -> Arc<dyn CacheStore> {
    match store {
        Store::Disabled(detail) => {
            tracing::warn!(%detail, "caching is switched off: every get_or_load runs its loader");
            Arc::new(DisabledCaches)
        }
        Store::Custom(store) => store,
        Store::Redis(client) => Arc::new(RedisCaches::new(client).await),
        Store::InProcess => {
            tracing::info!(
                "a custom lock and no cache store were given: caches are kept in this process only (LockStarterBuilder::cache_store sets one)"
            );
            Arc::new(InMemoryCaches::new())
        }
    }
}
