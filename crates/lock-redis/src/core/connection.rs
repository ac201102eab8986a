//! The fred clients behind a lock: one multiplexed connection for commands, one for pub/sub.

use std::path::Path;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::CustomCommand;
use lock_core::LockError;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::Instant;

use crate::core::address::RedisAddress;
use crate::core::backoff::Backoff;
use crate::core::error::{RedisFailure, Refusal};

/// The longest delay between two attempts to reconnect to Redis: 2 s (the first comes after
/// 100 ms, doubling). Once Redis answers again, a client is connected within about this long.
pub const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(2);

/// The first delay of a reconnection; the next ones double up to [`RECONNECT_MAX_DELAY`].
const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// Reconnect forever, [`FIRST_RECONNECT_DELAY`] doubling to [`RECONNECT_MAX_DELAY`]: a Redis
/// outage makes acquisitions fail closed, it must never leave the client permanently
/// disconnected.
fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(
        0,
        FIRST_RECONNECT_DELAY.as_millis() as u32,
        RECONNECT_MAX_DELAY.as_millis() as u32,
        2,
    )
}

/// Connects `client` at once and keeps retrying the first connection (with the delays of
/// [`reconnect_policy`]) until one succeeds or `stop`'s sender is dropped; from then on fred's
/// connection task reconnects by itself. A service may start while Redis is down: its
/// acquisitions fail closed until Redis answers. Each failed attempt reaches the client's error
/// events, so [`Health`] sees it.
pub(crate) fn keep_connecting<C>(client: &C, mut stop: tokio::sync::watch::Receiver<()>)
where
    C: ClientLike + Clone + Send + Sync + 'static,
{
    let client = client.clone();
    tokio::spawn(async move {
        let mut backoff = Backoff::new(FIRST_RECONNECT_DELAY, RECONNECT_MAX_DELAY);
        loop {
            // Pending while connected (fred's task reconnects after a later loss); ends after a
            // failed first attempt (`fail_fast`), or with `quit`.
            match client.connect().await {
                Ok(Err(error)) if !error.is_canceled() => {}
                _ => return,
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                _ = stop.changed() => return,
            }
        }
    });
}

/// Ends `client`'s connection with `QUIT`, unless it has none: fred warns of a quit of a
/// stopped client (a first connection that failed, or an outage between reconnections).
pub(crate) async fn quit<C: ClientLike>(client: &C) {
    if client.state() != fred::types::ClientState::Disconnected {
        let _ = client.quit().await;
    }
}

/// The lock space of an address and key prefix, the same however the address was written
/// (default port and database filled in, user and password left out, cluster and Sentinel
/// nodes sorted): `redis://<host>:<port>/<db> <prefix>`,
/// `redis-sentinel://<sentinels>/<service>/<db> <prefix>` or `redis-cluster://<nodes> <prefix>`,
/// with `rediss…` for TLS. Re-entry is decided by it, so where two spellings might name two
/// deployments they must differ (and contend): the Sentinel hosts are part of it because the
/// service name alone (`mymaster` by default) is shared by unrelated deployments; host names
/// are compared as written (`localhost` and `127.0.0.1` differ).
pub(crate) fn namespace(address: &RedisAddress, key_prefix: &str) -> String {
    let parsed = address.client_config();
    let scheme = if address.tls() { "rediss" } else { "redis" };
    let sorted = |hosts: &[Server]| {
        let mut nodes: Vec<String> = hosts
            .iter()
            .map(|s| format!("{}:{}", s.host, s.port))
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes.join(",")
    };
    let database = parsed.database.unwrap_or(0);
    let place = match &parsed.server {
        ServerConfig::Clustered { hosts, .. } => format!("{scheme}-cluster://{}", sorted(hosts)),
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } => format!(
            "{scheme}-sentinel://{}/{service_name}/{database}",
            sorted(hosts)
        ),
        other => match other.hosts().first() {
            Some(s) => format!("{scheme}://{}:{}/{database}", s.host, s.port),
            // Only a Unix socket has no host, and `RedisAddress::parse` refuses those.
            None => format!(
                "{scheme}://{}:{}/{database}",
                address.host(),
                address.port()
            ),
        },
    };
    format!("{place} {key_prefix}")
}

