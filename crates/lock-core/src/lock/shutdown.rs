//! What [`DistributedLock::shutdown`](crate::lock::DistributedLock::shutdown) reports, and the table
//! of held leases an implementation keeps for it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use crate::lock::handle::LeaseState;
use crate::lock::status::LostReason;

/// The usual bound of a shutdown: 5 s, room for a slow release round trip and well inside the
/// 30 s a Kubernetes pod gets between SIGTERM and SIGKILL.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a [`shutdown`](crate::lock::DistributedLock::shutdown) did before it returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownSummary {
    /// Leases freed while the shutdown ran: those still held, and those whose background release
    /// it waited for. A release that found the lease already ended is not counted.
    pub released: usize,
    /// Releases and acquisitions still under way at the timeout. They go on while the process
    /// lives; if it exits first, their leases end at their TTL.
    pub pending: usize,
    /// Releases that failed for good. Their leases end at their TTL.
    pub failed: usize,
}

impl ShutdownSummary {
    /// A summary, built by implementations of
    /// [`DistributedLock::shutdown`](crate::lock::DistributedLock::shutdown).
    pub const fn new(released: usize, pending: usize, failed: usize) -> Self {
        ShutdownSummary {
            released,
            pending,
            failed,
        }
    }

    /// Whether every release finished and none failed, so nothing this client held outlives it.
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

/// The leases one client holds, kept by an implementation for its shutdown.
///
/// Register every grant with [`insert`](HeldLeases::insert), take it out with
/// [`remove`](HeldLeases::remove) when its holder releases it, and [`close`](HeldLeases::close)
/// the table in `shutdown` to get the leases still held. A grant racing a shutdown is either
/// handed over or refused, never missed.
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

    /// Registers a granted lease and returns the id to [`remove`](HeldLeases::remove) it with.
    ///
    /// `None` once closed: hand the grant back and fail the acquisition with
    /// [`LockError::ShutDown`](crate::LockError::ShutDown).
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

    /// Takes lease `id` out as its holder releases it; `None` if the shutdown took it first.
    pub fn remove(&self, id: u64) -> Option<T> {
        self.table().leases.remove(&id).map(|(_, lease)| lease)
    }

    /// The number of leases registered and not yet removed or handed over.
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

    /// Closes the table for good and returns the leases still registered, for the caller to
    /// release.
    ///
    /// Later inserts are refused. Each returned lease is marked lost first
    /// ([`LostReason::ShutDown`]), so its holder learns of it before the key can pass to anyone
    /// else. Wakes [`closed`](HeldLeases::closed) waiters. Closing again returns nothing.
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

    /// Completes once the table is closed, so that a waiting acquisition can give up with
    /// [`LockError::ShutDown`](crate::LockError::ShutDown).
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
