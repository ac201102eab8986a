//! Grants that do not survive a Sentinel failover: the replica is cut off from its master's
//! writes (`cut_off_replica`: it stays reachable by the Sentinels and eligible for promotion, but
//! receives nothing more), a lock is taken on the master, and the master is killed — the replica
//! is promoted without the grant.
//!
//! - `min-replicas = 0`: the grant is reported; its holder learns through `lost()` that the key
//!   is gone, and the next holder's fencing token is higher.
//! - `min-replicas = 1`: grants made while the replica is cut off fail closed
//!   (`replication_unconfirmed`) and are handed back, so no fencing token is ever reported to two
//!   holders, across the whole scenario.
//!
//! Every wait is on an event with a generous deadline; the measured times are printed.

use crate::sentinel_common;

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::Setup;
use lock_core::LockError;
use lock_core::lock::{DistributedLock, Lease, LostReason, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::{RedisSentinel, RedisServer};
use sentinel_common::{
    FAILOVER, GENEROUS, Ledger, LostWatch, WATCHDOG, acquire_until_granted, config, connect,
    describe, eventually, owner_of, token_of, value, wait_for_synced_replica,
};
use tokio::time::Instant;

/// The reason of a failed acquisition.
fn reason(error: &LockError) -> String {
    error.details()["reason"].clone()
}

/// Client settings for `sentinel` that wait for one replica to confirm each grant.
fn strict(sentinel: &RedisSentinel) -> Setup {
    let config = config(sentinel).min_replicas(1);
    config.replica_sync_timeout(Duration::from_millis(500))
}

/// A new replica of `sentinel`'s current master, synced.
/// Waits until `lock`'s client answers: one that was connected to a killed master answers once
/// the Sentinels have sent it to the new one, which on a loaded machine may come after another
/// client's grant there.
async fn answering(lock: &RedisLock) {
    let answered = eventually(FAILOVER, || async { lock.client().ping().await.is_ok() }).await;
    assert!(answered, "the client never reconnected to the new master");
}

async fn new_replica(sentinel: &RedisSentinel) -> RedisServer {
    let fresh = RedisServer::start().await.expect("a new replica starts");
    let port = sentinel.master().port().to_string();
    fresh.cmd(&["REPLICAOF", "127.0.0.1", &port]).await.unwrap();
    let synced = wait_for_synced_replica(sentinel.master()).await;
    assert!(synced, "the new replica never synced");
    fresh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_key_was_not_replicated_learns_it_through_lost() {
    const NAME: &str = "sentinel:lost-in-failover";
    let mut sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let holder = connect(config(&sentinel)).await;
    let other = connect(config(&sentinel)).await;
    let redis_key = holder.redis_key(NAME);

    // The replica hears nothing from here on; the grant exists on the master only.
    sentinel.cut_off_replica().await.expect("cut_off_replica");
    let handle = holder.acquire(NAME, Lease::Watchdog).await.unwrap();
    let lost_token = handle.fencing_token();
    let lost = LostWatch::start(&handle);
    assert!(
        value(sentinel.master(), &redis_key)
            .await
            .contains(handle.owner())
    );
    assert_eq!(value(sentinel.replica(), &redis_key).await, "");

    // The master dies; the Sentinels promote the replica, which never had the key.
    let killed = Instant::now();
    sentinel.kill_master().await.expect("kill_master");
    let failover_took = killed.elapsed();
    assert_eq!(
        value(sentinel.master(), &redis_key).await,
        "",
        "the promoted replica has the key: it was not cut off"
    );

    // Another client takes the lock on the new master; the holder's next renewal (or its local
    // deadline) tells it the lease is gone.
    let (taken, took, failures) =
        acquire_until_granted(&other, NAME, Lease::Watchdog, FAILOVER).await;
    let taken_at = Instant::now();
    let taken_after = taken_at - killed;
    let (lost_at, reason) = match tokio::time::timeout(WATCHDOG + FAILOVER, handle.lost()).await {
        Ok(reason) => (lost.fired().map_or_else(Instant::now, |(at, _)| at), reason),
        Err(_) => panic!(
            "lost() did not fire within {:?} of the failover",
            WATCHDOG + FAILOVER
        ),
    };
    let lost_after = lost_at - killed;
    eprintln!(
        "sentinel key loss: failover settled after {failover_took:?}; another client granted \
         {taken_after:?} after the kill ({took:?} of tries, failures {failures:?}); the holder \
         learned {reason:?} {lost_after:?} after the kill ({})",
        if lost_at <= taken_at {
            format!("{:?} before the new grant", taken_at - lost_at)
        } else {
            format!(
                "{:?} after the new grant: both believed they held it meanwhile",
                lost_at - taken_at
            )
        }
    );
    assert!(
        matches!(reason, LostReason::NotOwner | LostReason::Expired),
        "{reason:?}"
    );
    assert!(
        lost_after <= failover_took + WATCHDOG + FAILOVER,
        "lost() fired only {lost_after:?} after the kill"
    );
    assert!(!handle.is_held());

    // Fencing: the new holder's token is above the lost one (the new master had neither the
    // key nor its tombstone; the token is floored with the server clock, which moved on).
    assert!(
        taken.fencing_token() > lost_token,
        "the token went backwards across the key loss: {lost_token} then {}",
        taken.fencing_token()
    );
    // The lost holder's release does not touch the new holder's lock.
    answering(&holder).await;
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    let stored = value(sentinel.master(), &redis_key).await;
    assert_eq!(owner_of(&stored), Some(taken.owner()), "{stored}");
    assert_eq!(token_of(&stored), Some(taken.fencing_token()));
    assert_eq!(taken.release().await.unwrap(), ReleaseOutcome::Released);
}

/// Tries `name` once with `lock`; a grant is recorded in `ledger` and handed back to the caller.
async fn try_once(
    lock: &RedisLock,
    name: &str,
    ledger: &Ledger,
) -> Result<lock_core::lock::LockHandle, LockError> {
    let result = lock.try_acquire(name, Lease::Watchdog).await;
    if let Ok(handle) = &result {
        ledger.record(handle);
    }
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_min_replicas_a_cut_off_replica_makes_grants_fail_closed_and_tokens_stay_unique() {
    const KEPT: &str = "sentinel:replicated";
    const CUT: [&str; 2] = ["sentinel:unconfirmed-1", "sentinel:unconfirmed-2"];
    let mut sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let a = connect(strict(&sentinel)).await;
    let b = connect(strict(&sentinel)).await;
    let ledger = Ledger::default();

    // Before the cut: a grant is reported only once the replica has it.
    let kept = try_once(&a, KEPT, &ledger).await.expect("granted");
    let kept_key = a.redis_key(KEPT);
    assert!(
        value(sentinel.replica(), &kept_key)
            .await
            .contains(kept.owner()),
        "reported before the replica had it"
    );
    let kept_lost = LostWatch::start(&kept);

    // The replica is cut off: every grant fails closed and is handed back.
    sentinel.cut_off_replica().await.expect("cut_off_replica");
    let mut unconfirmed: BTreeSet<u64> = BTreeSet::new();
    for name in CUT {
        let error = try_once(&b, name, &ledger)
            .await
            .expect_err("granted although no replica acknowledged it");
        let details = error.details();
        assert_eq!(details["reason"], "replication_unconfirmed", "{error}");
        assert_eq!(details["requiredReplicas"], "1");
        assert_eq!(details["acknowledgedReplicas"], "0");
        // The grant the script made on the master, and then its hand-back.
        let key = b.redis_key(name);
        let handed_back = eventually(FAILOVER, || async {
            value(sentinel.master(), &key).await.starts_with("R|")
        })
        .await;
        let stored = value(sentinel.master(), &key).await;
        assert!(
            handed_back,
            "the unconfirmed grant was not handed back: {stored}"
        );
        unconfirmed.extend(token_of(&stored));
        assert_eq!(value(sentinel.replica(), &key).await, "");
    }
    // A held key is still reported held (no grant, no token).
    let error = try_once(&b, KEPT, &ledger).await.unwrap_err();
    assert_eq!(reason(&error), "held_by_another_owner", "{error}");
    assert_eq!(error.details()["holder"], kept.owner());

    // The master dies; the replica, promoted, never saw the unconfirmed grants.
    let killed = Instant::now();
    sentinel.kill_master().await.expect("kill_master");
    let failover_took = killed.elapsed();
    for name in CUT {
        assert_eq!(value(sentinel.master(), &b.redis_key(name)).await, "");
    }

    // The new master has no replica: grants keep failing closed (never granted) until one
    // acknowledges them.
    let mut seen: Vec<String> = Vec::new();
    let until = Instant::now() + FAILOVER;
    loop {
        match try_once(&b, CUT[0], &ledger).await {
            Ok(handle) => panic!(
                "granted token {} on a master without replicas",
                handle.fencing_token()
            ),
            Err(error) => {
                let described = describe(&error);
                if !seen.contains(&described) {
                    seen.push(described);
                }
                if reason(&error) == "replication_unconfirmed" {
                    break;
                }
            }
        }
        assert!(
            Instant::now() < until,
            "no replication_unconfirmed after the failover; saw {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A new replica joins the promoted master: grants resume.
    let fresh = new_replica(&sentinel).await;
    let replicated_at = Instant::now();
    let mut granted = Vec::new();
    for name in CUT {
        let (handle, _, failures) =
            acquire_until_granted(&b, name, Lease::Watchdog, FAILOVER).await;
        ledger.record(&handle);
        assert!(
            !unconfirmed.contains(&handle.fencing_token()),
            "token {} was already made (unconfirmed) before the failover",
            handle.fencing_token()
        );
        assert!(
            value(&fresh, &b.redis_key(name))
                .await
                .contains(handle.owner()),
            "reported before the new replica had it (failures {failures:?})"
        );
        granted.push(handle);
    }
    eprintln!(
        "sentinel min-replicas=1: failover settled after {failover_took:?}; grants failed \
         closed with {seen:?} until a replica joined, then resumed within {:?}",
        replicated_at.elapsed()
    );

    // The lock granted before the cut: its holder kept it (its renewals reached the new master
    // in time) or was told through lost() (the promoted copy, last renewed before the cut,
    // expired first). It gives it back; the next grant of it has a higher token.
    let kept_token = kept.fencing_token();
    let lost_reason = kept_lost.fired();
    let outcome = kept.release().await.unwrap();
    eprintln!(
        "sentinel min-replicas=1: the lock granted before the cut was {}",
        match lost_reason {
            Some((at, reason)) => format!(
                "lost ({reason:?}) {:?} after the kill",
                at.saturating_duration_since(killed)
            ),
            None => format!("kept across the failover (release: {outcome:?})"),
        }
    );
    if lost_reason.is_some() {
        assert_eq!(outcome, ReleaseOutcome::NotHeld);
    }
    let (next, _, failures) = acquire_until_granted(&b, KEPT, Lease::Watchdog, GENEROUS).await;
    ledger.record(&next);
    assert!(
        next.fencing_token() > kept_token,
        "{kept_token} then {} (failures {failures:?})",
        next.fencing_token()
    );

    ledger.assert_tokens_unique_and_increasing();
    let grants = ledger.grants();
    assert_eq!(grants.len(), 1 + CUT.len() + 1, "{grants:?}");
    for grant in &grants {
        assert!(!unconfirmed.contains(&grant.token), "{grant:?}");
    }
    for handle in granted {
        assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
}

/// With `min-replicas`, a watchdog renewal counts only once a replica has it too: a holder whose
/// renewals reach only a master cut off from its replica keeps its last replicated deadline, so
/// `lost()` fires (`Expired`) before the replica's copy of the key expires. When the master then
/// dies and the promoted replica has no key, the next holder is granted only after the first
/// one's `is_held()` turned false — never two holders at once — and with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_min_replicas_a_holder_whose_renewals_are_not_replicated_is_told_before_its_copy_expires()
 {
    const NAME: &str = "sentinel:renewed-on-the-master-only";
    let mut sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let a = connect(strict(&sentinel)).await;
    let b = connect(strict(&sentinel)).await;
    let ledger = Ledger::default();
    let redis_key = a.redis_key(NAME);

    // The replica's copy expires within the ten down-after periods (10 s) a cut-off replica
    // stays eligible for promotion.
    let held = try_once(&a, NAME, &ledger).await.expect("granted");
    let held_token = held.fencing_token();
    let lost = LostWatch::start(&held);
    sentinel.cut_off_replica().await.expect("cut_off_replica");
    let cut = Instant::now();
    let expired_on_replica = eventually(WATCHDOG + FAILOVER, || async {
        value(sentinel.replica(), &redis_key).await.is_empty()
    })
    .await;
    assert!(expired_on_replica, "the replica's copy never expired");
    // The master still has the key (renewed there), but the holder no longer relies on it.
    assert!(
        value(sentinel.master(), &redis_key)
            .await
            .contains(held.owner())
    );
    assert!(
        !held.is_held(),
        "the holder still believes it holds a lease its replica's copy no longer has"
    );
    let reason = tokio::time::timeout(FAILOVER, held.lost())
        .await
        .expect("lost() never fired");
    assert_eq!(reason, LostReason::Expired);
    eprintln!(
        "sentinel renewals: the holder was told {:?} after the cut; the replica's copy had \
         expired by {:?}",
        lost.fired()
            .map(|(at, _)| at.saturating_duration_since(cut)),
        cut.elapsed()
    );

    let killed = Instant::now();
    sentinel.kill_master().await.expect("kill_master");
    let failover_took = killed.elapsed();
    assert_eq!(value(sentinel.master(), &redis_key).await, "");
    let _fresh = new_replica(&sentinel).await;
    let (next, _, failures) = acquire_until_granted(&b, NAME, Lease::Watchdog, FAILOVER).await;
    assert!(!held.is_held(), "two holders at once");
    ledger.record(&next);
    eprintln!(
        "sentinel renewals: failover settled after {failover_took:?}; regranted (confirmed by a \
         new replica) {:?} after the kill (failures {failures:?})",
        killed.elapsed()
    );
    assert!(
        next.fencing_token() > held_token,
        "{held_token} then {}",
        next.fencing_token()
    );
    ledger.assert_tokens_unique_and_increasing();
    answering(&a).await;
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
}
