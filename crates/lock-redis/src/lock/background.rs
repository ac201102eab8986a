//! What a client's shutdown accounts for: the grants it holds ([`Grant`]) and its background
//! tasks in flight ([`Background`]: releases, fair queue leaves, and acquisitions, whose script
//! may be making a grant).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Why a release runs in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackgroundRelease {
    /// A handle was dropped: the lease was granted and should be freed now.
    Dropped,
    /// An acquisition failed, timed out or was cancelled after its script may have run: the
    /// grant may or may not exist.
    OutcomeUnknown,
    /// The client was shut down while the lease was held.
    ShutDown,
    /// An explicit release failed without a refusal, or was cancelled before its answer: it is
    /// sent again until Redis confirms it.
    Unconfirmed,
}

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
pub(crate) struct Counts {
    pub(crate) running: usize,
    pub(crate) released: usize,
    pub(crate) failed: usize,
}

impl Background {
    pub(crate) fn counts(&self) -> MutexGuard<'_, Counts> {
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

    /// Waits until no background task runs, or until `deadline`, and returns the counts as it
    /// found them then. Read later, they could count a task that started meanwhile: an
    /// acquisition begun after a shutdown closed the table, which gives up without sending
    /// anything, would make a complete shutdown look unfinished.
    pub(crate) async fn idle_by(&self, deadline: Instant) -> Counts {
        loop {
            // Registered before the count is read, so a task ending in between still wakes us.
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            let counts = *self.counts();
            if counts.running == 0 {
                return counts;
            }
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep_until(deadline) => return *self.counts(),
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
