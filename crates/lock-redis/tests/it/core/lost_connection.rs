//! Every wait on Redis ends within one command timeout of losing Redis: a lock waiter, a fair
//! waiter, an idempotent duplicate and a master waiting for its branches each fail closed when
//! Redis is SIGKILLed mid-wait, instead of sleeping until the holder's TTL or their deadline.
//! A connection that comes back within the command timeout ends no wait, and a release while
//! Redis is known down fails at once.

use crate::common;

use std::time::Duration;

use common::{COMMAND_TIMEOUT, SLACK, client, one_subscriber, redis_failure, server};
use lock_core::branches::BranchesOutcome;
use lock_core::idempotency::{
    Idempotency, IdempotencyError, IdempotencyOptions, IdempotencySettings,
};
use lock_core::lock::{DistributedLock, Lease};
use lock_core::{AcquireFailure, LockError};
use lock_redis::RedisFailure;
use lock_redis::lock::RedisLock;
use lock_testkit::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(60);

/// What a wait may take from the kill to its failure: one command timeout, and slack for a
/// loaded machine — far below the waits' own bounds (a minute).
const BOUND: Duration = Duration::from_secs(1 + 5);

/// Kills `redis` once `waiting` holds, and returns when it did.
async fn kill_when_waiting(redis: &mut RedisServer, channel: &str) -> Instant {
    assert!(
        one_subscriber(redis, channel).await,
        "the waiter never subscribed to {channel}"
    );
    redis.kill().await.unwrap();
    Instant::now()
}

