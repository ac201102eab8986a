//! Per-key load coalescing in one process: one caller loads, the others wait for its outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::cache::error::CacheError;

/// How a load ended, for the callers that waited on it.
pub(crate) type Landed<V> = Result<V, CacheError>;

/// A load's outcome as its followers get it.
#[derive(Debug, Clone)]
pub(crate) struct Landing<V> {
    pub(crate) landed: Landed<V>,
    /// The store refused the loaded value: the key was written there during the load, maybe
    /// before a follower joined.
    pub(crate) written_in_store: bool,
}

/// The loads in flight, by key.
#[derive(Debug)]
pub(crate) struct Flights<V> {
    by_key: Mutex<HashMap<String, Flight<V>>>,
}

/// A load in flight: where its outcome lands, and whether a write of its key came after it.
#[derive(Debug)]
struct Flight<V> {
    landed: watch::Receiver<Option<Landing<V>>>,
    superseded: Arc<AtomicBool>,
}

/// A caller's part in a key's load.
pub(crate) enum Joined<V> {
    /// This caller loads, and lands the outcome for the others.
    Leader(Leader<V>),
    /// Another caller loads: wait on it.
    Follower(watch::Receiver<Option<Landing<V>>>),
}

/// The loading caller's duty: [`Leader::land`] the outcome. Dropped without landing (the caller
/// was cancelled), it lets a waiting caller load instead.
pub(crate) struct Leader<V> {
    flights: Arc<Flights<V>>,
    key: String,
    sender: watch::Sender<Option<Landing<V>>>,
    superseded: Arc<AtomicBool>,
    written_in_store: AtomicBool,
}

impl<V> Default for Flights<V> {
    fn default() -> Self {
        Flights {
            by_key: Mutex::default(),
        }
    }
}

impl<V: Clone> Flights<V> {
    /// Joins the load of `key`, leading it when none is in flight.
    pub(crate) fn join(self: &Arc<Self>, key: &str) -> Joined<V> {
        let mut by_key = self.lock();
        if let Some(flight) = by_key.get(key) {
            if flight.landed.has_changed().is_ok() {
                return Joined::Follower(flight.landed.clone());
            }
        }
        let (sender, landed) = watch::channel(None);
        let superseded = Arc::new(AtomicBool::new(false));
        let flight = Flight {
            landed,
            superseded: Arc::clone(&superseded),
        };
        by_key.insert(key.to_owned(), flight);
        Joined::Leader(Leader {
            flights: Arc::clone(self),
            key: key.to_owned(),
            sender,
            superseded,
            written_in_store: AtomicBool::new(false),
        })
    }
}

impl<V> Flights<V> {
    /// A write of `key` (of every key: `None`) is being made: the loads in flight read before
    /// it, so later callers start loads of their own, and those loads' values are not stored.
    pub(crate) fn supersede(&self, key: Option<&str>) {
        let mut by_key = self.lock();
        let ended: Vec<Flight<V>> = match key {
            Some(key) => by_key.remove(key).into_iter().collect(),
            None => by_key.drain().map(|(_, flight)| flight).collect(),
        };
        for flight in ended {
            flight.superseded.store(true, Ordering::SeqCst);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Flight<V>>> {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<V> Leader<V> {
    /// Whether a write of the key was made since this load began: its value must not be stored.
    pub(crate) fn superseded(&self) -> bool {
        self.superseded.load(Ordering::SeqCst)
    }

    /// Notes that the store refused the loaded value, as the key was written there (by any
    /// client) during the load.
    pub(crate) fn written_in_store(&self) {
        self.written_in_store.store(true, Ordering::SeqCst);
    }

    /// Hands `landed` to every caller that waited.
    pub(crate) fn land(self, landed: Landed<V>) {
        let written_in_store = self.written_in_store.load(Ordering::SeqCst);
        self.sender.send_replace(Some(Landing {
            landed,
            written_in_store,
        }));
    }
}

impl<V> Drop for Leader<V> {
    fn drop(&mut self) {
        let mut by_key = self.flights.lock();
        if by_key
            .get(&self.key)
            .is_some_and(|f| f.landed.same_channel(&self.sender.subscribe()))
        {
            by_key.remove(&self.key);
        }
    }
}

/// Waits for the leader's outcome; `None` when it was cancelled before landing one.
pub(crate) async fn follow<V: Clone>(
    mut receiver: watch::Receiver<Option<Landing<V>>>,
) -> Option<Landing<V>> {
    match receiver.wait_for(Option::is_some).await {
        Ok(landed) => landed.clone(),
        Err(_) => None,
    }
}

/// A load: its cache (by address) and key.
pub(crate) type Load = (usize, String);

/// Which loads wait on which across tasks: an edge from each load of a task whose loader
/// follows another task's load, to that load. Checked and written under one lock, so that of
/// two loads that would wait on each other the second to follow is refused.
static WAITS: Mutex<Vec<(Load, Load)>> = Mutex::new(Vec::new());

/// The edges of one follower, removed when it stops waiting.
pub(crate) struct Waiting(Vec<(Load, Load)>);

/// Records that `stack`, the loads the calling task runs the loaders of, waits on `target`,
/// another task's load; `None` when `target` waits, directly or through other loads, on one of
/// them, so that following it would never end.
pub(crate) fn wait_on(stack: &[Load], target: &Load) -> Option<Waiting> {
    let mut waits = waits();
    let mut reached = vec![target.clone()];
    let mut next = 0;
    while let Some(load) = reached.get(next).cloned() {
        for (from, to) in waits.iter() {
            if *from == load && !reached.contains(to) {
                reached.push(to.clone());
            }
        }
        next += 1;
    }
    if reached.iter().any(|load| stack.contains(load)) {
        return None;
    }
    let edges: Vec<_> = stack.iter().map(|l| (l.clone(), target.clone())).collect();
    waits.extend(edges.iter().cloned());
    Some(Waiting(edges))
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waits = waits();
        for edge in &self.0 {
            if let Some(at) = waits.iter().position(|e| e == edge) {
                waits.swap_remove(at);
            }
        }
    }
}

fn waits() -> MutexGuard<'static, Vec<(Load, Load)>> {
    WAITS.lock().unwrap_or_else(|e| e.into_inner())
}
