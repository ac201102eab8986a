//! The Lua scripts of the cache (see the `.lua` files for KEYS, ARGV and replies);
//! `cache_lib.lua` holds the layout and expiry every one puts first.

use fred::types::scripts::Script;

/// The Lua source of the script a put runs.
pub const CACHE_PUT_SCRIPT: &str = concat!(
    include_str!("scripts/cache_lib.lua"),
    include_str!("scripts/put.lua")
);
/// The Lua source of the script an invalidation runs.
pub const CACHE_INVALIDATE_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/cache_lib.lua"),
    include_str!("scripts/invalidate.lua")
);
/// The Lua source of the script a clear runs.
pub const CACHE_CLEAR_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/cache_lib.lua"),
    include_str!("scripts/clear.lua")
);

#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) put: Script,
    pub(crate) invalidate: Script,
    pub(crate) clear: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            put: Script::from_lua(CACHE_PUT_SCRIPT),
            invalidate: Script::from_lua(CACHE_INVALIDATE_SCRIPT),
            clear: Script::from_lua(CACHE_CLEAR_SCRIPT),
        }
    }

    /// Every script, to preload.
    pub(crate) fn all(&self) -> [&Script; 3] {
        [&self.put, &self.invalidate, &self.clear]
    }
}