/// The failure a lock waiter ended with: unreachable, not held by another owner.
fn assert_unreachable(error: &LockError) {
    assert!(
        matches!(
            error,
            LockError::AcquisitionFailed {
                reason: AcquireFailure::BackendUnavailable { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        matches!(redis_failure(error), RedisFailure::Unreachable { .. }),
        "{error:?}"
    );
}

async fn ended_within<T>(task: JoinHandle<T>, killed: Instant) -> T {
    let result = tokio::time::timeout(LONG, task)
        .await
        .expect("the wait outlived Redis by a minute")
        .unwrap();
    let after = killed.elapsed();
    assert!(
        after < BOUND,
        "the wait ended {after:?} after Redis was killed; the bound is one command timeout ({COMMAND_TIMEOUT:?}) plus slack"
    );
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waiter_fails_within_a_command_timeout() {
    let (mut redis, [holder, waiter]) = common::server_with().await;
    let _held = common::hold(&holder, "wait", LONG).await;
    let channel = waiter.release_channel("wait");
    let task = tokio::spawn(async move {
        waiter
            .acquire_with("wait", common::fixed_waiting(LONG, LONG))
            .await
    });
    let killed = kill_when_waiting(&mut redis, &channel).await;
    let error = ended_within(task, killed).await.unwrap_err();
    assert_unreachable(&error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_fails_within_a_command_timeout() {
    let (mut redis, [holder, waiter]) = common::server_with().await;
    let _held = common::hold(&holder, "fair", LONG).await;
    let channel = waiter.release_channel("fair");
    let task = tokio::spawn(async move {
        waiter
            .acquire_with("fair", common::fixed_waiting(LONG, LONG).fair())
            .await
    });
    let killed = kill_when_waiting(&mut redis, &channel).await;
    let error = ended_within(task, killed).await.unwrap_err();
    assert_unreachable(&error);
}

async fn idempotency(lock: &RedisLock) -> Idempotency {
    common::idempotency(lock, IdempotencySettings::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_duplicate_fails_within_a_command_timeout() {
    let (mut redis, [owner_lock]) = common::server_with().await;
    let owner = idempotency(&owner_lock).await;
    let (started, mut running) = tokio::sync::mpsc::unbounded_channel();
    let first = tokio::spawn(async move {
        owner
            .execute("order-1", &IdempotencyOptions::new(), || async move {
                started.send(()).unwrap();
                std::future::pending::<Result<u32, IdempotencyError>>().await
            })
            .await
    });
    running.recv().await.unwrap();
    let duplicate_lock = client(&redis).await;
    let store = common::idempotency_store(&duplicate_lock).await;
    let channel = format!("{}:changed", store.record_key("order-1"));
    let duplicate = idempotency(&duplicate_lock).await;
    let options = IdempotencyOptions::new().wait_time(LONG).unwrap();
    let task = tokio::spawn(async move {
        duplicate
            .execute("order-1", &options, || async {
                panic!("the duplicate ran the action");
                #[allow(unreachable_code)]
                Ok::<u32, IdempotencyError>(0)
            })
            .await
    });
    let killed = kill_when_waiting(&mut redis, &channel).await;
    let error = ended_within(task, killed).await.unwrap_err();
    assert!(
        matches!(error, IdempotencyError::Unavailable { .. }),
        "{error:?}"
    );
    first.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_waiting_for_branches_ends_unconfirmed_within_a_command_timeout() {
    let mut redis = server().await;
    // A watchdog lease that outlives the test's wait, so the wait ends by the lost connection
    // rather than by the lease lapsing unconfirmed (which would end it as `LeaseLost`).
    let config = common::config(&redis).watchdog_timeout(Duration::from_secs(30));
    let lock = common::connect(config).await;
    let (masters, branches) = common::master_locks(lock).await;
    let (task, token) = common::master_with_branch(masters, "ticket", "search", LONG).await;
    let channel = branches.release_channel(token.sub_key());
    let killed = kill_when_waiting(&mut redis, &channel).await;
    let outcome = ended_within(task, killed).await.unwrap();
    assert_eq!(
        outcome.branches,
        BranchesOutcome::Unconfirmed {
            missing: vec!["search".to_owned()]
        }
    );
}

/// Redis restarted at once (well within the command timeout): the waiter keeps waiting, and is
/// granted the lock once Redis, back empty, has it free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_back_within_the_command_timeout_ends_no_wait() {
    let (mut redis, [holder]) = common::server_with().await;
    let _held = holder.acquire("blip", Lease::Fixed(LONG)).await.unwrap();
    // A command timeout long enough for a restart and a reconnect on a loaded machine.
    let waiter = common::connect(
        common::config(&redis)
            .command_timeout(SLACK + SLACK)
            .instance_id("patient"),
    )
    .await;
    let channel = waiter.release_channel("blip");
    let task = tokio::spawn(async move {
        waiter
            .acquire_with("blip", common::fixed_waiting(LONG, LONG))
            .await
    });
    kill_when_waiting(&mut redis, &channel).await;
    redis.restart().await.unwrap();
    // Back without persistence: the key is gone, and the resubscription wakes the waiter.
    let handle = tokio::time::timeout(LONG, task)
        .await
        .expect("the waiter never came back")
        .unwrap()
        .expect("a short outage failed the waiter");
    assert!(handle.is_held());
}

/// Once the client knows Redis is gone, branch and idempotency record operations fail at once
/// rather than after the command timeout (here far longer than the bound asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_and_branch_operations_fail_at_once_while_disconnected() {
    let mut redis = server().await;
    let patient = Duration::from_secs(30);
    let lock = common::connect(common::config(&redis).command_timeout(patient)).await;
    let branches = common::branches(&lock).await;
    let store = common::idempotency_store(&lock).await;
    let token: lock_core::branches::BranchToken = "br1|9|r|ticket:7|search".parse().unwrap();
    redis.kill().await.unwrap();
    // The client learns of the loss from its connection's error.
    let known = common::eventually(SLACK, || async {
        lock.try_acquire("probe", Lease::Fixed(LONG)).await.is_err()
    })
    .await;
    assert!(known, "the client never noticed the loss");
    let started = Instant::now();
    let released = lock_core::branches::Branches::release_branch(&branches, &token).await;
    assert!(released.is_err(), "{released:?}");
    let claimed =
        lock_core::idempotency::IdempotencyStore::claim(&store, "order-2", "me", "", LONG, None)
            .await;
    assert!(
        matches!(claimed, Err(IdempotencyError::Unavailable { .. })),
        "{claimed:?}"
    );
    assert!(
        started.elapsed() < SLACK,
        "took {:?}; the command timeout is {patient:?}",
        started.elapsed()
    );
}

/// Every connection of the clients dropped (`CLIENT KILL`) while a duplicate waits: it
/// reconnects within moments, and the duplicate keeps waiting and replays the owner's result.
/// Three rounds, since the drop may land anywhere in the duplicate's wake-up and re-read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_ends_no_duplicate_wait() {
    let (redis, [owner_lock]) = common::server_with().await;
    let owner = idempotency(&owner_lock).await;
    let duplicate_lock = client(&redis).await;
    let duplicate = idempotency(&duplicate_lock).await;
    let store = common::idempotency_store(&duplicate_lock).await;
    for round in 0..3 {
        let key = format!("order-blip-{round}");
        let channel = format!("{}:changed", store.record_key(&key));
        let (started, mut running) = tokio::sync::mpsc::unbounded_channel();
        let (finish, finishing) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (owner, key) = (owner.clone(), key.clone());
            tokio::spawn(async move {
                owner
                    .execute(&key, &IdempotencyOptions::new(), || async move {
                        started.send(()).unwrap();
                        finishing.await.unwrap();
                        Ok::<_, IdempotencyError>(round)
                    })
                    .await
            })
        };
        running.recv().await.unwrap();
        let options = IdempotencyOptions::new().wait_time(LONG).unwrap();
        let waiter = {
            let (duplicate, key) = (duplicate.clone(), key.clone());
            tokio::spawn(async move {
                duplicate
                    .execute(&key, &options, || async {
                        Ok::<_, IdempotencyError>(u32::MAX)
                    })
                    .await
            })
        };
        assert!(one_subscriber(&redis, &channel).await, "never waited");
        for kind in ["normal", "pubsub"] {
            redis.cmd(&["CLIENT", "KILL", "TYPE", kind]).await.unwrap();
        }
        // Back on both connections (the subscription confirmed again), then the owner finishes.
        assert!(one_subscriber(&redis, &channel).await, "never resubscribed");
        finish.send(()).unwrap();
        let _ = first.await.unwrap();
        let replayed = tokio::time::timeout(LONG, waiter)
            .await
            .expect("the duplicate kept waiting")
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: a dropped connection failed the wait: {e}"));
        assert_eq!(replayed.into_inner(), round);
    }
}

/// An owner that loses Redis before storing its result: the write is not confirmed, and the
/// reason says so, not that the call did not run (it did).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_loses_redis_learns_its_result_was_not_confirmed() {
    let (mut redis, [lock]) = common::server_with().await;
    let idempotency = idempotency(&lock).await;
    let begun = idempotency
        .begin::<u32>("order-3", &IdempotencyOptions::new())
        .await
        .unwrap();
    let lock_core::idempotency::Begun::Owner(scope) = begun else {
        panic!("the first call owns the key");
    };
    redis.kill().await.unwrap();
    let Err(IdempotencyError::ResultNotStored { reason, .. }) = scope.complete(&5_u32).await else {
        panic!("stored with Redis gone");
    };
    assert_eq!(reason.kind(), lock_core::idempotency::Unstored::Unconfirmed);
    let said = reason.to_string();
    assert!(!said.contains("did not run"), "{said}");
}

/// A release while Redis is known down (a reconnection attempt failed) fails at once, as an
/// acquisition does, instead of after its command timeout: a lock layer's response is not held
/// up by it. The lease ends at its TTL either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_redis_is_down_fails_at_once() {
    let mut redis = server().await;
    let lock = common::connect(common::config(&redis).command_timeout(LONG)).await;
    let handle = lock.acquire("down", Lease::Fixed(LONG)).await.unwrap();
    redis.kill().await.unwrap();
    let probe = || async {
        let attempt = lock.try_acquire("probe", Lease::Fixed(LONG));
        match tokio::time::timeout(Duration::from_millis(200), attempt).await {
            Ok(Err(error)) => matches!(redis_failure(&error), RedisFailure::Unreachable { .. }),
            _ => false,
        }
    };
    assert!(
        common::eventually(common::GENEROUS, probe).await,
        "never unreachable"
    );
    // Far below the command timeout of a minute.
    let released = tokio::time::timeout(LONG / 3, handle.release())
        .await
        .expect("the release waited for its command timeout");
    let error = released.unwrap_err();
    assert!(
        matches!(error, LockError::ReleaseFailed { .. }),
        "{error:?}"
    );
    assert!(
        matches!(redis_failure(&error), RedisFailure::Unreachable { .. }),
        "{error:?}"
    );
}