#[cfg(test)]
mod namespace_tests {
    use super::*;

    fn ns(address: &str) -> String {
        namespace(&RedisAddress::parse(address).unwrap(), "p:")
    }

    #[test]
    fn spellings_of_one_deployment_share_a_namespace() {
        for (a, b) in [
            ("redis://h", "redis://u:secret@h:6379/0"),
            (
                "redis-sentinel://s1:26379?sentinelServiceName=mymaster&node=s2:26380",
                "redis-sentinel://:pw@s2:26380/0?sentinelServiceName=mymaster&node=s1:26379",
            ),
            (
                "redis-cluster://c1:7000?node=c2:7001",
                "redis-cluster://c2:7001?node=c1:7000",
            ),
            ("rediss://h:6380/2", "rediss://u:pw@h:6380/2"),
        ] {
            assert_eq!(ns(a), ns(b), "{a} and {b}");
        }
        assert_eq!(
            ns("redis-sentinel://s1?sentinelServiceName=mymaster&node=s2:26380"),
            "redis-sentinel://s1:26379,s2:26380/mymaster/0 p:"
        );
        assert!(!ns("redis://u:secret@h").contains("secret"));
    }

    #[test]
    fn spellings_that_may_name_two_deployments_contend() {
        for (a, b) in [
            // Two Sentinel deployments with the common default service name.
            (
                "redis-sentinel://a1:26379?sentinelServiceName=mymaster",
                "redis-sentinel://b1:26379?sentinelServiceName=mymaster",
            ),
            (
                "redis-sentinel://s1?sentinelServiceName=mymaster",
                "redis-sentinel://s1?sentinelServiceName=other",
            ),
            (
                "redis-sentinel://s1/0?sentinelServiceName=m",
                "redis-sentinel://s1/1?sentinelServiceName=m",
            ),
            ("redis://h:6379", "rediss://h:6379"),
            ("redis://h/0", "redis://h/1"),
            ("redis://localhost", "redis://127.0.0.1"),
            ("redis-cluster://c1:7000", "redis-cluster://c2:7000"),
        ] {
            assert_ne!(ns(a), ns(b), "{a} and {b}");
        }
        // An address that does not parse gets no namespace: the lock does not start.
        let unparsable = crate::RedisConfig::new("redis://h:6379/0 p:").key_prefix("");
        let error = unparsable.validate().unwrap_err();
        assert_eq!(error.details()["argument"], "address", "{error}");
    }
}

/// What the shared core connects with: the address, the command timeout (which bounds every
/// command and connection attempt) and the CA file for TLS, from the client settings
/// (`RedisConfig::endpoint`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoint<'a> {
    pub(crate) address: &'a RedisAddress,
    pub(crate) command_timeout: Duration,
    pub(crate) tls_ca_file: Option<&'a Path>,
}

/// Builds (does not connect) the command client and the subscriber client.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `address` when it did not parse, or `tls_ca_file`.
pub(crate) fn build_clients(
    config: &Endpoint<'_>,
) -> Result<(Client, SubscriberClient), LockError> {
    let address = config.address;
    // TLS is set up here rather than by fred's URL parser, which would load the system's roots
    // even when a CA file is configured (and fail where the system has none).
    let mut fred_config = address.client_config().clone();
    // The first connection attempt is made at once and ends the connection task when it fails
    // (fred's own retry of the first connection would sleep its first reconnect delay, 100 to
    // 200 ms, before even trying — longer than a short command timeout, which `connect` waits
    // for the outcome); `keep_connecting` retries it. fred reads `fail_fast` for the first
    // connection only: a connection lost later is retried by its reconnect policy.
    fred_config.fail_fast = true;
    fred_config.tls = tls_config(config, address.tls())?;

    let builder = client_builder(fred_config, reconnect_policy(), config);
    let client = builder.build().map_err(|e| invalid_address(config, &e))?;
    let subscriber = builder
        .build_subscriber_client()
        .map_err(|e| invalid_address(config, &e))?;
    Ok((client, subscriber))
}

