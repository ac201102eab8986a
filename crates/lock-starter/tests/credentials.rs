// Own binary: its global TRACE log capture must hold only these tests' lines (it checks all).

//! Passwords through the starter: in `telco.platform.lock.redis.address` (also percent-encoded,
//! also a Sentinel's `sentinelPassword`) or in `spring.data.redis.password`, they reach Redis
//! (a real redis-server with an ACL user) but never `LockSettings`' or `LockStarter`'s `Debug`,
//! a `ConfigError`, a `StartError`, or anything logged at `TRACE` while loading and building —
//! the starter's, lock-redis' and the Redis client's own logs (fred logs with the `log` crate,
//! bridged into the same capture).
//!
//! Every secret here contains [`MARK`]. The log capture is one global subscriber for the whole
//! test binary, so `tracing`'s per-callsite interest cache cannot hide events of parallel tests;
//! each test checks everything captured so far.

use std::time::Duration;

use figment::Figment;
use figment::providers::Serialized;
use lock_starter::config::{ConfigError, ConfigSources, LockSettings};
use lock_starter::prelude::*;
use lock_starter::{LockStarter, StartError};
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use lock_testkit::secrets::{
    AT_PASSWORD, AT_PASSWORD_IN_URL, MARK, PASSWORD, SENTINEL_PASSWORD, USER, assert_no_secret,
};

/// Everything logged at `TRACE` in this test binary, `log` records included.
fn logs() -> &'static CapturedLogs {
    CapturedLogs::global(tracing::Level::TRACE)
}

/// Nothing logged so far in this test binary shows a secret.
#[track_caller]
fn assert_logs_have_no_secret() {
    assert_no_secret("the logs", &logs().text());
}

/// [`assert_logs_have_no_secret`], after a start that built the Redis lock: the capture holds
/// the starter's `DEBUG` lines and the Redis client's own `TRACE` output.
#[track_caller]
fn assert_start_logs_have_no_secret() {
    let logged = logs().text();
    assert!(
        logged.contains("DEBUG lock_starter::") && logged.contains("TRACE fred::"),
        "the starter's and the Redis client's logs were not captured"
    );
    assert_logs_have_no_secret();
}

fn figment(pairs: &[(&str, &str)]) -> Figment {
    pairs.iter().fold(Figment::new(), |figment, (key, value)| {
        figment.merge(Serialized::default(key, value))
    })
}

/// The Spring keys for a server on 127.0.0.1:`port`: `password`, and `user` if there is one.
fn spring(port: u16, user: Option<&str>, password: &str) -> Figment {
    let port = port.to_string();
    let mut pairs = vec![
        ("spring.data.redis.host", "127.0.0.1"),
        ("spring.data.redis.port", port.as_str()),
        ("spring.data.redis.password", password),
    ];
    pairs.extend(user.map(|user| ("spring.data.redis.username", user)));
    figment(&pairs)
}

/// A fast-failing start: a short command timeout for unreachable addresses.
fn with_short_timeout(pairs: &[(&str, &str)]) -> Figment {
    figment(pairs).merge(Serialized::default(
        "telco.platform.lock.redis.command-timeout",
        "300ms",
    ))
}

async fn build(figment: Figment) -> Result<LockStarter, StartError> {
    logs();
    LockStarter::builder().figment(figment).build().await
}

/// A redis-server with the user `app`, password `password`, all commands, keys and channels.
async fn server_with_user(password: &str) -> RedisServer {
    let redis = RedisServer::start().await.unwrap();
    redis.add_user(USER, password, &[]).await.unwrap();
    redis
}

