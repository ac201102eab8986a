//! Master/sub locks on a real redis-server: the conformance suite (each check on a server of
//! its own), the key layout and TTLs, the scripts re-sent as fred re-sends them after a
//! reconnect, a wait that costs a fixed number of reads however long it lasts (no polling),
//! and a registration that fails open while Redis stops answering.

use crate::common;

use std::time::Duration;

use common::{COMMAND_TIMEOUT, SLACK, command_calls, delta, eventually, server};
use lock_core::branches::conformance::BranchesFactory;
use lock_core::branches::{
    BranchRelease, Branches, BranchesOutcome, MasterLocks, MasterOptions, SubKey,
};
use lock_core::lock::{DistributedLock, Lease};
use lock_redis::branches::RedisBranches;
use lock_redis::scripts::{
    BRANCH_OPEN_SCRIPT, BRANCH_REGISTER_SCRIPT, BRANCH_RELEASE_SCRIPT, BRANCH_SEAL_SCRIPT,
};
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use tokio::time::Instant;
use tracing::instrument::WithSubscriber;

/// Master locks on a new client of `redis`: a lock and the branches on its connections.
pub(crate) async fn masters(redis: &RedisServer) -> (MasterLocks, RedisBranches) {
    common::master_locks(common::client(redis).await).await
}

/// The keys of master key `master_key`'s records on `redis`, by the documented layout.
pub(crate) async fn record_keys(redis: &RedisServer, master_key: &str) -> Vec<String> {
    let pattern = format!("lock:branches:{{{master_key}}}:*");
    let keys = redis.cmd(&["KEYS", &pattern]).await.unwrap();
    keys.lines().map(str::to_owned).collect()
}

async fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.cmd(&["PTTL", key]).await.unwrap().parse().unwrap()
}

struct Redis(RedisServer);

#[async_trait::async_trait]
impl BranchesFactory for Redis {
    async fn client(&self) -> MasterLocks {
        masters(&self.0).await.0
    }

    async fn record_ttls(&self, master_key: &str) -> Vec<Option<Duration>> {
        let mut ttls = Vec::new();
        for key in record_keys(&self.0, master_key).await {
            let ttl = pttl(&self.0, &key).await;
            ttls.push(u64::try_from(ttl).ok().map(Duration::from_millis));
        }
        ttls
    }

    /// As the lock's conformance factory: another owner written over the holder's value,
    /// keeping its TTL, so its renewals are refused.
    async fn expire_lock(&self, key: &str) -> bool {
        let key = common::client(&self.0).await.redis_key(key);
        let value = "H|1|conformance-expire|pod/x/1";
        let reply = self.0.cmd(&["SET", &key, value, "XX", "KEEPTTL"]).await;
        reply.unwrap().trim() == "OK"
    }

    fn lease_loss_bound(&self) -> Duration {
        common::WATCHDOG
    }
}

mod conformance {
    use super::{Redis, server};

    lock_core::conformance_tests!(branches, async { Redis(server().await) });
}

/// Every key of a master lives under its hash tag with a TTL of at least the lease, holds the
/// documented fields, and is gone when the master finishes; the lock key is the master's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_follow_the_documented_layout_and_leave_nothing_behind() {
    let redis = server().await;
    let (masters, branches) = masters(&redis).await;
    let lease = Duration::from_secs(20);
    let options = MasterOptions::new(Lease::Fixed(lease))
        .branch_wait(Duration::from_millis(200))
        .unwrap();
    let seen = masters
        .with_master_lock("ticket:{4711}", options, |master| {
            let (redis, branches) = (&redis, branches.clone());
            async move {
                master.register_branch("search").await.unwrap();
                master.register_branch("audit").await.unwrap();
                let key = branches.record_key(master.sub_key());
                let fields = redis.cmd(&["HGETALL", &key]).await.unwrap();
                let ttl = pttl(redis, &key).await;
                (key, fields, ttl, master.invocation())
            }
        })
        .await
        .unwrap();
    let (key, fields, ttl, invocation) = seen.value;
    // Braces in the master key are percent-encoded inside the tag, as for the lock key.
    assert_eq!(
        key,
        format!("lock:branches:{{ticket:%7B4711%7D}}:{invocation}")
    );
    let fields: Vec<&str> = fields.lines().collect();
    let mut pairs: Vec<(&str, &str)> = fields.chunks(2).map(|p| (p[0], p[1])).collect();
    pairs.sort();
    assert_eq!(
        pairs,
        [("b:audit", "0"), ("b:search", "0"), ("state", "open")]
    );
    // At least the lease (less what passed since the grant), and not much more.
    let lease_ms = lease.as_millis() as i64;
    assert!(
        (lease_ms - 2_000..=lease_ms + 3_000).contains(&ttl),
        "PTTL {ttl}"
    );
    assert_eq!(seen.branches.missing(), ["audit", "search"]);
    assert_eq!(redis.cmd(&["EXISTS", &key]).await.unwrap(), "0");
    let left = redis.cmd(&["KEYS", "lock:branches:*"]).await.unwrap();
    assert_eq!(left, "", "records left behind");
    // The invocation id is the lock grant's fencing token: the next grant's is greater.
    let lock = common::client(&redis).await;
    let next = lock
        .acquire("ticket:{4711}", Lease::Watchdog)
        .await
        .unwrap();
    assert!(next.fencing_token() > invocation);
}

