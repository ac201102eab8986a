//! The Lua scripts of shared values (see the `.lua` files for KEYS, ARGV and replies).
//! `version.lua` holds the value grammar and versioning both scripts put first.

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

#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) set: Script,
    pub(crate) delete: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            set: Script::from_lua(VALUE_SET_SCRIPT),
            delete: Script::from_lua(VALUE_DELETE_SCRIPT),
        }
    }
}