/// A CA file is only for a TLS address (`rediss…://`).
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `tls_ca_file` when it is set with a plain address.
pub(crate) fn check_ca_file_use(config: &Endpoint<'_>) -> Result<(), LockError> {
    match config.tls_ca_file {
        Some(ca_file) => ca_file_needs_tls(config.address).map_err(|problem| {
            LockError::invalid_argument("tls_ca_file", ca_file.display().to_string(), problem)
        }),
        None => Ok(()),
    }
}

/// What is wrong with a CA file for `address`, if it does not use TLS.
fn ca_file_needs_tls(address: &RedisAddress) -> Result<(), String> {
    if address.tls() {
        return Ok(());
    }
    Err(format!(
        "the address {address} does not use TLS, so a CA file would not be used; use \
         rediss://, rediss-sentinel:// or rediss-cluster://, or no CA file"
    ))
}

/// The TLS settings for the address (`tls`: it had a TLS scheme): the configured CA file, else
/// the system's roots; none for a plain address.
///
/// # Errors
/// [`LockError::InvalidArgument`] for a CA file with a plain address or an unusable CA file, or
/// TLS without a CA file where the system has no roots.
pub(crate) fn tls_config(
    config: &Endpoint<'_>,
    tls: bool,
) -> Result<Option<fred::types::config::TlsConfig>, LockError> {
    check_ca_file_use(config)?;
    Ok(match (config.tls_ca_file, tls) {
        (Some(ca_file), _) => Some(tls_with_ca(ca_file)?),
        (None, true) => Some(
            fred::types::config::TlsConnector::default_rustls()
                .map_err(|e| {
                    LockError::invalid_argument(
                        "address",
                        config.address.to_string(),
                        format!(
                            "TLS with the system's CA certificates is not available ({}); configure a CA file (tls_ca_file)",
                            e.details()
                        ),
                    )
                })?
                .into(),
        ),
        (None, false) => None,
    })
}

/// A fred builder for `fred_config` with the lock's timeouts and TCP settings: every command
/// and connection attempt bounded by the command timeout (fred's default is no timeout at all),
/// `TCP_NODELAY`, and keepalive, so an idle connection a middlebox dropped silently is found
/// within about a minute (30 s idle, then 3 probes 10 s apart) instead of the kernel's two hours.
pub(crate) fn client_builder(
    fred_config: Config,
    policy: ReconnectPolicy,
    config: &Endpoint<'_>,
) -> Builder {
    let mut builder = Builder::from_config(fred_config);
    builder
        .set_policy(policy)
        .with_performance_config(|perf| {
            perf.default_command_timeout = config.command_timeout;
        })
        .with_connection_config(|conn| {
            conn.connection_timeout = config.command_timeout;
            conn.internal_command_timeout = config.command_timeout;
            conn.tcp.nodelay = Some(true);
            conn.tcp.keepalive = Some(
                socket2::TcpKeepalive::new()
                    .with_time(Duration::from_secs(30))
                    .with_interval(Duration::from_secs(10))
                    .with_retries(3),
            );
        });
    builder
}

/// Warns when Redis may evict lock keys: every lock key has a TTL, so any policy but
/// `noeviction` (`allkeys-*` and `volatile-*` alike) can drop a held lock under memory pressure,
/// and its holder learns it only at the next renewal. Silent when `CONFIG` is not allowed (as on
/// many managed services).
pub(crate) async fn check_eviction_policy(client: &Client) {
    let command = CustomCommand::new_static("CONFIG", None, false);
    let reply: Result<Vec<String>, Error> = client
        .custom(command, vec!["GET", "maxmemory-policy"])
        .await;
    if let Ok(reply) = reply {
        if let [_, policy] = reply.as_slice() {
            if policy != "noeviction" {
                tracing::warn!(
                    maxmemory_policy = %policy,
                    "Redis may evict held lock keys under memory pressure; use maxmemory-policy noeviction for the lock's Redis"
                );
            }
        }
    }
}

