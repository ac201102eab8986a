//! Shared values' conformance suite: the behaviour every [`ValueStore`](crate::values::ValueStore)
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

use crate::conformance::{SLACK, run_checks, unique_key};
use crate::values::{
    Expiry, MAX_TTL, MAX_VALUE_BYTES, MAX_WAIT, SharedValues, ValuesError, Versioned, Waited,
    Written,
};

/// A wait long enough that only a broken implementation runs out of it.
const LONG: Duration = Duration::from_secs(30);
/// The TTL of the expiry checks.
const SHORT_TTL: Duration = Duration::from_millis(300);

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
        let value = read(values, key).await;
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

/// Runs every check against `factory` and returns the names of those that failed.
pub async fn run_all(factory: Arc<dyn ValuesFactory>) -> Vec<&'static str> {
    let mut failed = Vec::new();
    crate::values_conformance_checks!(run_checks; factory, failed;);
    failed
}

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
            a_wait_sees_a_delete_and_times_out_with_the_last_value,
            a_cancelled_waiter_leaves_the_others_waiting,
            a_value_of_another_shape_is_undecodable,
            invalid_arguments_are_rejected,
        }
    };
    ($callback:ident) => {
        $crate::values_conformance_checks! { $callback; }
    };
}
#[doc(hidden)]
pub use crate::values_conformance_checks as checks;
