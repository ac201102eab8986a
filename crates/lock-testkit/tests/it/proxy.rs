//! `FaultProxy` in front of a real redis-server, driven by raw TCP connections speaking RESP.
//!
//! Everything waits on events with generous deadlines (the machine may be a loaded 2-core box
//! running other test processes). Timing assertions are lower bounds only (latency); the only
//! short bound is "no reply within 300 ms", which is the assertion itself where nothing may
//! arrive at all.

use std::time::Duration;

use lock_testkit::{FaultProxy, RedisServer, TrapAction};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout, timeout_at};

use crate::common::GENEROUS;

/// How long "no reply" is watched for.
const QUIET: Duration = Duration::from_millis(300);
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const MARKER: &[u8] = b"trapped-key";

async fn start() -> (RedisServer, FaultProxy) {
    let redis = RedisServer::start().await.expect("redis-server starts");
    let proxy = FaultProxy::start(("127.0.0.1", redis.port()))
        .await
        .expect("the proxy starts");
    (redis, proxy)
}

async fn connect(proxy: &FaultProxy) -> TcpStream {
    timeout(GENEROUS, TcpStream::connect(("127.0.0.1", proxy.port())))
        .await
        .expect("connect timed out")
        .expect("connect to the proxy")
}

/// A RESP command of bulk strings.
fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// What a connection delivered.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// One CRLF-terminated line, without the CRLF (`+PONG`, `+OK`).
    Line(String),
    /// EOF or an error (a reset) before any byte.
    Closed,
    /// Nothing within the deadline.
    Silent,
}

/// Reads one reply line from `conn` within `within`. Only for single-line replies, one
/// command at a time (bytes after the line would be lost).
async fn read_reply(conn: &mut TcpStream, within: Duration) -> Reply {
    let deadline = Instant::now() + within;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            return Reply::Line(String::from_utf8_lossy(&buf[..end]).into_owned());
        }
        let partial = || String::from_utf8_lossy(&buf).into_owned();
        match timeout_at(deadline, conn.read(&mut chunk)).await {
            Err(_) if buf.is_empty() => return Reply::Silent,
            Ok(Ok(0) | Err(_)) if buf.is_empty() => return Reply::Closed,
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => panic!("a partial reply: {:?}", partial()),
        }
    }
}

/// Sends `PING` and expects `+PONG` within [`GENEROUS`].
async fn ping(conn: &mut TcpStream) {
    conn.write_all(PING).await.expect("send PING");
    assert_eq!(
        read_reply(conn, GENEROUS).await,
        Reply::Line("+PONG".into())
    );
}

/// Clients connected to `redis`, not counting the `INFO` call's own connection.
async fn redis_clients(redis: &RedisServer) -> usize {
    let connected = redis.connected_clients().await.unwrap();
    usize::try_from(connected).unwrap() - 1
}

/// Waits until `check` holds; panics naming `what` after [`GENEROUS`].
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let held = lock_testkit::eventually(GENEROUS, check).await;
    assert!(held, "{what}: not within {GENEROUS:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_commands_and_replies_unchanged() {
    let (redis, proxy) = start().await;
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    assert!(format!("{proxy:?}").contains(&proxy.url()));

    let mut conn = connect(&proxy).await;
    for _ in 0..3 {
        ping(&mut conn).await;
    }
    // A reply much larger than one chunk arrives complete and in order.
    let value: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    conn.write_all(&command(&[b"ECHO", &value])).await.unwrap();
    let mut expected = format!("${}\r\n", value.len()).into_bytes();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\n");
    let mut got = vec![0; expected.len()];
    timeout(GENEROUS, conn.read_exact(&mut got))
        .await
        .expect("the ECHO reply timed out")
        .unwrap();
    assert!(got == expected, "the ECHO reply came back altered");

    assert_eq!(proxy.connections_accepted(), 1);
    assert_eq!(proxy.open_connections(), 1);
    assert_eq!(redis_clients(&redis).await, 1);
    assert_eq!(proxy.traps_fired(), 0);
}

