//! Redis-specific behaviour, each claim against a real redis-server: round trips, batched
//! renewal, event-driven waiting, fail closed under outages, owner-checked release, script
//! reloads, subscription clean-up.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{
    COMMAND_TIMEOUT, SLACK, client, command_calls, delta, eventually, one_subscriber, server,
};
use lock_core::lock::{DistributedLock, DistributedLockExt, Lease, LostReason, ReleaseOutcome};
use lock_redis::RedisFailure;
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use tokio::time::Instant;

/// Commands a script runs inside Redis; they show in commandstats but cost no round trip.
/// Also the set-up commands of a connection of the client that finishes connecting in the
/// background (the pub/sub connection, or a reconnect): seen on a loaded CI machine during the
/// measured window, and no round trip of the acquire or release.
const INSIDE_SCRIPTS: [&str; 21] = [
    "client|id",
    "client|setname",
    "hello",
    "ping",
    "get",
    "set",
    "pexpire",
    "pttl",
    "time",
    "spublish",
    "pubsub|shardnumsub",
    "info",
    // The fair queue's commands; a release looks at the queue (`zcard`).
    "zcard",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zscore",
    "zrank",
    "pexpireat",
    "del",
];

fn round_trips(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> Vec<(String, u64)> {
    let mut sent: Vec<(String, u64)> = after
        .keys()
        .filter(|cmd| !INSIDE_SCRIPTS.contains(&cmd.as_str()))
        .map(|cmd| (cmd.clone(), delta(before, after, cmd)))
        .filter(|(_, n)| *n > 0)
        .collect();
    sent.sort();
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_and_release_are_one_round_trip_each() {
    let (redis, [lock]) = common::server_with().await;
    // Warm up: the scripts are loaded at connect, this proves it.
    let lease = Lease::Fixed(Duration::from_secs(30));
    let before = command_calls(&redis).await;
    let handle = lock.acquire("round-trips", lease).await.unwrap();
    let acquired = command_calls(&redis).await;
    assert_eq!(round_trips(&before, &acquired), [("evalsha".to_owned(), 1)]);
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    let released = command_calls(&redis).await;
    assert_eq!(
        round_trips(&acquired, &released),
        [("evalsha".to_owned(), 1)]
    );
}

/// Every Redis call of an uncontended cycle over a key's tombstone, the scripts' own included:
/// with nobody subscribed, the release neither reads the queue nor publishes, and no script
/// reads a TTL (the calls `a_waiter_sends_nothing_between_releases_and_wakes_on_the_release`
/// needs are still made when someone waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_makes_eight_redis_calls() {
    let (redis, [lock]) = common::server_with().await;
    let lease = Lease::Fixed(Duration::from_secs(30));
    let first = lock.acquire("calls", lease).await.unwrap();
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let before = command_calls(&redis).await;
    let handle = lock.acquire("calls", lease).await.unwrap();
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    let after = command_calls(&redis).await;
    let set_up = ["info", "client|id", "client|setname", "hello", "ping"];
    let mut calls: Vec<(String, u64)> = after
        .keys()
        .filter(|cmd| !set_up.contains(&cmd.as_str()))
        .map(|cmd| (cmd.clone(), delta(&before, &after, cmd)))
        .filter(|(_, n)| *n > 0)
        .collect();
    calls.sort();
    let expected = [
        ("evalsha", 2),
        ("get", 2),
        ("pubsub|shardnumsub", 1),
        ("set", 2),
        ("time", 1),
    ]
    .map(|(cmd, n)| (cmd.to_owned(), n));
    assert_eq!(calls, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entering_a_held_key_costs_no_round_trip() {
    let (redis, [lock]) = common::server_with().await;
    let lease = Lease::Fixed(Duration::from_secs(30));
    let nested_round_trips = lock
        .with_lock("reentrant", lease, || async {
            let before = command_calls(&redis).await;
            let value = lock
                .with_lock("reentrant", Lease::Watchdog, || async { 1 })
                .await
                .unwrap();
            let handle = lock.acquire("reentrant", Lease::Watchdog).await.unwrap();
            assert!(handle.is_reentrant() && value == 1);
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
            let after = command_calls(&redis).await;
            round_trips(&before, &after)
        })
        .await
        .unwrap();
    // Only the INFO calls of this test itself.
    assert!(
        nested_round_trips.iter().all(|(cmd, _)| cmd == "info"),
        "{nested_round_trips:?}"
    );
    assert_eq!(
        lock.watchdog_lease_count(),
        0,
        "re-entry registered a renewal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_many_leases_in_one_call_per_tick() {
    let (redis, [lock]) = common::server_with().await;
    let mut handles = Vec::new();
    for i in 0..50 {
        handles.push(
            lock.acquire(&format!("watchdog:{i}"), Lease::Watchdog)
                .await
                .unwrap(),
        );
    }
    assert_eq!(lock.watchdog_lease_count(), 50);
    let before = command_calls(&redis).await;
    let window = common::WATCHDOG * 3; // about nine ticks of one third of the timeout
    tokio::time::sleep(window).await;
    let after = command_calls(&redis).await;
    let renew_calls = delta(&before, &after, "evalsha");
    let pexpires = delta(&before, &after, "pexpire");
    // Nine-ish ticks, each one call for all 50 keys; per-lock renewal would be ~450 calls.
    assert!(
        (1..=15).contains(&renew_calls),
        "{renew_calls} renewal calls"
    );
    assert!(
        pexpires >= 50 * renew_calls - 50,
        "{pexpires} PEXPIREs in {renew_calls} calls"
    );
    assert!(handles.iter().all(|h| h.is_held()));
    for i in 0..50 {
        let ttl: i64 = redis
            .cmd(&["PTTL", &lock.redis_key(&format!("watchdog:{i}"))])
            .await
            .unwrap()
            .parse()
            .unwrap();
        assert!(ttl > 0, "watchdog:{i} has PTTL {ttl}");
    }
    drop(handles);
    assert!(eventually(SLACK, || async { lock.watchdog_lease_count() == 0 }).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_sends_nothing_between_releases_and_wakes_on_the_release() {
    let (redis, [holder, waiter]) = common::server_with().await;
    // A fixed lease: no watchdog traffic, and a 60 s TTL the waiter must not sit out.
    let held = common::hold(&holder, "event-driven", Duration::from_secs(60)).await;
    let channel = holder.release_channel("event-driven");
    let start = command_calls(&redis).await;
    let waiting = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(30));
        let handle = waiter.acquire_with("event-driven", options).await;
        (handle, Instant::now())
    });
    let subscribed = one_subscriber(&redis, &channel).await;
    assert!(subscribed, "the waiter never subscribed to {channel}");
    // Its first try, and the try once the subscription is confirmed (which may land after
    // the subscription shows in PUBSUB): both expected, neither a poll.
    let tried_twice = eventually(SLACK, || async {
        delta(&start, &command_calls(&redis).await, "evalsha") >= 2
    })
    .await;
    assert!(tried_twice, "the waiter did not try on confirmation");
    // Give a polling implementation every chance to show itself.
    let before = command_calls(&redis).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "evalsha"), 0, "the waiter polled");

    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (handle, acquired_at) = waiting.await.unwrap();
    let handle = handle.expect("the waiter did not get the released lock");
    assert!(acquired_at - released_at < Duration::from_secs(30));
    drop(handle);
    // The waiter's subscription is gone with it.
    assert!(
        eventually(SLACK, || async {
            redis
                .cmd(&["PUBSUB", "SHARDCHANNELS"])
                .await
                .unwrap()
                .is_empty()
        })
        .await
    );
}

/// Fail closed: the section never runs, the error is LOCK_ACQUISITION_FAILED / backend
/// unavailable, and it comes within wait time + one command timeout (+ slack).
async fn assert_fails_closed(lock: &RedisLock, key: &str, wait: Duration) {
    let ran = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let flag = Arc::clone(&ran);
    let err = lock
        .with_lock(
            key,
            common::fixed_waiting(Duration::from_secs(60), wait),
            || async move { flag.store(true, Ordering::SeqCst) },
        )
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(!ran.load(Ordering::SeqCst), "the critical section ran");
    assert_eq!(err.code(), "LOCK_ACQUISITION_FAILED", "{err}");
    assert_eq!(err.http_status(), 503);
    assert_eq!(err.details()["reason"], "backend_unavailable", "{err}");
    assert_eq!(err.details()["lockKey"], key);
    assert!(
        elapsed <= wait + COMMAND_TIMEOUT + SLACK,
        "blocked {elapsed:?} for wait {wait:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_closed_while_redis_is_stopped_and_recovers_after() {
    let (mut redis, [lock]) = common::server_with().await;
    redis.kill().await.unwrap();
    assert_fails_closed(&lock, "stopped", Duration::from_millis(500)).await;
    assert_fails_closed(&lock, "stopped", Duration::ZERO).await;
    redis.restart().await.unwrap();
    let recovered = eventually(Duration::from_secs(15), || async {
        lock.try_acquire("stopped", Lease::Watchdog).await.is_ok()
    })
    .await;
    assert!(recovered, "no acquisition after Redis came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_closed_while_redis_is_paused_and_leaves_no_grant_behind() {
    let (redis, [lock]) = common::server_with().await;
    redis.pause().unwrap();
    // The acquire script is sent and sits unanswered; it runs when Redis resumes.
    assert_fails_closed(&lock, "paused", Duration::from_millis(300)).await;
    redis.resume().unwrap();
    // The grant it made on resume (60 s fixed lease) must have been released by the
    // outcome-unknown clean-up, so a new holder gets the key well before 60 s.
    let other = client(&redis).await;
    let options = common::watchdog_waiting(Duration::from_secs(20));
    let handle = other.acquire_with("paused", options).await.unwrap();
    drop(handle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_closed_when_redis_refuses_commands() {
    let redis = server().await;
    let address = common::user_without_lock_keys(&redis).await;
    let lock = common::connect(common::config(&redis).address(&address)).await;
    assert_fails_closed(&lock, "refused", Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_reported_with_its_connection_error_not_as_a_timeout() {
    // Nothing listens: connection refused.
    let (mut redis, [lock]) = common::server_with().await;
    redis.kill().await.unwrap();
    let err = lock
        .try_acquire("refused", Lease::Watchdog)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("unreachable") && text.contains("refused"),
        "{text}"
    );
    // Which Redis: a service's error says it too, not only the CLI's.
    assert!(
        text.contains(&format!("(Redis at {})", redis.url())),
        "{text}"
    );

    // A wrong password is no outage: connect fails, naming it (tests/credentials.rs).
    let redis = lock_testkit::RedisServer::start_with_password("right")
        .await
        .unwrap();
    let address = redis.url().replace("redis://", "redis://:wrong@");
    let err = common::try_connect(common::config(&redis).address(&address))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        !text.contains("unreachable") && text.contains("WRONGPASS"),
        "{text}"
    );
    assert!(!text.contains(":wrong@"), "the password leaked: {text}");
}

/// A command timeout long enough that a test waiting for one could not pass: "at once" below
/// means well under it ([`AT_ONCE`]), so a loaded machine cannot make the tests flaky.
const PATIENT: Duration = Duration::from_secs(30);
const AT_ONCE: Duration = Duration::from_secs(10);

/// Everything this test binary logged at `INFO` and above (one global capture: the lock's
/// connection events are logged from its background tasks).
fn logs() -> &'static CapturedLogs {
    CapturedLogs::global(tracing::Level::INFO)
}

/// The captured lines with `message` about the Redis at `redis` (its address as a field).
fn lines_about(redis: &RedisServer, message: &str) -> Vec<String> {
    let address = format!("address={} ", redis.url());
    logs()
        .text()
        .lines()
        .filter(|line| line.contains(message) && line.contains(&address))
        .map(str::to_owned)
        .collect()
}

/// A client of `redis` with [`PATIENT`]'s command timeout.
async fn patient_client(redis: &RedisServer) -> RedisLock {
    let config = common::config(redis)
        .command_timeout(PATIENT)
        .watchdog_timeout(PATIENT * 3);
    common::connect(config).await
}

/// The first attempt of `lock` on `key` with `wait` fails closed at once, with the connection
/// error ("unreachable … refused") as the cause.
async fn fails_at_once(lock: &RedisLock, key: &str, wait: Duration) {
    let started = Instant::now();
    let err = lock
        .acquire_with(key, common::watchdog_waiting(wait))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed < AT_ONCE,
        "took {elapsed:?} (command timeout {PATIENT:?}): {err}"
    );
    assert_eq!(err.details()["reason"], "backend_unavailable", "{err}");
    match common::redis_failure(&err) {
        RedisFailure::Unreachable { last_error, .. } => {
            assert!(last_error.contains("connection"), "{last_error}")
        }
        other => panic!("expected the connection error, got {other:?}"),
    }
}

/// `kill -9` of Redis: once the client has seen its connection fail, a first attempt fails at
/// once with that error instead of waiting a command timeout; when Redis is back an acquire
/// succeeds and one `INFO` line says how long Redis was unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_a_first_attempt_fails_at_once_and_its_return_is_logged_once() {
    logs();
    let mut redis = server().await;
    let lock = patient_client(&redis).await;
    drop(
        lock.try_acquire("fail-fast", Lease::Watchdog)
            .await
            .unwrap(),
    );
    redis.kill().await.unwrap();
    let killed = Instant::now();
    // The closed connection tells the client; one warning says so.
    let seen = eventually(PATIENT, || async {
        !lines_about(&redis, "Redis connection failed").is_empty()
    })
    .await;
    assert!(
        seen,
        "the lost connection was never logged:\n{}",
        logs().text()
    );
    fails_at_once(&lock, "fail-fast", Duration::ZERO).await;
    fails_at_once(&lock, "fail-fast", Duration::from_secs(1)).await;
    assert_eq!(lines_about(&redis, "Redis connection failed").len(), 1);

    redis.restart().await.unwrap();
    let acquired = eventually(PATIENT, || async {
        lock.try_acquire("fail-fast", Lease::Watchdog).await.is_ok()
    })
    .await;
    assert!(acquired, "no acquisition after Redis came back");
    let again = "Redis reachable again after ";
    let logged = eventually(SLACK, || async { !lines_about(&redis, again).is_empty() }).await;
    assert!(logged, "no \"{again}\" line:\n{}", logs().text());
    let lines = lines_about(&redis, again);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let seconds: f64 = lines[0]
        .split(again)
        .nth(1)
        .and_then(|rest| rest.split(" s").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {}", lines[0]));
    assert!(
        seconds <= killed.elapsed().as_secs_f64() + 0.1,
        "{seconds} s is longer than the outage: {}",
        lines[0]
    );
}

/// A frozen Redis (SIGSTOP: connections stay open, nothing answers): the first command that
/// times out is one warning, however many follow, and one `INFO` line says when Redis answers
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_is_one_warning_and_its_answer_one_line() {
    logs();
    let redis = server().await;
    let config = common::config(&redis).command_timeout(Duration::from_millis(500));
    let lock = common::connect(config).await;
    let granted = eventually(PATIENT, || async {
        lock.try_acquire("frozen", Lease::Watchdog).await.is_ok()
    });
    assert!(granted.await, "no grant before the freeze");
    // Only what is logged from the freeze on counts.
    let from = logs().text().len();
    let since_freeze = |message: &str| {
        let address = format!("address={} ", redis.url());
        logs().text()[from..]
            .lines()
            .filter(|line| line.contains(message) && line.contains(&address))
            .count()
    };
    redis.pause().unwrap();
    let paused = std::time::Instant::now();
    for _ in 0..3 {
        let err = lock
            .try_acquire("frozen", Lease::Watchdog)
            .await
            .unwrap_err();
        assert_eq!(err.details()["reason"], "backend_unavailable", "{err}");
    }
    let stalled = "did not answer within 500ms (command_timeout)";
    assert_eq!(since_freeze(stalled), 1, "{}", logs().text());
    redis.resume().unwrap();
    let frozen_ms = paused.elapsed().as_millis() as u64;
    let again = "Redis answering again after ";
    let logged = eventually(PATIENT, || async { since_freeze(again) > 0 }).await;
    assert!(logged, "no \"{again}\" line:\n{}", logs().text());
    // Counted from the first command left unanswered, not from its timeout.
    let text = logs().text();
    let address = format!("address={} ", redis.url());
    let line = text[from..]
        .lines()
        .find(|l| l.contains(again) && l.contains(&address))
        .unwrap();
    let reported: u64 = line
        .split("unanswered_ms=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no unanswered_ms in {line}"));
    assert!(
        reported + 100 >= frozen_ms,
        "{reported} ms for a {frozen_ms} ms freeze: {line}"
    );
}

/// An outage whose cause changes (the connection closed, then Redis refuses the password) is
/// warned of again with the new cause, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_whose_cause_changes_is_warned_of_again() {
    logs();
    let redis = server().await;
    redis.add_user("svc", "old-secret", &[]).await.unwrap();
    let address = format!("redis://svc:old-secret@127.0.0.1:{}", redis.port());
    let lock = common::connect(common::default_config(&address)).await;
    drop(lock.try_acquire("rotated", Lease::Watchdog).await.unwrap());
    redis.add_user("svc", "new-secret", &[]).await.unwrap();
    redis.cmd(&["CLIENT", "KILL", "USER", "svc"]).await.unwrap();
    let port = format!(":{} ", redis.port());
    let warned = || {
        logs()
            .text()
            .lines()
            .filter(|line| line.contains("Redis connection failed") && line.contains(&port))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let refused = eventually(PATIENT, || async {
        warned().iter().any(|line| line.contains("WRONGPASS"))
    })
    .await;
    assert!(
        refused,
        "the refused password was not warned of:\n{}",
        logs().text()
    );
    // Reconnect attempts go on refusing: no more lines of the same kind.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let lines = warned();
    let refusals = lines
        .iter()
        .filter(|line| line.contains("WRONGPASS"))
        .count();
    assert_eq!(refusals, 1, "{lines:#?}");
    assert!(
        !lines.iter().any(|line| line.contains("old-secret")),
        "{lines:#?}"
    );
}

/// A Redis that is down when the service starts: connect returns without waiting a command
/// timeout, the first attempt fails at once, and the lock works once Redis is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_down_at_start_up_costs_connect_no_wait_and_fails_the_first_attempt_at_once() {
    let mut redis = server().await;
    redis.kill().await.unwrap();
    let started = Instant::now();
    let lock = patient_client(&redis).await;
    assert!(
        started.elapsed() < AT_ONCE,
        "connect took {:?}",
        started.elapsed()
    );
    fails_at_once(&lock, "down-at-start", Duration::ZERO).await;
    redis.restart().await.unwrap();
    let acquired = eventually(PATIENT, || async {
        lock.try_acquire("down-at-start", Lease::Watchdog)
            .await
            .is_ok()
    })
    .await;
    assert!(acquired, "no acquisition after Redis came up");
}

/// The other side of the rule: a client that has seen no connection attempt fail sends its
/// first attempt even when Redis is slow to answer (here: paused), and is granted when it
/// answers — being slow is not being down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_is_not_taken_for_a_down_one() {
    let redis = server().await;
    let lock = patient_client(&redis).await;
    redis.pause().unwrap();
    let acquiring = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire("slow", Lease::Watchdog).await.map(drop) }
    });
    redis.resume().unwrap();
    acquiring.await.unwrap().unwrap();
}

