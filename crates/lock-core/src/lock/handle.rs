//! The held side of a lock: [`LockHandle`], its [`LeaseState`], and the [`LeaseRelease`] hook.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::error::LockError;
use crate::lock::lease::Lease;
use crate::lock::status::{LeaseStatus, LostReason, ReleaseOutcome};

/// The shared status of one lease, written by the backend and read by its [`LockHandle`].
///
/// Cheap to clone. Transitions are one-way, `Held → Released` or `Held → Lost`. A passed deadline
/// counts as lost even if a renewal is confirmed late, so `lost()` and `is_held()` always agree.
///
/// # Examples
///
/// In a backend's watchdog:
///
/// ```
/// use lock_core::lock::{LeaseState, LeaseStatus, LostReason};
/// use tokio::time::{Duration, Instant};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // Granted with a 30 s TTL (minus a safety margin).
/// let state = LeaseState::new(Some(Instant::now() + Duration::from_secs(29)));
/// assert!(state.is_held());
///
/// // A renewal confirmed: valid for longer. The handle sees the same state.
/// assert!(state.confirm(Instant::now() + Duration::from_secs(59)));
///
/// // A renewal found the key taken: lost, and renewing it stops.
/// state.mark_lost(LostReason::NotOwner);
/// assert_eq!(state.status(), LeaseStatus::Lost(LostReason::NotOwner));
/// assert!(!state.confirm(Instant::now() + Duration::from_secs(89)));
/// # }
/// ```
#[derive(Clone)]
pub struct LeaseState {
    shared: Arc<SharedStatus>,
}

/// A mutex and a `Notify` rather than a `watch` channel: a service may hold tens of thousands of
/// leases, and this is a tenth of a watch channel's size.
struct SharedStatus {
    status: std::sync::Mutex<LeaseStatus>,
    changed: Notify,
    /// The key and owner token, for the log line of a loss; set by the handle.
    holder: std::sync::OnceLock<(String, String)>,
}

impl fmt::Debug for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LeaseState").field(&self.status()).finish()
    }
}