/// Re-sent copies of each script (fred re-sends in-flight commands after a reconnect) change
/// nothing: a branch counts once, a release once, a seal stays sealed, an open keeps the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_re_sent_after_a_reconnect_change_nothing() {
    let redis = server().await;
    let (_, branches) = masters(&redis).await;
    let sub_key = SubKey::new("resend", 9);
    let (key, channel) = (
        branches.record_key(&sub_key),
        branches.release_channel(&sub_key),
    );
    let resend = |script: &'static str, args: Vec<String>| {
        let (redis, key) = (&redis, key.clone());
        async move {
            let sha = redis.cmd(&["SCRIPT", "LOAD", script]).await.unwrap();
            let mut command = vec!["EVALSHA", sha.as_str(), "1", key.as_str()];
            command.extend(args.iter().map(String::as_str));
            redis.cmd(&command).await.unwrap()
        }
    };
    let ttl = Duration::from_secs(30);
    branches.open(&sub_key, ttl).await.unwrap();
    assert_eq!(resend(BRANCH_OPEN_SCRIPT, vec!["30000".into()]).await, "0");
    branches.register(&sub_key, "search", ttl).await.unwrap();
    let again = resend(
        BRANCH_REGISTER_SCRIPT,
        vec!["search".into(), "30000".into()],
    )
    .await;
    assert_eq!(again, "already_registered");
    branches.register(&sub_key, "audit", ttl).await.unwrap();
    assert_eq!(
        branches.release(&sub_key, "search").await.unwrap(),
        BranchRelease::Released
    );
    let again = resend(
        BRANCH_RELEASE_SCRIPT,
        vec!["search".into(), channel.clone()],
    )
    .await;
    assert_eq!(again, "already_released");
    assert_eq!(
        branches.seal(&sub_key, ttl).await.unwrap(),
        Some(vec!["audit".to_owned()])
    );
    assert_eq!(
        resend(BRANCH_SEAL_SCRIPT, vec!["30000".into()]).await,
        "sealed\naudit"
    );
    let late = resend(BRANCH_REGISTER_SCRIPT, vec!["late".into(), "30000".into()]).await;
    assert_eq!(late, "sealed");
    assert_eq!(
        branches.pending(&sub_key).await.unwrap(),
        Some(vec!["audit".to_owned()])
    );
    // A re-sent open after the clean-up would recreate the record: it does, with its TTL, so
    // it cannot outlive that.
    branches.close(&sub_key).await.unwrap();
    let unknown = resend(BRANCH_RELEASE_SCRIPT, vec!["audit".into(), channel]).await;
    assert_eq!(unknown, "unknown");
    assert_eq!(redis.cmd(&["EXISTS", &key]).await.unwrap(), "0");
}

/// A master waiting two seconds for a branch nobody releases reads a fixed number of times —
/// the seal, one read behind its subscription, one when the subscription is confirmed, one at
/// the bound — however long the wait: woken by events, not a timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_costs_a_fixed_number_of_reads_not_one_per_interval() {
    let redis = server().await;
    let (masters, _) = masters(&redis).await;
    let wait = Duration::from_secs(2);
    let before = command_calls(&redis).await;
    let outcome = masters
        .with_master_lock(
            "no-polling",
            // A fixed lease: no watchdog renewals among the calls counted.
            MasterOptions::new(Lease::Fixed(Duration::from_secs(60)))
                .branch_wait(wait)
                .unwrap(),
            |master| async move { master.register_branch("never").await.unwrap() },
        )
        .await
        .unwrap();
    let after = command_calls(&redis).await;
    assert!(outcome.waited >= wait);
    assert_eq!(outcome.branches.missing(), ["never"]);
    // The lock's acquire and release; open, register, seal, and three reads (8) — one or two
    // more if the first call of a script raced its preload and was reloaded (NOSCRIPT). A poll
    // every 100 ms would have made twenty more.
    let scripts = delta(&before, &after, "evalsha");
    assert!((8..=10).contains(&scripts), "{scripts} EVALSHA calls");
    assert_eq!(delta(&before, &after, "ssubscribe"), 1);
}

