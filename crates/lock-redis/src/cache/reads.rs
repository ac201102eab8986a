//! Reads of one cache made together go to Redis as one `HMGET` (auto-pipelining).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fred::bytes::Bytes;
use fred::prelude::*;
use tokio::sync::oneshot;

use crate::core::error::Refusal;

type Reply = Result<Option<Bytes>, Error>;
type Waiters = Vec<(String, oneshot::Sender<Reply>)>;

/// The most reads one `HMGET` carries: a full collection is sent while the next reads start
/// another, so that several are in flight at once. 8 to 32 measured alike with 32 readers
/// (docs/performance.md, "Cache").
const MAX_BATCH: usize = 16;

/// Collects the reads of each cache. A read made while another is in flight joins the
/// collection of its cache, or starts one: a task that yields once to the runtime, then sends
/// the fields of every read that joined as one `HMGET` and answers each. A read made alone is
/// one `HGET` of its own; so is every read once Redis refused `HMGET` to this user (an ACL
/// written for an earlier version). No read waits on another's future: a caller that gives up
/// drops only its own answer.
#[derive(Debug, Default)]
pub(crate) struct Reads {
    shared: Arc<Shared>,
    /// Reads started and not yet answered, of every cache.
    in_flight: AtomicUsize,
}

#[derive(Debug, Default)]
struct Shared {
    /// Per hash, the collection waiting for its task to send it.
    collecting: Mutex<HashMap<String, Arc<Collection>>>,
    /// Set when Redis refused `HMGET` to this user: reads go one by one from then on.
    one_by_one: AtomicBool,
}

/// The reads that joined one collection.
#[derive(Debug, Default)]
struct Collection(Mutex<Waiters>);

impl Collection {
    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Reads {
    /// The field `key` of the hash `hash`, read with whatever reads of `hash` are made at the
    /// same time; a collection's task runs on `runtime`.
    ///
    /// # Errors
    /// The command's error, as fred reports it.
    pub(crate) async fn hget(
        &self,
        client: &Client,
        runtime: &tokio::runtime::Handle,
        hash: &str,
        key: &str,
    ) -> Reply {
        let flight = InFlight::enter(&self.in_flight);
        if flight.alone || self.shared.one_by_one.load(Ordering::Relaxed) {
            return client.hget(hash, key).await;
        }
        let (sender, receiver) = oneshot::channel();
        let started = {
            let mut collecting = self.shared.lock();
            match collecting.get(hash) {
                Some(collection) if collection.waiters().len() < MAX_BATCH => {
                    collection.waiters().push((key.to_owned(), sender));
                    None
                }
                _ => {
                    let collection =
                        Arc::new(Collection(Mutex::new(vec![(key.to_owned(), sender)])));
                    collecting.insert(hash.to_owned(), Arc::clone(&collection));
                    Some(collection)
                }
            }
        };
        if let Some(collection) = started {
            let (shared, client, hash) =
                (Arc::clone(&self.shared), client.clone(), hash.to_owned());
            runtime.spawn(async move {
                // Reads made meanwhile join before the collection is sent.
                tokio::task::yield_now().await;
                let waiters = shared.finish(&hash, &collection);
                shared.send(&client, &hash, waiters).await;
            });
        }
        match receiver.await {
            Ok(reply) => reply,
            // The task did not answer (the runtime is shutting down): read alone.
            Err(_) => client.hget(hash, key).await,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Collection>>> {
        self.collecting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops reads from joining `collection` and returns those that did.
    fn finish(&self, hash: &str, collection: &Arc<Collection>) -> Waiters {
        let mut collecting = self.lock();
        if collecting
            .get(hash)
            .is_some_and(|current| Arc::ptr_eq(current, collection))
        {
            collecting.remove(hash);
        }
        drop(collecting);
        std::mem::take(&mut *collection.waiters())
    }

    /// Reads the fields of `waiters` from `hash` and answers each.
    async fn send(&self, client: &Client, hash: &str, waiters: Waiters) {
        if let [(key, _)] = waiters.as_slice() {
            let reply = client.hget(hash, key.as_str()).await;
            if let Some((_, sender)) = waiters.into_iter().next() {
                let _ = sender.send(reply);
            }
            return;
        }
        let fields: Vec<&str> = waiters.iter().map(|(key, _)| key.as_str()).collect();
        let reply: Result<Vec<Option<Bytes>>, Error> = client.hmget(hash, fields).await;
        match reply {
            Ok(values) if values.len() == waiters.len() => {
                for ((_, sender), value) in waiters.into_iter().zip(values) {
                    let _ = sender.send(Ok(value));
                }
            }
            Ok(values) => {
                let error = Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "HMGET of {} fields answered {}",
                        waiters.len(),
                        values.len()
                    ),
                );
                answer_all(waiters, &error);
            }
            Err(error) if refuses_hmget(&error) => {
                if !self.one_by_one.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%error, "Redis refused HMGET to this user: cache reads go one by one (grant +hmget, docs/cache.md)");
                }
                for (key, sender) in waiters {
                    let _ = sender.send(client.hget(hash, key).await);
                }
            }
            Err(error) => answer_all(waiters, &error),
        }
    }
}

/// Whether `error` refuses the `HMGET` command itself to this user, not a key.
fn refuses_hmget(error: &Error) -> bool {
    Refusal::of_reply(error) == Some(Refusal::NoPermission)
        && error.details().to_ascii_lowercase().contains("'hmget'")
}

fn answer_all(waiters: Waiters, error: &Error) {
    for (_, sender) in waiters {
        let _ = sender.send(Err(error.clone()));
    }
}

/// One read counted in flight while it lives.
struct InFlight<'a> {
    count: &'a AtomicUsize,
    /// No other read was in flight when this one started.
    alone: bool,
}

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        let alone = count.fetch_add(1, Ordering::Relaxed) == 0;
        InFlight { count, alone }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}
