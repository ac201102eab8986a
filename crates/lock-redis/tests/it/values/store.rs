//! Shared values on one redis-server: the conformance suite, the stored form, a waiter's
//! subscription killed mid-wait, a restarted Redis, and what a fan-out costs Redis.

use crate::common;

use std::time::Duration;

use common::{SLACK, command_calls, delta, eventually, server};
use lock_core::values::{Expiry, ValueStore, Waited};
use lock_testkit::RedisServer;

use super::values;

/// Waits up to `within` for the waiting `task` and asserts that what it waited for was met.
async fn assert_met<T: std::fmt::Debug>(
    task: tokio::task::JoinHandle<Result<Waited<T>, lock_core::values::ValuesError>>,
    within: Duration,
) {
    let waited = tokio::time::timeout(within, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(waited.is_met(), "{waited:?}");
}

mod conformance {
    use super::server;
    use crate::suites::Suite;

    lock_core::conformance_tests!(values, async { Suite(server().await) });
}

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_is_one_string_holding_its_version_with_the_writes_ttl() {
    let redis = server().await;
    let (values, store) = values(&common::client(&redis).await).await;
    let version = values
        .set(
            "catalog:warm-up",
            &serde_json::json!({"step": 3}),
            Expiry::After(LONG),
        )
        .await
        .unwrap();
    let key = store.value_key("catalog:warm-up");
    assert_eq!(key, "lock:values:{catalog:warm-up}");
    assert_eq!(
        common::value(&redis, &key).await,
        format!("{version}:{{\"step\":3}}")
    );
    let ttl: i64 = common::integer(&redis, &["PTTL", &key]).await;
    assert!(ttl > 50_000 && ttl <= 60_000, "PTTL {ttl}");
    // A version from the server's clock in microseconds.
    let now_us: u64 = redis
        .cmd(&["TIME"])
        .await
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1_000_000;
    assert!(
        version <= now_us + 1_000_000 && version + 60_000_000 > now_us,
        "{version} vs {now_us}"
    );

    redis
        .cmd(&["SET", &key, "not a shared value"])
        .await
        .unwrap();
    let error = values.get::<u32>("catalog:warm-up").await.unwrap_err();
    assert_eq!(error.code(), "VALUES_UNAVAILABLE", "{error}");
    assert!(error.to_string().contains("not a shared value"), "{error}");
    let error = values
        .set("catalog:warm-up", &1, Expiry::Never)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("not a shared value"), "{error}");
    assert_eq!(common::value(&redis, &key).await, "not a shared value");
    // Another type at the key: refused the same way, saying so.
    redis.cmd(&["DEL", &key]).await.unwrap();
    redis.cmd(&["HSET", &key, "f", "v"]).await.unwrap();
    let read = values.get::<u32>("catalog:warm-up").await.unwrap_err();
    let write = values
        .set("catalog:warm-up", &1, Expiry::Never)
        .await
        .unwrap_err();
    for error in [read, write] {
        assert_eq!(error.code(), "VALUES_UNAVAILABLE", "{error}");
        assert!(error.to_string().contains("another type"), "{error}");
    }
}

