//! The one back-off of this crate's retry loops — a queued or fair waiter retrying through an
//! outage, a background release, a failed `SSUBSCRIBE`, a Sentinel's `SUBSCRIBE`, following a
//! `+switch-master`, the first connection: exponential, doubling from `first` up to `max`, and
//! back to `first` after a success. (fred's own reconnect back-off is configured in
//! `connection.rs`.)

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `first` (at most `max`).
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        let first = first.min(max);
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The delay before the next retry; the one after it doubles, up to `max`.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (delay * 2).min(self.max);
        delay
    }

    /// After a success: the next failure waits `first` again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_maximum_and_starts_over_after_a_reset() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(100), ms(350));
        let delays: Vec<_> = (0..4).map(|_| backoff.next_delay()).collect();
        assert_eq!(delays, [ms(100), ms(200), ms(350), ms(350)]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), ms(100));
        assert_eq!(Backoff::new(ms(500), ms(200)).next_delay(), ms(200));
    }
}
