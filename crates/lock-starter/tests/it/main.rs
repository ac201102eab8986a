//! lock-starter's integration tests in one test binary: one link instead of one per file. The
//! shared parts, `config` and `http`, then a folder per capability, a module per behaviour.
//! Tests whose process-wide state other tests would disturb have binaries of their own: a
//! global log capture (`credentials` at `TRACE`, `fail_open` at `WARN`), a scoped capture of
//! call sites the configuration tests here also log (`config_logging`), and the real process
//! environment and working directory (`config_process_env`).

mod branches;
mod cache;
mod common;
mod config;
mod http;
mod idempotency;
mod lock;
mod rate_limit;
mod values;
