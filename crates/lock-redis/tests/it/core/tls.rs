//! The lock over TLS (`rediss://`) against a redis-server with a TLS port (lock-testkit's test
//! CA): it works with the CA file, and every misconfiguration fails closed in time, saying why.
//!
//! Waits are event-driven with generous deadlines (a loaded 2-core machine); upper bounds are
//! the contract's (wait time + one command timeout) plus [`SLACK`].

use crate::common;

use std::time::Duration;

use crate::common::Setup;
use common::{COMMAND_TIMEOUT, SLACK, WATCHDOG, eventually, one_subscriber};
use lock_core::LockError;
use lock_core::lock::{DistributedLock, Lease, ReleaseOutcome};
use lock_redis::RedisFailure;
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use lock_testkit::tls::TestCertificates;
use tokio::time::Instant;

/// Wait time of the failing acquisitions below.
const WAIT: Duration = Duration::from_secs(1);

async fn tls_server(certs: &TestCertificates) -> RedisServer {
    RedisServer::builder()
        .tls(certs)
        .start()
        .await
        .expect("redis-server with TLS did not start")
}

/// The test clients' settings (short watchdog and command timeouts), for `address`.
fn config_for(server: &RedisServer, address: String) -> Setup {
    common::config(server).address(address)
}

/// `CLIENT LIST` as the local port of every connection (`laddr=127.0.0.1:<port>`).
async fn connection_ports(server: &RedisServer) -> Vec<u16> {
    let list = server.cmd(&["CLIENT", "LIST"]).await.unwrap();
    list.lines()
        .filter_map(|line| {
            let laddr = line.split(' ').find_map(|f| f.strip_prefix("laddr="))?;
            laddr.rsplit_once(':')?.1.parse().ok()
        })
        .collect()
}

/// Acquires `key` with `client` and expects it to fail closed — `LOCK_ACQUISITION_FAILED`,
/// reason `backend_unavailable` — within the wait time plus one command timeout (plus slack).
/// Nothing may be written. Returns the error.
async fn fails_closed(server: &RedisServer, client: &RedisLock, key: &str) -> LockError {
    let started = Instant::now();
    let options = common::watchdog_waiting(WAIT);
    let error = client
        .acquire_with(key, options)
        .await
        .expect_err("the acquisition must fail closed");
    let elapsed = started.elapsed();
    assert!(
        elapsed <= WAIT + COMMAND_TIMEOUT + SLACK,
        "took {elapsed:?}, more than wait + command timeout + slack"
    );
    assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED", "{error}");
    let details = error.details();
    assert_eq!(details["reason"], "backend_unavailable", "{error}");
    assert_eq!(details["lockKey"], key);
    assert_eq!(
        server.cmd(&["DBSIZE"]).await.unwrap(),
        "0",
        "something was written"
    );
    eprintln!("{key}: {error}");
    error
}

/// The lock over TLS with the test CA: acquire, a waiter woken by the release of another client,
/// watchdog renewal over three periods, release — and every connection of the clients is on the
/// TLS port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_works_over_tls_with_the_ca_file() {
    let certs = TestCertificates::generate_temp().unwrap();
    let server = tls_server(&certs).await;
    let config = config_for(&server, server.tls_url()).tls_ca_file(&certs.ca);
    let holder = common::connect(config.clone()).await;
    let waiter = common::connect(config).await;
    holder.client().ping().await.unwrap();
    waiter.client().ping().await.unwrap();

    // Two clients × (commands + pub/sub) connections, all on the TLS port; the only
    // connection on the plain port is the one asking.
    let tls_port = server.tls_port().unwrap();
    let on_tls = eventually(SLACK, || async {
        let ports = connection_ports(&server).await;
        ports.iter().filter(|p| **p == tls_port).count() == 4
            && ports.iter().filter(|p| **p == server.port()).count() == 1
    })
    .await;
    assert!(
        on_tls,
        "connections: {:?} (TLS port {tls_port}, plain port {})",
        connection_ports(&server).await,
        server.port()
    );

    let before = common::command_calls(&server).await;
    let held = holder.acquire("tls", Lease::Watchdog).await.unwrap();
    let value = common::value(&server, &holder.redis_key("tls")).await;
    assert!(
        value.starts_with("H|") && value.contains(held.owner()),
        "{value}"
    );

    let waiting = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(60));
        let handle = waiter.acquire_with("tls", options).await;
        (waiter, handle)
    });
    let channel = holder.release_channel("tls");
    let subscribed = one_subscriber(&server, &channel).await;
    assert!(subscribed, "the waiter never subscribed to {channel}");

    // Three watchdog periods (a lease would have expired three times over without renewal):
    // still held, renewed over TLS, the waiter still waiting.
    tokio::time::sleep(WATCHDOG * 3 + WATCHDOG / 2).await;
    assert!(held.is_held(), "{:?}", held.status());
    let after = common::command_calls(&server).await;
    assert!(
        common::delta(&before, &after, "pexpire") >= 3,
        "fewer than three renewals in three periods: {after:?}"
    );
    let value_now = common::value(&server, &holder.redis_key("tls")).await;
    assert_eq!(value_now, value, "the key changed hands while held");
    assert!(
        !waiting.is_finished(),
        "the waiter gave up or got a held lock"
    );

    let token = held.fencing_token();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (waiter, granted) = tokio::time::timeout(SLACK, waiting)
        .await
        .expect("the release must wake the waiter")
        .unwrap();
    let granted = granted.unwrap();
    assert!(granted.fencing_token() > token);
    assert!(granted.is_held());
    assert_eq!(granted.release().await.unwrap(), ReleaseOutcome::Released);
    drop(waiter);
}

