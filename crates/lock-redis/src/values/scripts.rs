//! The Lua scripts of shared values (see the `.lua` files for KEYS, ARGV and replies).
//! `version.lua` holds the value grammar and versioning the value scripts put first,
//! `map_lib.lua` the TTL map's layout and expiry the map scripts put first.

use fred::types::scripts::Script;

/// The Lua source of the script every set runs.
pub const VALUE_SET_SCRIPT: &str = concat!(
    include_str!("scripts/version.lua"),
    include_str!("scripts/set.lua")
);
/// The Lua source of the script every delete runs.
pub const VALUE_DELETE_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/version.lua"),
    include_str!("scripts/delete.lua")
);

/// The Lua source of the script a map's put runs.
pub const MAP_PUT_SCRIPT: &str = concat!(
    include_str!("scripts/map_lib.lua"),
    include_str!("scripts/map_put.lua")
);
/// The Lua source of the read-only script a map's get runs.
pub const MAP_GET_SCRIPT: &str = concat!(
    "#!lua flags=no-writes\n",
    include_str!("scripts/map_lib.lua"),
    include_str!("scripts/map_get.lua")
);
/// The Lua source of the script a map's remove runs.
pub const MAP_REMOVE_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/map_lib.lua"),
    include_str!("scripts/map_remove.lua")
);
/// The Lua source of the read-only script a map's entries runs.
pub const MAP_ENTRIES_SCRIPT: &str = concat!(
    "#!lua flags=no-writes\n",
    include_str!("scripts/map_lib.lua"),
    include_str!("scripts/map_entries.lua")
);
/// The Lua source of the script a map's clear runs.
pub const MAP_CLEAR_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/map_lib.lua"),
    include_str!("scripts/map_clear.lua")
);

/// The Lua source of the script a queue's push runs.
pub const QUEUE_PUSH_SCRIPT: &str = include_str!("scripts/queue_push.lua");
/// The Lua source of the script a queue's take runs.
pub const QUEUE_TAKE_SCRIPT: &str = include_str!("scripts/queue_take.lua");
/// The Lua source of the script a queue's acknowledgement runs.
pub const QUEUE_ACK_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/queue_ack.lua")
);

#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) set: Script,
    pub(crate) delete: Script,
    pub(crate) map_put: Script,
    pub(crate) map_get: Script,
    pub(crate) map_remove: Script,
    pub(crate) map_entries: Script,
    pub(crate) map_clear: Script,
    pub(crate) queue_push: Script,
    pub(crate) queue_take: Script,
    pub(crate) queue_ack: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            set: Script::from_lua(VALUE_SET_SCRIPT),
            delete: Script::from_lua(VALUE_DELETE_SCRIPT),
            map_put: Script::from_lua(MAP_PUT_SCRIPT),
            map_get: Script::from_lua(MAP_GET_SCRIPT),
            map_remove: Script::from_lua(MAP_REMOVE_SCRIPT),
            map_entries: Script::from_lua(MAP_ENTRIES_SCRIPT),
            map_clear: Script::from_lua(MAP_CLEAR_SCRIPT),
            queue_push: Script::from_lua(QUEUE_PUSH_SCRIPT),
            queue_take: Script::from_lua(QUEUE_TAKE_SCRIPT),
            queue_ack: Script::from_lua(QUEUE_ACK_SCRIPT),
        }
    }

    /// Every script, to preload.
    pub(crate) fn all(&self) -> [&Script; 10] {
        [
            &self.set,
            &self.delete,
            &self.map_put,
            &self.map_get,
            &self.map_remove,
            &self.map_entries,
            &self.map_clear,
            &self.queue_push,
            &self.queue_take,
            &self.queue_ack,
        ]
    }
}
