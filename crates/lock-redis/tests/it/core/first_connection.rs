//! The first connection: made at once, whatever the command timeout, and a connection attempt
//! that times out names the address and the timeout, and a server that is not Redis says so.

use crate::common;

use std::time::Duration;

use common::{config, server};
use lock_core::lock::{DistributedLock, Lease};

/// With a command timeout shorter than fred's first reconnect delay (100 to 200 ms), `connect`
/// still returns connected: the first acquisition right after it is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_command_timeout_still_connects_before_the_first_acquisition() {
    let redis = server().await;
    for i in 0..10 {
        let lock = common::connect(config(&redis).command_timeout(Duration::from_millis(50))).await;
        let name = format!("first-{i}");
        let handle = lock
            .try_acquire(&name, Lease::Fixed(Duration::from_secs(10)))
            .await
            .unwrap_or_else(|e| panic!("the first acquisition failed: {e}"));
        let _ = handle.release().await.unwrap();
    }
}

/// A listener that accepts connections and never answers (a hung Redis, a wrong port behind a
/// proxy): the connection attempt times out, and the acquisitions' error names the address and
/// the timeout, as a command timeout on a live connection does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_attempt_that_times_out_names_the_address_and_the_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let address = format!("redis://:secret@127.0.0.1:{port}");
    let lock = common::connect(
        common::default_config(&address)
            .command_timeout(Duration::from_millis(200))
            .wait_time(Duration::ZERO),
    )
    .await;
    let error = lock
        .try_acquire("hung", Lease::Fixed(Duration::from_secs(10)))
        .await
        .expect_err("granted by a server that never answers");
    let text = error.to_string();
    assert!(
        text.contains(&format!("redis://:***@127.0.0.1:{port}")),
        "the address is not named: {text}"
    );
    assert!(
        text.contains("200ms") && text.contains("command_timeout"),
        "the timeout is not named: {text}"
    );
    assert!(!text.contains("secret"), "{text}");
    eprintln!("{text}");
}

/// A listener that answers, but not in Redis' protocol (an HTTP server on the port): the
/// acquisitions' error says so and names the likely causes, rather than "unreachable" alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_redis_is_named_so() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let address = format!("redis://127.0.0.1:{port}");
    let lock = common::connect(
        common::default_config(&address)
            .command_timeout(Duration::from_millis(500))
            .wait_time(Duration::ZERO),
    )
    .await;
    let error = lock
        .try_acquire("not-redis", Lease::Fixed(Duration::from_secs(10)))
        .await
        .expect_err("granted by a server that is not Redis");
    let text = error.to_string();
    assert!(
        text.contains("does not answer in Redis' protocol") && text.contains("rediss://"),
        "{text}"
    );
}

/// An address naming a database the server does not have (`/99` on a default server of 16) is
/// a configuration error at connect, like a refused password — not an outage to wait out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_server_does_not_have_fails_connect_naming_the_address() {
    let redis = server().await;
    let address = format!("{}/99", redis.url().trim_end_matches('/'));
    let error = common::try_connect(config(&redis).address(&address))
        .await
        .expect_err("connect succeeded with a database the server does not have");
    assert_eq!(error.details()["argument"], "address", "{error}");
    let text = error.to_string();
    assert!(
        text.contains("no database of the address's number"),
        "{text}"
    );
    assert!(text.contains("databases"), "{text}");
}

/// While Redis refuses connections, the inspection calls (`ping`, `status`, `list`,
/// `force_release`) fail at once naming the connection error, as an acquisition does, rather
/// than after the command timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_inspection_fails_at_once() {
    let closed = lock_testkit::ClosedPort::new().unwrap();
    let setup = common::default_config(format!("redis://127.0.0.1:{}", closed.port()))
        .command_timeout(Duration::from_secs(60));
    let client = lock_redis::RedisClient::connect(setup.redis.clone())
        .await
        .expect("a client starts while Redis is down");
    let lock = lock_redis::lock::RedisLock::new(&client, setup.lock.clone())
        .await
        .unwrap();
    // Well under the command timeout, which these calls waited before.
    let at_once = Duration::from_secs(30);
    let errors = [
        tokio::time::timeout(at_once, client.ping())
            .await
            .map(|r| r.map(|_| ())),
        tokio::time::timeout(at_once, lock.status("k"))
            .await
            .map(|r| r.map(|_| ())),
        tokio::time::timeout(at_once, lock.list(None, 10))
            .await
            .map(|r| r.map(|_| ())),
        tokio::time::timeout(at_once, lock.force_release("k"))
            .await
            .map(|r| r.map(|_| ())),
    ];
    for (call, outcome) in ["ping", "status", "list", "force_release"]
        .iter()
        .zip(errors)
    {
        let error = outcome
            .unwrap_or_else(|_| panic!("{call} waited for the command timeout"))
            .expect_err("answered by a Redis that is down");
        assert!(error.to_string().contains("unreachable"), "{call}: {error}");
    }
}

/// A Redis that accepts connections and never answers (stopped with SIGSTOP): start-up waits
/// one command timeout in all, not one more per script preload or check. The first connection
/// attempt times out when the wait for it does: set-up is skipped whichever ends first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_never_answers_delays_start_up_by_one_command_timeout() {
    let redis = server().await;
    redis.pause().unwrap();
    let timeout = Duration::from_secs(5);
    let setup = common::default_config(redis.url()).command_timeout(timeout);
    let started = tokio::time::Instant::now();
    let client = lock_redis::RedisClient::connect(setup.redis.clone())
        .await
        .unwrap();
    let _lock = lock_redis::lock::RedisLock::new(&client, setup.lock.clone())
        .await
        .unwrap();
    let _caches = lock_redis::cache::RedisCaches::new(&client).await;
    let _values = lock_redis::values::RedisValues::new(&client).await;
    // One timeout, with room for a slow machine; a second one would pass 2 × 5 s.
    let took = started.elapsed();
    redis.resume().unwrap();
    assert!(took < 2 * timeout, "start-up took {took:?}");
}
