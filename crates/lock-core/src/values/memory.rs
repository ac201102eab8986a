//! An in-process [`ValueStore`], for tests, single-process tools, and a service whose values
//! are switched off.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::error::BoxError;
use crate::owner::OwnerTokens;
use crate::values::error::ValuesError;
use crate::values::port::{
    Condition, Delivery, Expiry, Observed, Pushed, ValueStore, ValueWatch, Versioned, Written,
};

/// Writes a watch may fall behind by before it reports [`Observed::Unknown`].
const WATCH_BACKLOG: usize = 1024;

/// A [`ValueStore`] whose values live in this process, on Tokio's clock.
///
/// It passes the conformance suite. Values are not shared with other processes.
#[derive(Debug)]
pub struct InMemoryValues {
    state: Mutex<State>,
    writes: broadcast::Sender<(String, Observed)>,
    owners: OwnerTokens,
}

#[derive(Debug, Default)]
struct State {
    values: HashMap<String, Entry>,
    /// TTL maps by name: field → value and when it expires.
    maps: HashMap<String, BTreeMap<String, (Vec<u8>, Instant)>>,
    queues: HashMap<String, MemoryQueue>,
    /// The last version given, to any key: versions stay above those of deleted values.
    version: u64,
}

#[derive(Debug)]
struct MemoryQueue {
    next_id: u64,
    /// Not taken yet, in push order.
    ready: VecDeque<(u64, Vec<u8>)>,
    /// Taken and not acknowledged: id → item, when it was last delivered, deliveries.
    pending: BTreeMap<u64, (Vec<u8>, Instant, u64)>,
    expires_at: Instant,
}

impl MemoryQueue {
    fn len(&self) -> u64 {
        (self.ready.len() + self.pending.len()) as u64
    }
}

#[derive(Debug)]
struct Entry {
    bytes: Vec<u8>,
    version: u64,
    expires_at: Option<Instant>,
}

impl Default for InMemoryValues {
    fn default() -> Self {
        InMemoryValues::new()
    }
}

impl InMemoryValues {
    /// An empty store.
    pub fn new() -> Self {
        InMemoryValues {
            state: Mutex::default(),
            writes: broadcast::channel(WATCH_BACKLOG).0,
            owners: OwnerTokens::new("in-memory").expect("a valid instance id"),
        }
    }

    /// Runs `f` on the state with `key`'s expired value removed, and publishes what it wrote.
    fn write(
        &self,
        key: &str,
        f: impl FnOnce(&mut State) -> (Written, Option<Observed>),
    ) -> Written {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if state
            .values
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|at| at <= now))
        {
            state.values.remove(key);
        }
        let (written, observed) = f(&mut state);
        if let Some(observed) = observed {
            // Sent under the lock, so watchers see writes in version order.
            let _ = self.writes.send((key.to_owned(), observed));
        }
        written
    }
}

impl InMemoryValues {
    /// Runs `f` on the live fields of `map` (expired ones removed first); an empty map is
    /// dropped.
    fn with_map<R>(
        &self,
        map: &str,
        f: impl FnOnce(&mut BTreeMap<String, (Vec<u8>, Instant)>) -> R,
    ) -> R {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let fields = state.maps.entry(map.to_owned()).or_default();
        fields.retain(|_, (_, expires_at)| *expires_at > now);
        let result = f(fields);
        if fields.is_empty() {
            state.maps.remove(map);
        }
        result
    }
}

impl InMemoryValues {
    /// Runs `f` on `queue` (an expired one emptied) and the time now. Its entry stays, so ids
    /// never repeat.
    fn with_queue<R>(&self, queue: &str, f: impl FnOnce(&mut MemoryQueue, Instant) -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let q = state
            .queues
            .entry(queue.to_owned())
            .or_insert_with(|| MemoryQueue {
                next_id: 0,
                ready: VecDeque::new(),
                pending: BTreeMap::new(),
                expires_at: now,
            });
        if q.expires_at <= now {
            q.ready.clear();
            q.pending.clear();
        }
        f(q, now)
    }
}

fn holds(entry: Option<&Entry>, condition: Condition) -> bool {
    match condition {
        Condition::Always => true,
        Condition::Absent => entry.is_none(),
        Condition::Version(version) => entry.is_some_and(|e| e.version == version),
    }
}

#[async_trait]
impl ValueStore for InMemoryValues {
    fn namespace(&self) -> &str {
        "in-memory"
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>, ValuesError> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        Ok(state
            .values
            .get(key)
            .filter(|e| e.expires_at.is_none_or(|at| at > now))
            .map(|e| Versioned {
                value: e.bytes.clone(),
                version: e.version,
            }))
    }

