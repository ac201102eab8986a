//! The Lua scripts of the lock protocol (see the `.lua` files for KEYS, ARGV and replies).
//!
//! A Redis script cannot load another, so the functions the scripts share — the lock value's
//! grammar (`scripts/lock_value.lua`: every script that reads a lock key parses it there) and
//! the fair queue's (`scripts/fair_queue.lua`) — are put in front of each of them here, after
//! the `#!lua` flags line, which must come first.

use crate::core::scripts::{lua, scripts};

/// The Lua source of the acquire script (KEYS, ARGV and replies are documented in its header):
/// for audits, and for benchmarks that run it with `redis-benchmark`.
pub const ACQUIRE_SCRIPT: &str = lua!("lock_value", "acquire");
/// The Lua source of the owner-checked release script.
pub const RELEASE_SCRIPT: &str = lua!(flags = "allow-oom"; "lock_value", "fair_queue", "release");
/// The Lua source of the fair acquire script: grants in queue order, or keeps the caller's place.
pub const FAIR_ACQUIRE_SCRIPT: &str = lua!("lock_value", "fair_queue", "fair_acquire");
/// The Lua source of the script a fair waiter leaves its queue with.
pub const FAIR_LEAVE_SCRIPT: &str =
    lua!(flags = "allow-oom"; "lock_value", "fair_queue", "fair_leave");
/// The Lua source of the batched watchdog renewal script.
pub const RENEW_SCRIPT: &str = lua!("renew");
/// The Lua source of the operators' forced release (`RedisLock::force_release`).
pub const FORCE_RELEASE_SCRIPT: &str =
    lua!(flags = "allow-oom"; "lock_value", "fair_queue", "force_release");
/// The Lua source of the operators' read-only status script (`RedisLock::status`).
pub const STATUS_SCRIPT: &str = lua!(flags = "no-writes,allow-stale"; "lock_value", "status");

/// The start of the value lock_value.lua's `grant()` writes, `H|<fencing token>|<owner>` (the
/// grammar is declared there): what renew.lua expects at the key of each lease it renews.
pub(crate) fn held_prefix(token: u64, owner: &str) -> String {
    format!("H|{token}|{owner}")
}

scripts! {
    acquire: ACQUIRE_SCRIPT,
    release: RELEASE_SCRIPT,
    renew: RENEW_SCRIPT,
    fair_acquire: FAIR_ACQUIRE_SCRIPT,
    fair_leave: FAIR_LEAVE_SCRIPT;
    /// An operators' script: not preloaded, loaded on first use.
    force_release: FORCE_RELEASE_SCRIPT,
    /// An operators' script: not preloaded, loaded on first use.
    status: STATUS_SCRIPT,
}
