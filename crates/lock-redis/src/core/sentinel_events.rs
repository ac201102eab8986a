//! Following the Sentinels' `+switch-master` events, as Lettuce and Jedis do.
//!
//! After `SENTINEL FAILOVER` the Sentinels promote the replica at once, but send `REPLICAOF` to
//! the old master only 10 to 20 s later. Meanwhile the old master still answers `role:master`
//! and accepts writes: a client still connected to it would keep granting and renewing locks
//! there while new clients are granted the same locks on the new master. No `READONLY` reply
//! warns it in that window, so each client of a `redis-sentinel://` address also subscribes to
//! `+switch-master` on every Sentinel of its address and, when one names its service, moves its
//! command and pub/sub connections to the new master at once.
//!
//! The subscriptions run in the background: Sentinels that do not answer never hold the lock
//! client up (they are retried with a backoff, 250 ms doubling to 5 s), and the `READONLY`
//! fallback of `RedisCore::follow_if_demoted` still applies. The tasks end when the client's
//! core is dropped (its last user gone).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use lock_core::LockError;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::core::address::RedisAddress;
use crate::core::backoff::Backoff;
use crate::core::connection::{Endpoint, client_builder, tls_config};

/// The Sentinels' channel announcing a new master:
/// `<service> <old-ip> <old-port> <new-ip> <new-port>`.
pub(crate) const SWITCH_CHANNEL: &str = "+switch-master";

/// How long to keep trying to reach the master a `+switch-master` named (a Sentinel asked by
/// fred may not have learnt of the switch yet, and still name the old master).
const FOLLOW_FOR: Duration = Duration::from_secs(60);

/// Reconnection policy towards a Sentinel: forever, 250 ms doubling to 5 s.
fn sentinel_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 250, 5_000, 2)
}

/// The master a `+switch-master` message named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Switch {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl std::fmt::Display for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The new master of a `+switch-master` payload, if it is about `service`.
pub(crate) fn parse_switch(payload: &str, service: &str) -> Option<Switch> {
    let mut words = payload.split_whitespace();
    if words.next()? != service {
        return None;
    }
    let _old_host = words.next()?;
    let _old_port = words.next()?;
    let host = words.next()?.to_owned();
    let port = words.next()?.parse().ok()?;
    Some(Switch { host, port })
}

/// Subscribers to the Sentinels of a `redis-sentinel://` address, built but not connected.
pub(crate) struct SwitchWatch {
    service: String,
    /// Each Sentinel of the address (`host:port`, for logs) and a subscriber client on it.
    sentinels: Vec<(String, SubscriberClient)>,
    command_timeout: Duration,
}

/// Moves both connections of a Sentinel client to the master the Sentinels name now: fred asks
/// a Sentinel for the master and checks its `ROLE`. The pub/sub connection moves too, since
/// releases published on the new master never reach a subscriber of the old one.
///
/// # Errors
/// The first reconnection error.
pub(crate) async fn reconnect_both(
    client: &Client,
    subscriber: &SubscriberClient,
) -> Result<(), Error> {
    let (commands, pubsub) =
        tokio::join!(client.force_reconnection(), subscriber.force_reconnection());
    commands.and(pubsub)
}

/// Whether `client` is connected to `target`.
fn connected_to<C: ClientLike>(client: &C, target: &Switch) -> bool {
    client.is_connected()
        && client
            .active_connections()
            .iter()
            .any(|server| server.port == target.port && &*server.host == target.host.as_str())
}

