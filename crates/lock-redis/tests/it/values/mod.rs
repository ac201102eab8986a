//! Shared values on real redis-server processes.

mod flight;
mod lost_replies;
mod processes;
mod sentinel;
mod store;

use std::sync::Arc;

use lock_core::values::SharedValues;
use lock_redis::lock::RedisLock;
use lock_redis::values::RedisValues;

/// Shared values on `lock`'s connections, and the store behind them.
pub(crate) async fn values(lock: &RedisLock) -> (SharedValues, Arc<RedisValues>) {
    let store = Arc::new(RedisValues::new(&lock.client()).await);
    (SharedValues::new(store.clone()), store)
}
