//! [`SharedValues`]: typed values over a [`ValueStore`], and waiting on them.

use std::any::type_name;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::values::error::ValuesError;
use crate::values::memory::InMemoryValues;
use crate::values::port::{
    Condition, Expiry, Observed, ValueStore, ValueWatch, Versioned, Waited, Written,
};
use crate::values::telemetry;
use crate::{check_duration, validate_key};

/// The largest serialized value accepted: 64 KiB. Every write is published whole to every
/// watcher, so values are meant to be small.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The longest TTL of [`Expiry::After`]: 30 days (the shortest is 1 ms).
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// How soon a waiter's failed read is sent again.
const READ_RETRY: Duration = Duration::from_millis(100);
/// The longest wait of [`SharedValues::wait_for`]: 1 h.
pub const MAX_WAIT: Duration = crate::lock::MAX_WAIT;

/// Typed shared values: serde values with a TTL and a version, shared by every replica of the
/// backend, and waiting for one to satisfy a predicate. Cheap to clone.
///
/// # Contract
/// - Keys are 1 to 512 bytes of UTF-8 without control characters; values serialize as JSON to
///   at most [`MAX_VALUE_BYTES`]; TTLs are 1 ms to [`MAX_TTL`]; waits 0 to [`MAX_WAIT`]. Anything
///   else is [`ValuesError::InvalidArgument`], and nothing is sent.
/// - A backend failure is [`ValuesError::Unavailable`] (HTTP 503): never a stale value reported
///   as current.
/// - A stored value that does not deserialize as the type asked for is
///   [`ValuesError::Undecodable`], never a miss.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::values::{Expiry, SharedValues, Waited};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::values::ValuesError> {
/// let values = SharedValues::in_memory();
/// let version = values.set("catalog:warm-up", &"loading", Expiry::After(Duration::from_secs(60))).await?;
/// let read = values.get::<String>("catalog:warm-up").await?.unwrap();
/// assert_eq!((read.value.as_str(), read.version), ("loading", version));
///
/// // Another replica finishes the warm-up while this one waits for it.
/// let other = values.clone();
/// tokio::spawn(async move { other.set("catalog:warm-up", &"done", Expiry::Keep).await });
/// let waited = values.wait_for_value("catalog:warm-up", &"done".to_owned(), Duration::from_secs(30)).await?;
/// assert!(waited.is_met());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SharedValues {
    store: Arc<dyn ValueStore>,
}

impl SharedValues {
    /// Values kept in `store`.
    pub fn new(store: Arc<dyn ValueStore>) -> Self {
        SharedValues { store }
    }

    /// Values kept in this process only ([`InMemoryValues`]).
    pub fn in_memory() -> Self {
        SharedValues::new(Arc::new(InMemoryValues::new()))
    }

    /// The store behind these values.
    pub fn store(&self) -> &Arc<dyn ValueStore> {
        &self.store
    }

    /// The value of `key` and its version; `None` when absent or expired.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], [`ValuesError::Undecodable`], or an invalid key.
    pub async fn get<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<T>>, ValuesError> {
        check_key(key)?;
        match self.store.get(key).await? {
            Some(stored) => decode(key, stored).map(Some),
            None => Ok(None),
        }
    }