/// Checks a CA file ([`RedisConfig::tls_ca_file`](crate::RedisConfig::tls_ca_file))
/// for `address`: PEM CA certificates to trust for TLS instead of the system's roots, read as a
/// connection reads them, and only with a TLS address — for checking configuration before
/// connecting, with the words a connection would use.
///
/// # Errors
/// What is wrong, in words: an empty path, an address without TLS, a missing file (with the
/// working directory a relative path is read from), a directory, an unreadable file, one
/// without a certificate, or not a usable certificate.
///
/// # Examples
///
/// ```
/// use lock_redis::{RedisAddress, check_ca_file};
///
/// let tls = RedisAddress::parse("rediss://redis.internal:6380").unwrap();
/// let error = check_ca_file("/nonexistent/ca.pem".as_ref(), &tls).unwrap_err();
/// assert_eq!(error, "the file does not exist");
///
/// let plain = RedisAddress::parse("redis://redis.internal:6379").unwrap();
/// let error = check_ca_file("/etc/ssl/redis-ca.pem".as_ref(), &plain).unwrap_err();
/// assert!(error.contains("does not use TLS"));
/// ```
pub fn check_ca_file(path: &Path, address: &RedisAddress) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err(EMPTY_PATH.to_owned());
    }
    ca_file_needs_tls(address)?;
    ca_roots(path).map(drop)
}

const EMPTY_PATH: &str = "empty; a path is required";

/// The CA certificates in `path`; what is wrong with the file, in words.
fn ca_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    if path.as_os_str().is_empty() {
        return Err(EMPTY_PATH.to_owned());
    }
    let contents = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => match std::env::current_dir() {
            Ok(dir) if path.is_relative() => format!(
                "the file does not exist (relative to the working directory {})",
                dir.display()
            ),
            _ => "the file does not exist".to_owned(),
        },
        _ if path.is_dir() => "it is a directory, not a file".to_owned(),
        _ => format!("the file cannot be read: {e}"),
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&contents) {
        let cert = cert.map_err(|e| format!("not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("not a usable CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(
            "the file holds no PEM certificate (no -----BEGIN CERTIFICATE----- line)".to_owned(),
        );
    }
    Ok(roots)
}

fn tls_with_ca(path: &Path) -> Result<fred::types::config::TlsConfig, LockError> {
    let invalid = |problem: String| {
        LockError::invalid_argument("tls_ca_file", path.display().to_string(), problem)
    };
    let roots = ca_roots(path).map_err(|problem| {
        invalid(format!(
            "{problem}; accepted: a readable PEM file of CA certificates"
        ))
    })?;
    #[allow(
        deprecated,
        reason = "fred's TLS is built on ring (rustls 0.23.48 deprecates its provider for lacking post-quantum key exchange)"
    )]
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(client.into())
}

fn invalid_address(config: &Endpoint<'_>, error: &Error) -> LockError {
    LockError::invalid_argument(
        "address",
        config.address.to_string(),
        config.address.scrub(error.details()),
    )
}

/// What the command connection last reported, in the order fred reported it: the latest
/// connection error, cleared when it (re)connects. While it is set the client is disconnected:
/// an acquisition's first attempt fails at once with it, and a command that times out is
/// reported with it ("connection refused", "WRONGPASS …") rather than as a bare timeout, so
/// on-call sees the cause. (fred's own state says "connected" for a while after a connection is
/// lost, until its reconnect delay has passed, so it is not asked.) A look that finds the
/// client down first takes in the events fred has sent, so it never lags behind a reconnect: a
/// command made just after one is not failed by the error before it.
#[derive(Debug, Default)]
pub(crate) struct Health {
    state: std::sync::Mutex<HealthState>,
    /// Connection errors so far, to tell whether an outage overlapped a span of work.
    errors: std::sync::atomic::AtomicU64,
    /// Woken on every event, for [`Health::first_outcome`].
    changed: tokio::sync::Notify,
    /// fred's events not yet taken in, set by [`Health::follow`].
    pending: std::sync::Mutex<Option<Pending>>,
}

/// The receivers of fred's connection events, and what [`Health::failed`] needs.
#[derive(Debug)]
struct Pending {
    errors: tokio::sync::broadcast::Receiver<(Error, Option<Server>)>,
    reconnects: tokio::sync::broadcast::Receiver<Server>,
    address: RedisAddress,
    timeout: Duration,
}

