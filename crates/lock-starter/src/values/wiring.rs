//! Wiring of shared values: the store by the defaults-then-overrides rule.

use std::sync::Arc;

use lock_core::values::{InMemoryValues, SharedValues, ValueStore};
use lock_redis::RedisClient;
use lock_redis::values::RedisValues;

/// Where the values of a started service live.
pub(crate) enum Store<'a> {
    /// `enabled = false`: in this process only; the detail says where it was switched off.
    Disabled(&'a str),
    /// The builder's override.
    Custom(Arc<dyn ValueStore>),
    /// On the Redis client's connections.
    Redis(&'a RedisClient),
    /// A custom lock and no store: in this process only.
    InProcess,
}

pub(crate) async fn build(store: Store<'_>) -> SharedValues {
    let store: Arc<dyn ValueStore> = match store {
        Store::Disabled(detail) => {
            tracing::warn!(
                %detail,
                "shared values are kept in this process only and are not shared with other replicas"
            );
            Arc::new(InMemoryValues::new())
        }
        Store::Custom(store) => store,
        Store::Redis(client) => Arc::new(RedisValues::new(client).await),
        Store::InProcess => {
            tracing::info!(
                "a custom lock and no value store were given: shared values are kept in this process only (LockStarterBuilder::value_store sets one)"
            );
            Arc::new(InMemoryValues::new())
        }
    };
    SharedValues::new(store)
}
