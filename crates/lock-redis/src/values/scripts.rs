//! The Lua scripts of shared values (see the `.lua` files for KEYS, ARGV and replies).
//! `version.lua` holds the value grammar and versioning the value scripts put first,
//! The map scripts put `core/scripts/expiring_hash.lua` first.

use crate::core::scripts::{lua, scripts};

/// The Lua source of the script every set runs.
pub const VALUE_SET_SCRIPT: &str = lua!("version", "set");
/// The Lua source of the script every delete runs.
pub const VALUE_DELETE_SCRIPT: &str = lua!(flags = "allow-oom"; "version", "delete");

/// The Lua source of the script a map's put runs.
pub const MAP_PUT_SCRIPT: &str = lua!(core "expiring_hash"; "map_put");
/// The Lua source of the read-only script a map's get runs.
pub const MAP_GET_SCRIPT: &str = lua!(flags = "no-writes"; core "expiring_hash"; "map_get");
/// The Lua source of the script a map's remove runs.
pub const MAP_REMOVE_SCRIPT: &str = lua!(flags = "allow-oom"; core "expiring_hash"; "map_remove");
/// The Lua source of the read-only script a map's entries runs.
pub const MAP_ENTRIES_SCRIPT: &str = lua!(flags = "no-writes"; core "expiring_hash"; "map_entries");
/// The Lua source of the script a map's clear runs.
pub const MAP_CLEAR_SCRIPT: &str = lua!(flags = "allow-oom"; core "expiring_hash"; "map_clear");

/// The Lua source of the script a queue's push runs.
pub const QUEUE_PUSH_SCRIPT: &str = lua!("queue_push");
/// The Lua source of the script a queue's take runs.
pub const QUEUE_TAKE_SCRIPT: &str = lua!("queue_take");
/// The Lua source of the script a queue's acknowledgement runs.
pub const QUEUE_ACK_SCRIPT: &str = lua!(flags = "allow-oom"; "queue_ack");

scripts! {
    set: VALUE_SET_SCRIPT,
    delete: VALUE_DELETE_SCRIPT,
    map_put: MAP_PUT_SCRIPT,
    map_get: MAP_GET_SCRIPT,
    map_remove: MAP_REMOVE_SCRIPT,
    map_entries: MAP_ENTRIES_SCRIPT,
    map_clear: MAP_CLEAR_SCRIPT,
    queue_push: QUEUE_PUSH_SCRIPT,
    queue_take: QUEUE_TAKE_SCRIPT,
    queue_ack: QUEUE_ACK_SCRIPT,
}