#[derive(Debug, Default)]
struct HealthState {
    /// The last connection error since the last (re)connect: fred's, and as one phrase.
    last_error: Option<(Error, String)>,
    /// Whether the client has connected since it was created or last failed.
    connected: bool,
    /// When the first connection error since the last (re)connect arrived: measured locally
    /// (monotonic) for the "reachable again" line only, never shared with other hosts.
    down_since: Option<Instant>,
    /// Set by [`Health::started`]: until then `connect` has not decided whether a connection
    /// error is an outage (warned of) or a start-up failure (its error says it all).
    started: bool,
    /// An outage began before [`Health::started`]; its warning is logged then, if it lasts.
    warning_deferred: bool,
    /// When a command first got no answer within its timeout on a connection with no error
    /// (a frozen or overloaded server), until Redis answers again.
    stalled_since: Option<Instant>,
    /// The kinds of connection error warned of in this outage.
    warned_kinds: Vec<ErrorKind>,
}

impl Health {
    /// Starts following `client`'s error and reconnect events; call it before connecting. The
    /// task that takes them in as they come ends with the client.
    pub(crate) fn follow(
        self: &std::sync::Arc<Self>,
        client: &Client,
        address: &RedisAddress,
        timeout: Duration,
    ) {
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(Pending {
            errors: client.error_rx(),
            reconnects: client.reconnect_rx(),
            address: address.clone(),
            timeout,
        });
        let health = std::sync::Arc::downgrade(self);
        // Receivers of their own, only to wake the task: the events are read from `pending`.
        let mut errors = client.error_rx();
        let mut reconnects = client.reconnect_rx();
        tokio::spawn(async move {
            loop {
                let open = tokio::select! {
                    error = errors.recv() => !matches!(error, Err(RecvError::Closed)),
                    reconnect = reconnects.recv() => !matches!(reconnect, Err(RecvError::Closed)),
                };
                let Some(health) = health.upgrade().filter(|_| open) else {
                    return;
                };
                health.catch_up();
            }
        });
    }

