//! [`InMemoryCaches`] and [`DisabledCaches`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::cache::error::CacheError;
use crate::cache::port::{CacheStore, CacheWatch, Change, Entry, LOAD_STORE_WINDOW, WriteMark};
use crate::error::BoxError;

/// Caches in this process, on its monotonic clock: for tests, and for a single replica. Clones
/// share the entries.
///
/// Expired entries are swept every 1,024 writes, so memory follows the live entries.
#[derive(Debug, Clone, Default)]
pub struct InMemoryCaches {
    state: Arc<Mutex<State>>,
}

/// Writes between two sweeps of the expired entries.
const SWEEP_EVERY: u32 = 1024;
/// Changes a watch may fall behind by before it reports [`Change::Live`] again.
const WATCH_BACKLOG: usize = 1024;

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, HashMap<String, (Vec<u8>, Instant)>>,
    watches: HashMap<String, broadcast::Sender<Change>>,
    since_sweep: u32,
    /// Writes so far: the [`WriteMark`] of now.
    writes: u64,
    /// Per cache, the last write of each key and of the whole cache (key `""`, which no entry
    /// has), for [`LOAD_STORE_WINDOW`].
    written: HashMap<String, HashMap<String, (u64, Instant)>>,
}

impl State {
    /// Notes a write of `key` of `cache` (`""`: a clear).
    fn stamp(&mut self, cache: &str, key: &str, now: Instant) {
        self.sweep_if_due(now);
        self.writes += 1;
        let written = self.written.entry(cache.to_owned()).or_default();
        written.insert(key.to_owned(), (self.writes, now));
    }

    /// Every [`SWEEP_EVERY`] stores, removes the expired entries and the writes older than
    /// [`LOAD_STORE_WINDOW`].
    fn sweep_if_due(&mut self, now: Instant) {
        self.since_sweep += 1;
        if self.since_sweep >= SWEEP_EVERY {
            self.since_sweep = 0;
            self.entries.retain(|_, entries| {
                entries.retain(|_, (_, deadline)| *deadline > now);
                !entries.is_empty()
            });
            self.written.retain(|_, written| {
                written.retain(|_, (_, at)| now - *at <= LOAD_STORE_WINDOW);
                !written.is_empty()
            });
        }
    }

    /// Whether `key` of `cache`, or the whole cache, was written after `mark`.
    fn written_since(&self, cache: &str, key: &str, mark: WriteMark) -> bool {
        let Some(written) = self.written.get(cache) else {
            return false;
        };
        [key, ""]
            .iter()
            .any(|k| written.get(*k).is_some_and(|(n, _)| *n > mark.0))
    }

    fn publish(&self, cache: &str, change: Change) {
        if let Some(watches) = self.watches.get(cache) {
            let _ = watches.send(change);
        }
    }

    /// The live entry `key` of `cache` at `now`.
    fn live(&self, cache: &str, key: &str, now: Instant) -> Option<Entry> {
        let (value, deadline) = self.entries.get(cache)?.get(key)?;
        (*deadline > now).then(|| Entry {
            value: value.clone(),
            expires_in: *deadline - now,
        })
    }
}

