//! Release notifications: one shared subscription per channel per client, kept alive across
//! reconnects, and taken down when the last waiter goes — including a waiter whose future was
//! dropped.
//!
//! The waiters of a channel form a FIFO queue, and only its *head* is woken (a release message,
//! a release by this client, a (re)confirmed subscription): one attempt per release instead of
//! one per waiter, and the client's waiters take the lock in the order they asked for it. A
//! waiter that leaves — granted, timed out, failed or dropped — wakes the next one.
//!
//! Each channel with waiters has a *driver* task that owns its subscription: it subscribes
//! (retrying with backoff until it succeeds), re-subscribes after a reconnect or when its slot
//! has moved to another master, and unsubscribes once the last waiter has left. One driver per
//! channel keeps a channel's `SSUBSCRIBE` and `SUNSUBSCRIBE` in order; separate drivers keep a
//! slow channel from delaying the others.
//! Waiters never block on the subscription longer than they choose: they wait for its
//! confirmation with their own deadline, and the driver wakes them when it confirms later.
//!
//! A *dispatcher* task turns incoming messages into wake-ups of the channel's waiters, and marks
//! a subscription unconfirmed after a reconnect (the server forgot it) or when its slot's
//! master is no longer the node that confirmed it.
//!
//! On a Cluster, a node that stops serving a slot (a slot migration, a failover) drops its
//! subscriptions with a push message that fred swallows, and a replica accepts an `SSUBSCRIBE`
//! but does not deliver what its master publishes. So a *cluster watch* task re-reads the
//! topology every second while anything is subscribed, and the dispatcher re-subscribes every
//! channel whose slot changed hands.
//!
//! *Listeners* (shared values' and caches' watches) hear every message of the channel, a
//! [`Heard::Lost`] when the subscription's connection fails, and a [`Heard::Missed`] whenever
//! messages may have gone unheard (a (re)confirmed subscription, a dispatcher that fell behind).
//!
//! *Fair* waiters (see `acquire/fair.rs`) share the channel's subscription but not the queue:
//! their order is kept in Redis. Each is registered under its owner token, and a release
//! message naming that token (`<fencing token>|<owner token>`) wakes exactly it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;

use crate::core::backoff::Backoff;

/// First retry delay of a failed `SSUBSCRIBE`; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(2);
/// On a Cluster, how often the topology is re-read while anything is subscribed (see
/// [`watch_cluster`]): the longest a waiter stays deaf after its slot moved to another master.
const CLUSTER_SYNC: Duration = Duration::from_secs(1);

/// The subscription manager of one client.
#[derive(Debug)]
pub(crate) struct Subscriptions {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    subscriber: SubscriberClient,
    channels: Mutex<HashMap<String, Channel>>,
    /// Bumped on every (re)connect of the subscriber connection: a confirmation obtained in an
    /// older generation may have been lost with its connection.
    generation: AtomicU64,
    next_waiter: AtomicU64,
    runtime: tokio::runtime::Handle,
}

#[derive(Debug)]
struct Channel {
    /// The waiters in arrival order; the front one is the head.
    waiters: VecDeque<Waiter>,
    /// Left by a head that left with the lock or after a failure, for the next head: no point
    /// trying before then unless a release comes first — the end of the lease it got, or a short
    /// back-off after Redis failed it.
    next_try_at: Option<Instant>,
    /// Fencing tokens of this client's own recent releases of the lock (at most
    /// [`OWN_RELEASES`]): it woke the head itself, so the release message that echoes one of
    /// them wakes nobody.
    own_releases: VecDeque<u64>,
    /// Whether the last release by this client reached other clients' subscriptions too: then
    /// the head is woken by the release message like their waiters, not ahead of them, so a busy
    /// queue here cannot starve them.
    others_waiting: bool,
    /// The head woken early by this client's release in flight (see
    /// [`Subscriptions::releasing`]).
    early_head: Option<u64>,
    /// Whether the server has confirmed the subscription in the current generation.
    confirmed: watch::Sender<bool>,
    /// On a Cluster, the master that confirmed it, as the subscriber's routing table had it.
    served_by: Option<Server>,
    /// Pokes the driver: the last waiter left, or the connection was re-established.
    driver: Arc<Notify>,
    /// This client's fair waiters on the channel, by owner token.
    fair: HashMap<String, Arc<Notify>>,
    /// What the channel's listeners hear; `None` while it has none.
    listeners: Option<broadcast::Sender<Heard>>,
}

