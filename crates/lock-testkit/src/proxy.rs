//! [`FaultProxy`]: a userspace TCP proxy in front of a server, for network faults that a
//! [`RedisServer`](crate::RedisServer) alone cannot produce — latency, resets, partitions,
//! refused connections, and replies lost on the wire.
//!
//! The proxy listens on a free `127.0.0.1` port and forwards every connection it accepts to one
//! upstream address over a connection of its own. Faults are switched at run time through `&self`
//! methods and apply to the connections already open as well as to new ones. Dropping the proxy
//! closes its port and every connection (both sides).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use lock_testkit::RedisServer;
//! use lock_testkit::proxy::{FaultProxy, TrapAction};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = RedisServer::start().await?;
//! let proxy = FaultProxy::start(("127.0.0.1", redis.port())).await?;
//! let url = proxy.url(); // hand this to the client under test instead of `redis.url()`
//!
//! proxy.set_latency(Duration::from_millis(50)); // +100 ms per round trip
//! proxy.drop_connections(); // a network reset: the client must reconnect
//! proxy.blackhole(true); // a partition: nothing arrives, nothing closes
//! proxy.blackhole(false); // healed: what was sent meanwhile is delivered now
//!
//! // The next command naming `lock:a` reaches Redis, but its reply never comes back, and the
//! // connection is closed 150 ms later: did the command run or not?
//! proxy.arm_trap(b"lock:a", TrapAction::SwallowReplyThenClose(Duration::from_millis(150)));
//! # let _ = url;
//! # Ok(()) }
//! ```

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep, sleep_until};

/// The longest marker [`FaultProxy::arm_trap`] accepts, in bytes. A marker is found even when TCP
/// splits it across two chunks, so each connection keeps this many bytes minus one of what it
/// last forwarded.
pub const MAX_TRAP_MARKER: usize = 1024;

/// Bytes read from a socket at a time.
const CHUNK: usize = 16 * 1024;
/// Chunks read but not yet written (waiting out the latency or a partition), per direction;
/// beyond that the proxy stops reading and TCP flow control pushes back on the sender.
const QUEUE: usize = 16;
/// Pause after a failed `accept` (for example, out of file descriptors) before the next try.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// What a trap does to the connection it caught; see [`FaultProxy::arm_trap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapAction {
    /// A reply lost on the wire: from the caught chunk on, nothing more is forwarded in either
    /// direction (the server's reply is read and discarded), and after the given duration both
    /// sides of the connection are closed. The client sees its request go out, no answer, then a
    /// closed connection; the server has run the request.
    SwallowReplyThenClose(Duration),
    /// The connection is silently dead from the caught chunk on, like an idle connection a NAT
    /// or load balancer forgot: nothing more is forwarded in either direction and nothing is
    /// closed — not even when one side closes its end — until
    /// [`drop_connections`](FaultProxy::drop_connections) or the proxy is dropped.
    Blackhole,
}

/// A userspace TCP proxy that injects network faults between a client and a server.
///
/// [`start`](Self::start) it in front of an upstream address and connect the client under test
/// to [`url`](Self::url) (or [`port`](Self::port)). With no fault switched on, it forwards bytes
/// unchanged in both directions, including half-closes (one side shutting down its writes while
/// still reading), and closes a connection once both directions have ended or either side failed.
///
/// Faults ([`set_latency`](Self::set_latency), [`drop_connections`](Self::drop_connections),
/// [`blackhole`](Self::blackhole), [`refuse_new`](Self::refuse_new),
/// [`arm_trap`](Self::arm_trap)) take effect at once, for open connections as well as new ones.
/// All methods take `&self`, so the proxy can be shared (in an `Arc`) with other tasks.
///
/// Each accepted connection is served by one tokio task, which holds both sockets. Dropping the
/// proxy stops accepting (the port then refuses connections) and ends every such task, closing
/// both sides of every connection, whatever fault it is in. The tasks notice on their next poll,
/// so the runtime must keep running for that; nothing is left behind once it has.
pub struct FaultProxy {
    port: u16,
    upstream: SocketAddr,
    inner: Arc<Inner>,
    /// Bumped by `drop_connections`; dropped with the proxy, which every task watching it sees.
    stop: watch::Sender<u64>,
}