/// One set wakes every waiter of a client through one subscription and one publish, and no
/// waiter reads Redis for it: the value comes with the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_share_one_subscription_and_read_nothing_per_write() {
    const WAITERS: usize = 50;
    let redis = server().await;
    let (waiter, store) = values(&common::client(&redis).await).await;
    let (writer, _) = values(&common::client(&redis).await).await;
    let channel = store.write_channel("fan-out");
    let gets = || async { delta(&Default::default(), &command_calls(&redis).await, "get") };
    let wait = || {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .wait_for_value("fan-out", &"done".to_owned(), LONG)
                .await
        })
    };
    // The first waiter subscribes. It reads once, and once more if it hears the confirmation
    // after that read: both reads are over before the others start.
    let mut tasks = vec![wait()];
    assert!(common::one_subscriber(&redis, &channel).await);
    eventually(SLACK, || async { gets().await >= 2 }).await;
    let primed = gets().await;
    // The others join a confirmed subscription: each reads exactly once.
    tasks.extend((1..WAITERS).map(|_| wait()));
    let expected = primed + WAITERS as u64 - 1;
    assert!(
        eventually(SLACK, || async { gets().await == expected }).await,
        "{} GETs, not {expected}",
        gets().await
    );
    let before = command_calls(&redis).await;
    writer
        .set("fan-out", "done", Expiry::After(LONG))
        .await
        .unwrap();
    for task in tasks {
        assert_met(task, SLACK).await;
    }
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "spublish"), 1);
    assert_eq!(
        delta(&before, &after, "get"),
        1,
        "only the set script's own GET"
    );
    assert_eq!(delta(&before, &after, "evalsha"), 1);
}

/// A waiter whose pub/sub connection is killed mid-wait re-subscribes, reads again, and still
/// sees a write made while it was deaf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_while_the_subscription_was_down_is_seen() {
    let redis = server().await;
    let (waiter, store) = values(&common::client(&redis).await).await;
    let (writer, _) = values(&common::client(&redis).await).await;
    let channel = store.write_channel("deaf");
    let task = tokio::spawn(async move {
        waiter
            .wait_for_value("deaf", &"done".to_owned(), LONG)
            .await
    });
    assert!(common::one_subscriber(&redis, &channel).await);
    redis
        .cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .await
        .unwrap();
    writer
        .set("deaf", "done", Expiry::After(LONG))
        .await
        .unwrap();
    assert_met(task, SLACK * 2).await;
}

/// A value set after the waiter's first read but before its subscription was confirmed (the
/// subscription's `SSUBSCRIBE` is held back by a fault proxy) is still seen, once the
/// subscription is made on a new connection: its confirmation makes the waiter read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_between_the_first_read_and_the_subscription_is_seen() {
    let redis = server().await;
    let (proxy, lock) = common::behind_proxy(&redis, |s| s).await;
    proxy.arm_trap(b"SSUBSCRIBE", lock_testkit::TrapAction::Blackhole);
    let (waiter, _) = values(&lock).await;
    let (read, mut first_read) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut first = true;
        waiter
            .wait_for(
                "between",
                LONG,
                move |v: Option<&lock_core::values::Versioned<String>>| {
                    if std::mem::take(&mut first) {
                        let _ = read.send(());
                    }
                    v.is_some_and(|v| v.value == "done")
                },
            )
            .await
    });
    tokio::time::timeout(SLACK, first_read.recv())
        .await
        .expect("the waiter read")
        .unwrap();
    assert!(
        eventually(SLACK, || async { proxy.traps_fired() == 1 }).await,
        "the subscription was not held back"
    );
    let (writer, _) = values(&common::client(&redis).await).await;
    writer
        .set("between", "done", Expiry::After(LONG))
        .await
        .unwrap();
    proxy.drop_connections();
    assert_met(task, SLACK * 3).await;
}

/// A Redis restarted mid-wait (quicker than the command timeout): the waiter reconnects,
/// re-subscribes and sees the write made after the restart; while Redis is down a read is an
/// error, never a stale value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_mid_wait_loses_no_write_and_reports_no_stale_value() {
    let mut redis = RedisServer::builder().start().await.unwrap();
    let lock =
        common::connect(common::config(&redis).command_timeout(Duration::from_secs(10))).await;
    let (waiter, store) = values(&lock).await;
    let channel = store.write_channel("restart");
    let (read, mut first_read) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut first = true;
        let until = move |v: Option<&lock_core::values::Versioned<String>>| {
            if std::mem::take(&mut first) {
                let _ = read.send(());
            }
            v.is_some_and(|v| v.value == "done")
        };
        waiter.wait_for("restart", LONG, until).await
    });
    // Mid-wait: subscribed, and past its first read.
    tokio::time::timeout(SLACK, first_read.recv())
        .await
        .expect("the waiter read")
        .unwrap();
    assert!(common::one_subscriber(&redis, &channel).await);
    redis.restart().await.unwrap();
    let (writer, _) = values(&common::client(&redis).await).await;
    writer
        .set("restart", "done", Expiry::After(LONG))
        .await
        .unwrap();
    let waited = tokio::time::timeout(SLACK * 3, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(waited, Waited::Met(Some(_))), "{waited:?}");
    drop(redis);
    let error = tokio::time::timeout(SLACK * 3, store.get("restart"))
        .await
        .expect("the read ends within its command timeout")
        .unwrap_err();
    assert_eq!(error.code(), "VALUES_UNAVAILABLE", "{error}");
}

