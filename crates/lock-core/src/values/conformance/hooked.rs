//! A store for the checks and tests that observe or disturb a backend: every call passes to
//! the store it wraps, but sets and watches go through hooks.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::values::{
    Condition, Delivery, Expiry, Pushed, ValueStore, ValueWatch, ValuesError, Versioned, Written,
};

/// A store that passes every call to `store`, but lets `hooks` act around each set and give
/// each watch.
#[derive(Debug)]
pub struct Hooked<H> {
    /// The store every call goes to.
    pub store: Arc<dyn ValueStore>,
    /// What is done around a set and for a watch.
    pub hooks: H,
}

/// What a [`Hooked`] store does around a set and for a watch; by default, nothing more than
/// the store does.
#[async_trait]
pub trait Hooks: Debug + Send + Sync + 'static {
    /// Runs before a set with `condition` is sent to the store.
    async fn before_set(&self, condition: Condition) {
        let _ = condition;
    }

    /// What the caller of a set with `condition` gets; by default what the store answered.
    fn after_set(
        &self,
        condition: Condition,
        written: Result<Written, ValuesError>,
    ) -> Result<Written, ValuesError> {
        let _ = condition;
        written
    }

    /// The watch of `key` the caller gets; by default `store`'s own.
    async fn watch(
        &self,
        store: &dyn ValueStore,
        key: &str,
    ) -> Result<Box<dyn ValueWatch>, ValuesError> {
        store.watch(key).await
    }
}

#[async_trait]
impl<H: Hooks> ValueStore for Hooked<H> {
    fn namespace(&self) -> &str {
        self.store.namespace()
    }
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>, ValuesError> {
        self.store.get(key).await
    }
    async fn set(
        &self,
        key: &str,
        value: &[u8],
        expiry: Expiry,
        condition: Condition,
    ) -> Result<Written, ValuesError> {
        self.hooks.before_set(condition).await;
        let written = self.store.set(key, value, expiry, condition).await;
        self.hooks.after_set(condition, written)
    }
    async fn delete(&self, key: &str, condition: Condition) -> Result<Written, ValuesError> {
        self.store.delete(key, condition).await
    }
    async fn watch(&self, key: &str) -> Result<Box<dyn ValueWatch>, ValuesError> {
        self.hooks.watch(&*self.store, key).await
    }
    fn new_owner(&self) -> String {
        self.store.new_owner()
    }
    async fn map_put(
        &self,
        map: &str,
        field: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), ValuesError> {
        self.store.map_put(map, field, value, ttl).await
    }
    async fn map_get(&self, map: &str, field: &str) -> Result<Option<Vec<u8>>, ValuesError> {
        self.store.map_get(map, field).await
    }
    async fn map_remove(&self, map: &str, field: &str) -> Result<bool, ValuesError> {
        self.store.map_remove(map, field).await
    }
    async fn map_entries(&self, map: &str) -> Result<Vec<(String, Vec<u8>)>, ValuesError> {
        self.store.map_entries(map).await
    }
    async fn map_clear(&self, map: &str) -> Result<bool, ValuesError> {
        self.store.map_clear(map).await
    }
    async fn queue_push(
        &self,
        queue: &str,
        items: &[Vec<u8>],
        max_len: u64,
        ttl: Duration,
    ) -> Result<Pushed, ValuesError> {
        self.store.queue_push(queue, items, max_len, ttl).await
    }
    async fn queue_take(
        &self,
        queue: &str,
        consumer: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery<Vec<u8>>>, ValuesError> {
        self.store
            .queue_take(queue, consumer, max, visibility)
            .await
    }
    async fn queue_ack(&self, queue: &str, ids: &[String]) -> Result<u64, ValuesError> {
        self.store.queue_ack(queue, ids).await
    }
    async fn queue_len(&self, queue: &str) -> Result<u64, ValuesError> {
        self.store.queue_len(queue).await
    }
}
