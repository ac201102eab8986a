//! lock-redis' integration tests against real redis-server processes (Sentinel and Cluster
//! included), in one test binary: one link instead of one per file. A folder per part of the
//! crate, `core` and then one per capability, and a module per behaviour in each.
//! Tests that install a process-wide log subscriber or capture have binaries of their own
//! (`behaviour`, `credentials`, `watchdog`, `debug_events`, `fred_logs`, `local_queue`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../sentinel_common/mod.rs"]
mod sentinel_common;

mod branches;
mod cache;
mod core;
mod idempotency;
mod lock;
mod rate_limit;
mod suites;
mod values;
