//! Wiring of idempotent execution: the store by the defaults-then-overrides rule, with the
//! `telco.platform.lock.idempotency.*` settings.

use std::sync::Arc;

use lock_core::{
    DisabledIdempotencyStore, Idempotency, IdempotencyStore, InMemoryIdempotencyStore,
};
use lock_redis::{RedisIdempotencyStore, RedisLock};

use crate::config::LockSettings;

// Both are exported by `http` and the second bounds a key of the table, also without `http`.

/// The largest request body the `Idempotency-Key` layer reads by default: 1 MiB
/// (`telco.platform.lock.idempotency.http-max-body-bytes`).
#[cfg_attr(not(feature = "http"), allow(dead_code, unreachable_pub))]
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// The largest accepted request body limit of the `Idempotency-Key` layer: 64 MiB (the body is
/// buffered whole to be fingerprinted).
#[cfg_attr(not(feature = "http"), allow(unreachable_pub))]
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Where the records of a started service live.
pub(crate) enum Store<'a> {
    /// `enabled = false`: the action runs every time; the detail says where it was switched off.
    Disabled(&'a str),
    /// The builder's override.
    Custom(Arc<dyn IdempotencyStore>),
    /// On the Redis lock's connections.
    Redis(&'a RedisLock),
    /// A custom lock and no store: in this process only.
    InProcess,
}

pub(crate) fn build(settings: &LockSettings, store: Store<'_>) -> Idempotency {
    let store: Arc<dyn IdempotencyStore> = match store {
        Store::Disabled(detail) => Arc::new(DisabledIdempotencyStore::new(detail)),
        Store::Custom(store) => store,
        Store::Redis(lock) => Arc::new(RedisIdempotencyStore::on(lock)),
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