    /// Stores `value` at `key` whatever is there, with the TTL `expiry` says, and returns the
    /// write's version.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`]: the write may or may not have happened. An invalid argument.
    pub async fn set<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
        expiry: Expiry,
    ) -> Result<u64, ValuesError> {
        match self.write(key, value, expiry, Condition::Always).await? {
            Written::Stored { version } => Ok(version),
            Written::Refused { .. } => Err(ValuesError::unavailable(
                "set",
                key,
                "the backend refused an unconditional write",
            )),
        }
    }

    /// Stores `value` at `key` only if no value is there; the version of the write, or `None`
    /// when a value was there (and nothing changed).
    ///
    /// # Errors
    /// As [`set`](Self::set).
    pub async fn set_if_absent<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
        expiry: Expiry,
    ) -> Result<Option<u64>, ValuesError> {
        Ok(
            match self.write(key, value, expiry, Condition::Absent).await? {
                Written::Stored { version } => Some(version),
                Written::Refused { .. } => None,
            },
        )
    }

    /// Stores `value` at `key` only if the stored value has version `expected` (`None`: only if
    /// no value is stored).
    ///
    /// # Errors
    /// As [`set`](Self::set).
    pub async fn compare_and_set<T: Serialize + ?Sized>(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &T,
        expiry: Expiry,
    ) -> Result<Written, ValuesError> {
        let condition = expected.map_or(Condition::Absent, Condition::Version);
        self.write(key, value, expiry, condition).await
    }

    /// Deletes `key`'s value; `true` if one was stored.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], or an invalid key.
    pub async fn delete(&self, key: &str) -> Result<bool, ValuesError> {
        check_key(key)?;
        let written = self.store.delete(key, Condition::Always).await;
        telemetry::written("delete", &written);
        Ok(matches!(written?, Written::Stored { .. }))
    }

    /// Deletes `key`'s value only if it has version `expected`.
    ///
    /// # Errors
    /// As [`delete`](Self::delete).
    pub async fn compare_and_delete(
        &self,
        key: &str,
        expected: u64,
    ) -> Result<Written, ValuesError> {
        check_key(key)?;
        let written = self.store.delete(key, Condition::Version(expected)).await;
        telemetry::written("delete", &written);
        written
    }

    /// Waits until `key`'s value satisfies `until` (called with `None` while it is absent), at
    /// most `timeout`.
    ///
    /// It watches the key before it reads it, then tests every write it observes, so a value
    /// written and overwritten at once is still seen. A write it may have missed (its watch
    /// reconnected) makes it read again. An expiry is not a write: it is seen at the next read.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`] when the backend fails while waiting,
    /// [`ValuesError::Undecodable`], or an invalid argument.
    pub async fn wait_for<T, F>(
        &self,
        key: &str,
        timeout: Duration,
        until: F,
    ) -> Result<Waited<T>, ValuesError>
    where
        T: DeserializeOwned + Send,
        F: FnMut(Option<&Versioned<T>>) -> bool + Send,
    {
        let mut until = until;
        self.wait(
            key,
            timeout,
            move |v: Option<&Versioned<T>>, _: Option<u64>| until(v),
        )
        .await
    }

    /// Waits until `key` holds `expected`, at most `timeout` (see [`wait_for`](Self::wait_for)).
    ///
    /// # Errors
    /// As [`wait_for`](Self::wait_for).
    pub async fn wait_for_value<T>(
        &self,
        key: &str,
        expected: &T,
        timeout: Duration,
    ) -> Result<Waited<T>, ValuesError>
    where
        T: DeserializeOwned + PartialEq + Sync + Send,
    {
        self.wait_for(key, timeout, |v: Option<&Versioned<T>>| {
            v.is_some_and(|v| &v.value == expected)
        })
        .await
    }

    /// Waits until `key` is written after version `since` (`None`: after being absent), at
    /// most `timeout`. A value overwritten with an equal one is a change: its version is
    /// greater. A set or delete older than `since` that is heard late is not a change; with
    /// `since = None` there is no version to compare, and a set heard late counts.
    ///
    /// # Errors
    /// As [`wait_for`](Self::wait_for).
    pub async fn wait_for_change<T>(
        &self,
        key: &str,
        since: Option<u64>,
        timeout: Duration,
    ) -> Result<Waited<T>, ValuesError>
    where
        T: DeserializeOwned + Send,
    {
        // By the version of the write seen (a delete's too); a read of an absent key has none.
        let until = |v: Option<&Versioned<T>>, version: Option<u64>| match (since, version) {
            (Some(since), Some(version)) => version > since,
            (Some(_), None) => true,
            (None, _) => v.is_some(),
        };
        self.wait(key, timeout, until).await
    }

    async fn write<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
        expiry: Expiry,
        condition: Condition,
    ) -> Result<Written, ValuesError> {
        check_key(key)?;
        if let Expiry::After(ttl) = expiry {
            check_duration("ttl", ttl, Duration::from_millis(1), MAX_TTL)
                .map_err(ValuesError::argument)?;
        }
        let bytes = encode(value)?;
        let written = self.store.set(key, &bytes, expiry, condition).await;
        telemetry::written("set", &written);
        written
    }

    /// Checks the arguments, then waits on a watch of `key` (see [`wait_on`](Self::wait_on)),
    /// measured.
    async fn wait<T, F>(
        &self,
        key: &str,
        timeout: Duration,
        until: F,
    ) -> Result<Waited<T>, ValuesError>
    where
        T: DeserializeOwned + Send,
        F: FnMut(Option<&Versioned<T>>, Option<u64>) -> bool + Send,
    {
        check_key(key)?;
        check_duration("timeout", timeout, Duration::ZERO, MAX_WAIT)
            .map_err(ValuesError::argument)?;
        let deadline = Instant::now() + timeout;
        let waited = async {
            let mut watch = self.store.watch(key).await?;
            self.wait_on(&mut *watch, key, deadline, until).await
        };
        telemetry::wait(key, waited).await
    }

    /// Waits on `watch`, a watch of `key` that may have observed writes already: they count
    /// (tested before the read), so a waiter that keeps one watch across several waits misses
    /// nothing between them. `until` is given each value seen and the version of the write
    /// that left it (a delete's too; `None` for a read of an absent key).
    pub(crate) async fn wait_on<T, F>(
        &self,
        watch: &mut dyn ValueWatch,
        key: &str,
        deadline: Instant,
        mut until: F,
    ) -> Result<Waited<T>, ValuesError>
    where
        T: DeserializeOwned + Send,
        F: FnMut(Option<&Versioned<T>>, Option<u64>) -> bool + Send,
    {
        // A zero timeout polls the watch once: what it holds already, without waiting.
        while let Ok(observed) = tokio::time::timeout(Duration::ZERO, watch.next()).await {
            let observed =
                observed.map_err(|cause| ValuesError::unavailable("wait", key, cause))?;
            if let Some((seen, version)) = self.seen(key, observed)? {
                if until(seen.as_ref(), Some(version)) {
                    return Ok(Waited::Met(seen));
                }
            }
        }
        let mut current: Option<Versioned<T>> = self.get(key).await?;
        // The newest write seen, deletes included, so an older one arriving late never
        // replaces it as the value the wait reports on timeout.
        let mut newest = current.as_ref().map_or(0, |v| v.version);
        if until(current.as_ref(), current.as_ref().map(|v| v.version)) {
            return Ok(Waited::Met(current));
        }
        // A read the watch asked for that failed (the watch heard again before the backend
        // answered reads): retried until it succeeds, the watch fails, or the deadline.
        let mut read_due = false;
        loop {
            let observed = tokio::select! {
                observed = watch.next() => {
                    observed.map_err(|cause| ValuesError::unavailable("wait", key, cause))?
                }
                () = tokio::time::sleep_until(deadline) => return Ok(Waited::TimedOut(current)),
                () = tokio::time::sleep(READ_RETRY), if read_due => Observed::Unknown,
            };
            let (seen, version) = match self.seen(key, observed)? {
                Some((seen, version)) => (seen, Some(version)),
                None => match self.get(key).await {
                    Ok(read) => {
                        read_due = false;
                        let version = read.as_ref().map(|v| v.version);
                        (read, version)
                    }
                    Err(ValuesError::Unavailable { .. }) => {
                        read_due = true;
                        continue;
                    }
                    Err(error) => return Err(error),
                },
            };
            // Any write observed was the key's value at some point.
            if until(seen.as_ref(), version) {
                return Ok(Waited::Met(seen));
            }
            let version = version.unwrap_or(newest);
            if version >= newest {
                newest = version;
                current = seen;
            }
        }
    }

    /// What an observed write says the value became, with the write's version; `None` for
    /// [`Observed::Unknown`] (read instead).
    fn seen<T: DeserializeOwned>(
        &self,
        key: &str,
        observed: Observed,
    ) -> Result<Option<Seen<T>>, ValuesError> {
        Ok(match observed {
            Observed::Unknown => None,
            Observed::Set(stored) => {
                let version = stored.version;
                Some((Some(decode(key, stored)?), version))
            }
            Observed::Deleted { version } => Some((None, version)),
        })
    }
}

