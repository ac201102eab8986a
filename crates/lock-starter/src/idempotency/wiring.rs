//! Wiring of idempotent execution: the store by the defaults-then-overrides rule, with the
//! `telco.platform.lock.idempotency.*` settings.

use std::sync::Arc;

use lock_core::idempotency::{
    DisabledIdempotencyStore, Idempotency, IdempotencyStore, InMemoryIdempotencyStore,
};
use lock_redis::RedisClient;
use lock_redis::idempotency::RedisIdempotencyStore;

use crate::config::LockSettings;

/// Where the records of a started service live.
pub(crate) enum Store<'a> {
    /// `enabled = false`: the action runs every time; the detail says where it was switched off.
    Disabled(&'a str),
    /// The builder's override.
    Custom(Arc<dyn IdempotencyStore>),
    /// On the Redis client's connections.
    Redis(&'a RedisClient),
    /// A custom lock and no store: in this process only.
    InProcess,
}

pub(crate) fn build(settings: &LockSettings, store: Store<'_>) -> Idempotency {
    let store: Arc<dyn IdempotencyStore> = match store {
        Store::Disabled(detail) => Arc::new(DisabledIdempotencyStore::new(detail)),
        Store::Custom(store) => store,
        Store::Redis(client) => Arc::new(RedisIdempotencyStore::new(client)),
        Store::InProcess => {
            tracing::info!(
                "a custom lock and no idempotency store were given: idempotency records are kept in this process only (LockStarterBuilder::idempotency_store sets one)"
            );
            Arc::new(InMemoryIdempotencyStore::new())
        }
    };
    // The key table checks the same ranges, from the same lock-core constants.
    Idempotency::new(store, settings.idempotency_settings())
        .expect("the idempotency settings were checked at load")
}
