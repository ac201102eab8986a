//! What the starter has built by name: asking twice for a cache or a rate limiter gives the
//! same one, so its loads in flight, in-process tier, local permits and outage state are shared
//! by every call site.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// What a built part is known by: its type and its name.
type Key = (TypeId, String);

/// The caches and rate limiters a [`LockStarter`](crate::LockStarter) and its clones built.
#[derive(Default)]
pub(crate) struct Built {
    parts: Mutex<HashMap<Key, Box<dyn Any + Send + Sync>>>,
    /// Each cache's value type, as first built.
    cache_types: Mutex<HashMap<String, &'static str>>,
}

impl Built {
    /// The `T` built before for `name`, else the one `build` makes, kept.
    pub(crate) fn get_or_build<T, E>(
        &self,
        name: &str,
        build: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E>
    where
        T: Clone + Send + Sync + 'static,
    {
        let mut built = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (TypeId::of::<T>(), name.to_owned());
        if let Some(part) = built.get(&key).and_then(|part| part.downcast_ref::<T>()) {
            return Ok(part.clone());
        }
        let part = build()?;
        built.insert(key, Box::new(part.clone()));
        Ok(part)
    }

    /// Records that cache `name` is built for values of `value_type`; the type it was first
    /// built for, when that is another.
    pub(crate) fn cache_type(&self, name: &str, value_type: &'static str) -> Option<&'static str> {
        let mut types = self
            .cache_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let first = *types.entry(name.to_owned()).or_insert(value_type);
        (first != value_type).then_some(first)
    }
}
