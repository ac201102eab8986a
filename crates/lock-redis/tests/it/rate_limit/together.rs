//! Decisions made together on one redis-server: they share script calls and decide as the
//! same calls made one after another; a refusal or a lost runtime reaches only the calls it
//! concerns, and every caller gets an answer.

use crate::common;

use std::time::Duration;

use common::{command_calls, delta, server};
use lock_core::rate_limit::{
    Basis, Charge, FailurePolicy, Quota, RateLimitStore, RateLimiter, check_all,
};

use super::{client_and_global, limiter, store};

/// Calls made together share `EVALSHA`s, and each is decided as if alone: of 64 charges of one
/// key with a burst of 20, the admitted count down from 19 to 0, and the state holds 20
/// charges; each call of 32 clients' checks with a global limit of 8 is all or none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_together_share_a_script_call() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let api = limiter(&store, "api", "20/1h", FailurePolicy::FailClosed);
    let per_client = limiter(&store, "per-client", "1/1h", FailurePolicy::FailClosed);
    let global = limiter(&store, "global", "8/1h", FailurePolicy::FailClosed);
    let before = command_calls(&redis).await;
    let singles = futures::future::join_all((0..64).map(|_| api.try_acquire("hot", 1)));
    let clients: Vec<String> = (0..32).map(|i| format!("client-{i}")).collect();
    let checks = futures::future::join_all(clients.iter().map(|client| {
        let parts = client_and_global(&per_client, &global, client);
        async move { (client, check_all(&parts).await.unwrap()) }
    }));
    let (singles, checks) = futures::join!(singles, checks);
    let after = command_calls(&redis).await;
    let mut remaining: Vec<u32> = singles
        .into_iter()
        .map(Result::unwrap)
        .filter(|d| d.allowed)
        .map(|d| d.remaining)
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..20).collect::<Vec<_>>());
    assert_eq!(api.try_acquire("hot", 0).await.unwrap().remaining, 0);
    let admitted: Vec<&String> = checks
        .iter()
        .filter(|(_, d)| d.allowed)
        .map(|(client, _)| *client)
        .collect();
    assert_eq!(admitted.len(), 8, "{checks:?}");
    for client in &clients {
        let charged = per_client.try_acquire(client, 0).await.unwrap().remaining == 0;
        assert_eq!(charged, admitted.contains(&client), "{client}");
    }
    let evalsha = delta(&before, &after, "evalsha");
    assert!((1..96).contains(&evalsha), "{evalsha} EVALSHA for 96 calls");
}

/// A quota whose burst spans under 10 ms would see checks decided at one instant as a burst and
/// deny ones it admits when they come a round trip apart (10,000/s with a burst of 1 admitted 8 %
/// from 16 tasks): its checks are sent one script call each, however many are in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_with_a_burst_of_a_few_round_trips_is_decided_check_by_check() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let quota: Quota = "10000/1s".parse().unwrap();
    let tight = RateLimiter::new(
        store.clone(),
        "tight",
        quota.with_burst(1).unwrap(),
        FailurePolicy::FailClosed,
    )
    .unwrap();
    let before = command_calls(&redis).await;
    futures::future::join_all((0..16).map(|_| tight.try_acquire("hot", 1))).await;
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "evalsha"), 16);
}

/// A key holding another type fails its own call, alone or together; the calls decided with it
/// are still counted. (On a current-thread runtime the collection's task runs once the join has
/// polled all three.)
#[tokio::test(flavor = "current_thread")]
async fn a_key_of_another_type_fails_only_its_own_call() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let api = limiter(&store, "api", "100/1h", FailurePolicy::FailOpen);
    assert_eq!(
        api.try_acquire("warm", 1).await.unwrap().basis,
        Basis::Counted
    );
    let bad = store.state_key("api", "bad");
    redis.cmd(&["HSET", &bad, "f", "v"]).await.unwrap();
    assert_eq!(
        api.try_acquire("bad", 1).await.unwrap().basis,
        Basis::FailedOpen
    );
    let (a, bad, b) = tokio::join!(
        api.try_acquire("a", 1),
        api.try_acquire("bad", 1),
        api.try_acquire("b", 1),
    );
    let (a, bad, b) = (a.unwrap(), bad.unwrap(), b.unwrap());
    assert_eq!(bad.basis, Basis::FailedOpen);
    assert_eq!(a.basis, Basis::Counted, "made alone");
    assert_eq!(
        b.basis,
        Basis::Counted,
        "decided with the bad key's call: {b:?}"
    );
}