/// State shared by the proxy handle, the accept task and the connection tasks.
struct Inner {
    /// One-way latency in nanoseconds.
    latency_nanos: AtomicU64,
    /// `true` while the whole proxy is partitioned.
    blackhole: watch::Sender<bool>,
    refuse_new: AtomicBool,
    trap: Mutex<Option<Trap>>,
    traps_fired: AtomicU64,
    accepted: AtomicU64,
    open: AtomicUsize,
}

/// An armed trap.
struct Trap {
    marker: Vec<u8>,
    action: TrapAction,
    /// Stays armed after firing.
    repeating: bool,
}

impl FaultProxy {
    /// Starts a proxy on a free `127.0.0.1` port that forwards each connection it accepts to
    /// `upstream`, for example `("127.0.0.1", redis.port())` or a [`SocketAddr`]. `upstream` is
    /// resolved once, here (the first address wins). A fresh upstream connection is made per
    /// accepted connection; when the upstream refuses it, the client's connection is closed.
    ///
    /// Must be called inside a tokio runtime, which runs the proxy's tasks.
    ///
    /// # Errors
    /// When `upstream` does not resolve, or no listening socket can be bound.
    pub async fn start(upstream: impl ToSocketAddrs) -> io::Result<FaultProxy> {
        let upstream = tokio::net::lookup_host(upstream)
            .await?
            .next()
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "upstream has no address")
            })?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let inner = Arc::new(Inner {
            latency_nanos: AtomicU64::new(0),
            blackhole: watch::Sender::new(false),
            refuse_new: AtomicBool::new(false),
            trap: Mutex::new(None),
            traps_fired: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            open: AtomicUsize::new(0),
        });
        let stop = watch::Sender::new(0);
        tokio::spawn(accept_loop(
            listener,
            upstream,
            Arc::clone(&inner),
            stop.subscribe(),
        ));
        Ok(FaultProxy {
            port,
            upstream,
            inner,
            stop,
        })
    }

    /// The port the proxy listens on, on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`: the URL a Redis client under test connects to.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Delays every chunk of bytes, in both directions, by `one_way` (so a request/reply round
    /// trip takes at least twice as long); `Duration::ZERO` turns the delay off. Applies to the
    /// bytes read from now on, on open connections too; bytes already read keep the delay they
    /// were read with. Order is kept, and the delay does not accumulate over chunks read close
    /// together (a delay line, not a pause per chunk). Closing (a half-close) is delayed like
    /// data.
    pub fn set_latency(&self, one_way: Duration) {
        let nanos = u64::try_from(one_way.as_nanos()).unwrap_or(u64::MAX);
        self.inner.latency_nanos.store(nanos, Ordering::SeqCst);
    }

    /// Closes every connection the proxy has accepted, both sides, at once, with a TCP reset
    /// (`SO_LINGER` 0), as a network reset or a restarted middlebox would: reads on the client
    /// fail (`ECONNRESET`) or end, and the upstream server sees its connections go. Bytes not yet
    /// forwarded are lost. Applies to connections in any fault state; new connections are served
    /// as usual.
    pub fn drop_connections(&self) {
        self.stop
            .send_modify(|epoch| *epoch = epoch.wrapping_add(1));
    }

    /// While `on`, the proxy is partitioned from its clients: it forwards nothing in either
    /// direction and closes nothing (it stops reading, so neither data nor a closed end gets
    /// through, and TCP flow control eventually blocks the writers). New connections are still
    /// accepted — the listening socket is local — but black-holed too: their upstream connection
    /// is only made when the partition ends. Switching it off heals the partition: what was sent
    /// meanwhile is delivered then, and deferred upstream connections are made. Connections a
    /// [`TrapAction`] has caught are not affected either way.
    pub fn blackhole(&self, on: bool) {
        self.inner.blackhole.send_replace(on);
    }

    /// While `on`, each new connection is accepted and immediately closed, so the client's
    /// connect succeeds and its first read ends (EOF): a server-side proxy or load balancer with
    /// no healthy backend. Open connections are not affected. Refused connections count in
    /// [`connections_accepted`](Self::connections_accepted), never in
    /// [`open_connections`](Self::open_connections).
    pub fn refuse_new(&self, on: bool) {
        self.inner.refuse_new.store(on, Ordering::SeqCst);
    }

    /// Arms a one-shot trap: the next client→server chunk (on any connection) that contains
    /// `marker` — exact bytes, case-sensitive; also found when TCP split it across two chunks —
    /// is forwarded to the server, and then `action` applies to that connection. The trap then
    /// disarms itself ([`trap_armed`](Self::trap_armed) turns `false`). Replaces any trap armed
    /// before. Only chunks forwarded from now on are searched.
    ///
    /// # Panics
    /// If `marker` is empty or longer than [`MAX_TRAP_MARKER`] bytes.
    pub fn arm_trap(&self, marker: &[u8], action: TrapAction) {
        self.set_trap(marker, action, false);
    }

    /// Like [`arm_trap`](Self::arm_trap), but the trap stays armed after firing: it catches
    /// every connection that sends `marker`, until [`disarm_trap`](Self::disarm_trap) or another
    /// trap replaces it.
    ///
    /// # Panics
    /// If `marker` is empty or longer than [`MAX_TRAP_MARKER`] bytes.
    pub fn arm_trap_repeating(&self, marker: &[u8], action: TrapAction) {
        self.set_trap(marker, action, true);
    }

    /// Disarms the trap, if one is armed. Connections it already caught stay as they are.
    pub fn disarm_trap(&self) {
        *self.inner.lock_trap() = None;
    }

    /// Whether a trap is armed: `false` once a one-shot trap has fired.
    pub fn trap_armed(&self) -> bool {
        self.inner.lock_trap().is_some()
    }

    /// How many times traps have fired (connections caught) since the proxy started.
    pub fn traps_fired(&self) -> u64 {
        self.inner.traps_fired.load(Ordering::SeqCst)
    }

    /// How many connections the proxy has accepted since it started, refused ones included.
    pub fn connections_accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::SeqCst)
    }

    /// How many accepted connections the proxy holds open right now (whether forwarding,
    /// waiting for their upstream connection, or caught in a fault).
    pub fn open_connections(&self) -> usize {
        self.inner.open.load(Ordering::SeqCst)
    }

    fn set_trap(&self, marker: &[u8], action: TrapAction, repeating: bool) {
        assert!(
            !marker.is_empty() && marker.len() <= MAX_TRAP_MARKER,
            "a trap marker must be 1 to {MAX_TRAP_MARKER} bytes long, not {}",
            marker.len()
        );
        *self.inner.lock_trap() = Some(Trap {
            marker: marker.to_vec(),
            action,
            repeating,
        });
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trap = self.inner.lock_trap().as_ref().map(|trap| {
            (
                String::from_utf8_lossy(&trap.marker).into_owned(),
                trap.action,
            )
        });
        f.debug_struct("FaultProxy")
            .field("url", &self.url())
            .field("upstream", &self.upstream)
            .field("latency", &self.inner.latency())
            .field("blackhole", &*self.inner.blackhole.borrow())
            .field("refuse_new", &self.inner.refuse_new.load(Ordering::SeqCst))
            .field("trap", &trap)
            .field("connections_accepted", &self.connections_accepted())
            .field("open_connections", &self.open_connections())
            .finish()
    }
}

