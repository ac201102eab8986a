//! The server's clock as a client knows it: an upper bound of the server's time now, from a
//! `TIME` reply and the local monotonic time since it was asked for.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How much faster the server's clock may run than the local one: 1 ms per second, far above
/// what NTP's slewing (0.5 ms per second) allows.
const DRIFT_PER_MS: u64 = 1000;
/// How old a reading may get before a read asks the server again.
pub(crate) const REFRESH: Duration = Duration::from_secs(10);

/// The server's time in ms, read after `sent`.
#[derive(Debug, Clone, Copy)]
struct Reading {
    sent: Instant,
    server_ms: u64,
}

impl Reading {
    /// The latest the server's time can be at `now`: the reading, plus the whole local time
    /// since it was asked for, plus drift, plus the millisecond `TIME` truncated.
    fn upper_bound(&self, now: Instant) -> u64 {
        let elapsed = u64::try_from((now - self.sent).as_millis()).unwrap_or(u64::MAX) + 1;
        self.server_ms
            .saturating_add(elapsed)
            .saturating_add(elapsed / DRIFT_PER_MS)
            .saturating_add(1)
    }
}

/// The newest reading of the server's clock: the least local time for the server's clock to
/// have jumped since.
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    reading: Mutex<Option<Reading>>,
}

impl ServerClock {
    /// Notes that the server's time was `server_ms` at some point after `sent`.
    pub(crate) fn record(&self, sent: Instant, server_ms: u64) {
        let mut reading = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        if reading.is_none_or(|old| sent >= old.sent) {
            *reading = Some(Reading { sent, server_ms });
        }
    }

    /// The latest the server's time can be now, and whether the reading is older than
    /// [`REFRESH`]; `None` before the first reading.
    pub(crate) fn upper_bound_now(&self) -> Option<(u64, bool)> {
        let reading = (*self.reading.lock().unwrap_or_else(|e| e.into_inner()))?;
        let now = Instant::now();
        Some((reading.upper_bound(now), now - reading.sent > REFRESH))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bound_grows_with_local_time_and_follows_the_newest_reading() {
        let clock = ServerClock::default();
        assert!(clock.upper_bound_now().is_none());
        let sent = Instant::now();
        clock.record(sent, 1_000_000);
        assert_eq!(clock.upper_bound_now(), Some((1_000_002, false)));
        tokio::time::advance(Duration::from_secs(20)).await;
        // 20 s and 1 ms since it was asked for, 20 ms of drift, 1 ms truncated.
        assert_eq!(clock.upper_bound_now(), Some((1_020_022, true)));
        // A newer reading replaces it, even one above the bound (the server's clock jumped);
        // an older one does not.
        clock.record(Instant::now(), 1_030_000);
        assert_eq!(clock.upper_bound_now(), Some((1_030_002, false)));
        clock.record(sent, 1_000_000);
        assert_eq!(clock.upper_bound_now(), Some((1_030_002, false)));
    }
}
