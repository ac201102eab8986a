//! Re-entry: inside a [`with_lock`](crate::DistributedLockExt::with_lock) scope, the same task
//! acquiring the same key of the same lock again gets a nested handle on the lease it already
//! holds — no backend call, the outer lease kept — instead of waiting for itself.
//!
//! The scope is a Tokio task-local, so it follows the task, not the thread: code the section
//! `tokio::spawn`s runs in another task and contends like any other holder.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::error::LockError;
use crate::handle::{LeaseRelease, LeaseState, LockHandle, ReleaseOutcome};
use crate::lease::Lease;

tokio::task_local! {
    static HELD: RefCell<Vec<Held>>;
}

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// A lease held by a `with_lock` scope of the current task.
#[derive(Debug, Clone)]
struct Held {
    scope: u64,
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
        let held = held.borrow();
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

/// Runs `section` with `handle`'s lease registered for re-entry in the current task.
pub(crate) async fn scope<T>(
    namespace: &str,
    handle: &LockHandle,
    section: impl Future<Output = T>,
) -> T {
    let held = Held {
        scope: NEXT_SCOPE.fetch_add(1, Ordering::Relaxed),
        namespace: namespace.into(),
        key: handle.key().to_owned(),
        lease: handle.lease(),
        owner: handle.owner().to_owned(),
        fencing_token: handle.fencing_token(),
        state: handle.lease_state().clone(),
        holds: handle.holds(),
    };
    let scope = held.scope;
    let pushed = HELD.try_with(|stack| stack.borrow_mut().push(held.clone()));
    if pushed.is_err() {
        // The task's first scope.
        return HELD.scope(RefCell::new(vec![held]), section).await;
    }
    // Already inside another key's scope: add ours for as long as the section runs, also if
    // the section's future is dropped half-way.
    let _pop = PopOnDrop(scope);
    section.await
}

struct PopOnDrop(u64);

impl Drop for PopOnDrop {
    fn drop(&mut self) {
        let _ = HELD.try_with(|stack| stack.borrow_mut().retain(|h| h.scope != self.0));
    }
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