    async fn set(
        &self,
        key: &str,
        value: &[u8],
        expiry: Expiry,
        condition: Condition,
    ) -> Result<Written, ValuesError> {
        Ok(self.write(key, |state| {
            let entry = state.values.get(key);
            if !holds(entry, condition) {
                let current = entry.map(|e| e.version);
                return (Written::Refused { current }, None);
            }
            let expires_at = match expiry {
                Expiry::After(ttl) => Some(Instant::now() + ttl),
                Expiry::Keep => entry.and_then(|e| e.expires_at),
                Expiry::Never => None,
            };
            state.version += 1;
            let version = state.version;
            state.values.insert(
                key.to_owned(),
                Entry {
                    bytes: value.to_vec(),
                    version,
                    expires_at,
                },
            );
            let observed = Observed::Set(Versioned {
                value: value.to_vec(),
                version,
            });
            (Written::Stored { version }, Some(observed))
        }))
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Written, ValuesError> {
        Ok(self.write(key, |state| {
            let entry = state.values.get(key);
            if entry.is_none() || !holds(entry, condition) {
                let current = entry.map(|e| e.version);
                return (Written::Refused { current }, None);
            }
            state.values.remove(key);
            state.version += 1;
            let version = state.version;
            (
                Written::Stored { version },
                Some(Observed::Deleted { version }),
            )
        }))
    }

    async fn watch(&self, key: &str) -> Result<Box<dyn ValueWatch>, ValuesError> {
        Ok(Box::new(MemoryWatch {
            key: key.to_owned(),
            writes: self.writes.subscribe(),
        }))
    }

    fn new_owner(&self) -> String {
        self.owners.next_token()
    }

    async fn map_put(
        &self,
        map: &str,
        field: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), ValuesError> {
        let expires_at = Instant::now() + ttl;
        self.with_map(map, |fields| {
            fields.insert(field.to_owned(), (value.to_vec(), expires_at));
        });
        Ok(())
    }

    async fn map_get(&self, map: &str, field: &str) -> Result<Option<Vec<u8>>, ValuesError> {
        Ok(self.with_map(map, |fields| fields.get(field).map(|(v, _)| v.clone())))
    }

    async fn map_remove(&self, map: &str, field: &str) -> Result<bool, ValuesError> {
        Ok(self.with_map(map, |fields| fields.remove(field).is_some()))
    }

    async fn map_entries(&self, map: &str) -> Result<Vec<(String, Vec<u8>)>, ValuesError> {
        Ok(self.with_map(map, |fields| {
            fields
                .iter()
                .map(|(field, (value, _))| (field.clone(), value.clone()))
                .collect()
        }))
    }

    async fn map_clear(&self, map: &str) -> Result<bool, ValuesError> {
        Ok(self.with_map(map, |fields| {
            let had = !fields.is_empty();
            fields.clear();
            had
        }))
    }

    async fn queue_push(
        &self,
        queue: &str,
        items: &[Vec<u8>],
        max_len: u64,
        ttl: Duration,
    ) -> Result<Pushed, ValuesError> {
        Ok(self.with_queue(queue, |q, now| {
            let len = q.len();
            if len + items.len() as u64 > max_len {
                return Pushed::Full { len };
            }
            q.expires_at = now + ttl;
            let ids = items.iter().map(|item| {
                q.next_id += 1;
                q.ready.push_back((q.next_id, item.clone()));
                q.next_id.to_string()
            });
            Pushed::Appended(ids.collect())
        }))
    }

    async fn queue_take(
        &self,
        queue: &str,
        _consumer: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery<Vec<u8>>>, ValuesError> {
        Ok(self.with_queue(queue, |q, now| {
            let mut taken = Vec::new();
            // Idle for this take's visibility since it was last delivered, as on Redis.
            for (id, (item, delivered_at, deliveries)) in &mut q.pending {
                if taken.len() == max {
                    break;
                }
                if now.duration_since(*delivered_at) >= visibility {
                    *delivered_at = now;
                    *deliveries += 1;
                    taken.push(delivery(*id, item, *deliveries));
                }
            }
            while taken.len() < max {
                let Some((id, item)) = q.ready.pop_front() else {
                    break;
                };
                taken.push(delivery(id, &item, 1));
                q.pending.insert(id, (item, now, 1));
            }
            taken
        }))
    }

    async fn queue_ack(&self, queue: &str, ids: &[String]) -> Result<u64, ValuesError> {
        let ids = ids
            .iter()
            .map(|id| {
                id.parse::<u64>()
                    .map_err(|_| ValuesError::not_a_queue_id(id))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.with_queue(queue, |q, _| {
            let untaken = |id: &&u64| {
                q.ready
                    .binary_search_by_key(*id, |(ready, _)| *ready)
                    .is_ok()
            };
            if let Some(id) = ids.iter().find(untaken) {
                return Err(ValuesError::not_a_queue_id(&id.to_string()));
            }
            Ok(ids
                .iter()
                .filter(|id| q.pending.remove(id).is_some())
                .count() as u64)
        })
    }

    async fn queue_len(&self, queue: &str) -> Result<u64, ValuesError> {
        Ok(self.with_queue(queue, |q, _| q.len()))
    }
}

fn delivery(id: u64, item: &[u8], deliveries: u64) -> Delivery<Vec<u8>> {
    Delivery {
        id: id.to_string(),
        item: item.to_vec(),
        deliveries,
    }
}

#[derive(Debug)]
struct MemoryWatch {
    key: String,
    writes: broadcast::Receiver<(String, Observed)>,
}

#[async_trait]
impl ValueWatch for MemoryWatch {
    async fn next(&mut self) -> Result<Observed, BoxError> {
        loop {
            match self.writes.recv().await {
                Ok((key, observed)) if key == self.key => return Ok(observed),
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => return Ok(Observed::Unknown),
                // The store was dropped: nothing will change any more.
                Err(RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}
