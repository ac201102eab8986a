//! The in-memory lock: conformance, re-entry, the lease state and metrics.

mod conformance;
mod lease_state;
mod reentry;
mod telemetry;
