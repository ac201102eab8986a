//! The lock as a Redis user with the minimal ACL of docs/design.md ("ACL for the lock's Redis
//! user"), read from that paragraph so the test and the document cannot drift apart.
//!
//! - The whole conformance suite passes as that user, and the only commands Redis refuses it
//!   are the optional ones the document lists (fred's `CLIENT ID` and `INFO server` at connect,
//!   the lock's `CONFIG GET maxmemory-policy`), which cost nothing but a skipped warning.
//! - With the optional grants added, Redis refuses nothing at all (`ACL LOG` stays empty).
//! - Replica-acknowledged grants (`WAIT`), watchdog renewal, waiting (sharded pub/sub on
//!   `&lock:*`) and the script reload after `SCRIPT FLUSH` work as that user.
//! - Take away any one needed permission and the operation fails closed at once with the typed
//!   `no_permission` refusal quoting Redis' `NOPERM` text — no hang, no "held by another owner".
//!
//! The test's own admin commands (`ACL SETUSER`, `ACL LOG`, `INFO`) run as the `default` user.

use crate::common;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::common::Setup;
use crate::suites::{Connect, Suite};
use common::{COMMAND_TIMEOUT, SLACK, WATCHDOG, command_calls, delta, eventually, one_subscriber};
use lock_core::LockError;
use lock_core::lock::conformance;
use lock_core::lock::{DistributedLock, Lease, LeaseStatus, ReleaseOutcome};
use lock_redis::Refusal;
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use tokio::time::Instant;

/// The lock's Redis user.
const USER: &str = "locker";
/// Its password (with characters that need percent-encoding in a URL: `@`, `:`).
const PASSWORD: &str = "acl@Pa55:word";
/// `PASSWORD` percent-encoded for the URL.
const PASSWORD_IN_URL: &str = "acl%40Pa55%3Aword";

/// The paragraph of docs/design.md this test checks.
const DESIGN: &str = include_str!("../../../../../docs/design.md");

/// The lock's ACL: the rules of the backquoted `ACL SETUSER <user> …` of docs/design.md that
/// grants `+evalsha`.
fn documented_acl() -> Vec<String> {
    acl_containing("+evalsha")
}

/// The optional grants of docs/design.md (the `ACL SETUSER` granting `+client|id`).
fn optional_acl() -> Vec<String> {
    acl_containing("+client|id")
}

/// The rules of the first backquoted `ACL SETUSER <user> …` of docs/design.md containing
/// `rule`, without `ACL SETUSER <user>` and with `>…` replaced by `>PASSWORD`.
fn acl_containing(rule: &str) -> Vec<String> {
    const MARKER: &str = "`ACL SETUSER <user> ";
    let mut rest = DESIGN;
    while let Some(start) = rest.find(MARKER) {
        let text = &rest[start + MARKER.len()..];
        let end = text.find('`').expect("unterminated ACL in docs/design.md");
        let rules: Vec<String> = text[..end]
            .split_whitespace()
            .map(|r| {
                if r.starts_with('>') {
                    format!(">{PASSWORD}")
                } else {
                    r.to_owned()
                }
            })
            .collect();
        if rules.iter().any(|r| r == rule) {
            return rules;
        }
        rest = &text[end..];
    }
    panic!("docs/design.md has no `ACL SETUSER <user> …` granting {rule}")
}

/// Creates (or replaces) `USER` with `rules`.
async fn set_user(redis: &RedisServer, rules: &[String]) {
    let mut args = vec!["ACL", "SETUSER", USER, "reset"];
    args.extend(rules.iter().map(String::as_str));
    redis.cmd(&args).await.unwrap();
}

/// `redis://locker:<password>@127.0.0.1:<port>`.
fn user_url(redis: &RedisServer) -> String {
    redis
        .url()
        .replace("redis://", &format!("redis://{USER}:{PASSWORD_IN_URL}@"))
}

fn user_config(redis: &RedisServer) -> Setup {
    common::config(redis).address(user_url(redis))
}

async fn user_client(redis: &RedisServer) -> RedisLock {
    let started = Instant::now();
    let lock = common::connect(user_config(redis)).await;
    // Connected, not just "keeps reconnecting": it answers at once.
    lock.client().ping().await.expect("PING as the ACL user");
    assert!(started.elapsed() < COMMAND_TIMEOUT * 2 + SLACK);
    lock
}

/// What Redis refused `USER` since the last `ACL LOG RESET`: the `object` (command, key or
/// channel) of every entry, with its `reason` (`command`, `key`, `channel`, `auth`).
async fn refused(redis: &RedisServer) -> BTreeSet<String> {
    let log = redis.cmd(&["ACL", "LOG"]).await.unwrap();
    let mut refused = BTreeSet::new();
    let (mut reason, mut object) = (String::new(), String::new());
    let mut lines = log.lines();
    while let Some(line) = lines.next() {
        match line {
            "reason" => reason = lines.next().unwrap_or_default().to_owned(),
            "object" => object = lines.next().unwrap_or_default().to_owned(),
            "username" if lines.next() == Some(USER) => {
                refused.insert(format!("{reason}:{object}"));
            }
            _ => {}
        }
    }
    refused
}

