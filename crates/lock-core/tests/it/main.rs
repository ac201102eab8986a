//! lock-core's integration tests on the in-memory lock, one module per behaviour, in one test
//! binary: one link instead of one per file. Tests that install a process-wide log capture, or
//! need tracing's per-call-site interest cache to themselves, have binaries of their own
//! (`fail_open`, `telemetry_span`).

mod branches;
mod conformance;
mod idempotency;
mod lease_state;
mod reentry;
mod telemetry;
