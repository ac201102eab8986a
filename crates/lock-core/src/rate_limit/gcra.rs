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

/// The longest a state may owe, µs: [`MAX_PERIOD`](crate::rate_limit::MAX_PERIOD).
pub(crate) const MAX_OWED: f64 = 30.0 * 24.0 * 3600.0 * 1e6;
/// The most a state this algorithm wrote may owe: [`MAX_OWED`] and a charge's rounding room. A
/// state beyond it is not one this algorithm wrote, and counts as at rest.
const MOST_OWED_WRITTEN: f64 = MAX_OWED + 2.0 * EPSILON;

/// A decision: the verdict, and the state to keep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Decided {
    pub(crate) verdict: Verdict,
    /// The state after the charge, when it is admitted and costs something.
    pub(crate) charged: Option<State>,
    /// The state re-expressed in the quota's interval, when it was charged at another one: kept
    /// when the charge is not made, so that what is owed outlives the old interval's TTL.
    pub(crate) converted: Option<State>,
}

/// The verdict for `cost` of `quota` at `now`, and the state to keep.
pub(crate) fn decide(now: f64, state: Option<State>, quota: &Quota, cost: u32) -> Decided {
    let interval = quota.emission_interval_micros();
    let mut converted = None;
    let tat = match state {
        Some(State { tat, interval: old })
            if tat > now && tat - now <= MOST_OWED_WRITTEN && (1.0..=MAX_OWED).contains(&old) =>
        {
            if old == interval {
                tat
            } else {
                // Owed time, converted to the new interval: the requests owed stay owed.
                let tat = now + ((tat - now) * interval / old).min(MAX_OWED);
                converted = Some(State { tat, interval });
                tat
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
        let verdict = Verdict {
            allowed,
            remaining: left(new_tat) as u32,
            retry_after: Duration::ZERO,
            reset_after: micros(new_tat - now),
        };
        let charged = (cost > 0).then_some(State {
            tat: new_tat,
            interval,
        });
        Decided {
            verdict,
            charged,
            converted,
        }
    } else {
        let verdict = Verdict {
            allowed,
            remaining: left(tat) as u32,
            retry_after: micros(new_tat - now - capacity),
            reset_after: micros(tat - now),
        };
        Decided {
            verdict,
            charged: None,
            converted,
        }
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
            let decided = decide(0.0, state, &q, 1);
            assert!(decided.verdict.allowed);
            assert_eq!(decided.verdict.remaining, remaining);
            state = decided.charged;
        }
        let Decided {
            verdict: denied,
            charged,
            converted,
        } = decide(0.0, state, &q, 1);
        assert!(!denied.allowed);
        assert_eq!((charged, converted), (None, None));
        assert_eq!(denied.retry_after, Duration::from_millis(100));
        assert_eq!(denied.reset_after, Duration::from_millis(300));
        let later = decide(100_000.0, state, &q, 1).verdict;
        assert!(later.allowed);
        assert_eq!(later.remaining, 0);
    }

    #[test]
    fn a_burst_spanning_the_longest_period_is_never_taken_for_a_foreign_state() {
        // 73 per 720 h: the whole burst owes 720 h, plus the rounding room of its last charge.
        let q = quota("73/720h", 73);
        for now in [0.0, 1.0, 1.7e15] {
            let mut state = None;
            let mut admitted = 0;
            for _ in 0..83 {
                let decided = decide(now, state, &q, 1);
                admitted += u32::from(decided.verdict.allowed);
                state = decided.charged.or(state);
            }
            assert_eq!(admitted, 73, "at {now}");
        }
    }

    #[test]
    fn owed_requests_stay_owed_under_a_new_quota() {
        let slow = quota("10/1s", 10);
        let state = decide(0.0, None, &slow, 6).charged;
        // Raising the rate: the 6 owed are still owed, with more room.
        let raised = decide(0.0, state, &quota("100/1s", 20), 1).verdict;
        assert_eq!(raised.remaining, 13);
        // Lowering the burst below what is owed denies at once.
        let lowered = decide(0.0, state, &quota("10/1s", 5), 1).verdict;
        assert!(!lowered.allowed);
        assert_eq!(lowered.retry_after, Duration::from_millis(200));
        // Lowering the rate: the denial keeps the owed time in the new interval.
        let kept = decide(0.0, state, &quota("1/1s", 1), 1);
        assert!(!kept.verdict.allowed);
        assert_eq!(
            kept.converted,
            Some(State {
                tat: 6e6,
                interval: 1e6
            })
        );
        assert_eq!(
            decide(5e6, kept.converted, &quota("1/1s", 1), 1)
                .verdict
                .retry_after,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn a_zero_cost_reads_without_charging() {
        let q = quota("10/1s", 3);
        let decided = decide(0.0, None, &q, 0);
        assert!(decided.verdict.allowed);
        assert_eq!(decided.verdict.remaining, 3);
        assert_eq!(decided.charged, None);
    }

    #[test]
    fn a_state_no_quota_writes_is_at_rest() {
        let q = quota("10/1s", 3);
        for tat in [f64::INFINITY, 1e300, MOST_OWED_WRITTEN + 1.0] {
            let decided = decide(0.0, Some(State { tat, interval: 1e5 }), &q, 1);
            assert!(decided.verdict.allowed, "{tat}");
        }
        let nan_interval = decide(
            0.0,
            Some(State {
                tat: 1e6,
                interval: f64::NAN,
            }),
            &q,
            1,
        );
        assert!(nan_interval.verdict.allowed);
    }
}
