//! The client's shutdown: the grants it holds, its background tasks in flight (releases, fair
//! queue leaves, and acquisitions, whose script may be making a grant), and
//! [`Inner::shutdown`], which releases the former and waits for the latter.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::ShutdownSummary;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::inner::{BackgroundRelease, Inner};

/// One grant this client holds: what its release — by its handle or by a shutdown — needs.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) name: String,
    pub(crate) owner: String,
    /// The grant's fencing token.
    pub(crate) token: u64,
    /// The watchdog registration, for watchdog leases.
    pub(crate) renewal: Option<u64>,
    /// The key's TTL at grant: how long a background release is worth retrying.
    pub(crate) ttl: Duration,
}

/// The background tasks (releases, leaving a fair queue) and acquisitions in flight, and how
/// the releases that ended came out, so a shutdown can wait for them and count them.
#[derive(Debug, Default)]
pub(crate) struct Background {
    counts: Mutex<Counts>,
    idle: Notify,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    running: usize,
    released: usize,
    failed: usize,
}

impl Background {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        // Plain counters: a panic elsewhere cannot leave them half-written.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a background task as running until its ticket is done or dropped.
    pub(crate) fn start(self: &Arc<Self>) -> Ticket {
        self.counts().running += 1;
        Ticket {
            background: Arc::clone(self),
        }
    }

    /// Waits until no background task runs, or until `deadline`.
    async fn idle_by(&self, deadline: Instant) {
        loop {
            // Registered before the count is read, so a task ending in between still wakes us.
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.counts().running == 0 {
                return;
            }
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

/// A running background task; dropped unfinished (its runtime shutting down), it counts as
/// ended with no outcome.
#[derive(Debug)]
pub(crate) struct Ticket {
    background: Arc<Background>,
}

impl Ticket {
    /// The task ended: a release that freed the lease (`released`), one that failed for good
    /// (`failed`), or neither (the lease had ended; not a release).
    pub(crate) fn done(self, released: bool, failed: bool) {
        let mut counts = self.background.counts();
        counts.released += usize::from(released);
        counts.failed += usize::from(failed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let running = {
            let mut counts = self.background.counts();
            counts.running -= 1;
            counts.running
        };
        if running == 0 {
            self.background.idle.notify_waiters();
        }
    }
}

impl Inner {
    /// Refuses further grants, releases every lease still held (each handle's `lost()` fires
    /// first) and waits up to `timeout` for every background task, those releases included,
    /// and for every acquisition in flight: closing the table makes each give up (see
    /// `RedisLock::acquire_lease`), and one whose script may have made a grant hands it back
    /// in the background before it ends — that release is waited for and counted too. An
    /// acquisition or background task still running at the deadline counts as pending.
    pub(crate) async fn shutdown(self: &Arc<Self>, timeout: Duration) -> ShutdownSummary {
        let deadline = Instant::now() + timeout;
        let before = *self.background.counts();
        for grant in self.held.close() {
            if let Some(id) = grant.renewal {
                self.watchdog.unregister(id);
            }
            self.release_in_background(
                grant.name.clone(),
                grant.owner.clone(),
                Some(grant.token),
                BackgroundRelease::ShutDown,
                grant.ttl,
            );
        }
        self.background.idle_by(deadline).await;
        let after = *self.background.counts();
        let summary = ShutdownSummary::new(
            after.released - before.released,
            after.running,
            after.failed - before.failed,
        );
        if summary.is_complete() {
            tracing::debug!(%summary, "lock client shut down");
        } else {
            tracing::warn!(
                %summary,
                timeout_ms = timeout.as_millis() as u64,
                "lock client shut down with releases unfinished; those leases end at their TTL"
            );
        }
        summary
    }
}
