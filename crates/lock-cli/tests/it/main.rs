//! The `platform-lock` binary's integration tests against private redis-servers, one module per
//! behaviour, in one test binary: one link instead of one per file. None needs process-wide state
//! of its own: every test runs `platform-lock` (or the demo) as a child process of its own.

mod common;

mod cli;
mod demo_hold;
mod run_flush;
mod run_lease_end;
mod run_processes;
mod signals;
mod terminal;
