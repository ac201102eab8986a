//! An in-process [`DistributedLock`] for unit tests and single-process development.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{AcquireFailure, LockError};
use crate::lock::handle::{LeaseRelease, LeaseState, LockHandle};
use crate::lock::lease::{Lease, validate_wait};
use crate::lock::options::AcquireOptions;
use crate::lock::options::DEFAULT_WAIT_TIME;
use crate::lock::port::DistributedLock;
use crate::lock::shutdown::{HeldLeases, ShutdownSummary};
use crate::lock::status::{LostReason, ReleaseOutcome};
use crate::owner::OwnerTokens;

static NEXT_TABLE: AtomicU64 = AtomicU64::new(1);

/// A [`DistributedLock`] whose locks live in this process, for tests and single-process tools.
///
/// It passes the conformance suite. Clones share the locks, and each clone is a client of its
/// own, also for [`shutdown`](DistributedLock::shutdown). A watchdog lease never expires while
/// its handle lives, since a holder cannot crash without dropping it, so no renewal runs.
#[derive(Debug)]
pub struct InMemoryLock {
    shared: Arc<Shared>,
    wait_time: Duration,
    /// The leases granted through this client and not yet released: key and owner token.
    held: Arc<HeldLeases<(String, String)>>,
}

impl Clone for InMemoryLock {
    /// Another client of the same lock table, with the same wait time.
    fn clone(&self) -> Self {
        InMemoryLock {
            shared: Arc::clone(&self.shared),
            wait_time: self.wait_time,
            held: Arc::default(),
        }
    }
}

#[derive(Debug)]
struct Shared {
    /// `in-memory:<n>`: each lock table is its own lock space.
    namespace: String,
    table: Mutex<HashMap<String, Entry>>,
    /// The queued fair waiters of each key, by ticket, in arrival order. Locked before `table`
    /// when both are needed.
    queues: Mutex<HashMap<String, VecDeque<u64>>>,
    next_ticket: AtomicU64,
    released: Notify,
    next_fencing_token: AtomicU64,
    owners: OwnerTokens,
}

#[derive(Debug)]
struct Entry {
    owner: String,
    expires_at: Option<Instant>,
    /// A release before this instant keeps the key until then (the minimum hold).
    hold_until: Option<Instant>,
    /// What the holder's handle watches, so [`InMemoryLock::expire`] can tell it first.
    state: LeaseState,
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
    /// An empty lock table with the [`DEFAULT_WAIT_TIME`] and instance id `in-memory`.
    pub fn new() -> Self {
        crate::lock::telemetry::register_series();
        InMemoryLock {
            shared: Arc::new(Shared {
                namespace: format!("in-memory:{}", NEXT_TABLE.fetch_add(1, Ordering::Relaxed)),
                table: Mutex::new(HashMap::new()),
                queues: Mutex::new(HashMap::new()),
                next_ticket: AtomicU64::new(1),
                released: Notify::new(),
                next_fencing_token: AtomicU64::new(1),
                owners: OwnerTokens::new("in-memory").expect("valid instance id"),
            }),
            wait_time: DEFAULT_WAIT_TIME,
            held: Arc::default(),
        }
    }

    /// A client of the same lock table with another wait time, 0 to 1 h.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `wait_time` when out of range.
    pub fn with_wait_time(&self, wait_time: Duration) -> Result<Self, LockError> {
        validate_wait(wait_time)?;
        Ok(InMemoryLock {
            wait_time,
            ..self.clone()
        })
    }

    /// The wait time of this client.
    pub fn wait_time(&self) -> Duration {
        self.wait_time
    }

    /// The number of keys held now, expired fixed leases not counted.
    pub fn held_count(&self) -> usize {
        let now = Instant::now();
        self.shared
            .table()
            .values()
            .filter(|e| e.is_live(now))
            .count()
    }

    /// Ends the lease held on `key` as if it had run out, and returns whether there was one.
    ///
    /// A test hook for code that must react to a lost lease: the holder's handle turns lost
    /// ([`LostReason::Expired`]) before the key is free and waiters are woken.
    pub fn expire(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut table = self.shared.table();
        let Some(entry) = table.get(key).filter(|e| e.is_live(now)) else {
            return false;
        };
        // Lost before the key is free, under the table's lock: nobody can be granted it while
        // the old handle still says held — the order the contract promises.
        entry.state.mark_lost(LostReason::Expired);
        table.remove(key);
        drop(table);
        self.shared.released.notify_waiters();
        true
    }

