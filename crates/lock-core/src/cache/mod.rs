//! A distributed cache: named caches of typed values shared by every replica, read through and
//! loaded on a miss (cache-aside), with an optional in-process tier.
//!
//! A [`Cache`] is a named cache of one value type over a [`CacheStore`]:
//!
//! - **Get-or-load.** [`Cache::get_or_load`] returns the live entry or runs the loader, once
//!   per key at a time in a process, and caches its value for the cache's TTL.
//! - **Never a failure for a backend reason.** A failing store is a miss; an entry that no longer
//!   deserializes (the type changed between releases) is a miss and is overwritten, so a
//!   deploy never has to flush the cache.
//! - **TTLs per entry**, on the store's clock; clearing a cache is one step whatever its size.
//! - **An in-process tier**, opt-in per cache ([`CacheOptions::near_cache`]), that every
//!   replica's change evicts as it is pushed, and that serves nothing while the push stream is
//!   down.
//!
//! docs/cache.md has the guarantees, the keys on Redis, the in-process tier's bound and the ACL.

#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod flights;
mod memory;
mod near;
mod options;
mod port;
pub mod telemetry;
mod typed;

pub use error::CacheError;
pub use memory::{DisabledCaches, InMemoryCaches};
pub use options::{
    CacheOptions, DEFAULT_MAX_VALUE_BYTES, DEFAULT_TTL, MAX_CROSS_POD_LOAD_WAIT, MAX_NEAR_CAPACITY,
    MAX_TTL, MAX_VALUE_BYTES, MIN_TTL, NearCache,
};
pub use port::{CacheStore, CacheWatch, Change, Entry, LOAD_STORE_WINDOW, WriteMark};
pub use typed::Cache;