impl InMemoryCaches {
    /// No caches.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries the caches hold, expired ones not swept yet included.
    pub fn held(&self) -> usize {
        self.state().entries.values().map(HashMap::len).sum()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl CacheStore for InMemoryCaches {
    async fn get(&self, cache: &str, key: &str) -> Result<Option<Entry>, CacheError> {
        Ok(self.state().live(cache, key, Instant::now()))
    }

    async fn put(
        &self,
        cache: &str,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let now = Instant::now();
        let mut state = self.state();
        state.stamp(cache, key, now);
        let entries = state.entries.entry(cache.to_owned()).or_default();
        entries.insert(key.to_owned(), (value.to_vec(), now + ttl));
        state.publish(cache, Change::Key(key.to_owned()));
        Ok(())
    }

    async fn get_for_load(
        &self,
        cache: &str,
        key: &str,
    ) -> Result<(Option<Entry>, WriteMark), CacheError> {
        let state = self.state();
        let entry = state.live(cache, key, Instant::now());
        Ok((entry, WriteMark(state.writes)))
    }

    async fn put_if_unwritten(
        &self,
        cache: &str,
        key: &str,
        value: &[u8],
        ttl: Duration,
        mark: WriteMark,
    ) -> Result<bool, CacheError> {
        let now = Instant::now();
        let mut state = self.state();
        if state.written_since(cache, key, mark) {
            return Ok(false);
        }
        state.sweep_if_due(now);
        let entries = state.entries.entry(cache.to_owned()).or_default();
        entries.insert(key.to_owned(), (value.to_vec(), now + ttl));
        state.publish(cache, Change::Key(key.to_owned()));
        Ok(true)
    }

    async fn invalidate(&self, cache: &str, key: &str) -> Result<bool, CacheError> {
        let now = Instant::now();
        let mut state = self.state();
        state.stamp(cache, key, now);
        let removed = state
            .entries
            .get_mut(cache)
            .and_then(|entries| entries.remove(key))
            .is_some_and(|(_, deadline)| deadline > now);
        state.publish(cache, Change::Key(key.to_owned()));
        Ok(removed)
    }

    async fn clear(&self, cache: &str) -> Result<bool, CacheError> {
        let now = Instant::now();
        let mut state = self.state();
        state.stamp(cache, "", now);
        let had_live = state
            .entries
            .remove(cache)
            .is_some_and(|entries| entries.values().any(|(_, deadline)| *deadline > now));
        state.publish(cache, Change::Cleared);
        Ok(had_live)
    }

    async fn watch(&self, cache: &str) -> Result<Box<dyn CacheWatch>, CacheError> {
        let mut state = self.state();
        let changes = state
            .watches
            .entry(cache.to_owned())
            .or_insert_with(|| broadcast::channel(WATCH_BACKLOG).0)
            .subscribe();
        Ok(Box::new(MemoryWatch {
            changes,
            started: false,
        }))
    }
}

#[derive(Debug)]
struct MemoryWatch {
    changes: broadcast::Receiver<Change>,
    started: bool,
}

#[async_trait]
impl CacheWatch for MemoryWatch {
    async fn next(&mut self) -> Result<Change, BoxError> {
        if !std::mem::replace(&mut self.started, true) {
            return Ok(Change::Live);
        }
        match self.changes.recv().await {
            Ok(change) => Ok(change),
            // Fell behind: what it missed is unknown, so everything is dropped.
            Err(broadcast::error::RecvError::Lagged(_)) => Ok(Change::Live),
            Err(broadcast::error::RecvError::Closed) => Err("the in-memory caches are gone".into()),
        }
    }
}

/// The store of switched-off caching: nothing is kept and nothing is sent anywhere; every
/// `get_or_load` runs its loader.
#[derive(Debug, Clone, Copy, Default)]
pub struct DisabledCaches;

#[async_trait]
impl CacheStore for DisabledCaches {
    async fn get(&self, _: &str, _: &str) -> Result<Option<Entry>, CacheError> {
        Ok(None)
    }

    async fn put(&self, _: &str, _: &str, _: &[u8], _: Duration) -> Result<(), CacheError> {
        Ok(())
    }

    async fn invalidate(&self, _: &str, _: &str) -> Result<bool, CacheError> {
        Ok(false)
    }

    async fn clear(&self, _: &str) -> Result<bool, CacheError> {
        Ok(false)
    }

    async fn watch(&self, _: &str) -> Result<Box<dyn CacheWatch>, CacheError> {
        Err(CacheError::invalid(
            "watch",
            "",
            "caching is switched off: there is nothing to watch".to_owned(),
        ))
    }

    fn disabled(&self) -> bool {
        true
    }
}
