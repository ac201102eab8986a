//! [`Cache`]: a named cache of typed values over a [`CacheStore`].

use std::any::type_name;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::cache::error::CacheError;
use crate::cache::flights::{Flights, Joined, Landing, Leader, Load, follow, wait_on};
use crate::cache::near::Near;
use crate::cache::options::{CacheOptions, MAX_CROSS_POD_LOAD_WAIT, check_ttl};
use crate::cache::port::{CacheStore, LOAD_STORE_WINDOW, WriteMark};
use crate::cache::telemetry::Metrics;
use crate::error::BoxError;
use crate::outage::{Change, Outage};
use crate::values::{Flight, SharedValues, WhenBusy};

/// TTL of the guard of a load run for every pod ([`Cache::load_across_pods`]): renewed while
/// the loader runs, it ends this long after a loading pod crashed.
const ACROSS_PODS_GUARD_TTL: Duration = Duration::from_secs(5);

/// A named cache of `V` values shared by every replica, read through and loaded on a miss
/// (cache-aside).
///
/// Clones share the cache, its loads in flight and its in-process tier.
///
/// # Contract
/// - **Reads never fail for a backend reason.** A store that fails or times out is a miss:
///   [`get_or_load`](Cache::get_or_load) runs the loader and returns its value uncached. The
///   first failure of an outage is logged at `WARN`, the recovery at `INFO`, both at `DEBUG`
///   for an outage starting within a minute of the last one so logged.
/// - **An entry that does not deserialize** as `V` (a changed type, truncated bytes) is a
///   miss: loaded again and overwritten, logged at `DEBUG` and counted.
/// - **One load per key at a time in a process.** Concurrent misses of a key wait for one
///   loader; its value, error or panic reaches every one of them, and an error or panic caches
///   nothing. Loads of different keys never wait on each other.
/// - **Values above the cap** ([`CacheOptions::max_value_bytes`]) are returned, not cached.
/// - **Writes report failures.** [`put`](Cache::put), [`invalidate`](Cache::invalidate) and
///   [`clear`](Cache::clear) fail with [`CacheError::Unavailable`] when not confirmed.
/// - **The in-process tier** ([`CacheOptions::near_cache`]) serves only while the store's
///   change stream is live, and drops an entry when any replica changes it: it is never staler
///   than the push of that change.
/// - Switched off ([`DisabledCaches`](crate::cache::DisabledCaches)): nothing is cached and
///   every `get_or_load` runs its loader.
///
/// Metric handles are registered when the cache is built: install the `metrics` recorder first.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::cache::{Cache, CacheOptions, InMemoryCaches};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::cache::CacheError> {
/// let products: Cache<String> =
///     Cache::new(Arc::new(InMemoryCaches::new()), "products", CacheOptions::new())?;
///
/// let name = products
///     .get_or_load("sku-42", || async { Ok::<_, std::io::Error>("Fibre 1000".to_owned()) })
///     .await?;
/// assert_eq!(name, "Fibre 1000");
/// assert_eq!(products.get("sku-42").await?, Some("Fibre 1000".to_owned()));
/// # Ok(()) }
/// ```
pub struct Cache<V> {
    inner: Arc<Inner<V>>,
}

