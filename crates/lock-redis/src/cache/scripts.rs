//! The Lua scripts of the cache (see the `.lua` files for KEYS, ARGV and replies);
//! every one puts `core/scripts/expiring_hash.lua` first.

use crate::core::scripts::{lua, scripts};

/// The Lua source of the script a put runs.
pub const CACHE_PUT_SCRIPT: &str = lua!(core "expiring_hash"; "put");
/// The Lua source of the script an invalidation runs.
pub const CACHE_INVALIDATE_SCRIPT: &str =
    lua!(flags = "allow-oom"; core "expiring_hash"; "invalidate");
/// The Lua source of the script a clear runs.
pub const CACHE_CLEAR_SCRIPT: &str = lua!(flags = "allow-oom"; core "expiring_hash"; "clear");

scripts! {
    put: CACHE_PUT_SCRIPT,
    invalidate: CACHE_INVALIDATE_SCRIPT,
    clear: CACHE_CLEAR_SCRIPT,
}