/// A master wakes on the release message: a branch released by another client during the
/// wait ends it within moments, far before the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_the_wait_wakes_the_master_at_once() {
    let redis = server().await;
    let (masters, branches) = masters(&redis).await;
    let (consumer, _) = self::masters(&redis).await;
    let wait = Duration::from_secs(60);
    let (master, token) = common::master_with_branch(masters, "wake", "search", wait).await;
    let channel = branches.release_channel(token.sub_key());
    assert!(
        common::one_subscriber(&redis, &channel).await,
        "the master never subscribed to {channel}"
    );
    let released_at = Instant::now();
    assert_eq!(
        consumer.release_branch(&token).await.unwrap(),
        BranchRelease::Released
    );
    let outcome = tokio::time::timeout(SLACK, master)
        .await
        .expect("the release did not wake the master")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert!(released_at.elapsed() < SLACK);
    // Its subscription is taken down with it.
    let gone = eventually(SLACK, || async {
        redis
            .cmd(&["PUBSUB", "SHARDNUMSUB", &channel])
            .await
            .is_ok_and(|r| r == format!("{channel}\n0"))
    })
    .await;
    assert!(gone, "the master's subscription outlived it");
}

/// A fixed-lease master whose branch never comes back stops waiting before its lease ends: the
/// last read, the clean-up and the release happen while Redis still holds the key, so the key
/// is free at once and no line claims that another owner may have run concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_timeout_releases_inside_the_lease_without_an_overrun_warning() {
    let redis = server().await;
    let (masters, _) = masters(&redis).await;
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::DEBUG);
    let lease = Duration::from_secs(3);
    let started = Instant::now();
    let outcome = masters
        .with_master_lock("fixed-timeout", Lease::Fixed(lease), |master| async move {
            master.register_branch("search").await.unwrap();
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        outcome.branches,
        BranchesOutcome::TimedOut {
            missing: vec!["search".into()]
        }
    );
    assert!(
        took < lease,
        "the master returned after its lease: {took:?}"
    );
    let text = logs.text();
    assert!(
        !text.contains("another owner may have run concurrently"),
        "{text}"
    );
    assert!(
        !text.contains("the lease ended"),
        "released while held: {text}"
    );
    assert!(
        text.contains("branch wait ended with branches not released"),
        "{text}"
    );
    let (other, _) = self::masters(&redis).await;
    let next = other.lock().try_acquire("fixed-timeout", Lease::Watchdog);
    assert!(next.await.is_ok(), "the key was not released");
    assert_eq!(redis.cmd(&["KEYS", "lock:branches:*"]).await.unwrap(), "");
}

/// Redis stops answering mid-block: the registration times out and fails open (an unregistered
/// token, the branch runs); once Redis answers again the consumer releases the token all the
/// same — whether or not the registration arrived late, the master then finds nothing pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_redis_does_not_answer_fails_open() {
    let redis = server().await;
    let (masters, _) = masters(&redis).await;
    let (consumer, _) = self::masters(&redis).await;
    let outcome = masters
        .with_master_lock(
            "paused",
            MasterOptions::new(Lease::Fixed(Duration::from_secs(60)))
                .branch_wait(Duration::from_secs(10))
                .unwrap(),
            |master| {
                let redis = &redis;
                async move {
                    redis.pause().unwrap();
                    let started = Instant::now();
                    let token = master.register_branch("search").await.unwrap();
                    let took = started.elapsed();
                    redis.resume().unwrap();
                    let released = consumer.release_branch(&token).await.unwrap();
                    (token, took, released)
                }
            },
        )
        .await
        .unwrap();
    let (token, took, released) = outcome.value;
    assert!(!token.is_registered(), "{token}");
    assert!(took < COMMAND_TIMEOUT + SLACK, "registering took {took:?}");
    assert!(
        matches!(
            released,
            BranchRelease::Released | BranchRelease::NotRegistered
        ),
        "{released:?}"
    );
    assert_eq!(outcome.unregistered, ["search"]);
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert_eq!(redis.cmd(&["KEYS", "lock:branches:*"]).await.unwrap(), "");
}

/// Redis down when a master starts: the lock fails closed, and so does the master — its block
/// does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_without_redis_fails_closed() {
    let mut redis = server().await;
    let (masters, _) = masters(&redis).await;
    redis.kill().await.unwrap();
    let error = masters
        .with_master_lock("down", Lease::Watchdog, |_| async {
            unreachable!("the block runs only under the lock")
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "BRANCHES_MASTER_LOCK_FAILED");
    assert_eq!(error.details()["reason"], "backend_unavailable");
    assert_eq!(error.http_status(), 503);
    let lock: &dyn DistributedLock = &**masters.lock();
    assert!(lock.namespace().starts_with("redis://127.0.0.1:"));
}
