//! Credentials: `AUTH` with a user and password (an ACL user) and with a password only
//! (`requirepass`), also over TLS; a wrong or missing password, or a user refused a command the
//! connection set-up sends, fails `connect` as a configuration error saying so (`WRONGPASS` /
//! `NOAUTH` / `NOPERM`) and naming the address. In every case no password ever shows — not in an error's `Display`,
//! `Debug` or `details()`, not in the `Debug` of `Setup` or `RedisLock`, and not in
//! anything logged at `TRACE`, the lock's own `tracing` events and the Redis client's (fred
//! logs with the `log` crate; the subscriber below bridges it into the same capture).
//!
//! Every secret of this file contains [`MARK`]; every test ends by checking that nothing it
//! printed, formatted or logged contains it. The log capture is process-wide (one global
//! subscriber, so `tracing`'s per-callsite interest cache cannot hide events of parallel tests).

mod common;

use crate::common::Setup;
use std::time::Duration;

use common::{COMMAND_TIMEOUT, SLACK, one_subscriber};
use lock_core::LockError;
use lock_core::lock::{DistributedLock, Lease, ReleaseOutcome};
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use lock_testkit::secrets::{
    AT_PASSWORD, AT_PASSWORD_IN_URL, PASSWORD, SENTINEL_PASSWORD, USER, WRONG,
    assert_error_has_no_secret, assert_no_secret,
};
use lock_testkit::tls::TestCertificates;
use tokio::time::Instant;

/// Everything logged at `TRACE` by this test process, `log` records included.
fn logs() -> &'static CapturedLogs {
    CapturedLogs::global(tracing::Level::TRACE)
}

/// The error shows no secret in `Display`, `Debug`, `details()` or any source's `Display`.
#[track_caller]
fn assert_lock_error_has_no_secret(error: &LockError) {
    assert_error_has_no_secret(error);
    assert_no_secret("the error's details", &format!("{:?}", error.details()));
}

/// Nothing logged so far in this process shows a secret, and at `TRACE` there was plenty of
/// output to look at.
#[track_caller]
fn assert_logs_have_no_secret() {
    let logged = logs().text();
    assert!(
        logged.contains("TRACE") || logged.contains("DEBUG"),
        "no logs captured"
    );
    assert_no_secret("the logs", &logged);
}

/// A server with the user `app` (password `password`, every command, key and channel).
async fn server_with_user(password: &str) -> RedisServer {
    logs();
    let redis = common::server().await;
    add_user(&redis, password).await;
    redis
}

async fn add_user(redis: &RedisServer, password: &str) {
    redis.add_user(USER, password, &[]).await.unwrap();
}

/// `redis://<userinfo>@127.0.0.1:<port>`.
fn url_with(redis: &RedisServer, userinfo: &str) -> String {
    redis
        .url()
        .replace("redis://", &format!("redis://{userinfo}@"))
}