/// The refusals the document says are harmless: `CLIENT ID` and `INFO server` (fred, at
/// connect), `CONFIG GET maxmemory-policy` (the lock's eviction check, at connect).
fn harmless() -> BTreeSet<String> {
    ["command:client|id", "command:info", "command:config|get"]
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Clients of a server as `USER`.
struct AclUser(RedisServer);

#[async_trait::async_trait]
impl Connect for AclUser {
    async fn lock(&self) -> RedisLock {
        user_client(&self.0).await
    }
}

/// Asserts that `error` is a refused permission: a capability's ACL additions are needed.
fn assert_lacks_permission(error: impl std::fmt::Display) {
    assert!(
        error.to_string().contains("lacks an ACL permission"),
        "the additions are needed: {error}"
    );
}

/// Runs a suite, `run_all`, as `USER` with the lock's ACL plus `added`, and asserts that every
/// check passed and that Redis refused nothing but the harmless connect-time commands.
async fn assert_suite_passes_as_user<Fut>(
    redis: RedisServer,
    added: Vec<String>,
    capability: &str,
    run_all: impl FnOnce(Arc<Suite<AclUser>>) -> Fut,
) -> BTreeSet<String>
where
    Fut: Future<Output = Vec<&'static str>>,
{
    let mut rules = documented_acl();
    rules.extend(added);
    set_user(&redis, &rules).await;
    redis.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    let factory = Arc::new(Suite(AclUser(redis)));
    let failed = run_all(Arc::clone(&factory)).await;
    assert!(
        failed.is_empty(),
        "{capability} checks failed as the ACL user: {failed:?}"
    );
    let refused = refused(&factory.0.0).await;
    assert!(
        refused.is_subset(&harmless()),
        "Redis refused more than the harmless connect-time commands: {refused:?}"
    );
    refused
}

#[test]
fn the_documented_acl_is_restricted_to_the_key_prefix() {
    let rules = documented_acl();
    eprintln!("documented ACL: {}", rules.join(" "));
    for needed in [
        "on",
        "resetkeys",
        "~lock:*",
        "resetchannels",
        "&lock:*",
        "-@all",
    ] {
        assert!(
            rules.iter().any(|r| r == needed),
            "{needed} missing: {rules:?}"
        );
    }
    for rule in &rules {
        assert!(
            !matches!(
                rule.as_str(),
                "~*" | "&*" | "allkeys" | "allchannels" | "allcommands"
            ) && !rule.starts_with("+@")
                && !rule.starts_with("%"),
            "{rule}: broader than the lock needs"
        );
        if let Some(pattern) = rule.strip_prefix('~').or(rule.strip_prefix('&')) {
            assert!(
                pattern.starts_with("lock:"),
                "{rule}: not under the key prefix"
            );
        }
    }
    let optional = optional_acl();
    assert!(
        optional
            .iter()
            .all(|r| r.starts_with('+') && !r.starts_with("+@")),
        "{optional:?}"
    );
}

/// Every conformance check, as the ACL user; afterwards Redis has refused nothing but the
/// harmless connect-time commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_as_the_minimal_acl_user() {
    let redis = common::server().await;
    let refused = assert_suite_passes_as_user(redis, Vec::new(), "conformance", |factory| {
        conformance::run_all(factory)
    })
    .await;
    eprintln!("refused to the minimal ACL user: {refused:?}");
}

/// The grants a capability's document adds to the lock's ACL: its backquoted
/// `ACL SETUSER <user> …`.
fn added_acl(doc: &str) -> Vec<String> {
    const MARKER: &str = "`ACL SETUSER <user> ";
    let start = doc.find(MARKER).expect("the document names its ACL") + MARKER.len();
    let end = doc[start..].find('`').expect("an unterminated ACL");
    doc[start..start + end]
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn idempotency_acl() -> Vec<String> {
    added_acl(include_str!("../../../../../docs/idempotency.md"))
}

/// Idempotent execution's whole conformance suite as a user with the lock's ACL plus the
/// documented additions; Redis refuses nothing else, and without the additions it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_runs_idempotent_execution() {
    let redis = common::server().await;
    set_user(&redis, &documented_acl()).await;
    let without = user_client(&redis).await;
    let store = common::idempotency_store(&without).await;
    use lock_core::idempotency::IdempotencyStore;
    let error = store
        .claim("k", &store.new_owner(), "", Duration::from_secs(5), None)
        .await
        .unwrap_err();
    assert_lacks_permission(error);

    assert_suite_passes_as_user(redis, idempotency_acl(), "idempotency", |factory| {
        lock_core::idempotency::conformance::run_all(factory)
    })
    .await;
}

/// Shared values' whole conformance suite as a user with the lock's ACL plus the additions of
/// docs/values.md; Redis refuses nothing else, and without the additions a map fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_runs_shared_values() {
    let redis = common::server().await;
    set_user(&redis, &documented_acl()).await;
    let (values, _) = crate::values::values(&user_client(&redis).await).await;
    let error = values
        .map::<u32>("m")
        .put("f", &1, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_lacks_permission(error);

    assert_suite_passes_as_user(
        redis,
        added_acl(include_str!("../../../../../docs/values.md")),
        "values",
        |factory| lock_core::values::conformance::run_all(factory),
    )
    .await;
}

