//! Release notifications: one shared subscription per channel per client, counted, and always
//! taken down when the last waiter goes — including a waiter whose future was dropped.
//!
//! Two tasks run per client:
//! - the *manager* applies subscribe / unsubscribe requests one at a time, in order, so a
//!   `SUNSUBSCRIBE` can never overtake a later `SSUBSCRIBE` of the same channel;
//! - the *dispatcher* turns incoming messages into wake-ups of the channel's waiters, and wakes
//!   everyone after a reconnect or a lagging receive, since messages may have been missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use fred::clients::SubscriberClient;
use fred::prelude::*;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, mpsc, oneshot};

type Waiters = Arc<Mutex<HashMap<String, Arc<Notify>>>>;

enum Request {
    Subscribe {
        channel: String,
        reply: oneshot::Sender<Result<Arc<Notify>, Error>>,
    },
    Unsubscribe {
        channel: String,
    },
}

/// The subscription manager of one client.
#[derive(Debug)]
pub(crate) struct Subscriptions {
    requests: mpsc::UnboundedSender<Request>,
    waiters: Waiters,
}

/// A counted interest in one channel; dropping it gives the interest back.
#[derive(Debug)]
pub(crate) struct Subscription {
    channel: String,
    notify: Arc<Notify>,
    requests: mpsc::UnboundedSender<Request>,
}

impl Subscription {
    /// Woken (`notify_waiters`) on every message of the channel and after reconnects.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Unbounded send: never blocks, works from any thread. If the manager is gone, so is
        // the connection and its subscriptions.
        let _ = self.requests.send(Request::Unsubscribe {
            channel: std::mem::take(&mut self.channel),
        });
    }
}

impl Subscriptions {
    /// Starts the manager and dispatcher tasks on the current runtime. They stop, and the
    /// subscriber connection quits, once this and every [`Subscription`] are dropped.
    pub(crate) fn start(subscriber: SubscriberClient) -> Self {
        let (requests, rx) = mpsc::unbounded_channel();
        let waiters: Waiters = Arc::default();
        let dispatcher = tokio::spawn(dispatch(subscriber.clone(), Arc::clone(&waiters)));
        let resubscriber = subscriber.manage_subscriptions();
        tokio::spawn(manage(subscriber, rx, Arc::clone(&waiters), async move {
            dispatcher.abort();
            resubscriber.abort();
        }));
        Subscriptions { requests, waiters }
    }

    /// Subscribes to `channel` (or joins the existing subscription) and returns once the server
    /// has confirmed it, so a release published from now on wakes the caller.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription, Error> {
        let (reply, confirmed) = oneshot::channel();
        let gone = || Error::new(ErrorKind::Canceled, "the subscription manager has stopped");
        self.requests
            .send(Request::Subscribe {
                channel: channel.to_owned(),
                reply,
            })
            .map_err(|_| gone())?;
        let notify = confirmed.await.map_err(|_| gone())??;
        Ok(Subscription {
            channel: channel.to_owned(),
            notify,
            requests: self.requests.clone(),
        })
    }

    /// Channels with at least one local waiter (for tests and diagnostics).
    pub(crate) fn active_channels(&self) -> Vec<String> {
        lock(&self.waiters).keys().cloned().collect()
    }
}

fn lock(waiters: &Waiters) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
    // Only inserts and removes happen under this lock; a panic cannot leave it inconsistent.
    waiters.lock().unwrap_or_else(|p| p.into_inner())
}

async fn manage(
    subscriber: SubscriberClient,
    mut requests: mpsc::UnboundedReceiver<Request>,
    waiters: Waiters,
    on_exit: impl Future<Output = ()>,
) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    while let Some(request) = requests.recv().await {
        match request {
            Request::Subscribe { channel, reply } => {
                let count = counts.get(&channel).copied().unwrap_or(0);
                if count == 0 {
                    if let Err(error) = subscriber.ssubscribe(channel.as_str()).await {
                        let _ = reply.send(Err(error));
                        continue;
                    }
                }
                let notify = Arc::clone(lock(&waiters).entry(channel.clone()).or_default());
                counts.insert(channel.clone(), count + 1);
                if reply.send(Ok(notify)).is_err() {
                    // The waiter was dropped while we subscribed: give its interest back.
                    release(&subscriber, &mut counts, &waiters, channel).await;
                }
            }
            Request::Unsubscribe { channel } => {
                release(&subscriber, &mut counts, &waiters, channel).await;
            }
        }
    }
    on_exit.await;
    let _ = subscriber.quit().await;
}

async fn release(
    subscriber: &SubscriberClient,
    counts: &mut HashMap<String, usize>,
    waiters: &Waiters,
    channel: String,
) {
    let Some(count) = counts.get_mut(&channel) else {
        return;
    };
    *count -= 1;
    if *count > 0 {
        return;
    }
    counts.remove(&channel);
    lock(waiters).remove(&channel);
    if let Err(error) = subscriber.sunsubscribe(channel.as_str()).await {
        // The channel stays subscribed on the server until the connection closes; harmless,
        // messages for it find no waiter.
        tracing::debug!(%channel, %error, "SUNSUBSCRIBE failed");
    }
}

async fn dispatch(subscriber: SubscriberClient, waiters: Waiters) {
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    let wake_all = |waiters: &Waiters| {
        for notify in lock(waiters).values() {
            notify.notify_waiters();
        }
    };
    loop {
        tokio::select! {
            message = messages.recv() => match message {
                Ok(message) => {
                    if let Some(notify) = lock(&waiters).get(&*message.channel) {
                        notify.notify_waiters();
                    }
                }
                Err(RecvError::Lagged(_)) => wake_all(&waiters),
                Err(RecvError::Closed) => return,
            },
            reconnect = reconnects.recv() => match reconnect {
                Ok(_) | Err(RecvError::Lagged(_)) => wake_all(&waiters),
                Err(RecvError::Closed) => return,
            },
        }
    }
}
