//! The Lua scripts of the cache (see the `.lua` files for KEYS, ARGV and replies);
//! every write puts `core/scripts/expiring_hash.lua` and `stamps.lua` first.

use crate::core::scripts::{lua, scripts};

/// The Lua source of the script that reads an entry for a load.
pub const CACHE_GET_MARKED_SCRIPT: &str = lua!(flags = "no-writes"; "get_marked");
/// The Lua source of the script a put runs.
pub const CACHE_PUT_SCRIPT: &str = lua!(core "expiring_hash"; "stamps", "put");
/// The Lua source of the script that stores a loaded value.
pub const CACHE_PUT_LOADED_SCRIPT: &str = lua!(core "expiring_hash"; "stamps", "put_loaded");
/// The Lua source of the script an invalidation runs.
pub const CACHE_INVALIDATE_SCRIPT: &str =
    lua!(flags = "allow-oom"; core "expiring_hash"; "stamps", "invalidate");
/// The Lua source of the script a clear runs.
pub const CACHE_CLEAR_SCRIPT: &str =
    lua!(flags = "allow-oom"; core "expiring_hash"; "stamps", "clear");

scripts! {
    get_marked: CACHE_GET_MARKED_SCRIPT,
    put: CACHE_PUT_SCRIPT,
    put_loaded: CACHE_PUT_LOADED_SCRIPT,
    invalidate: CACHE_INVALIDATE_SCRIPT,
    clear: CACHE_CLEAR_SCRIPT,
}