/// Acquire, a second client waiting on the release (pub/sub connection authenticated too),
/// release: the lock works with `config`. Checks that both clients' connections are logged in
/// as `user` (`CLIENT LIST`).
async fn the_lock_works(redis: &RedisServer, config: Setup, user: &str) {
    let holder = common::connect(config.clone()).await;
    let waiter = common::connect(config.clone()).await;
    holder.client().ping().await.unwrap();
    waiter.client().ping().await.unwrap();
    assert_no_secret("Setup's Debug", &format!("{config:?}"));
    assert_no_secret("RedisLock's Debug", &format!("{holder:?}"));
    assert_no_secret("the config's redacted address", &config.redacted_address());
    assert_no_secret("the namespace", holder.namespace());

    let held = holder
        .acquire("credentials", Lease::Watchdog)
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(60));
        waiter.acquire_with("credentials", options).await
    });
    let channel = holder.release_channel("credentials");
    let subscribed = one_subscriber(redis, &channel).await;
    assert!(subscribed, "the waiter never subscribed");
    // Commands and pub/sub connections of both clients, each logged in as `user`.
    let clients = redis.cmd(&["CLIENT", "LIST"]).await.unwrap();
    let as_user = clients
        .lines()
        .filter(|l| l.contains(&format!(" user={user} ")))
        .count();
    assert!(as_user >= 4, "{clients}");
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let handle = waiting.await.unwrap().unwrap();
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_authenticate() {
    let redis = server_with_user(PASSWORD).await;
    let address = url_with(&redis, &format!("{USER}:{PASSWORD}"));
    the_lock_works(&redis, common::config(&redis).address(address), USER).await;
    assert_logs_have_no_secret();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_percent_encoded_password_authenticates_and_never_shows() {
    let redis = server_with_user(AT_PASSWORD).await;
    let address = url_with(&redis, &format!("{USER}:{AT_PASSWORD_IN_URL}"));
    let config = common::config(&redis).address(&address);
    assert!(!config.redacted_address().contains("%40"));
    the_lock_works(&redis, config, USER).await;
    assert_logs_have_no_secret();
}

/// A redis-server that asks every client for [`PASSWORD`].
async fn requirepass_server() -> RedisServer {
    RedisServer::start_with_password(PASSWORD).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_alone_authenticates_against_requirepass() {
    logs();
    let redis = requirepass_server().await;
    let address = url_with(&redis, &format!(":{PASSWORD}"));
    the_lock_works(&redis, common::config(&redis).address(address), "default").await;
    assert_logs_have_no_secret();
}

/// Connects with `config` and expects the connect itself to fail, within one command timeout:
/// refused credentials are a configuration error (`LOCK_INVALID_ARGUMENT` naming
/// `address`), not an outage. The error names `expected` (`WRONGPASS`, `NOAUTH`,
/// `NOPERM`) and the address with its password as `***`, and shows no secret.
async fn connect_fails_naming(config: Setup, expected: &str) {
    let started = Instant::now();
    let error = common::try_connect(config.clone())
        .await
        .expect_err("connected with credentials Redis refuses");
    assert!(
        started.elapsed() < COMMAND_TIMEOUT + SLACK,
        "connect took {:?}",
        started.elapsed()
    );
    assert_eq!(error.code(), "LOCK_INVALID_ARGUMENT", "{error}");
    assert_eq!(error.details()["argument"], "address", "{error}");
    let text = error.to_string();
    assert!(text.contains(expected), "{expected} not named: {text}");
    assert!(
        text.contains(&config.redacted_address()),
        "the address is not named: {text}"
    );
    assert!(
        !text.contains("unreachable"),
        "reported as an outage: {text}"
    );
    assert_lock_error_has_no_secret(&error);
    eprintln!("{expected}: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_connect_naming_wrongpass_and_the_address() {
    let redis = server_with_user(PASSWORD).await;
    let user_wrong = url_with(&redis, &format!("{USER}:{WRONG}"));
    connect_fails_naming(common::config(&redis).address(user_wrong), "WRONGPASS").await;
    // The right password of another user, percent-encoded.
    let encoded_wrong = url_with(&redis, &format!("nobody:{AT_PASSWORD_IN_URL}"));
    connect_fails_naming(common::config(&redis).address(encoded_wrong), "WRONGPASS").await;
    assert_logs_have_no_secret();
    // The refused clients' connection tasks ended: nothing asks fred to quit them again.
    let logged = logs().text();
    assert!(
        !logged.contains("Attempted to quit client that was already stopped"),
        "{logged}"
    );
}

/// A user who may not run a command the connection set-up sends (`SELECT` of the address's
/// database) cannot use the lock either: connect fails naming `NOPERM`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_a_connect_command_fails_connect_naming_noperm() {
    let redis = server_with_user(PASSWORD).await;
    redis
        .cmd(&["ACL", "SETUSER", USER, "-select"])
        .await
        .unwrap();
    let address = format!("{}/1", url_with(&redis, &format!("{USER}:{PASSWORD}")));
    connect_fails_naming(common::config(&redis).address(&address), "NOPERM").await;
    let error = common::try_connect(common::config(&redis).address(address))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("+select"), "{error}");
    assert_logs_have_no_secret();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_password_against_requirepass_fails_connect() {
    logs();
    let redis = requirepass_server().await;
    let wrong = url_with(&redis, &format!(":{WRONG}"));
    connect_fails_naming(common::config(&redis).address(wrong), "WRONGPASS").await;
    connect_fails_naming(common::config(&redis), "NOAUTH").await;
    assert_logs_have_no_secret();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_user_and_password_works() {
    logs();
    let certs = TestCertificates::generate_temp().unwrap();
    let redis = RedisServer::builder().tls(&certs).start().await.unwrap();
    add_user(&redis, AT_PASSWORD).await;
    let address = redis.tls_url().replace(
        "rediss://",
        &format!("rediss://{USER}:{AT_PASSWORD_IN_URL}@"),
    );
    let config = common::config(&redis)
        .address(address)
        .tls_ca_file(&certs.ca);
    the_lock_works(&redis, config.clone(), USER).await;
    // Every connection of the user is on the TLS port.
    let clients = redis.cmd(&["CLIENT", "LIST"]).await.unwrap();
    let tls_port = format!(":{}", redis.tls_port().unwrap());
    for line in clients
        .lines()
        .filter(|l| l.contains(&format!(" user={USER} ")))
    {
        assert!(
            line.contains(&format!("laddr=127.0.0.1{tls_port} ")),
            "{line}"
        );
    }
    // A wrong password over TLS fails connect the same way.
    let wrong = redis
        .tls_url()
        .replace("rediss://", &format!("rediss://{USER}:{WRONG}@"));
    connect_fails_naming(config.address(wrong), "WRONGPASS").await;
    assert_logs_have_no_secret();
}

/// Addresses with passwords that the client rejects, or cannot reach: the error and everything
/// logged meanwhile show no password — the user's, nor a Sentinel's `sentinelPassword`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_and_unreachable_addresses_show_no_password() {
    logs();
    // A port nobody listens on, kept so for the test.
    let closed_port = lock_testkit::ClosedPort::new().unwrap();
    let closed = closed_port.port();
    let rejected = [
        format!("redis://{USER}:{PASSWORD}@127.0.0.1:99999"),
        format!("redis://{USER}:{AT_PASSWORD_IN_URL}@127.0.0.1:99999"),
        format!("redis://{USER}:{PASSWORD}@127.0.0.1:{closed}/notadb"),
        format!("redis://{USER}:{AT_PASSWORD_IN_URL}@127.0.0.1:{closed}/notadb"),
        format!("redis-sentinel://{USER}:{PASSWORD}@127.0.0.1:{closed}"),
        format!("http://{USER}:{PASSWORD}@127.0.0.1:{closed}"),
        format!(
            "redis-cluster://{USER}:{PASSWORD}@127.0.0.1:{closed}?node=127.0.0.1:bad&sentinelPassword={SENTINEL_PASSWORD}"
        ),
    ];
    for address in rejected {
        let config = common::default_config(&address).instance_id("test-pod");
        assert_no_secret("Setup's Debug", &format!("{config:?}"));
        match common::try_connect(config).await {
            Err(error) => {
                assert_lock_error_has_no_secret(&error);
                eprintln!("{error}");
            }
            Ok(lock) => panic!("{} was accepted", lock.client().config().redacted_address()),
        }
    }
    let unreachable = [
        format!("redis://{USER}:{PASSWORD}@127.0.0.1:{closed}/0"),
        format!("redis://:{AT_PASSWORD_IN_URL}@127.0.0.1:{closed}"),
        format!(
            "redis-sentinel://{USER}:{PASSWORD}@127.0.0.1:{closed}/0?sentinelServiceName=m&sentinelPassword={SENTINEL_PASSWORD}"
        ),
        format!(
            "redis-sentinel://{USER}:{PASSWORD}@127.0.0.1:{closed}?sentinelServiceName=m&sentinelUsername=s&sentinelPassword={SENTINEL_PASSWORD}&node=127.0.0.1:{closed}"
        ),
    ];
    for address in unreachable {
        let config = common::default_config(&address)
            .instance_id("test-pod")
            .command_timeout(Duration::from_millis(500));
        assert_no_secret("Setup's Debug", &format!("{config:?}"));
        assert_no_secret("the redacted address", &config.redacted_address());
        let lock = common::connect(config).await;
        assert_no_secret("RedisLock's Debug", &format!("{lock:?}"));
        assert_no_secret("the namespace", lock.namespace());
        let error = lock
            .acquire_with("unreachable", common::watchdog_waiting(Duration::ZERO))
            .await
            .unwrap_err();
        assert_lock_error_has_no_secret(&error);
    }
    assert_logs_have_no_secret();
}

/// A command timeout shorter than fred's first reconnect delay (100 to 200 ms) does not hide
/// refused credentials: the first attempt starts at once and `connect` waits for its outcome
/// (at least 1 s), so connect fails as with the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_connect_with_a_short_command_timeout() {
    let redis = server_with_user(PASSWORD).await;
    let wrong = url_with(&redis, &format!("{USER}:{WRONG}"));
    for _ in 0..3 {
        let config = common::config(&redis)
            .address(&wrong)
            .command_timeout(Duration::from_millis(100));
        connect_fails_naming(config, "WRONGPASS").await;
    }
    assert_logs_have_no_secret();
}

/// Refused credentials fail connect; they are not also warned of as an outage ("acquisitions
/// fail closed … until it answers"): there will be no acquisitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_not_logged_as_an_outage() {
    let redis = server_with_user(PASSWORD).await;
    let wrong = url_with(&redis, &format!("{USER}:{WRONG}"));
    connect_fails_naming(common::config(&redis).address(&wrong), "WRONGPASS").await;
    let port = format!("127.0.0.1:{}", redis.port());
    let outage_warnings: Vec<String> = logs()
        .text()
        .lines()
        .filter(|line| line.contains(&port) && line.contains("acquisitions fail closed"))
        .map(str::to_owned)
        .collect();
    assert!(
        outage_warnings.is_empty(),
        "refused credentials were logged as an outage: {outage_warnings:#?}"
    );
    assert_logs_have_no_secret();
}
