//! The shared-values port, [`ValueStore`].

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::BoxError;
use crate::values::error::ValuesError;

/// A value with the version of the write that stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// The version of its write: above every earlier write of the key.
    pub version: u64,
}

/// How a [`SharedValues::wait_for`](crate::values::SharedValues::wait_for) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited<T> {
    /// The value satisfied the predicate: this one (`None`: absent).
    Met(Option<Versioned<T>>),
    /// The timeout passed first; the last value seen (`None`: absent).
    TimedOut(Option<Versioned<T>>),
}

impl<T> Waited<T> {
    /// Whether the predicate was met.
    pub fn is_met(&self) -> bool {
        matches!(self, Waited::Met(_))
    }

    /// The value the wait ended with, met or not.
    pub fn into_value(self) -> Option<Versioned<T>> {
        match self {
            Waited::Met(value) | Waited::TimedOut(value) => value,
        }
    }
}

/// What a write does to the value's TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// The value expires this long after the write.
    After(Duration),
    /// The value keeps the TTL it had; a value that did not exist gets none.
    Keep,
    /// The value never expires.
    Never,
}

/// The condition a write is made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Write whatever is stored.
    Always,
    /// Write only if no value is stored.
    Absent,
    /// Write only if the stored value has this version.
    Version(u64),
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Written, with this version.
    Stored {
        /// The version of the write.
        version: u64,
    },
    /// The condition did not hold, and nothing changed.
    Refused {
        /// The version stored, `None` when no value is.
        current: Option<u64>,
    },
}

/// A write as a [`ValueWatch`] observed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A set, with the bytes it stored.
    Set(Versioned<Vec<u8>>),
    /// A delete, with its version.
    Deleted {
        /// The version of the delete.
        version: u64,
    },
    /// Writes may have gone unobserved (the watch started, reconnected or fell behind): read
    /// the value again.
    Unknown,
}

/// Where shared values live: per key, at most one value of serialized bytes, its version and
/// its TTL.
///
/// Callers use [`SharedValues`](crate::values::SharedValues), which serializes and waits over
/// this port.
///
/// # Contract
/// Every implementation passes the conformance suite (feature `conformance`). In short:
/// - **Versions** are above every earlier version of the key, deletions and expiries included.
/// - **Conditions** are checked and applied atomically: of concurrent writes under
///   [`Condition::Absent`] exactly one is stored.
/// - **TTLs** follow the write's [`Expiry`], on the backend's clock. An expired value is never
///   returned.
/// - **Watches** observe every set and delete of their key that follows [`watch`]'s return, in
///   order, or report [`Observed::Unknown`] where they may have missed one. An expiry is not
///   observed.
/// - **Maps** keep a TTL per field: an expired field is never returned, even when no client has
///   run since it expired, and an unused map disappears after its last field's TTL. A re-put
///   replaces the value and its TTL together.
/// - **Queues** hand each item to one consumer at a time, in push order. An item taken and not
///   acknowledged within its visibility timeout is taken again (at least once); an
///   acknowledged one never is. A push beyond the bound is refused whole.
/// - **Failures.** Every method fails with [`ValuesError::Unavailable`] when the backend fails,
///   and a write that is not confirmed is never reported as stored.
///
/// [`watch`]: ValueStore::watch
#[async_trait]
pub trait ValueStore: Send + Sync + Debug {
    /// The space these values live in, never containing credentials.
    fn namespace(&self) -> &str;

    /// The value of `key` and its version, `None` when absent or expired.
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>, ValuesError>;

    /// Stores `value` at `key` if `condition` holds, with the TTL `expiry` says.
    async fn set(
        &self,
        key: &str,
        value: &[u8],
        expiry: Expiry,
        condition: Condition,
    ) -> Result<Written, ValuesError>;

    /// Deletes `key`'s value if one is stored and `condition` holds;
    /// [`Written::Refused`] with `current: None` when none is.
    async fn delete(&self, key: &str, condition: Condition) -> Result<Written, ValuesError>;

    /// Starts observing the writes of `key`; take it before the read it guards.
    async fn watch(&self, key: &str) -> Result<Box<dyn ValueWatch>, ValuesError>;

    /// A new owner token, unique per call, carrying a readable instance id.
    fn new_owner(&self) -> String;

    /// Stores `value` at `field` of map `map`, expiring `ttl` after this write, and keeps the
    /// map at least until its last field expires.
    async fn map_put(
        &self,
        map: &str,
        field: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), ValuesError>;

    /// The value at `field` of `map`; `None` when absent or expired.
    async fn map_get(&self, map: &str, field: &str) -> Result<Option<Vec<u8>>, ValuesError>;

    /// Removes `field` of `map`; `true` if it held a live value.
    async fn map_remove(&self, map: &str, field: &str) -> Result<bool, ValuesError>;

    /// The live fields of `map` and their values, sorted by field.
    async fn map_entries(&self, map: &str) -> Result<Vec<(String, Vec<u8>)>, ValuesError>;

    /// Removes every field of `map`; `true` if it had any.
    async fn map_clear(&self, map: &str) -> Result<bool, ValuesError>;

    /// Appends `items` to `queue`, all or none: [`Pushed::Full`] when the queue would hold
    /// more than `max_len`. The queue then lives `ttl` after this push.
    async fn queue_push(
        &self,
        queue: &str,
        items: &[Vec<u8>],
        max_len: u64,
        ttl: Duration,
    ) -> Result<Pushed, ValuesError>;

    /// Takes up to `max` items of `queue` for `consumer`: first items taken before and not
    /// acknowledged for `visibility`, then new ones, each in push order.
    async fn queue_take(
        &self,
        queue: &str,
        consumer: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery<Vec<u8>>>, ValuesError>;

    /// Acknowledges the taken items `ids` of `queue`, removing them; how many were pending.
    /// An id no take could have given is [`ValuesError::not_a_queue_id`], and nothing is
    /// acknowledged.
    async fn queue_ack(&self, queue: &str, ids: &[String]) -> Result<u64, ValuesError>;

    /// How many items `queue` holds, taken and not yet acknowledged ones included.
    async fn queue_len(&self, queue: &str) -> Result<u64, ValuesError>;
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Appended, with these ids, in order.
    Appended(Vec<String>),
    /// Refused whole: the queue holds `len` items and the push would pass its bound.
    Full {
        /// The items the queue holds.
        len: u64,
    },
}

/// An item taken from a queue, to acknowledge by its id once handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery<T> {
    /// The item's id in its queue.
    pub id: String,
    /// The item.
    pub item: T,
    /// How many times it has been taken, this time included: above 1 after a consumer took it
    /// and did not acknowledge it within the visibility timeout.
    pub deliveries: u64,
}

/// The writes of one key, as they happen. Dropping it ends the watch.
///
/// Unlike a [`ChangeWatch`](crate::ChangeWatch), which only says that something may have
/// changed, it carries what was written, so that a waiter sees a value that was overwritten
/// before it could read it.
#[async_trait]
pub trait ValueWatch: Send + Debug {
    /// The next write, or [`Observed::Unknown`] first when writes may have been missed.
    ///
    /// # Errors
    /// The connection error, once the backend has been unreachable for its command timeout.
    async fn next(&mut self) -> Result<Observed, BoxError>;
}