/// What a [`Listener`] hears.
#[derive(Debug, Clone)]
pub(crate) enum Heard {
    /// A message published on the channel.
    Message(Value),
    /// Messages may have gone unheard: the subscription was (re)confirmed, or this client fell
    /// behind.
    Missed,
    /// The subscription's connection failed: messages go unheard until the next
    /// [`Heard::Missed`].
    Lost,
}

/// Messages a listener may fall behind by before it hears [`Heard::Missed`] instead.
const LISTENER_BACKLOG: usize = 256;

#[derive(Debug)]
struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

impl Channel {
    /// Whether nobody waits on the channel any more: its subscription can go.
    fn is_idle(&self) -> bool {
        self.waiters.is_empty() && self.fair.is_empty() && self.listeners.is_none()
    }

    /// Tells every listener that messages may have gone unheard.
    fn tell_missed(&self) {
        self.tell(Heard::Missed);
    }

    fn tell(&self, heard: Heard) {
        if let Some(listeners) = &self.listeners {
            let _ = listeners.send(heard);
        }
    }

    /// Wakes every fair waiter, to look again (a release may have gone unheard).
    fn wake_fair(&self) {
        self.fair.values().for_each(|wake| wake.notify_one());
    }

    /// Wakes the head (a stored permit if it is not sleeping right now, so nothing is lost).
    fn wake_head(&self) {
        if let Some(head) = self.waiters.front() {
            head.wake.notify_one();
        }
    }

    /// Wakes the head because the lock may be free now. Also drops the `next_try_at` the head
    /// before it left: a head woken both by its promotion and by the release of that grant sees
    /// one wake-up (permits do not add up), and must then try rather than sleep on.
    fn wake_head_to_try(&mut self) {
        self.next_try_at = None;
        self.wake_head();
    }
}

/// How this client's next waiter learns of a release by this client (see
/// [`Subscriptions::releasing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseWake {
    /// Woken as the release was sent.
    Early,
    /// Woken by the release message, like other clients' waiters.
    ByMessage,
    /// Woken when the reply confirms the release, if anyone waits by then.
    OnReply,
}

/// Own release tokens remembered per channel, for recognising their echoes.
const OWN_RELEASES: usize = 16;

/// One waiter's place in a channel's queue; dropping it leaves the queue.
#[derive(Debug)]
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    id: u64,
    wake: Arc<Notify>,
    confirmed: watch::Receiver<bool>,
    /// Handed to the next head on [`Drop`] (see [`Channel::next_try_at`]).
    next_try_at: Option<Instant>,
}

impl Subscription {
    /// Woken (`notify_one`, so a wake-up while the waiter is busy is kept) when this waiter is
    /// the head and the lock may be free: a release message, a release by this client, a
    /// (re)confirmed subscription after which no release can go unnoticed, or a head before it
    /// leaving. Never woken while it is not the head.
    pub(crate) fn woken(&self) -> &Notify {
        &self.wake
    }

    /// Whether this waiter is at the front of the queue: the one waiter that tries the lock.
    pub(crate) fn is_head(&self) -> bool {
        self.shared
            .channels()
            .get(&self.channel)
            .and_then(|c| c.waiters.front())
            .is_some_and(|w| w.id == self.id)
    }

    /// Takes what the previous head left: when to try at the earliest. `None` when it was
    /// cancelled or timed out (the release that woke it may be unconsumed: try now).
    pub(crate) fn take_next_try_at(&self) -> Option<Instant> {
        self.shared
            .channels()
            .get_mut(&self.channel)
            .and_then(|c| c.next_try_at.take())
    }

    /// Leaves the queue telling the next head not to try before `at` unless a release comes
    /// first: the end of the lease this waiter was granted, or a back-off after Redis failed
    /// its attempt (rather than the next head meeting the same failure at once).
    pub(crate) fn leave_next_try_at(mut self, at: Instant) {
        self.next_try_at = Some(at);
    }

