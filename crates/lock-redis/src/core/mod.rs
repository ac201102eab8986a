//! The shared Redis core: what every capability of this crate stands on, so that they share
//! one connection rather than opening their own.
//!
//! - `connection`: the command and pub/sub clients, TLS, health ("unreachable" vs "slow") and
//!   reconnection;
//! - `sentinel_events`: following a Sentinel failover (`+switch-master`) on both connections;
//! - `subscriptions`: sharded pub/sub channels shared by every waiter of a client, re-established
//!   after reconnects;
//! - `watch`: a change watch on one of those channels, failing when the connection is lost;
//! - `batch`: calls made together sent as one command (the cache's reads, rate-limit
//!   decisions);
//! - `keys`: the key layout, every key of one name sharing one hash tag;
//! - `address`: the one Redis address type, [`RedisAddress`](crate::RedisAddress), parsed once;
//! - `redact`: the one redactor of secrets in addresses and free text;
//! - `error`: what went wrong talking to Redis ([`RedisFailure`](crate::RedisFailure));
//! - `backoff`: the one retry back-off.
//!
//! Scripts are fred's `Script`, sent with `EVALSHA` and reloaded on `NOSCRIPT`; each capability
//! keeps its own set next to it.

pub(crate) mod address;
pub(crate) mod backoff;
pub(crate) mod batch;
pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod connection;
pub(crate) mod error;
pub(crate) mod keys;
pub(crate) mod redact;
pub(crate) mod scripts;
pub(crate) mod sentinel_events;
pub(crate) mod subscriptions;
pub(crate) mod watch;