impl<V> Clone for Cache<V> {
    fn clone(&self) -> Self {
        Cache {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<V> std::fmt::Debug for Cache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("name", &self.inner.name)
            .field("options", &self.inner.options)
            .field("store", &self.inner.store)
            .field("near", &self.inner.near)
            .finish_non_exhaustive()
    }
}

tokio::task_local! {
    /// The loads the current task runs a loader of, outermost first: (cache, key).
    static LOADING: Vec<Load>;
}

struct Inner<V> {
    name: String,
    store: Arc<dyn CacheStore>,
    options: CacheOptions,
    /// Loads run once for every pod: on these shared values, waiting up to this long.
    across_pods: Option<(SharedValues, Duration)>,
    flights: Arc<Flights<V>>,
    near: Option<Near<V>>,
    metrics: Metrics,
    outage: Outage,
    /// Whether a loaded value that does not serialize was logged at WARN.
    warned_unserializable: AtomicBool,
}

/// What a read of the store found; a miss read for a load has its mark.
enum Read<V> {
    Hit(V),
    Miss(Option<Mark>),
    Unavailable,
}

impl<V> Cache<V>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// The cache `name` on `store`, folded ([`fold_name`](crate::fold_name)): every spelling is
    /// one cache. With an in-process tier, call it inside a Tokio runtime: the tier follows the
    /// store's changes in a task of its own.
    ///
    /// # Errors
    /// [`CacheError::InvalidArgument`] for a name that is not a valid key.
    pub fn new(
        store: Arc<dyn CacheStore>,
        name: &str,
        options: CacheOptions,
    ) -> Result<Self, CacheError> {
        crate::validate_key(name).map_err(|e| CacheError::argument("cache", e))?;
        let name = &crate::fold_name(name);
        let near = match options.near_tier() {
            Some(bound) if !store.disabled() => Some(Near::start(Arc::clone(&store), name, bound)),
            _ => None,
        };
        Ok(Cache {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                store,
                options,
                across_pods: None,
                flights: Arc::default(),
                near,
                metrics: Metrics::new(name),
                outage: Outage::default(),
                warned_unserializable: AtomicBool::new(false),
            }),
        })
    }

    /// Runs each load once for every pod rather than once per process: a miss while another
    /// pod loads the key waits up to `wait` for that load and reads its value. Call it before
    /// cloning the cache.
    ///
    /// The load is guarded by [`SharedValues::single_flight`] at `cache-load:<cache>:<key>`,
    /// with `%` and `:` of the cache's name written `%25` and `%3A` (a digest where that would be
    /// too long for a key).
    /// This costs a miss about four more Redis commands, and pays when a load is dearer than
    /// that times the pods that would otherwise run it. A waiter that times out, or finds the
    /// guard's store failing, loads itself.
    ///
    /// # Errors
    /// [`CacheError::InvalidArgument`] for a `wait` above 1 h, or a cache already cloned.
    pub fn load_across_pods(
        mut self,
        values: SharedValues,
        wait: Duration,
    ) -> Result<Self, CacheError> {
        crate::check_duration("wait", wait, Duration::ZERO, MAX_CROSS_POD_LOAD_WAIT)
            .map_err(|e| CacheError::argument("wait", e))?;
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            return Err(CacheError::invalid(
                "cache",
                &self.inner.name,
                "it has been cloned; call load_across_pods before cloning".to_owned(),
            ));
        };
        inner.across_pods = Some((values, wait));
        Ok(self)
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The cache's options.
    pub fn options(&self) -> CacheOptions {
        self.inner.options
    }

    /// The live entry of `key`, `None` on a miss, including when the store fails.
    ///
    /// # Errors
    /// [`CacheError::InvalidArgument`] for a bad key.
    pub async fn get(&self, key: &str) -> Result<Option<V>, CacheError> {
        self.check_key(key)?;
        if let Some(value) = self.near_hit(key) {
            return Ok(Some(value));
        }
        Ok(match self.read(key).await {
            Read::Hit(value) => Some(value),
            Read::Miss(_) | Read::Unavailable => None,
        })
    }

    /// The live entry of `key`, or the value `load` gives, cached for the cache's TTL.
    ///
    /// Concurrent calls for one key in this process run one loader; the others get its
    /// outcome. A failing store, or a loaded value that does not serialize as JSON, makes this
    /// a load whose value is returned uncached.
    ///
    /// # Errors
    /// [`CacheError::LoadFailed`] with the loader's error, to every caller that waited on it;
    /// [`CacheError::LoaderPanicked`] to those that waited on a loader that panicked (the
    /// caller that ran it gets the panic); [`CacheError::InvalidArgument`] for a bad key, and
    /// for a key whose loader this call is made from (it would wait for itself).
    pub async fn get_or_load<F, Fut, E>(&self, key: &str, load: F) -> Result<V, CacheError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: Into<BoxError>,
    {
        self.check_key(key)?;
        if let Some(value) = self.near_hit(key) {
            return Ok(value);
        }
        let id = self.id();
        if LOADING.try_with(|loading| loading.iter().any(|(c, k)| *c == id && k == key)) == Ok(true)
        {
            return Err(self.waits_for_itself(key, "its own loader"));
        }
        if self.inner.store.disabled() {
            let (loaded, panic) = self.load(key, load).await;
            rethrow(panic);
            return loaded.map(|(value, _)| value);
        }
        let mut load = Some(load);
        // A value a load this caller followed landed, refused by the store as written meanwhile.
        let mut earlier = None;
        loop {
            let leader = match self.inner.flights.join(key) {
                Joined::Leader(leader) => leader,
                Joined::Follower(receiver) => {
                    // From inside a loader, the load followed must not wait on this task's.
                    let _waiting =
                        match LOADING.try_with(|stack| wait_on(stack, &(id, key.to_owned()))) {
                            Ok(None) => {
                                return Err(self.waits_for_itself(
                                    key,
                                    "a loader that its load waits on, in another task",
                                ));
                            }
                            Ok(waiting) => waiting,
                            Err(_) => None,
                        };
                    match follow(receiver).await {
                        // Written during the load, maybe before this caller came: read (or
                        // load) again, once, keeping the value in case that load fails.
                        Some(Landing {
                            landed: Ok(value),
                            written_in_store: true,
                        }) if earlier.is_none() => earlier = Some(value),
                        Some(Landing { landed, .. }) => {
                            return landed.or_else(|error| earlier.ok_or(error));
                        }
                        // Its leader was cancelled: lead now.
                        None => {}
                    }
                    continue;
                }
            };
            // A hit is a plain read; a miss is read again with its mark for the load.
            let read = match self.read(key).await {
                Read::Miss(_) => self.read_counting(key, false, true).await,
                read => read,
            };
            let (landed, panic) = match read {
                Read::Hit(value) => (Ok(value), None),
                read => {
                    let Some(load) = load.take() else {
                        unreachable!("a caller leads one load at most");
                    };
                    match (&self.inner.across_pods, read) {
                        (Some((values, wait)), Read::Miss(Some(mark))) => {
                            self.load_once_for_every_pod(&leader, values, *wait, key, load, mark)
                                .await
                        }
                        (_, Read::Miss(mark)) => {
                            self.load_and_store(&leader, key, load, mark).await
                        }
                        _ => self.load_and_store(&leader, key, load, None).await,
                    }
                }
            };
            leader.land(landed.clone());
            rethrow(panic);
            return landed.or_else(|error| earlier.ok_or(error));
        }
    }

    /// Stores `value` as the entry `key` for the cache's TTL. A value above the cap is not
    /// stored, and the entry it would have replaced is invalidated.
    ///
    /// # Errors
    /// [`CacheError::Unavailable`] when the store did not confirm it;
    /// [`CacheError::InvalidArgument`] for a bad key or a value that does not serialize.
    pub async fn put(&self, key: &str, value: &V) -> Result<(), CacheError> {
        self.put_with_ttl(key, value, self.inner.options.entry_ttl())
            .await
    }

    /// Stores `value` as the entry `key` for `ttl` ([`MIN_TTL`](crate::cache::MIN_TTL) to
    /// [`MAX_TTL`](crate::cache::MAX_TTL)). A value above the cap is not stored, and the entry
    /// it would have replaced is invalidated.
    ///
    /// # Errors
    /// As [`put`](Cache::put), and [`CacheError::InvalidArgument`] for a TTL out of range.
    pub async fn put_with_ttl(
        &self,
        key: &str,
        value: &V,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        self.check_key(key)?;
        check_ttl(ttl)?;
        let bytes = serde_json::to_vec(value).map_err(|e| {
            CacheError::invalid(
                "value",
                type_name::<V>(),
                format!("it does not serialize as JSON: {e}"),
            )
        })?;
        if self.inner.store.disabled() {
            return Ok(());
        }
        self.inner.flights.supersede(Some(key));
        let written = if self.oversize(key, bytes.len()) {
            self.inner
                .store
                .invalidate(&self.inner.name, key)
                .await
                .map(drop)
        } else {
            self.inner
                .store
                .put(&self.inner.name, key, &bytes, ttl)
                .await
        };
        self.evict_near(Some(key));
        written
    }

    /// Removes the entry `key` from the cache, in every replica's in-process tier too; `true`
    /// if it was live.
    ///
    /// # Errors
    /// [`CacheError::Unavailable`] when the store did not confirm it: the entry may still be
    /// served until its TTL. [`CacheError::InvalidArgument`] for a bad key.
    pub async fn invalidate(&self, key: &str) -> Result<bool, CacheError> {
        self.check_key(key)?;
        if self.inner.store.disabled() {
            return Ok(false);
        }
        self.inner.flights.supersede(Some(key));
        let removed = self.inner.store.invalidate(&self.inner.name, key).await;
        self.evict_near(Some(key));
        removed
    }

    /// Removes every entry of the cache in one step; `true` if it had a live one.
    ///
    /// # Errors
    /// [`CacheError::Unavailable`] when the store did not confirm it.
    pub async fn clear(&self) -> Result<bool, CacheError> {
        if self.inner.store.disabled() {
            return Ok(false);
        }
        self.inner.flights.supersede(None);
        let cleared = self.inner.store.clear(&self.inner.name).await;
        self.evict_near(None);
        cleared
    }

    fn check_key(&self, key: &str) -> Result<(), CacheError> {
        crate::validate_key(key).map_err(|e| CacheError::argument("key", e))
    }

    fn near_hit(&self, key: &str) -> Option<V> {
        let value = self.inner.near.as_ref()?.get(key)?;
        self.inner.metrics.hit_near.increment(1);
        Some(value)
    }

    /// The error of a `get_or_load` of `key` made from inside `loader`, which would wait for
    /// itself.
    fn waits_for_itself(&self, key: &str, loader: &str) -> CacheError {
        CacheError::invalid(
            "key",
            format!("{key:?}"),
            format!(
                "get_or_load of it in cache `{}` was called from inside {loader}, and would \
                 wait for itself; load the value there directly",
                self.inner.name
            ),
        )
    }

    /// What this cache and its clones are known by in [`LOADING`].
    fn id(&self) -> usize {
        Arc::as_ptr(&self.inner).cast::<()>() as usize
    }

    fn evict_near(&self, key: Option<&str>) {
        if let Some(near) = &self.inner.near {
            near.evict(key);
        }
    }

    /// Reads `key` from the store, keeping a hit in the in-process tier.
    async fn read(&self, key: &str) -> Read<V> {
        self.read_counting(key, true, false).await
    }

    /// [`read`](Self::read) for a caller whose miss is counted already.
    async fn read_again(&self, key: &str) -> Read<V> {
        self.read_counting(key, false, false).await
    }

    /// A read, its miss (and an undecodable entry) counted if `count_miss`, and marked for a
    /// load if `for_load`.
    async fn read_counting(&self, key: &str, count_miss: bool, for_load: bool) -> Read<V> {
        let miss = |inner: &Inner<V>| {
            if count_miss {
                inner.metrics.miss.increment(1);
            }
        };
        let inner = &self.inner;
        if inner.store.disabled() {
            return Read::Miss(None);
        }
        let ticket = inner.near.as_ref().map(Near::ticket);
        let read = if for_load {
            let taken = Instant::now();
            let read = inner.store.get_for_load(&inner.name, key).await;
            read.map(|(entry, at)| (entry, Some(Mark { at, taken })))
        } else {
            let read = inner.store.get(&inner.name, key).await;
            read.map(|entry| (entry, None))
        };
        let (entry, mark) = match read {
            Ok(read) => {
                self.note_outage(None);
                read
            }
            Err(error) => {
                self.note_outage(Some(&error));
                miss(inner);
                return Read::Unavailable;
            }
        };
        let Some(entry) = entry else {
            miss(inner);
            return Read::Miss(mark);
        };
        match serde_json::from_slice::<V>(&entry.value) {
            Ok(value) => {
                inner.metrics.hit_shared.increment(1);
                if let (Some(near), Some(ticket)) = (&inner.near, ticket) {
                    near.keep(
                        ticket,
                        key,
                        value.clone(),
                        entry.expires_in,
                        entry.value.len(),
                    );
                }
                Read::Hit(value)
            }
            Err(error) => {
                // Counted and logged with the miss: once per call, not per read of it.
                if count_miss {
                    tracing::debug!(cache = %inner.name, key, %error, type_name = type_name::<V>(),
                        "a cached entry does not deserialize: read as a miss, to be loaded again");
                    inner.metrics.undecodable.increment(1);
                }
                miss(inner);
                Read::Miss(mark)
            }
        }
    }

    /// Runs `load`, timing and counting it; the serialized value comes back for storing (`None`
    /// when it does not serialize), and a panic's payload beside its error, for the caller to
    /// resume once the waiters have it.
    async fn load<F, Fut, E>(
        &self,
        key: &str,
        load: F,
    ) -> (Result<(V, Option<Vec<u8>>), CacheError>, Option<Panic>)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: Into<BoxError>,
    {
        let metrics = &self.inner.metrics;
        let started = Instant::now();
        let mut loading = LOADING.try_with(Clone::clone).unwrap_or_default();
        loading.push((self.id(), key.to_owned()));
        let load = AssertUnwindSafe(async { load().await }).catch_unwind();
        let outcome = LOADING.scope(loading, load).await;
        metrics.load_seconds.record(started.elapsed().as_secs_f64());
        match outcome {
            Ok(Ok(value)) => {
                metrics.loaded.increment(1);
                let bytes = serde_json::to_vec(&value)
                    .inspect_err(|error| self.unserializable(key, error))
                    .ok();
                (Ok((value, bytes)), None)
            }
            Ok(Err(error)) => {
                metrics.load_failed.increment(1);
                let error = CacheError::LoadFailed {
                    cache: self.inner.name.clone(),
                    key: key.to_owned(),
                    cause: Arc::new(error.into()),
                };
                (Err(error), None)
            }
            Err(panic) => {
                metrics.load_panicked.increment(1);
                let error = CacheError::LoaderPanicked {
                    cache: self.inner.name.clone(),
                    key: key.to_owned(),
                    message: panic_message(&*panic),
                };
                (Err(error), Some(panic))
            }
        }
    }

    /// Loads `key` and, when the store answered the read (a `mark`), caches the value unless a
    /// write of `key` came after the mark, or the load took longer than [`LOAD_STORE_WINDOW`].
    async fn load_and_store<F, Fut, E>(
        &self,
        leader: &Leader<V>,
        key: &str,
        load: F,
        mark: Option<Mark>,
    ) -> (Result<V, CacheError>, Option<Panic>)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: Into<BoxError>,
    {
        let (value, bytes) = match self.load(key, load).await {
            (Ok((value, Some(bytes))), _) => (value, bytes),
            (Ok((value, None)), _) => return (Ok(value), None),
            (Err(error), panic) => return (Err(error), panic),
        };
        let inner = &self.inner;
        let Some(mark) = mark else {
            inner.metrics.unavailable.increment(1);
            return (Ok(value), None);
        };
        let stored = if leader.superseded() || mark.taken.elapsed() > LOAD_STORE_WINDOW {
            false
        } else if self.oversize(key, bytes.len()) {
            return (Ok(value), None);
        } else {
            let ttl = inner.options.entry_ttl();
            let stored = inner
                .store
                .put_if_unwritten(&inner.name, key, &bytes, ttl, mark.at)
                .await;
            self.evict_near(Some(key));
            match stored {
                Ok(stored) => {
                    self.note_outage(None);
                    if !stored {
                        leader.written_in_store();
                    }
                    stored
                }
                Err(error) => {
                    self.note_outage(Some(&error));
                    inner.metrics.unavailable.increment(1);
                    return (Ok(value), None);
                }
            }
        };
        if !stored {
            tracing::debug!(
                cache = %inner.name,
                key,
                "the key was written during its load, or the load took longer than \
                 LOAD_STORE_WINDOW: the loaded value is not stored"
            );
        }
        (Ok(value), None)
    }

    /// Loads `key` under a guard every pod shares: one pod runs `load` and stores the value,
    /// the others wait for it and read it. Whatever goes wrong with the guard, this caller
    /// loads itself.
    async fn load_once_for_every_pod<F, Fut, E>(
        &self,
        leader: &Leader<V>,
        values: &SharedValues,
        wait: Duration,
        key: &str,
        load: F,
        mark: Mark,
    ) -> (Result<V, CacheError>, Option<Panic>)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: Into<BoxError>,
    {
        let mut load = Some(load);
        let mut ran = None;
        let guard = load_guard(&self.inner.name, key);
        let flight = values
            .single_flight::<Result<(), String>, (), _, _>(
                &guard,
                ACROSS_PODS_GUARD_TTL,
                WhenBusy::Wait(wait),
                |_| async {
                    // Another pod may have stored the value between this caller's miss and
                    // its claim of the guard.
                    if let Read::Hit(value) = self.read_again(key).await {
                        ran = Some((Ok(value), None));
                        return Ok(());
                    }
                    let Some(load) = load.take() else {
                        unreachable!("single_flight runs its action once");
                    };
                    let outcome = self.load_and_store(leader, key, load, Some(mark)).await;
                    let summary = outcome.0.as_ref().map(drop).map_err(ToString::to_string);
                    ran = Some(outcome);
                    summary
                },
            )
            .await;
        if let Some(outcome) = ran {
            return outcome;
        }
        match flight {
            Ok(Flight::Joined(Err(error))) => {
                let error = CacheError::LoadFailed {
                    cache: self.inner.name.clone(),
                    key: key.to_owned(),
                    cause: Arc::new(format!("in another pod: {error}").into()),
                };
                return (Err(error), None);
            }
            Ok(Flight::Joined(Ok(()))) => {
                if let Read::Hit(value) = self.read_again(key).await {
                    return (Ok(value), None);
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(cache = %self.inner.name, key, %error, "a load's guard for every pod failed: loading here");
            }
        }
        match load.take() {
            Some(load) => self.load_and_store(leader, key, load, Some(mark)).await,
            None => unreachable!("the loader ran, and its outcome was returned"),
        }
    }

    /// Notes a store failure or success, logging an outage's start and end.
    fn note_outage(&self, failed: Option<&CacheError>) {
        const FAILS: &str =
            "the cache store fails: values are loaded and returned uncached until it answers";
        const ANSWERS: &str = "the cache store answers again";
        let cache = &self.inner.name;
        match (self.inner.outage.note(failed.is_some()), failed) {
            (Some(Change::Started { loud: true }), Some(error)) => {
                tracing::warn!(cache = %cache, %error, "{FAILS}");
            }
            (Some(Change::Started { loud: false }), Some(error)) => {
                tracing::debug!(cache = %cache, %error, "{FAILS}");
            }
            (Some(Change::Ended { loud: true }), _) => tracing::info!(cache = %cache, "{ANSWERS}"),
            (Some(Change::Ended { loud: false }), _) => {
                tracing::debug!(cache = %cache, "{ANSWERS}")
            }
            _ => {}
        }
    }
}

