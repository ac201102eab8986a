//! Rate limiting on real redis-server processes.

mod batch;
mod lost_replies;
mod processes;
mod sentinel;
mod store;
mod together;

use std::sync::Arc;

use lock_core::rate_limit::{FailurePolicy, Part, Quota, RateLimiter};
use lock_redis::lock::RedisLock;
use lock_redis::rate_limit::RedisRateLimits;

/// The rate-limit store on `lock`'s connections.
pub(crate) async fn store(lock: &RedisLock) -> Arc<RedisRateLimits> {
    Arc::new(RedisRateLimits::new(&lock.client()).await)
}

/// The limit `name` at `quota` on `store`.
pub(crate) fn limiter(
    store: &Arc<RedisRateLimits>,
    name: &str,
    quota: &str,
    policy: FailurePolicy,
) -> RateLimiter {
    let quota: Quota = quota.parse().unwrap();
    RateLimiter::new(store.clone(), name, quota, policy).unwrap()
}

/// A check of one client's limit and the global one, each charged 1.
pub(crate) fn client_and_global<'a>(
    per_client: &'a RateLimiter,
    global: &'a RateLimiter,
    client: &'a str,
) -> [Part<'a>; 2] {
    [
        Part {
            limiter: per_client,
            key: client,
            cost: 1,
        },
        Part {
            limiter: global,
            key: "all",
            cost: 1,
        },
    ]
}
