//! The Lua scripts of the lock protocol (see the `.lua` files for KEYS, ARGV and replies).

use fred::prelude::*;
use fred::types::scripts::Script;

/// The three scripts, hashed once. `EVALSHA` with a reload on `NOSCRIPT` (after a `SCRIPT FLUSH`
/// or a failover to a server that never saw them), so a warm call is one round trip.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: Script::from_lua(include_str!("scripts/acquire.lua")),
            release: Script::from_lua(include_str!("scripts/release.lua")),
            renew: Script::from_lua(include_str!("scripts/renew.lua")),
        }
    }

    /// Loads every script, so the first acquisitions need no reload.
    pub(crate) async fn load(&self, client: &Client) -> Result<(), Error> {
        for script in [&self.acquire, &self.release, &self.renew] {
            script.load(client).await?;
        }
        Ok(())
    }
}