impl SwitchWatch {
    /// Subscriber clients for each Sentinel of `config`'s address (its first host and each
    /// `node=`), authenticating as fred does towards the Sentinels (`sentinelUsername`,
    /// `sentinelPassword`), with TLS for `rediss-sentinel://`. `None` for other addresses.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] as for the lock's own clients.
    pub(crate) fn build(config: &Endpoint<'_>) -> Result<Option<SwitchWatch>, LockError> {
        let address = config.address;
        let ServerConfig::Sentinel {
            hosts,
            service_name,
            username,
            password,
        } = &address.client_config().server
        else {
            return Ok(None);
        };
        let tls = tls_config(config, address.tls())?;
        let mut sentinels = Vec::with_capacity(hosts.len());
        for host in hosts {
            let at = format!("{}:{}", host.host, host.port);
            let sentinel_config = Config {
                server: ServerConfig::Centralized {
                    server: host.clone(),
                },
                username: username.clone(),
                password: password.clone(),
                tls: tls.clone(),
                fail_fast: false,
                ..Config::default()
            };
            let builder = client_builder(sentinel_config, sentinel_policy(), config);
            let subscriber = builder.build_subscriber_client().map_err(|e| {
                LockError::invalid_argument(
                    "address",
                    config.address.to_string(),
                    config.address.scrub(e.details()),
                )
            })?;
            sentinels.push((at, subscriber));
        }
        Ok(Some(SwitchWatch {
            service: service_name.clone(),
            sentinels,
            command_timeout: config.command_timeout,
        }))
    }

    /// Connects to the Sentinels and follows their `+switch-master` events for `connections` in
    /// the background, until the sender of `alive` is dropped (with the client's core).
    pub(crate) fn start(self, connections: Connections, alive: watch::Receiver<()>) {
        let address = connections.address.clone();
        let (switches, received) = mpsc::channel(16);
        let (stop, stopped) = watch::channel(());
        for (at, sentinel) in self.sentinels {
            tokio::spawn(listen(
                sentinel,
                at,
                self.service.clone(),
                switches.clone(),
                stopped.clone(),
                self.command_timeout,
                address.clone(),
            ));
        }
        drop(switches);
        tokio::spawn(follow_switches(
            connections,
            alive,
            received,
            stop,
            self.command_timeout,
        ));
    }
}

/// Whether a `SUBSCRIBE` took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Confirmed {
    Yes,
    /// Not subscribed: the Sentinel refused it (an ACL without `+subscribe &+switch-master`).
    Refused,
    /// `PING` is not allowed either: assume it did.
    Unknown,
}

/// fred reports a `SUBSCRIBE` as done once sent and expects no reply to it: it drops the
/// confirmation, but a refusal (`NOPERM`) is taken as the reply to the next command. So a `PING`
/// tells: `["pong", ""]` on a subscribed RESP2 connection, the `SUBSCRIBE`'s `NOPERM` if it was
/// refused (the `PING`'s own reply is then left over: reconnect before trying again), or its own
/// `NOPERM` where `PING` is not allowed.
async fn confirm_subscribed(sentinel: &SubscriberClient) -> Result<Confirmed, Error> {
    match sentinel.ping::<Value>(None).await {
        Ok(Value::Array(_)) => Ok(Confirmed::Yes),
        Ok(_) => Ok(Confirmed::Refused),
        Err(error) if error.details().contains("NOPERM") => {
            if error.details().to_ascii_lowercase().contains("'ping'") {
                Ok(Confirmed::Unknown)
            } else {
                Ok(Confirmed::Refused)
            }
        }
        Err(error) => Err(error),
    }
}

