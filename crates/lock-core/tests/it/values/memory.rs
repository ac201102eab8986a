//! The in-memory values: the conformance suite, and that the suite catches a store whose
//! watches hear nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::BoxError;
use lock_core::values::conformance::{Hooked, Hooks, ValuesFactory, run_all};
use lock_core::values::{
    Condition, Expiry, InMemoryValues, Observed, SharedValues, ValueStore, ValueWatch, ValuesError,
    Waited, Written,
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

/// The faults of an in-memory store: `deaf`, its watches never hear a write (waiters see only
/// their first read); `held_claims`, the third and later set-if-absent wait for `release`
/// before they are sent; `slow_rewrites`, a set over a version takes that long.
#[derive(Debug, Default)]
struct Faults {
    deaf: bool,
    held_claims: bool,
    slow_rewrites: Option<Duration>,
    claims: std::sync::atomic::AtomicUsize,
    release: tokio::sync::Notify,
    /// Rewrites (sets over a version) whose reply is lost: stored, but reported unavailable.
    lost_rewrite_replies: std::sync::atomic::AtomicUsize,
}

/// An in-memory store with `faults`.
fn faulty(faults: Faults) -> Arc<Hooked<Faults>> {
    Arc::new(Hooked {
        store: Arc::new(InMemoryValues::new()),
        hooks: faults,
    })
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
impl Hooks for Faults {
    async fn before_set(&self, condition: Condition) {
        let claim = condition == Condition::Absent;
        if claim && self.held_claims && self.claims.fetch_add(1, Ordering::SeqCst) > 1 {
            self.release.notified().await;
        }
        if let (Condition::Version(_), Some(delay)) = (condition, self.slow_rewrites) {
            tokio::time::sleep(delay).await;
        }
    }

    fn after_set(
        &self,
        condition: Condition,
        written: Result<Written, ValuesError>,
    ) -> Result<Written, ValuesError> {
        let rewrite = matches!(condition, Condition::Version(_)) && written.is_ok();
        let lose = || {
            self.lost_rewrite_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if rewrite && lose() {
            return Err(ValuesError::unavailable("set", "warm-up", "reply lost"));
        }
        written
    }

    async fn watch(
        &self,
        store: &dyn ValueStore,
        key: &str,
    ) -> Result<Box<dyn ValueWatch>, ValuesError> {
        if self.deaf {
            return Ok(Box::new(Silent));
        }
        store.watch(key).await
    }
}

struct DeafFactory(Arc<Hooked<Faults>>);

#[async_trait]
impl ValuesFactory for DeafFactory {
    async fn client(&self) -> SharedValues {
        SharedValues::new(self.0.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_fails_a_store_whose_watches_hear_nothing() {
    let deaf = faulty(Faults {
        deaf: true,
        ..Faults::default()
    });
    let failed = run_all(Arc::new(DeafFactory(deaf))).await;
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
    let store = faulty(Faults {
        held_claims: true,
        ..Faults::default()
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
    store.hooks.release.notify_one();
    assert_eq!(waiter.await.unwrap().unwrap(), Flight::Joined(42));
}

/// A runner whose progress report is still being written when its guard's renewal falls due:
/// both rewrite the guard, and neither waits on the other for ever.
#[tokio::test(start_paused = true)]
async fn a_progress_report_in_flight_when_the_renewal_falls_due_finishes() {
    use lock_core::values::{Flight, MIN_FLIGHT_TTL, Progress, WhenBusy};
    let store = faulty(Faults {
        slow_rewrites: Some(Duration::from_millis(500)),
        ..Faults::default()
    });
    let values = SharedValues::new(store);
    // Renewed every MIN_FLIGHT_TTL; the report starts 100 ms before and takes 500 ms.
    let flight = values.single_flight(
        "report",
        MIN_FLIGHT_TTL * 3,
        WhenBusy::Report,
        |progress: Progress<u32>| async move {
            tokio::time::sleep(MIN_FLIGHT_TTL - Duration::from_millis(100)).await;
            progress.report(&1).await.unwrap()
        },
    );
    let outcome = tokio::time::timeout(Duration::from_secs(60), flight)
        .await
        .expect("the runner's report and its renewal waited on each other");
    assert_eq!(outcome.unwrap(), Flight::Ran(true));
}

/// A waiter runs within 4/3 × `ttl` of a crashed runner's last renewal, not two TTLs.
#[tokio::test(start_paused = true)]
async fn a_waiter_takes_over_within_a_third_of_a_ttl_of_the_guards_expiry() {
    use lock_core::values::{Flight, Progress, WhenBusy};
    let values = SharedValues::in_memory();
    let ttl = Duration::from_secs(30);
    let guard = serde_json::json!({"state": "running", "owner": "crashed-pod/1/1"});
    values
        .set("warm-up", &guard, Expiry::After(ttl))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let waiter = tokio::spawn({
        let values = values.clone();
        async move {
            let flight = values.single_flight(
                "warm-up",
                ttl,
                WhenBusy::Wait(Duration::from_secs(600)),
                |_: Progress<u32>| async { 7_u32 },
            );
            flight.await
        }
    });
    // The runner's last renewal, after the waiter first looked; then it crashes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    values
        .set("warm-up", &guard, Expiry::After(ttl))
        .await
        .unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), Flight::Ran(7));
    let elapsed = started.elapsed();
    assert!(
        elapsed > Duration::from_secs(35) && elapsed <= Duration::from_secs(45),
        "ran after {elapsed:?}"
    );
}

/// A runner whose guard rewrite was stored but whose reply was lost keeps its guard: it finds
/// its own record and goes on, rather than reporting the guard lost. So does one whose settling
/// rewrite's reply was lost too: its next write, refused by its own record, goes on from it.
#[tokio::test(start_paused = true)]
async fn a_rewrite_whose_reply_was_lost_keeps_the_guard() {
    use lock_core::values::{Flight, MIN_FLIGHT_TTL, Progress, WhenBusy};
    // Replies lost in a row, and whether the first report was then confirmed.
    for (lost, confirmed) in [(1, true), (2, false)] {
        let store = faulty(Faults::default());
        let values = SharedValues::new(store.clone());
        let flight = values.single_flight(
            "warm-up",
            MIN_FLIGHT_TTL * 3,
            WhenBusy::Report,
            |p: Progress<u32>| {
                let store = store.clone();
                async move {
                    store
                        .hooks
                        .lost_rewrite_replies
                        .store(lost, Ordering::SeqCst);
                    let first = p.report(&1).await;
                    let second = p.report(&2).await;
                    (first.is_ok(), second.ok())
                }
            },
        );
        let ran = Flight::Ran((confirmed, Some(true)));
        assert_eq!(flight.await.unwrap(), ran, "{lost} replies lost");
    }
}

/// An outcome the store refuses (too large) reaches the runner, and its guard is deleted: the
/// next caller runs at once rather than hear of a run that has ended.
#[tokio::test(start_paused = true)]
async fn an_outcome_too_large_to_publish_frees_the_guard() {
    use lock_core::values::{Flight, MIN_FLIGHT_TTL, Progress, WhenBusy};
    let values = SharedValues::in_memory();
    let ttl = MIN_FLIGHT_TTL * 3;
    let large = "x".repeat(lock_core::values::MAX_VALUE_BYTES);
    let ran = values
        .single_flight("report", ttl, WhenBusy::Report, |_: Progress<u32>| async {
            large.clone()
        })
        .await
        .unwrap();
    assert_eq!(ran, Flight::Ran(large));
    let next = values
        .single_flight("report", ttl, WhenBusy::Report, |_: Progress<u32>| async {
            "small".to_owned()
        })
        .await
        .unwrap();
    assert_eq!(next, Flight::Ran("small".to_owned()));
}

/// A progress report the store refuses (too large) is an error to the runner and is not kept:
/// the renewals that follow carry the last report stored, and the guard holds.
#[tokio::test(start_paused = true)]
async fn a_refused_progress_report_does_not_stop_the_renewals() {
    use lock_core::values::{Flight, MIN_FLIGHT_TTL, Progress, WhenBusy};
    let values = SharedValues::in_memory();
    let ttl = MIN_FLIGHT_TTL * 3;
    let (ran, run) = tokio::sync::oneshot::channel();
    let runner = {
        let values = values.clone();
        tokio::spawn(async move {
            let action = move |p: Progress<String>| async move {
                p.report(&"small".to_owned()).await.unwrap();
                let big = p.report(&"p".repeat(70_000)).await;
                let _ = ran.send(big.map_err(|e| e.code()));
                // Held past several TTLs, on renewals alone.
                tokio::time::sleep(ttl * 4).await;
            };
            values
                .single_flight("warm-up", ttl, WhenBusy::Report, action)
                .await
        })
    };
    assert_eq!(run.await.unwrap(), Err("VALUES_INVALID_ARGUMENT"));
    tokio::time::sleep(ttl * 3).await;
    let other = values
        .single_flight(
            "warm-up",
            ttl,
            WhenBusy::Report,
            |_: Progress<String>| async {},
        )
        .await
        .unwrap();
    assert!(
        matches!(&other, Flight::RunningElsewhere { progress: Some(p), .. } if p == "small"),
        "{other:?}"
    );
    assert_eq!(runner.await.unwrap().unwrap(), Flight::Ran(()));
}
