//! The in-memory values: the conformance suite, and that the suite catches a store whose
//! watches hear nothing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::BoxError;
use lock_core::values::conformance::{ValuesFactory, run_all};
use lock_core::values::{
    Condition, Delivery, Expiry, InMemoryValues, Observed, Pushed, SharedValues, ValueStore,
    ValueWatch, ValuesError, Versioned, Waited, Written,
};

/// Clients of one in-process store.
#[derive(Default)]
struct Memory(Arc<InMemoryValues>);

#[async_trait]
impl ValuesFactory for Memory {
    async fn client(&self) -> SharedValues {
        SharedValues::new(self.0.clone())
    }
}

mod conformance_suite {
    use super::Memory;

    lock_core::conformance_tests!(values, async { Memory::default() });
}

/// A store whose watches never hear a write: waiters see only their first read.
#[derive(Debug, Default)]
struct Deaf(InMemoryValues);

#[derive(Debug)]
struct Silent;

#[async_trait]
impl ValueWatch for Silent {
    async fn next(&mut self) -> Result<Observed, BoxError> {
        std::future::pending().await
    }
}

#[async_trait]
impl ValueStore for Deaf {
    fn namespace(&self) -> &str {
        "deaf"
    }
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>, ValuesError> {
        self.0.get(key).await
    }
    async fn set(
        &self,
        key: &str,
        value: &[u8],
        expiry: Expiry,
        condition: Condition,
    ) -> Result<Written, ValuesError> {
        self.0.set(key, value, expiry, condition).await
    }
    async fn delete(&self, key: &str, condition: Condition) -> Result<Written, ValuesError> {
        self.0.delete(key, condition).await
    }
    async fn watch(&self, _key: &str) -> Result<Box<dyn ValueWatch>, ValuesError> {
        Ok(Box::new(Silent))
    }
    fn new_owner(&self) -> String {
        self.0.new_owner()
    }
    async fn map_put(
        &self,
        map: &str,
        field: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), ValuesError> {
        self.0.map_put(map, field, value, ttl).await
    }
    async fn map_get(&self, map: &str, field: &str) -> Result<Option<Vec<u8>>, ValuesError> {
        self.0.map_get(map, field).await
    }
    async fn map_remove(&self, map: &str, field: &str) -> Result<bool, ValuesError> {
        self.0.map_remove(map, field).await
    }
    async fn map_entries(&self, map: &str) -> Result<Vec<(String, Vec<u8>)>, ValuesError> {
        self.0.map_entries(map).await
    }
    async fn map_clear(&self, map: &str) -> Result<bool, ValuesError> {
        self.0.map_clear(map).await
    }
    async fn queue_push(
        &self,
        queue: &str,
        items: &[Vec<u8>],
        max_len: u64,
        ttl: Duration,
    ) -> Result<Pushed, ValuesError> {
        self.0.queue_push(queue, items, max_len, ttl).await
    }
    async fn queue_take(
        &self,
        queue: &str,
        consumer: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery<Vec<u8>>>, ValuesError> {
        self.0.queue_take(queue, consumer, max, visibility).await
    }
    async fn queue_ack(&self, queue: &str, ids: &[String]) -> Result<u64, ValuesError> {
        self.0.queue_ack(queue, ids).await
    }
    async fn queue_len(&self, queue: &str) -> Result<u64, ValuesError> {
        self.0.queue_len(queue).await
    }
}

struct DeafFactory(Arc<Deaf>);

#[async_trait]
impl ValuesFactory for DeafFactory {
    async fn client(&self) -> SharedValues {
        SharedValues::new(self.0.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_fails_a_store_whose_watches_hear_nothing() {
    let failed = run_all(Arc::new(DeafFactory(Arc::default()))).await;
    for check in [
        "a_value_overwritten_at_once_is_still_seen",
        "a_cancelled_waiter_leaves_the_others_waiting",
    ] {
        assert!(failed.contains(&check), "{check} passed: failed {failed:?}");
    }
    assert!(
        !failed.contains(&"a_value_is_shared_with_its_version"),
        "{failed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_ends_at_its_timeout_on_tokios_clock() {
    let values = SharedValues::in_memory();
    let started = tokio::time::Instant::now();
    let waited = values
        .wait_for_value("warm-up", &"done".to_owned(), Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(waited, Waited::TimedOut(None));
    assert_eq!(started.elapsed(), Duration::from_secs(90));
}

#[tokio::test(start_paused = true)]
async fn keep_on_a_value_without_a_ttl_keeps_none_and_an_expired_value_is_gone() {
    let values = SharedValues::in_memory();
    values.set("never", &1, Expiry::Keep).await.unwrap();
    values
        .set("soon", &1, Expiry::After(Duration::from_secs(10)))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(values.get::<u32>("never").await.unwrap().is_some());
    assert_eq!(values.get::<u32>("soon").await.unwrap(), None);
    assert_eq!(
        values
            .store()
            .delete("soon", Condition::Always)
            .await
            .unwrap(),
        Written::Refused { current: None }
    );
}
