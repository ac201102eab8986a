//! The in-process tier: decoded entries kept in memory while the store's change stream is live.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cache::options::NearCache;
use crate::cache::port::{CacheStore, Change};

/// How soon a failed watch is started again.
const REWATCH: Duration = Duration::from_millis(500);

/// An entry of the tier.
#[derive(Debug, Clone)]
struct Held<V> {
    value: V,
    expires_at: Instant,
    bytes: u32,
}

/// The tier and what keeps it correct. Serves nothing until the change stream is live.
pub(crate) struct Near<V> {
    state: Arc<State<V>>,
    task: JoinHandle<()>,
}

/// What an entry weighs against the tier's bound: 1, or its key's and value's bytes.
#[derive(Debug, Clone, Copy)]
struct Weight {
    by_bytes: bool,
}

impl<V> quick_cache::Weighter<String, Held<V>> for Weight {
    fn weight(&self, key: &String, held: &Held<V>) -> u64 {
        if self.by_bytes {
            key.len() as u64 + u64::from(held.bytes)
        } else {
            1
        }
    }
}

/// Entries an in-process tier bounded by bytes is sized for, per byte of its bound: one per KiB.
const ENTRIES_PER_BYTE: u64 = 1024;

struct State<V> {
    entries: quick_cache::sync::Cache<String, Held<V>, Weight>,
    /// Whether every change is being heard: the tier serves only then.
    live: AtomicBool,
    /// Bumped before each eviction a change causes, so that a read racing a change does not
    /// keep what it read.
    changes: AtomicU64,
}

/// A read's place in the change order: keep what it read only if no change came since.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    changes: u64,
    sent: Instant,
}

impl<V: Clone + Send + Sync + 'static> Near<V> {
    /// A tier bounded by `bound`, following the changes of `cache` in `store`.
    pub(crate) fn start(store: Arc<dyn CacheStore>, cache: &str, bound: NearCache) -> Self {
        let (items, capacity, by_bytes) = match bound {
            NearCache::Entries(n) => (n, n, false),
            NearCache::Bytes(n) => ((n / ENTRIES_PER_BYTE).max(1), n, true),
        };
        let items = usize::try_from(items).unwrap_or(usize::MAX);
        let entries = quick_cache::sync::Cache::with_weighter(items, capacity, Weight { by_bytes });
        let state = Arc::new(State {
            entries,
            live: AtomicBool::new(false),
            changes: AtomicU64::new(0),
        });
        let task = tokio::spawn(follow(store, cache.to_owned(), Arc::clone(&state)));
        Near { state, task }
    }

    /// The live entry of `key`, while the tier serves.
    pub(crate) fn get(&self, key: &str) -> Option<V> {
        if !self.state.live.load(Ordering::Acquire) {
            return None;
        }
        let held = self.state.entries.get(key)?;
        if held.expires_at <= Instant::now() {
            self.state.entries.remove(key);
            return None;
        }
        Some(held.value)
    }

    /// Taken before a read of the store whose result may be kept.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket {
            changes: self.state.changes.load(Ordering::Acquire),
            sent: Instant::now(),
        }
    }

    /// Keeps `value`, read from the store after `ticket` with `expires_in` left, unless a
    /// change came since or the tier does not serve.
    pub(crate) fn keep(
        &self,
        ticket: Ticket,
        key: &str,
        value: V,
        expires_in: Duration,
        bytes: usize,
    ) {
        if !self.state.live.load(Ordering::Acquire) || self.changed_since(ticket) {
            return;
        }
        let held = Held {
            value,
            // The entry had `expires_in` left when the store read it, after the read was sent.
            expires_at: ticket.sent + expires_in,
            bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
        };
        self.state.entries.insert(key.to_owned(), held);
        // A change between the check above and the insert evicted nothing: evict again.
        if self.changed_since(ticket) {
            self.state.entries.remove(key);
        }
    }

    fn changed_since(&self, ticket: Ticket) -> bool {
        self.state.changes.load(Ordering::Acquire) != ticket.changes
    }

    /// Drops `key`, or everything for `None`: this process changed it.
    pub(crate) fn evict(&self, key: Option<&str>) {
        self.state.evict(key);
    }
}

impl<V: Clone + Send + Sync + 'static> State<V> {
    fn evict(&self, key: Option<&str>) {
        self.changes.fetch_add(1, Ordering::AcqRel);
        match key {
            Some(key) => {
                self.entries.remove(key);
            }
            None => self.entries.clear(),
        }
    }

    fn set_live(&self, live: bool) {
        if !live {
            self.live.store(false, Ordering::Release);
        }
        self.evict(None);
        if live {
            self.live.store(true, Ordering::Release);
        }
    }
}

impl<V> std::fmt::Debug for Near<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Near")
            .field("live", &self.state.live)
            .finish_non_exhaustive()
    }
}

impl<V> Drop for Near<V> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Follows the changes of `cache`, starting a new watch whenever one fails.
async fn follow<V: Clone + Send + Sync + 'static>(
    store: Arc<dyn CacheStore>,
    cache: String,
    state: Arc<State<V>>,
) {
    loop {
        let mut watch = match store.watch(&cache).await {
            Ok(watch) => watch,
            Err(error) => {
                tracing::debug!(%cache, %error, "cache watch failed to start; the near tier serves nothing");
                state.set_live(false);
                tokio::time::sleep(REWATCH).await;
                continue;
            }
        };
        loop {
            match watch.next().await {
                Ok(Change::Key(key)) => state.evict(Some(&key)),
                Ok(Change::Cleared) => state.evict(None),
                Ok(Change::Down) => state.set_live(false),
                Ok(Change::Live) => state.set_live(true),
                Err(error) => {
                    tracing::debug!(%cache, %error, "cache watch failed; the near tier serves nothing until it is back");
                    state.set_live(false);
                    break;
                }
            }
        }
        tokio::time::sleep(REWATCH).await;
    }
}