/// One Sentinel: keeps a `SUBSCRIBE +switch-master` on it (again after every reconnection) and
/// forwards the switches of `service`, until `stop` is dropped.
async fn listen(
    sentinel: SubscriberClient,
    at: String,
    service: String,
    switches: mpsc::Sender<Switch>,
    mut stop: watch::Receiver<()>,
    command_timeout: Duration,
    address: RedisAddress,
) {
    let mut messages = sentinel.message_rx();
    let mut reconnects = sentinel.reconnect_rx();
    let mut errors = sentinel.error_rx();
    // Detached: the connection task ends with `quit` below.
    drop(sentinel.connect());
    let mut subscribed = false;
    // SUBSCRIBE retries: 500 ms doubling to 30 s; a refusal (NOPERM) is retried every minute.
    let mut next_try = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    let mut warned = false;
    let mut reset = false;
    let mut retry = tokio::time::interval(Duration::from_millis(500));
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if reset && Instant::now() >= next_try {
            // A fresh connection, without the reply a refusal left over.
            reset = false;
            let _ = tokio::time::timeout(command_timeout, sentinel.force_reconnection()).await;
        }
        if !subscribed && !reset && sentinel.is_connected() && Instant::now() >= next_try {
            let outcome = tokio::time::timeout(command_timeout, async {
                sentinel.subscribe(SWITCH_CHANNEL).await?;
                confirm_subscribed(&sentinel).await
            })
            .await;
            match outcome {
                Ok(Ok(confirmed @ (Confirmed::Yes | Confirmed::Unknown))) => {
                    subscribed = true;
                    backoff.reset();
                    tracing::debug!(
                        sentinel = %at, ?confirmed,
                        "following the Sentinel's +switch-master events"
                    );
                }
                Ok(Ok(Confirmed::Refused)) => {
                    if !warned {
                        tracing::warn!(
                            sentinel = %at,
                            "the Sentinel refused SUBSCRIBE +switch-master (NOPERM?): after a manual failover this client keeps using the old master until it is demoted; grant the Sentinel user `+subscribe &+switch-master`"
                        );
                        warned = true;
                    }
                    next_try = Instant::now() + Duration::from_secs(60);
                    reset = true;
                }
                Ok(Err(error)) => {
                    tracing::debug!(
                        sentinel = %at, error = %address.scrub(&error.to_string()),
                        "SUBSCRIBE +switch-master failed; retrying"
                    );
                    next_try = Instant::now() + backoff.next_delay();
                }
                Err(_) => {
                    tracing::debug!(sentinel = %at, "SUBSCRIBE +switch-master timed out; retrying");
                    next_try = Instant::now() + backoff.next_delay();
                }
            }
        }
        tokio::select! {
            _ = stop.changed() => break,
            message = messages.recv() => match message {
                Ok(message) => {
                    if &*message.channel != SWITCH_CHANNEL {
                        continue;
                    }
                    let Some(payload) = message.value.as_string() else { continue };
                    if let Some(switch) = parse_switch(&payload, &service) {
                        tracing::debug!(sentinel = %at, master = %switch, "+switch-master");
                        if switches.send(switch).await.is_err() {
                            break;
                        }
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => break,
            },
            reconnect = reconnects.recv() => match reconnect {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    subscribed = false;
                }
                Err(_) => break,
            },
            error = errors.recv() => match error {
                Ok((error, _)) => {
                    subscribed = false;
                    tracing::debug!(
                        sentinel = %at, error = %address.scrub(&error.to_string()),
                        "Sentinel connection failed; reconnecting"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => break,
            },
            _ = retry.tick() => {}
        }
    }
    let _ = tokio::time::timeout(command_timeout, sentinel.quit()).await;
}

/// What following a switch moves: both connections of one client.
#[derive(Debug, Clone)]
pub(crate) struct Connections {
    pub(crate) client: Client,
    pub(crate) subscriber: SubscriberClient,
    /// Set while both connections are being moved: one reconnection at a time, shared with the
    /// `READONLY` path.
    pub(crate) following_master: Arc<AtomicBool>,
    /// The address, for scrubbing its secrets out of errors.
    pub(crate) address: RedisAddress,
}

/// Receives the switches from all Sentinels and moves the client to each new master; ends when
/// `alive`'s sender is dropped (dropping `_stop` ends the listeners).
async fn follow_switches(
    connections: Connections,
    mut alive: watch::Receiver<()>,
    mut switches: mpsc::Receiver<Switch>,
    _stop: watch::Sender<()>,
    command_timeout: Duration,
) {
    loop {
        let target = tokio::select! {
            switch = switches.recv() => match switch {
                Some(switch) => switch,
                None => return,
            },
            // Nothing is ever sent: this ends when the sender is dropped.
            _ = alive.changed() => return,
        };
        if !follow(&connections, &alive, target, &mut switches, command_timeout).await {
            return;
        }
    }
}

/// Reconnects both connections until both are on `target` (or on a newer master named
/// meanwhile), for at most [`FOLLOW_FOR`]. Returns false once the client is gone.
async fn follow(
    connections: &Connections,
    alive: &watch::Receiver<()>,
    mut target: Switch,
    switches: &mut mpsc::Receiver<Switch>,
    command_timeout: Duration,
) -> bool {
    let started = Instant::now();
    let mut pause = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut announced = false;
    loop {
        while let Ok(newer) = switches.try_recv() {
            target = newer;
        }
        if alive.has_changed().is_err() {
            return false;
        }
        let Connections {
            client,
            subscriber,
            following_master,
            address,
        } = connections;
        if connected_to(client, &target) && connected_to(subscriber, &target) {
            if announced {
                tracing::info!(
                    master = %target, took_ms = started.elapsed().as_millis() as u64,
                    "both connections are on the new master"
                );
            }
            return true;
        }
        if !announced {
            tracing::warn!(
                master = %target,
                "the Sentinels switched the master (+switch-master); moving both connections to it"
            );
            announced = true;
        }
        // One reconnection at a time, shared with the READONLY path.
        if !following_master.swap(true, Ordering::SeqCst) {
            let moved =
                tokio::time::timeout(4 * command_timeout, reconnect_both(client, subscriber)).await;
            following_master.store(false, Ordering::SeqCst);
            match moved {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::debug!(
                    error = %address.scrub(&error.to_string()),
                    "reconnecting after +switch-master failed; retrying"
                ),
                Err(_) => tracing::debug!("reconnecting after +switch-master timed out; retrying"),
            }
        }
        let all_moved = connected_to(client, &target) && connected_to(subscriber, &target);
        if all_moved {
            continue;
        }
        if started.elapsed() >= FOLLOW_FOR {
            tracing::warn!(
                master = %target,
                "the client could not reach the master the Sentinels named; it follows on READONLY"
            );
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep(pause.next_delay()) => {}
            newer = switches.recv() => match newer {
                Some(newer) => target = newer,
                None => return false,
            },
        }
    }
}

/// The Sentinel list of an address, for tests.
#[cfg(test)]
fn hosts_of(address: &RedisAddress) -> Vec<Server> {
    match &address.client_config().server {
        ServerConfig::Sentinel { hosts, .. } => hosts.clone(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisConfig;

    #[test]
    fn parses_switches_of_its_service_only() {
        assert_eq!(
            parse_switch("mymaster 127.0.0.1 6379 127.0.0.1 6380", "mymaster"),
            Some(Switch {
                host: "127.0.0.1".into(),
                port: 6380
            })
        );
        assert_eq!(
            parse_switch("other 127.0.0.1 6379 127.0.0.1 6380", "mymaster"),
            None
        );
        assert_eq!(parse_switch("mymaster 127.0.0.1 6379", "mymaster"), None);
        assert_eq!(
            parse_switch("mymaster 127.0.0.1 6379 127.0.0.1 x", "mymaster"),
            None
        );
    }

    #[test]
    fn watches_every_sentinel_of_a_sentinel_address_only() {
        let config = RedisConfig::new(
            "redis-sentinel://u:p@127.0.0.1:26379?sentinelServiceName=svc&node=127.0.0.1:26380&sentinelPassword=s3",
        );
        let watch = SwitchWatch::build(&config.endpoint().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(watch.service, "svc");
        let mut at: Vec<&str> = watch.sentinels.iter().map(|(a, _)| a.as_str()).collect();
        at.sort_unstable();
        assert_eq!(at, ["127.0.0.1:26379", "127.0.0.1:26380"]);
        assert_eq!(hosts_of(config.endpoint().unwrap().address).len(), 2);
        let plain = RedisConfig::new("redis://127.0.0.1:6379");
        assert!(
            SwitchWatch::build(&plain.endpoint().unwrap())
                .unwrap()
                .is_none()
        );
    }
}
