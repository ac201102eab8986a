//! Two Sentinel deployments whose masters share a service name (`mymaster`, the common default)
//! are two lock spaces: a section holding a key on one must not re-enter it on the other, or a
//! pod of the second deployment is granted the key while the section believes it holds it there.

use crate::sentinel_common;

use std::time::Duration;

use lock_core::lock::{DistributedLock, DistributedLockExt, Lease};
use lock_testkit::RedisSentinel;
use sentinel_common::{config, connect, describe, value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_on_one_sentinel_deployment_does_not_re_enter_on_another_of_the_same_name() {
    let (a, b) = tokio::join!(RedisSentinel::start(), RedisSentinel::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.service_name(), b.service_name());
    let on_a = connect(config(&a)).await;
    let on_b = connect(config(&b)).await;
    let other_pod_on_b = connect(config(&b).instance_id("other-pod")).await;

    let key = "bill-run:2026-11";
    let once = || crate::common::watchdog_waiting(Duration::ZERO);
    let (nested, rival) = on_a
        .with_lock(key, Lease::Watchdog, || async {
            let nested = on_b.acquire_with(key, once()).await.unwrap();
            let rival = other_pod_on_b.acquire_with(key, once()).await;
            let stored = value(b.master(), &on_b.redis_key(key)).await;
            (
                (nested.is_reentrant(), nested.owner().to_owned(), stored),
                rival
                    .map(|h| h.owner().to_owned())
                    .map_err(|e| describe(&e)),
            )
        })
        .await
        .unwrap();
    let (reentrant, owner, stored) = nested;
    let namespaces = (on_a.namespace(), on_b.namespace());
    assert!(
        !reentrant && stored.contains(&owner),
        "the acquisition on deployment B re-entered the section's lease on deployment A \
         (re-entrant: {reentrant}); B's master stores {stored:?} at the key, not its owner {owner}; \
         namespaces {namespaces:?}"
    );
    assert!(
        rival.is_err(),
        "two holders: while the section held {key} on B, another pod of B was granted it: {rival:?}"
    );
}
