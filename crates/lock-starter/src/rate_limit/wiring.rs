//! Wiring of rate limiting: the store by the defaults-then-overrides rule.

use std::sync::Arc;

use lock_core::rate_limit::{DisabledRateLimits, InMemoryRateLimits, RateLimitStore};
use lock_redis::RedisClient;
use lock_redis::rate_limit::RedisRateLimits;

/// Where the rate limits of a started service are kept.
pub(crate) enum Store<'a> {
    /// `enabled = false`: every request admitted; the detail says where it was switched off.
    Disabled(&'a str),
    /// The builder's override.
    Custom(Arc<dyn RateLimitStore>),
    /// On the Redis client's connections.
    Redis(&'a RedisClient),
    /// A custom lock and no store: in this process only.
    InProcess,
}

pub(crate) async fn build(store: Store<'_>) -> Arc<dyn RateLimitStore> {
    match store {
        Store::Disabled(detail) => {
            tracing::warn!(%detail, "rate limiting is switched off: every request is admitted");
            Arc::new(DisabledRateLimits)
        }
        Store::Custom(store) => store,
        Store::Redis(client) => Arc::new(RedisRateLimits::new(client).await),
        Store::InProcess => {
            tracing::info!(
                "a custom lock and no rate-limit store were given: rate limits are kept in this process only (LockStarterBuilder::rate_limit_store sets one)"
            );
            Arc::new(InMemoryRateLimits::new())
        }
    }
}