/// A TTL map is a hash and a sorted set of deadlines under one hash tag; both expire with the
/// map's last field on Redis' clock, with no client running, and `clear` deletes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maps_two_keys_expire_with_its_last_field_and_clear_deletes_both() {
    let redis = server().await;
    let (values, store) = values(&common::client(&redis).await).await;
    let [hash, deadlines] = store.map_keys("login-attempts");
    assert_eq!(hash, "lock:maps:{login-attempts}");
    assert_eq!(deadlines, "lock:maps:{login-attempts}:deadlines");
    let map = values.map::<u32>("login-attempts");
    map.put("a", &1, Duration::from_millis(300)).await.unwrap();
    map.put("b", &2, Duration::from_secs(3)).await.unwrap();
    let ttl = common::integer(&redis, &["PTTL", &hash]).await;
    assert!(
        ttl > 300 && ttl <= 3_000,
        "the map lives as long as its last field: PTTL {ttl}"
    );
    let deadlines_ttl = common::integer(&redis, &["PTTL", &deadlines]).await;
    assert!(
        (ttl - deadlines_ttl).abs() < 100,
        "both keys expire together: {ttl} vs {deadlines_ttl}"
    );
    drop((values, map));
    assert!(
        eventually(SLACK, || async {
            common::integer(&redis, &["EXISTS", &hash, &deadlines]).await == 0
        })
        .await,
        "the map outlived its last field"
    );

    let (values, _) = super::values(&common::client(&redis).await).await;
    let map = values.map::<u32>("login-attempts");
    // Removing the longest-lived field leaves the keys to the last one left.
    map.put("short", &1, Duration::from_secs(3)).await.unwrap();
    map.put("long", &2, Duration::from_secs(30 * 24 * 3600))
        .await
        .unwrap();
    assert!(map.remove("long").await.unwrap());
    let ttl = common::integer(&redis, &["PTTL", &hash]).await;
    assert!(ttl > 0 && ttl <= 3_000, "after the remove: PTTL {ttl}");
    let deadlines_ttl = common::integer(&redis, &["PTTL", &deadlines]).await;
    assert!(
        deadlines_ttl > 0 && deadlines_ttl <= 3_000,
        "PTTL {deadlines_ttl}"
    );
    map.put("c", &3, LONG).await.unwrap();
    assert!(map.clear().await.unwrap());
    assert_eq!(
        common::integer(&redis, &["EXISTS", &hash, &deadlines]).await,
        0
    );
}

/// A map whose hash key holds another type, with no deadlines key: reads fail saying so, as a
/// put does, rather than answering for another program's key as for an empty map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_key_of_another_type_fails_reads_too() {
    let redis = server().await;
    let (values, store) = values(&common::client(&redis).await).await;
    let [hash, _] = store.map_keys("taken");
    redis.cmd(&["SET", &hash, "precious"]).await.unwrap();
    let map = values.map::<u32>("taken");
    let errors = [
        map.get("f").await.unwrap_err(),
        map.entries().await.unwrap_err(),
        map.put("f", &1, LONG).await.unwrap_err(),
    ];
    for error in errors {
        assert_eq!(error.code(), "VALUES_UNAVAILABLE", "{error}");
        assert!(error.to_string().contains("another type"), "{error}");
    }
    assert_eq!(common::value(&redis, &hash).await, "precious");
}