/// A take that removes a consumer that left (`XINFO CONSUMERS`, `XGROUP DELCONSUMER`) needs
/// nothing beyond the documented grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_queue_grants_remove_consumers_that_left() {
    use lock_core::values::ValueStore;
    let redis = common::server().await;
    let mut rules = documented_acl();
    rules.extend(added_acl(include_str!("../../../../../docs/values.md")));
    set_user(&redis, &rules).await;
    let (values, store) = crate::values::values(&user_client(&redis).await).await;
    let key = store.queue_key("q");
    values.queue::<u32>("q").push(&1).await.unwrap();
    let taken = store.queue_take("q", "gone", 1, SLACK).await.unwrap();
    store.queue_ack("q", &[taken[0].id.clone()]).await.unwrap();
    let xinfo = ["XINFO", "CONSUMERS", key.as_str(), "consumers"];
    let consumers = || redis.cmd(&xinfo);
    let idle = || async {
        let reply = consumers().await.unwrap();
        let mut lines = reply.lines().skip_while(|l| *l != "idle");
        lines.nth(1).and_then(|ms| ms.parse::<u64>().ok()) > Some(10)
    };
    assert!(eventually(SLACK, idle).await, "never idle for 10 ms");
    let (_, newcomer) = crate::values::values(&user_client(&redis).await).await;
    let visibility = Duration::from_millis(10);
    newcomer
        .queue_take("q", "new", 1, visibility)
        .await
        .unwrap();
    let left = consumers().await.unwrap();
    assert!(!left.lines().any(|l| l == "gone"), "{left}");
}

/// A user granted what docs/values.md listed before takes removed departed consumers takes
/// as before: the removal is skipped, and every item is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_consumer_grants_takes_as_before() {
    use lock_core::values::ValueStore;
    let redis = common::server().await;
    let mut rules = documented_acl();
    let removal = ["+xgroup|delconsumer", "+xinfo|groups", "+xinfo|consumers"];
    let values_acl = added_acl(include_str!("../../../../../docs/values.md"));
    rules.extend(
        values_acl
            .into_iter()
            .filter(|r| !removal.contains(&r.as_str())),
    );
    set_user(&redis, &rules).await;
    let (values, store) = crate::values::values(&user_client(&redis).await).await;
    values.queue::<u32>("q").push_all(&[1, 2]).await.unwrap();
    let taken = store.queue_take("q", "pod-a", 10, SLACK).await.unwrap();
    let deliveries: Vec<u64> = taken.iter().map(|d| d.deliveries).collect();
    assert_eq!(deliveries, [1, 1]);
}

/// The cache's whole conformance suite, its pushed changes included, as a user with the lock's
/// ACL plus the additions of docs/cache.md; Redis refuses nothing else, and without the
/// additions a read fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_runs_the_cache() {
    use lock_core::cache::CacheStore;
    let redis = common::server().await;
    set_user(&redis, &documented_acl()).await;
    let store = crate::cache::store(&user_client(&redis).await).await;
    let error = store.get("products", "sku-1").await.unwrap_err();
    assert_lacks_permission(error);

    assert_suite_passes_as_user(
        redis,
        added_acl(include_str!("../../../../../docs/cache.md")),
        "cache",
        |factory| lock_core::cache::conformance::run_all(factory),
    )
    .await;
}

/// With the optional grants of the document too, Redis refuses nothing: the document names
/// every command the client sends (connect, acquire, wait, renew, release, reload, WAIT, PING,
/// and QUIT when the lock is dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_optional_grants_redis_refuses_nothing() {
    let (primary, replica) = common::primary_with_replica().await;
    let mut rules = documented_acl();
    rules.extend(optional_acl());
    set_user(&primary, &rules).await;
    primary.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    {
        let holder = common::connect(user_config(&primary).min_replicas(1)).await;
        let waiter = user_client(&primary).await;
        holder_waiter_round(&primary, &holder, waiter, "optional").await;
        primary.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
        let handle = holder.acquire("optional", Lease::Watchdog).await.unwrap();
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
    // Dropped: QUIT on both connections. Every connection of the user is gone, and nothing was
    // refused on the way.
    let gone = eventually(SLACK, || async {
        !primary
            .cmd(&["CLIENT", "LIST"])
            .await
            .unwrap()
            .contains(&format!("user={USER}"))
    })
    .await;
    assert!(
        gone,
        "the lock's connections stayed open after it was dropped"
    );
    assert_eq!(refused(&primary).await, BTreeSet::new());
    drop(replica);
}

