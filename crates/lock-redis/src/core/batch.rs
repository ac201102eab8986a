//! Calls made together go to Redis as one command (auto-pipelining): the cache's reads as one
//! `HMGET`, rate-limit decisions as one script call.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fred::error::{Error, ErrorKind};
use tokio::sync::oneshot;

/// How calls of one kind are sent together.
pub(crate) trait Batched: Send + Sync + 'static {
    /// Calls of one group may share a command: one hash, one Cluster slot.
    type Group: Hash + Eq + Clone + Send + Sync + 'static;
    type Call: Send + 'static;
    /// What a call answers with when it succeeds.
    type Output: Send + 'static;

    /// Sends `calls` of `group` as one command: one reply per call, in their order.
    fn send(
        &self,
        group: &Self::Group,
        calls: Vec<Self::Call>,
    ) -> impl Future<Output = Vec<Reply<Self>>> + Send;

    /// Whether calls are collected at all; when not, each is sent alone.
    fn batching(&self) -> bool {
        true
    }
}

/// Collects concurrent calls per group. A call made while another is in flight joins the
/// collection of its group, or starts one: a task that yields once to the runtime, then sends
/// every call that joined (at most `max`) and whose caller still waits, and answers each. A
/// call made alone is sent alone, with no task. No call waits on another's future: a caller
/// that gives up drops only its own answer.
pub(crate) struct Batcher<B: Batched> {
    shared: Arc<Shared<B>>,
    /// Calls started and not yet answered, of every group.
    in_flight: AtomicUsize,
}

struct Shared<B: Batched> {
    batched: B,
    max: usize,
    /// Per group, the collection waiting for its task to send it.
    collecting: Mutex<HashMap<B::Group, Arc<Collection<B>>>>,
}

/// A call's reply: its output, or the command's error as fred reports it.
pub(crate) type Reply<B> = Result<<B as Batched>::Output, Error>;

type Waiters<B> = Vec<(<B as Batched>::Call, oneshot::Sender<Reply<B>>)>;

/// The calls that joined one collection.
struct Collection<B: Batched>(Mutex<Waiters<B>>);

impl<B: Batched> Collection<B> {
    fn waiters(&self) -> MutexGuard<'_, Waiters<B>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<B: Batched> Batcher<B> {
    /// Batches of at most `max` calls, sent by `batched`.
    pub(crate) fn new(batched: B, max: usize) -> Self {
        Batcher {
            shared: Arc::new(Shared {
                batched,
                max,
                collecting: Mutex::default(),
            }),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The reply to `call`, sent alone whatever else is in flight.
    ///
    /// # Errors
    /// The command's error, as fred reports it.
    pub(crate) async fn call_alone(&self, group: B::Group, call: B::Call) -> Reply<B> {
        let _flight = InFlight::enter(&self.in_flight);
        let reply = self.shared.batched.send(&group, vec![call]).await.pop();
        reply.unwrap_or_else(|| Err(unanswered()))
    }

    /// The reply to `call`, sent with whatever calls of `group` are made at the same time; a
    /// collection's task runs on `runtime`.
    ///
    /// # Errors
    /// The command's error, as fred reports it; `Canceled` when the collection's task was
    /// dropped before it answered (the runtime shut down).
    pub(crate) async fn call(
        &self,
        runtime: &tokio::runtime::Handle,
        group: B::Group,
        call: B::Call,
    ) -> Reply<B> {
        let flight = InFlight::enter(&self.in_flight);
        let shared = &self.shared;
        if flight.alone || !shared.batched.batching() {
            let reply = shared.batched.send(&group, vec![call]).await.pop();
            return reply.unwrap_or_else(|| Err(unanswered()));
        }
        let (sender, receiver) = oneshot::channel();
        let started = {
            let mut collecting = shared.lock();
            match collecting.get(&group) {
                Some(collection) if collection.waiters().len() < shared.max => {
                    collection.waiters().push((call, sender));
                    None
                }
                _ => {
                    let collection = Arc::new(Collection(Mutex::new(vec![(call, sender)])));
                    collecting.insert(group.clone(), Arc::clone(&collection));
                    Some(collection)
                }
            }
        };
        if let Some(collection) = started {
            // Built outside the task: a task dropped unpolled (a runtime shutting down) still
            // closes its collection.
            let unsent = Unsent {
                shared: Arc::clone(shared),
                group,
                collection,
            };
            runtime.spawn(async move {
                // Calls made meanwhile join before the collection is sent.
                tokio::task::yield_now().await;
                // A call whose caller is gone is not sent.
                let mut waiters = unsent.finish();
                waiters.retain(|(_, sender)| !sender.is_closed());
                let (calls, senders): (Vec<_>, Vec<_>) = waiters.into_iter().unzip();
                if calls.is_empty() {
                    return;
                }
                let replies = unsent.shared.batched.send(&unsent.group, calls).await;
                for (sender, reply) in senders.into_iter().zip(replies) {
                    let _ = sender.send(reply);
                }
            });
        }
        receiver.await.unwrap_or_else(|_| Err(unanswered()))
    }
}

impl<B: Batched> Shared<B> {
    fn lock(&self) -> MutexGuard<'_, HashMap<B::Group, Arc<Collection<B>>>> {
        self.collecting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops calls from joining `collection` and returns those that did.
    fn finish(&self, group: &B::Group, collection: &Arc<Collection<B>>) -> Waiters<B> {
        let mut collecting = self.lock();
        if collecting
            .get(group)
            .is_some_and(|current| Arc::ptr_eq(current, collection))
        {
            collecting.remove(group);
        }
        drop(collecting);
        std::mem::take(&mut *collection.waiters())
    }
}

/// A collection its task has not sent yet. Dropped unsent (the task dropped with its runtime),
/// it stops calls from joining and drops their answers, so that each caller gets `None`.
struct Unsent<B: Batched> {
    shared: Arc<Shared<B>>,
    group: B::Group,
    collection: Arc<Collection<B>>,
}

impl<B: Batched> Unsent<B> {
    fn finish(&self) -> Waiters<B> {
        self.shared.finish(&self.group, &self.collection)
    }
}

impl<B: Batched> Drop for Unsent<B> {
    fn drop(&mut self) {
        // Once sent, the collection is no longer in the map and holds no waiter.
        drop(self.finish());
    }
}

impl<B: Batched> fmt::Debug for Batcher<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher")
            .field("max", &self.shared.max)
            .field("in_flight", &self.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The error of a call whose collection's task was dropped before it answered.
fn unanswered() -> Error {
    Error::new(
        ErrorKind::Canceled,
        "the Redis client's Tokio runtime shut down before the call was answered",
    )
}

/// One call counted in flight while it lives.
struct InFlight<'a> {
    count: &'a AtomicUsize,
    /// No other call was in flight when this one started.
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
