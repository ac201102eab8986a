//! An in-process [`DistributedLock`] for unit tests and single-process development.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{AcquireFailure, LockError};
use crate::handle::{LeaseRelease, LeaseState, LockHandle, ReleaseOutcome};
use crate::lease::{Lease, validate_wait};
use crate::lock::{AcquireOptions, DistributedLock};
use crate::owner::OwnerTokens;

static NEXT_TABLE: AtomicU64 = AtomicU64::new(1);

/// The default wait time of an [`InMemoryLock`]: 5 s, as `telco.platform.lock.wait-time`.
pub const DEFAULT_WAIT_TIME: Duration = Duration::from_secs(5);

/// A [`DistributedLock`] whose locks live in this process. Clones share the same locks, so each
/// clone can stand in for a separate client.
///
/// Same semantics as the Redis implementation — waiting (woken by releases, bounded by the
/// holder's expiry), fixed-lease expiry, owner-checked release, fencing tokens — with one
/// difference that follows from having no process boundary: a watchdog lease never expires while
/// its handle lives (a holder cannot crash without dropping its handle), so no renewal runs.
///
/// ```
/// use lock_core::{DistributedLock, InMemoryLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lock = InMemoryLock::new();
/// let held = lock.try_acquire("reaper", Lease::Watchdog).await.unwrap();
/// let err = lock.try_acquire("reaper", Lease::Watchdog).await.unwrap_err();
/// assert_eq!(err.details()["reason"], "held_by_another_owner");
/// drop(held);
/// assert!(lock.try_acquire("reaper", Lease::Watchdog).await.is_ok());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct InMemoryLock {
    shared: Arc<Shared>,
    wait_time: Duration,
}

#[derive(Debug)]
struct Shared {
    /// `in-memory:<n>`: each lock table is its own lock space.
    namespace: String,
    table: Mutex<HashMap<String, Entry>>,
    released: Notify,
    next_fencing_token: AtomicU64,
    owners: OwnerTokens,
}

#[derive(Debug)]
struct Entry {
    owner: String,
    expires_at: Option<Instant>,
}

impl Entry {
    fn is_live(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }
}

impl Default for InMemoryLock {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryLock {
    /// An empty lock table with the default wait time (5 s) and instance id `in-memory`.
    pub fn new() -> Self {
        InMemoryLock {
            shared: Arc::new(Shared {
                namespace: format!("in-memory:{}", NEXT_TABLE.fetch_add(1, Ordering::Relaxed)),
                table: Mutex::new(HashMap::new()),
                released: Notify::new(),
                next_fencing_token: AtomicU64::new(1),
                owners: OwnerTokens::new("in-memory").expect("valid instance id"),
            }),
            wait_time: DEFAULT_WAIT_TIME,
        }
    }

    /// A client of the same lock table with another default wait time (0 to 1 h).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `wait` when out of range.
    pub fn with_wait_time(&self, wait_time: Duration) -> Result<Self, LockError> {
        validate_wait(wait_time)?;
        Ok(InMemoryLock {
            shared: Arc::clone(&self.shared),
            wait_time,
        })
    }

    /// The default wait time of this client.
    pub fn wait_time(&self) -> Duration {
        self.wait_time
    }

    /// Number of keys currently held (expired fixed leases not counted).
    pub fn held_count(&self) -> usize {
        let now = Instant::now();
        self.shared
            .table()
            .values()
            .filter(|e| e.is_live(now))
            .count()
    }

    fn try_grant(&self, key: &str, lease: Lease) -> Result<LockHandle, (String, Option<Instant>)> {
        let now = Instant::now();
        let mut table = self.shared.table();
        if let Some(entry) = table.get(key).filter(|e| e.is_live(now)) {
            return Err((entry.owner.clone(), entry.expires_at));
        }
        let owner = self.shared.owners.next_token();
        let expires_at = match lease {
            Lease::Watchdog => None,
            Lease::Fixed(d) => Some(now + d),
        };
        table.insert(
            key.to_owned(),
            Entry {
                owner: owner.clone(),
                expires_at,
            },
        );
        drop(table);
        let token = self
            .shared
            .next_fencing_token
            .fetch_add(1, Ordering::Relaxed);
        let release = MemoryRelease {
            shared: Arc::clone(&self.shared),
            key: key.to_owned(),
            owner: owner.clone(),
        };
        Ok(LockHandle::new(
            key,
            lease,
            owner,
            token,
            LeaseState::new(expires_at),
            Box::new(release),
        ))
    }
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this mutex cannot leave the map half-updated (single inserts and
        // removes), so a poisoned lock is still consistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, key: &str, owner: &str) -> ReleaseOutcome {
        let now = Instant::now();
        let mut table = self.table();
        let Some(entry) = table.get(key).filter(|e| e.owner == owner) else {
            return ReleaseOutcome::NotHeld;
        };
        let outcome = if entry.is_live(now) {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        };
        table.remove(key);
        drop(table);
        self.released.notify_waiters();
        outcome
    }
}

#[async_trait]
impl DistributedLock for InMemoryLock {
    fn namespace(&self) -> &str {
        &self.shared.namespace
    }

    async fn acquire_lease(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        let wait = options.wait_time().unwrap_or(self.wait_time);
        let started = Instant::now();
        let deadline = started + wait;
        loop {
            // Register for wake-ups before looking, so a release between the look and the wait
            // is not missed.
            let notified = self.shared.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (holder, expires_at) = match self.try_grant(key, options.lease()) {
                Ok(handle) => return Ok(handle),
                Err(held) => held,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(LockError::AcquisitionFailed {
                    key: key.to_owned(),
                    reason: AcquireFailure::HeldByAnotherOwner {
                        holder,
                        ttl: expires_at.map(|at| at.saturating_duration_since(now)),
                        waited: now - started,
                    },
                });
            }
            let wake_at = expires_at.map_or(deadline, |at| at.min(deadline));
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }
}

#[derive(Debug)]
struct MemoryRelease {
    shared: Arc<Shared>,
    key: String,
    owner: String,
}

#[async_trait]
impl LeaseRelease for MemoryRelease {
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
        Ok(self.shared.release(&self.key, &self.owner))
    }

    fn release_in_background(self: Box<Self>) {
        let _ = self.shared.release(&self.key, &self.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_woken_by_the_release_not_by_the_deadline() {
        let lock = InMemoryLock::new();
        let held = lock.acquire("k", Lease::Watchdog).await.unwrap();
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let t0 = Instant::now();
                let h = lock
                    .acquire_with("k", AcquireOptions::default().wait(Duration::from_secs(60)))
                    .await
                    .unwrap();
                (t0.elapsed(), h.fencing_token())
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let first = held.fencing_token();
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        let (waited, second) = waiter.await.unwrap();
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        assert!(second > first);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_holders_release_reports_not_held_and_keeps_the_new_holder() {
        let lock = InMemoryLock::new();
        let old = lock
            .acquire("k", Lease::Fixed(Duration::from_millis(200)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!old.is_held());
        let new = lock.try_acquire("k", Lease::Watchdog).await.unwrap();
        assert_eq!(old.release().await.unwrap(), ReleaseOutcome::NotHeld);
        assert!(lock.try_acquire("k", Lease::Watchdog).await.is_err());
        assert_eq!(new.release().await.unwrap(), ReleaseOutcome::Released);
        assert_eq!(lock.held_count(), 0);
    }
}
