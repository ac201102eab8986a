//! Support for the workspace-level tests: the stress runner that drives many real worker
//! processes against a private Redis while injecting faults, then checks the recorded history.
//!
//! The workers (`lock-worker`) depend on lock-starter alone, like a service; the controller uses
//! lock-testkit to run Redis, inject faults and check the history.

pub mod consumer;
pub mod stress;
