//! The outage state of a capability that keeps answering while its store fails, deciding how
//! loudly each outage's start and end are logged.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Outages starting within this long of the last one logged at `WARN` are logged at `DEBUG`.
pub(crate) const QUIET_FOR: Duration = Duration::from_secs(60);

/// A store failing or answering, as successive calls find it.
///
/// # Contract
/// - A change is reported once: the first failure after an answer, the first answer after a
///   failure.
/// - An outage is loud (`WARN` at its start, `INFO` at its end) unless it starts within
///   [`QUIET_FOR`] of the last loud one: a store that fails every other call, or for one key
///   of many, is not logged per call.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// Whether an outage is in progress: read first, so that a call that changes nothing
    /// writes nothing shared.
    failing: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The outage in progress, and whether it is loud.
    current: Option<bool>,
    last_loud: Option<Instant>,
}

/// A change of [`Outage`], with whether to log it loudly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Started { loud: bool },
    Ended { loud: bool },
}

impl Outage {
    /// No outage yet; for a `static`.
    pub(crate) const fn new() -> Self {
        Outage {
            failing: AtomicBool::new(false),
            state: Mutex::new(State {
                current: None,
                last_loud: None,
            }),
        }
    }

    /// Notes a call that failed (`true`) or was answered; the change it makes, if any.
    pub(crate) fn note(&self, failed: bool) -> Option<Change> {
        if self.failing.load(Ordering::Relaxed) == failed {
            return None;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.failing.store(failed, Ordering::Relaxed);
        match (state.current, failed) {
            (None, true) => {
                let now = Instant::now();
                let loud = state.last_loud.is_none_or(|t| now - t >= QUIET_FOR);
                if loud {
                    state.last_loud = Some(now);
                }
                state.current = Some(loud);
                Some(Change::Started { loud })
            }
            (Some(loud), false) => {
                state.current = None;
                Some(Change::Ended { loud })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_flapping_store_is_loud_once_a_minute() {
        let outage = Outage::default();
        assert_eq!(outage.note(false), None);
        assert_eq!(outage.note(true), Some(Change::Started { loud: true }));
        assert_eq!(outage.note(true), None);
        assert_eq!(outage.note(false), Some(Change::Ended { loud: true }));
        for _ in 0..10 {
            assert_eq!(outage.note(true), Some(Change::Started { loud: false }));
            assert_eq!(outage.note(false), Some(Change::Ended { loud: false }));
        }
        tokio::time::advance(QUIET_FOR).await;
        assert_eq!(outage.note(true), Some(Change::Started { loud: true }));
        // A loud outage stays loud to its end, however long it lasts.
        tokio::time::advance(QUIET_FOR * 3).await;
        assert_eq!(outage.note(false), Some(Change::Ended { loud: true }));
    }
}
