//! Re-entry: inside a [`with_lock`](crate::lock::DistributedLockExt::with_lock) scope, the same task
//! acquiring the same key of the same lock gets a nested handle on the lease it holds, instead
//! of waiting for itself.
//!
//! The scope is a Tokio task-local, set while the section's future is polled, and each entry
//! records the task id. Tasks the section spawns and `join!` siblings of the `with_lock` call
//! contend like any other holder.
//!
//! Futures running concurrently inside a section all see its scope, so a nested `with_lock`
//! section is exclusive among the re-entries of its scope: another one waits for it like a
//! contender, up to its wait time, then fails as held by this process. Nested handles from a
//! plain `acquire` are not exclusive. A nested handle that outlives its section reports the
//! lease lost ([`LostReason::ScopeEnded`](crate::lock::LostReason::ScopeEnded)).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use crate::error::{AcquireFailure, LockError};
use crate::lock::handle::{LeaseRelease, LeaseState, LockHandle};
use crate::lock::lease::Lease;
use crate::lock::status::ReleaseOutcome;

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
    /// One permit, taken while a nested section entered from this scope runs.
    section: Arc<Semaphore>,
}

impl Held {
    fn matches(&self, task: Option<tokio::task::Id>, namespace: &str, key: &str) -> bool {
        self.task == task
            && &*self.namespace == namespace
            && self.key == key
            && self.state.is_held()
    }
}

/// The innermost scope of the current task that holds `key` of the lock `namespace`.
fn innermost(namespace: &str, key: &str) -> Option<Held> {
    HELD.try_with(|held| {
        let task = tokio::task::try_id();
        held.iter()
            .rev()
            .find(|h| h.matches(task, namespace, key))
            .cloned()
    })
    .ok()
    .flatten()
}

/// A nested handle for `key`, if the current task holds it in a `with_lock` scope of the lock
/// `namespace` and the lease is still held; `None` when the acquisition contends as usual.
/// While a nested section of that scope runs, waits up to `wait` for it to end (see the module
/// docs), then fails as held by this process.
pub(crate) async fn enter(
    namespace: &str,
    key: &str,
    wait: Duration,
) -> Option<Result<LockHandle, LockError>> {
    let outer = innermost(namespace, key)?;
    if outer.section.available_permits() == 0 {
        let started = Instant::now();
        match tokio::time::timeout(wait, outer.section.acquire()).await {
            Ok(Ok(permit)) => drop(permit),
            _ => {
                return Some(Err(LockError::AcquisitionFailed {
                    key: key.to_owned(),
                    reason: AcquireFailure::HeldByAnotherOwner {
                        holder: outer.owner.clone(),
                        ttl: None,
                        waited: started.elapsed(),
                    },
                }));
            }
        }
        if !outer.state.is_held() {
            return None;
        }
    }
    outer.holds.fetch_add(1, Ordering::SeqCst);
    Some(Ok(LockHandle::nested(
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
    )))
}

/// Runs the section of a nested handle [`enter`] just returned: exclusive among the nested
/// sections of the scope it re-entered, and a scope of its own for what it nests in turn.
pub(crate) async fn nested_section<T>(
    namespace: &str,
    key: &str,
    section: impl Future<Output = T>,
) -> T {
    let Some(outer) = innermost(namespace, key) else {
        // The lease ended in between: the section runs, as it would have a moment earlier,
        // and its handle reports the loss.
        return section.await;
    };
    // Never closed; and `enter` saw it free in this same poll unless a sibling was woken first.
    let _permit = Arc::clone(&outer.section).acquire_owned().await;
    let inner = Held {
        section: Arc::new(Semaphore::new(1)),
        ..outer
    };
    let mut stack = HELD.try_with(Vec::clone).unwrap_or_default();
    stack.push(inner);
    HELD.scope(stack, section).await
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
        section: Arc::new(Semaphore::new(1)),
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

/// The granted path of every `with_lock*`: runs `critical_section` holding `handle` (registered
/// for re-entry), then releases it and logs — does not return — a lease that had ended or a
/// release that was not confirmed. A re-entrant handle is left to the enclosing scope.
pub(crate) async fn run_holding<F, Fut, T>(
    namespace: &str,
    key: &str,
    handle: LockHandle,
    critical_section: F,
) -> T
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = T>,
{
    if handle.is_reentrant() {
        // The outer scope holds the lease and releases it.
        let value = nested_section(namespace, key, critical_section()).await;
        drop(handle);
        return value;
    }
    let value = scope(namespace, &handle, critical_section()).await;
    let in_time = handle.is_held();
    release_after(key, handle, in_time).await;
    value
}

/// As [`run_holding`], for a section whose critical part ends before the section does (a
/// master's block, before its bounded wait for branches): `section` returns its value and
/// whether the lease was still held when the critical part ended. A lease that ended after
/// that is logged at `DEBUG`, not as an overrun: nobody ran concurrently with the critical part.
pub(crate) async fn run_holding_split<F, Fut, T>(
    namespace: &str,
    key: &str,
    handle: LockHandle,
    section: F,
) -> T
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = (T, bool)>,
{
    if handle.is_reentrant() {
        let (value, _) = nested_section(namespace, key, section()).await;
        drop(handle);
        return value;
    }
    let (value, in_time) = scope(namespace, &handle, section()).await;
    release_after(key, handle, in_time).await;
    value
}

/// Releases `handle` after its section and logs what the release says; `in_time`: whether the
/// lease was held when the critical part of the section ended.
async fn release_after(key: &str, handle: LockHandle, in_time: bool) {
    let still_held = handle.is_held();
    match handle.release().await {
        Ok(ReleaseOutcome::Released) => {}
        // Ended locally after the critical part did (a master's bounded wait reached the
        // lease's end): no overrun; the section's own result reports the rest.
        Ok(ReleaseOutcome::NotHeld) if in_time && !still_held => tracing::debug!(
            lock_key = key,
            "the lease ended after the critical section had finished, before its release"
        ),
        Ok(ReleaseOutcome::NotHeld) => tracing::warn!(
            lock_key = key,
            still_held_locally = still_held,
            "the lease ended before the critical section finished; another owner may have run concurrently"
        ),
        // Ended locally before the critical part did: whatever the release says, the lease
        // was gone.
        Err(error) if !in_time => tracing::warn!(
            lock_key = key,
            %error,
            "the lease ended before the critical section finished; another owner may have run concurrently (the release was not confirmed either)"
        ),
        Err(error) => tracing::warn!(
            lock_key = key,
            %error,
            "release after the critical section was not confirmed; the lease ends at its TTL"
        ),
    }
}