/// `starter`'s lock works against `redis` (its connections logged in as `user`) and nothing
/// about it shows a password.
async fn works_without_showing(starter: &LockStarter, redis: &RedisServer, user: &str) {
    assert_no_secret("LockStarter's Debug", &format!("{starter:?}"));
    assert_no_secret("LockSettings' Debug", &format!("{:?}", starter.settings()));
    assert_no_secret(
        "the described address",
        &starter.settings().describe("redis.address").unwrap(),
    );
    let lock = starter.lock().unwrap();
    assert_no_secret("the namespace", lock.namespace());
    let handle = lock
        .acquire("starter-credentials", Lease::Watchdog)
        .await
        .unwrap();
    assert_no_secret("the handle's Debug", &format!("{handle:?}"));
    let clients = redis.cmd(&["CLIENT", "LIST"]).await.unwrap();
    assert!(
        clients.contains(&format!(" user={user} ")),
        "not logged in as {user}: {clients}"
    );
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A starter whose lock address logs in to a server as [`USER`] with `password`, written
/// `in_url` in the address: its lock works and nothing about it shows the password.
async fn an_address_password_works(password: &str, in_url: &str) -> LockStarter {
    let redis = server_with_user(password).await;
    let address = redis
        .url()
        .replace("redis://", &format!("redis://{USER}:{in_url}@"));
    let starter = build(figment(&[("telco.platform.lock.redis.address", &address)]))
        .await
        .unwrap();
    works_without_showing(&starter, &redis, USER).await;
    starter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_address_reaches_redis_and_nothing_else() {
    let starter = an_address_password_works(PASSWORD, PASSWORD).await;
    assert!(format!("{starter:?}").contains(&format!("{USER}:***@")));
    assert_start_logs_have_no_secret();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_percent_encoded_password_reaches_redis_and_nothing_else() {
    an_address_password_works(AT_PASSWORD, AT_PASSWORD_IN_URL).await;
    assert_start_logs_have_no_secret();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_username_and_password_reach_redis_and_nothing_else() {
    let redis = server_with_user(AT_PASSWORD).await;
    let starter = build(spring(redis.port(), Some(USER), AT_PASSWORD))
        .await
        .unwrap();
    works_without_showing(&starter, &redis, USER).await;
    assert_start_logs_have_no_secret();
}

/// A server with `requirepass password`, and a starter configured with the Spring password
/// alone: its lock works as the `default` user and nothing about it shows the password.
async fn a_spring_password_alone_works_with_requirepass(password: &str) {
    logs();
    let redis = RedisServer::start_with_password(password).await.unwrap();
    let starter = build(spring(redis.port(), None, password)).await.unwrap();
    works_without_showing(&starter, &redis, "default").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spring_password_alone_authenticates_against_requirepass() {
    a_spring_password_alone_works_with_requirepass(PASSWORD).await;
    assert_start_logs_have_no_secret();
}

/// `build()` fails as a configuration error for `telco.platform.lock.redis.address`, naming
/// `refusal`, the address with its password as `***`, and `origin`; no password shows.
#[track_caller]
fn start_fails_naming(starter: Result<LockStarter, StartError>, refusal: &str, origin: &str) {
    let error = starter.expect_err("started with credentials Redis refuses");
    let text = error.to_string();
    let StartError::Config(config) = &error else {
        panic!("not a configuration error: {error:?}");
    };
    assert_eq!(
        config.key(),
        Some("telco.platform.lock.redis.address"),
        "{text}"
    );
    let shown_origin = config.origin().expect("an origin").to_string();
    assert!(shown_origin.contains(origin), "{shown_origin}: {text}");
    assert!(text.contains(&format!("(from {shown_origin})")), "{text}");
    assert!(text.contains(refusal), "{refusal} not named: {text}");
    assert!(
        text.contains("127.0.0.1:"),
        "the address is not named: {text}"
    );
    assert!(
        !text.contains("unreachable"),
        "reported as an outage: {text}"
    );
    // What the key accepts, for refused credentials: not the URL grammar (the address parsed).
    assert!(
        text.contains("; accepted: an address with a user and password Redis accepts")
            && !text.contains("redis-sentinel://"),
        "{text}"
    );
    assert_no_secret("the StartError", &text);
    assert_no_secret("the StartError's Debug", &format!("{error:?}"));
    eprintln!("{text}");
}

/// Credentials Redis refuses stop the start, as a bad value of the address from where it was
/// set: a TOML file, or the Spring keys it was built from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_fail_the_start_naming_the_address_and_its_origin() {
    logs();
    let redis = server_with_user(PASSWORD).await;
    let wrong = redis
        .url()
        .replace("redis://", &format!("redis://{USER}:wr0ng-Pa55-word@"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lock.toml");
    std::fs::write(
        &file,
        format!("[telco.platform.lock.redis]\naddress = \"{wrong}\"\n"),
    )
    .unwrap();
    let from_file = LockStarter::builder().toml_file(&file).build().await;
    start_fails_naming(from_file, "WRONGPASS", &file.display().to_string());

    let from_spring = build(spring(redis.port(), Some(USER), "wr0ng-Pa55-word")).await;
    start_fails_naming(from_spring, "WRONGPASS", "spring.data.redis.password");

    let requirepass = RedisServer::start_with_password(PASSWORD).await.unwrap();
    let missing = build(figment(&[(
        "telco.platform.lock.redis.address",
        &requirepass.url(),
    )]))
    .await;
    start_fails_naming(missing, "NOAUTH", "");
    // A start that fails on refused credentials does not also warn of an outage first.
    for port in [redis.port(), requirepass.port()] {
        let address = format!("127.0.0.1:{port}");
        let outage: Vec<String> = logs()
            .text()
            .lines()
            .filter(|line| line.contains(&address) && line.contains("acquisitions fail closed"))
            .map(str::to_owned)
            .collect();
        assert!(outage.is_empty(), "logged as an outage: {outage:#?}");
    }
    assert_start_logs_have_no_secret();
}

fn load_err(pairs: &[(&str, &str)]) -> ConfigError {
    logs();
    match LockSettings::load(&ConfigSources::from_figment(figment(pairs))) {
        Ok(settings) => panic!("accepted: {settings:?}"),
        Err(error) => error,
    }
}

/// Bad configurations with a password present: the error names the problem, never the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_show_no_password() {
    let address = "telco.platform.lock.redis.address";
    let bad: Vec<Vec<(&str, String)>> = vec![
        vec![(
            address,
            format!("redis://{USER}:{PASSWORD}@127.0.0.1:99999"),
        )],
        vec![(
            address,
            format!("redis://{USER}:{AT_PASSWORD_IN_URL}@127.0.0.1:99999"),
        )],
        vec![(
            address,
            format!("redis://{USER}:{AT_PASSWORD_IN_URL}@127.0.0.1:port"),
        )],
        vec![(
            address,
            format!("redis://{USER}:{AT_PASSWORD}@127.0.0.1:6379"),
        )],
        vec![(address, format!("redis://{USER}:{PASSWORD}@127.0.0.1/x"))],
        vec![(
            address,
            format!(
                "redis-sentinel://{USER}:{PASSWORD}@127.0.0.1:26379?sentinelPassword={SENTINEL_PASSWORD}"
            ),
        )],
        vec![(
            address,
            format!(
                "redis-sentinel://{USER}:{PASSWORD}@127.0.0.1:99999?sentinelServiceName=m&sentinelPassword={SENTINEL_PASSWORD}"
            ),
        )],
        vec![(
            address,
            format!(
                "redis-sentinel://{USER}:{PASSWORD}@127.0.0.1:26379?sentinelServiceName=m&sentinelPassword={SENTINEL_PASSWORD}&bogus=1"
            ),
        )],
        vec![
            ("spring.data.redis.host", "127.0.0.1".into()),
            ("spring.data.redis.port", "99999".into()),
            ("spring.data.redis.password", PASSWORD.into()),
        ],
        vec![
            ("spring.data.redis.host", "bad host".into()),
            ("spring.data.redis.username", USER.into()),
            ("spring.data.redis.password", AT_PASSWORD.into()),
        ],
        vec![
            (
                "spring.data.redis.url",
                format!("redis://{USER}:{PASSWORD}@h:99999"),
            ),
            ("spring.data.redis.password", PASSWORD.into()),
        ],
        vec![
            (address, format!("redis://{USER}:{PASSWORD}@127.0.0.1:6379")),
            ("telco.platform.lock.wait-time", "5 parsecs".into()),
        ],
    ];
    for pairs in bad {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let error = load_err(&pairs);
        assert_no_secret("a ConfigError", &error.to_string());
        assert_no_secret("a ConfigError's Debug", &format!("{error:?}"));
        let start = build(figment(&pairs)).await.unwrap_err();
        assert_no_secret("a StartError", &start.to_string());
        assert_no_secret("a StartError's Debug", &format!("{start:?}"));
        eprintln!("{error}");
    }
    assert_logs_have_no_secret();
}

/// Sentinel addresses with a user's and a Sentinel's password, Sentinels unreachable: the start
/// succeeds (a warning that Redis is not reachable, naming the address), and neither the
/// settings, the starter, the lock, its errors nor the logs show either password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_addresses_show_no_password() {
    let closed_port = lock_testkit::ClosedPort::new().unwrap();
    let closed = closed_port.port();
    for address in [
        format!(
            "redis-sentinel://{USER}:{PASSWORD}@127.0.0.1:{closed}?sentinelServiceName=m&sentinelPassword={SENTINEL_PASSWORD}"
        ),
        format!(
            "redis-sentinel://{USER}:{AT_PASSWORD_IN_URL}@127.0.0.1:{closed}/0?sentinelServiceName=m&sentinelUsername=s&sentinelPassword={SENTINEL_PASSWORD}"
        ),
        format!(
            "redis-sentinel://127.0.0.1:{closed}?sentinelPassword={SENTINEL_PASSWORD}&sentinelServiceName=m"
        ),
    ] {
        let starter = build(with_short_timeout(&[(
            "telco.platform.lock.redis.address",
            &address,
        )]))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_no_secret("LockStarter's Debug", &format!("{starter:?}"));
        assert_no_secret("LockSettings' Debug", &format!("{:?}", starter.settings()));
        let lock = starter.lock().unwrap();
        assert_no_secret("the namespace", lock.namespace());
        let error = lock
            .acquire_with(
                "sentinel",
                AcquireOptions::new(Lease::Watchdog)
                    .wait_time(Duration::ZERO)
                    .unwrap(),
            )
            .await
            .unwrap_err();
        assert_no_secret("the error", &error.to_string());
        assert_no_secret("the error's Debug", &format!("{error:?}"));
    }
    // Spring's Sentinel keys are not read: a warning names them, never their values.
    let nodes = format!("127.0.0.1:{closed}");
    let starter = build(with_short_timeout(&[
        ("spring.data.redis.sentinel.master", "m"),
        ("spring.data.redis.sentinel.nodes", &nodes),
        ("spring.data.redis.username", USER),
        ("spring.data.redis.password", AT_PASSWORD),
        ("spring.data.redis.sentinel.password", SENTINEL_PASSWORD),
    ]))
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_no_secret("LockStarter's Debug", &format!("{starter:?}"));
    assert_no_secret(
        "the warnings",
        &format!("{:?}", starter.settings().warnings()),
    );
    assert_start_logs_have_no_secret();
}

/// Spring user names and passwords with `%` (also before two hex digits), `+`, `@`, `:`, `/`,
/// `?`, `#`, blanks and non-ASCII letters reach Redis exactly as written: the starter
/// percent-encodes every character but the unreserved ones, `%` included, and the Redis client
/// decodes them. (Left as written, `pa%41ss` was sent as `paAss`: WRONGPASS.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_credentials_with_percent_and_other_characters_reach_redis_as_written() {
    logs();
    let redis = RedisServer::start().await.unwrap();
    let credentials = [
        ("app", "pa%41ss"),
        ("app", "100%"),
        ("app", "a+b"),
        ("app", "p@ss:w/rd?#"),
        ("app", "späß"),
        ("app", "%%41%zz%"),
        ("app", "a b&c=d'\"`\\"),
        ("app", "plain-ok"),
        ("us%41er", "pa%41ss"),
        ("100%", "x-Pa55-y"),
        ("u+s@r:1/ä", "p%2Fw"),
        ("app", "s3cr3t%41-Pa55"),
    ];
    for (user, password) in credentials {
        redis.add_user(user, password, &[]).await.unwrap();
        let figment = spring(redis.port(), Some(user), password).merge(Serialized::default(
            "telco.platform.lock.redis.command-timeout",
            "2s",
        ));
        let starter = build(figment)
            .await
            .unwrap_or_else(|e| panic!("{user:?}/{password:?}: {e}"));
        let shown = format!(
            "{starter:?} {:?}",
            starter.settings().describe("redis.address")
        );
        assert!(
            !shown.contains(password) && shown.contains("127.0.0.1"),
            "{user:?}/{password:?}: {shown}"
        );
        let lock = starter.lock().unwrap();
        let handle = lock
            .acquire("spring-credentials", Lease::Watchdog)
            .await
            .unwrap_or_else(|e| panic!("{user:?}/{password:?}: {e}"));
        let clients = redis.cmd(&["CLIENT", "LIST"]).await.unwrap();
        assert!(
            clients.contains(&format!(" user={user} ")),
            "{user:?}/{password:?}: not logged in as {user}: {clients}"
        );
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        drop(lock);
        drop(starter);
    }
    assert_logs_have_no_secret();
}

/// A Spring password alone with `%` sequences authenticates against `requirepass`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spring_password_with_percent_alone_authenticates_against_requirepass() {
    for password in ["pa%41ss", "100%", "Pa55%20%zz"] {
        a_spring_password_alone_works_with_requirepass(password).await;
    }
    assert_logs_have_no_secret();
}

/// Passwords with blanks, quotes, line separators, `#`, `?`, `/`, `@`, `://`, `%`, `&` in
/// addresses (the lock's own and Spring's URL), malformed or not: no password shows in a
/// `ConfigError` (`Display`, `Debug`), a `StartError`, the settings' `Debug`, `describe()`,
/// the warnings or the logs. Everything from the user part's `:` to the last `@` is hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_passwords_in_any_address_never_show() {
    let closed_port = lock_testkit::ClosedPort::new().unwrap();
    let closed = closed_port.port();
    let passwords = [
        "Pa55 word",
        "pa ss-Pa55",
        "Pa55`x",
        "Pa55'x",
        "pa\"Pa55",
        "Pa55\u{2028}x",
        "Pa55\nx",
        "Pa55\tx",
        "Pa55#x",
        "Pa55?x",
        "Pa55/x",
        "Pa55\\x",
        "x://Pa55",
        "p@Pa55",
        "Pa55%zzx",
        "Pa55%41",
        "Pa55&x=1",
        "Pa55 x@y z",
    ];
    let addresses = [
        "redis://app:{}@127.0.0.1:99999",
        "redis://app:{}@127.0.0.1:port",
        "redis://app:{}@127.0.0.1:{closed}",
        "redis://app:{}@127.0.0.1:{closed}/x",
        "redis://app:{}@127.0.0.1:{closed}/0?password=Pa55y",
        "redis://app:{}@127.0.0.1:{closed}?bogus=1",
        " redis://app:{}@127.0.0.1:{closed} x",
        "redis://{}@127.0.0.1:{closed}",
        "redis://{}@127.0.0.1:99999",
        "rediss://:{}@127.0.0.1:{closed}",
        "redis-sentinel://app:{}@127.0.0.1:{closed}",
        "redis-sentinel://127.0.0.1:{closed}?sentinelServiceName=m&sentinelPassword={}&bogus=1",
        "redis-sentinel://127.0.0.1:{closed}?sentinelServiceName=m&sentinelPassword={}",
        "redis-sentinel://127.0.0.1:{closed}?sentinelServiceName=m&sentinel_password={}",
        "redis-cluster://app:{}@127.0.0.1:{closed}/3",
        "http://app:{}@127.0.0.1:{closed}",
        "redis+unix://app:{}@/tmp/redis.sock",
        "127.0.0.1:{closed}:app:{}@",
        "app:{}@127.0.0.1:{closed}",
    ];
    for password in passwords {
        for template in addresses {
            let address = template
                .replace("{closed}", &closed.to_string())
                .replace("{}", password);
            for key in ["telco.platform.lock.redis.address", "spring.data.redis.url"] {
                let pairs = [(key, address.as_str())];
                let what = format!("{key} = {address:?}");
                let shown = match LockSettings::from_figment(&figment(&pairs)) {
                    Err(error) => format!("{error} {error:?}"),
                    Ok(settings) => format!(
                        "{settings:?} {:?} {:?}",
                        settings.describe("redis.address"),
                        settings.warnings()
                    ),
                };
                assert!(!shown.contains(MARK), "{what}: a password shows: {shown}");
                match build(with_short_timeout(&pairs)).await {
                    Err(error) => assert_no_secret(&what, &format!("{error} {error:?}")),
                    Ok(starter) => assert_no_secret(&what, &format!("{starter:?}")),
                }
            }
        }
    }
    assert_logs_have_no_secret();
}

/// Odd Spring passwords next to a malformed Spring key: the error names the key, not the
/// password.
#[test]
fn odd_spring_passwords_next_to_bad_keys_never_show() {
    for password in [
        "Pa55 word",
        "Pa55\"x",
        "Pa55\u{2028}x",
        "Pa55%41",
        "x@Pa55:y",
    ] {
        for pairs in [
            vec![
                ("spring.data.redis.host", "127.0.0.1"),
                ("spring.data.redis.port", "99999"),
                ("spring.data.redis.username", password),
                ("spring.data.redis.password", password),
            ],
            vec![
                ("spring.data.redis.host", "bad host"),
                ("spring.data.redis.password", password),
            ],
            vec![
                ("spring.data.redis.url", "redis://h:99999"),
                ("spring.data.redis.password", password),
            ],
        ] {
            let error = load_err(&pairs);
            assert_no_secret("a ConfigError", &error.to_string());
            assert_no_secret("a ConfigError's Debug", &format!("{error:?}"));
        }
    }
    assert_logs_have_no_secret();
}

/// A user part without a password (often a password put in the user's place) shows as `***`,
/// as the Redis lock shows it.
#[test]
fn a_lone_user_part_shows_as_stars() {
    for pairs in [
        vec![(
            "telco.platform.lock.redis.address",
            "rediss://Xk4PwLeak-Pa55@127.0.0.1:6380",
        )],
        vec![(
            "spring.data.redis.url",
            "rediss://Xk4PwLeak-Pa55@127.0.0.1:6380",
        )],
        vec![
            ("spring.data.redis.host", "127.0.0.1"),
            ("spring.data.redis.port", "6380"),
            ("spring.data.redis.username", "Xk4PwLeak-Pa55"),
        ],
    ] {
        let settings = LockSettings::from_figment(&figment(&pairs)).unwrap();
        let described = settings.describe("redis.address").unwrap();
        assert!(
            described.contains("://***@127.0.0.1:6380 from "),
            "{described}"
        );
        assert_no_secret("LockSettings' Debug", &format!("{settings:?}"));
        assert_no_secret("the warnings", &format!("{:?}", settings.warnings()));
    }
}
