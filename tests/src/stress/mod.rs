//! The stress runner: N worker processes loop acquire → fenced read-modify-write → release on one
//! key, a controller injects one kind of fault, and the checker judges the recorded history.
//!
//! `cargo test` runs a short scenario per fault (`tests/tests/faults.rs`); the `lock-stress`
//! binary runs longer ones and prints the table of docs/reliability.md.

mod fault;
mod run;
pub mod workload;

pub use fault::Fault;
pub use run::{RunResult, Scenario, TABLE_HEADER, TOOLKIT_HEADER, run};
pub use workload::{Context, Verdict, Workload};
