//! Shutting a lock client down before its process exits: release the leases it still holds,
//! wait for its background releases, and grant nothing more.
//!
//! A dropped [`LockHandle`](crate::lock::LockHandle) releases in the background; a process that drops
//! a handle and returns from `main` may end before that release reaches the backend, and the key
//! then stays held for its whole lease. [`DistributedLock::shutdown`](crate::lock::DistributedLock::shutdown)
//! closes that gap.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use crate::lock::handle::LeaseState;
use crate::lock::status::LostReason;

/// The bound of a shutdown when the caller does not choose one: 5 s. Enough for a release round
/// trip to a slow backend with room to spare (the default command timeout is 2 s), and well
/// inside the 30 s a Kubernetes pod gets between SIGTERM and SIGKILL by default.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a [`shutdown`](crate::lock::DistributedLock::shutdown) did before it returned.
///
/// # Examples
///
/// ```
/// use lock_core::lock::{DEFAULT_SHUTDOWN_TIMEOUT, DistributedLock, InMemoryLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock = InMemoryLock::new();
/// let forgotten = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
///
/// let summary = lock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
/// assert_eq!((summary.released, summary.pending, summary.failed), (1, 0, 0));
/// assert!(summary.is_complete());
/// assert_eq!(summary.to_string(), "1 lease(s) released, 0 still pending, 0 failed");
/// # drop(forgotten);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownSummary {
    /// Leases freed while the shutdown ran: those still held by live handles, and those whose
    /// background release (a dropped handle, an acquisition of unknown outcome) it waited for.
    /// A release that found the lease already ended is not counted.
    pub released: usize,
    /// Releases not finished when the timeout ran out, and acquisitions still in flight then
    /// (their grant, should one arrive, is handed back). They go on in the background while the
    /// process lives; if it exits first, those leases end at their TTL.
    pub pending: usize,
    /// Releases that failed for good (the backend refused, or stayed unreachable until the
    /// release gave up). Those leases end at their TTL.
    pub failed: usize,
}

impl ShutdownSummary {
    /// A summary: `released` freed, `pending` unfinished at the deadline, `failed` given up.
    /// For implementations of [`DistributedLock::shutdown`](crate::lock::DistributedLock::shutdown).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::ShutdownSummary;
    ///
    /// let summary = ShutdownSummary::new(3, 1, 0);
    /// assert_eq!(summary.pending, 1);
    /// assert!(!summary.is_complete()); // one release was still under way at the deadline
    /// ```
    pub const fn new(released: usize, pending: usize, failed: usize) -> Self {
        ShutdownSummary {
            released,
            pending,
            failed,
        }
    }

    /// Whether every release finished and none failed: nothing this client held stays held
    /// after it exits.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::ShutdownSummary;
    ///
    /// assert!(ShutdownSummary::new(2, 0, 0).is_complete());
    /// assert!(!ShutdownSummary::new(0, 0, 1).is_complete());
    /// ```
    pub const fn is_complete(&self) -> bool {
        self.pending == 0 && self.failed == 0
    }
}

impl fmt::Display for ShutdownSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} lease(s) released, {} still pending, {} failed",
            self.released, self.pending, self.failed
        )
    }
}

/// The leases one client holds, for its shutdown: an implementation registers every grant with
/// [`insert`](HeldLeases::insert) and takes it out with [`remove`](HeldLeases::remove) when the
/// holder releases it; its `shutdown` calls [`close`](HeldLeases::close), which refuses later
/// grants and hands over the leases still held, to be released.
///
/// Closing and registering take one mutex, so a grant racing a shutdown is either handed over
/// or refused, never missed.
///
/// # Examples
///
/// ```
/// use lock_core::lock::{HeldLeases, LeaseState, LostReason, LeaseStatus};
///
/// let held = HeldLeases::new();
/// let (first, second) = (LeaseState::new(None), LeaseState::new(None));
/// let id = held.insert(first.clone(), "bill-run:2026-11").expect("open");
/// held.insert(second.clone(), "msisdn-reaper").expect("open");
/// assert_eq!(held.remove(id), Some("bill-run:2026-11")); // its holder released it
///
/// // Shutdown: the rest is handed over, marked lost, and new grants are refused.
/// assert_eq!(held.close(), vec!["msisdn-reaper"]);
/// assert_eq!(second.status(), LeaseStatus::Lost(LostReason::ShutDown));
/// assert!(held.insert(LeaseState::new(None), "late grant").is_none());
/// assert!(held.is_closed());
/// ```
#[derive(Debug)]
pub struct HeldLeases<T> {
    table: Mutex<Table<T>>,
    closed: Notify,
}

