//! The faults a history records, as the toolkit checkers ask about them.

use std::collections::HashMap;

use lock_testkit::history::{Event, Op};

/// The data losses and worker crashes of one history.
#[derive(Debug, Default)]
pub struct Faults {
    /// Windows (from, to) in ns in which Redis may have lost data.
    losses: Vec<(u64, u64)>,
    /// When each process was killed or stopped.
    crashes: HashMap<String, Vec<u64>>,
}

/// The process name of a data loss's `Crash` event.
pub const REDIS: &str = "redis";

impl Faults {
    /// The faults `events` record: `Crash` events of `redis` (their `value` the window's start)
    /// and of the workers.
    pub fn new(events: &[Event]) -> Faults {
        let mut faults = Faults::default();
        for event in events.iter().filter(|e| e.op == Op::Crash) {
            if event.process == REDIS {
                let from = event.value.map_or(event.t_ns, |v| v as u64);
                faults.losses.push((from, event.t_ns));
            } else {
                faults
                    .crashes
                    .entry(event.process.clone())
                    .or_default()
                    .push(event.t_ns);
            }
        }
        faults
    }

    /// Whether Redis may have lost data between `from` and `to` (ns).
    pub fn lost_between(&self, from: u64, to: u64) -> bool {
        self.losses.iter().any(|&(a, b)| a < to && b > from)
    }

    /// The start of the first loss window that ends after `t`, if any.
    pub fn next_loss_after(&self, t: u64) -> Option<u64> {
        self.losses
            .iter()
            .filter(|&&(_, b)| b > t)
            .map(|&(a, _)| a)
            .min()
    }

    /// Whether `process` was killed or stopped between `from` and `to` (ns).
    pub fn crashed_between(&self, process: &str, from: u64, to: u64) -> bool {
        self.crashes
            .get(process)
            .is_some_and(|ts| ts.iter().any(|&t| t >= from && t <= to))
    }

    /// Why something `process` began at `from` could be overtaken at `to`: it was killed or
    /// stopped in between, or Redis lost data; `None` when neither happened.
    pub fn explain(&self, process: &str, from: u64, to: u64) -> Option<&'static str> {
        if self.crashed_between(process, from, to) {
            Some("its process was killed or stopped")
        } else if self.lost_between(from, to) {
            Some("Redis lost data")
        } else {
            None
        }
    }
}