impl Inner {
    fn latency(&self) -> Duration {
        Duration::from_nanos(self.latency_nanos.load(Ordering::SeqCst))
    }

    fn lock_trap(&self) -> std::sync::MutexGuard<'_, Option<Trap>> {
        self.trap.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the armed trap catches `chunk`, which is about to be forwarded after `tail` (the
    /// end of what this connection forwarded before); updates `tail`. A match must end inside
    /// `chunk`, so that what was forwarded before the trap was armed never fires it alone.
    fn spring_trap(&self, tail: &mut Vec<u8>, chunk: &[u8]) -> Option<TrapAction> {
        let mut trap = self.lock_trap();
        let action = trap.as_ref().and_then(|armed| {
            let marker = armed.marker.as_slice();
            let carried = &tail[tail.len().saturating_sub(marker.len() - 1)..];
            let found = if carried.is_empty() {
                contains(chunk, marker)
            } else {
                let mut window = Vec::with_capacity(carried.len() + chunk.len());
                window.extend_from_slice(carried);
                window.extend_from_slice(chunk);
                contains(&window, marker)
            };
            found.then_some(armed.action)
        });
        if action.is_some() {
            self.traps_fired.fetch_add(1, Ordering::SeqCst);
            if trap.as_ref().is_some_and(|armed| !armed.repeating) {
                *trap = None;
            }
        }
        drop(trap);
        let keep = MAX_TRAP_MARKER - 1;
        if chunk.len() >= keep {
            tail.clear();
            tail.extend_from_slice(&chunk[chunk.len() - keep..]);
        } else {
            tail.extend_from_slice(chunk);
            let excess = tail.len().saturating_sub(keep);
            tail.drain(..excess);
        }
        action
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Decrements the open-connection count when a connection task ends, however it ends.
struct OpenGuard(Arc<Inner>);

impl OpenGuard {
    fn new(inner: &Arc<Inner>) -> Self {
        inner.open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(Arc::clone(inner))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts connections until the proxy is dropped, spawning one task per connection.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    inner: Arc<Inner>,
    mut stop: watch::Receiver<u64>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            stopped = stop.changed() => match stopped {
                Ok(()) => continue, // `drop_connections`: not for the listener
                Err(_) => return,   // the proxy was dropped
            },
            accepted = listener.accept() => accepted,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(_) => {
                // Usually transient (a connection reset before it was accepted, or out of file
                // descriptors): pause instead of spinning on the error.
                tokio::select! {
                    biased;
                    stopped = stop.changed() => if stopped.is_err() { return },
                    () = sleep(ACCEPT_RETRY) => {}
                }
                continue;
            }
        };
        inner.accepted.fetch_add(1, Ordering::SeqCst);
        if inner.refuse_new.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        let open = OpenGuard::new(&inner);
        // The connection's own receiver must not see `drop_connections` calls made before it was
        // accepted.
        stop.borrow_and_update();
        tokio::spawn(serve(
            client,
            upstream,
            Arc::clone(&inner),
            stop.clone(),
            open,
        ));
    }
}

/// How forwarding on a connection ended.
enum Outcome {
    /// Both directions ended, or a side failed: close normally.
    Closed,
    /// `drop_connections` (`reset: true`) or the proxy was dropped.
    Stopped { reset: bool },
    /// A trap caught the connection.
    Trapped(TrapAction),
}

/// Serves one accepted connection until it ends, a fault ends it, or the proxy is dropped.
async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    inner: Arc<Inner>,
    mut stop: watch::Receiver<u64>,
    _open: OpenGuard,
) {
    let connect = async {
        // A partition: the upstream connection waits until it heals.
        let _ = inner.blackhole.subscribe().wait_for(|on| !on).await;
        TcpStream::connect(upstream).await
    };
    let mut server = tokio::select! {
        biased;
        stopped = stop.changed() => {
            if stopped.is_ok() {
                let _ = client.set_zero_linger();
            }
            return;
        }
        connected = connect => match connected {
            Ok(server) => server,
            Err(_) => return, // upstream refused: close the client's connection
        },
    };
    // The proxy must not add Nagle delays of its own to small writes.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let outcome = tokio::select! {
        biased;
        stopped = stop.changed() => Outcome::Stopped { reset: stopped.is_ok() },
        outcome = forward(&mut client, &mut server, &inner) => outcome,
    };
    let reset = match outcome {
        Outcome::Closed => false,
        Outcome::Stopped { reset } => reset,
        Outcome::Trapped(TrapAction::Blackhole) => stop.changed().await.is_ok(),
        Outcome::Trapped(TrapAction::SwallowReplyThenClose(after)) => tokio::select! {
            biased;
            stopped = stop.changed() => stopped.is_ok(),
            () = sleep(after) => false,
            () = discard(&mut client) => false,
            () = discard(&mut server) => false,
        },
    };
    if reset {
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
    // Both sockets close here.
}

/// Reads and discards everything `socket` sends; never returns.
async fn discard(socket: &mut TcpStream) {
    let mut buf = vec![0; CHUNK];
    while let Ok(1..) = socket.read(&mut buf).await {}
    std::future::pending().await
}

/// How one direction of a connection ended.
enum PipeEnd {
    /// The reading side closed its end and the writing side was shut down in turn.
    Eof,
    /// Reading or writing failed.
    Failed,
    /// A trap caught the connection.
    Trapped(TrapAction),
}

/// Forwards both directions of a connection until both have ended, one fails, or a trap fires.
async fn forward(client: &mut TcpStream, server: &mut TcpStream, inner: &Inner) -> Outcome {
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    let up = pipe(client_read, server_write, inner, true);
    let down = pipe(server_read, client_write, inner, false);
    tokio::pin!(up, down);
    let (mut up_open, mut down_open) = (true, true);
    loop {
        let end = tokio::select! {
            end = &mut up, if up_open => {
                up_open = false;
                end
            }
            end = &mut down, if down_open => {
                down_open = false;
                end
            }
            else => return Outcome::Closed,
        };
        match end {
            PipeEnd::Eof => {}
            PipeEnd::Failed => return Outcome::Closed,
            PipeEnd::Trapped(action) => return Outcome::Trapped(action),
        }
    }
}

/// A chunk read from one side, or how reading ended, with the time it may be written.
struct Item {
    due: Instant,
    kind: ItemKind,
}

enum ItemKind {
    Data(Vec<u8>),
    Eof,
    Failed,
}

/// One direction: a reader that stamps each chunk with its due time (now + latency) and a writer
/// that writes it when due and the proxy is not partitioned, joined by a bounded queue.
async fn pipe(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    inner: &Inner,
    client_to_server: bool,
) -> PipeEnd {
    let (queue, mut queued) = mpsc::channel::<Item>(QUEUE);
    let read = async {
        let mut partition = inner.blackhole.subscribe();
        let mut buf = vec![0; CHUNK];
        loop {
            // A partitioned proxy reads nothing, so closed ends go unnoticed too.
            let _ = partition.wait_for(|on| !on).await;
            let kind = match from.read(&mut buf).await {
                Ok(0) => ItemKind::Eof,
                Ok(n) => ItemKind::Data(buf[..n].to_vec()),
                Err(_) => ItemKind::Failed,
            };
            let last = !matches!(kind, ItemKind::Data(_));
            let due = Instant::now() + inner.latency();
            if queue.send(Item { due, kind }).await.is_err() || last {
                break;
            }
        }
        // The writer ends the pipe.
        std::future::pending::<PipeEnd>().await
    };
    let write = async {
        let mut partition = inner.blackhole.subscribe();
        let mut tail = Vec::new();
        while let Some(Item { due, kind }) = queued.recv().await {
            if due > Instant::now() {
                sleep_until(due).await;
            }
            let _ = partition.wait_for(|on| !on).await;
            let data = match kind {
                ItemKind::Data(data) => data,
                ItemKind::Eof => {
                    // Half-close: pass the closed end on; the other direction keeps going.
                    return match to.shutdown().await {
                        Ok(()) => PipeEnd::Eof,
                        Err(_) => PipeEnd::Failed,
                    };
                }
                ItemKind::Failed => return PipeEnd::Failed,
            };
            let trapped = if client_to_server {
                inner.spring_trap(&mut tail, &data)
            } else {
                None
            };
            if to.write_all(&data).await.is_err() {
                return PipeEnd::Failed;
            }
            if let Some(action) = trapped {
                return PipeEnd::Trapped(action);
            }
        }
        PipeEnd::Failed // unreachable: the reader keeps the queue open
    };
    tokio::select! {
        end = write => end,
        end = read => end,
    }
}