/// A loader's panic payload.
type Panic = Box<dyn std::any::Any + Send>;

/// Resumes a loader's panic in the caller that ran it.
impl<V> Cache<V> {
    /// Counts a loaded value that does not serialize, logging the first of this cache at WARN.
    fn unserializable(&self, key: &str, error: &serde_json::Error) {
        self.inner.metrics.unserializable.increment(1);
        let message = "a loaded value does not serialize as JSON: it is returned, not cached";
        let (cache, type_name) = (&self.inner.name, type_name::<V>());
        if self
            .inner
            .warned_unserializable
            .swap(true, Ordering::Relaxed)
        {
            tracing::debug!(%cache, key, %error, type_name, "{message}");
        } else {
            tracing::warn!(%cache, key, %error, type_name, "{message}");
        }
    }

    /// Whether a value of `len` bytes is above the cap, which is counted and logged.
    fn oversize(&self, key: &str, len: usize) -> bool {
        let limit = self.inner.options.value_limit();
        if len <= limit {
            return false;
        }
        self.inner.metrics.oversize.increment(1);
        tracing::debug!(
            cache = %self.inner.name,
            key,
            bytes = len,
            limit,
            "a value above the cache's size cap is not cached"
        );
        true
    }
}

/// A load's [`WriteMark`], and when it was taken.
#[derive(Debug, Clone, Copy)]
struct Mark {
    at: WriteMark,
    taken: Instant,
}

