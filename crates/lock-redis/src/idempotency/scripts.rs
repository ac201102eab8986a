//! The Lua scripts of idempotent execution (see the `.lua` files for KEYS, ARGV and replies).

use crate::core::scripts::{lua, scripts};

/// The Lua source of the claim script: creates the in-progress record or reports the record.
pub const IDEMPOTENCY_CLAIM_SCRIPT: &str = lua!("claim");
/// The Lua source of the owner-checked renewal of an in-progress record.
pub const IDEMPOTENCY_RENEW_SCRIPT: &str = lua!("renew");
/// The Lua source of the owner-checked completion: stores the result, wakes the duplicates.
pub const IDEMPOTENCY_COMPLETE_SCRIPT: &str = lua!("complete");
/// The Lua source of the owner-checked abandonment: deletes the record, wakes the duplicates.
/// Allowed under `maxmemory` pressure: it only frees memory.
pub const IDEMPOTENCY_ABANDON_SCRIPT: &str = lua!(flags = "allow-oom"; "abandon");
/// The Lua source of the owner-checked failure mark: the duplicates that waited get the failure.
pub(crate) const IDEMPOTENCY_FAIL_SCRIPT: &str = lua!("fail");
/// The Lua source of the script that forgets a completed result.
pub const IDEMPOTENCY_FORGET_SCRIPT: &str = lua!(flags = "allow-oom"; "forget");

scripts! {
    claim: IDEMPOTENCY_CLAIM_SCRIPT,
    renew: IDEMPOTENCY_RENEW_SCRIPT,
    complete: IDEMPOTENCY_COMPLETE_SCRIPT,
    abandon: IDEMPOTENCY_ABANDON_SCRIPT,
    fail: IDEMPOTENCY_FAIL_SCRIPT,
    forget: IDEMPOTENCY_FORGET_SCRIPT,
}