    /// Takes in the events fred has sent since the last look, errors first: fred sends an error
    /// before the reconnect that follows it.
    fn catch_up(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(events) = pending.as_mut() else {
            return;
        };
        let mut heard = false;
        loop {
            let error = match events.errors.try_recv() {
                Ok((error, _)) => Some(error),
                Err(TryRecvError::Lagged(_)) => continue,
                Err(TryRecvError::Empty | TryRecvError::Closed) => {
                    match events.reconnects.try_recv() {
                        Ok(_) | Err(TryRecvError::Lagged(_)) => None,
                        Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                    }
                }
            };
            heard = true;
            match error {
                Some(error) => self.failed(error, &events.address, events.timeout),
                None => self.connected(&events.address),
            }
        }
        drop(pending);
        if heard {
            self.changed.notify_waiters();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a connection error of the connection to `address`, whose attempts are bounded
    /// by `timeout` (the command timeout); the first of an outage is logged as a warning.
    fn failed(&self, error: Error, address: &RedisAddress, timeout: Duration) {
        let described = match error.kind() {
            // fred says only "Request timed out.": name what did not answer, and within what.
            ErrorKind::Timeout => format!(
                "connecting to Redis at {address} timed out: no answer within {timeout:?} (command_timeout){}",
                // A server without TLS waits for a command, and the TLS handshake for its answer.
                if address.tls() {
                    "; if the server has no TLS, use a redis:// address"
                } else {
                    ""
                }
            ),
            // Named, so "unreachable" in a service's error says which Redis (secrets hidden).
            _ => format!("{} (Redis at {address})", address.scrub(&describe(&error))),
        };
        let outage_starts = {
            let mut state = self.lock();
            // A new kind of cause within an outage (Redis back, but refusing the password) is
            // warned of again, once per kind.
            let new_kind = !state.warned_kinds.contains(error.kind());
            let cause_changed = state.started && state.down_since.is_some() && new_kind;
            if state.started && new_kind {
                state.warned_kinds.push(error.kind().clone());
            }
            state.last_error = Some((error, described.clone()));
            self.errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            state.connected = false;
            let starts = state.down_since.is_none();
            state.down_since.get_or_insert_with(Instant::now);
            if starts && !state.started {
                state.warning_deferred = true;
            }
            (starts && state.started) || cause_changed
        };
        if outage_starts {
            warn_outage(address, &described);
        }
    }

    /// `connect` has decided the client starts: an outage that began during start-up is
    /// warned of now. Not called when the first attempt's error fails `connect` (refused
    /// credentials), so that error is not also logged as an outage. Returns whether it warned.
    pub(crate) fn started(&self, address: &RedisAddress) -> bool {
        let deferred = {
            let mut state = self.lock();
            state.started = true;
            let deferred = std::mem::take(&mut state.warning_deferred);
            let warned = state
                .last_error
                .as_ref()
                .filter(|_| deferred)
                .map(|(error, described)| (error.kind().clone(), described.clone()));
            warned.map(|(kind, described)| {
                state.warned_kinds.push(kind);
                described
            })
        };
        if let Some(described) = &deferred {
            warn_outage(address, described);
        }
        deferred.is_some()
    }

    /// Records that a command got no answer within `timeout` (set by `setting`) while the
    /// connection had no error: the first of a stall is warned of like an outage. Returns
    /// whether it began one, so that the caller watches for Redis to answer
    /// ([`Health::answered`]).
    pub(crate) fn unanswered(
        &self,
        address: &RedisAddress,
        timeout: Duration,
        setting: &str,
    ) -> bool {
        let starts = {
            let mut state = self.lock();
            let starts =
                state.started && state.down_since.is_none() && state.stalled_since.is_none();
            if starts {
                // The command that timed out was sent `timeout` ago, unanswered since.
                let now = Instant::now();
                state.stalled_since = Some(now.checked_sub(timeout).unwrap_or(now));
            }
            starts
        };
        if starts {
            warn_outage(
                address,
                &format!("Redis at {address} did not answer within {timeout:?} ({setting})"),
            );
        }
        starts
    }

    /// Records that Redis answered: logs once how long it did not, after a stall.
    pub(crate) fn answered(&self, address: &RedisAddress) {
        let Some(since) = self.lock().stalled_since.take() else {
            return;
        };
        let stalled = since.elapsed();
        tracing::info!(
            address = %address,
            unanswered_ms = stalled.as_millis() as u64,
            "Redis answering again after {:.1} s",
            stalled.as_secs_f64()
        );
    }

    /// Records a (re)connection, logging once how long Redis was unreachable when it was.
    fn connected(&self, address: &RedisAddress) {
        let down_since = {
            let mut state = self.lock();
            state.last_error = None;
            state.connected = true;
            // A stall that ended in a lost connection ends with that outage's line.
            state.stalled_since = None;
            state.warned_kinds.clear();
            // An outage never warned of (over before `connect` decided) is not announced over.
            let warned = !std::mem::take(&mut state.warning_deferred);
            state.down_since.take().filter(|_| warned)
        };
        if let Some(since) = down_since {
            let down = since.elapsed();
            tracing::info!(
                address = %address,
                unreachable_ms = down.as_millis() as u64,
                "Redis reachable again after {:.1} s",
                down.as_secs_f64()
            );
        }
    }

    /// Whether the connection is up: its set-up was answered, and it has not failed since.
    pub(crate) fn is_connected(&self) -> bool {
        self.lock().connected || {
            self.catch_up();
            self.lock().connected
        }
    }

    /// How many connection errors the client has had: unchanged across a span of work when no
    /// outage overlapped it.
    pub(crate) fn errors(&self) -> u64 {
        self.catch_up();
        self.errors.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last connection error, if the client has not connected since.
    pub(crate) fn last_error(&self) -> Option<String> {
        // Only an error can be stale, so a command's look costs nothing more while connected.
        if self.lock().last_error.is_some() {
            self.catch_up();
        }
        self.lock()
            .last_error
            .as_ref()
            .map(|(_, text)| text.clone())
    }

    /// Returns the connection error once the client has been disconnected for `grace` without
    /// reconnecting; pending while it is connected, or reconnects within `grace`.
    pub(crate) async fn lost_for(&self, grace: Duration) -> String {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before looking, so an event between the look and the wait wakes it.
            changed.as_mut().enable();
            self.catch_up();
            let down = {
                let state = self.lock();
                let described = state.last_error.as_ref().map(|(_, text)| text.clone());
                state.down_since.map(|since| since + grace).zip(described)
            };
            let Some((at, described)) = down else {
                changed.await;
                continue;
            };
            if Instant::now() >= at {
                return described;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(at) => {}
            }
        }
    }

    /// How the first connection attempt ended: `Ok` once connected, else its error. Pending
    /// until one of them has happened.
    pub(crate) async fn first_outcome(&self) -> Result<(), Error> {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before looking, so an event between the look and the wait wakes it.
            changed.as_mut().enable();
            self.catch_up();
            {
                let state = self.lock();
                if state.connected {
                    return Ok(());
                }
                if let Some((error, _)) = &state.last_error {
                    return Err(error.clone());
                }
            }
            changed.await;
        }
    }
}

fn warn_outage(address: &RedisAddress, described: &str) {
    tracing::warn!(
        address = %address,
        error = %described,
        "Redis connection failed; until it answers, each capability fails as its policy says"
    );
}

/// A connection error at connect that no retry can cure: Redis turned down the credentials
/// (`WRONGPASS`, `NOAUTH`), the user lacks a command the connection set-up sends (`NOPERM`,
/// e.g. `SELECT` of the address's database), or the server has no database of the address's
/// number. As [`LockError::InvalidArgument`] naming
/// `address`; `None` for every other error (Redis down, unreachable, slow).
pub(crate) fn refused_at_connect(config: &Endpoint<'_>, error: &Error) -> Option<LockError> {
    // `SELECT` of a database the server does not have: fred reports no reply kind for it.
    if error.details().contains(NO_SUCH_DATABASE) {
        return Some(LockError::invalid_argument(
            "address",
            config.address.to_string(),
            format!(
                "{}; accepted: an address whose database number is below the server's \
                 `databases` setting (16 by default)",
                describe(error)
            ),
        ));
    }
    let refusal = Refusal::of_reply(error)?;
    if !matches!(refusal, Refusal::NoAuth | Refusal::NoPermission) {
        return None;
    }
    let refused = RedisFailure::Refused {
        operation: "connection",
        refusal,
        message: config.address.scrub(error.details().trim()),
    };
    // Not the URL grammar: the address parsed; what Redis wants is other credentials.
    let accepted = match refusal {
        Refusal::NoAuth => {
            "an address with a user and password Redis accepts (ACL user or requirepass)"
        }
        _ => {
            "an address whose user Redis allows the commands the connection set-up sends \
             (AUTH; SELECT for an address with a database number)"
        }
    };
    Some(LockError::invalid_argument(
        "address",
        config.address.to_string(),
        format!("{refused}; accepted: {accepted}"),
    ))
}

/// Redis' reply to `SELECT` of a database number at or above its `databases` setting.
const NO_SUCH_DATABASE: &str = "DB index is out of range";
/// fred's message when the primary the Sentinels named answers `ROLE` as another role.
const INVALID_ROLE: &str = "Invalid role";
/// fred's message when it holds no usable Cluster topology.
const NO_CLUSTER_STATE: &str = "Invalid or missing cluster state";

/// A connection error as one readable phrase: fred renders I/O errors with `Debug`
/// (`Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }`, or for a host
/// name that does not resolve `Custom { kind: Uncategorized, error: "failed to lookup address
/// information: …" }`); keep the message.
fn describe(error: &Error) -> String {
    let details = error.details();
    // The message of an I/O error fred renders with `Debug`, or `details` itself.
    let io_message = || {
        ["message: \"", "error: \""]
            .iter()
            .find_map(|field| {
                let (_, rest) = details.split_once(field)?;
                Some(rest.split_once('"')?.0)
            })
            .unwrap_or(details)
    };
    match error.kind() {
        ErrorKind::IO => format!("connection failed: {}", io_message()),
        // fred's, of a primary looked up through the Sentinels that answers as another role.
        ErrorKind::Sentinel if details.contains(INVALID_ROLE) => format!(
            "the node the Sentinels name as primary is not one ({details}): a failover is under \
             way, or the Sentinels have not yet seen it end"
        ),
        // fred gives every failure of a Sentinel set-up this kind, I/O ones included.
        ErrorKind::Sentinel => format!(
            "the Sentinels, or the primary they name, failed: {}",
            io_message()
        ),
        ErrorKind::Auth => format!("authentication failed: {details}"),
        // fred's own, of a Cluster with no reachable owner for some slots (a failover under way).
        ErrorKind::Protocol if details.contains(NO_CLUSTER_STATE) => format!(
            "the Cluster has no reachable master for every slot ({details}): a failover is under \
             way, or a shard is down"
        ),
        // A reply that is no RESP frame: something other than Redis answers at the address.
        ErrorKind::Protocol => format!(
            "the server does not answer in Redis' protocol ({details}): a wrong port, or a TLS \
             server that needs a rediss:// address"
        ),
        // SELECT of the address's database, refused at connect: fred calls it "Unknown Error".
        _ if details.contains(NO_SUCH_DATABASE) => format!(
            "the server has no database of the address's number ({details}); use one below its \
             `databases` setting (16 by default)"
        ),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use lock_testkit::RedisServer;

    use super::*;
    use crate::core::config::RedisConfig;

    /// A look at the health takes in fred's events itself: it never waits on the task that
    /// follows them, here on a runtime that never runs it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn health_never_lags_behind_the_client() {
        let mut redis = RedisServer::start().await.unwrap();
        let config = RedisConfig::new(redis.url());
        let endpoint = config.endpoint().unwrap();
        let (client, _) = build_clients(&endpoint).unwrap();
        let health = std::sync::Arc::new(Health::default());
        let idle = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        {
            let _on_idle = idle.enter();
            health.follow(&client, endpoint.address, endpoint.command_timeout);
        }
        let _connection = client.init().await.unwrap();
        assert!(health.is_connected());
        // fred reconnects after its connection is killed, and answers a command: the error and
        // the reconnect before that answer are both taken in.
        let killer = build_clients(&endpoint).unwrap().0;
        let _killer_connection = killer.init().await.unwrap();
        let _: Value = killer
            .custom(
                CustomCommand::new_static("CLIENT", None, false),
                vec!["KILL", "TYPE", "normal", "SKIPME", "yes"],
            )
            .await
            .unwrap();
        let _: Value = client.ping(None).await.unwrap();
        assert!(
            health.errors() >= 1,
            "the killed connection was not heard of"
        );
        assert!(health.is_connected());
        assert_eq!(health.last_error(), None);
        // Redis down: the lost connection is heard of once fred has sent it.
        let errors_before = health.errors();
        redis.kill().await.unwrap();
        let heard = tokio::time::timeout(Duration::from_secs(30), async {
            while health.errors() == errors_before {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(heard.is_ok(), "the outage was never heard of");
        assert!(health.last_error().is_some());
        assert!(!health.is_connected());
        idle.shutdown_background();
    }

    #[test]
    fn connection_errors_read_as_their_message() {
        for (details, expected) in [
            (
                r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#,
                "connection failed: Connection refused",
            ),
            (
                r#"Custom { kind: Uncategorized, error: "failed to lookup address information: Name or service not known" }"#,
                "connection failed: failed to lookup address information: Name or service not known",
            ),
            ("Broken pipe", "connection failed: Broken pipe"),
        ] {
            assert_eq!(describe(&Error::new(ErrorKind::IO, details)), expected);
        }
        assert_eq!(
            describe(&Error::new(
                ErrorKind::Unknown,
                "ERR DB index is out of range"
            )),
            "the server has no database of the address's number (ERR DB index is out of range); \
             use one below its `databases` setting (16 by default)"
        );
        assert_eq!(
            describe(&Error::new(
                ErrorKind::Auth,
                "WRONGPASS invalid username-password pair or user is disabled."
            )),
            "authentication failed: WRONGPASS invalid username-password pair or user is disabled."
        );
        let no_state = describe(&Error::new(
            ErrorKind::Protocol,
            "Invalid or missing cluster state.",
        ));
        assert!(
            no_state.starts_with("the Cluster has no reachable master"),
            "{no_state}"
        );
        assert!(!no_state.contains("rediss://"), "{no_state}");
        assert!(
            no_state.ends_with("under way, or a shard is down"),
            "{no_state}"
        );
        assert_eq!(
            describe(&Error::new(
                ErrorKind::Sentinel,
                r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#
            )),
            "the Sentinels, or the primary they name, failed: Connection refused"
        );
        let replica = describe(&Error::new(
            ErrorKind::Sentinel,
            r#"Invalid role: Some("slave")"#,
        ));
        assert!(replica.contains("a failover is under way"), "{replica}");
    }
}
