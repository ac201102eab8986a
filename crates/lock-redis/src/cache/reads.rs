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

/// The most reads one `HMGET` carries: a full collection is sent by its leader while the next
/// reads start another, so that several are in flight at once. 8 to 32 measured alike with 32
/// readers (docs/performance.md, "Cache").
const MAX_BATCH: usize = 16;

/// The reads of each cache waiting to go with a leader's. A read made while another is in
/// flight leads a collection: it yields once to the runtime, then sends its field and those of
/// the reads of the same cache made meanwhile as one `HMGET`. A read made alone is one `HGET`,
/// with no yield; so is every read once Redis refused `HMGET` to this user (an ACL written for
/// an earlier version).
#[derive(Debug, Default)]
pub(crate) struct Reads {
    /// Per hash, the collection a leader is gathering.
    collecting: Mutex<HashMap<String, Arc<Collection>>>,
    /// Set when Redis refused `HMGET` (`NOPERM`): reads go one by one from then on.
    one_by_one: AtomicBool,
    /// Reads started and not yet answered, of every cache.
    in_flight: AtomicUsize,
}

/// The reads that joined one leader.
#[derive(Debug, Default)]
struct Collection(Mutex<Waiters>);

impl Collection {
    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Reads {
    /// The field `key` of the hash `hash`, read with whatever reads of `hash` are made at the
    /// same time.
    ///
    /// # Errors
    /// The command's error, as fred reports it.
    pub(crate) async fn hget(&self, client: &Client, hash: &str, key: &str) -> Reply {
        let flight = InFlight::enter(&self.in_flight);
        if flight.alone || self.one_by_one.load(Ordering::Relaxed) {
            return client.hget(hash, key).await;
        }
        let joined = {
            let mut collecting = self.lock();
            match collecting.get(hash) {
                Some(collection) if collection.waiters().len() + 1 < MAX_BATCH => {
                    let (sender, receiver) = oneshot::channel();
                    collection.waiters().push((key.to_owned(), sender));
                    Ok(receiver)
                }
                _ => {
                    let collection = Arc::<Collection>::default();
                    collecting.insert(hash.to_owned(), Arc::clone(&collection));
                    Err(collection)
                }
            }
        };
        let collection = match joined {
            Ok(receiver) => {
                // A leader dropped before it answered (its caller gave up): read alone.
                return match receiver.await {
                    Ok(reply) => reply,
                    Err(_) => client.hget(hash, key).await,
                };
            }
            Err(collection) => collection,
        };
        let leading = Leading {
            reads: self,
            hash,
            collection,
        };
        tokio::task::yield_now().await;
        let waiters = leading.finish();
        if waiters.is_empty() {
            return client.hget(hash, key).await;
        }
        let mut fields = Vec::with_capacity(waiters.len() + 1);
        fields.push(key);
        fields.extend(waiters.iter().map(|(field, _)| field.as_str()));
        let reply: Result<Vec<Option<Bytes>>, Error> = client.hmget(hash, fields).await;
        match reply {
            Ok(values) if values.len() == waiters.len() + 1 => {
                let mut values = values.into_iter();
                let own = values.next().flatten();
                for ((_, sender), value) in waiters.into_iter().zip(values) {
                    let _ = sender.send(Ok(value));
                }
                Ok(own)
            }
            Ok(values) => {
                let error = Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "HMGET of {} fields answered {}",
                        waiters.len() + 1,
                        values.len()
                    ),
                );
                answer_all(waiters, &error);
                Err(error)
            }
            Err(error) if Refusal::of_reply(&error) == Some(Refusal::NoPermission) => {
                if !self.one_by_one.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%error, "Redis refused HMGET to this user: cache reads go one by one (grant +hmget, docs/cache.md)");
                }
                drop(waiters); // each reads alone
                client.hget(hash, key).await
            }
            Err(error) => {
                answer_all(waiters, &error);
                Err(error)
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Collection>>> {
        self.collecting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn answer_all(waiters: Waiters, error: &Error) {
    for (_, sender) in waiters {
        let _ = sender.send(Err(error.clone()));
    }
}

/// A leader gathering `collection` for `hash`. Dropped before [`Leading::finish`] (its caller
/// gave up while it yielded), it ends the collection: the reads that joined read alone.
struct Leading<'a> {
    reads: &'a Reads,
    hash: &'a str,
    collection: Arc<Collection>,
}

impl Leading<'_> {
    /// Ends the collection and returns the reads that joined it.
    fn finish(self) -> Waiters {
        self.end();
        std::mem::take(&mut *self.collection.waiters())
    }

    /// Stops reads from joining: the next read of the hash leads a collection of its own.
    fn end(&self) {
        let mut collecting = self.reads.lock();
        if collecting
            .get(self.hash)
            .is_some_and(|current| Arc::ptr_eq(current, &self.collection))
        {
            collecting.remove(self.hash);
        }
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.end();
        self.collection.waiters().clear();
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
