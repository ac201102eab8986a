//! Per-key load coalescing in one process: one caller loads, the others wait for its outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::cache::error::CacheError;

/// How a load ended, for the callers that waited on it.
pub(crate) type Landed<V> = Result<V, CacheError>;

/// The loads in flight, by key.
#[derive(Debug)]
pub(crate) struct Flights<V> {
    by_key: Mutex<HashMap<String, watch::Receiver<Option<Landed<V>>>>>,
}

/// A caller's part in a key's load.
pub(crate) enum Joined<V> {
    /// This caller loads, and lands the outcome for the others.
    Leader(Leader<V>),
    /// Another caller loads: wait on it.
    Follower(watch::Receiver<Option<Landed<V>>>),
}

/// The loading caller's duty: [`Leader::land`] the outcome. Dropped without landing (the caller
/// was cancelled), it lets a waiting caller load instead.
pub(crate) struct Leader<V> {
    flights: Arc<Flights<V>>,
    key: String,
    sender: watch::Sender<Option<Landed<V>>>,
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
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(receiver) = by_key.get(key) {
            if receiver.has_changed().is_ok() {
                return Joined::Follower(receiver.clone());
            }
        }
        let (sender, receiver) = watch::channel(None);
        by_key.insert(key.to_owned(), receiver);
        Joined::Leader(Leader {
            flights: Arc::clone(self),
            key: key.to_owned(),
            sender,
        })
    }
}

impl<V> Leader<V> {
    /// Hands `landed` to every caller that waited.
    pub(crate) fn land(self, landed: Landed<V>) {
        self.sender.send_replace(Some(landed));
    }
}

impl<V> Drop for Leader<V> {
    fn drop(&mut self) {
        let mut by_key = self
            .flights
            .by_key
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if by_key
            .get(&self.key)
            .is_some_and(|r| r.same_channel(&self.sender.subscribe()))
        {
            by_key.remove(&self.key);
        }
    }
}

/// Waits for the leader's outcome; `None` when it was cancelled before landing one.
pub(crate) async fn follow<V: Clone>(
    mut receiver: watch::Receiver<Option<Landed<V>>>,
) -> Option<Landed<V>> {
    match receiver.wait_for(Option::is_some).await {
        Ok(landed) => landed.clone(),
        Err(_) => None,
    }
}