    /// Waits until the server has confirmed the subscription, or `deadline`. Returns whether it
    /// is confirmed.
    pub(crate) async fn confirmed_by(&mut self, deadline: Instant) -> bool {
        tokio::time::timeout_at(deadline, self.confirmed.wait_for(|confirmed| *confirmed))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        let Some(channel) = channels.get_mut(&self.channel) else {
            return;
        };
        let was_head = channel.waiters.front().is_some_and(|w| w.id == self.id);
        channel.waiters.retain(|w| w.id != self.id);
        if channel.waiters.is_empty() {
            channel.next_try_at = None;
            channel.own_releases.clear();
            channel.others_waiting = false;
            channel.early_head = None;
            if channel.is_idle() {
                channel.driver.notify_one();
            }
        } else if was_head {
            // The next waiter takes over: it sleeps until `next_try_at` or a release, or — when
            // this head was cancelled or timed out — tries at once, since the release that woke
            // this one may be unconsumed.
            channel.next_try_at = self.next_try_at;
            channel.wake_head();
        }
    }
}

/// A listener's place on its channel; dropping it leaves.
#[derive(Debug)]
pub(crate) struct Listener {
    shared: Arc<Shared>,
    channel: String,
    heard: broadcast::Receiver<Heard>,
    /// The subscription was confirmed when this listener joined: no [`Heard::Missed`] comes
    /// for that confirmation.
    joined_confirmed: bool,
}

impl Listener {
    /// Whether the channel's subscription is confirmed now: messages published from now on
    /// are heard, or a [`Heard::Lost`] comes first.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.shared
            .channels()
            .get(&self.channel)
            .is_some_and(|entry| *entry.confirmed.borrow())
    }

    /// Whether the subscription was confirmed when this listener joined, so that no
    /// [`Heard::Missed`] comes first.
    pub(crate) fn joined_confirmed(&self) -> bool {
        self.joined_confirmed
    }

    /// The next message, or [`Heard::Missed`] where some may have gone unheard.
    pub(crate) async fn next(&mut self) -> Heard {
        match self.heard.recv().await {
            Ok(heard) => heard,
            // Fell behind, or the channel was taken down under it: either way, look again.
            Err(_) => Heard::Missed,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        let Some(channel) = channels.get_mut(&self.channel) else {
            return;
        };
        // This listener's receiver is still alive here: it is the last one when it is alone.
        if channel
            .listeners
            .as_ref()
            .is_some_and(|l| l.receiver_count() <= 1)
        {
            channel.listeners = None;
            if channel.is_idle() {
                channel.driver.notify_one();
            }
        }
    }
}

/// A fair waiter's registration on its channel; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct FairSubscription {
    shared: Arc<Shared>,
    channel: String,
    owner: String,
    wake: Arc<Notify>,
    confirmed: watch::Receiver<bool>,
}

impl FairSubscription {
    /// Whether the server has confirmed the channel's subscription (in the current
    /// connection generation): releases published from now on reach this waiter.
    pub(crate) fn is_confirmed(&self) -> bool {
        *self.confirmed.borrow()
    }

    /// Woken (`notify_one`) when a release or a leaving waiter names this waiter as the first
    /// of the queue, and whenever a release may have gone unheard (the subscription was
    /// (re)confirmed, messages were dropped).
    pub(crate) fn woken(&self) -> &Notify {
        &self.wake
    }
}

impl Drop for FairSubscription {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        let Some(channel) = channels.get_mut(&self.channel) else {
            return;
        };
        channel.fair.remove(&self.owner);
        if channel.is_idle() {
            channel.driver.notify_one();
        }
    }
}

