//! The cache port, [`CacheStore`].

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::cache::error::CacheError;
use crate::error::BoxError;

/// An entry as a store returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The serialized value.
    pub value: Vec<u8>,
    /// How long it lives from when the read was sent, on the store's clock: never more than it
    /// has left.
    pub expires_in: Duration,
}

/// A read's place in a store's order of writes, so that a value loaded after that read is
/// stored only if no write of its entry came after it ([`CacheStore::put_if_unwritten`]). Its
/// meaning is the store's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WriteMark(pub u64);

/// How long after its [`WriteMark`] a load's value may still be stored: a store remembers its
/// writes this long, and a load that takes longer returns its value uncached.
pub const LOAD_STORE_WINDOW: Duration = Duration::from_secs(30);

/// A change a [`CacheWatch`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The entry of this key was written or invalidated.
    Key(String),
    /// The whole cache was cleared.
    Cleared,
    /// Changes may go unreported from now on (the watch's connection is down): trust nothing
    /// held in memory until [`Change::Live`].
    Down,
    /// Every change from now on is reported; changes before may have been missed.
    Live,
}

/// Where named caches live: per cache, entries of serialized bytes, each with its own TTL.
///
/// Callers use [`Cache`](crate::cache::Cache), which serializes, coalesces loads and keeps the
/// optional in-process tier over this port.
///
/// # Contract
/// Every implementation passes the conformance suite (feature `conformance`). In short:
/// - **TTLs** are per entry, on the backend's clock. An expired entry is never returned, even
///   when no client has run since it expired, and an unused cache disappears after its last
///   entry's TTL, or [`LOAD_STORE_WINDOW`] after its last write if later. A re-put replaces
///   the value and its TTL together.
/// - **Clear** removes every entry of a cache in one step, whatever its size.
/// - **Loads never undo writes.** [`put_if_unwritten`](CacheStore::put_if_unwritten) stores
///   nothing when the entry was put, invalidated or cleared by any client after the read its
///   mark came from, within [`LOAD_STORE_WINDOW`].
/// - **Watches** report every put, invalidation and clear of their cache that follows
///   [`watch`](CacheStore::watch)'s first [`Change::Live`], or a [`Change::Down`] first.
/// - **Failures.** Every method fails with [`CacheError::Unavailable`] when the backend fails;
///   a write that is not confirmed may or may not have happened.
#[async_trait]
pub trait CacheStore: Send + Sync + Debug + 'static {
    /// The live entry `key` of `cache`, `None` when absent or expired.
    async fn get(&self, cache: &str, key: &str) -> Result<Option<Entry>, CacheError>;

    /// Stores `value` as the entry `key` of `cache`, expiring `ttl` after this write.
    async fn put(
        &self,
        cache: &str,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), CacheError>;

    /// As [`get`](CacheStore::get), with the [`WriteMark`] of the read, for a load on a miss.
    /// The default, for a store that does not track writes, marks `WriteMark(0)`.
    async fn get_for_load(
        &self,
        cache: &str,
        key: &str,
    ) -> Result<(Option<Entry>, WriteMark), CacheError> {
        Ok((self.get(cache, key).await?, WriteMark(0)))
    }

    /// Stores a loaded `value` as [`put`](CacheStore::put) does, unless the entry was written
    /// (put, invalidated, or its cache cleared) after the read `mark` came from; whether it
    /// stored. The default stores unconditionally.
    async fn put_if_unwritten(
        &self,
        cache: &str,
        key: &str,
        value: &[u8],
        ttl: Duration,
        mark: WriteMark,
    ) -> Result<bool, CacheError> {
        let _ = mark;
        self.put(cache, key, value, ttl).await.map(|()| true)
    }

    /// Removes the entry `key` of `cache`; `true` if it was live.
    async fn invalidate(&self, cache: &str, key: &str) -> Result<bool, CacheError>;

    /// Removes every entry of `cache`; `true` if it had a live one.
    async fn clear(&self, cache: &str) -> Result<bool, CacheError>;

    /// Starts reporting the changes of `cache`, for an in-process tier to follow.
    async fn watch(&self, cache: &str) -> Result<Box<dyn CacheWatch>, CacheError>;

    /// Whether caching is switched off: nothing is stored and nothing is asked of a backend.
    /// Only [`DisabledCaches`](crate::cache::DisabledCaches) says so.
    fn disabled(&self) -> bool {
        false
    }
}

/// The changes of one cache, as they happen. Dropping it ends the watch.
#[async_trait]
pub trait CacheWatch: Send + Debug {
    /// The next change.
    ///
    /// # Errors
    /// The backend's error when the watch cannot go on; the caller starts another.
    async fn next(&mut self) -> Result<Change, BoxError>;
}