impl LeaseState {
    /// A newly granted lease, valid until `valid_until` (`None`: no deadline).
    pub fn new(valid_until: Option<Instant>) -> Self {
        LeaseState {
            shared: Arc::new(SharedStatus {
                status: std::sync::Mutex::new(LeaseStatus::Held { valid_until }),
                changed: Notify::new(),
                holder: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Applies `change` under the lock; wakes `lost()` waiters if it reports a change.
    fn send_if_modified(&self, change: impl FnOnce(&mut LeaseStatus) -> bool) {
        let modified = {
            // A status is a plain value; a panic elsewhere cannot leave it half-written.
            let mut status = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
            change(&mut status)
        };
        if modified {
            self.shared.changed.notify_waiters();
        }
    }

    fn current(&self) -> LeaseStatus {
        *self.shared.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current status, with a passed deadline reported (and recorded) as
    /// [`LostReason::Expired`].
    pub fn status(&self) -> LeaseStatus {
        self.expire_if_due();
        self.current()
    }

    /// Whether the lease is held now: granted, not released, not lost, deadline not passed.
    pub fn is_held(&self) -> bool {
        matches!(self.status(), LeaseStatus::Held { .. })
    }

    /// Records a confirmed renewal: the lease is now valid until `valid_until`.
    ///
    /// Returns `false` and changes nothing when the lease is released, lost or past its deadline:
    /// the caller then stops renewing it.
    pub fn confirm(&self, valid_until: Instant) -> bool {
        self.expire_if_due();
        let mut still_held = false;
        self.send_if_modified(|status| match status {
            LeaseStatus::Held { valid_until: old } => {
                still_held = true;
                let newer = old.is_some_and(|old| valid_until > old);
                if newer {
                    *old = Some(valid_until);
                }
                newer
            }
            _ => false,
        });
        still_held
    }

    /// Records that the lease was lost; no effect if it was already released or lost.
    pub fn mark_lost(&self, reason: LostReason) {
        self.send_if_modified(|status| match status {
            LeaseStatus::Held { .. } => {
                *status = LeaseStatus::Lost(reason);
                crate::lock::telemetry::lost(reason, self.shared.holder.get());
                true
            }
            _ => false,
        });
    }

    /// Records that the holder released the lease, after which `lost()` never fires; no effect
    /// if it was already lost.
    pub fn mark_released(&self) {
        self.send_if_modified(|status| match status {
            LeaseStatus::Held { .. } => {
                *status = LeaseStatus::Released;
                true
            }
            _ => false,
        });
    }

    fn expire_if_due(&self) {
        let now = Instant::now();
        self.send_if_modified(|status| match status {
            LeaseStatus::Held {
                valid_until: Some(deadline),
            } if *deadline <= now => {
                *status = LeaseStatus::Lost(LostReason::Expired);
                crate::lock::telemetry::lost(LostReason::Expired, self.shared.holder.get());
                true
            }
            _ => false,
        });
    }

    /// Completes when the lease is lost; never completes once it is released.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let state = self.clone();
        async move {
            loop {
                // Registered before the status is read, so a change in between still wakes us.
                let changed = state.shared.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                match state.current() {
                    LeaseStatus::Lost(reason) => return reason,
                    LeaseStatus::Released => std::future::pending::<()>().await,
                    LeaseStatus::Held { valid_until: None } => changed.await,
                    LeaseStatus::Held {
                        valid_until: Some(deadline),
                    } => {
                        tokio::select! {
                            () = changed => {}
                            () = tokio::time::sleep_until(deadline) => state.expire_if_due(),
                        }
                    }
                }
            }
        }
    }
}

/// How a [`LockHandle`] gives its lock back, implemented by backends.
///
/// # Contract
/// - Both methods release only this acquisition's lease: a lock that passed to another owner is
///   never touched.
/// - Both stop any renewal of the lease at once.
/// - [`release_in_background`](LeaseRelease::release_in_background) runs from `Drop`. It must not
///   block or panic, also without a running async runtime. A release it cannot send ends at the
///   lease's TTL.
///
/// # Examples
///
/// The release of a toy backend, a table of key → owner:
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use async_trait::async_trait;
/// use lock_core::LockError;
/// use lock_core::lock::{Lease, LeaseRelease, LeaseState, LockHandle, ReleaseOutcome};
///
/// type Table = Arc<Mutex<HashMap<String, String>>>;
///
/// #[derive(Debug)]
/// struct TableRelease {
///     table: Table,
///     key: String,
///     owner: String,
/// }
///
/// impl TableRelease {
///     /// Owner-checked: removes the key only if this acquisition still holds it.
///     fn remove_if_owner(&self) -> ReleaseOutcome {
///         let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
///         if table.get(&self.key) != Some(&self.owner) {
///             return ReleaseOutcome::NotHeld;
///         }
///         table.remove(&self.key);
///         ReleaseOutcome::Released
///     }
/// }
///
/// #[async_trait]
/// impl LeaseRelease for TableRelease {
///     async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
///         Ok(self.remove_if_owner())
///     }
///
///     fn release_in_background(self: Box<Self>) {
///         let _ = self.remove_if_owner(); // does not block, does not panic
///     }
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let table = Table::default();
/// table.lock().unwrap().insert("reaper".into(), "pod-a/1".into());
/// let release = TableRelease { table: table.clone(), key: "reaper".into(), owner: "pod-a/1".into() };
/// let handle =
///     LockHandle::new("reaper", Lease::Watchdog, "pod-a/1", 1, LeaseState::new(None), Box::new(release));
///
/// assert_eq!(handle.release().await?, ReleaseOutcome::Released);
/// assert!(table.lock().unwrap().is_empty());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait LeaseRelease: Send + Sync + fmt::Debug + 'static {
    /// Releases the lease and reports whether it was still held.
    ///
    /// # Errors
    /// [`LockError::ReleaseFailed`] when the backend could not confirm the release.
    ///
    /// # Examples
    ///
    /// [`LockHandle::release`] calls it; a backend that cannot reach its store says so:
    ///
    /// ```
    /// use async_trait::async_trait;
    /// use lock_core::LockError;
    /// use lock_core::lock::{Lease, LeaseRelease, LeaseState, LockHandle, ReleaseOutcome};
    ///
    /// #[derive(Debug)]
    /// struct Unreachable {
    ///     key: String,
    /// }
    ///
    /// #[async_trait]
    /// impl LeaseRelease for Unreachable {
    ///     async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
    ///         Err(LockError::ReleaseFailed { key: self.key, cause: "connection refused".into() })
    ///     }
    ///
    ///     fn release_in_background(self: Box<Self>) {}
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let release = Box::new(Unreachable { key: "reaper".into() });
    /// let handle = LockHandle::new("reaper", Lease::Watchdog, "pod-a/1", 7, LeaseState::new(None), release);
    /// let error = handle.release().await.unwrap_err();
    /// assert_eq!(error.code(), "LOCK_RELEASE_FAILED");
    /// # }
    /// ```
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError>;

    /// Releases the lease without waiting for the outcome (best effort).
    fn release_in_background(self: Box<Self>);
}

/// A held lock.
///
/// [`release`](LockHandle::release) it to learn the outcome. Dropping it releases in the
/// background and stops renewal at once; a process about to exit calls
/// [`DistributedLock::shutdown`](crate::lock::DistributedLock::shutdown) last, so that such a release
/// is not cut off.
pub struct LockHandle {
    key: String,
    lease: Lease,
    owner: String,
    fencing_token: u64,
    state: LeaseState,
    release: Option<Box<dyn LeaseRelease>>,
    /// Holds of this lease by the task: 1, plus one per live nested (re-entrant) handle.
    holds: Arc<AtomicUsize>,
    /// A re-entrant handle on an outer scope's lease: releasing or dropping it gives its hold
    /// back and leaves the lease alone.
    nested: bool,
    /// For a re-entrant handle: turns true when the outer section has ended.
    scope_ended: Option<watch::Receiver<bool>>,
    /// When the handle was made (the grant), for the hold-time metric.
    granted_at: std::time::Instant,
}

impl fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockHandle")
            .field("key", &self.key)
            .field("lease", &self.lease)
            .field("owner", &self.owner)
            .field("fencing_token", &self.fencing_token)
            .field("status", &format_args!("{}", describe(self.state.status())))
            .field("hold_count", &self.hold_count())
            .field("nested", &self.nested)
            .finish()
    }
}

/// `held (valid for 2980 ms)`, `released`, `lost: …` — readable in logs, unlike an `Instant`.
fn describe(status: LeaseStatus) -> String {
    match status {
        LeaseStatus::Held { valid_until: None } => "held".to_owned(),
        LeaseStatus::Held {
            valid_until: Some(deadline),
        } => format!(
            "held (valid for {} ms)",
            deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
        ),
        LeaseStatus::Released => "released".to_owned(),
        LeaseStatus::Lost(reason) => format!("lost: {reason}"),
    }
}

impl LockHandle {
    /// A handle for a grant, built by implementations of [`crate::lock::DistributedLock`] (see the
    /// example of [`LeaseRelease`]).
    pub fn new(
        key: impl Into<String>,
        lease: Lease,
        owner: impl Into<String>,
        fencing_token: u64,
        state: LeaseState,
        release: Box<dyn LeaseRelease>,
    ) -> Self {
        let (key, owner) = (key.into(), owner.into());
        let _ = state.shared.holder.set((key.clone(), owner.clone()));
        LockHandle {
            key,
            lease,
            owner,
            fencing_token,
            state,
            release: Some(release),
            holds: Arc::new(AtomicUsize::new(1)),
            nested: false,
            scope_ended: None,
            granted_at: std::time::Instant::now(),
        }
    }

