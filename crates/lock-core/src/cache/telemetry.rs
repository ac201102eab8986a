//! The cache's `metrics`, recorded by [`Cache`](crate::cache::Cache) for every backend.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`HITS_TOTAL`] | counter | `cache`, `tier` |
//! | [`MISSES_TOTAL`] | counter | `cache` |
//! | [`LOADS_TOTAL`] | counter | `cache`, `outcome` |
//! | [`LOAD_SECONDS`] | histogram | `cache` |
//! | [`UNDECODABLE_TOTAL`] | counter | `cache` |
//! | [`UNCACHED_TOTAL`] | counter | `cache`, `reason` |
//!
//! The cache's name is a label, its keys never are.

use metrics::{Counter, Histogram};

use crate::metric::metric_name;

/// Counter of reads served from the cache by `cache` and `tier`: `near` (in process) or
/// `shared` (the store).
pub const HITS_TOTAL: &str = metric_name!("cache", "hits_total");
/// Counter of reads that found no live entry, by `cache`.
pub const MISSES_TOTAL: &str = metric_name!("cache", "misses_total");
/// Counter of loader runs by `cache` and `outcome`: `loaded`, `failed` or `panicked`.
pub const LOADS_TOTAL: &str = metric_name!("cache", "loads_total");
/// Histogram of seconds a loader ran, by `cache`.
pub const LOAD_SECONDS: &str = metric_name!("cache", "load_seconds");
/// Counter of stored entries that did not deserialize (read as misses), by `cache`.
pub const UNDECODABLE_TOTAL: &str = metric_name!("cache", "undecodable_total");
/// Counter of values returned but not cached by `cache` and `reason`: `unavailable` (the store
/// failed), `oversize` (above the value cap) or `unserializable` (a loaded value that does not
/// serialize as JSON).
pub const UNCACHED_TOTAL: &str = metric_name!("cache", "uncached_total");

/// One cache's metric handles, registered once.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    pub(crate) hit_near: Counter,
    pub(crate) hit_shared: Counter,
    pub(crate) miss: Counter,
    pub(crate) loaded: Counter,
    pub(crate) load_failed: Counter,
    pub(crate) load_panicked: Counter,
    pub(crate) load_seconds: Histogram,
    pub(crate) undecodable: Counter,
    pub(crate) unavailable: Counter,
    pub(crate) oversize: Counter,
    pub(crate) unserializable: Counter,
}

impl Metrics {
    pub(crate) fn new(cache: &str) -> Self {
        let cache = cache.to_owned();
        let load = |outcome: &'static str| metrics::counter!(LOADS_TOTAL, "cache" => cache.clone(), "outcome" => outcome);
        let uncached = |reason: &'static str| metrics::counter!(UNCACHED_TOTAL, "cache" => cache.clone(), "reason" => reason);
        Metrics {
            hit_near: metrics::counter!(HITS_TOTAL, "cache" => cache.clone(), "tier" => "near"),
            hit_shared: metrics::counter!(HITS_TOTAL, "cache" => cache.clone(), "tier" => "shared"),
            miss: metrics::counter!(MISSES_TOTAL, "cache" => cache.clone()),
            loaded: load("loaded"),
            load_failed: load("failed"),
            load_panicked: load("panicked"),
            load_seconds: metrics::histogram!(LOAD_SECONDS, "cache" => cache.clone()),
            undecodable: metrics::counter!(UNDECODABLE_TOTAL, "cache" => cache.clone()),
            unavailable: uncached("unavailable"),
            oversize: uncached("oversize"),
            unserializable: uncached("unserializable"),
        }
    }
}