/// A map of more live fields, and an acknowledgement of more ids, than a Lua `unpack` takes at
/// once (about 8,000) are read and acknowledged whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_fields_are_listed_and_many_ids_acknowledged_at_once() {
    const MANY: u32 = 9_000;
    let redis = server().await;
    let (values, _) = values(&common::client(&redis).await).await;
    let map = values.map::<u32>("many");
    for i in 0..MANY {
        map.put(&format!("f{i}"), &i, LONG).await.unwrap();
    }
    assert_eq!(map.entries().await.unwrap().len(), MANY as usize);

    let queue = values.queue::<u32>("many");
    let items: Vec<u32> = (0..MANY).collect();
    queue.push_all(&items).await.unwrap();
    let mut ids = Vec::new();
    while ids.len() < items.len() {
        let taken = queue.take(1_000, LONG).await.unwrap();
        assert!(!taken.items.is_empty(), "{} of {MANY} taken", ids.len());
        ids.extend(taken.ids());
    }
    assert_eq!(queue.ack(&ids).await.unwrap(), u64::from(MANY));
    assert_eq!(queue.len().await.unwrap(), 0);
}

/// A stored version too large to count exactly is not a shared value: reads and writes are
/// refused, and the write changes nothing; nor does a write past the last exact version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_too_large_to_count_is_refused_and_left_alone() {
    let redis = server().await;
    let (values, store) = values(&common::client(&redis).await).await;
    let key = store.value_key("huge");
    for planted in ["9007199254740992:1", "99999999999999999999:1"] {
        redis.cmd(&["SET", &key, planted]).await.unwrap();
        let read = values.get::<u32>("huge").await.unwrap_err();
        let write = values.set("huge", &2, Expiry::Never).await.unwrap_err();
        for error in [read, write] {
            assert!(
                error.to_string().contains("not a shared value"),
                "{planted}: {error}"
            );
        }
        assert_eq!(common::value(&redis, &key).await, planted);
    }
    // The last exact version reads, and a write that would go past it is refused, naming it,
    // rather than storing a version every later call refuses.
    let last = "9007199254740991:1";
    redis.cmd(&["SET", &key, last]).await.unwrap();
    assert_eq!(values.get::<u32>("huge").await.unwrap().unwrap().value, 1);
    let set = values.set("huge", &2, Expiry::Never).await.unwrap_err();
    let delete = values.delete("huge").await.unwrap_err();
    for error in [set, delete] {
        assert!(error.to_string().contains("last exact version"), "{error}");
    }
    assert_eq!(common::value(&redis, &key).await, last);
}

/// A queue whose consumer group something removed is repaired by the next take, and its
/// items are taken anew; an empty push creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_whose_group_was_removed_is_repaired() {
    let redis = server().await;
    let (values, store) = values(&common::client(&redis).await).await;
    let queue = values.queue::<u32>("orphan");
    let key = store.queue_key("orphan");
    assert_eq!(queue.push_all(&[]).await.unwrap(), Vec::<String>::new());
    assert_eq!(common::integer(&redis, &["EXISTS", &key]).await, 0);
    queue.push_all(&[1, 2]).await.unwrap();
    assert_eq!(queue.take(1, LONG).await.unwrap().items.len(), 1);
    redis
        .cmd(&["XGROUP", "DESTROY", &key, "consumers"])
        .await
        .unwrap();
    let taken = queue.take(10, LONG).await.unwrap();
    let items: Vec<(u32, u64)> = taken.items.iter().map(|d| (d.item, d.deliveries)).collect();
    assert_eq!(items, [(1, 1), (2, 1)]);
    assert_eq!(queue.ack(&taken.ids()).await.unwrap(), 2);
    redis
        .cmd(&["XGROUP", "DESTROY", &key, "consumers"])
        .await
        .unwrap();
    queue.push(&3).await.unwrap();
    let items: Vec<u32> = queue
        .take(10, LONG)
        .await
        .unwrap()
        .items
        .iter()
        .map(|d| d.item)
        .collect();
    assert_eq!(items, [3]);
}

