//! lock-core's integration tests on the in-memory backends in one test binary: one link instead
//! of one per file, a folder per capability and a module per behaviour. Tests that install a
//! process-wide log capture, or need tracing's per-call-site interest cache to themselves, have
//! binaries of their own (`fail_open`, `telemetry_span`).

mod branches;
mod cache;
mod idempotency;
mod lock;
mod rate_limit;
mod values;
