//! Shared values' conformance suite: the behaviour every [`ValueStore`]
//! backend shows (feature `conformance`).
//!
//! Implement [`ValuesFactory`] for a backend, then expand
//! `lock_core::conformance_tests!(values, …)` or call [`run_all`], as the
//! [harness](crate::conformance) describes. Checks wait on events with generous deadlines.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod hooked;

pub use hooked::{Hooked, Hooks};

use crate::BoxError;
use crate::conformance::{SLACK, unique_key};
use crate::values::{
    Condition, Delivery, Expiry, Flight, MAX_TTL, MAX_VALUE_BYTES, MAX_WAIT, MIN_FLIGHT_TTL,
    Observed, Progress, Queue, SharedValues, Taken, TtlMap, ValueStore, ValueWatch, ValuesError,
    Versioned, Waited, WhenBusy, Written,
};

/// A wait long enough that only a broken implementation runs out of it.
const LONG: Duration = Duration::from_secs(30);
/// The TTL of the expiry checks: long enough that no check's next command comes after it on
/// a loaded machine.
const SHORT_TTL: Duration = Duration::from_secs(1);

/// Builds clients of one shared backend for the suite.
#[async_trait]
pub trait ValuesFactory: Send + Sync + 'static {
    /// A new client of the shared backend, on connections of its own, as another process would
    /// have.
    async fn client(&self) -> SharedValues;
}

async fn read(values: &SharedValues, key: &str) -> Option<Versioned<String>> {
    values.get(key).await.expect("the read is confirmed")
}

async fn set(values: &SharedValues, key: &str, value: &str, expiry: Expiry) -> u64 {
    values
        .set(key, value, expiry)
        .await
        .expect("the write is confirmed")
}