    /// The live holder of `key`, if any, and when its lease expires.
    fn holder(&self, key: &str) -> Option<(String, Option<Instant>)> {
        let now = Instant::now();
        self.shared
            .table()
            .get(key)
            .filter(|e| e.is_live(now))
            .map(|e| (e.owner.clone(), e.expires_at))
    }

    /// Grants `key` if it is free; `Ok(Err(holder))` when it is held.
    ///
    /// # Errors
    /// [`LockError::ShutDown`] when this client was shut down meanwhile.
    #[allow(clippy::type_complexity)]
    fn try_grant(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<Result<LockHandle, (String, Option<Instant>)>, LockError> {
        let lease = options.lease();
        let now = Instant::now();
        let mut table = self.shared.table();
        if let Some(entry) = table.get(key).filter(|e| e.is_live(now)) {
            return Ok(Err((entry.owner.clone(), entry.expires_at)));
        }
        let owner = self.shared.owners.next_token();
        let expires_at = match lease {
            Lease::Watchdog => None,
            Lease::Fixed(d) => Some(now + d),
        };
        let state = LeaseState::new(expires_at);
        table.insert(
            key.to_owned(),
            Entry {
                owner: owner.clone(),
                expires_at,
                hold_until: Some(now + options.minimum_hold()).filter(|at| *at > now),
                state: state.clone(),
            },
        );
        drop(table);
        let token = self
            .shared
            .next_fencing_token
            .fetch_add(1, Ordering::Relaxed);
        let Some(id) = self
            .held
            .insert(state.clone(), (key.to_owned(), owner.clone()))
        else {
            let _ = self.shared.release(key, &owner);
            return Err(shut_down(key));
        };
        let release = MemoryRelease {
            shared: Arc::clone(&self.shared),
            held: Arc::clone(&self.held),
            id,
            key: key.to_owned(),
            owner: owner.clone(),
        };
        Ok(Ok(LockHandle::new(
            key,
            lease,
            owner,
            token,
            state,
            Box::new(release),
        )))
    }
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this mutex cannot leave the map half-updated (single inserts and
        // removes), so a poisoned lock is still consistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<String, VecDeque<u64>>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many fair waiters of `key` are queued ahead of `ticket` (all of them for a ticket not
    /// queued).
    fn waiters_ahead(&self, key: &str, ticket: u64) -> usize {
        self.queues().get(key).map_or(0, |queue| {
            queue
                .iter()
                .position(|t| *t == ticket)
                .unwrap_or(queue.len())
        })
    }

    fn release(&self, key: &str, owner: &str) -> ReleaseOutcome {
        let now = Instant::now();
        let mut table = self.table();
        let Some(entry) = table.get_mut(key).filter(|e| e.owner == owner) else {
            return ReleaseOutcome::NotHeld;
        };
        let outcome = if entry.is_live(now) {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        };
        match entry.hold_until.take().filter(|at| *at > now) {
            // Kept by its owner until the minimum hold ends (a fixed lease never ends sooner:
            // validation keeps the hold within it); waiters re-read the new expiry.
            Some(hold_until) if outcome == ReleaseOutcome::Released => {
                entry.expires_at = Some(hold_until);
            }
            _ => {
                table.remove(key);
            }
        }
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
        tokio::select! {
            biased;
            () = self.held.closed() => Err(shut_down(key)),
            result = self.acquire_open(key, options) => result,
        }
    }

    /// Releases the leases still held through this client; nothing runs in the background
    /// here, so nothing is ever pending.
    async fn shutdown(&self, _timeout: Duration) -> ShutdownSummary {
        let released = self
            .held
            .close()
            .into_iter()
            .filter(|(key, owner)| self.shared.release(key, owner) == ReleaseOutcome::Released)
            .count();
        ShutdownSummary::new(released, 0, 0)
    }
}

fn shut_down(key: &str) -> LockError {
    LockError::ShutDown {
        key: key.to_owned(),
    }
}

impl InMemoryLock {
    /// [`acquire_lease`](DistributedLock::acquire_lease) while this client is not shut down.
    async fn acquire_open(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        let wait = options.wait_override().unwrap_or(self.wait_time);
        if options.is_fair() {
            return self.acquire_fair(key, options, wait).await;
        }
        let started = Instant::now();
        let deadline = started + wait;
        loop {
            // Register for wake-ups before looking, so a release between the look and the wait
            // is not missed.
            let notified = self.shared.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (holder, expires_at) = match self.try_grant(key, options)? {
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

impl InMemoryLock {
    /// A fair acquisition: granted only to the front of the key's queue of fair waiters.
    async fn acquire_fair(
        &self,
        key: &str,
        options: AcquireOptions,
        wait: Duration,
    ) -> Result<LockHandle, LockError> {
        let started = Instant::now();
        let deadline = started + wait;
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed);
        // A zero wait never joins: it is granted only if nobody is queued.
        let _place = (!wait.is_zero()).then(|| QueuePlace::join(&self.shared, key, ticket));
        loop {
            let notified = self.shared.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let ahead = self.shared.waiters_ahead(key, ticket);
            let held = if ahead == 0 {
                match self.try_grant(key, options)? {
                    Ok(handle) => return Ok(handle),
                    Err(held) => Some(held),
                }
            } else {
                self.holder(key)
            };
            let now = Instant::now();
            if now >= deadline {
                let waited = now - started;
                let reason = match held {
                    Some((holder, expires_at)) => AcquireFailure::HeldByAnotherOwner {
                        holder,
                        ttl: expires_at.map(|at| at.saturating_duration_since(now)),
                        waited,
                    },
                    None => AcquireFailure::WaitersAhead {
                        ahead: ahead as u64,
                        waited,
                    },
                };
                return Err(LockError::AcquisitionFailed {
                    key: key.to_owned(),
                    reason,
                });
            }
            // Only the front waiter watches the holder's expiry; the others wait for it to leave.
            let wake_at = held
                .filter(|_| ahead == 0)
                .and_then(|(_, expires_at)| expires_at)
                .map_or(deadline, |at| at.min(deadline));
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }
}

/// A fair waiter's place in its key's queue; dropping it (granted, given up, or the future
/// dropped) leaves the queue and wakes the others, one of which may now be at the front.
struct QueuePlace {
    shared: Arc<Shared>,
    key: String,
    ticket: u64,
}

impl QueuePlace {
    fn join(shared: &Arc<Shared>, key: &str, ticket: u64) -> Self {
        shared
            .queues()
            .entry(key.to_owned())
            .or_default()
            .push_back(ticket);
        QueuePlace {
            shared: Arc::clone(shared),
            key: key.to_owned(),
            ticket,
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        let mut queues = self.shared.queues();
        if let Some(queue) = queues.get_mut(&self.key) {
            queue.retain(|t| *t != self.ticket);
            if queue.is_empty() {
                queues.remove(&self.key);
            }
        }
        drop(queues);
        self.shared.released.notify_waiters();
    }
}

#[derive(Debug)]
struct MemoryRelease {
    shared: Arc<Shared>,
    held: Arc<HeldLeases<(String, String)>>,
    /// This lease in `held`.
    id: u64,
    key: String,
    owner: String,
}

#[async_trait]
impl LeaseRelease for MemoryRelease {
    async fn release(self: Box<Self>) -> Result<ReleaseOutcome, LockError> {
        // Gone from `held`: shutdown released it already (and kept any minimum hold), so a
        // second release must not free the key early, just as a re-sent release finds it.
        if self.held.remove(self.id).is_none() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        Ok(self.shared.release(&self.key, &self.owner))
    }

    fn release_in_background(self: Box<Self>) {
        if self.held.remove(self.id).is_some() {
            let _ = self.shared.release(&self.key, &self.owner);
        }
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
                    .acquire_with(
                        "k",
                        AcquireOptions::default()
                            .wait_time(Duration::from_secs(60))
                            .unwrap(),
                    )
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
    async fn fair_waiters_are_granted_in_arrival_order_and_leave_no_queue() {
        let lock = InMemoryLock::new();
        let held = lock.acquire("k", Lease::Watchdog).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..5 {
            let (client, order) = (lock.clone(), Arc::clone(&order));
            waiters.push(tokio::spawn(async move {
                let options = AcquireOptions::new(Lease::Watchdog)
                    .wait_time(Duration::from_secs(60))
                    .unwrap()
                    .fair();
                let handle = client.acquire_with("k", options).await.unwrap();
                order.lock().unwrap().push(i);
                assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
            }));
            // Each waiter queues before the next one starts.
            while lock.shared.queues().get("k").map_or(0, VecDeque::len) < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        let options = AcquireOptions::new(Lease::Watchdog)
            .wait_time(Duration::ZERO)
            .unwrap()
            .fair();
        let err = lock.acquire_with("k", options).await.unwrap_err();
        assert_eq!(err.details()["reason"], "held_by_another_owner");
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
        assert!(lock.shared.queues().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_fair_try_is_refused_while_waiters_are_queued_even_when_the_lock_is_free() {
        let lock = InMemoryLock::new();
        let _place = QueuePlace::join(&lock.shared, "k", u64::MAX);
        let options = AcquireOptions::new(Lease::Watchdog)
            .wait_time(Duration::ZERO)
            .unwrap()
            .fair();
        let err = lock.acquire_with("k", options).await.unwrap_err();
        assert_eq!(err.details()["reason"], "waiters_ahead");
        assert_eq!(err.details()["waitersAhead"], "1");
        // A non-fair acquisition barges in.
        assert!(lock.try_acquire("k", Lease::Watchdog).await.is_ok());
    }

    /// `k` held on `lock` with a watchdog lease and a minimum hold of `hold`.
    async fn held_at_least(lock: &InMemoryLock, hold: Duration) -> LockHandle {
        let options = AcquireOptions::new(Lease::Watchdog)
            .hold_at_least(hold)
            .unwrap();
        lock.acquire_with("k", options).await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_within_the_minimum_hold_keeps_the_key_for_plain_and_fair_waiters() {
        let lock = InMemoryLock::new();
        let hold = Duration::from_secs(10);
        for options in [
            AcquireOptions::new(Lease::Watchdog)
                .wait_time(Duration::from_secs(60))
                .unwrap(),
            AcquireOptions::new(Lease::Watchdog)
                .wait_time(Duration::from_secs(60))
                .unwrap()
                .fair(),
        ] {
            let granted = Instant::now();
            let held = held_at_least(&lock, hold).await;
            let owner = held.owner().to_owned();
            let waiter = {
                let lock = lock.clone();
                tokio::spawn(async move { lock.acquire_with("k", options).await.unwrap() })
            };
            tokio::time::sleep(Duration::from_secs(4)).await;
            assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
            let error = lock.try_acquire("k", Lease::Watchdog).await.unwrap_err();
            assert_eq!(error.details()["holder"], owner);
            assert_eq!(error.details()["holderTtlMs"], "6000");
            let next = waiter.await.unwrap();
            assert_eq!(
                granted.elapsed(),
                hold,
                "granted when the hold ended, not later"
            );
            assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
        }
        // A release after the hold frees the key at once.
        let held = held_at_least(&lock, hold).await;
        tokio::time::sleep(hold).await;
        drop(held);
        assert!(lock.try_acquire("k", Lease::Watchdog).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_after_shutdown_does_not_end_the_minimum_hold_shutdown_kept() {
        let lock = InMemoryLock::new();
        let other = lock.clone(); // another client on the same keys
        let hold = Duration::from_secs(10);
        let held = held_at_least(&lock, hold).await;
        let summary = lock.shutdown(Duration::from_secs(1)).await;
        assert_eq!(summary.released, 1, "{summary:?}");
        // The handle's own release comes second: the key stays held for the rest of the hold.
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::NotHeld);
        assert!(other.try_acquire("k", Lease::Watchdog).await.is_err());
        tokio::time::sleep(hold).await;
        assert!(other.try_acquire("k", Lease::Watchdog).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reentrant_acquisition_ignores_its_minimum_hold_and_the_outer_one_applies() {
        use crate::lock::DistributedLockExt;
        let lock = InMemoryLock::new();
        let outer = AcquireOptions::new(Lease::Watchdog)
            .hold_at_least(Duration::from_secs(10))
            .unwrap();
        let granted = Instant::now();
        lock.with_lock("k", outer, || async {
            let nested = AcquireOptions::new(Lease::Watchdog)
                .hold_at_least(Duration::from_secs(100))
                .unwrap();
            let handle = lock.acquire_with("k", nested).await.unwrap();
            assert!(handle.is_reentrant());
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        })
        .await
        .unwrap();
        let error = lock.try_acquire("k", Lease::Watchdog).await.unwrap_err();
        assert_eq!(
            error.details()["holderTtlMs"],
            "10000",
            "the outer hold, from its grant"
        );
        let waiting = AcquireOptions::new(Lease::Watchdog)
            .wait_time(Duration::from_secs(60))
            .unwrap();
        let next = lock.acquire_with("k", waiting).await.unwrap();
        assert_eq!(granted.elapsed(), Duration::from_secs(10));
        drop(next);
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
