//! Wiring of idempotent execution: how its store is built when the builder was given none,
//! and the `telco.platform.lock.idempotency.*` settings.

use std::sync::Arc;

use lock_core::idempotency::{
    DisabledIdempotencyStore, Idempotency, IdempotencyStore, InMemoryIdempotencyStore,
};
use lock_redis::RedisClient;
use lock_redis::idempotency::RedisIdempotencyStore;

use crate::config::LockSettings;
use crate::wiring::{Building, Store, Wired};

impl Wired for dyn IdempotencyStore {
    const NAME: &'static str = "idempotency";
    const KEPT: &'static str = "idempotency records";

    /// The action runs every time.
    fn disabled(detail: &str) -> Arc<Self> {
        Arc::new(DisabledIdempotencyStore::new(detail))
    }

    fn on_redis(client: &RedisClient) -> Building<'_, Self> {
        Box::pin(async move { Arc::new(RedisIdempotencyStore::new(client).await) as Arc<Self> })
    }

    fn in_process() -> Arc<Self> {
        Arc::new(InMemoryIdempotencyStore::new())
    }
}

pub(crate) async fn build(
    settings: &LockSettings,
    store: Store<'_, dyn IdempotencyStore>,
) -> Idempotency {
    // The key table checks the same ranges, from the same lock-core constants.
    Idempotency::new(store.build().await, settings.idempotency_settings())
        .expect("the idempotency settings were checked at load")
}