/// Without Redis: an upstream that reads until EOF and only then answers. The client's
/// half-close must reach it, and its answer must still come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_close_is_passed_on_and_the_other_direction_keeps_going() {
    let upstream = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = upstream.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut conn, _) = upstream.accept().await.unwrap();
        let mut request = Vec::new();
        conn.read_to_end(&mut request).await.unwrap();
        conn.write_all(format!("got {} bytes", request.len()).as_bytes())
            .await
            .unwrap();
        // Dropped: the upstream closes its end too.
    });
    let proxy = FaultProxy::start(addr).await.unwrap();
    let mut conn = connect(&proxy).await;
    conn.write_all(b"hello").await.unwrap();
    conn.shutdown().await.unwrap();
    let mut answer = String::new();
    timeout(GENEROUS, conn.read_to_string(&mut answer))
        .await
        .expect("no answer after the half-close")
        .unwrap();
    assert_eq!(answer, "got 5 bytes");
    timeout(GENEROUS, server).await.unwrap().unwrap();
    // Both directions ended: the proxy let go of the connection.
    eventually("the proxy closes a finished connection", || async {
        proxy.open_connections() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_is_added_in_both_directions_on_open_and_new_connections() {
    let (_redis, proxy) = start().await;
    let mut open = connect(&proxy).await;
    ping(&mut open).await;

    proxy.set_latency(Duration::from_millis(200));
    for conn in [&mut open, &mut connect(&proxy).await] {
        let started = Instant::now();
        ping(conn).await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(400),
            "a PING round trip through 200 ms of one-way latency took only {took:?}"
        );
    }

    proxy.set_latency(Duration::ZERO);
    ping(&mut open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_connections_closes_both_sides_and_new_connections_work() {
    let (redis, proxy) = start().await;
    let mut a = connect(&proxy).await;
    let mut b = connect(&proxy).await;
    ping(&mut a).await;
    ping(&mut b).await;
    assert_eq!(proxy.open_connections(), 2);
    assert_eq!(redis_clients(&redis).await, 2);

    proxy.drop_connections();
    assert_eq!(read_reply(&mut a, GENEROUS).await, Reply::Closed);
    assert_eq!(read_reply(&mut b, GENEROUS).await, Reply::Closed);
    eventually("the proxy holds no connection", || async {
        proxy.open_connections() == 0
    })
    .await;
    eventually("Redis sees its connections closed", || async {
        redis_clients(&redis).await == 0
    })
    .await;

    let mut c = connect(&proxy).await;
    ping(&mut c).await;
    assert_eq!(proxy.open_connections(), 1);
    assert_eq!(proxy.connections_accepted(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackhole_forwards_and_closes_nothing_until_it_heals() {
    let (redis, proxy) = start().await;
    let mut before = connect(&proxy).await;
    ping(&mut before).await;

    proxy.blackhole(true);
    before.write_all(PING).await.unwrap();
    assert_eq!(read_reply(&mut before, QUIET).await, Reply::Silent);
    // New connections are accepted, but black-holed too: not even connected upstream.
    let mut during = connect(&proxy).await;
    during.write_all(PING).await.unwrap();
    assert_eq!(read_reply(&mut during, QUIET).await, Reply::Silent);
    eventually("the proxy accepts the connection", || async {
        proxy.open_connections() == 2
    })
    .await;
    assert_eq!(proxy.connections_accepted(), 2);
    assert_eq!(redis_clients(&redis).await, 1);

    // Healed: what was sent meanwhile is delivered, and new connections work.
    proxy.blackhole(false);
    assert_eq!(
        read_reply(&mut before, GENEROUS).await,
        Reply::Line("+PONG".into())
    );
    assert_eq!(
        read_reply(&mut during, GENEROUS).await,
        Reply::Line("+PONG".into())
    );
    let mut after = connect(&proxy).await;
    ping(&mut after).await;
    assert_eq!(redis_clients(&redis).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_new_closes_new_connections_at_once_and_spares_open_ones() {
    let (_redis, proxy) = start().await;
    let mut open = connect(&proxy).await;
    ping(&mut open).await;

    proxy.refuse_new(true);
    let mut refused = connect(&proxy).await; // the listening socket still accepts
    let _ = refused.write_all(PING).await; // may already fail
    assert_eq!(read_reply(&mut refused, GENEROUS).await, Reply::Closed);
    assert_eq!(proxy.connections_accepted(), 2);
    assert_eq!(proxy.open_connections(), 1);
    ping(&mut open).await;

    proxy.refuse_new(false);
    let mut later = connect(&proxy).await;
    ping(&mut later).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swallow_trap_forwards_the_request_loses_its_reply_and_closes_later() {
    let (redis, proxy) = start().await;
    let mut caught = connect(&proxy).await;
    let mut bystander = connect(&proxy).await;
    ping(&mut caught).await;
    ping(&mut bystander).await;

    let close_after = Duration::from_millis(500);
    proxy.arm_trap(MARKER, TrapAction::SwallowReplyThenClose(close_after));
    assert!(proxy.trap_armed());
    ping(&mut bystander).await; // no marker: not caught

    let sent = Instant::now();
    caught
        .write_all(&command(&[b"SET", MARKER, b"1"]))
        .await
        .unwrap();
    assert_eq!(read_reply(&mut caught, GENEROUS).await, Reply::Closed);
    let took = sent.elapsed();
    assert!(
        took >= close_after,
        "the connection closed {took:?} after the request, before the {close_after:?} delay"
    );
    // The request ran although its reply never came.
    assert_eq!(redis.cmd(&["GET", "trapped-key"]).await.unwrap(), "1");
    assert!(!proxy.trap_armed());
    assert_eq!(proxy.traps_fired(), 1);
    eventually("the caught connection is let go", || async {
        proxy.open_connections() == 1
    })
    .await;

    // One-shot: the same request on another connection is answered.
    ping(&mut bystander).await;
    bystander
        .write_all(&command(&[b"SET", MARKER, b"2"]))
        .await
        .unwrap();
    assert_eq!(
        read_reply(&mut bystander, GENEROUS).await,
        Reply::Line("+OK".into())
    );
    assert_eq!(proxy.traps_fired(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackhole_trap_leaves_the_connection_open_and_silently_dead() {
    let (redis, proxy) = start().await;
    let mut caught = connect(&proxy).await;
    let mut bystander = connect(&proxy).await;
    ping(&mut caught).await;
    ping(&mut bystander).await;

    proxy.arm_trap(MARKER, TrapAction::Blackhole);
    caught
        .write_all(&command(&[b"SET", MARKER, b"1"]))
        .await
        .unwrap();
    assert_eq!(read_reply(&mut caught, QUIET).await, Reply::Silent);
    // The request got through; only its reply vanished.
    eventually("the trapped SET reaches Redis", || async {
        redis.cmd(&["GET", "trapped-key"]).await.unwrap() == "1"
    })
    .await;
    assert!(!proxy.trap_armed());
    assert_eq!(proxy.traps_fired(), 1);
    // Dead from then on, but nothing is closed on either side.
    caught.write_all(PING).await.unwrap();
    assert_eq!(read_reply(&mut caught, QUIET).await, Reply::Silent);
    assert_eq!(proxy.open_connections(), 2);
    assert_eq!(redis_clients(&redis).await, 2);
    ping(&mut bystander).await;

    proxy.drop_connections();
    assert_eq!(read_reply(&mut caught, GENEROUS).await, Reply::Closed);
    eventually("Redis sees the dead connection closed", || async {
        redis_clients(&redis).await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeating_trap_catches_every_connection_until_disarmed() {
    let (_redis, proxy) = start().await;
    proxy.arm_trap_repeating(MARKER, TrapAction::Blackhole);
    for i in 1..=2u64 {
        let mut conn = connect(&proxy).await;
        ping(&mut conn).await;
        conn.write_all(&command(&[b"SET", MARKER, b"1"]))
            .await
            .unwrap();
        assert_eq!(read_reply(&mut conn, QUIET).await, Reply::Silent);
        assert_eq!(proxy.traps_fired(), i);
        assert!(proxy.trap_armed());
    }
    proxy.disarm_trap();
    assert!(!proxy.trap_armed());
    let mut conn = connect(&proxy).await;
    conn.write_all(&command(&[b"SET", MARKER, b"1"]))
        .await
        .unwrap();
    assert_eq!(
        read_reply(&mut conn, GENEROUS).await,
        Reply::Line("+OK".into())
    );
    assert_eq!(proxy.traps_fired(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_fires_on_a_marker_split_across_chunks_but_not_on_one_sent_before_it_was_armed() {
    let (redis, proxy) = start().await;
    let mut conn = connect(&proxy).await;
    let request = command(&[b"SET", MARKER, b"1"]);
    // Sent before the trap was armed; the marker is now in what the connection forwarded last.
    conn.write_all(&request).await.unwrap();
    assert_eq!(
        read_reply(&mut conn, GENEROUS).await,
        Reply::Line("+OK".into())
    );
    proxy.arm_trap(MARKER, TrapAction::Blackhole);
    ping(&mut conn).await;
    assert!(proxy.trap_armed());

    // The marker in two writes, apart in time: TCP delivers them as two chunks (or one; the
    // trap must fire either way).
    redis.cmd(&["DEL", "trapped-key"]).await.unwrap();
    let split = request
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .unwrap()
        + 5; // inside "trapped-key"
    conn.write_all(&request[..split]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    conn.write_all(&request[split..]).await.unwrap();
    assert_eq!(read_reply(&mut conn, QUIET).await, Reply::Silent);
    assert_eq!(proxy.traps_fired(), 1);
    eventually("the trapped SET reaches Redis", || async {
        redis.cmd(&["GET", "trapped-key"]).await.unwrap() == "1"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "a trap marker must be 1 to 1024 bytes long")]
async fn an_empty_trap_marker_is_refused() {
    let proxy = FaultProxy::start(("127.0.0.1", 1)).await.unwrap();
    proxy.arm_trap(b"", TrapAction::Blackhole);
}

/// Dropping the proxy closes every connection, whatever state it is in — forwarding, caught
/// by a trap, waiting for a partition to heal — on both sides, and ends all its tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_proxy_closes_every_connection_and_ends_its_tasks() {
    let redis = RedisServer::start().await.expect("redis-server starts");
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();
    let proxy = FaultProxy::start(("127.0.0.1", redis.port()))
        .await
        .unwrap();
    let port = proxy.port();

    let mut forwarding = connect(&proxy).await;
    ping(&mut forwarding).await;
    proxy.arm_trap(MARKER, TrapAction::Blackhole);
    let mut trapped = connect(&proxy).await;
    trapped
        .write_all(&command(&[b"SET", MARKER, b"1"]))
        .await
        .unwrap();
    assert_eq!(read_reply(&mut trapped, QUIET).await, Reply::Silent);
    eventually("the trap fires", || async { proxy.traps_fired() == 1 }).await;
    proxy.set_latency(Duration::from_secs(3600));
    proxy.blackhole(true);
    let mut partitioned = connect(&proxy).await;
    partitioned.write_all(PING).await.unwrap();
    eventually("the proxy accepts the third connection", || async {
        proxy.open_connections() == 3
    })
    .await;
    eventually("Redis sees the two forwarded connections", || async {
        redis_clients(&redis).await == 2
    })
    .await;
    assert!(metrics.num_alive_tasks() >= baseline + 4); // the accept loop, three connections

    drop(proxy);
    for conn in [&mut forwarding, &mut trapped, &mut partitioned] {
        assert_eq!(read_reply(conn, GENEROUS).await, Reply::Closed);
    }
    eventually("Redis sees every connection closed", || async {
        redis_clients(&redis).await == 0
    })
    .await;
    eventually("the proxy's tasks end", || async {
        metrics.num_alive_tasks() <= baseline
    })
    .await;
    eventually("the proxy's port refuses connections", || async {
        TcpStream::connect(("127.0.0.1", port)).await.is_err()
    })
    .await;
}
