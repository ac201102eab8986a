//! Wiring of shared values: how their store is built when the builder was given none.

use std::sync::Arc;

use lock_core::values::{InMemoryValues, ValueStore};
use lock_redis::RedisClient;
use lock_redis::values::RedisValues;

use crate::wiring::{Building, Wired};

impl Wired for dyn ValueStore {
    const NAME: &'static str = "value";
    const KEPT: &'static str = "shared values";

    /// In this process only: the values are not shared with other replicas.
    fn disabled(detail: &str) -> Arc<Self> {
        tracing::warn!(
            %detail,
            "shared values are kept in this process only and are not shared with other replicas"
        );
        Arc::new(InMemoryValues::new())
    }

    fn on_redis(client: &RedisClient) -> Building<'_, Self> {
        Box::pin(async move { Arc::new(RedisValues::new(client).await) as Arc<Self> })
    }

    fn in_process() -> Arc<Self> {
        Arc::new(InMemoryValues::new())
    }
}