/// `holder` takes `name` with a watchdog lease; `waiter` waits for it on its release channel
/// (checked subscribed with `PUBSUB SHARDNUMSUB`); two watchdog renewals go through; the holder
/// releases and the waiter gets it at once (not at the end of a TTL).
async fn holder_waiter_round(
    redis: &RedisServer,
    holder: &RedisLock,
    waiter: RedisLock,
    name: &str,
) {
    let before = command_calls(redis).await;
    let held = holder.acquire(name, Lease::Watchdog).await.unwrap();
    let owned = name.to_owned();
    let waiting = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(60));
        let handle = waiter.acquire_with(&owned, options).await;
        (handle, Instant::now())
    });
    let channel = holder.release_channel(name);
    let subscribed = one_subscriber(redis, &channel).await;
    assert!(subscribed, "the waiter never subscribed to {channel}");
    let renewed = eventually(WATCHDOG * 2 + SLACK, || async {
        delta(&before, &command_calls(redis).await, "pexpire") >= 2
    })
    .await;
    assert!(renewed, "no watchdog renewal went through");
    assert!(held.is_held(), "{:?}", held.status());
    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (handle, granted_at) = waiting.await.unwrap();
    let handle = handle.unwrap();
    // Woken by the release message: the holder's watchdog TTL is WATCHDOG, a waiter relying on
    // it would come later than this on an idle machine; allow slack for a loaded one.
    assert!(
        granted_at.duration_since(released_at) < SLACK,
        "the waiter was not woken by the release"
    );
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

/// `holder` takes `fair` ; two fair waiters of `waiter` queue for it, the second is dropped and
/// leaves the queue; the holder releases and the first is granted.
async fn fair_round(redis: &RedisServer, holder: &RedisLock, waiter: RedisLock) {
    let name = "fair";
    let held = holder.acquire(name, Lease::Watchdog).await.unwrap();
    let fair = common::watchdog_waiting(Duration::from_secs(60)).fair();
    let queue = holder.queue_key(name);
    let queued = |n: &'static str| {
        let queue = queue.clone();
        async move { redis.cmd(&["ZCARD", &queue]).await.is_ok_and(|r| r == n) }
    };
    let first = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.acquire_with(name, fair).await }
    });
    assert!(
        eventually(SLACK, || queued("1")).await,
        "the first fair waiter never queued"
    );
    let second = tokio::spawn(async move { waiter.acquire_with(name, fair).await });
    assert!(
        eventually(SLACK, || queued("2")).await,
        "the second fair waiter never queued"
    );
    second.abort();
    assert!(
        eventually(SLACK, || queued("1")).await,
        "the dropped waiter did not leave"
    );
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let handle = first.await.unwrap().unwrap();
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(eventually(SLACK, || queued("0")).await);
}

/// Replica-acknowledged grants (`WAIT`), watchdog renewal, waiting on the release channel and
/// the script reload after `SCRIPT FLUSH`, all as the minimal ACL user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_watchdog_waiting_and_reload_work_as_the_acl_user() {
    let (primary, replica) = common::primary_with_replica().await;
    set_user(&primary, &documented_acl()).await;
    primary.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    let holder = common::connect(user_config(&primary).min_replicas(1)).await;
    holder.client().ping().await.unwrap();

    // WAIT: the grant is reported once the replica has it.
    let before = command_calls(&primary).await;
    let handle = common::hold(&holder, "replicated", Duration::from_secs(30)).await;
    let after = command_calls(&primary).await;
    assert_eq!(delta(&before, &after, "wait"), 1);
    let on_replica = common::value(&replica, &holder.redis_key("replicated")).await;
    assert!(on_replica.contains(handle.owner()), "{on_replica}");
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);

    // Watchdog and waiting.
    let waiter = user_client(&primary).await;
    holder_waiter_round(&primary, &holder, waiter, "watched").await;

    // A fair round: the fair scripts (first use loads them), a waiter that leaves the queue.
    let waiter = user_client(&primary).await;
    fair_round(&primary, &holder, waiter).await;

    // SCRIPT FLUSH: the next acquire reloads its script (SCRIPT LOAD) and succeeds.
    primary.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    let before = command_calls(&primary).await;
    let handle = common::hold(&holder, "reloaded", Duration::from_secs(30)).await;
    let after = command_calls(&primary).await;
    assert!(delta(&before, &after, "script|load") >= 1, "no reload");
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);

    let refused = refused(&primary).await;
    assert!(refused.is_subset(&harmless()), "{refused:?}");
}

/// `err` is the typed `no_permission` refusal, its message names `NOPERM` (or the server's ACL
/// errors from inside a script: Redis' `can't run this command`, `can't publish to the channel`,
/// Valkey's `ACL failure in script`) and says what to grant; the password is not in it.
fn assert_no_permission(err: &LockError, code: &str) {
    assert_eq!(err.code(), code, "{err}");
    let failure = common::redis_failure(err);
    assert_eq!(failure.refusal(), Some(Refusal::NoPermission), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("NOPERM")
            || text.contains("can't run this command")
            || text.contains("can't publish to the channel")
            || text.contains("ACL failure in script"),
        "Redis' ACL error is not quoted: {text}"
    );
    assert!(text.contains("lacks an ACL permission"), "{text}");
    assert!(text.contains("ACL SETUSER"), "no remedy: {text}");
    for secret in [PASSWORD, PASSWORD_IN_URL] {
        assert!(!text.contains(secret), "password shown: {text}");
        assert!(
            !format!("{err:?}").contains(secret),
            "password shown: {err:?}"
        );
    }
    eprintln!("{text}");
}

