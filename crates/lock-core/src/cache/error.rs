//! [`CacheError`]: what a cache call fails with.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{BoxError, LockError, details_of, impl_problem};

/// The error of a cache call. Reads never fail for a backend reason: a failed read is a miss.
///
/// It is a [`Problem`](crate::Problem): codes `CACHE_UNAVAILABLE` (HTTP 503, a write or
/// invalidation not confirmed), `CACHE_LOAD_FAILED` (503, the loader's error),
/// `CACHE_LOADER_PANICKED` and `CACHE_INVALID_ARGUMENT` (500, defects of the calling code).
///
/// # Examples
///
/// ```
/// use lock_core::cache::CacheError;
///
/// let error = CacheError::unavailable("invalidate", "products", "sku-42", "timed out");
/// assert_eq!(error.code(), "CACHE_UNAVAILABLE");
/// assert_eq!(error.http_status(), 503);
/// assert_eq!(error.details()["key"], "sku-42");
/// assert_eq!(error.to_string(), "cache invalidate of `sku-42` in `products` was not confirmed: timed out");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The backend did not confirm `operation`; it may or may not have happened. Code
    /// `CACHE_UNAVAILABLE`.
    #[error("cache {operation} of `{key}` in `{cache}` was not confirmed: {cause}")]
    Unavailable {
        /// `get`, `put`, `invalidate`, `clear` or `watch`.
        operation: &'static str,
        /// The cache's name.
        cache: String,
        /// The entry's key; `*` for the whole cache.
        key: String,
        /// The backend's error.
        #[source]
        cause: Arc<BoxError>,
    },
    /// The loader of a `get_or_load` failed; every caller that waited on it gets this error and
    /// nothing is cached. Code `CACHE_LOAD_FAILED`.
    #[error("loading `{key}` of cache `{cache}` failed: {cause}")]
    LoadFailed {
        /// The cache's name.
        cache: String,
        /// The entry's key.
        key: String,
        /// The loader's error, shared by every caller that waited on it.
        #[source]
        cause: Arc<BoxError>,
    },
    /// The loader of a `get_or_load` panicked; the callers that waited on it get this error,
    /// the one that ran it the panic. Code `CACHE_LOADER_PANICKED`.
    #[error("the loader of `{key}` in cache `{cache}` panicked: {message}")]
    LoaderPanicked {
        /// The cache's name.
        cache: String,
        /// The entry's key.
        key: String,
        /// The panic's message.
        message: String,
    },
    /// An argument is not accepted and nothing was sent to the backend. Code
    /// `CACHE_INVALID_ARGUMENT`.
    #[error("invalid {name} {value}: {problem}")]
    InvalidArgument {
        /// The argument, such as `key`, `cache`, `ttl` or `value`.
        name: &'static str,
        /// The rejected value, quoted or summarised.
        value: String,
        /// What is wrong and what is accepted.
        problem: String,
    },
}

impl CacheError {
    /// An [`Unavailable`](CacheError::Unavailable) error.
    pub fn unavailable(
        operation: &'static str,
        cache: impl Into<String>,
        key: impl Into<String>,
        cause: impl Into<BoxError>,
    ) -> Self {
        CacheError::Unavailable {
            operation,
            cache: cache.into(),
            key: key.into(),
            cause: Arc::new(cause.into()),
        }
    }

    /// The stable code, such as `CACHE_UNAVAILABLE`.
    pub fn code(&self) -> &'static str {
        match self {
            CacheError::Unavailable { .. } => "CACHE_UNAVAILABLE",
            CacheError::LoadFailed { .. } => "CACHE_LOAD_FAILED",
            CacheError::LoaderPanicked { .. } => "CACHE_LOADER_PANICKED",
            CacheError::InvalidArgument { .. } => "CACHE_INVALID_ARGUMENT",
        }
    }

    /// The HTTP status: 503 when a later call may succeed, else 500.
    pub fn http_status(&self) -> u16 {
        match self {
            CacheError::Unavailable { .. } | CacheError::LoadFailed { .. } => 503,
            _ => 500,
        }
    }

    /// The details map of a problem body or a log: `code`, `message`, `reason`
    /// (`backend_unavailable`, `load_failed`, `loader_panicked` or `invalid_argument`), and
    /// where known `cache`, `key`, `operation` and `argument`.
    pub fn details(&self) -> BTreeMap<&'static str, String> {
        let mut details = details_of(self.code(), self);
        let (reason, cache, key) = match self {
            CacheError::Unavailable {
                operation,
                cache,
                key,
                ..
            } => {
                details.insert("operation", (*operation).to_owned());
                ("backend_unavailable", Some(cache), Some(key))
            }
            CacheError::LoadFailed { cache, key, .. } => ("load_failed", Some(cache), Some(key)),
            CacheError::LoaderPanicked { cache, key, .. } => {
                ("loader_panicked", Some(cache), Some(key))
            }
            CacheError::InvalidArgument { name, .. } => {
                details.insert("argument", (*name).to_owned());
                ("invalid_argument", None, None)
            }
        };
        if let Some(cache) = cache {
            details.insert("cache", cache.clone());
        }
        if let Some(key) = key {
            details.insert("key", key.clone());
        }
        details.insert("reason", reason.to_owned());
        details
    }

    /// An invalid argument `name` with the value shown as `value`.
    pub(crate) fn invalid(name: &'static str, value: impl Into<String>, problem: String) -> Self {
        CacheError::InvalidArgument {
            name,
            value: value.into(),
            problem,
        }
    }

    /// A failed check of the shared part (a key, a duration) as this capability's error.
    pub(crate) fn argument(name: &'static str, error: LockError) -> Self {
        let (name, value, problem) = error.into_argument(name, name);
        CacheError::invalid(name, value, problem)
    }
}

impl_problem!(CacheError);
