//! The Lua scripts of idempotent execution (see the `.lua` files for KEYS, ARGV and replies).

use fred::types::scripts::Script;

/// The Lua source of the claim script: creates the in-progress record or reports the record.
pub const IDEMPOTENCY_CLAIM_SCRIPT: &str = include_str!("scripts/claim.lua");
/// The Lua source of the owner-checked renewal of an in-progress record.
pub const IDEMPOTENCY_RENEW_SCRIPT: &str = include_str!("scripts/renew.lua");
/// The Lua source of the owner-checked completion: stores the result, wakes the duplicates.
pub const IDEMPOTENCY_COMPLETE_SCRIPT: &str = include_str!("scripts/complete.lua");
/// The Lua source of the owner-checked abandonment: deletes the record, wakes the duplicates.
/// Allowed under `maxmemory` pressure: it only frees memory.
pub const IDEMPOTENCY_ABANDON_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/abandon.lua")
);
/// The Lua source of the owner-checked failure mark: the duplicates that waited get the failure.
pub(crate) const IDEMPOTENCY_FAIL_SCRIPT: &str = include_str!("scripts/fail.lua");
/// The Lua source of the script that forgets a completed result.
pub const IDEMPOTENCY_FORGET_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/forget.lua")
);

/// The scripts, hashed once; `EVALSHA` with a reload on `NOSCRIPT`.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) claim: Script,
    pub(crate) renew: Script,
    pub(crate) complete: Script,
    pub(crate) abandon: Script,
    pub(crate) fail: Script,
    pub(crate) forget: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            claim: Script::from_lua(IDEMPOTENCY_CLAIM_SCRIPT),
            renew: Script::from_lua(IDEMPOTENCY_RENEW_SCRIPT),
            complete: Script::from_lua(IDEMPOTENCY_COMPLETE_SCRIPT),
            abandon: Script::from_lua(IDEMPOTENCY_ABANDON_SCRIPT),
            fail: Script::from_lua(IDEMPOTENCY_FAIL_SCRIPT),
            forget: Script::from_lua(IDEMPOTENCY_FORGET_SCRIPT),
        }
    }

    /// Every script, to preload.
    pub(crate) fn all(&self) -> [&Script; 6] {
        [
            &self.claim,
            &self.renew,
            &self.complete,
            &self.abandon,
            &self.fail,
            &self.forget,
        ]
    }
}
