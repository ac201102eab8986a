//! [`CacheOptions`] and [`NearCache`].

use std::time::Duration;

use crate::cache::error::CacheError;
use crate::duration::out_of_range;

/// The TTL of an entry when its cache sets none: 60 min.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// The shortest entry TTL: 1 ms.
pub const MIN_TTL: Duration = Duration::from_millis(1);
/// The longest entry TTL: 30 days.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// The largest value cached when its cache sets no cap: 1 MiB serialized.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1 << 20;
/// The largest accepted cap on a cached value: 64 MiB.
pub const MAX_VALUE_BYTES: usize = 64 << 20;
/// The most entries or bytes an in-process tier may be bounded by: 2^40.
pub const MAX_NEAR_CAPACITY: u64 = 1 << 40;
/// The longest wait for another pod's load ([`Cache::load_across_pods`](crate::cache::Cache::load_across_pods)): 1 h.
pub const MAX_CROSS_POD_LOAD_WAIT: Duration = Duration::from_secs(3600);

/// How a cache behaves: its entries' TTL, its value cap and its in-process tier.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::cache::{CacheOptions, NearCache};
///
/// let options = CacheOptions::new()
///     .ttl(Duration::from_secs(600))?
///     .near_cache(NearCache::entries(10_000))?;
/// assert_eq!(options.entry_ttl(), Duration::from_secs(600));
/// assert!(CacheOptions::new().ttl(Duration::ZERO).is_err());
/// # Ok::<(), lock_core::cache::CacheError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheOptions {
    ttl: Duration,
    max_value_bytes: usize,
    near: Option<NearCache>,
}

/// The bound of a cache's in-process tier: entries, or bytes of serialized values and keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearCache {
    /// At most this many entries.
    Entries(u64),
    /// At most this many bytes of keys and serialized values.
    Bytes(u64),
}

impl NearCache {
    /// A tier of at most `n` entries.
    pub fn entries(n: u64) -> Self {
        NearCache::Entries(n)
    }

    /// A tier of at most `n` bytes of keys and serialized values.
    pub fn bytes(n: u64) -> Self {
        NearCache::Bytes(n)
    }

    fn capacity(self) -> u64 {
        match self {
            NearCache::Entries(n) | NearCache::Bytes(n) => n,
        }
    }
}

impl Default for CacheOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl CacheOptions {
    /// [`DEFAULT_TTL`], [`DEFAULT_MAX_VALUE_BYTES`] and no in-process tier.
    pub const fn new() -> Self {
        CacheOptions {
            ttl: DEFAULT_TTL,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            near: None,
        }
    }

    /// The TTL of entries put without one, [`MIN_TTL`] to [`MAX_TTL`].
    ///
    /// # Errors
    /// [`CacheError::InvalidArgument`] outside that range.
    pub fn ttl(mut self, ttl: Duration) -> Result<Self, CacheError> {
        check_ttl(ttl)?;
        self.ttl = ttl;
        Ok(self)
    }

    /// The largest serialized value cached, 1 to [`MAX_VALUE_BYTES`]; a larger one is returned
    /// but not cached.
    ///
    /// # Errors
    /// [`CacheError::InvalidArgument`] outside that range.
    pub fn max_value_bytes(mut self, bytes: usize) -> Result<Self, CacheError> {
        if !(1..=MAX_VALUE_BYTES).contains(&bytes) {
            return Err(CacheError::invalid(
                "max_value_bytes",
                bytes.to_string(),
                format!("accepted: 1 to {MAX_VALUE_BYTES} bytes"),
            ));
        }
        self.max_value_bytes = bytes;
        Ok(self)
    }

    /// Adds an in-process tier bounded by `near`, kept correct by the store's pushed changes.
    ///
    /// # Errors
    /// [`CacheError::InvalidArgument`] for a bound of 0 or above [`MAX_NEAR_CAPACITY`].
    pub fn near_cache(mut self, near: NearCache) -> Result<Self, CacheError> {
        if !(1..=MAX_NEAR_CAPACITY).contains(&near.capacity()) {
            return Err(CacheError::invalid(
                "near_cache",
                format!("{near:?}"),
                format!("accepted: 1 to {MAX_NEAR_CAPACITY} entries or bytes"),
            ));
        }
        self.near = Some(near);
        Ok(self)
    }

    /// The TTL of entries put without one.
    pub fn entry_ttl(&self) -> Duration {
        self.ttl
    }

    /// The largest serialized value cached.
    pub fn value_limit(&self) -> usize {
        self.max_value_bytes
    }

    /// The in-process tier's bound, if it has one.
    pub fn near_tier(&self) -> Option<NearCache> {
        self.near
    }
}

/// Checks an entry TTL against [`MIN_TTL`]..=[`MAX_TTL`].
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), CacheError> {
    match out_of_range(ttl, MIN_TTL, MAX_TTL) {
        None => Ok(()),
        Some((value, problem)) => Err(CacheError::invalid("ttl", value, problem)),
    }
}