impl Subscriptions {
    /// Starts the dispatcher on the current runtime. `commands` is the client's command
    /// connection: its Cluster topology changes (a slot moved, a failover) also re-subscribe.
    pub(crate) fn start(subscriber: SubscriberClient, commands: &Client) -> Self {
        let shared = Arc::new(Shared {
            subscriber,
            channels: Mutex::default(),
            generation: AtomicU64::new(0),
            next_waiter: AtomicU64::new(0),
            runtime: tokio::runtime::Handle::current(),
        });
        if shared.subscriber.is_clustered() {
            tokio::spawn(watch_cluster(Arc::downgrade(&shared)));
        }
        tokio::spawn(dispatch(
            Arc::downgrade(&shared),
            shared.subscriber.message_rx(),
            shared.subscriber.reconnect_rx(),
            shared.subscriber.error_rx(),
            [
                shared.subscriber.cluster_change_rx(),
                commands.cluster_change_rx(),
            ],
        ));
        Subscriptions { shared }
    }

    /// Joins the end of `channel`'s queue, subscribing to it if this is its first waiter.
    /// Returns at once; use [`Subscription::confirmed_by`] to wait for the server's
    /// confirmation.
    pub(crate) fn subscribe(&self, channel: &str) -> Subscription {
        let mut channels = self.shared.channels();
        let entry = self.shared.channel(&mut channels, channel);
        let id = self.shared.next_waiter.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        entry.waiters.push_back(Waiter {
            id,
            wake: Arc::clone(&wake),
        });
        Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            id,
            wake,
            confirmed: entry.confirmed.subscribe(),
            next_try_at: None,
        }
    }

    /// Registers the fair waiter with owner token `owner` on `channel`, subscribing to it if
    /// nobody waits there yet. Returns at once, like [`subscribe`](Self::subscribe).
    pub(crate) fn subscribe_fair(&self, channel: &str, owner: &str) -> FairSubscription {
        let mut channels = self.shared.channels();
        let entry = self.shared.channel(&mut channels, channel);
        let wake = Arc::new(Notify::new());
        entry.fair.insert(owner.to_owned(), Arc::clone(&wake));
        FairSubscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            owner: owner.to_owned(),
            wake,
            confirmed: entry.confirmed.subscribe(),
        }
    }

    /// Starts listening to every message of `channel`, subscribing to it if nobody of this
    /// client listens or waits there yet. The first thing heard is [`Heard::Missed`] once the
    /// server confirms the subscription, unless it was confirmed already.
    pub(crate) fn listen(&self, channel: &str) -> Listener {
        let mut channels = self.shared.channels();
        let entry = self.shared.channel(&mut channels, channel);
        let heard = entry
            .listeners
            .get_or_insert_with(|| broadcast::channel(LISTENER_BACKLOG).0)
            .subscribe();
        // Read under the lock the confirmation and its `Missed` are sent under.
        let joined_confirmed = *entry.confirmed.borrow();
        Listener {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            heard,
            joined_confirmed,
        }
    }

    /// Whether anyone of this client waits on `channel` (its subscription exists or is being
    /// made or taken down).
    pub(crate) fn is_subscribed(&self, channel: &str) -> bool {
        self.shared.channels().contains_key(channel)
    }

    /// How many of this client's acquisitions are queued on `channel`. With any, a new
    /// acquisition joins the end of the queue rather than trying first.
    pub(crate) fn waiters(&self, channel: &str) -> usize {
        self.shared
            .channels()
            .get(channel)
            .map_or(0, |c| c.waiters.len())
    }

    /// Called as this client sends the release of its grant with fencing token `token` (`None`
    /// when unknown); says how this client's next waiter learns of it:
    /// - nobody waits here: [`ReleaseWake::OnReply`];
    /// - other clients were waiting at the last release: [`ReleaseWake::ByMessage`] — the head
    ///   hears of it the way their waiters do, so a busy queue here cannot starve them;
    /// - else [`ReleaseWake::Early`]: the head is woken now, and its attempt travels right behind
    ///   the release; the token is remembered, so the release message echoing it wakes nobody.
    pub(crate) fn releasing(&self, channel: &str, token: Option<u64>) -> ReleaseWake {
        let mut channels = self.shared.channels();
        let Some(entry) = channels.get_mut(channel).filter(|c| !c.waiters.is_empty()) else {
            return ReleaseWake::OnReply;
        };
        // Only while this client's subscription is confirmed: the message must reach it.
        if entry.others_waiting && *entry.confirmed.borrow() {
            return ReleaseWake::ByMessage;
        }
        if let Some(token) = token {
            if entry.own_releases.len() == OWN_RELEASES {
                entry.own_releases.pop_front();
            }
            entry.own_releases.push_back(token);
        }
        entry.early_head = entry.waiters.front().map(|w| w.id);
        entry.wake_head_to_try();
        ReleaseWake::Early
    }

    /// Called when this client's release freed the lock; `receivers` is how many clients got the
    /// release message. Notes whether other clients are waiting, and wakes the head if
    /// [`releasing`](Self::releasing) said [`ReleaseWake::OnReply`] (a waiter that queued
    /// meanwhile).
    pub(crate) fn released(&self, channel: &str, receivers: u64, wake: ReleaseWake) {
        let mut channels = self.shared.channels();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        let confirmed = *entry.confirmed.borrow();
        entry.others_waiting = receivers > u64::from(confirmed);
        let early_head = entry.early_head.take();
        let wake_again = match wake {
            // A waiter may have queued meanwhile.
            ReleaseWake::OnReply => true,
            // A message this client may not hear (its subscription is being re-established)
            // must not be the head's only wake-up.
            ReleaseWake::ByMessage => !confirmed,
            // The head woken early is still waiting: usually its attempt's reply is just behind
            // this one, but if that attempt overtook the release (both reloaded after a
            // NOSCRIPT) it found the lock held, and the release's echo wakes nobody — so wake it
            // once more (a permit it drops if it was granted).
            ReleaseWake::Early => {
                early_head.is_some() && entry.waiters.front().map(|w| w.id) == early_head
            }
        };
        if wake_again {
            entry.wake_head_to_try();
        }
        tracing::trace!(%channel, receivers, confirmed, ?wake, "released");
    }

    /// The pub/sub connection.
    pub(crate) fn subscriber(&self) -> &SubscriberClient {
        &self.shared.subscriber
    }

    /// Channels this client is subscribed to or still taking down (for tests and diagnostics).
    pub(crate) fn active_channels(&self) -> Vec<String> {
        self.shared.channels().keys().cloned().collect()
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        // No acquisition can be waiting any more (they borrow the client), so every driver is
        // taking its channel down; the connection can go.
        let subscriber = self.shared.subscriber.clone();
        self.shared
            .runtime
            .spawn(async move { crate::core::connection::quit(&subscriber).await });
    }
}

