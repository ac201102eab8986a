//! Owner tokens against a real redis-server: one per acquisition, so that a stale, retried
//! release of an earlier acquisition — even by the same client — never frees a newer one; unique
//! across clients of one host sharing an instance id; and readable (the instance id) wherever
//! on-call sees a holder.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{SLACK, command_calls, config, delta, eventually, server};
use lock_core::lock::{DistributedLock, Lease, LostReason, ReleaseOutcome};
use lock_redis::limits::TOMBSTONE_TTL;
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;

/// Re-sends `owner`'s release of lock `name` exactly as the client sends it (same script, same
/// arguments), as a retry after a lost reply or a reconnect would. Returns the script's reply.
async fn replay_release(redis: &RedisServer, lock: &RedisLock, name: &str, owner: &str) -> String {
    let sha = redis
        .cmd(&["SCRIPT", "LOAD", lock_redis::scripts::RELEASE_SCRIPT])
        .await
        .unwrap();
    redis
        .cmd(&[
            "EVALSHA",
            &sha,
            "1",
            &lock.redis_key(name),
            owner,
            &lock.release_channel(name),
            &TOMBSTONE_TTL.as_millis().to_string(),
        ])
        .await
        .unwrap()
}

async fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.cmd(&["PTTL", key]).await.unwrap().parse().unwrap()
}

/// The same client acquires, releases and acquires again; a replay of the first acquisition's
/// release must leave the second grant alone — value, TTL, no release message — whether the
/// first owner is recorded as the grant's previous owner (the replay then reports the first
/// outcome, `1`, idempotently), is two grants back, or let its lease expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_retried_release_of_the_same_client_never_frees_its_newer_grant() {
    const NAME: &str = "owners:stale-release";
    let (redis, [lock, other]) = common::server_with().await;
    let key = lock.redis_key(NAME);
    let lease = Lease::Fixed(Duration::from_secs(60));

    let first = lock.acquire(NAME, lease).await.unwrap();
    let owner1 = first.owner().to_owned();
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let second = lock.acquire(NAME, lease).await.unwrap();
    let owner2 = second.owner().to_owned();
    assert_ne!(owner1, owner2, "one client reused an owner token");
    let held = redis.cmd(&["GET", &key]).await.unwrap();
    assert!(
        held.starts_with(&format!("H|{}|{owner2}", second.fencing_token())),
        "{held}"
    );

    // 1. owner1 is the previous owner recorded in the grant: the replay reports "released"
    //    (its release did happen) and touches nothing.
    let before = command_calls(&redis).await;
    let reply = replay_release(&redis, &lock, NAME, &owner1).await;
    let after = command_calls(&redis).await;
    assert_eq!(reply, "1", "the replay does not report the first outcome");
    assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), held);
    assert!(pttl(&redis, &key).await > 50_000, "the grant's TTL changed");
    assert_eq!(
        delta(&before, &after, "spublish"),
        0,
        "the replay published"
    );
    assert!(second.is_held());
    let err = other.try_acquire(NAME, lease).await.unwrap_err();
    assert_eq!(err.details()["holder"], owner2, "{err}");

    // 2. Two grants back: owner1 is nowhere in the value; the replay reports 0.
    assert_eq!(second.release().await.unwrap(), ReleaseOutcome::Released);
    let third = lock.acquire(NAME, lease).await.unwrap();
    let owner3 = third.owner().to_owned();
    assert!(owner3 != owner1 && owner3 != owner2);
    let held = redis.cmd(&["GET", &key]).await.unwrap();
    assert_eq!(
        held,
        format!("H|{}|{owner3}|{owner2}", third.fencing_token())
    );
    let before = command_calls(&redis).await;
    assert_eq!(replay_release(&redis, &lock, NAME, &owner1).await, "0");
    let after = command_calls(&redis).await;
    assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), held);
    assert!(pttl(&redis, &key).await > 50_000, "the grant's TTL changed");
    assert_eq!(
        delta(&before, &after, "spublish"),
        0,
        "the replay published"
    );
    assert!(third.is_held());
    assert_eq!(third.release().await.unwrap(), ReleaseOutcome::Released);

    // 3. The first lease expired (never released), then the same client was granted the key
    //    afresh: the replay of the expired acquisition's release reports 0 and touches nothing.
    let short = common::hold(&lock, NAME, Duration::from_millis(200)).await;
    let owner4 = short.owner().to_owned();
    assert_eq!(
        tokio::time::timeout(SLACK, short.lost()).await.unwrap(),
        LostReason::Expired
    );
    // The tombstone of the third grant may still be there; the expired grant replaced it.
    assert!(
        eventually(SLACK, || async {
            redis.cmd(&["EXISTS", &key]).await.unwrap() == "0"
        })
        .await
    );
    let fresh = lock.acquire(NAME, lease).await.unwrap();
    let held = redis.cmd(&["GET", &key]).await.unwrap();
    assert_eq!(
        held,
        format!("H|{}|{}", fresh.fencing_token(), fresh.owner())
    );
    assert_eq!(replay_release(&redis, &lock, NAME, &owner4).await, "0");
    assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), held);
    assert!(pttl(&redis, &key).await > 50_000, "the grant's TTL changed");
    // The expired handle's own (late) release is just as harmless.
    assert_eq!(short.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), held);
    assert!(fresh.is_held());
    assert_eq!(fresh.release().await.unwrap(), ReleaseOutcome::Released);
}

