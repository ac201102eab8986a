//! Wiring of master/sub locks: their branch backend and lock by the defaults-then-overrides
//! rule, with the `telco.platform.lock.branches.*` settings.

use std::sync::Arc;

use lock_core::branches::{Branches, DisabledBranches, InMemoryBranches, MasterLocks};
use lock_core::lock::{DistributedLock, InMemoryLock};
use lock_redis::RedisClient;
use lock_redis::branches::RedisBranches;

use crate::config::LockSettings;

/// Where the master/sub locks of a started service keep their branches, and on which lock.
pub(crate) enum Store<'a> {
    /// `enabled = false`: the lock is skipped. The block runs under a lock of this process
    /// only, and branches are not tracked: each registration logs an INFO naming the switch.
    Disabled(&'a str),
    /// The builder's override, on the service's lock.
    Custom(Arc<dyn DistributedLock>, Arc<dyn Branches>),
    /// On the Redis client's connections, with the service's lock.
    Redis(Arc<dyn DistributedLock>, &'a RedisClient),
    /// A custom lock and no branch backend: branches in this process only.
    InProcess(Arc<dyn DistributedLock>),
}

pub(crate) async fn build(settings: &LockSettings, store: Store<'_>) -> MasterLocks {
    let (lock, branches): (Arc<dyn DistributedLock>, Arc<dyn Branches>) = match store {
        Store::Disabled(detail) => {
            tracing::warn!(
                %detail,
                "master locks hold a lock of this process only, not across pods, and track no branches"
            );
            (
                Arc::new(InMemoryLock::new()),
                Arc::new(DisabledBranches::new(detail)),
            )
        }
        Store::Custom(lock, branches) => (lock, branches),
        Store::Redis(lock, client) => (lock, Arc::new(RedisBranches::new(client).await)),
        Store::InProcess(lock) => (lock, Arc::new(InMemoryBranches::new())),
    };
    MasterLocks::new(lock, branches)
        .with_branch_wait(settings.branches.wait_time)
        .expect("the branch wait was checked at load")
}
