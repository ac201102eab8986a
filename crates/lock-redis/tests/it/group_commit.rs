//! Group commit: the acquisitions and releases a client makes while its script calls are in
//! flight wait and go to Redis together. Redis is paused (SIGSTOP) while they are made, and each
//! test makes its first calls one at a time, each once the one before was sent, so it knows
//! exactly which calls went alone, which groups are in flight, and which calls wait — whatever
//! the machine's speed.

use crate::common;

use std::sync::Mutex;
use std::time::Duration;

use common::{SLACK, command_calls, delta, eventually, redis_failure, server};
use lock_core::{AcquireOptions, DistributedLock, Lease, LockError, LockHandle, ReleaseOutcome};
use lock_redis::{RedisFailure, RedisLock};
use lock_testkit::{FaultProxy, RedisServer, TrapAction};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(60);

/// The calls to one slot that go alone when nothing waits and no group is in flight.
const ALONE: usize = 2;
/// The groups to one slot in flight at once.
const GROUPS: usize = 2;
/// Calls sent before Redis answers any: [`ALONE`] alone, then [`GROUPS`] groups of one each
/// when made one at a time. The calls made after them wait, and leave as one group when Redis
/// answers: `n` calls take `SENT_FIRST + 1` script calls.
const SENT_FIRST: usize = ALONE + GROUPS;

/// A client whose calls outlast the short pauses of these tests by far.
async fn patient(redis: &RedisServer) -> RedisLock {
    let config = common::config(redis)
        .command_timeout(Duration::from_secs(20))
        .group_commit(true);
    RedisLock::connect(config).await.expect("connect")
}

/// Waits until `lock` has made `calls` calls of the grouped scripts in all.
async fn made(lock: &RedisLock, calls: u64) {
    let reached = eventually(SLACK, || async { lock.script_call_counts().calls >= calls }).await;
    assert!(
        reached,
        "{:?}: not {calls} calls",
        lock.script_call_counts()
    );
}

/// Waits until `lock` has sent `script_calls` script calls in all.
async fn sent(lock: &RedisLock, script_calls: u64) {
    let reached = eventually(SLACK, || async {
        lock.script_call_counts().script_calls >= script_calls
    })
    .await;
    assert!(
        reached,
        "{:?}: not {script_calls} script calls",
        lock.script_call_counts()
    );
}

/// Starts `count` tasks (`start(i)`, each making one call) while `redis` is paused: the first
/// [`SENT_FIRST`] one at a time, each once the one before was sent, then the others together;
/// resumes Redis once all calls are made.
async fn start_paused<T>(
    redis: &RedisServer,
    lock: &RedisLock,
    count: usize,
    start: impl Fn(usize) -> JoinHandle<T>,
) -> Vec<JoinHandle<T>> {
    let before = lock.script_call_counts();
    redis.pause().unwrap();
    let mut tasks = Vec::new();
    for i in 0..count.min(SENT_FIRST) {
        tasks.push(start(i));
        sent(lock, before.script_calls + i as u64 + 1).await;
    }
    tasks.extend((SENT_FIRST..count).map(&start));
    made(lock, before.calls + count as u64).await;
    redis.resume().unwrap();
    tasks
}

fn acquire(lock: &RedisLock, name: &str) -> JoinHandle<Result<LockHandle, LockError>> {
    let (lock, name) = (lock.clone(), name.to_owned());
    tokio::spawn(async move { lock.acquire(&name, Lease::Fixed(LONG)).await })
}