/// Two clients in one process (same host, same configured instance id) make 10,000
/// acquisitions: every one gets its own owner token, each starting with the instance id, and
/// Redis stores exactly the token the handle reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_tokens_are_unique_per_acquisition_across_clients_sharing_an_instance_id() {
    const ACQUISITIONS: usize = 10_000;
    const TASKS_PER_CLIENT: usize = 8;
    const INSTANCE: &str = "billing-7f9c4-x2x9q";
    let redis = Arc::new(server().await);
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(common::connect(config(&redis).instance_id(INSTANCE)).await);
    }
    let owners: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let per_task = ACQUISITIONS / (2 * TASKS_PER_CLIENT);
    let mut tasks = Vec::new();
    for (c, lock) in clients.iter().enumerate() {
        for t in 0..TASKS_PER_CLIENT {
            let (lock, owners, redis) = (lock.clone(), Arc::clone(&owners), Arc::clone(&redis));
            tasks.push(tokio::spawn(async move {
                // Each task its own key: every grant after the first lands on the task's own
                // tombstone, i.e. on the same client's previous acquisition.
                let name = format!("owners:unique:{c}:{t}");
                for i in 0..per_task {
                    let handle = common::hold(&lock, &name, Duration::from_secs(30)).await;
                    if i % 50 == 0 {
                        let value = redis.cmd(&["GET", &lock.redis_key(&name)]).await.unwrap();
                        let stored = value.split('|').nth(2).unwrap_or_default();
                        assert_eq!(stored, handle.owner(), "{value}");
                    }
                    owners.lock().unwrap().push((c, handle.owner().to_owned()));
                    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let owners = std::mem::take(&mut *owners.lock().unwrap());
    assert_eq!(owners.len(), ACQUISITIONS);
    let unique: HashSet<&str> = owners.iter().map(|(_, o)| o.as_str()).collect();
    assert_eq!(
        unique.len(),
        ACQUISITIONS,
        "{} owner tokens were reused",
        ACQUISITIONS - unique.len()
    );
    let prefix = format!("{INSTANCE}/");
    let mut middles: HashMap<String, HashSet<usize>> = HashMap::new();
    for (c, owner) in &owners {
        let rest = owner
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{owner} does not start with the instance id {INSTANCE}"));
        // <instance-id>/<client id>/<n>
        let (client_id, _) = rest.split_once('/').unwrap_or((rest, ""));
        middles.entry(client_id.to_owned()).or_default().insert(*c);
    }
    assert_eq!(
        middles.len(),
        2,
        "expected one client id per client: {:?}",
        middles.keys().collect::<Vec<_>>()
    );
    assert!(
        middles.values().all(|clients| clients.len() == 1),
        "two clients share a client id: {middles:?}"
    );
}

/// On-call sees the holder's instance id: in `holder` of the failed acquire's details, in its
/// `Display` (and so in the details' `message`), for a waiting and for a one-shot acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_is_named_by_its_instance_id_in_details_and_display() {
    const NAME: &str = "owners:named";
    const INSTANCE: &str = "bill-run-7d4f9-kx2p";
    let redis = server().await;
    let holder = common::connect(config(&redis).instance_id(INSTANCE)).await;
    let other = common::connect(config(&redis).instance_id("reaper-55b6d-qq1m")).await;
    let held = holder.acquire(NAME, Lease::Watchdog).await.unwrap();
    assert!(held.owner().starts_with(&format!("{INSTANCE}/")));
    let waiting = common::watchdog_waiting(Duration::from_millis(300));
    for err in [
        other.try_acquire(NAME, Lease::Watchdog).await.unwrap_err(),
        other.acquire_with(NAME, waiting).await.unwrap_err(),
    ] {
        let details = err.details();
        assert_eq!(details["reason"], "held_by_another_owner", "{err}");
        assert_eq!(details["holder"], held.owner(), "{err}");
        assert!(details["holder"].starts_with(&format!("{INSTANCE}/")));
        let text = err.to_string();
        assert!(
            text.contains(held.owner()),
            "Display lacks the holder: {text}"
        );
        assert!(text.contains(NAME), "Display lacks the lock name: {text}");
        assert!(
            details["message"].contains(INSTANCE),
            "{}",
            details["message"]
        );
        assert!(
            !text.contains("reaper-55b6d"),
            "Display names the caller as the holder: {text}"
        );
    }
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
}
