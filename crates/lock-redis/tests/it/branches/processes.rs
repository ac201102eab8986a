//! Master/sub locks across OS processes on one redis-server: a producer process and two
//! consumer processes exchange branch tokens through Redis lists standing in for Kafka topics.
//! One consumer is killed holding its token (its branch is named missing at the timeout), one
//! release is redelivered (it counts once), one arrives before the master starts waiting and
//! one while it waits. And a master process killed mid-block leaves records that expire.
//!
//! Children are this test binary again (`lock_testkit::test_child`), each running the ignored
//! test `branches_child` in the role its environment names; they report to the parent by
//! pushing lines to the list `events`.

use crate::common;

use std::process::Child;
use std::time::Duration;

use common::{SLACK, eventually, server};
use lock_core::branches::{BranchToken, MasterOptions};
use lock_core::lock::Lease;
use lock_testkit::{RedisServer, command_at, test_child};
use tokio::time::Instant;

/// Set in a child process: `<role>|<host>|<port>`.
const CHILD: &str = "BRANCHES_TEST_CHILD";
const MASTER_KEY: &str = "ticket:4711";
/// The producer's branch wait: long enough for the consumers' work, short for the test.
const BRANCH_WAIT: Duration = Duration::from_secs(4);

fn child(redis: &RedisServer, role: &str) -> Child {
    test_child(module_path!(), "branches_child")
        .env(CHILD, format!("{role}|127.0.0.1|{}", redis.port()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the child process")
}

/// The next line pushed to `events`, waiting up to `within`.
async fn next_event(redis: &RedisServer, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        // BLPOP blocks in Redis until a line arrives (or 5 s): no polling.
        let reply = redis.cmd(&["BLPOP", "events", "5"]).await.unwrap();
        if let Some((_, line)) = reply.split_once('\n') {
            return Some(line.to_owned());
        }
    }
    None
}

/// Waits for `child` to exit, up to `within`; returns whether it succeeded.
async fn exits(mut child: Child, within: Duration) -> bool {
    let waited = tokio::time::timeout(
        within,
        tokio::task::spawn_blocking(move || child.wait().expect("wait for the child")),
    )
    .await;
    waited.expect("the child did not exit").unwrap().success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_and_two_consumer_processes_exchange_tokens_through_a_list() {
    let redis = server().await;
    let indexer = child(&redis, "search-consumer");
    let mut auditor = child(&redis, "audit-consumer");
    let producer = child(&redis, "producer");

    let mut events = Vec::new();
    let next = async |events: &mut Vec<String>| {
        let event = next_event(&redis, BRANCH_WAIT + SLACK * 4)
            .await
            .unwrap_or_else(|| panic!("no result from the producer; events so far: {events:?}"));
        events.push(event.clone());
        event
    };
    while next(&mut events).await != "audit-consumer|audit|received" {}
    // Killed holding its token: its branch is never released.
    auditor.kill().unwrap();
    auditor.wait().unwrap();
    let result = loop {
        let event = next(&mut events).await;
        if event.starts_with("producer|") {
            break event;
        }
    };
    assert!(
        exits(producer, SLACK).await,
        "the producer failed: {events:?}"
    );
    assert!(
        exits(indexer, SLACK).await,
        "the search consumer failed: {events:?}"
    );
    for expected in [
        "audit-consumer|audit|received",
        // Released before the master's block returned — the block waited for it.
        "search-consumer|search|released",
        // The redelivery of the same message.
        "search-consumer|search|already_released",
        // Released while the master waited.
        "search-consumer|cache|released",
    ] {
        assert!(
            events.iter().any(|e| e == expected),
            "{expected} missing from {events:?}"
        );
    }
    let fields: Vec<&str> = result.split('|').collect();
    // producer|<outcome>|<missing>|<unregistered>|<waited ms>
    assert_eq!(
        fields[..4],
        ["producer", "timed_out", "audit", ""],
        "{result}"
    );
    let waited: u64 = fields[4].parse().unwrap();
    assert!(waited >= BRANCH_WAIT.as_millis() as u64, "{result}");
    assert_eq!(redis.cmd(&["KEYS", "lock:branches:*"]).await.unwrap(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_process_killed_mid_block_leaves_records_that_expire() {
    let redis = server().await;
    let mut master = child(&redis, "crashing-producer");
    let event = next_event(&redis, SLACK * 4).await;
    assert_eq!(event.as_deref(), Some("crashing-producer|registered"));
    master.kill().unwrap();
    master.wait().unwrap();

    let keys = redis.cmd(&["KEYS", "lock:branches:*"]).await.unwrap();
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = redis
        .cmd(&["PTTL", keys[0]])
        .await
        .unwrap()
        .parse()
        .unwrap();
    // Its TTL: the 1 s branch wait plus 2 s (longer than the 1 s watchdog lease).
    assert!((1..=3_000).contains(&ttl), "PTTL {ttl}");
    let expired = eventually(Duration::from_millis(3_000) + SLACK, || async {
        redis
            .cmd(&["KEYS", "lock:branches:*"])
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    assert!(expired, "the crashed master's record did not expire");
    // And its watchdog lease ended: another master gets the key.
    let (masters, _) = super::store::masters(&redis).await;
    let next = masters
        .with_master_lock(MASTER_KEY, Lease::Watchdog, |master| async move {
            master.invocation()
        })
        .await
        .unwrap();
    assert!(next.is_complete());
}

/// The body of the child processes; does nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of the child processes the branch tests start"]
async fn branches_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let [role, host, port] = spec.split('|').collect::<Vec<_>>()[..] else {
        panic!("bad {CHILD}: {spec}");
    };
    let port: u16 = port.parse().unwrap();
    let cmd = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let host = host.to_owned();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            command_at(&host, port, None, &args).await.unwrap()
        }
    };
    let report = |line: String| {
        let cmd = &cmd;
        async move {
            cmd(&["RPUSH", "events", &line]).await;
        }
    };
    // Takes the next message of `topic` (a list), waiting for it.
    let consume = |topic: &'static str| {
        let cmd = &cmd;
        async move {
            loop {
                let reply = cmd(&["BLPOP", topic, "5"]).await;
                if let Some((_, token)) = reply.split_once('\n') {
                    return token.parse::<BranchToken>().expect("a branch token");
                }
            }
        }
    };
    let redis_url = format!("redis://{host}:{port}");
    let lock = common::connect(
        common::default_config(redis_url)
            .watchdog_timeout(common::WATCHDOG)
            .command_timeout(common::COMMAND_TIMEOUT)
            .instance_id(role),
    )
    .await;
    let (masters, branches) = common::master_locks(lock);
    match role {
        "producer" => {
            let options = MasterOptions::new(Lease::Watchdog)
                .branch_wait(BRANCH_WAIT)
                .unwrap();
            let outcome = masters
                .with_master_lock(MASTER_KEY, options, |master| async move {
                    for (branch, topic) in [
                        ("search", "search"),
                        ("cache", "search"),
                        ("audit", "audit"),
                    ] {
                        let token = master.register_branch(branch).await.unwrap();
                        assert!(token.is_registered());
                        cmd(&["RPUSH", topic, &token.to_string()]).await;
                    }
                    // The search index confirms before the block returns.
                    let ack = cmd(&["BLPOP", "search-acks", "9"]).await;
                    assert!(ack.ends_with("search"), "no ack for search: {ack:?}");
                })
                .await
                .unwrap();
            report(format!(
                "producer|{}|{}|{}|{}",
                outcome.branches.as_str(),
                outcome.branches.missing().join(","),
                outcome.unregistered.join(","),
                outcome.waited.as_millis()
            ))
            .await;
        }
        "search-consumer" => {
            let search = consume("search").await;
            let released = masters.release_branch(&search).await.unwrap();
            report(format!("{role}|search|{}", released.as_str())).await;
            cmd(&["RPUSH", "search-acks", "search"]).await;
            // The same message delivered again.
            let again = masters.release_branch(&search).await.unwrap();
            report(format!("{role}|search|{}", again.as_str())).await;
            let cache = consume("search").await;
            // Released while the master waits: once it is subscribed.
            let channel = branches.release_channel(cache.sub_key());
            let subscribed = eventually(SLACK * 4, || async {
                cmd(&["PUBSUB", "SHARDNUMSUB", &channel]).await == format!("{channel}\n1")
            })
            .await;
            assert!(subscribed, "the master never waited on {channel}");
            let released = masters.release_branch(&cache).await.unwrap();
            report(format!("{role}|cache|{}", released.as_str())).await;
        }
        "audit-consumer" => {
            let _audit = consume("audit").await;
            report(format!("{role}|audit|received")).await;
            // Crashes before its write is confirmed: the parent kills it here.
            std::future::pending::<()>().await;
        }
        "crashing-producer" => {
            let options = MasterOptions::new(Lease::Watchdog)
                .branch_wait(Duration::from_secs(1))
                .unwrap();
            let _ = masters
                .with_master_lock(MASTER_KEY, options, |master| async move {
                    master.register_branch("search").await.unwrap();
                    report(format!("{role}|registered")).await;
                    std::future::pending::<()>().await;
                })
                .await;
        }
        other => panic!("unknown role {other}"),
    }
}