/// A value a write left (`None`: deleted) and the write's version.
type Seen<T> = (Option<Versioned<T>>, u64);

pub(crate) fn check_key(key: &str) -> Result<(), ValuesError> {
    check_named("key", key)
}

/// `text` checked as a key, an error naming it `what`: `key`, or a map's `field`, `map` or
/// `queue` name.
pub(crate) fn check_named(what: &'static str, text: &str) -> Result<(), ValuesError> {
    validate_key(text).map_err(|error| ValuesError::argument_named(what, error))
}

pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, ValuesError> {
    let bytes = serde_json::to_vec(value).map_err(|error| {
        ValuesError::invalid(
            "value",
            format!("of type {}", type_name::<T>()),
            format!("it does not serialize as JSON: {error}"),
        )
    })?;
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(ValuesError::invalid(
            "value",
            format!("of {} bytes", bytes.len()),
            format!("accepted: at most {MAX_VALUE_BYTES} bytes of JSON"),
        ));
    }
    Ok(bytes)
}

fn decode<T: DeserializeOwned>(
    key: &str,
    stored: Versioned<Vec<u8>>,
) -> Result<Versioned<T>, ValuesError> {
    let value = decode_bytes(key, Some(stored.version), &stored.value)?;
    Ok(Versioned {
        value,
        version: stored.version,
    })
}

/// Deserializes the value of `key` (of `version`, where it has one).
pub(crate) fn decode_bytes<T: DeserializeOwned>(
    key: &str,
    version: Option<u64>,
    bytes: &[u8],
) -> Result<T, ValuesError> {
    serde_json::from_slice(bytes).map_err(|cause| ValuesError::Undecodable {
        key: key.to_owned(),
        version,
        type_name: type_name::<T>(),
        cause,
    })
}
