//! The cache on real redis-server processes.

mod processes;
mod sentinel;
mod store;

use std::sync::Arc;

use lock_redis::cache::RedisCaches;
use lock_redis::lock::RedisLock;

/// The caches on `lock`'s connections.
pub(crate) async fn store(lock: &RedisLock) -> Arc<RedisCaches> {
    Arc::new(RedisCaches::new(&lock.client()).await)
}
