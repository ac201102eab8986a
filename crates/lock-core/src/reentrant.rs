//! Re-entry: inside a [`with_lock`](crate::DistributedLockExt::with_lock) scope, the same task
//! acquiring the same key of the same lock again gets a nested handle on the lease it already
//! holds — no backend call, the outer lease kept — instead of waiting for itself.
//!
//! The scope is a Tokio task-local set while the section's future is polled, and each entry
//! also records the task id: code the section spawns (`tokio::spawn`, `spawn_local` driven from
//! inside it) and sibling futures (`join!`) run as other futures or tasks and contend like any
//! other holder.
//!
//! A nested handle can outlive its section (moved out, or into a spawned task). When the section
//! ends, the outer `with_lock` releases the lease, and the nested handle reports that as lost
//! ([`LostReason::ScopeEnded`](crate::LostReason::ScopeEnded)).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use tokio::sync::watch;

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
    task: Option<tokio::task::Id>,
    /// Turns true when the scope's section has ended (completed, panicked or was dropped).
    ended: watch::Receiver<bool>,
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
        let task = tokio::task::try_id();
        let outer = held.iter().rev().find(|h| {
            h.task == task && &*h.namespace == namespace && h.key == key && h.state.is_held()
        })?;
        outer.holds.fetch_add(1, Ordering::SeqCst);
        Some(LockHandle::nested(
            &outer.key,
            outer.lease,
            outer.owner.clone(),
            outer.fencing_token,
            outer.state.clone(),
            Arc::clone(&outer.holds),
            outer.ended.clone(),
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
    let (ended, ended_rx) = watch::channel(false);
    let held = Held {
        task: tokio::task::try_id(),
        ended: ended_rx,
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
    // Told on every way out of the section, before the caller releases the lease.
    let _ended = EndOnDrop(ended);
    HELD.scope(stack, section).await
}

struct EndOnDrop(watch::Sender<bool>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// Releasing a nested handle only gives its hold back; the outer scope releases the lease.
#[derive(Debug)]
struct NestedRelease {
    holds: Arc<AtomicUsize>,
}

impl NestedRelease {
    fn give_back(&self) {
        // Saturating: the outer handle may already be gone with its count.
        let _ = self
            .holds
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

#[async_trait]
impl LeaseRelease for NestedRelease {
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
        self.give_back();
        // The handle reports NotHeld instead when its scope had already ended.
        Ok(ReleaseOutcome::Released)
    }

    fn release_in_background(self: Box<Self>) {
        self.give_back();
    }
}
