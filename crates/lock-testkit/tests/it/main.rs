//! lock-testkit's integration tests, one module per helper it provides (real redis-server,
//! Sentinel and Cluster processes, the fault proxy, TLS, the history checker), in one test
//! binary: one link instead of one per file. Tests that need a process of their own re-run this
//! binary as a child process for one ignored test (`lock_testkit::test_child`).

mod common;

mod cluster;
mod history_checker;
mod logs;
mod proxy;
mod redis_server;
mod sentinel;
mod tls;
