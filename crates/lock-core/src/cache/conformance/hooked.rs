//! A store for the checks, tests and benchmarks that observe or disturb a backend: every call
//! passes to the store it wraps, after a hook that may count or refuse it.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::cache::{CacheError, CacheStore, CacheWatch, Entry, WriteMark};

/// A store that passes every call to `store`, but lets `hooks` act before each and give each
/// watch.
#[derive(Debug)]
pub struct Hooked<H> {
    /// The store every call goes to.
    pub store: Arc<dyn CacheStore>,
    /// What is done before a call and for a watch.
    pub hooks: H,
}

/// What a [`Hooked`] store does before a call and for a watch; by default, nothing more than
/// the store does.
#[async_trait]
pub trait Hooks: Debug + Send + Sync + 'static {
    /// Runs before `operation` (`get`, `put`, `invalidate` or `clear`; a load's read is a `get`
    /// and its store a `put`) on `key` (empty for a clear) reaches the store; an error is the
    /// caller's answer, and the store is not asked.
    fn before(&self, operation: &'static str, key: &str) -> Result<(), CacheError> {
        let _ = (operation, key);
        Ok(())
    }

    /// The watch of `cache` the caller gets; by default `store`'s own.
    async fn watch(
        &self,
        store: &dyn CacheStore,
        cache: &str,
    ) -> Result<Box<dyn CacheWatch>, CacheError> {
        store.watch(cache).await
    }
}

#[async_trait]
impl<H: Hooks> CacheStore for Hooked<H> {
    async fn get(&self, cache: &str, key: &str) -> Result<Option<Entry>, CacheError> {
        self.hooks.before("get", key)?;
        self.store.get(cache, key).await
    }

    async fn put(&self, c: &str, k: &str, v: &[u8], ttl: Duration) -> Result<(), CacheError> {
        self.hooks.before("put", k)?;
        self.store.put(c, k, v, ttl).await
    }

    async fn get_for_load(
        &self,
        cache: &str,
        key: &str,
    ) -> Result<(Option<Entry>, WriteMark), CacheError> {
        self.hooks.before("get", key)?;
        self.store.get_for_load(cache, key).await
    }

    async fn put_if_unwritten(
        &self,
        c: &str,
        k: &str,
        v: &[u8],
        ttl: Duration,
        mark: WriteMark,
    ) -> Result<bool, CacheError> {
        self.hooks.before("put", k)?;
        self.store.put_if_unwritten(c, k, v, ttl, mark).await
    }

    async fn invalidate(&self, cache: &str, key: &str) -> Result<bool, CacheError> {
        self.hooks.before("invalidate", key)?;
        self.store.invalidate(cache, key).await
    }

    async fn clear(&self, cache: &str) -> Result<bool, CacheError> {
        self.hooks.before("clear", "")?;
        self.store.clear(cache).await
    }

    async fn watch(&self, cache: &str) -> Result<Box<dyn CacheWatch>, CacheError> {
        self.hooks.watch(&*self.store, cache).await
    }

    fn disabled(&self) -> bool {
        self.store.disabled()
    }
}
