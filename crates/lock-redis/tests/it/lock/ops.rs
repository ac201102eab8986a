//! The operators' API: `status`, `list` and `force_release` against a real redis-server.

use crate::common;

use std::time::Duration;

use common::{SLACK, WATCHDOG, client, command_calls, delta};
use lock_core::lock::{DistributedLock, Lease, LostReason, ReleaseOutcome};
use lock_redis::lock::{ForceReleased, LockState};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_free_held_released_and_queued_keys_apart() {
    let (redis, [holder, ops]) = common::server_with().await;

    let free = ops.status("ops-status").await.unwrap();
    assert_eq!(free.state, LockState::Free);
    assert_eq!(free.redis_key, "lock:{ops-status}");
    assert_eq!((free.hold_count(), free.fair_waiters), (0, 0));

    let handle = common::hold(&holder, "ops-status", Duration::from_secs(30)).await;
    let held = ops.status("ops-status").await.unwrap();
    match &held.state {
        LockState::Held {
            holder,
            instance_id,
            fencing_token,
            ttl,
            kept_for_minimum_hold,
        } => {
            assert!(!kept_for_minimum_hold);
            assert_eq!(holder, handle.owner());
            assert_eq!(instance_id, "test-pod");
            assert_eq!(*fencing_token, handle.fencing_token());
            let ttl = ttl.expect("a held key has a TTL");
            assert!(
                ttl > Duration::from_secs(20) && ttl <= Duration::from_secs(30),
                "{ttl:?}"
            );
        }
        other => panic!("expected held, got {other:?}"),
    }
    assert_eq!(held.hold_count(), 1);

    // A fair waiter on another client queues in Redis and subscribes to the release channel.
    let waiter = client(&redis).await;
    let fair = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(60)).fair();
        let handle = waiter.acquire_lease("ops-status", options).await;
        (waiter, handle)
    });
    let queued = common::eventually(SLACK, || async {
        let status = ops.status("ops-status").await.unwrap();
        status.fair_waiters == 1 && status.subscribed_clients == 1
    })
    .await;
    assert!(queued, "{:?}", ops.status("ops-status").await.unwrap());

    let token = handle.fencing_token();
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
    let (_waiter, granted) = tokio::time::timeout(SLACK, fair).await.unwrap().unwrap();
    let granted = granted.unwrap();
    let granted_owner = granted.owner().to_owned();
    assert_eq!(granted.release().await.unwrap(), ReleaseOutcome::Released);
    let released = ops.status("ops-status").await.unwrap();
    match &released.state {
        LockState::Released {
            released_by,
            fencing_token,
            ttl,
        } => {
            assert_eq!(*released_by, granted_owner);
            assert!(*fencing_token > token);
            assert!(ttl.is_some_and(|t| t <= Duration::from_secs(10)));
        }
        other => panic!("expected the tombstone, got {other:?}"),
    }
    assert_eq!((released.fair_waiters, released.hold_count()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finds_held_locks_by_pattern_with_scan_never_keys() {
    let (redis, [holder, ops]) = common::server_with().await;
    let lease = Lease::Fixed(Duration::from_secs(30));
    let mut handles = Vec::new();
    for name in [
        "bill-run:2026-10",
        "bill-run:2026-11",
        "reaper",
        "odd{name}",
    ] {
        handles.push(holder.acquire(name, lease).await.unwrap());
    }
    // A released lock (tombstone) and a fair queue key are not listed.
    let released = holder.acquire("bill-run:2026-09", lease).await.unwrap();
    assert_eq!(released.release().await.unwrap(), ReleaseOutcome::Released);
    let before = command_calls(&redis).await;

    let mut bills: Vec<String> = ops
        .list(Some("bill-run:*"), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    bills.sort();
    assert_eq!(bills, ["bill-run:2026-10", "bill-run:2026-11"]);

    let all = ops.list(None, 100).await.unwrap();
    let mut names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "bill-run:2026-10",
            "bill-run:2026-11",
            "odd{name}",
            "reaper"
        ]
    );
    assert!(all.iter().all(|s| s.is_held()));
    assert_eq!(ops.list(None, 2).await.unwrap().len(), 2);
    assert!(ops.list(None, 0).await.unwrap().is_empty());

    let after = command_calls(&redis).await;
    assert!(delta(&before, &after, "scan") >= 3, "{after:?}");
    assert_eq!(delta(&before, &after, "keys"), 0, "list used KEYS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_frees_the_lock_wakes_a_waiter_and_the_holder_loses_its_lease() {
    let (redis, [holder, ops]) = common::server_with().await;
    let handle = holder.acquire("ops-force", Lease::Watchdog).await.unwrap();
    let token = handle.fencing_token();

    // A waiter on another client, waiting much longer than the watchdog would keep the lease.
    let waiter = client(&redis).await;
    let waiting = tokio::spawn(async move {
        let options = common::fixed_waiting(Duration::from_secs(30), Duration::from_secs(120));
        let handle = waiter.acquire_lease("ops-force", options).await;
        (waiter, handle, Instant::now())
    });
    assert!(
        common::eventually(SLACK, || async {
            ops.status("ops-force").await.unwrap().subscribed_clients == 1
        })
        .await,
        "the waiter never subscribed"
    );

    let forced_at = Instant::now();
    match ops.force_release("ops-force").await.unwrap() {
        ForceReleased::Released {
            holder: owner,
            fencing_token,
            notified_clients,
        } => {
            assert_eq!(owner, handle.owner());
            assert_eq!(fencing_token, token);
            assert_eq!(notified_clients, 1);
        }
        other => panic!("expected Released, got {other:?}"),
    }
    // Woken by the release message, not by the TTL: the holder's watchdog keeps renewing until
    // it notices, so only the message can hand the key over this fast.
    let (_waiter, granted, granted_at) =
        tokio::time::timeout(SLACK, waiting).await.unwrap().unwrap();
    let granted = granted.expect("the waiter was not granted the lock");
    assert!(
        granted_at - forced_at < Duration::from_secs(2),
        "woken after {:?}",
        granted_at - forced_at
    );
    let granted_token = granted.fencing_token();
    assert!(granted_token > token, "fencing tokens went back");

    let reason = tokio::time::timeout(WATCHDOG + SLACK, handle.lost())
        .await
        .expect("the old holder never learnt it lost the lease");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(!handle.is_held());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::NotHeld);
    // The old holder's release did not free the new grant.
    assert!(ops.status("ops-force").await.unwrap().is_held());
    assert_eq!(granted.release().await.unwrap(), ReleaseOutcome::Released);

    // Nothing held: nothing to force, nothing changed.
    assert_eq!(
        ops.force_release("ops-force").await.unwrap(),
        ForceReleased::NotHeld
    );
    let next = holder.acquire("ops-force", Lease::Watchdog).await.unwrap();
    assert!(next.fencing_token() > granted_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_hands_a_fair_lock_to_the_first_fair_waiter() {
    let (redis, [holder, ops]) = common::server_with().await;
    let _handle = holder.acquire("ops-fair", Lease::Watchdog).await.unwrap();
    let waiter = client(&redis).await;
    let fair = tokio::spawn(async move {
        let options = common::watchdog_waiting(Duration::from_secs(120)).fair();
        let handle = waiter.acquire_lease("ops-fair", options).await;
        (waiter, handle)
    });
    assert!(
        common::eventually(SLACK, || async {
            let s = ops.status("ops-fair").await.unwrap();
            s.fair_waiters == 1 && s.subscribed_clients == 1
        })
        .await
    );
    assert!(matches!(
        ops.force_release("ops-fair").await.unwrap(),
        ForceReleased::Released { .. }
    ));
    let (_waiter, granted) = tokio::time::timeout(SLACK, fair).await.unwrap().unwrap();
    assert!(granted.unwrap().is_held());
    assert_eq!(ops.status("ops-fair").await.unwrap().fair_waiters, 0);
}

/// An operator is shown holder A and confirms; meanwhile A released and B took the lock. The
/// release of A's grant must leave B's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_of_a_grant_leaves_a_lock_that_changed_hands_alone() {
    let (_redis, [pod_a, pod_b, ops]) = common::server_with().await;
    let lease = Lease::Fixed(Duration::from_secs(30));
    let first = pod_a.acquire("ops-grant", lease).await.unwrap();
    let shown = first.fencing_token();
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let second = pod_b.acquire("ops-grant", lease).await.unwrap();

    match ops.force_release_grant("ops-grant", shown).await.unwrap() {
        ForceReleased::HolderChanged {
            holder,
            fencing_token,
        } => {
            assert_eq!(holder, second.owner());
            assert_eq!(fencing_token, second.fencing_token());
        }
        other => panic!("expected HolderChanged, got {other:?}"),
    }
    assert!(second.is_held());
    match ops.status("ops-grant").await.unwrap().state {
        LockState::Held { holder, .. } => assert_eq!(holder, second.owner()),
        other => panic!("B's grant was touched: {other:?}"),
    }

    // The grant that is held now is released.
    match ops
        .force_release_grant("ops-grant", second.fencing_token())
        .await
        .unwrap()
    {
        ForceReleased::Released { holder, .. } => assert_eq!(holder, second.owner()),
        other => panic!("expected Released, got {other:?}"),
    }
    assert_eq!(
        ops.force_release_grant("ops-grant", second.fencing_token())
            .await
            .unwrap(),
        ForceReleased::NotHeld
    );
    assert_eq!(second.release().await.unwrap(), ReleaseOutcome::NotHeld);
}
