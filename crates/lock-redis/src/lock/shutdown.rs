//! The client's shutdown, [`Inner::shutdown`]: releases the grants it holds and waits for its
//! background tasks (see `background`).

use std::sync::Arc;
use std::time::Duration;

use lock_core::lock::ShutdownSummary;
use tokio::time::Instant;

use crate::lock::background::BackgroundRelease;
use crate::lock::inner::Inner;

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
        let after = self.background.idle_by(deadline).await;
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
