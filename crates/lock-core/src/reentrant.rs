//! Re-entry: inside a [`with_lock`](crate::DistributedLockExt::with_lock) scope, the same task
//! acquiring the same key of the same lock again gets a nested handle on the lease it already
//! holds — no backend call, the outer lease kept — instead of waiting for itself.
//!
//! The scope is a Tokio task-local, so it follows the task, not the thread: code the section
//! `tokio::spawn`s runs in another task and contends like any other holder.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::error::LockError;
use crate::handle::{LeaseRelease, LeaseState, LockHandle, ReleaseOutcome};
use crate::lease::Lease;

tokio::task_local! {
    /// The leases held by the `with_lock` scopes enclosing the future being polled.
    static HELD: Vec<Held>;
}

/// A lease held by a `with_lock` scope of the current task.
#[derive(Debug, Clone)]
struct Held {
    namespace: Arc<str>,
    key: String,
    lease: Lease,
    owner: String,
    fencing_token: u64,
    state: LeaseState,
    holds: Arc<AtomicUsize>,
}

/// A nested handle for `key`, if the current task holds it in a `with_lock` scope of the lock
/// `namespace` and the lease is still held.
pub(crate) fn enter(namespace: &str, key: &str) -> Option<LockHandle> {
    HELD.try_with(|held| {
        let outer = held
            .iter()
            .rev()
            .find(|h| &*h.namespace == namespace && h.key == key && h.state.is_held())?;
        outer.holds.fetch_add(1, Ordering::SeqCst);
        Some(LockHandle::nested(
            &outer.key,
            outer.lease,
            outer.owner.clone(),
            outer.fencing_token,
            outer.state.clone(),
            Arc::clone(&outer.holds),
            Box::new(NestedRelease {
                holds: Arc::clone(&outer.holds),
            }),
        ))
    })
    .ok()
    .flatten()
}

/// Runs `section` with `handle`'s lease registered for re-entry — visible while `section`
/// itself is polled, not to other futures of the task (a `join!` sibling contends).
pub(crate) async fn scope<T>(
    namespace: &str,
    handle: &LockHandle,
    section: impl Future<Output = T>,
) -> T {
    let held = Held {
        namespace: namespace.into(),
        key: handle.key().to_owned(),
        lease: handle.lease(),
        owner: handle.owner().to_owned(),
        fencing_token: handle.fencing_token(),
        state: handle.lease_state().clone(),
        holds: handle.holds(),
    };
    // Scopes nest: the inner one sees the leases of the enclosing ones, too.
    let mut stack = HELD.try_with(Vec::clone).unwrap_or_default();
    stack.push(held);
    HELD.scope(stack, section).await
}

/// Releasing a nested handle only gives its hold back; the outer scope releases the lease.
#[derive(Debug)]
struct NestedRelease {
    holds: Arc<AtomicUsize>,
}

#[async_trait]
impl LeaseRelease for NestedRelease {
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
        self.holds.fetch_sub(1, Ordering::SeqCst);
        Ok(ReleaseOutcome::Released)
    }

    fn release_in_background(self: Box<Self>) {
        self.holds.fetch_sub(1, Ordering::SeqCst);
    }
}