#[derive(Debug)]
struct Table<T> {
    closed: bool,
    next_id: u64,
    leases: HashMap<u64, (LeaseState, T)>,
}

impl<T> Default for HeldLeases<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> HeldLeases<T> {
    /// An empty, open table.
    pub fn new() -> Self {
        HeldLeases {
            table: Mutex::new(Table {
                closed: false,
                next_id: 0,
                leases: HashMap::new(),
            }),
            closed: Notify::new(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table<T>> {
        // Single inserts and removes: a panic elsewhere cannot leave the table half-written.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a granted lease (its `state`, and what it takes to release it); returns the id
    /// to [`remove`](HeldLeases::remove) it with. `None` once closed: the grant must be handed
    /// back and the acquisition fail with [`LockError::ShutDown`](crate::LockError::ShutDown).
    pub fn insert(&self, state: LeaseState, lease: T) -> Option<u64> {
        let mut table = self.table();
        if table.closed {
            return None;
        }
        let id = table.next_id;
        table.next_id += 1;
        table.leases.insert(id, (state, lease));
        Some(id)
    }

    /// Takes lease `id` out because its holder releases it. `None` if the shutdown took it
    /// (and releases it) first.
    pub fn remove(&self, id: u64) -> Option<T> {
        self.table().leases.remove(&id).map(|(_, lease)| lease)
    }

    /// Number of leases registered and not yet removed or handed over.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::{HeldLeases, LeaseState};
    ///
    /// let held = HeldLeases::new();
    /// held.insert(LeaseState::new(None), ());
    /// assert_eq!(held.len(), 1);
    /// held.close();
    /// assert!(held.is_empty());
    /// ```
    pub fn len(&self) -> usize {
        self.table().leases.len()
    }

    /// Whether no lease is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`close`](HeldLeases::close) was called.
    pub fn is_closed(&self) -> bool {
        self.table().closed
    }

    /// Closes the table for good: later [`insert`](HeldLeases::insert)s are refused, and every
    /// lease still registered is marked lost ([`LostReason::ShutDown`], so its holder's
    /// [`lost()`](crate::lock::LockHandle::lost) fires before the key can pass to anyone else) and
    /// returned, for the caller to release. Wakes [`closed`](HeldLeases::closed) waiters.
    /// Closing again returns nothing.
    pub fn close(&self) -> Vec<T> {
        let leases: Vec<_> = {
            let mut table = self.table();
            table.closed = true;
            table.leases.drain().collect()
        };
        self.closed.notify_waiters();
        leases
            .into_iter()
            .map(|(_, (state, lease))| {
                state.mark_lost(LostReason::ShutDown);
                lease
            })
            .collect()
    }

    /// Completes once the table is closed: for an acquisition waiting for a held key, which
    /// should give up at once with [`LockError::ShutDown`](crate::LockError::ShutDown).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::lock::HeldLeases;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let held = Arc::new(HeldLeases::<()>::new());
    /// let waiter = tokio::spawn({
    ///     let held = Arc::clone(&held);
    ///     async move { held.closed().await }
    /// });
    /// tokio::task::yield_now().await;
    /// held.close();
    /// waiter.await.unwrap(); // woken by the close
    /// held.closed().await; // already closed: completes at once
    /// # }
    /// ```
    pub async fn closed(&self) {
        loop {
            // Registered before the flag is read, so a close in between still wakes us.
            let notified = self.closed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}
