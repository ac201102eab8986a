//! # lock-testkit: real Redis servers for tests
//!
//! A **dev-dependency only** crate: tests of the lock crates start a private, real `redis-server`
//! per test and inject faults into it, instead of mocking Redis.
//!
//! - [`RedisServer::start`] runs `redis-server` on a free `127.0.0.1` port with its own temp dir
//!   and no persistence, and returns once it answers. Tests may run in parallel (threads and
//!   processes); each gets its own server.
//! - Faults: [`pause`](RedisServer::pause) (SIGSTOP: connections stay open, nothing is answered),
//!   [`resume`](RedisServer::resume), [`kill`](RedisServer::kill) (SIGKILL: the port refuses
//!   connections), [`restart`](RedisServer::restart) (same port, empty dataset).
//! - [`cmd`](RedisServer::cmd) sends one command and returns the reply as text, for assertions
//!   such as `DBSIZE`, `PUBSUB NUMSUB` or `INFO commandstats`.
//! - Network faults: a [`FaultProxy`] (module [`proxy`]) between the client under test and the
//!   server adds latency, resets connections, partitions, refuses connections, or loses a reply.
//! - Dropping the server kills it and removes its temp dir; if the test process dies first, the
//!   kernel kills the server (Linux).
//! - Topologies of several processes: a [`RedisCluster`] (module [`cluster`]; three masters with
//!   one replica each, manual failover, master crash, slot migration) and a [`RedisSentinel`]
//!   (module [`sentinel`]; master, replica and three Sentinels, manual failover, master crash,
//!   a replica cut off from its master), each with the URL a cluster or Sentinel client takes.
//! - Topologies are costly to start: [`shared::Shared`] lets the tests of one binary take one
//!   in turn, the last stopping it.
//! - Logs: [`logs::CapturedLogs`] keeps what a test logged, to check a warning appears or a
//!   password does not; [`secrets`] has the test passwords and that check.
//! - Child processes: [`test_child`] starts the running test binary again for one ignored test,
//!   for a client in a process of its own (killed with `SIGKILL`, or left to exit).
//! - Helpers for the tests themselves: time bounds for a loaded machine ([`SLACK`],
//!   [`GENEROUS`] and their kin), [`eventually`], [`command_calls`], replayable seeds and
//!   unique names ([`seed`], [`Rng`], [`unique_suffix`]).
//! - TLS: [`TestCertificates`] (module [`tls`]) makes a CA and a server certificate;
//!   [`RedisServerBuilder::tls`] opens a TLS port next to the plain one
//!   ([`RedisServer::tls_url`]).
//!
//! `redis-server` must be installed (`apt-get install -y redis-server`, or `scripts/test.sh`).
//! With the `docker` feature, servers run in Docker containers when an engine answers; see
//! [`Backend`].
//!
//! ```no_run
//! use lock_testkit::RedisServer;
//!
//! #[tokio::test]
//! async fn a_restart_loses_every_key() -> Result<(), Box<dyn std::error::Error>> {
//!     let mut redis = RedisServer::start().await?;
//!     let url = redis.url(); // "redis://127.0.0.1:<port>": hand this to the client under test
//!
//!     redis.cmd(&["SET", "lock:bill-run", "owner-1"]).await?;
//!     assert_eq!(redis.cmd(&["DBSIZE"]).await?, "1");
//!
//!     redis.kill().await?; // connections to `url` are now refused
//!     redis.restart().await?; // same port, empty
//!     assert_eq!(redis.cmd(&["DBSIZE"]).await?, "0");
//!     # let _ = url;
//!     Ok(())
//! } // dropped: the server is killed, its temp dir removed
//! # fn main() {}
//! ```
//!
//! ## Proving a lock under faults
//!
//! Three modules check a lock the way coordination systems are checked (Jepsen-style): every
//! process of a fault test records what it invoked and what came back into a [`history`]
//! ([`history::Recorder`], one JSON-lines file per process, timestamps on the host's shared
//! `CLOCK_MONOTONIC` in ns); critical sections write to the [`fenced`] reference resource
//! ([`fenced::FencedResource`], a per-key register shared by processes through files that
//! accepts only strictly increasing fencing tokens); after the run, [`checker::check`] reads the
//! merged history ([`history::load`]) and the resource's accepted-write log and reports
//! duplicate or misordered tokens, acknowledged writes lost or applied twice, stale writes
//! accepted, two processes believing they held a key at once (explained by `lost()` or by the
//! fence, or not), and failures without an allowed error code. These modules do not need Redis.

mod bounds;
pub mod checker;
mod child;
mod closed;
pub mod cluster;
mod commandstats;
mod error;
mod eventually;
pub mod fenced;
pub mod history;
mod local;
pub mod logs;
pub mod metrics;
pub mod proxy;
mod random;
mod resp;
pub mod secrets;
pub mod sentinel;
mod server;
pub mod shared;
pub mod tls;

#[cfg(feature = "docker")]
mod docker;

pub use bounds::{FAILOVER, GENEROUS, PROCESS_SLACK, SLACK};
pub use child::test_child;
pub use closed::ClosedPort;
pub use cluster::{RedisCluster, RedisClusterBuilder};
pub use commandstats::command_calls;
pub use error::{BACKEND_ENV, BINARY_ENV, TestkitError};
pub use eventually::eventually;
pub use proxy::{FaultProxy, TrapAction};
pub use random::{Rng, seed, unique_suffix};
pub use sentinel::{RedisSentinel, RedisSentinelBuilder};
pub use server::{
    Backend, COMMAND_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, RedisServer, RedisServerBuilder, command_at,
};
pub use tls::TestCertificates;