/// The documented ACL without `rule`.
fn acl_without(rule: &str) -> Vec<String> {
    let rules: Vec<String> = documented_acl().into_iter().filter(|r| r != rule).collect();
    assert_eq!(
        rules.len() + 1,
        documented_acl().len(),
        "{rule} is not documented"
    );
    rules
}

/// An acquisition that Redis refuses fails closed as `no_permission` within its wait time plus
/// one command timeout: `+evalsha`, `+script|load`, a script's own command (`+get`, `+set`,
/// `+time`), the key pattern, and `+wait` with `min-replicas`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_fails_closed_naming_noperm() {
    let (primary, _replica) = common::primary_with_replica().await;
    let cases: [(&str, Vec<String>, u32); 7] = [
        ("evalsha", acl_without("+evalsha"), 0),
        ("script-load", acl_without("+script|load"), 0),
        ("get", acl_without("+get"), 0),
        ("set", acl_without("+set"), 0),
        ("time", acl_without("+time"), 0),
        (
            "keys",
            acl_without("~lock:*")
                .into_iter()
                .chain(["~other:*".to_owned()])
                .collect(),
            0,
        ),
        ("wait", acl_without("+wait"), 1),
    ];
    for (case, rules, min_replicas) in cases {
        set_user(&primary, &rules).await;
        primary.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
        let lock = common::connect(
            user_config(&primary)
                .min_replicas(min_replicas)
                .command_timeout(Duration::from_secs(5)),
        )
        .await;
        let name = format!("no-permission-{case}");
        let wait = Duration::from_secs(2);
        let started = Instant::now();
        let err = lock
            .acquire_with(&name, common::watchdog_waiting(wait))
            .await
            .expect_err(case);
        // At once: a refusal is not retried until the wait time runs out.
        assert!(
            started.elapsed() < wait,
            "{case}: took {:?}",
            started.elapsed()
        );
        assert_eq!(
            err.details()["reason"],
            "backend_unavailable",
            "{case}: {err}"
        );
        assert_no_permission(&err, "LOCK_ACQUISITION_FAILED");
        // Nothing is left held: a refused grant writes nothing, and one refused at WAIT is
        // handed back (the release script needs no WAIT).
        let key = lock.redis_key(&name);
        let free = eventually(SLACK, || async {
            let value = primary.cmd(&["GET", &key]).await.unwrap();
            !value.starts_with("H|")
        })
        .await;
        assert!(free, "{case}: {key} is still held");
    }
}

/// A waiter of another client of `USER` on `name`, for up to 30 s, returned once it is
/// subscribed to the key's release channel (so a release has someone to publish to).
async fn subscribed_waiter(
    redis: &RedisServer,
    holder: &RedisLock,
    name: &'static str,
) -> tokio::task::JoinHandle<Result<lock_core::lock::LockHandle, LockError>> {
    let waiter = user_client(redis).await;
    let waiting = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(30));
        waiter.acquire_with(name, options).await
    });
    assert!(one_subscriber(redis, &holder.release_channel(name)).await);
    waiting
}

/// A release the user may not publish, with a waiter to publish to, fails as
/// `LOCK_RELEASE_FAILED` with `no_permission`, naming the ACL problem, instead of reporting
/// success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_without_spublish_fails_naming_noperm() {
    let redis = common::server().await;
    set_user(&redis, &acl_without("+spublish")).await;
    let lock = user_client(&redis).await;
    let handle = common::hold(&lock, "no-spublish", Duration::from_secs(30)).await;
    let waiting = subscribed_waiter(&redis, &lock, "no-spublish").await;
    let err = handle
        .release()
        .await
        .expect_err("release without SPUBLISH");
    assert_no_permission(&err, "LOCK_RELEASE_FAILED");
    // Only now: a waiter gone takes its subscription along, and the release had nobody to wake.
    waiting.abort();
}

/// A user denied the release channel (`&lock:*` missing): a waiter cannot subscribe (refused,
/// logged at `DEBUG`), so the release has nobody to publish to and succeeds, and the waiter is
/// not woken by it, but it still gets the lock by the holder's TTL — it never hangs past its
/// wait time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_channel_waiters_fall_back_to_the_ttl() {
    let redis = common::server().await;
    set_user(&redis, &acl_without("&lock:*")).await;
    let holder = user_client(&redis).await;
    let waiter = user_client(&redis).await;
    let lease = Duration::from_secs(2);
    let held = common::hold(&holder, "no-channel", lease).await;
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let options = common::fixed_waiting(lease, Duration::from_secs(30));
        waiter.acquire_with("no-channel", options).await
    });
    let refused_channel = eventually(SLACK, || async {
        refused(&redis)
            .await
            .iter()
            .any(|r| r.starts_with("channel:"))
    })
    .await;
    assert!(refused_channel, "{:?}", refused(&redis).await);
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let handle = waiting.await.unwrap().unwrap();
    let waited = started.elapsed();
    assert!(
        waited < lease + COMMAND_TIMEOUT + SLACK,
        "waited {waited:?}"
    );
    drop(handle);
}