impl Shared {
    /// `name`'s entry, created with its driver if nobody waits there yet.
    fn channel<'c>(
        self: &Arc<Self>,
        channels: &'c mut HashMap<String, Channel>,
        name: &str,
    ) -> &'c mut Channel {
        channels.entry(name.to_owned()).or_insert_with(|| {
            let entry = Channel {
                waiters: VecDeque::new(),
                next_try_at: None,
                own_releases: VecDeque::new(),
                others_waiting: false,
                early_head: None,
                confirmed: watch::Sender::new(false),
                served_by: None,
                driver: Arc::default(),
                fair: HashMap::new(),
                listeners: None,
            };
            self.runtime.spawn(drive(
                Arc::clone(self),
                name.to_owned(),
                Arc::clone(&entry.driver),
            ));
            entry
        })
    }

    /// On a Cluster, the master the subscriber's routing table gives `channel`'s slot.
    fn master_of(&self, channel: &str) -> Option<Server> {
        let state = self.subscriber.cached_cluster_state()?;
        let slot = fred::util::redis_keyslot(channel.as_bytes());
        state.get_server(slot).cloned()
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Plain field updates only; a panic cannot leave the map inconsistent.
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Owns one channel's subscription until its last waiter has left.
async fn drive(shared: Arc<Shared>, channel: String, poke: Arc<Notify>) {
    let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY);
    loop {
        let (wanted, confirmed) = {
            let channels = shared.channels();
            let entry = &channels[&channel];
            (!entry.is_idle(), *entry.confirmed.borrow())
        };
        if !wanted {
            // Unconfirmed from here on, so a waiter arriving meanwhile waits for the
            // re-subscription instead of trusting one that is being taken down.
            shared.channels()[&channel].confirmed.send_replace(false);
            if let Err(error) = shared.subscriber.sunsubscribe(channel.as_str()).await {
                // It stays subscribed on the server until the connection closes: harmless,
                // its messages find no waiter.
                tracing::debug!(%channel, %error, "SUNSUBSCRIBE failed");
            }
            let mut channels = shared.channels();
            if channels[&channel].is_idle() {
                channels.remove(&channel);
                return;
            }
            // A waiter arrived while we unsubscribed: subscribe again.
            continue;
        }
        if confirmed {
            // Subscribed and wanted: sleep until the last waiter leaves, a reconnect, or (on a
            // Cluster) the slot's move.
            poke.notified().await;
            continue;
        }
        let generation = shared.generation.load(Ordering::SeqCst);
        let route = shared.master_of(&channel);
        match shared.subscriber.ssubscribe(channel.as_str()).await {
            Ok(()) => {
                retry.reset();
                // Compared under the lock the dispatcher bumps it under, so a reconnect cannot
                // slip between the check and the confirmation.
                let mut channels = shared.channels();
                // A MOVED reply re-routed it meanwhile: send it again, to be sure where it is.
                let moved = shared.master_of(&channel) != route;
                if shared.generation.load(Ordering::SeqCst) == generation && !moved {
                    if let Some(entry) = channels.get_mut(&channel) {
                        entry.confirmed.send_replace(true);
                        entry.served_by = route;
                        // Releases published before the confirmation were missed: have the
                        // head and the fair waiters look.
                        entry.wake_head_to_try();
                        entry.wake_fair();
                        entry.tell_missed();
                    }
                }
                // Otherwise it was confirmed on a connection since replaced: subscribe again.
            }
            Err(error) => {
                if error.kind() == &ErrorKind::Timeout {
                    // fred's unresponsive-connection check skips pub/sub commands, so a
                    // connection a middlebox silently dropped would be retried forever: replace
                    // it (its reconnect re-subscribes every channel).
                    tracing::debug!(%channel, "SSUBSCRIBE timed out; replacing the pub/sub connection");
                    let _ = shared.subscriber.force_reconnection().await;
                }
                let delay = retry.next_delay();
                tracing::debug!(%channel, %error, retry_in_ms = delay.as_millis(), "SSUBSCRIBE failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = poke.notified() => {}
                }
            }
        }
    }
}