/// A command that times out on a live connection names the address, the timeout and the
/// setting it comes from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_names_the_address_the_timeout_and_the_setting() {
    let redis = server().await;
    let timeout = Duration::from_millis(300);
    let lock = common::connect(common::config(&redis).command_timeout(timeout)).await;
    redis.pause().unwrap();
    let err = lock
        .try_acquire("timeout", Lease::Watchdog)
        .await
        .unwrap_err();
    redis.resume().unwrap();
    let text = err.to_string();
    assert!(
        matches!(
            common::redis_failure(&err),
            RedisFailure::CommandTimeout { .. } | RedisFailure::Timeout { .. }
        ),
        "{err:?}"
    );
    // With no wait the acquisition's budget is the command timeout too: either may end it.
    for part in [
        format!("Redis at {} did not answer", redis.url()),
        "300ms".to_owned(),
        "command_timeout".to_owned(),
    ] {
        assert!(text.contains(&part), "{part:?} missing: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_addresses_and_tls_files_are_rejected_by_name() {
    let ca = std::env::temp_dir().join(format!("no-such-ca-{}.pem", std::process::id()));
    for (config, setting, expected) in [
        (
            common::default_config("http://h"),
            "address",
            "the scheme http:// is not a Redis scheme",
        ),
        (
            common::default_config("redis-sentinel://h:26379"),
            "address",
            "sentinelServiceName",
        ),
        (
            common::default_config("rediss://h:6379").tls_ca_file(&ca),
            "tls_ca_file",
            "the file does not exist",
        ),
        (
            common::default_config("redis://h:6379").tls_ca_file(&ca),
            "tls_ca_file",
            "does not use TLS, so a CA file would not be used",
        ),
    ] {
        let err = common::try_connect(config.instance_id("t"))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert_eq!(err.details()["argument"], setting, "{text}");
        assert!(
            text.starts_with(&format!("invalid {setting} ")) && text.contains(expected),
            "{text}"
        );
    }
    // A CA file with a plain address is wrong whatever the file: `validate` says so already.
    let error = common::default_config("redis://h:6379")
        .tls_ca_file(&ca)
        .validate()
        .unwrap_err();
    assert_eq!(error.details()["argument"], "tls_ca_file", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_never_deletes_a_lock_another_owner_holds() {
    let (redis, [lock]) = common::server_with().await;
    let handle = common::hold(&lock, "owner-checked", Duration::from_millis(300)).await;
    let key = lock.redis_key("owner-checked");
    assert_eq!(
        tokio::time::timeout(SLACK, handle.lost()).await.unwrap(),
        LostReason::Expired
    );
    // Someone else holds it now (written from outside, as another client would).
    redis
        .cmd(&["SET", &key, "H|99|other-pod/1/1", "PX", "60000"])
        .await
        .unwrap();
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(
        redis.cmd(&["GET", &key]).await.unwrap(),
        "H|99|other-pod/1/1"
    );
    let err = lock
        .try_acquire("owner-checked", Lease::Watchdog)
        .await
        .unwrap_err();
    assert_eq!(err.details()["holder"], "other-pod/1/1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_reloaded_after_script_flush() {
    let (redis, [lock]) = common::server_with().await;
    redis.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    let handle = lock.acquire("flushed", Lease::Watchdog).await.unwrap();
    redis.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_wrong_type_fails_closed_and_is_left_alone() {
    let (redis, [lock]) = common::server_with().await;
    let key = lock.redis_key("wrong-type");
    redis.cmd(&["HSET", &key, "field", "value"]).await.unwrap();
    let err = lock
        .try_acquire("wrong-type", Lease::Watchdog)
        .await
        .unwrap_err();
    assert_eq!(err.details()["reason"], "backend_unavailable");
    assert!(format!("{:?}", err).contains("WRONGTYPE"), "{err:?}");
    assert_eq!(redis.cmd(&["TYPE", &key]).await.unwrap(), "hash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiters_leave_no_subscription_behind() {
    let (redis, [holder, waiter]) = common::server_with().await;
    let held = holder.acquire("cancelled", Lease::Watchdog).await.unwrap();
    for _ in 0..20 {
        let options = common::watchdog_waiting(Duration::from_secs(30));
        let attempt = waiter.acquire_with("cancelled", options);
        // Cancel somewhere in the wait (the future is dropped).
        let _ = tokio::time::timeout(Duration::from_millis(50), attempt).await;
    }
    assert!(
        eventually(SLACK, || async {
            waiter.client().subscribed_channels().is_empty()
                && redis
                    .cmd(&["PUBSUB", "SHARDCHANNELS"])
                    .await
                    .unwrap()
                    .is_empty()
        })
        .await,
        "subscriptions left: {:?}",
        waiter.client().subscribed_channels()
    );
    assert!(held.is_held());
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_increasing_across_a_restart_without_persistence() {
    let (mut redis, [lock]) = common::server_with().await;
    let first = lock.acquire("fenced", Lease::Watchdog).await.unwrap();
    let before = first.fencing_token();
    drop(first);
    redis.kill().await.unwrap();
    redis.restart().await.unwrap();
    assert_eq!(redis.cmd(&["DBSIZE"]).await.unwrap(), "0");
    // The client reconnects in the background; until then attempts fail closed.
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        match lock.try_acquire("fenced", Lease::Watchdog).await {
            Ok(handle) => break handle.fencing_token(),
            Err(err) if Instant::now() < deadline => {
                assert_eq!(err.details()["reason"], "backend_unavailable", "{err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("no acquisition after the restart: {err}"),
        }
    };
    assert!(after > before, "{after} <= {before}");
}
