//! The generic cell rate algorithm, in microseconds of one clock. Backends that run it
//! elsewhere (a Redis script) follow these steps.

use std::time::Duration;

use crate::rate_limit::port::Verdict;
use crate::rate_limit::quota::Quota;

/// A key's state: its theoretical arrival time and the emission interval it was charged at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct State {
    /// When the key is at rest again, µs.
    pub(crate) tat: f64,
    /// The emission interval of the last charge, µs.
    pub(crate) interval: f64,
}

/// Rounding room, µs: a decision is not flipped by the last bits of a float.
const EPSILON: f64 = 0.5;

/// The verdict for `cost` of `quota` at `now`, and the new state if it is charged.
pub(crate) fn decide(
    now: f64,
    state: Option<State>,
    quota: &Quota,
    cost: u32,
) -> (Verdict, Option<State>) {
    let interval = quota.emission_interval_micros();
    // Owed time, converted to the new interval: the requests owed stay owed.
    let tat = match state {
        Some(State { tat, interval: old }) if tat > now => {
            if old == interval {
                tat
            } else {
                now + (tat - now) * interval / old
            }
        }
        _ => now,
    };
    let capacity = f64::from(quota.burst()) * interval;
    let new_tat = tat + f64::from(cost) * interval;
    let allowed = new_tat - now <= capacity + EPSILON;
    let left = |at: f64| {
        ((now + capacity - at) / interval + EPSILON / interval)
            .floor()
            .max(0.0)
    };
    let micros = |us: f64| Duration::from_micros(us.max(0.0).ceil() as u64);
    if allowed {
        let charged = (cost > 0).then_some(State {
            tat: new_tat,
            interval,
        });
        let verdict = Verdict {
            allowed,
            remaining: left(new_tat) as u32,
            retry_after: Duration::ZERO,
            reset_after: micros(new_tat - now),
        };
        (verdict, charged)
    } else {
        let verdict = Verdict {
            allowed,
            remaining: left(tat) as u32,
            retry_after: micros(new_tat - now - capacity),
            reset_after: micros(tat - now),
        };
        (verdict, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(text: &str, burst: u32) -> Quota {
        text.parse::<Quota>().unwrap().with_burst(burst).unwrap()
    }

    #[test]
    fn a_burst_then_one_per_interval() {
        let q = quota("10/1s", 3);
        let mut state = None;
        for remaining in [2, 1, 0] {
            let (verdict, next) = decide(0.0, state, &q, 1);
            assert!(verdict.allowed);
            assert_eq!(verdict.remaining, remaining);
            state = next;
        }
        let (denied, unchanged) = decide(0.0, state, &q, 1);
        assert!(!denied.allowed);
        assert_eq!(unchanged, None);
        assert_eq!(denied.retry_after, Duration::from_millis(100));
        assert_eq!(denied.reset_after, Duration::from_millis(300));
        let (later, _) = decide(100_000.0, state, &q, 1);
        assert!(later.allowed);
        assert_eq!(later.remaining, 0);
    }

    #[test]
    fn owed_requests_stay_owed_under_a_new_quota() {
        let slow = quota("10/1s", 10);
        let (_, state) = decide(0.0, None, &slow, 6);
        // Raising the rate: the 6 owed are still owed, with more room.
        let (raised, _) = decide(0.0, state, &quota("100/1s", 20), 1);
        assert_eq!(raised.remaining, 13);
        // Lowering the burst below what is owed denies at once.
        let (lowered, _) = decide(0.0, state, &quota("10/1s", 5), 1);
        assert!(!lowered.allowed);
        assert_eq!(lowered.retry_after, Duration::from_millis(200));
    }

    #[test]
    fn a_zero_cost_reads_without_charging() {
        let q = quota("10/1s", 3);
        let (verdict, state) = decide(0.0, None, &q, 0);
        assert!(verdict.allowed);
        assert_eq!(verdict.remaining, 3);
        assert_eq!(state, None);
    }
}