    /// A re-entrant handle on an outer scope's lease (see `reentrant`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn nested(
        key: &str,
        lease: Lease,
        owner: String,
        fencing_token: u64,
        state: LeaseState,
        holds: Arc<AtomicUsize>,
        scope_ended: watch::Receiver<bool>,
        release: Box<dyn LeaseRelease>,
    ) -> Self {
        LockHandle {
            key: key.to_owned(),
            lease,
            owner,
            fencing_token,
            state,
            release: Some(release),
            holds,
            nested: true,
            scope_ended: Some(scope_ended),
            granted_at: std::time::Instant::now(),
        }
    }

    /// Whether this re-entrant handle's section has ended (always false for other handles).
    fn scope_has_ended(&self) -> bool {
        self.scope_ended
            .as_ref()
            .is_some_and(|ended| *ended.borrow())
    }

    pub(crate) fn lease_state(&self) -> &LeaseState {
        &self.state
    }

    pub(crate) fn holds(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.holds)
    }

    /// How many times the current task holds this lease: 1, plus one for each live nested
    /// handle taken inside a [`with_lock`](crate::lock::DistributedLockExt::with_lock) scope of the key.
    pub fn hold_count(&self) -> usize {
        if self.scope_has_ended() {
            0
        } else {
            self.holds.load(Ordering::SeqCst)
        }
    }

    /// Whether this handle re-entered a lease its task holds in a
    /// [`with_lock`](crate::lock::DistributedLockExt::with_lock) scope.
    ///
    /// Such a handle shares the lease's owner, fencing token and status. Releasing it only gives
    /// its hold back.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::{DistributedLock, DistributedLockExt, InMemoryLock, Lease, ReleaseOutcome};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let outer = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// assert!(!outer.is_reentrant()); // outside a `with_lock` scope
    /// drop(outer);
    ///
    /// lock.with_lock("bill-run:2026-11", Lease::Watchdog, || async {
    ///     // A helper called inside the section takes the same lock: it re-enters.
    ///     let nested = lock.acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap();
    ///     assert!(nested.is_reentrant());
    ///     assert_eq!(nested.hold_count(), 2);
    ///     // Gives its hold back; the section keeps the lease.
    ///     assert_eq!(nested.release().await.unwrap(), ReleaseOutcome::Released);
    ///     assert!(lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap().is_reentrant());
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn is_reentrant(&self) -> bool {
        self.nested
    }

    /// The lock key as the caller gave it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease this lock was granted with.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// This acquisition's owner token, which other clients see as the holder: the instance id,
    /// then a suffix unique to this acquisition.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The fencing token of this grant, greater than the token of every earlier grant of the key.
    ///
    /// Hand it to the store the critical section writes to, and have the store reject writes
    /// with a smaller token than it has seen: that makes a paused or partitioned holder harmless.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Whether the lease is held now: not released, not lost, and its local deadline not passed.
    pub fn is_held(&self) -> bool {
        matches!(self.status(), LeaseStatus::Held { .. })
    }

    /// The current lease status; `Lost(ScopeEnded)` for a re-entrant handle whose section ended.
    pub fn status(&self) -> LeaseStatus {
        let status = self.state.status();
        if self.scope_has_ended() && !matches!(status, LeaseStatus::Lost(_)) {
            return LeaseStatus::Lost(LostReason::ScopeEnded);
        }
        status
    }

    /// Completes when the lease is lost, and never after a release.
    ///
    /// A lease is lost when a renewal finds the key gone or taken, or when the local deadline
    /// passes without a confirmed renewal. The future owns what it needs, so it can be spawned or
    /// kept after the handle moves.
    ///
    /// # Examples
    ///
    /// Stop the work when the lease can no longer be trusted:
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::lock::{DistributedLock, InMemoryLock, Lease, LostReason};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// # let lock = InMemoryLock::new();
    /// let handle = lock.acquire("msisdn-reaper", Lease::Fixed(Duration::from_secs(5))).await?;
    /// let swept = tokio::select! {
    ///     reason = handle.lost() => Err(reason),
    ///     // A sweep that takes longer than its lease:
    ///     () = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
    /// };
    /// assert_eq!(swept, Err(LostReason::Expired));
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let lost = self.state.lost();
        let scope_ended = self.scope_ended.clone();
        async move {
            let Some(mut ended) = scope_ended else {
                return lost.await;
            };
            tokio::select! {
                reason = lost => reason,
                // The outer section ended: the lease is released, or about to be.
                Ok(_) = ended.wait_for(|ended| *ended) => LostReason::ScopeEnded,
            }
        }
    }

    /// Releases the lock, owner-checked, and reports whether the lease was still held.
    ///
    /// Renewal stops at once, whatever the outcome. Runs in a `lock.release` span and records the
    /// release metrics ([`telemetry`](crate::lock::telemetry)), except for a re-entrant handle.
    ///
    /// # Errors
    /// [`LockError::ReleaseFailed`] (`LOCK_RELEASE_FAILED`) when the backend did not confirm the
    /// release. The lease then ends at its TTL.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::LockError;
    /// use lock_core::lock::{DistributedLock, InMemoryLock, Lease, ReleaseOutcome};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// # let lock = InMemoryLock::new();
    /// let handle = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// // … the bill run …
    /// match handle.release().await {
    ///     Ok(ReleaseOutcome::Released) => {}
    ///     Ok(ReleaseOutcome::NotHeld) => eprintln!("the lease ended early; another pod may have run"),
    ///     Err(error) => eprintln!("{error}"), // LOCK_RELEASE_FAILED: the lease ends at its TTL
    /// }
    /// assert!(lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.is_ok());
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        let was_held = self.is_held();
        if !self.nested {
            self.state.mark_released();
        }
        let nested = self.nested;
        let key = self.key.clone();
        let fencing_token = self.fencing_token;
        let held_for = self.granted_at.elapsed();
        let release = async move {
            match self.release.take() {
                Some(release) => {
                    let outcome = release.release().await?;
                    // A lease this process already reported lost must not be reported as
                    // released, even if the key happened to outlive our safety margin.
                    Ok(if was_held {
                        outcome
                    } else {
                        ReleaseOutcome::NotHeld
                    })
                }
                None => Ok(ReleaseOutcome::NotHeld),
            }
        };
        if nested {
            return release.await;
        }
        crate::lock::telemetry::release(&key, fencing_token, held_for, release).await
    }
}