/// The consumers of `key`'s group, each with its idle time (ms), from `XINFO CONSUMERS`.
async fn consumers(redis: &RedisServer, key: &str) -> Vec<(String, u64)> {
    let reply = redis
        .cmd(&["XINFO", "CONSUMERS", key, "consumers"])
        .await
        .unwrap();
    let lines: Vec<&str> = reply.lines().collect();
    let mut consumers = Vec::new();
    for pair in lines.windows(2) {
        match pair[0] {
            "name" => consumers.push((pair[1].to_owned(), 0)),
            "idle" => consumers.last_mut().unwrap().1 = pair[1].parse().unwrap(),
            _ => {}
        }
    }
    consumers
}

/// Each process that took from a queue is a consumer of its group; processes come and go with
/// deploys. A process's first take removes those with nothing pending, idle past the visibility.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_removes_the_consumers_that_left_the_queue() {
    let redis = server().await;
    let (shared, store) = values(&common::client(&redis).await).await;
    let key = store.queue_key("deploys");
    shared
        .queue::<u32>("deploys")
        .push_all(&[1, 2])
        .await
        .unwrap();
    let taken = store.queue_take("deploys", "pod-a", 1, LONG).await.unwrap();
    store
        .queue_ack("deploys", &[taken[0].id.clone()])
        .await
        .unwrap();
    let visibility = Duration::from_secs(1);
    let left = || async {
        consumers(&redis, &key)
            .await
            .iter()
            .any(|(name, idle)| name == "pod-a" && *idle > 1_000)
    };
    assert!(eventually(SLACK, left).await, "pod-a never idle past 1 s");
    // pod-b holds the other item; this client took already, so it removes nobody.
    store.queue_take("deploys", "pod-b", 1, LONG).await.unwrap();
    let names = |c: Vec<(String, u64)>| c.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(names(consumers(&redis, &key).await), ["pod-a", "pod-b"]);

    let (_, newcomer) = values(&common::client(&redis).await).await;
    let taken = newcomer
        .queue_take("deploys", "pod-c", 1, visibility)
        .await
        .unwrap();
    assert!(taken.is_empty(), "pod-b's item is not due: {taken:?}");
    // pod-c is made by the first take that gets it something.
    let mut left = names(consumers(&redis, &key).await);
    left.retain(|name| name != "pod-c");
    assert_eq!(left, ["pod-b"]);
}

/// A group with more consumers than a take looks through is warned about, and left as it is.
#[tokio::test(flavor = "current_thread")]
async fn a_crowded_consumer_group_is_warned_about_not_looked_through() {
    let (logs, subscriber) = lock_testkit::logs::CapturedLogs::scoped(tracing::Level::WARN);
    let _logs = tracing::subscriber::set_default(subscriber);
    let redis = server().await;
    let (shared, store) = values(&common::client(&redis).await).await;
    let key = store.queue_key("crowded");
    shared.queue::<u32>("crowded").push(&1).await.unwrap();
    let create = "for i = 1, 1001 do redis.call('XGROUP', 'CREATECONSUMER', KEYS[1], 'consumers', 'c' .. i) end";
    redis.cmd(&["EVAL", create, "1", &key]).await.unwrap();
    let taken = store
        .queue_take("crowded", "pod-a", 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    assert!(consumers(&redis, &key).await.len() > 1_000);
    let text = logs.text();
    assert!(
        text.contains("more consumers than a take removes") && text.contains("queue=\"crowded\""),
        "{text}"
    );
}