/// What every server of `servers` refused `USER`.
async fn refused_on(servers: &[RedisServer]) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for server in servers {
        if server.pid().is_some() {
            all.extend(refused(server).await);
        }
    }
    all
}

/// Acquire, wait for a release, release and a watchdog lease on `address` as `USER`.
async fn round_trip(address: &str, name: &str) -> Result<(), LockError> {
    let config = common::default_config(address)
        .watchdog_timeout(WATCHDOG)
        .command_timeout(Duration::from_secs(3))
        .wait_time(Duration::from_secs(5))
        .instance_id("acl-pod");
    let holder = common::try_connect(config.clone()).await?;
    let waiter = common::try_connect(config).await?;
    let held = holder.acquire(name, Lease::Watchdog).await?;
    let owned = name.to_owned();
    let waiting = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(30));
        waiter.acquire_with(&owned, options).await
    });
    // The watchdog keeps the lease past its first deadline.
    let first_deadline = match held.status() {
        LeaseStatus::Held {
            valid_until: Some(deadline),
        } => deadline,
        other => panic!("{other:?}"),
    };
    let renewed = eventually(WATCHDOG * 2 + SLACK, || async {
        Instant::now() > first_deadline && held.is_held()
    })
    .await;
    assert!(renewed, "{:?}", held.status());
    let _ = held.release().await?;
    let handle = waiting.await.unwrap()?;
    let _ = handle.release().await?;
    Ok(())
}

/// Through Sentinel as the ACL user: the data nodes need the Sentinel grant of the document too
/// (`+role`), and each Sentinel the same user with the Sentinel rule of the document (the client
/// authenticates to the Sentinels with the address's user and password). Redis refuses nothing
/// more than the harmless connect-time commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_as_the_acl_user() {
    let sentinel = lock_testkit::RedisSentinel::start().await.unwrap();
    let mut data_rules = documented_acl();
    data_rules.extend(acl_containing("+role"));
    for node in sentinel.nodes() {
        // ACLs are not replicated: every data node gets the user.
        set_user(node, &data_rules).await;
        node.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    }
    // The Sentinels get their own user (the documented Sentinel grant, another password),
    // given in the address as sentinelUsername/sentinelPassword.
    const SENTINEL_USER: &str = "sentinel-locker";
    let sentinel_rules: Vec<String> = acl_containing("+sentinel|sentinels")
        .into_iter()
        .map(|rule| match rule.strip_prefix('>') {
            Some(_) => ">sentinel-Pa55".to_owned(),
            None => rule,
        })
        .collect();
    for node in sentinel.sentinels() {
        let mut args = vec!["ACL", "SETUSER", SENTINEL_USER, "reset"];
        args.extend(sentinel_rules.iter().map(String::as_str));
        node.cmd(&args).await.unwrap();
        node.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    }
    let address = sentinel.url().replace(
        "redis-sentinel://",
        &format!("redis-sentinel://{USER}:{PASSWORD_IN_URL}@"),
    ) + &format!("&sentinelUsername={SENTINEL_USER}&sentinelPassword=sentinel-Pa55");
    // With the documented Sentinel grant the client follows +switch-master on every Sentinel.
    let follower = common::connect(common::default_config(&address).instance_id("acl-pod")).await;
    let subscribed = eventually(SLACK * 6, || async {
        let mut subscribed = 0;
        for node in sentinel.sentinels() {
            let clients = node.cmd(&["CLIENT", "LIST"]).await.unwrap();
            subscribed += clients
                .lines()
                .filter(|l| l.contains(&format!("user={SENTINEL_USER} ")) && l.contains(" sub=1 "))
                .count();
        }
        subscribed == sentinel.sentinels().len()
    })
    .await;
    assert!(
        subscribed,
        "the client is not subscribed to +switch-master on every Sentinel"
    );
    drop(follower);
    round_trip(&address, "sentinel").await.unwrap();
    let refused = refused_on(sentinel.nodes()).await;
    assert!(refused.is_subset(&harmless()), "data nodes: {refused:?}");
    let refused = refused_on(sentinel.sentinels()).await;
    assert_eq!(refused, BTreeSet::new(), "Sentinels");
    // A wrong Sentinel password: the client cannot find the master, and says so in time.
    // Together with the success above this shows the Sentinels are sent sentinelUsername and
    // sentinelPassword (not the data nodes' user, which does not exist there, and not nothing).
    let wrong = address.replace("sentinelPassword=sentinel-Pa55", "sentinelPassword=wrong");
    let config = common::default_config(&wrong)
        .command_timeout(Duration::from_secs(1))
        .wait_time(Duration::ZERO)
        .instance_id("acl-pod");
    let outcome = match common::try_connect(config).await {
        Ok(lock) => lock.acquire("sentinel", Lease::Watchdog).await.map(drop),
        Err(error) => Err(error),
    };
    let error = outcome.expect_err("a wrong Sentinel password must not reach the master");
    assert!(!format!("{error:?}").contains("sentinel-Pa55"), "{error:?}");
    let mut failed_logins = String::new();
    for node in sentinel.sentinels() {
        failed_logins += &node.cmd(&["ACL", "LOG"]).await.unwrap();
    }
    assert!(failed_logins.contains(SENTINEL_USER), "{failed_logins}");
    assert!(
        !failed_logins.contains(&format!("\n{USER}\n")),
        "{failed_logins}"
    );
}