/// The single-flight guard of `key`'s load across pods: one per cache and key, as the cache's
/// name has its `:` escaped. Where that would be longer than a key may be, the pair's SHA-256
/// stands for it (no `:` follows it, so it is never another pair's guard).
fn load_guard(cache: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};

    let cache = cache.replace('%', "%25").replace(':', "%3A");
    let guard = format!("cache-load:{cache}:{key}");
    if guard.len() <= crate::MAX_KEY_BYTES {
        return guard;
    }
    let digest = Sha256::digest(&guard.as_bytes()["cache-load:".len()..]);
    format!("cache-load:#{digest:x}")
}

fn rethrow(panic: Option<Panic>) {
    if let Some(panic) = panic {
        std::panic::resume_unwind(panic);
    }
}

/// The message of a panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::load_guard;

    #[test]
    fn each_cache_and_key_has_a_load_guard_of_its_own() {
        assert_eq!(load_guard("catalog", "sku-1"), "cache-load:catalog:sku-1");
        assert_ne!(load_guard("t:eu", "de"), load_guard("t", "eu:de"));
        assert_ne!(load_guard("t%3Aeu", "de"), load_guard("t:eu", "de"));
    }

    #[test]
    fn a_guard_too_long_for_a_key_is_a_digest_of_its_own() {
        let fits = "k".repeat(crate::MAX_KEY_BYTES - "cache-load:catalog:".len());
        assert_eq!(
            load_guard("catalog", &fits),
            format!("cache-load:catalog:{fits}")
        );
        let long = format!("{fits}k");
        let guard = load_guard("catalog", &long);
        assert!(guard.starts_with("cache-load:#"), "{guard}");
        assert_eq!(guard.len(), "cache-load:#".len() + 64);
        crate::validate_key(&guard).unwrap();
        assert_ne!(guard, load_guard("catalog", &format!("{fits}j")));
        assert_ne!(guard, load_guard("catalog2", &long));
        let long_name = "c".repeat(crate::MAX_KEY_BYTES);
        crate::validate_key(&load_guard(&long_name, "sku-1")).unwrap();
    }
}