/// Acquires each of `names` with [`start_paused`].
async fn acquire_grouped(
    redis: &RedisServer,
    lock: &RedisLock,
    names: &[&str],
) -> Vec<Result<LockHandle, LockError>> {
    let tasks = start_paused(redis, lock, names.len(), |i| acquire(lock, names[i])).await;
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

async fn value(redis: &RedisServer, key: &str) -> String {
    redis.cmd(&["GET", key]).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_while_the_slot_is_busy_go_as_one_script_call_and_each_gets_its_own_reply() {
    let redis = server().await;
    let lock = patient(&redis).await;
    let names: Vec<String> = (0..8).map(|i| format!("grouped-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let server_before = command_calls(&redis).await;
    let counts_before = lock.script_call_counts();

    let handles: Vec<LockHandle> = acquire_grouped(&redis, &lock, &names)
        .await
        .into_iter()
        .map(|granted| granted.expect("every grouped acquisition is granted"))
        .collect();
    let counts = lock.script_call_counts();
    assert_eq!(counts.calls - counts_before.calls, 8);
    assert_eq!(
        counts.script_calls - counts_before.script_calls,
        SENT_FIRST as u64 + 1,
        "two alone, two groups of one, the four behind them as one"
    );
    let server_after = command_calls(&redis).await;
    assert_eq!(
        delta(&server_before, &server_after, "evalsha"),
        SENT_FIRST as u64 + 1
    );
    // Each got its own grant: its own key, owner and fencing token.
    for (name, handle) in names.iter().zip(&handles) {
        assert_eq!(handle.key(), *name);
        assert_eq!(
            value(&redis, &lock.redis_key(name)).await,
            format!("H|{}|{}", handle.fencing_token(), handle.owner())
        );
    }

    // Releases group the same way, each owner-checked on its own key.
    let handles = Mutex::new(handles.into_iter().map(Some).collect::<Vec<_>>());
    let released = start_paused(&redis, &lock, names.len(), |i| {
        let handle = handles.lock().unwrap()[i].take().unwrap();
        tokio::spawn(handle.release())
    })
    .await;
    for task in released {
        assert_eq!(task.await.unwrap().unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(
        lock.script_call_counts().script_calls - counts.script_calls,
        SENT_FIRST as u64 + 1
    );
    for name in &names {
        let tombstone = value(&redis, &lock.redis_key(name)).await;
        assert!(tombstone.starts_with("R|"), "{name}: {tombstone}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_one_grouped_call_is_that_calls_alone() {
    let redis = server().await;
    let lock = patient(&redis).await;
    let (hash, text) = (lock.redis_key("a-hash"), lock.redis_key("a-text"));
    redis.cmd(&["HSET", &hash, "field", "value"]).await.unwrap();
    redis.cmd(&["SET", &text, "hello"]).await.unwrap();
    let before = lock.script_call_counts();

    let results = acquire_grouped(
        &redis,
        &lock,
        &[
            "sent-1", "sent-2", "sent-3", "sent-4", "a-hash", "between", "a-text", "last",
        ],
    )
    .await;
    // The two refused acquisitions, in the last group, each hand back a possible grant, as
    // they would alone.
    made(&lock, before.calls + 10).await;
    let script_calls = lock.script_call_counts().script_calls - before.script_calls;
    assert!(
        (6..=7).contains(&script_calls),
        "{script_calls} script calls: 5 for the eight acquisitions, 1 or 2 for the clean-ups"
    );
    let refusal = |i: usize| {
        let error = results[i].as_ref().expect_err("refused");
        redis_failure(error).refusal().map(|r| r.as_str())
    };
    // The same refusals as alone (see redis_errors.rs).
    assert_eq!(refusal(4), Some("wrong_type"));
    assert_eq!(refusal(6), Some("not_a_lock"));
    let RedisFailure::Refused { message, .. } = redis_failure(results[6].as_ref().unwrap_err())
    else {
        unreachable!()
    };
    assert!(
        message.starts_with("LOCKVALUE") && message.contains(&text),
        "{message}"
    );
    for i in [0, 1, 2, 3, 5, 7] {
        let handle = results[i]
            .as_ref()
            .expect("granted, next to the refused ones");
        assert!(handle.is_held());
    }
    assert_eq!(
        redis.cmd(&["HGETALL", &hash]).await.unwrap(),
        "field\nvalue"
    );
    assert_eq!(value(&redis, &text).await, "hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_call_redis_refuses_fails_every_member_with_the_refusal() {
    let redis = server().await;
    let lock = patient(&redis).await;
    redis
        .cmd(&["CONFIG", "SET", "maxmemory", "1"])
        .await
        .unwrap();
    let names: Vec<String> = (0..6).map(|i| format!("oom-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let results = acquire_grouped(&redis, &lock, &names).await;
    redis
        .cmd(&["CONFIG", "SET", "maxmemory", "0"])
        .await
        .unwrap();
    for result in &results {
        let error = result.as_ref().expect_err("refused at maxmemory");
        assert_eq!(
            redis_failure(error).refusal().map(|r| r.as_str()),
            Some("out_of_memory"),
            "{error}"
        );
    }
    for name in &names {
        assert_eq!(
            redis.cmd(&["EXISTS", &lock.redis_key(name)]).await.unwrap(),
            "0"
        );
    }
}

/// Each call keeps its own deadline: one that queued behind a call Redis never answered fails
/// a command timeout after it was made (not after the first), and the possible grants of all of
/// them are handed back once Redis answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_grouped_call_keeps_its_own_deadline_and_its_own_clean_up() {
    let redis = server().await;
    let timeout = Duration::from_secs(1);
    let lock = RedisLock::connect(
        common::config(&redis)
            .command_timeout(timeout)
            .group_commit(true),
    )
    .await
    .unwrap();
    let names: Vec<String> = (0..4).map(|i| format!("deadline-{i}")).collect();
    redis.pause().unwrap();
    let once = |name: &str| {
        let (lock, name) = (lock.clone(), name.to_owned());
        tokio::spawn(async move {
            let made_at = Instant::now();
            let options = AcquireOptions::new(Lease::Fixed(LONG)).wait(Duration::ZERO);
            (lock.acquire_with(&name, options).await, made_at)
        })
    };
    let mut tasks = vec![once(&names[0])];
    made(&lock, 1).await;
    tasks.extend(names[1..].iter().map(|name| once(name)));
    made(&lock, 4).await;
    for task in tasks {
        let (result, made_at) = task.await.unwrap();
        let failed_after = made_at.elapsed();
        let error = result.expect_err("Redis is paused");
        assert!(
            matches!(
                redis_failure(&error),
                RedisFailure::CommandTimeout { .. }
                    | RedisFailure::Timeout { .. }
                    | RedisFailure::Unreachable { .. }
            ),
            "{error:?}"
        );
        assert!(
            failed_after >= timeout && failed_after < timeout + SLACK,
            "failed {failed_after:?} after it was made"
        );
    }
    redis.resume().unwrap();
    // Whatever Redis runs of them now, no grant stays behind.
    let free = eventually(SLACK * 2, || async {
        for name in &names {
            let value = value(&redis, &lock.redis_key(name)).await;
            if value.starts_with("H|") {
                return false;
            }
        }
        true
    })
    .await;
    assert!(free, "a possible grant was not handed back");
}

/// A grouped call whose reply is lost: the proxy forwards it, swallows the reply and closes the
/// connection; fred re-sends it on the new one, and every member finds its own grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_call_whose_reply_is_lost_grants_each_member_once() {
    let redis = server().await;
    let proxy = FaultProxy::start(("127.0.0.1", redis.port()))
        .await
        .unwrap();
    let lock = RedisLock::connect(
        lock_redis::RedisLockConfig::new(proxy.url())
            .command_timeout(Duration::from_secs(10))
            .group_commit(true)
            .instance_id("group-pod"),
    )
    .await
    .unwrap();
    lock.ping().await.unwrap();
    let server_before = command_calls(&redis).await;
    // Only the last group's calls carry the marker.
    let names = [
        "lost-sent-1",
        "lost-sent-2",
        "lost-sent-3",
        "lost-sent-4",
        "lost-grouped-1",
        "lost-grouped-2",
    ];
    proxy.arm_trap(
        b"lost-grouped-2",
        TrapAction::SwallowReplyThenClose(Duration::from_millis(150)),
    );
    let tasks = start_paused(&redis, &lock, names.len(), |i| acquire(&lock, names[i])).await;
    for (name, task) in names.iter().zip(tasks) {
        let handle = task.await.unwrap().expect("granted, once");
        assert_eq!(
            value(&redis, &lock.redis_key(name)).await,
            format!("H|{}|{}", handle.fencing_token(), handle.owner())
        );
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
    assert!(!proxy.trap_armed(), "the trap never fired");
    assert!(
        delta(&server_before, &command_calls(&redis).await, "evalsha") > SENT_FIRST as u64 + 1,
        "the grouped call was not re-sent"
    );
}

/// After `SCRIPT FLUSH` every call of a group, and the group itself, meets `NOSCRIPT`: each
/// member loads the script and calls once more, and is granted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_calls_survive_a_script_flush() {
    let redis = server().await;
    let lock = patient(&redis).await;
    redis.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    let names: Vec<String> = (0..7).map(|i| format!("flushed-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let results = acquire_grouped(&redis, &lock, &names).await;
    for (name, result) in names.iter().zip(results) {
        let handle = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            value(&redis, &lock.redis_key(name)).await,
            format!("H|{}|{}", handle.fencing_token(), handle.owner())
        );
    }
}