/// On a Cluster as the ACL user: every node needs the Cluster grant of the document too
/// (`+cluster|info +cluster|slots`, the slot map).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_as_the_acl_user() {
    let cluster = lock_testkit::RedisCluster::start().await.unwrap();
    let mut rules = documented_acl();
    rules.extend(acl_containing("+cluster|slots"));
    for node in cluster.nodes() {
        set_user(node, &rules).await;
        node.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    }
    let address = cluster.url().replace(
        "redis-cluster://",
        &format!("redis-cluster://{USER}:{PASSWORD_IN_URL}@"),
    );
    // Keys in different slots, so more than one master serves them.
    for name in ["cluster-a", "cluster-b", "cluster-c"] {
        round_trip(&address, name).await.unwrap();
    }
    let refused = refused_on(cluster.nodes()).await;
    assert!(refused.is_subset(&harmless()), "{refused:?}");
}

/// An ACL written before the release counted its channel's subscribers (no
/// `+pubsub|shardnumsub`) keeps working: the count is refused, so the release publishes, and a
/// waiter wakes on it rather than at the end of its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_without_the_subscriber_count_still_wakes_waiters() {
    let redis = common::server().await;
    set_user(&redis, &acl_without("+pubsub|shardnumsub")).await;
    let holder = user_client(&redis).await;
    let held = common::hold(&holder, "earlier-acl", Duration::from_secs(60)).await;
    let waiting = subscribed_waiter(&redis, &holder, "earlier-acl").await;
    let before = command_calls(&redis).await;
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let after = command_calls(&redis).await;
    assert_eq!(
        delta(&before, &after, "spublish"),
        1,
        "the release did not publish"
    );
    let granted = waiting.await.unwrap();
    assert!(granted.is_ok(), "the waiter was not woken: {granted:?}");
    assert!(refused(&redis).await.contains("command:pubsub|shardnumsub"));
}

/// An ACL written before reads of a cache shared an `HMGET` (no `+hmget`) keeps working: the
/// refused `HMGET` turns the reads to one `HGET` each, and every check of the cache passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_without_hmget_still_reads_the_cache() {
    let redis = common::server().await;
    let mut rules = documented_acl();
    rules.extend(
        added_acl(include_str!("../../../../../docs/cache.md"))
            .into_iter()
            .filter(|rule| rule != "+hmget"),
    );
    set_user(&redis, &rules).await;
    let factory = Arc::new(Suite(AclUser(redis)));
    let failed = lock_core::cache::conformance::run_all(factory.clone()).await;
    assert!(
        failed.is_empty(),
        "cache checks failed without +hmget: {failed:?}"
    );
    assert!(refused(&factory.0.0).await.contains("command:hmget"));
}

/// The operators' calls (`status`, `list`, `force_release`, as the `platform-lock` CLI makes
/// them) as the documented user with the documented CLI grant (`+scan`):
/// nothing is refused beyond the harmless connect-time commands; without the CLI grants, `list`
/// fails as the typed `no_permission` refusal of `SCAN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_calls_work_with_the_documented_cli_grants() {
    let redis = common::server().await;
    let mut rules = documented_acl();
    set_user(&redis, &rules).await;
    let ops = user_client(&redis).await;
    let refused_list = ops.list(None, 10).await.unwrap_err();
    assert_no_permission(&refused_list, "LOCK_ACQUISITION_FAILED");
    assert!(refused_list.to_string().contains("SCAN"), "{refused_list}");
    assert!(refused(&redis).await.contains("command:scan"));

    rules.extend(acl_containing("+scan"));
    set_user(&redis, &rules).await;
    redis.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    let ops = user_client(&redis).await;
    let holder = user_client(&redis).await;
    let handle = holder.acquire("ops-acl", Lease::Watchdog).await.unwrap();
    assert!(ops.status("ops-acl").await.unwrap().is_held());
    assert_eq!(ops.list(Some("ops-*"), 10).await.unwrap().len(), 1);
    assert!(matches!(
        ops.force_release("ops-acl").await.unwrap(),
        lock_redis::lock::ForceReleased::Released { .. }
    ));
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let refused = refused(&redis).await;
    assert!(refused.is_subset(&harmless()), "{refused:?}");
}