/// Reads `key` until it is absent, failing after [`SLACK`] plus `within`.
async fn read_until_absent(values: &SharedValues, key: &str, within: Duration) {
    let deadline = Instant::now() + within + SLACK;
    loop {
        let value = values
            .get::<serde_json::Value>(key)
            .await
            .expect("the read is confirmed");
        if value.is_none() {
            return;
        }
        assert!(Instant::now() < deadline, "`{key}` still reads {value:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A waiter on `key` for `until`, spawned, and returned once its watch is live: the writer
/// writes a probe until the waiter's predicate is called for something other than its first
/// read (a write it observed, or a read after its watch was confirmed). Probes never satisfy it.
async fn listening_waiter(
    waiter: SharedValues,
    writer: &SharedValues,
    key: &str,
    until: impl Fn(Option<&Versioned<String>>) -> bool + Send + 'static,
) -> JoinHandle<Result<Waited<String>, ValuesError>> {
    let (listening, mut heard) = mpsc::unbounded_channel();
    let task = tokio::spawn({
        let key = key.to_owned();
        async move {
            let mut calls = 0;
            waiter
                .wait_for(&key, LONG, move |value: Option<&Versioned<String>>| {
                    calls += 1;
                    if calls > 1 {
                        let _ = listening.send(());
                    }
                    value.is_none_or(|v| v.value != "probe") && until(value)
                })
                .await
        }
    });
    let deadline = Instant::now() + SLACK;
    loop {
        set(writer, key, "probe", Expiry::After(LONG)).await;
        if tokio::time::timeout(Duration::from_millis(100), heard.recv())
            .await
            .is_ok()
        {
            return task;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter on `{key}` never listened"
        );
    }
}

async fn met(task: JoinHandle<Result<Waited<String>, ValuesError>>) -> Option<Versioned<String>> {
    let waited = tokio::time::timeout(SLACK, task)
        .await
        .expect("the waiter returned")
        .expect("the waiter did not panic")
        .expect("the wait is confirmed");
    match waited {
        Waited::Met(value) => value,
        Waited::TimedOut(value) => panic!("the wait timed out at {value:?}"),
    }
}

/// A value set by one client is read by another with the version of its write, and every write
/// gets a higher version.
pub async fn a_value_is_shared_with_its_version(factory: &dyn ValuesFactory) {
    let key = unique_key("shared");
    let (a, b) = (factory.client().await, factory.client().await);
    assert_eq!(read(&b, &key).await, None);
    let first = set(&a, &key, "one", Expiry::After(LONG)).await;
    assert_eq!(
        read(&b, &key).await,
        Some(Versioned {
            value: "one".to_owned(),
            version: first
        })
    );
    let second = set(&b, &key, "two", Expiry::After(LONG)).await;
    assert!(second > first, "{second} after {first}");
    assert_eq!(
        read(&a, &key).await.map(|v| v.value).as_deref(),
        Some("two")
    );
}

/// `After` sets a new TTL, `Keep` keeps the one the value had, `Never` removes it; an expired
/// value is never read.
pub async fn each_write_says_what_happens_to_the_ttl(factory: &dyn ValuesFactory) {
    let values = factory.client().await;
    let [expiring, kept, persisted, later] =
        ["expiring", "kept", "persisted", "later"].map(unique_key);
    for key in [&expiring, &kept, &persisted] {
        set(&values, key, "v1", Expiry::After(SHORT_TTL)).await;
    }
    set(&values, &kept, "v2", Expiry::Keep).await;
    set(&values, &persisted, "v2", Expiry::Never).await;
    set(&values, &later, "v1", Expiry::After(SHORT_TTL * 2)).await;
    for key in [&expiring, &kept] {
        read_until_absent(&values, key, SHORT_TTL).await;
    }
    read_until_absent(&values, &later, SHORT_TTL * 2).await;
    let persisted = read(&values, &persisted).await;
    assert_eq!(persisted.map(|v| v.value).as_deref(), Some("v2"));
}

/// A delete is a write with a version, and a value stored after a delete or an expiry gets a
/// version above the one before.
pub async fn versions_stay_above_deleted_and_expired_values(factory: &dyn ValuesFactory) {
    let key = unique_key("versions");
    let values = factory.client().await;
    let set_version = set(&values, &key, "one", Expiry::After(LONG)).await;
    let Written::Stored { version: deleted } =
        values.compare_and_delete(&key, set_version).await.unwrap()
    else {
        panic!("the delete of the current version was refused");
    };
    assert!(deleted > set_version, "{deleted} after {set_version}");
    assert!(
        !values.delete(&key).await.unwrap(),
        "deleted an absent value"
    );
    let expiring = set(&values, &key, "two", Expiry::After(SHORT_TTL)).await;
    assert!(expiring > deleted, "{expiring} after {deleted}");
    read_until_absent(&values, &key, SHORT_TTL).await;
    let after_expiry = set(&values, &key, "three", Expiry::After(LONG)).await;
    assert!(after_expiry > expiring, "{after_expiry} after {expiring}");
}

/// Of concurrent `set_if_absent` calls from separate clients exactly one stores, and its value
/// is the one read.
pub async fn set_if_absent_stores_once_among_concurrent_writers(factory: &dyn ValuesFactory) {
    let key = unique_key("absent");
    let mut writers = Vec::new();
    for writer in 0..8 {
        let (values, key) = (factory.client().await, key.clone());
        writers.push(tokio::spawn(async move {
            let stored = values
                .set_if_absent(&key, &format!("writer-{writer}"), Expiry::After(LONG))
                .await
                .unwrap();
            stored.map(|version| (writer, version))
        }));
    }
    let mut stored = Vec::new();
    for writer in writers {
        stored.extend(writer.await.unwrap());
    }
    let [(writer, version)] = stored[..] else {
        panic!("{} writers stored: {stored:?}", stored.len());
    };
    let read = read(&factory.client().await, &key).await.unwrap();
    assert_eq!(
        read,
        Versioned {
            value: format!("writer-{writer}"),
            version
        }
    );
}

/// `compare_and_set` and `compare_and_delete` write only over the version they name, and a
/// refusal names the current one.
pub async fn conditional_writes_compare_by_version(factory: &dyn ValuesFactory) {
    let key = unique_key("cas");
    let values = factory.client().await;
    let created = values
        .compare_and_set(&key, None, "one", Expiry::After(LONG))
        .await
        .unwrap();
    let Written::Stored { version: first } = created else {
        panic!("a create over nothing was refused: {created:?}");
    };
    assert_eq!(
        values
            .compare_and_set(&key, None, "again", Expiry::After(LONG))
            .await
            .unwrap(),
        Written::Refused {
            current: Some(first)
        }
    );
    assert_eq!(
        values
            .compare_and_set(&key, Some(first + 1), "stale", Expiry::After(LONG))
            .await
            .unwrap(),
        Written::Refused {
            current: Some(first)
        }
    );
    let Written::Stored { version: second } = values
        .compare_and_set(&key, Some(first), "two", Expiry::Keep)
        .await
        .unwrap()
    else {
        panic!("a write over the current version was refused");
    };
    assert_eq!(
        values.compare_and_delete(&key, first).await.unwrap(),
        Written::Refused {
            current: Some(second)
        }
    );
    assert_eq!(
        read(&values, &key).await.map(|v| v.value).as_deref(),
        Some("two")
    );
    assert!(values.delete(&key).await.unwrap());
    assert_eq!(
        values.compare_and_delete(&key, second).await.unwrap(),
        Written::Refused { current: None }
    );
}

/// A wait returns at once when the value already satisfies it, and on another client's write
/// otherwise.
pub async fn a_wait_returns_on_another_clients_write(factory: &dyn ValuesFactory) {
    let key = unique_key("wait");
    let (waiter, writer) = (factory.client().await, factory.client().await);
    set(&writer, &key, "ready", Expiry::After(LONG)).await;
    let started = Instant::now();
    let waited = waiter
        .wait_for_value(&key, &"ready".to_owned(), LONG)
        .await
        .unwrap();
    assert!(waited.is_met() && started.elapsed() < SLACK, "{waited:?}");

    let other = unique_key("wait-write");
    let task = tokio::spawn({
        let (waiter, other) = (waiter.clone(), other.clone());
        async move {
            waiter
                .wait_for_value(&other, &"done".to_owned(), LONG)
                .await
        }
    });
    set(&writer, &other, "done", Expiry::After(LONG)).await;
    // Written before or after the waiter's watch started: either way it is seen.
    assert_eq!(met(task).await.map(|v| v.value).as_deref(), Some("done"));
}

/// A value written and overwritten at once is still seen by a waiter for it.
pub async fn a_value_overwritten_at_once_is_still_seen(factory: &dyn ValuesFactory) {
    let key = unique_key("overwritten");
    let (waiter, writer) = (factory.client().await, factory.client().await);
    let task = listening_waiter(waiter, &writer, &key, |v| v.is_some_and(|v| v.value == "A")).await;
    let a = set(&writer, &key, "A", Expiry::After(LONG)).await;
    set(&writer, &key, "B", Expiry::After(LONG)).await;
    assert_eq!(
        met(task).await,
        Some(Versioned {
            value: "A".to_owned(),
            version: a
        })
    );
}

/// A change back to an equal value is a change: `wait_for_change` compares versions.
pub async fn a_change_back_to_an_equal_value_is_a_change(factory: &dyn ValuesFactory) {
    let key = unique_key("aba");
    let (waiter, writer) = (factory.client().await, factory.client().await);
    let since = set(&writer, &key, "A", Expiry::After(LONG)).await;
    set(&writer, &key, "B", Expiry::After(LONG)).await;
    set(&writer, &key, "A", Expiry::After(LONG)).await;
    let waited = waiter
        .wait_for_change::<String>(&key, Some(since), LONG)
        .await
        .unwrap();
    let Waited::Met(Some(changed)) = waited else {
        panic!("no change seen: {waited:?}");
    };
    assert!(changed.version > since, "{changed:?} since {since}");
}

/// A write older than the version a `wait_for_change` names, heard late (a watch and the
/// reads keep no order between them), is not a change: a set, or a delete.
pub async fn a_write_heard_late_is_not_a_change(factory: &dyn ValuesFactory) {
    let key = unique_key("late");
    let writer = factory.client().await;
    set(&writer, &key, "A", Expiry::After(LONG)).await;
    let older = writer
        .store()
        .get(&key)
        .await
        .unwrap()
        .expect("A is stored");
    let deleted = match writer.store().delete(&key, Condition::Always).await {
        Ok(Written::Stored { version }) => version,
        other => panic!("A was not deleted: {other:?}"),
    };
    let since = set(&writer, &key, "B", Expiry::After(LONG)).await;
    for late in [Observed::Set(older), Observed::Deleted { version: deleted }] {
        let store = factory.client().await.store().clone();
        let waiter = SharedValues::new(Arc::new(Hooked {
            store,
            hooks: Late(late.clone()),
        }));
        let timeout = Duration::from_millis(300);
        let waited = waiter
            .wait_for_change::<String>(&key, Some(since), timeout)
            .await
            .unwrap();
        let b = Versioned {
            value: "B".to_owned(),
            version: since,
        };
        assert_eq!(waited, Waited::TimedOut(Some(b)), "heard late: {late:?}");
    }
}

/// Watches that first hear a write made before them, then what the store's watch hears.
#[derive(Debug)]
struct Late(Observed);

#[async_trait]
impl Hooks for Late {
    async fn watch(
        &self,
        store: &dyn ValueStore,
        key: &str,
    ) -> Result<Box<dyn ValueWatch>, ValuesError> {
        Ok(Box::new(LateWatch {
            late: Some(self.0.clone()),
            watch: store.watch(key).await?,
        }))
    }
}

#[derive(Debug)]
struct LateWatch {
    late: Option<Observed>,
    watch: Box<dyn ValueWatch>,
}

#[async_trait]
impl ValueWatch for LateWatch {
    async fn next(&mut self) -> Result<Observed, BoxError> {
        match self.late.take() {
            Some(late) => Ok(late),
            None => self.watch.next().await,
        }
    }
}

/// A wait for absence returns on a delete; one that is never satisfied times out with the last
/// value after its timeout.
pub async fn a_wait_sees_a_delete_and_times_out_with_the_last_value(factory: &dyn ValuesFactory) {
    let key = unique_key("delete");
    let (waiter, writer) = (factory.client().await, factory.client().await);
    set(&writer, &key, "held", Expiry::After(LONG)).await;
    let task = listening_waiter(waiter.clone(), &writer, &key, |v| v.is_none()).await;
    assert!(writer.delete(&key).await.unwrap());
    assert_eq!(met(task).await, None);

    let version = set(&writer, &key, "last", Expiry::After(LONG)).await;
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let waited = waiter
        .wait_for_value(&key, &"never".to_owned(), timeout)
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(
        waited,
        Waited::TimedOut(Some(Versioned {
            value: "last".to_owned(),
            version
        }))
    );
    assert!(
        elapsed >= timeout && elapsed < timeout + SLACK,
        "timed out after {elapsed:?}"
    );
}

/// A waiter cancelled mid-wait changes nothing for another waiter on the same key.
pub async fn a_cancelled_waiter_leaves_the_others_waiting(factory: &dyn ValuesFactory) {
    let key = unique_key("cancelled");
    let (waiter, writer) = (factory.client().await, factory.client().await);
    let kept = listening_waiter(waiter.clone(), &writer, &key, |v| {
        v.is_some_and(|v| v.value == "done")
    })
    .await;
    let cancelled = listening_waiter(waiter, &writer, &key, |v| {
        v.is_some_and(|v| v.value == "done")
    })
    .await;
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    set(&writer, &key, "done", Expiry::After(LONG)).await;
    assert_eq!(met(kept).await.map(|v| v.value).as_deref(), Some("done"));
}

/// A stored value that does not deserialize as the type asked for is an error naming it, for a
/// read and a wait alike.
pub async fn a_value_of_another_shape_is_undecodable(factory: &dyn ValuesFactory) {
    let key = unique_key("shape");
    let values = factory.client().await;
    let version = values
        .set(&key, &serde_json::json!({"step": 3}), Expiry::After(LONG))
        .await
        .unwrap();
    for error in [
        values.get::<u64>(&key).await.unwrap_err(),
        values
            .wait_for::<u64, _>(&key, LONG, |_| false)
            .await
            .unwrap_err(),
    ] {
        assert_eq!(error.code(), "VALUES_UNDECODABLE", "{error}");
        assert_eq!(error.details()["version"], version.to_string(), "{error}");
    }
}

/// Bad keys, TTLs, values and timeouts are invalid arguments, and nothing is written.
pub async fn invalid_arguments_are_rejected(factory: &dyn ValuesFactory) {
    let key = unique_key("invalid");
    let values = factory.client().await;
    let oversize = "x".repeat(MAX_VALUE_BYTES);
    let errors = [
        ("key", values.set("", "v", Expiry::Never).await.unwrap_err()),
        ("key", values.get::<String>("a\nb").await.unwrap_err()),
        (
            "ttl",
            values
                .set(&key, "v", Expiry::After(Duration::ZERO))
                .await
                .unwrap_err(),
        ),
        (
            "ttl",
            values
                .set(&key, "v", Expiry::After(MAX_TTL + Duration::from_secs(1)))
                .await
                .unwrap_err(),
        ),
        (
            "value",
            values
                .set(&key, &oversize, Expiry::Never)
                .await
                .unwrap_err(),
        ),
        (
            "timeout",
            values
                .wait_for_value(&key, &"v".to_owned(), MAX_WAIT * 2)
                .await
                .unwrap_err(),
        ),
    ];
    for (argument, error) in errors {
        assert_eq!(error.code(), "VALUES_INVALID_ARGUMENT", "{error}");
        assert_eq!(error.details()["argument"], argument, "{error}");
    }
    assert_eq!(read(&values, &key).await, None);
}

/// Watches that say when they have observed anything: from then on, such a watch hears every
/// write.
#[derive(Debug)]
struct Heard(mpsc::UnboundedSender<()>);

#[async_trait]
impl Hooks for Heard {
    async fn watch(
        &self,
        store: &dyn ValueStore,
        key: &str,
    ) -> Result<Box<dyn ValueWatch>, ValuesError> {
        Ok(Box::new(HeardWatch {
            watch: store.watch(key).await?,
            heard: self.0.clone(),
        }))
    }
}

#[derive(Debug)]
struct HeardWatch {
    watch: Box<dyn ValueWatch>,
    heard: mpsc::UnboundedSender<()>,
}

#[async_trait]
impl ValueWatch for HeardWatch {
    async fn next(&mut self) -> Result<Observed, BoxError> {
        let observed = self.watch.next().await;
        let _ = self.heard.send(());
        observed
    }
}

/// A client whose watches say when they have heard anything, and that signal.
async fn hearing(factory: &dyn ValuesFactory) -> (SharedValues, mpsc::UnboundedReceiver<()>) {
    let (heard, signal) = mpsc::unbounded_channel();
    let store = factory.client().await.store().clone();
    let hooks = Heard(heard);
    (SharedValues::new(Arc::new(Hooked { store, hooks })), signal)
}

/// A runner of one flight, driven by the check: it reports the progress it is sent, and
/// returns its outcome when told to finish.
struct Runner {
    task: JoinHandle<Result<Flight<u32, u32>, ValuesError>>,
    commands: mpsc::UnboundedSender<Option<u32>>,
    /// The owner token and whether the guard was still the runner's, per report.
    acks: mpsc::UnboundedReceiver<(String, bool)>,
}

impl Runner {
    fn start(values: SharedValues, key: &str, ttl: Duration, outcome: u32) -> Runner {
        let (commands, mut received) = mpsc::unbounded_channel::<Option<u32>>();
        let (acked, acks) = mpsc::unbounded_channel();
        let key = key.to_owned();
        let task = tokio::spawn(async move {
            values
                .single_flight(&key, ttl, WhenBusy::Report, |p: Progress<u32>| async move {
                    while let Some(Some(progress)) = received.recv().await {
                        let ours = p.report(&progress).await.expect("the report is confirmed");
                        let _ = acked.send((p.owner().to_owned(), ours));
                    }
                    outcome
                })
                .await
        });
        Runner {
            task,
            commands,
            acks,
        }
    }

    /// Has the runner report `progress`: its owner token, and whether the guard is its own.
    async fn report(&mut self, progress: u32) -> (String, bool) {
        let _ = self.commands.send(Some(progress));
        tokio::time::timeout(SLACK, self.acks.recv())
            .await
            .expect("the runner reported")
            .expect("the runner runs")
    }

    async fn finish(self) -> Flight<u32, u32> {
        let _ = self.commands.send(None);
        flight(self.task).await
    }
}

async fn flight(task: JoinHandle<Result<Flight<u32, u32>, ValuesError>>) -> Flight<u32, u32> {
    tokio::time::timeout(SLACK + LONG, task)
        .await
        .expect("the flight ended")
        .expect("the flight did not panic")
        .expect("the flight is confirmed")
}

async fn must_not_run(values: &SharedValues, key: &str, when_busy: WhenBusy) -> Flight<u32, u32> {
    values
        .single_flight(key, MIN_FLIGHT_TTL, when_busy, |_: Progress<u32>| async {
            panic!("a second caller ran the action")
        })
        .await
        .expect("the flight is confirmed")
}

async fn runs(values: &SharedValues, key: &str, when_busy: WhenBusy) -> Flight<u32, u32> {
    values
        .single_flight(key, MIN_FLIGHT_TTL, when_busy, |_: Progress<u32>| async {
            7
        })
        .await
        .expect("the flight is confirmed")
}

/// One caller runs; another, on another client, sees it running with its owner and progress
/// and does not run; once the runner is done, the next caller runs anew.
pub async fn one_caller_runs_and_the_others_see_its_progress(factory: &dyn ValuesFactory) {
    let key = unique_key("flight");
    let (a, b) = (factory.client().await, factory.client().await);
    let mut runner = Runner::start(a, &key, MIN_FLIGHT_TTL * 3, 42);
    let (owner, _) = runner.report(40).await;
    assert_eq!(
        must_not_run(&b, &key, WhenBusy::Report).await,
        Flight::RunningElsewhere {
            owner,
            progress: Some(40)
        }
    );
    assert_eq!(runner.finish().await, Flight::Ran(42));
    assert_eq!(runs(&b, &key, WhenBusy::Report).await, Flight::Ran(7));
}

/// The guard outlives its TTL while the runner lives: it is renewed.
pub async fn a_living_runners_guard_is_renewed(factory: &dyn ValuesFactory) {
    let key = unique_key("renewed");
    let (a, b) = (factory.client().await, factory.client().await);
    let ttl = MIN_FLIGHT_TTL * 2;
    let mut runner = Runner::start(a, &key, ttl, 2);
    let (owner, _) = runner.report(1).await;
    // The work itself takes two TTLs.
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(
        must_not_run(&b, &key, WhenBusy::Report).await,
        Flight::RunningElsewhere {
            owner,
            progress: Some(1)
        }
    );
    assert_eq!(runner.finish().await, Flight::Ran(2));
}

/// Callers that wait get the runner's outcome without running the action, and a waiter
/// cancelled mid-wait changes nothing for the others.
pub async fn waiters_join_the_runners_outcome(factory: &dyn ValuesFactory) {
    let key = unique_key("join");
    let mut runner = Runner::start(factory.client().await, &key, MIN_FLIGHT_TTL * 3, 42);
    // Acknowledged from inside the action: the runner holds the guard before any waiter comes.
    runner.report(0).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let (waiter, mut heard) = hearing(factory).await;
        let key = key.clone();
        waiters.push(tokio::spawn(async move {
            must_not_run(&waiter, &key, WhenBusy::Wait(LONG)).await
        }));
        // Progress reports are writes: report until the waiter's watch has heard one.
        let deadline = Instant::now() + SLACK;
        while tokio::time::timeout(Duration::from_millis(100), heard.recv())
            .await
            .is_err()
        {
            runner.report(0).await;
            assert!(Instant::now() < deadline, "the waiter never listened");
        }
    }
    let cancelled = waiters.remove(0);
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    assert_eq!(runner.finish().await, Flight::Ran(42));
    for waiter in waiters {
        let joined = tokio::time::timeout(LONG, waiter).await.unwrap().unwrap();
        assert_eq!(joined, Flight::Joined(42));
    }
}

/// The guard of a runner that crashed (it is no longer renewed) expires at its TTL: a caller
/// sees its last progress until then, and a waiting caller runs the action after it.
pub async fn a_crashed_runners_guard_expires_and_a_waiter_runs(factory: &dyn ValuesFactory) {
    let key = unique_key("crashed");
    let values = factory.client().await;
    let crashed =
        serde_json::json!({"state": "running", "owner": "crashed-pod/1/1", "progress": 5});
    values
        .set(&key, &crashed, Expiry::After(MIN_FLIGHT_TTL))
        .await
        .unwrap();
    assert_eq!(
        must_not_run(&values, &key, WhenBusy::Report).await,
        Flight::RunningElsewhere {
            owner: "crashed-pod/1/1".to_owned(),
            progress: Some(5)
        }
    );
    let started = Instant::now();
    assert_eq!(
        runs(&values, &key, WhenBusy::Wait(LONG)).await,
        Flight::Ran(7)
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed < MIN_FLIGHT_TTL * 4 / 3 + SLACK,
        "ran after {elapsed:?}"
    );
}

/// A cancelled runner deletes its guard, so the next caller runs at once.
pub async fn a_cancelled_runner_clears_its_guard(factory: &dyn ValuesFactory) {
    let key = unique_key("cancelled-runner");
    let values = factory.client().await;
    let mut runner = Runner::start(values.clone(), &key, LONG, 1);
    runner.report(1).await;
    runner.task.abort();
    read_until_absent(&values, &key, Duration::ZERO).await;
    assert_eq!(runs(&values, &key, WhenBusy::Report).await, Flight::Ran(7));
}

/// A runner whose guard was taken over (deleted by hand, then claimed by another) learns it from
/// its next report, and its completion leaves the new runner's guard alone.
pub async fn a_runner_never_writes_over_a_guard_taken_over(factory: &dyn ValuesFactory) {
    let key = unique_key("taken-over");
    let (a, b) = (factory.client().await, factory.client().await);
    let mut first = Runner::start(a, &key, LONG, 1);
    first.report(1).await;
    assert!(b.delete(&key).await.unwrap());
    let mut second = Runner::start(b.clone(), &key, LONG, 2);
    let (second_owner, _) = second.report(2).await;
    let (_, ours) = first.report(3).await;
    assert!(
        !ours,
        "the first runner's report went over the second's guard"
    );
    assert_eq!(first.finish().await, Flight::Ran(1));
    assert_eq!(
        must_not_run(&b, &key, WhenBusy::Report).await,
        Flight::RunningElsewhere {
            owner: second_owner,
            progress: Some(2)
        }
    );
    assert_eq!(second.finish().await, Flight::Ran(2));
}

/// Reads `field` of `map` until it is absent, failing after [`SLACK`] plus `within`.
async fn field_until_absent(map: &TtlMap<u32>, field: &str, within: Duration) {
    let deadline = Instant::now() + within + SLACK;
    while map
        .get(field)
        .await
        .expect("the read is confirmed")
        .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "`{field}` of `{}` did not expire",
            map.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each field lives for its own TTL, seen by every client; a re-put replaces value and TTL.
pub async fn map_fields_live_for_their_own_ttl(factory: &dyn ValuesFactory) {
    let name = unique_key("map");
    let (a, b) = (
        factory.client().await.map::<u32>(&name),
        factory.client().await.map::<u32>(&name),
    );
    a.put("renewed", &1, SHORT_TTL).await.unwrap();
    a.put("long", &2, LONG).await.unwrap();
    a.put("short", &3, SHORT_TTL).await.unwrap();
    assert_eq!(b.get("short").await.unwrap(), Some(3));
    b.put("renewed", &10, LONG).await.unwrap();
    field_until_absent(&a, "short", SHORT_TTL).await;
    // Past the first TTL: the re-put field lives on with its new value.
    assert_eq!(
        a.entries().await.unwrap(),
        [("long".to_owned(), 2), ("renewed".to_owned(), 10)]
    );
}

/// An expired field is never returned, by `get` or `entries`, and a map whose fields have all
/// expired is empty.
pub async fn an_expired_field_is_never_returned(factory: &dyn ValuesFactory) {
    let name = unique_key("expired");
    let map = factory.client().await.map::<u32>(&name);
    // `b` first: its deadline is passed once the later `a` has expired.
    map.put("b", &2, SHORT_TTL).await.unwrap();
    map.put("a", &1, SHORT_TTL).await.unwrap();
    field_until_absent(&map, "a", SHORT_TTL).await;
    assert_eq!(map.get("b").await.unwrap(), None);
    assert_eq!(map.entries().await.unwrap(), []);
    assert!(
        !map.clear().await.unwrap(),
        "a map of expired fields had some"
    );
}

/// `remove` says whether a live value went, and `clear` removes every field at once.
pub async fn remove_and_clear_empty_the_map(factory: &dyn ValuesFactory) {
    let name = unique_key("clear");
    let map = factory.client().await.map::<u32>(&name);
    for (field, value) in [("a", 1), ("b", 2), ("c", 3)] {
        map.put(field, &value, LONG).await.unwrap();
    }
    assert!(map.remove("b").await.unwrap());
    assert!(!map.remove("b").await.unwrap());
    assert_eq!(map.entries().await.unwrap().len(), 2);
    assert!(map.clear().await.unwrap());
    assert_eq!(map.entries().await.unwrap(), []);
    assert_eq!(map.get("a").await.unwrap(), None);
    assert!(!map.clear().await.unwrap());
}

/// Bad map names, fields and TTLs are invalid arguments; a field of another shape is
/// undecodable, naming map and field.
pub async fn map_arguments_and_shapes_are_checked(factory: &dyn ValuesFactory) {
    let name = unique_key("map-args");
    let values = factory.client().await;
    let map = values.map::<u32>(&name);
    let errors = [
        ("field", map.put("", &1, LONG).await.unwrap_err()),
        ("field", map.get("a\nb").await.unwrap_err()),
        ("map", values.map::<u32>("").entries().await.unwrap_err()),
        ("ttl", map.put("a", &1, Duration::ZERO).await.unwrap_err()),
    ];
    for (argument, error) in errors {
        assert_eq!(error.code(), "VALUES_INVALID_ARGUMENT", "{error}");
        assert_eq!(error.details()["argument"], argument, "{error}");
    }
    values
        .map::<serde_json::Value>(&name)
        .put("shape", &serde_json::json!({"step": 3}), LONG)
        .await
        .unwrap();
    let error = map.get("shape").await.unwrap_err();
    assert_eq!(error.code(), "VALUES_UNDECODABLE", "{error}");
    assert_eq!(error.details()["key"], format!("{name}[shape]"));
}

/// Takes from `queue` until `want` items came back or [`SLACK`] passed.
async fn take_until(queue: &Queue<u32>, want: usize, visibility: Duration) -> Vec<Delivery<u32>> {
    let deadline = Instant::now() + visibility + SLACK;
    let mut taken = Vec::new();
    while taken.len() < want {
        taken.extend(
            queue
                .take(100, visibility)
                .await
                .expect("the take is confirmed")
                .items,
        );
        assert!(
            Instant::now() < deadline,
            "only {} of {want} items came back",
            taken.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    taken
}

/// Items pushed by one client are taken by others in push order, each once, in bounded takes;
/// acknowledged items are gone.
pub async fn queue_items_are_taken_in_order_once(factory: &dyn ValuesFactory) {
    let name = unique_key("queue");
    let queue = |values: SharedValues| values.queue::<u32>(&name);
    let (a, b, c) = (
        queue(factory.client().await),
        queue(factory.client().await),
        queue(factory.client().await),
    );
    a.push(&1).await.unwrap();
    a.push_all(&[2, 3, 4, 5]).await.unwrap();
    assert_eq!(a.len().await.unwrap(), 5);
    let first = b.take(3, LONG).await.unwrap();
    let second = c.take(10, LONG).await.unwrap();
    let items = |taken: &Taken<u32>| {
        taken
            .items
            .iter()
            .map(|d| (d.item, d.deliveries))
            .collect::<Vec<_>>()
    };
    assert_eq!(items(&first), [(1, 1), (2, 1), (3, 1)]);
    assert_eq!(items(&second), [(4, 1), (5, 1)]);
    assert_eq!(a.take(10, LONG).await.unwrap().items, []);
    assert_eq!(
        a.len().await.unwrap(),
        5,
        "taken items count until acknowledged"
    );
    assert_eq!(b.ack(&first.ids()).await.unwrap(), 3);
    assert_eq!(c.ack(&second.ids()).await.unwrap(), 2);
    assert_eq!(
        c.ack(&second.ids()).await.unwrap(),
        0,
        "an acknowledgement is idempotent"
    );
    assert_eq!(a.len().await.unwrap(), 0);
}

/// An item taken and not acknowledged comes back to another consumer after the visibility
/// timeout of that consumer's take (not the first take's), with its delivery count raised; the
/// first consumer's late acknowledgement then counts for nothing twice.
pub async fn an_unacknowledged_item_comes_back(factory: &dyn ValuesFactory) {
    let name = unique_key("redelivered");
    let (a, b) = (
        factory.client().await.queue::<u32>(&name),
        factory.client().await.queue::<u32>(&name),
    );
    a.push_all(&[7, 8]).await.unwrap();
    let crashed = a.take(10, LONG).await.unwrap();
    assert_eq!(crashed.items.len(), 2);
    assert_eq!(
        b.take(10, SHORT_TTL).await.unwrap().items,
        [],
        "hidden while visible elsewhere"
    );
    let again = take_until(&b, 2, SHORT_TTL).await;
    assert_eq!(
        again
            .iter()
            .map(|d| (d.item, d.deliveries))
            .collect::<Vec<_>>(),
        [(7, 2), (8, 2)]
    );
    let ids: Vec<String> = again.iter().map(|d| d.id.clone()).collect();
    assert_eq!(ids, crashed.ids(), "the same items, not copies");
    assert_eq!(b.ack(&ids).await.unwrap(), 2);
    assert_eq!(a.ack(&crashed.ids()).await.unwrap(), 0);
    assert_eq!(a.len().await.unwrap(), 0);
}

/// An expired item behind more taken ones than a take looks at in one step is still taken
/// again: a take of one item does not come back empty.
pub async fn an_expired_item_behind_taken_ones_comes_back(factory: &dyn ValuesFactory) {
    let name = unique_key("behind");
    let queue = factory.client().await.queue::<u32>(&name);
    queue
        .push_all(&(0..12).collect::<Vec<u32>>())
        .await
        .unwrap();
    assert_eq!(queue.take(12, SHORT_TTL).await.unwrap().items.len(), 12);
    // The first ten, taken again once expired, stand before the last two.
    let deadline = Instant::now() + SHORT_TTL + SLACK;
    let first_ten = loop {
        let taken = queue.take(10, SHORT_TTL).await.unwrap();
        if !taken.items.is_empty() {
            break taken;
        }
        assert!(Instant::now() < deadline, "nothing came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let items = |taken: &Taken<u32>| taken.items.iter().map(|d| d.item).collect::<Vec<_>>();
    assert_eq!(items(&first_ten), (0..10).collect::<Vec<_>>());
    let next = queue.take(1, SHORT_TTL).await.unwrap();
    assert_eq!(items(&next), [10], "the oldest expired item behind them");
    assert_eq!(next.items[0].deliveries, 2);
}

/// A push past the bound is refused whole, and the queue keeps what it had.
pub async fn a_full_queue_refuses_a_push_whole(factory: &dyn ValuesFactory) {
    let name = unique_key("full");
    let queue = factory
        .client()
        .await
        .queue::<u32>(&name)
        .max_len(3)
        .unwrap();
    queue.push_all(&[1, 2]).await.unwrap();
    let error = queue.push_all(&[3, 4, 5, 6]).await.unwrap_err();
    assert_eq!(
        error.code(),
        "VALUES_INVALID_ARGUMENT",
        "more than it ever holds: {error}"
    );
    assert_eq!(error.details()["argument"], "items", "{error}");
    assert!(error.to_string().contains("at most 3"), "{error}");
    let error = queue.push_all(&[3, 4]).await.unwrap_err();
    assert_eq!(error.code(), "VALUES_QUEUE_FULL", "{error}");
    assert_eq!(error.http_status(), 503);
    assert_eq!(error.details()["len"], "2");
    assert_eq!(queue.len().await.unwrap(), 2);
    queue.push(&3).await.unwrap();
    let taken = queue.take(10, LONG).await.unwrap();
    assert_eq!(
        taken.items.iter().map(|d| d.item).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

/// An item that does not deserialize is taken and reported with its JSON, not dropped; bad
/// arguments, an id no take gave among them, are refused.
pub async fn queue_items_of_another_shape_are_reported(factory: &dyn ValuesFactory) {
    let name = unique_key("shape");
    let values = factory.client().await;
    values
        .queue::<serde_json::Value>(&name)
        .push(&serde_json::json!({"v": 2}))
        .await
        .unwrap();
    let queue = values.queue::<u32>(&name);
    queue.push(&5).await.unwrap();
    let taken = queue.take(10, LONG).await.unwrap();
    assert_eq!(taken.items.iter().map(|d| d.item).collect::<Vec<_>>(), [5]);
    assert_eq!(taken.undecodable.len(), 1);
    assert_eq!(taken.undecodable[0].item, br#"{"v":2}"#);
    assert_eq!(queue.ack(&taken.ids()).await.unwrap(), 2);
    queue.push(&6).await.unwrap();
    let pending = queue.take(1, LONG).await.unwrap().ids();
    let error = queue
        .ack(&[pending[0].clone(), "not-an-id".to_owned()])
        .await
        .unwrap_err();
    assert_eq!(error.code(), "VALUES_INVALID_ARGUMENT", "{error}");
    assert_eq!(error.details()["argument"], "id", "{error}");
    let untaken = queue.push(&7).await.unwrap();
    let error = queue
        .ack(&[pending[0].clone(), untaken.clone()])
        .await
        .unwrap_err();
    assert_eq!(error.code(), "VALUES_INVALID_ARGUMENT", "{error}");
    assert!(error.to_string().contains(&untaken), "{error}");
    assert_eq!(
        queue.ack(&pending).await.unwrap(),
        1,
        "the refused calls acknowledged nothing"
    );
    let taken = queue.take(10, LONG).await.unwrap();
    assert_eq!(
        (
            taken.ids(),
            taken.items.iter().map(|d| d.item).collect::<Vec<_>>()
        ),
        (vec![untaken], vec![7]),
        "an item acknowledged before any take gave it is still delivered"
    );
    for (argument, error) in [
        ("max", queue.take(0, LONG).await.unwrap_err()),
        (
            "visibility",
            queue.take(1, Duration::ZERO).await.unwrap_err(),
        ),
        (
            "max_len",
            values.queue::<u32>(&name).max_len(0).unwrap_err(),
        ),
        ("queue", values.queue::<u32>("").push(&1).await.unwrap_err()),
        (
            "items",
            queue
                .push_all(&vec![1; crate::values::MAX_PUSH + 1])
                .await
                .unwrap_err(),
        ),
        (
            "items",
            values
                .queue::<String>(&name)
                .push_all(&vec!["x".repeat(60_000); 150])
                .await
                .unwrap_err(),
        ),
        (
            "ids",
            queue
                .ack(&vec!["1-0".to_owned(); crate::values::MAX_PUSH + 1])
                .await
                .unwrap_err(),
        ),
    ] {
        assert_eq!(error.code(), "VALUES_INVALID_ARGUMENT", "{error}");
        assert_eq!(error.details()["argument"], argument, "{error}");
    }
}

crate::conformance::run_all!(ValuesFactory, values_conformance_checks);

/// Shared values' checks, declared once: expands to `$callback! { $($prefix)* <every check>, }`.
#[doc(hidden)]
#[macro_export]
macro_rules! values_conformance_checks {
    ($callback:path; $($prefix:tt)*) => {
        $callback! { $($prefix)*
            a_value_is_shared_with_its_version,
            each_write_says_what_happens_to_the_ttl,
            versions_stay_above_deleted_and_expired_values,
            set_if_absent_stores_once_among_concurrent_writers,
            conditional_writes_compare_by_version,
            a_wait_returns_on_another_clients_write,
            a_value_overwritten_at_once_is_still_seen,
            a_change_back_to_an_equal_value_is_a_change,
            a_write_heard_late_is_not_a_change,
            a_wait_sees_a_delete_and_times_out_with_the_last_value,
            a_cancelled_waiter_leaves_the_others_waiting,
            a_value_of_another_shape_is_undecodable,
            invalid_arguments_are_rejected,
            one_caller_runs_and_the_others_see_its_progress,
            a_living_runners_guard_is_renewed,
            waiters_join_the_runners_outcome,
            a_crashed_runners_guard_expires_and_a_waiter_runs,
            a_cancelled_runner_clears_its_guard,
            a_runner_never_writes_over_a_guard_taken_over,
            map_fields_live_for_their_own_ttl,
            an_expired_field_is_never_returned,
            remove_and_clear_empty_the_map,
            map_arguments_and_shapes_are_checked,
            queue_items_are_taken_in_order_once,
            an_unacknowledged_item_comes_back,
            an_expired_item_behind_taken_ones_comes_back,
            a_full_queue_refuses_a_push_whole,
            queue_items_of_another_shape_are_reported,
        }
    };
    ($callback:ident) => {
        $crate::values_conformance_checks! { $callback; }
    };
}
#[doc(hidden)]
pub use crate::values_conformance_checks as checks;
