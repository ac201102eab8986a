//! The in-memory values: the conformance suite, and that the suite catches a store whose
//! watches hear nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;
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

/// An in-memory store with faults: `deaf`, its watches never hear a write (waiters see only
/// their first read); `held_claims`, the third and later set-if-absent wait for `release`
/// before they are sent.
#[derive(Debug, Default)]
struct Faulty {
    inner: InMemoryValues,
    deaf: bool,
    held_claims: bool,
    claims: std::sync::atomic::AtomicUsize,
    release: tokio::sync::Notify,
}

#[derive(Debug)]
struct Silent;

#[async_trait]
impl ValueWatch for Silent {
    async fn next(&mut self) -> Result<Observed, BoxError> {
        std::future::pending().await
    }
}

#[async_trait]
impl ValueStore for Faulty {
    fn namespace(&self) -> &str {
        "faulty"
    }
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>, ValuesError> {
        self.inner.get(key).await
    }
    async fn set(
        &self,
        key: &str,
        value: &[u8],
        expiry: Expiry,
        condition: Condition,
    ) -> Result<Written, ValuesError> {
        let claim = condition == Condition::Absent;
        if claim && self.held_claims && self.claims.fetch_add(1, Ordering::SeqCst) > 1 {
            self.release.notified().await;
        }
        self.inner.set(key, value, expiry, condition).await
    }
    async fn delete(&self, key: &str, condition: Condition) -> Result<Written, ValuesError> {
        self.inner.delete(key, condition).await
    }
    async fn watch(&self, key: &str) -> Result<Box<dyn ValueWatch>, ValuesError> {
        if self.deaf {
            return Ok(Box::new(Silent));
        }
        self.inner.watch(key).await
    }
    fn new_owner(&self) -> String {
        self.inner.new_owner()
    }
    async fn map_put(
        &self,
        map: &str,
        field: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), ValuesError> {
        self.inner.map_put(map, field, value, ttl).await
    }
    async fn map_get(&self, map: &str, field: &str) -> Result<Option<Vec<u8>>, ValuesError> {
        self.inner.map_get(map, field).await
    }
    async fn map_remove(&self, map: &str, field: &str) -> Result<bool, ValuesError> {
        self.inner.map_remove(map, field).await
    }
    async fn map_entries(&self, map: &str) -> Result<Vec<(String, Vec<u8>)>, ValuesError> {
        self.inner.map_entries(map).await
    }
    async fn map_clear(&self, map: &str) -> Result<bool, ValuesError> {
        self.inner.map_clear(map).await
    }
    async fn queue_push(
        &self,
        queue: &str,
        items: &[Vec<u8>],
        max_len: u64,
        ttl: Duration,
    ) -> Result<Pushed, ValuesError> {
        self.inner.queue_push(queue, items, max_len, ttl).await
    }
    async fn queue_take(
        &self,
        queue: &str,
        consumer: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery<Vec<u8>>>, ValuesError> {
        self.inner
            .queue_take(queue, consumer, max, visibility)
            .await
    }
    async fn queue_ack(&self, queue: &str, ids: &[String]) -> Result<u64, ValuesError> {
        self.inner.queue_ack(queue, ids).await
    }
    async fn queue_len(&self, queue: &str) -> Result<u64, ValuesError> {
        self.inner.queue_len(queue).await
    }
}

struct DeafFactory(Arc<Faulty>);

#[async_trait]
impl ValuesFactory for DeafFactory {
    async fn client(&self) -> SharedValues {
        SharedValues::new(self.0.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_fails_a_store_whose_watches_hear_nothing() {
    let deaf = Faulty {
        deaf: true,
        ..Faulty::default()
    };
    let failed = run_all(Arc::new(DeafFactory(Arc::new(deaf)))).await;
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

/// A runner that finishes between a waiter's last look and its next claim: the claim
/// succeeds (the guard is gone), yet the waiter gets the runner's outcome rather than running
/// the action a second time.
#[tokio::test(start_paused = true)]
async fn a_waiter_that_claims_just_after_the_runner_finished_joins_it() {
    use lock_core::values::{Flight, MIN_FLIGHT_TTL, Progress, WhenBusy};
    let store = Arc::new(Faulty {
        held_claims: true,
        ..Faulty::default()
    });
    let values = SharedValues::new(store.clone());
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn({
        let values = values.clone();
        async move {
            let flight = values.single_flight(
                "warm-up",
                MIN_FLIGHT_TTL * 3,
                WhenBusy::Report,
                |_: Progress<u32>| async {
                    let _ = finished.await;
                    42_u32
                },
            );
            flight.await
        }
    });
    tokio::task::yield_now().await;
    let waiter = tokio::spawn({
        let values = values.clone();
        async move {
            let flight = values.single_flight(
                "warm-up",
                MIN_FLIGHT_TTL,
                WhenBusy::Wait(Duration::from_secs(60)),
                |_: Progress<u32>| async { 7_u32 },
            );
            flight.await
        }
    });
    // The waiter's look-again window ends and its second claim is held; the runner finishes.
    tokio::time::sleep(MIN_FLIGHT_TTL * 2).await;
    finish.send(()).unwrap();
    assert_eq!(runner.await.unwrap().unwrap(), Flight::Ran(42));
    store.release.notify_one();
    assert_eq!(waiter.await.unwrap().unwrap(), Flight::Joined(42));
}
