//! What a test recorded through the `metrics` facade, for asserting exact counts.
//!
//! ```
//! use lock_testkit::metrics::CapturedMetrics;
//!
//! let metrics = CapturedMetrics::new();
//! {
//!     let _local = metrics::set_default_local_recorder(metrics.recorder());
//!     metrics::counter!("jobs_total", "outcome" => "done").increment(2);
//! }
//! let taken = metrics.take();
//! assert_eq!(taken.counter("jobs_total", "outcome", "done"), 2);
//! taken.assert_counter("jobs_total", "outcome", "failed", 0);
//! ```
//!
//! Install the recorder as the thread's default
//! ([`metrics::set_default_local_recorder`]) in a test on a `current_thread` runtime, so every
//! task of the test — and nothing of another test — records into it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// A recorder keeping everything recorded into it until [`take`](Self::take)n.
pub struct CapturedMetrics {
    recorder: DebuggingRecorder,
    snapshotter: Snapshotter,
}

impl fmt::Debug for CapturedMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapturedMetrics").finish_non_exhaustive()
    }
}

impl Default for CapturedMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl CapturedMetrics {
    /// An empty capture.
    pub fn new() -> Self {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        CapturedMetrics {
            recorder,
            snapshotter,
        }
    }

    /// The recorder, for [`metrics::set_default_local_recorder`].
    pub fn recorder(&self) -> &DebuggingRecorder {
        &self.recorder
    }

    /// Everything recorded since the last `take` (counters as increments, histograms as the
    /// values recorded), and starts afresh.
    pub fn take(&self) -> Recorded {
        let mut recorded = Recorded::default();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            if matches!(value, DebugValue::Counter(_)) {
                recorded.series.insert(name.clone());
            }
            match value {
                DebugValue::Counter(n) if n > 0 => {
                    *recorded.counters.entry(name).or_default() += n;
                }
                DebugValue::Histogram(values) if !values.is_empty() => {
                    recorded
                        .histograms
                        .entry(name)
                        .or_default()
                        .extend(values.into_iter().map(|v| v.into_inner()));
                }
                _ => {}
            }
        }
        recorded
    }
}

/// Counter increments and histogram values recorded between two [`CapturedMetrics::take`]s,
/// keyed `name{label=value,…}` (labels sorted; `name{}` without labels).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Recorded {
    /// Counter increments by metric and labels; only non-zero ones.
    pub counters: BTreeMap<String, u64>,
    /// Histogram values by metric and labels.
    pub histograms: BTreeMap<String, Vec<f64>>,
    /// Every counter series registered, at 0 or not, by metric and labels.
    pub series: BTreeSet<String>,
}

impl Recorded {
    /// Adds `other`'s increments and values to these.
    pub fn merge(&mut self, other: Recorded) {
        for (k, n) in other.counters {
            *self.counters.entry(k).or_default() += n;
        }
        for (k, v) in other.histograms {
            self.histograms.entry(k).or_default().extend(v);
        }
        self.series.extend(other.series);
    }

    /// Asserts that counter `name` with exactly the labels `labels` (sorted, as
    /// [`counter_at`](Self::counter_at)) is registered, at 0 or not: an exporter shows it.
    #[track_caller]
    pub fn assert_registered(&self, name: &str, labels: &str) {
        let series = format!("{name}{{{labels}}}");
        assert!(
            self.series.contains(&series),
            "{series} is not registered; registered: {:#?}",
            self.series
        );
    }

    /// The increments of counter `name` with the one label `label=value`.
    pub fn counter(&self, name: &str, label: &str, value: &str) -> u64 {
        self.counter_at(name, &format!("{label}={value}"))
    }

    /// The increments of counter `name` with exactly the labels `labels`, sorted by name as
    /// they are recorded: `cache=products,tier=near`.
    pub fn counter_at(&self, name: &str, labels: &str) -> u64 {
        self.counters
            .get(&format!("{name}{{{labels}}}"))
            .copied()
            .unwrap_or(0)
    }

    /// The values recorded into histogram `name` with the one label `label=value`, or with no
    /// label when `label` is empty.
    pub fn histogram(&self, name: &str, label: &str, value: &str) -> &[f64] {
        let key = if label.is_empty() {
            format!("{name}{{}}")
        } else {
            format!("{name}{{{label}={value}}}")
        };
        self.histograms.get(&key).map_or(&[], Vec::as_slice)
    }

    /// Asserts that counter `name` with the one label `label=value` was incremented by exactly
    /// `expected`, showing everything recorded when it was not.
    #[track_caller]
    pub fn assert_counter(&self, name: &str, label: &str, value: &str, expected: u64) {
        let got = self.counter(name, label, value);
        assert_eq!(
            got, expected,
            "{name}{{{label}={value}}}; recorded: {self:#?}"
        );
    }

    /// Asserts that the counters named `name`, whatever their labels, add up to exactly
    /// `expected`, showing everything recorded when they do not.
    #[track_caller]
    pub fn assert_counter_total(&self, name: &str, expected: u64) {
        let got = self.counter_total(name);
        assert_eq!(got, expected, "{name} (all labels); recorded: {self:#?}");
    }

    /// The total of every counter named `name`, whatever its labels.
    pub fn counter_total(&self, name: &str) -> u64 {
        let prefix = format!("{name}{{");
        self.counters
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, n)| n)
            .sum()
    }
}
