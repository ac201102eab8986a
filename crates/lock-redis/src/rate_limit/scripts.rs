//! The Lua script of rate limiting (see the `.lua` file for KEYS, ARGV and the reply).

/// The Lua source of the script every rate-limit check runs.
pub const GCRA_SCRIPT: &str = include_str!("scripts/gcra.lua");