impl Drop for LockHandle {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            if !self.nested {
                self.state.mark_released();
                crate::lock::telemetry::dropped(&self.key, self.granted_at.elapsed());
            }
            release.release_in_background();
        }
    }
}

impl crate::lock::telemetry::Grant for LockHandle {
    fn fencing_token(&self) -> u64 {
        LockHandle::fencing_token(self)
    }

    fn is_reentrant(&self) -> bool {
        LockHandle::is_reentrant(self)
    }

    fn hold_count(&self) -> usize {
        LockHandle::hold_count(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_is_lost_and_stays_lost() {
        let state = LeaseState::new(Some(Instant::now() + Duration::from_secs(1)));
        assert!(state.is_held());
        let lost = tokio::spawn(state.lost());
        tokio::time::sleep(Duration::from_millis(1001)).await;
        assert_eq!(lost.await.unwrap(), LostReason::Expired);
        assert!(!state.is_held());
        // A late confirmation does not resurrect it.
        assert!(!state.confirm(Instant::now() + Duration::from_secs(10)));
        assert_eq!(state.status(), LeaseStatus::Lost(LostReason::Expired));
    }

    #[tokio::test(start_paused = true)]
    async fn confirmations_push_the_deadline_out() {
        let state = LeaseState::new(Some(Instant::now() + Duration::from_secs(1)));
        let mut lost = Box::pin(state.lost());
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(state.confirm(Instant::now() + Duration::from_secs(1)));
            assert!(futures_poll_once(&mut lost).await.is_none());
        }
        state.mark_lost(LostReason::NotOwner);
        assert_eq!(lost.await, LostReason::NotOwner);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_never_fires_after_release() {
        let state = LeaseState::new(Some(Instant::now() + Duration::from_secs(1)));
        state.mark_released();
        state.mark_lost(LostReason::NotOwner);
        let fired = tokio::time::timeout(Duration::from_secs(60), state.lost()).await;
        assert!(fired.is_err(), "lost() fired after release");
        assert_eq!(state.status(), LeaseStatus::Released);
    }

    async fn futures_poll_once<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        tokio::time::timeout(Duration::ZERO, f).await.ok()
    }
}
