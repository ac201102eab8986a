//! The Lua scripts of the master/sub locks (see the `.lua` files for KEYS, ARGV and replies),
//! hashed once and sent with `EVALSHA`, reloaded on `NOSCRIPT` — as the lock's are.
//!
//! `pending_ids.lua` declares the record's fields and the function listing its pending
//! branches; it is put in front of the two scripts that use it, after the `#!lua` flags line,
//! which must come first.

use crate::core::scripts::{lua, scripts};

/// The Lua source of the script a master opens its invocation's record with.
pub const BRANCH_OPEN_SCRIPT: &str = lua!("open");
/// The Lua source of the script a producer registers a branch with.
pub const BRANCH_REGISTER_SCRIPT: &str = lua!("register");
/// The Lua source of the script a consumer releases a branch with.
pub const BRANCH_RELEASE_SCRIPT: &str = lua!(flags = "allow-oom"; "release");
/// The Lua source of the script a master seals its invocation with when its block returns.
pub const BRANCH_SEAL_SCRIPT: &str = lua!(flags = "allow-oom"; "pending_ids", "seal");
/// The Lua source of the read-only script a waiting master re-reads its pending branches with.
pub const BRANCH_PENDING_SCRIPT: &str = lua!(flags = "no-writes"; "pending_ids", "pending");

scripts! {
    open: BRANCH_OPEN_SCRIPT,
    register: BRANCH_REGISTER_SCRIPT,
    release: BRANCH_RELEASE_SCRIPT,
    seal: BRANCH_SEAL_SCRIPT,
    pending: BRANCH_PENDING_SCRIPT,
}