/// The client's runtime shuts down while a collection's task waits to run (a current-thread
/// runtime nobody drives, dropped once both calls are pending): each caller gets an answer, the
/// one made together as well as the one made alone.
#[test]
fn a_call_whose_collection_was_dropped_unsent_is_answered() {
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = client_runtime.block_on(server());
    let (lock, api) = client_runtime.block_on(async {
        let lock = common::client(&redis).await;
        let store = store(&lock).await;
        let api = limiter(&store, "api", "100/1s", FailurePolicy::FailClosed);
        api.try_acquire("k", 1).await.unwrap();
        (lock, api)
    });
    let (pending, dropper) = std::sync::mpsc::channel::<()>();
    let dropper = std::thread::spawn(move || {
        dropper.recv().unwrap();
        drop(client_runtime);
    });
    let callers = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (alone, together) = callers.block_on(async {
        let answer = |call| tokio::time::timeout(Duration::from_secs(30), call);
        let mut alone = Box::pin(answer(api.try_acquire("k", 1)));
        let mut together = Box::pin(answer(api.try_acquire("k", 1)));
        assert!(futures::poll!(&mut alone).is_pending());
        assert!(futures::poll!(&mut together).is_pending());
        pending.send(()).unwrap();
        tokio::join!(alone, together)
    });
    dropper.join().unwrap();
    assert!(alone.is_ok(), "the call made alone is answered");
    let decision = together.expect("the call made together is answered");
    assert_eq!(decision.unwrap().basis, Basis::FailedClosed);
    drop(callers);
    // No runtime is left to close their connections on.
    std::mem::forget((api, lock));
}

/// Calls of one key made together (quota changes, reads, the same limit twice in a call,
/// denials) decide as the same calls made one after another.
#[tokio::test(flavor = "current_thread")]
async fn calls_made_together_decide_as_one_after_another() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let q = |count: u32| Quota::new(count, Duration::from_secs(3600)).unwrap();
    let (q1, q2, q3) = (q(5), q(10), q(2));
    type Spec = Vec<(&'static str, Quota, u32)>;
    let calls: Vec<Spec> = vec![
        vec![("l", q1, 2)],
        vec![("l", q2, 3)],
        vec![("l", q1, 0)],
        vec![("l", q1, 1), ("l", q1, 1)],
        vec![("l", q3, 1)],
        vec![("l", q1, 1), ("m", q3, 5)],
        vec![("l", q2, 0), ("m", q3, 0)],
        vec![("l", q1, 3)],
        vec![("l", q2, 2), ("l", q1, 1)],
        vec![("l", q1, 0), ("m", q3, 1)],
        vec![("m", q3, 1)],
        vec![("m", q1, 0), ("l", q1, 0)],
    ];
    let run = |key: &'static str, spec: &Spec| {
        let charges: Vec<Charge> = spec
            .iter()
            .map(|(limit, quota, cost)| Charge {
                limit,
                key,
                quota: *quota,
                cost: *cost,
            })
            .collect();
        let store = store.clone();
        async move {
            store
                .charge(&charges)
                .await
                .unwrap()
                .into_iter()
                .map(|v| (v.allowed, v.remaining))
                .collect::<Vec<_>>()
        }
    };
    store
        .charge(&[Charge {
            limit: "w",
            key: "w",
            quota: q1,
            cost: 1,
        }])
        .await
        .unwrap();
    let before = command_calls(&redis).await;
    let together = futures::future::join_all(calls.iter().map(|c| run("together", c))).await;
    let after = command_calls(&redis).await;
    let mut apart = Vec::new();
    for c in &calls {
        apart.push(run("apart", c).await);
    }
    let evalsha = delta(&before, &after, "evalsha");
    assert!(evalsha <= 3, "{evalsha} EVALSHA for 12 calls made together");
    assert_eq!(together, apart);
    for limit in ["l", "m"] {
        let t = common::value(&redis, &store.state_key(limit, "together")).await;
        let a = common::value(&redis, &store.state_key(limit, "apart")).await;
        assert_eq!(t.split_once(':').unwrap().1, a.split_once(':').unwrap().1);
    }
}

/// Calls dropped while their collection waits to be sent are left out of it and charge
/// nothing; at most the call made alone, sent when first polled, is charged.
#[tokio::test(flavor = "current_thread")]
async fn calls_cancelled_before_their_collection_goes_charge_nothing() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let api = limiter(&store, "api", "40/1h", FailurePolicy::FailClosed);
    api.try_acquire("warm", 1).await.unwrap();
    {
        let mut calls: Vec<_> = (0..20).map(|_| Box::pin(api.try_acquire("k", 1))).collect();
        for call in &mut calls {
            assert!(futures::poll!(call.as_mut()).is_pending());
        }
    }
    // The collection's task runs (and would send) while this task yields.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let remaining = api.try_acquire("k", 0).await.unwrap().remaining;
    assert!(
        remaining >= 39,
        "{} of 20 cancelled calls charged",
        40 - remaining
    );
}

/// After a `SCRIPT FLUSH`, calls made together reload the script once and each is counted once.
#[tokio::test(flavor = "current_thread")]
async fn calls_made_together_reload_a_flushed_script() {
    let redis = server().await;
    let store = store(&common::client(&redis).await).await;
    let api = limiter(&store, "api", "40/1h", FailurePolicy::FailClosed);
    api.try_acquire("warm", 1).await.unwrap();
    redis.cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    let all = futures::future::join_all((0..20).map(|_| api.try_acquire("k", 1))).await;
    for decision in &all {
        assert_eq!(
            decision.as_ref().unwrap().basis,
            Basis::Counted,
            "{decision:?}"
        );
    }
    assert_eq!(api.try_acquire("k", 0).await.unwrap().remaining, 20);
}