/// Re-reads the Cluster's topology every [`CLUSTER_SYNC`] while anything is subscribed; the
/// dispatcher hears the change.
async fn watch_cluster(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(CLUSTER_SYNC).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.channels().is_empty() {
            continue;
        }
        if let Err(error) = shared.subscriber.sync_cluster().await {
            tracing::debug!(%error, "re-reading the Cluster topology failed");
        }
    }
}

/// Wakes waiters on messages; after a (re)connect marks every subscription unconfirmed so its
/// driver subscribes again, and after a Cluster topology change those whose slot moved (a shard
/// channel's subscription lives on the master serving its slot, and Redis drops it when the
/// slot moves).
async fn dispatch(
    shared: Weak<Shared>,
    mut messages: tokio::sync::broadcast::Receiver<fred::types::Message>,
    mut reconnects: tokio::sync::broadcast::Receiver<Server>,
    mut errors: tokio::sync::broadcast::Receiver<(Error, Option<Server>)>,
    [mut subscriber_topology, mut command_topology]: [tokio::sync::broadcast::Receiver<Vec<fred::types::ClusterStateChange>>;
        2],
) {
    loop {
        enum Event {
            /// A message: its channel, and as a release message the released grant's fencing
            /// token and the first fair waiter's owner token when one is queued.
            Message(String, Value, Option<u64>, Option<String>),
            WakeAll,
            Reconnected,
            /// The Cluster's topology was read again: a slot may have moved.
            Topology,
            /// The connection failed: subscriptions are gone until the reconnect.
            Lost,
        }
        let event = tokio::select! {
            message = messages.recv() => match message {
                Ok(message) => {
                    let (token, first_fair) = parse_release(&message.value);
                    Event::Message(message.channel.to_string(), message.value, token, first_fair)
                }
                Err(RecvError::Lagged(_)) => Event::WakeAll,
                Err(RecvError::Closed) => return,
            },
            reconnect = reconnects.recv() => match reconnect {
                Ok(_) | Err(RecvError::Lagged(_)) => Event::Reconnected,
                Err(RecvError::Closed) => return,
            },
            error = errors.recv() => match error {
                Ok(_) | Err(RecvError::Lagged(_)) => Event::Lost,
                Err(RecvError::Closed) => return,
            },
            // A closed topology stream (never on a single server) only disables its branch.
            Ok(_) = subscriber_topology.recv() => Event::Topology,
            Ok(_) = command_topology.recv() => Event::Topology,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut channels = shared.channels();
        if matches!(event, Event::Reconnected | Event::Lost) {
            shared.generation.fetch_add(1, Ordering::SeqCst);
        }
        match event {
            Event::Message(channel, value, token, first_fair) => {
                if let Some(entry) = channels.get_mut(&channel) {
                    if let Some(listeners) = &entry.listeners {
                        let _ = listeners.send(Heard::Message(value));
                    }
                    if let Some(wake) = first_fair.and_then(|owner| entry.fair.get(&owner)) {
                        wake.notify_one();
                    }
                    // The echo of this client's own release: the head was woken already.
                    let own = token.and_then(|t| entry.own_releases.iter().position(|o| *o == t));
                    match own {
                        Some(i) => {
                            entry.own_releases.remove(i);
                        }
                        None => entry.wake_head_to_try(),
                    }
                }
            }
            // Messages may have been dropped: every head and fair waiter re-checks.
            Event::WakeAll => channels.values_mut().for_each(|entry| {
                entry.wake_head_to_try();
                entry.wake_fair();
                entry.tell_missed();
            }),
            // Also a move no error came before (Sentinel's switch to a new primary): listeners
            // hear that messages go unheard until the subscription is confirmed again.
            Event::Reconnected => {
                for entry in channels.values() {
                    entry.confirmed.send_replace(false);
                    entry.tell(Heard::Lost);
                    entry.driver.notify_one();
                }
            }
            // Only the channels whose slot another master serves now: the others' subscriptions
            // stand, and re-subscribing them would tell their listeners of missed messages.
            // The moved ones went deaf when the slot moved: their listeners hear so at once,
            // not once the new subscription is confirmed.
            Event::Topology => {
                for (name, entry) in channels.iter() {
                    if *entry.confirmed.borrow() && entry.served_by != shared.master_of(name) {
                        entry.confirmed.send_replace(false);
                        entry.tell(Heard::Lost);
                        entry.driver.notify_one();
                    }
                }
            }
            // The reconnect that follows has the drivers subscribe again.
            Event::Lost => {
                for entry in channels.values() {
                    entry.confirmed.send_replace(false);
                    entry.tell(Heard::Lost);
                }
            }
        }
    }
}

/// Splits a release message, `<fencing token>` or `<fencing token>|<owner token of the first
/// fair waiter>`, into its parts (`None` for a part that is missing or malformed).
fn parse_release(value: &Value) -> (Option<u64>, Option<String>) {
    let Some(text) = value.as_str() else {
        return (value.as_u64(), None);
    };
    let (token, first_fair) = match text.split_once('|') {
        Some((token, owner)) => (token, Some(owner.to_owned())),
        None => (&*text, None),
    };
    (token.parse().ok(), first_fair)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_messages_carry_a_token_and_maybe_the_first_fair_waiter() {
        let parse = |s: &str| parse_release(&Value::from(s));
        assert_eq!(
            parse("1764500000123456"),
            (Some(1_764_500_000_123_456), None)
        );
        assert_eq!(
            parse("17|pod-a/1f/3"),
            (Some(17), Some("pod-a/1f/3".to_owned()))
        );
        // A leaving waiter's message has no grant behind it.
        assert_eq!(
            parse("0|pod-b/2/9"),
            (Some(0), Some("pod-b/2/9".to_owned()))
        );
        assert_eq!(parse("junk"), (None, None));
        assert_eq!(parse_release(&Value::Integer(5)), (Some(5), None));
    }
}
