//! The Lua scripts of the master/sub locks (see the `.lua` files for KEYS, ARGV and replies),
//! hashed once and sent with `EVALSHA`, reloaded on `NOSCRIPT` — as the lock's are.
//!
//! `pending_ids.lua` declares the record's fields and the function listing its pending
//! branches; it is put in front of the two scripts that use it, after the `#!lua` flags line,
//! which must come first.

use fred::types::scripts::Script;

/// The Lua source of the script a master opens its invocation's record with.
pub const BRANCH_OPEN_SCRIPT: &str = include_str!("scripts/open.lua");
/// The Lua source of the script a producer registers a branch with.
pub const BRANCH_REGISTER_SCRIPT: &str = include_str!("scripts/register.lua");
/// The Lua source of the script a consumer releases a branch with.
pub const BRANCH_RELEASE_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/release.lua")
);
/// The Lua source of the script a master seals its invocation with when its block returns.
pub const BRANCH_SEAL_SCRIPT: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("scripts/pending_ids.lua"),
    include_str!("scripts/seal.lua")
);
/// The Lua source of the read-only script a waiting master re-reads its pending branches with.
pub const BRANCH_PENDING_SCRIPT: &str = concat!(
    "#!lua flags=no-writes\n",
    include_str!("scripts/pending_ids.lua"),
    include_str!("scripts/pending.lua")
);

#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) open: Script,
    pub(crate) register: Script,
    pub(crate) release: Script,
    pub(crate) seal: Script,
    pub(crate) pending: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            open: Script::from_lua(BRANCH_OPEN_SCRIPT),
            register: Script::from_lua(BRANCH_REGISTER_SCRIPT),
            release: Script::from_lua(BRANCH_RELEASE_SCRIPT),
            seal: Script::from_lua(BRANCH_SEAL_SCRIPT),
            pending: Script::from_lua(BRANCH_PENDING_SCRIPT),
        }
    }

    /// Every script, to preload.
    pub(crate) fn all(&self) -> Vec<Script> {
        [
            &self.open,
            &self.register,
            &self.release,
            &self.seal,
            &self.pending,
        ]
        .map(Clone::clone)
        .to_vec()
    }
}
