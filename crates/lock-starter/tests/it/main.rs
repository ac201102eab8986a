//! lock-starter's integration tests, one module per behaviour, in one test binary: one link
//! instead of one per file. Tests whose process-wide state other tests would disturb have
//! binaries of their own: a global log capture (`credentials` at `TRACE`, `fail_open` at `WARN`),
//! a scoped capture of call sites the configuration tests here also log (`config_logging`), and
//! the real process environment and working directory (`config_process_env`).

mod branches;
mod config;
mod http;
mod http_idempotency;
mod http_idempotency_callers;
mod http_idempotency_edges;
mod shutdown;