/// `list` as a user granted everything but `+scan`: Redis' `NOPERM` reply to the `SCAN` reaches
/// the caller as the typed `no_permission` refusal of the `SCAN` (not fred's "Expected bulk
/// string array from SCAN"), at once, saying to grant `+scan`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_without_scan_fails_as_no_permission_naming_the_grant() {
    let redis = common::server().await;
    let mut rules = documented_acl();
    set_user(&redis, &rules).await;
    let ops = user_client(&redis).await;
    // A held lock, so an unrefused SCAN would have found something to list.
    let holder = user_client(&redis).await;
    let _held = holder.acquire("listed", Lease::Watchdog).await.unwrap();
    let started = Instant::now();
    let err = ops.list(None, 10).await.expect_err("SCAN without +scan");
    assert!(
        started.elapsed() < COMMAND_TIMEOUT + SLACK,
        "took {:?}",
        started.elapsed()
    );
    assert_no_permission(&err, "LOCK_ACQUISITION_FAILED");
    assert_eq!(err.details()["reason"], "backend_unavailable", "{err}");
    match common::redis_failure(&err) {
        lock_redis::RedisFailure::Refused {
            operation, message, ..
        } => {
            assert_eq!(*operation, "SCAN");
            assert!(message.starts_with("NOPERM"), "{message}");
            assert!(message.contains("scan"), "{message}");
        }
        other => panic!("not a refusal: {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("Redis refused the SCAN"), "{text}");
    assert!(text.contains("+scan"), "does not say what to grant: {text}");
    assert!(!text.contains("Expected bulk string"), "{text}");
    assert!(refused(&redis).await.contains("command:scan"));
    // Granted `+scan`, the lock is listed.
    rules.push("+scan".to_owned());
    set_user(&redis, &rules).await;
    let ops = user_client(&redis).await;
    let listed = ops.list(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, "listed");
}

/// The master/sub locks' additions to the lock's ACL: the rules of the backquoted
/// `ACL SETUSER <user> …` of docs/branches.md granting `+hget`.
fn branches_acl() -> Vec<String> {
    const BRANCHES: &str = include_str!("../../../../../docs/branches.md");
    const MARKER: &str = "`ACL SETUSER <user> +hget";
    let start = BRANCHES
        .find(MARKER)
        .expect("docs/branches.md has no `ACL SETUSER <user> +hget …`")
        + "`ACL SETUSER <user> ".len();
    let end = BRANCHES[start..].find('`').expect("unterminated ACL") + start;
    BRANCHES[start..end]
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The master/sub locks as the lock's ACL user: without docs/branches.md's additions a master
/// fails closed at its start (the open script is refused: `no_permission`, the lock given back,
/// the block not run); with them a master and a consumer work and Redis refuses nothing but the
/// harmless connect-time commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_sub_locks_need_only_the_documented_hash_commands() {
    use lock_core::branches::{BranchRelease, BranchesOutcome, MasterOptions};
    use lock_redis::RedisFailure;

    let redis = common::server().await;
    set_user(&redis, &documented_acl()).await;
    let lock = user_client(&redis).await;
    let (masters, _) = common::master_locks(lock.clone()).await;
    let ran = std::sync::atomic::AtomicBool::new(false);
    let error = masters
        .with_master_lock("acl:branches", Lease::Watchdog, |_| async {
            ran.store(true, std::sync::atomic::Ordering::SeqCst)
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "BRANCHES_UNAVAILABLE", "{error}");
    assert_eq!(error.details()["operation"], "open");
    let failure = RedisFailure::find(&error).expect("a Redis failure behind it");
    assert_eq!(failure.refusal(), Some(Refusal::NoPermission), "{failure}");
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    let again = lock.try_acquire("acl:branches", Lease::Watchdog).await;
    assert!(
        again.is_ok(),
        "the master did not give its lock back: {again:?}"
    );
    drop(again);

    let mut rules = documented_acl();
    rules.extend(branches_acl());
    set_user(&redis, &rules).await;
    redis.cmd(&["ACL", "LOG", "RESET"]).await.unwrap();
    let consumer_lock = user_client(&redis).await;
    let consumer = common::branches(&consumer_lock).await;
    let (late_token, late) = tokio::sync::oneshot::channel();
    let late_consumer = tokio::spawn({
        let consumer = consumer.clone();
        async move {
            use lock_core::branches::Branches;
            // While the master waits (or just before it: counted either way).
            let token = late.await.unwrap();
            consumer.release_branch(&token).await.unwrap()
        }
    });
    let options = MasterOptions::new(Lease::Watchdog)
        .branch_wait(Duration::from_secs(30))
        .unwrap();
    let outcome = masters
        .with_master_lock("acl:branches", options, |master| async move {
            use lock_core::branches::Branches;
            let early = master.register_branch("search").await.unwrap();
            let late = master.register_branch("audit").await.unwrap();
            assert!(early.is_registered() && late.is_registered());
            assert_eq!(
                consumer.release_branch(&early).await.unwrap(),
                BranchRelease::Released
            );
            late_token.send(late).unwrap();
        })
        .await
        .unwrap();
    assert_eq!(late_consumer.await.unwrap(), BranchRelease::Released);
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    let refused = refused(&redis).await;
    assert!(
        refused.is_subset(&harmless()),
        "refused beyond the harmless: {refused:?}"
    );
    assert_eq!(redis.cmd(&["KEYS", "lock:branches:*"]).await.unwrap(), "");
}

/// Rate limiting's whole conformance suite as a user with the lock's ACL alone, as
/// docs/rate-limiting.md says; Redis refuses nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locks_acl_runs_rate_limiting() {
    let redis = common::server().await;
    assert_suite_passes_as_user(redis, Vec::new(), "rate-limit", |factory| {
        lock_core::rate_limit::conformance::run_all(factory)
    })
    .await;
}
