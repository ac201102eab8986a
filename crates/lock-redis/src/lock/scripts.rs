//! The Lua scripts of the lock protocol (see the `.lua` files for KEYS, ARGV and replies).
//!
//! A Redis script cannot load another, so the functions the scripts share — the lock value's
//! grammar (`scripts/lock_value.lua`: every script that reads a lock key parses it there) and
//! the fair queue's (`scripts/fair_queue.lua`) — are put in front of each of them here, after
//! the `#!lua` flags line, which must come first.

use fred::types::scripts::Script;

/// The Lua source of the acquire script (KEYS, ARGV and replies are documented in its header):
/// for audits, and for benchmarks that run it with `redis-benchmark`.
pub const ACQUIRE_SCRIPT: &str = concat!(
    include_str!("scripts/lock_value.lua"),
    include_str!("scripts/acquire.lua")
);
/// The Lua source of the owner-checked release script.
pub const RELEASE_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/lock_value.lua"),
    include_str!("scripts/fair_queue.lua"),
    include_str!("scripts/release.lua")
);
/// The Lua source of the fair acquire script: grants in queue order, or keeps the caller's place.
pub const FAIR_ACQUIRE_SCRIPT: &str = concat!(
    include_str!("scripts/lock_value.lua"),
    include_str!("scripts/fair_queue.lua"),
    include_str!("scripts/fair_acquire.lua")
);
/// The Lua source of the script a fair waiter leaves its queue with.
pub const FAIR_LEAVE_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/lock_value.lua"),
    include_str!("scripts/fair_queue.lua"),
    include_str!("scripts/fair_leave.lua")
);
/// The Lua source of the batched watchdog renewal script.
pub const RENEW_SCRIPT: &str = include_str!("scripts/renew.lua");
/// The Lua source of the operators' forced release (`RedisLock::force_release`).
pub const FORCE_RELEASE_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/lock_value.lua"),
    include_str!("scripts/fair_queue.lua"),
    include_str!("scripts/force_release.lua")
);
/// The Lua source of the operators' read-only status script (`RedisLock::status`).
pub const STATUS_SCRIPT: &str = concat!(
    "#!lua flags=no-writes,allow-stale\n",
    include_str!("scripts/lock_value.lua"),
    include_str!("scripts/status.lua")
);

/// The start of the value lock_value.lua's `grant()` writes, `H|<fencing token>|<owner>` (the
/// grammar is declared there): what renew.lua expects at the key of each lease it renews.
pub(crate) fn held_prefix(token: u64, owner: &str) -> String {
    format!("H|{token}|{owner}")
}

/// The scripts, hashed once. `EVALSHA` with a reload on `NOSCRIPT` (after a `SCRIPT FLUSH`
/// or a failover to a server that never saw them), so a warm call is one round trip.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) fair_acquire: Script,
    pub(crate) fair_leave: Script,
    /// Operators' scripts: not preloaded, loaded on first use.
    pub(crate) force_release: Script,
    pub(crate) status: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: Script::from_lua(ACQUIRE_SCRIPT),
            release: Script::from_lua(RELEASE_SCRIPT),
            renew: Script::from_lua(RENEW_SCRIPT),
            fair_acquire: Script::from_lua(FAIR_ACQUIRE_SCRIPT),
            fair_leave: Script::from_lua(FAIR_LEAVE_SCRIPT),
            force_release: Script::from_lua(FORCE_RELEASE_SCRIPT),
            status: Script::from_lua(STATUS_SCRIPT),
        }
    }

    /// The scripts loaded when the lock is built: all but the operators'.
    pub(crate) fn preloaded(&self) -> Vec<Script> {
        [
            &self.acquire,
            &self.release,
            &self.renew,
            &self.fair_acquire,
            &self.fair_leave,
        ]
        .map(Clone::clone)
        .to_vec()
    }
}