/// The same TLS address without the CA file uses the system's roots, which do not know the test
/// CA: every acquisition fails closed, and the message names the certificate problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ca_file_the_system_roots_reject_the_server_and_acquisitions_fail_closed() {
    let certs = TestCertificates::generate_temp().unwrap();
    let server = tls_server(&certs).await;
    let client = common::connect(config_for(&server, server.tls_url())).await;
    for attempt in 0..2 {
        let error = fails_closed(&server, &client, &format!("system-roots-{attempt}")).await;
        assert_certificate_problem(&error);
    }
}

/// A CA file of another CA: fails closed the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_of_another_ca_fails_closed_naming_the_certificate() {
    let certs = TestCertificates::generate_temp().unwrap();
    let other = TestCertificates::generate_temp().unwrap();
    let server = tls_server(&certs).await;
    let client =
        common::connect(config_for(&server, server.tls_url()).tls_ca_file(&other.ca)).await;
    let error = fails_closed(&server, &client, "other-ca").await;
    assert_certificate_problem(&error);
}

fn assert_certificate_problem(error: &LockError) {
    let message = error.to_string();
    assert!(
        message.to_lowercase().contains("certificate"),
        "on-call cannot tell it is a certificate problem: {message}"
    );
    assert_eq!(error.details()["message"], message);
    match common::redis_failure(error) {
        RedisFailure::Unreachable { last_error, .. } => assert!(
            last_error.to_lowercase().contains("certificate"),
            "{last_error}"
        ),
        other => panic!("expected Unreachable with the TLS error, got {other:?}"),
    }
}

/// A plain `redis://` address pointed at the TLS port: Redis fails the handshake and closes the
/// connection; acquisitions fail closed in time instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_redis_to_the_tls_port_fails_closed_in_time() {
    let certs = TestCertificates::generate_temp().unwrap();
    let server = tls_server(&certs).await;
    let plain_to_tls = format!("redis://127.0.0.1:{}", server.tls_port().unwrap());
    let client = common::connect(config_for(&server, plain_to_tls)).await;
    for attempt in 0..2 {
        fails_closed(&server, &client, &format!("plain-to-tls-{attempt}")).await;
    }
    let started = Instant::now();
    let error = client.client().ping().await.unwrap_err();
    assert!(started.elapsed() <= COMMAND_TIMEOUT + SLACK);
    assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED", "{error}");
}

/// The other way round, `rediss://` at the plain port: the server never answers the TLS
/// handshake in kind; acquisitions fail closed in time, and say what may be wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_plain_port_fails_closed_in_time() {
    let certs = TestCertificates::generate_temp().unwrap();
    let server = tls_server(&certs).await;
    let tls_to_plain = format!("rediss://127.0.0.1:{}", server.port());
    let client = common::connect(config_for(&server, tls_to_plain).tls_ca_file(&certs.ca)).await;
    let mut errors = Vec::new();
    for attempt in 0..2 {
        errors.push(fails_closed(&server, &client, &format!("tls-to-plain-{attempt}")).await);
    }
    // Once the connection attempt has timed out, the error suggests the likely mistake.
    let last = errors.pop().unwrap().to_string();
    assert!(
        last.contains("if the server has no TLS, use a redis:// address"),
        "{last}"
    );
}
