//! Wiring: configuration → the lock a service uses, with the defaults-then-overrides rule.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use figment::Figment;
use lock_core::LockError;
use lock_core::branches::{Branches, MasterLocks};
use lock_core::cache::{Cache, CacheError, CacheOptions, CacheStore, NearCache};
use lock_core::idempotency::{Idempotency, IdempotencyStore};
use lock_core::lock::{DEFAULT_SHUTDOWN_TIMEOUT, DisabledLock, DistributedLock, ShutdownSummary};
use lock_core::rate_limit::{FailurePolicy, RateLimitError, RateLimitStore, RateLimiter};
use lock_core::values::{SharedValues, ValueStore};
use lock_redis::RedisClient;
use lock_redis::lock::RedisLock;

use crate::branches::wiring as branch_wiring;
use crate::built::Built;
use crate::config::{ConfigError, ConfigSources, LockSettings};
use crate::error::StartError;
use crate::idempotency::wiring as idempotency;
use crate::rate_limit::wiring as rate_limit_wiring;
use crate::wiring::Store;

/// The started lock module: hands the configured [`DistributedLock`] to whoever asks.
///
/// # Examples
///
/// ```no_run
/// use lock_starter::prelude::*;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let starter = LockStarter::builder().toml_file("config/lock.toml").build().await?;
/// let lock = starter.lock()?; // Arc<dyn DistributedLock>
/// lock.with_lock("bill-run:2026-11", Lease::Watchdog, || async { /* … */ }).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockStarter {
    pub(crate) lock: Result<Arc<dyn DistributedLock>, String>,
    /// The Redis client the starter connected (none with a custom lock), for
    /// [`LockStarter::health`].
    pub(crate) redis: Option<RedisClient>,
    idempotency: Idempotency,
    master_locks: MasterLocks,
    values: SharedValues,
    rate_limits: Arc<dyn RateLimitStore>,
    caches: Arc<dyn CacheStore>,
    /// The caches and rate limiters built by name, shared by this starter's clones.
    built: Arc<Built>,
    settings: LockSettings,
}

impl fmt::Debug for LockStarter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockStarter")
            .field(
                "lock",
                &self.lock.as_ref().map_err(|detail| detail.as_str()),
            )
            .field("settings", &self.settings)
            .finish()
    }
}

impl LockStarter {
    /// A builder: built-in defaults, then TOML files, then the environment; overrides on top.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_starter::LockStarter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let (lock_toml, lock_prod_toml) = (dir.path().join("lock.toml"), dir.path().join("lock-prod.toml"));
    /// # std::fs::write(&lock_toml, "[telco.platform.lock]\nwait-time = \"2s\"\n")?;
    /// # std::fs::write(&lock_prod_toml, "[telco.platform.lock]\nwait-time = \"1s\"\n")?;
    /// // Defaults, then the two files (the second wins), then TELCO_PLATFORM_LOCK_* variables.
    /// let starter = LockStarter::builder()
    ///     .toml_file(lock_toml)
    ///     .toml_file(lock_prod_toml)
    /// #   .lock(std::sync::Arc::new(lock_starter::lock::InMemoryLock::new())) // no Redis here
    ///     .build()
    ///     .await?;
    /// assert_eq!(starter.settings().wait_time, Duration::from_secs(1));
    /// # Ok(()) }
    /// ```
    pub fn builder() -> LockStarterBuilder {
        LockStarterBuilder::default()
    }

    /// The lock, as `Arc<dyn DistributedLock>`.
    ///
    /// # Errors
    /// [`LockError::Disabled`] (code `LOCK_DISABLED`, HTTP 503) when
    /// `telco.platform.lock.enabled = false`; the message says where that was set. No Redis
    /// connection exists in that case. [`lock_or_disabled`](LockStarter::lock_or_disabled)
    /// returns a lock that fails so on every acquisition instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::figment::{Figment, providers::{Format, Toml}};
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let switched_off = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    /// let starter = LockStarter::builder().figment(switched_off).build().await?;
    /// assert!(!starter.is_enabled());
    ///
    /// let error = starter.lock().unwrap_err(); // stop the service, or use `lock_or_disabled`
    /// assert_eq!(error.code(), "LOCK_DISABLED");
    /// assert!(error.to_string().contains("telco.platform.lock.enabled = false from"));
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<Arc<dyn DistributedLock>, LockError> {
        self.lock
            .clone()
            .map_err(|detail| LockError::Disabled { detail })
    }

    /// The lock, or — when `telco.platform.lock.enabled = false` — a [`DisabledLock`] saying
    /// where it was switched off, so a service holds one `Arc<dyn DistributedLock>` either way.
    ///
    /// Through the disabled lock, fail-closed calls (`with_lock`, `acquire`) fail with
    /// [`LockError::Disabled`] (`LOCK_DISABLED`, HTTP 503) exactly as [`lock`](LockStarter::lock)
    /// does, and fail-open calls ([`with_lock_fail_open`](lock_core::lock::DistributedLockExt::with_lock_fail_open))
    /// run their section unguarded with reason `lock_disabled` and a `WARN`. It opens no
    /// connection. Use [`lock`](LockStarter::lock) instead when a disabled lock should stop the
    /// service at start-up.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use lock_starter::figment::{Figment, providers::{Format, Toml}};
    /// # let config = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    /// // Here the configuration says `telco.platform.lock.enabled = false`.
    /// let starter = LockStarter::builder().figment(config).build().await?;
    /// let lock = starter.lock_or_disabled(); // never fails
    /// let sent = lock
    ///     .with_lock_fail_open("digest:2026-11-30", Lease::Watchdog, || async { /* send */ 3 })
    ///     .await?;
    /// if let Some(unguarded) = sent.unguarded() {
    ///     println!("sent without the lock: {}", unguarded.reason()); // e.g. lock_disabled
    /// }
    /// assert_eq!(sent.unguarded().unwrap().reason(), UnguardedReason::LockDisabled);
    /// assert_eq!(sent.into_value(), 3);
    /// # Ok(()) }
    /// ```
    pub fn lock_or_disabled(&self) -> Arc<dyn DistributedLock> {
        match &self.lock {
            Ok(lock) => Arc::clone(lock),
            Err(detail) => Arc::new(DisabledLock::new(detail.clone())),
        }
    }

    /// The layer running each handler below it under the lock of the key `key` gives for the
    /// request, acquired with `options` (a [`Lease`](crate::lock::Lease), or
    /// [`AcquireOptions`](crate::lock::AcquireOptions) with a wait time of its own; else
    /// `telco.platform.lock.wait-time`). A request not granted gets 503. See
    /// [`LockLayer`](crate::http::LockLayer).
    ///
    /// # Errors
    /// [`LockError::Disabled`] (`LOCK_DISABLED`) when `telco.platform.lock.enabled = false`, as
    /// [`lock`](Self::lock) (`LockLayer::new` on [`lock_or_disabled`](Self::lock_or_disabled)
    /// answers every guarded request with 503 instead); [`LockError::InvalidArgument`] for a
    /// fixed lease outside 100 ms to 168 h.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use axum::{Router, routing::post};
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    /// #   .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    /// let per_period = starter.lock_layer(Lease::Watchdog, |request| {
    ///     let period = request.uri().path().strip_prefix("/bill-runs/")?;
    ///     Some(format!("bill-run:{period}"))
    /// })?;
    /// let app: Router = Router::new()
    ///     .route("/bill-runs/{period}", post(|| async { "1204 invoices" }))
    ///     .layer(per_period);
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "http")]
    pub fn lock_layer<F>(
        &self,
        options: impl Into<lock_core::lock::AcquireOptions>,
        key: F,
    ) -> Result<crate::http::LockLayer, LockError>
    where
        F: Fn(&axum::http::Request<axum::body::Body>) -> Option<String> + Send + Sync + 'static,
    {
        crate::http::LockLayer::new(self.lock()?, options, key)
    }

    /// Idempotent execution on the lock's Redis connections, with the
    /// `telco.platform.lock.idempotency.*` defaults: a retried call gets the first call's
    /// result instead of running twice (see [`Idempotency`]).
    ///
    /// Never fails: with `telco.platform.lock.enabled = false` every call runs its action (one
    /// `WARN` says so), as services without Redis expect. With a custom lock
    /// ([`LockStarterBuilder::lock`]) and no [`idempotency_store`](LockStarterBuilder::idempotency_store),
    /// records are kept in this process only.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    /// #   .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    /// let create = || async { Ok::<_, IdempotencyError>(String::from("TT-1001")) };
    /// let ticket = starter.idempotency().execute("ticket-create:req-42", &IdempotencyOptions::new(), create).await?;
    /// assert!(!ticket.is_replay());
    /// # Ok(()) }
    /// ```
    pub fn idempotency(&self) -> &Idempotency {
        &self.idempotency
    }

    /// The `Idempotency-Key` layer on [`idempotency`](Self::idempotency), with records per
    /// caller: `scope` names the caller of a request (its authenticated principal), and a
    /// retry is answered with the stored response only when it comes from the same caller. A
    /// request whose `scope` is `None` runs without deduplication. A concurrent retry waits
    /// `idempotency.http-wait-time` (default 0: 409 at once) and request bodies are read up to
    /// `idempotency.http-max-body-bytes`. See [`IdempotencyLayer`](crate::http::IdempotencyLayer).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use axum::{Router, http::StatusCode, routing::post};
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    ///
    /// /// The principal an authentication layer in front stored in the request.
    /// #[derive(Clone)]
    /// struct Principal(String);
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    /// #   .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    /// let app: Router = Router::new()
    ///     .route("/tickets", post(|| async { StatusCode::CREATED }))
    ///     .layer(starter.idempotency_layer(|request| {
    ///         request.extensions.get::<Principal>().map(|p| p.0.clone())
    ///     }));
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "http")]
    pub fn idempotency_layer<F>(&self, scope: F) -> crate::http::IdempotencyLayer
    where
        F: Fn(&axum::http::request::Parts) -> Option<String> + Send + Sync + 'static,
    {
        crate::http::IdempotencyLayer::scoped(self.idempotency.clone(), scope)
            .configured(&self.settings)
    }

    /// As [`idempotency_layer`](Self::idempotency_layer), with records per endpoint only: any
    /// caller sending a key gets the response stored under it. Only for endpoints whose keys
    /// cannot be guessed or whose callers trust each other (see
    /// [`IdempotencyLayer::unscoped`](crate::http::IdempotencyLayer::unscoped)).
    #[cfg(feature = "http")]
    pub fn unscoped_idempotency_layer(&self) -> crate::http::IdempotencyLayer {
        crate::http::IdempotencyLayer::unscoped(self.idempotency.clone()).configured(&self.settings)
    }

    /// Shared values on the lock's Redis connections: typed values with a TTL and a version
    /// that every replica reads, and waits on instead of polling. See `docs/values.md`.
    ///
    /// With `telco.platform.lock.enabled = false` they are kept in this process only (a
    /// `WARN` at start-up says so), so a single replica keeps working; with a custom lock and no
    /// [`value_store`](LockStarterBuilder::value_store), likewise.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    /// #   .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    /// let values = starter.values();
    /// values.set("catalog:warm-up", &"done", Expiry::After(Duration::from_secs(60))).await?;
    /// let waited = values.wait_for_value("catalog:warm-up", &"done".to_owned(), Duration::from_secs(5)).await?;
    /// assert!(waited.is_met());
    /// # Ok(()) }
    /// ```
    pub fn values(&self) -> &SharedValues {
        &self.values
    }

    /// The rate limit `name`, with the quota configured under
    /// `telco.platform.lock.rate-limits.<name>`, on the lock's Redis connections; it answers by
    /// `policy` when Redis fails. See `docs/rate-limiting.md`.
    ///
    /// Every call with this name gives the same limiter (a clone, with `policy`), so asking in
    /// each request is cheap, and its quota ([`RateLimiter::set_quota`]), local batch
    /// (`…rate-limits.<name>.local-batch`) and outage state are shared by every call site,
    /// whatever its policy. Its name, and so its keys and headers, is `name` in lower case with
    /// `-` for `_` (`MY_API` and `my_api` are `my-api`), as sections are found, so replicas that
    /// spell it differently share one limit. Disabled (`enabled = false`): every request is
    /// admitted.
    ///
    /// # Errors
    /// [`RateLimitError::InvalidArgument`] when no quota is configured for `name`; it names the
    /// configured ones.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::figment::{Figment, providers::{Format, Toml}};
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = Figment::from(Toml::string(
    ///     "[telco.platform.lock.rate-limits.login]\nrate = \"5/1m\"\nburst = 2\n",
    /// ));
    /// # let config = config.merge(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    /// let starter = LockStarter::builder().figment(config).build().await?;
    /// let login = starter.rate_limiter("login", FailurePolicy::FailClosed)?;
    /// assert_eq!(login.quota().to_string(), "5/60s, burst 2");
    ///
    /// let error = starter.rate_limiter("signup", FailurePolicy::FailOpen).unwrap_err();
    /// assert!(error.to_string().contains("configured: login"));
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter(
        &self,
        name: &str,
        policy: FailurePolicy,
    ) -> Result<RateLimiter, RateLimitError> {
        if let Err(problem) = crate::config::name_problem(name) {
            let problem = format!("{problem}; accepted: {}", crate::config::NAME_RULES);
            return Err(RateLimitError::invalid(
                "limit",
                format!("{name:?}"),
                problem,
            ));
        }
        let section = crate::config::section_name(&self.settings.rate_limits, name);
        let Some(quota) = self.settings.rate_limits.get(section) else {
            let configured: Vec<&str> = self
                .settings
                .rate_limits
                .keys()
                .map(String::as_str)
                .collect();
            return Err(RateLimitError::invalid(
                "limit",
                format!("{name:?}"),
                format!(
                    "no quota is configured for it{}; set telco.platform.lock.rate-limits.{}.rate (configured: {})",
                    crate::config::near_section(&self.settings.rate_limits, name)
                        .map(|near| format!(" (did you mean {near:?}?)"))
                        .unwrap_or_default(),
                    crate::config::toml_key(name),
                    if configured.is_empty() {
                        "none".to_owned()
                    } else {
                        configured.join(", ")
                    }
                ),
            ));
        };
        let batch = self.settings.rate_limit_batches.get(section).copied();
        // One spelling for every replica, whatever its configuration or code writes.
        let name = lock_core::fold_name(section);
        let limiter = self.built.get_or_build(&name, || {
            RateLimiter::new(self.rate_limit_store(), &name, *quota, policy)?
                .local_batch(batch.unwrap_or(0))
        })?;
        Ok(limiter.with_policy(policy))
    }

    /// The layer limiting each request below it by the configured rate limit `name`, under
    /// the key `key` gives for the request (a client id, an API key, an address; `None`: not
    /// limited). It answers by `policy` when Redis fails. A denied request gets 429 and every
    /// counted one the `RateLimit` fields; see [`RateLimitLayer`](crate::http::RateLimitLayer).
    ///
    /// # Errors
    /// As [`rate_limiter`](Self::rate_limiter): [`RateLimitError::InvalidArgument`] when no
    /// quota is configured for `name`.
    ///
    /// # Examples
    ///
    /// ```
    /// use axum::{Router, routing::get};
    /// use lock_starter::figment::{Figment, providers::{Format, Toml}};
    /// use lock_starter::http::header_key;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = Figment::from(Toml::string("[telco.platform.lock.rate-limits.api]\nrate = \"100/1m\"\n"));
    /// # let config = config.merge(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    /// let starter = LockStarter::builder().figment(config).build().await?;
    /// let per_client = starter.rate_limit_layer("api", FailurePolicy::FailOpen, |request| {
    ///     request.headers().get("x-client-id").map(header_key) // not to_str: non-ASCII too
    /// })?;
    /// let app: Router = Router::new().route("/tariffs", get(|| async { "[]" })).layer(per_client);
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "http")]
    pub fn rate_limit_layer<F>(
        &self,
        name: &str,
        policy: FailurePolicy,
        key: F,
    ) -> Result<crate::http::RateLimitLayer, RateLimitError>
    where
        F: Fn(&axum::http::Request<axum::body::Body>) -> Option<String> + Send + Sync + 'static,
    {
        Ok(crate::http::RateLimitLayer::new(
            self.rate_limiter(name, policy)?,
            key,
        ))
    }

    /// The store of rate limits, for a [`RateLimiter`] whose quota the code sets.
    pub fn rate_limit_store(&self) -> Arc<dyn RateLimitStore> {
        Arc::clone(&self.rate_limits)
    }

    /// The cache `name` of `V` values on the lock's Redis connections, with the TTL, value cap,
    /// in-process tier and cross-pod loads of `telco.platform.lock.caches.<name>.*`, else of
    /// `telco.platform.lock.cache.*`. See `docs/cache.md`.
    ///
    /// Every call with this name and `V` gives the same cache (a clone), so asking in each
    /// request is cheap, and its loads in flight and in-process tier are shared. Its name, and
    /// so its keys, is `name` in lower case with `-` for `_` (`PRODUCT_PRICES` is
    /// `product-prices`), as sections are found, so replicas that spell it differently share
    /// one cache. The starter keeps each cache it built while it lives: for names made at
    /// run time (one per tenant), build with [`Cache::new`] on [`cache_store`](Self::cache_store).
    /// Disabled (`enabled = false`): nothing is cached and every `get_or_load` runs its
    /// loader.
    ///
    /// # Errors
    /// [`CacheError::InvalidArgument`] for a name that is not a valid key or has whitespace at
    /// an end.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::prelude::*;
    /// # use figment::{Figment, providers::{Format, Toml}};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    /// let starter = LockStarter::builder().figment(config).build().await?;
    /// let products: Cache<String> = starter.cache("products")?;
    /// let name = products
    ///     .get_or_load("sku-42", || async { Ok::<_, std::io::Error>("Fibre 1000".to_owned()) })
    ///     .await?;
    /// assert_eq!(name, "Fibre 1000");
    /// # Ok(()) }
    /// ```
    pub fn cache<V>(&self, name: &str) -> Result<Cache<V>, CacheError>
    where
        V: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    {
        match crate::config::name_problem(name) {
            Ok(()) | Err(crate::config::NAME_DOTTED) => {}
            Err(problem) => {
                return Err(CacheError::InvalidArgument {
                    name: "cache",
                    value: format!("{name:?}"),
                    problem: format!("{problem}; accepted: {}", crate::config::CACHE_NAME_RULES),
                });
            }
        }
        // One spelling for every replica, whatever its configuration or code writes.
        let name = lock_core::fold_name(name);
        self.built.get_or_build(&name, || {
            let value_type = std::any::type_name::<V>();
            if let Some(first) = self.built.cache_type(&name, value_type) {
                tracing::warn!(
                    cache = %name,
                    "cache {name:?} is asked for with values of {value_type} after {first}: each \
                     type reads the other's entries as a miss and loads them again; give each \
                     type a cache of its own"
                );
            }
            self.build_cache(&name)
        })
    }

    /// A new cache `name` (folded: lower case, `-` for `_`) of `V` values.
    fn build_cache<V>(&self, name: &str) -> Result<Cache<V>, CacheError>
    where
        V: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    {
        if name.contains('.') {
            tracing::warn!(
                cache = name,
                "cache {name:?} cannot have a section of its own (a configuration key cannot \
                 hold `.`) and takes telco.platform.lock.cache.*"
            );
        } else if let Some(near) = crate::config::near_section(&self.settings.caches, name) {
            tracing::warn!(
                cache = name,
                "cache {name:?} has no section of its own and takes telco.platform.lock.cache.*; \
                 did you mean the configured telco.platform.lock.caches.{near}?"
            );
        }
        let section = self.settings.cache_of(name);
        let mut options = CacheOptions::new()
            .ttl(section.ttl)?
            .max_value_bytes(section.max_value_bytes as usize)?;
        if section.near_cache_entries > 0 {
            let near = NearCache::entries(u64::from(section.near_cache_entries));
            options = options.near_cache(near)?;
        }
        let cache = Cache::new(self.cache_store(), name, options)?;
        if section.cross_pod_load_wait.is_zero() {
            return Ok(cache);
        }
        cache.load_across_pods(self.values().clone(), section.cross_pod_load_wait)
    }

    /// The store of the caches, for a [`Cache`] whose options the code sets.
    pub fn cache_store(&self) -> Arc<dyn CacheStore> {
        Arc::clone(&self.caches)
    }

    /// Master/sub locks on the lock's Redis connections: `with_master_lock` runs a block under
    /// the lock and, when it returns, waits for every asynchronous branch it registered (a
    /// message a consumer indexes, say) before releasing; consumers call `release_branch`
    /// with the token the branch carried. See `docs/branches.md`.
    ///
    /// With `telco.platform.lock.enabled = false` the block still runs (under a lock of this
    /// process only) and branches are not tracked; with a custom lock and no
    /// [`branches`](LockStarterBuilder::branches), branches are kept in this process only.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    /// #   .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    /// let masters = starter.master_locks();
    /// let outcome = masters
    ///     .with_master_lock("ticket:42", Lease::Watchdog, |master| async move {
    ///         let token = master.register_branch("search-index").await?; // put it in the message
    ///         masters.release_branch(&token).await?; // … the consumer, once indexed
    ///         Ok::<_, lock_starter::branches::BranchError>(())
    ///     })
    ///     .await?;
    /// assert!(outcome.is_complete());
    /// # Ok(()) }
    /// ```
    pub fn master_locks(&self) -> &MasterLocks {
        &self.master_locks
    }

    /// Whether a lock is available (`telco.platform.lock.enabled`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new()) // every key at its default: enabled
    ///     .lock(Arc::new(InMemoryLock::new()))
    ///     .build()
    ///     .await?;
    /// assert!(starter.is_enabled());
    /// # Ok(()) }
    /// ```
    pub fn is_enabled(&self) -> bool {
        self.lock.is_ok()
    }

    /// Shuts the lock down, the last thing before the process exits:
    /// [`shutdown_within`](LockStarter::shutdown_within) with [`DEFAULT_SHUTDOWN_TIMEOUT`]
    /// (5 s).
    ///
    /// A dropped [`LockHandle`](lock_core::lock::LockHandle) releases in the background; a process
    /// that returns from `main` right after may end before that release reaches Redis, and the
    /// key then stays held for its whole lease (30 s for a watchdog lease). This waits for such
    /// releases, and releases the leases still held.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lock_starter::prelude::*;
    ///
    /// #[tokio::main]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     let starter = LockStarter::builder().build().await?;
    ///     let lock = starter.lock()?;
    ///     let handle = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    ///     // … the bill run …
    ///     drop(handle); // released in the background
    ///
    ///     let summary = starter.shutdown().await; // the release is done when this returns
    ///     if !summary.is_complete() {
    ///         eprintln!("lock shutdown: {summary}"); // those leases end at their TTL
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub async fn shutdown(&self) -> ShutdownSummary {
        self.shutdown_within(DEFAULT_SHUTDOWN_TIMEOUT).await
    }

    /// Shuts the lock down within `timeout`: releases every lease still held through it
    /// (watchdog and fixed; their handles' `lost()` fires first with
    /// [`LostReason::ShutDown`](lock_core::lock::LostReason::ShutDown)), waits for the background
    /// releases of dropped handles, and returns what it did. Afterwards every acquisition fails
    /// with [`LockError::ShutDown`] (code `LOCK_DISABLED`, reason `shut_down`). See
    /// [`DistributedLock::shutdown`] for the contract; a lock handed in with
    /// [`LockStarterBuilder::lock`] is shut down by its own implementation. With the lock
    /// disabled there is nothing to do.
    ///
    /// Returns within `timeout` whatever Redis does: releases still unconfirmed then are
    /// counted in [`ShutdownSummary::pending`] and their leases end at their TTL if the process
    /// exits. Choose a `timeout` inside the grace period your platform gives a stopping process
    /// (Kubernetes: `terminationGracePeriodSeconds`, 30 s by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    ///     .lock(Arc::new(InMemoryLock::new())) // a unit test's lock; Redis behaves the same
    ///     .build()
    ///     .await?;
    /// let lock = starter.lock()?;
    /// let still_running = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
    ///
    /// let summary = starter.shutdown_within(Duration::from_secs(2)).await;
    /// assert_eq!(summary.released, 1);
    /// assert_eq!(still_running.lost().await, LostReason::ShutDown);
    /// let error = lock.acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
    /// assert_eq!(error.code(), "LOCK_DISABLED");
    /// assert_eq!(error.details()["reason"], "shut_down");
    /// # Ok(()) }
    /// ```
    pub async fn shutdown_within(&self, timeout: Duration) -> ShutdownSummary {
        match &self.lock {
            Ok(lock) => lock.shutdown(timeout).await,
            Err(_) => ShutdownSummary::default(),
        }
    }

    /// The settings the lock was built from (passwords redacted in `Debug`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_starter::figment::{Figment, providers::{Format, Toml}};
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = Figment::from(Toml::string(
    ///     r#"
    ///     [telco.platform.lock]
    ///     wait-time = "2s"
    ///     [telco.platform.lock.redis]
    ///     address = "redis://app:s3cret@redis.internal:6379"
    ///     "#,
    /// ));
    /// let starter = LockStarter::builder()
    ///     .figment(config)
    ///     .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    ///
    /// let settings = starter.settings();
    /// assert_eq!(settings.wait_time, Duration::from_secs(2));
    /// assert_eq!(settings.redis.address.host(), "redis.internal");
    /// assert!(!format!("{settings:?}").contains("s3cret"));
    /// # Ok(()) }
    /// ```
    pub fn settings(&self) -> &LockSettings {
        &self.settings
    }
}

/// Builds a [`LockStarter`]. Sources, later wins: built-in defaults → TOML files (in the order
/// given) → environment variables. A consumer may replace the sources with its own
/// [`Figment`] or [`ConfigSources`], or replace the lock itself.
///
/// # Examples
///
/// A unit test of a service: its own configuration, and an in-memory lock instead of Redis.
///
/// ```
/// use std::sync::Arc;
/// use lock_starter::figment::{Figment, providers::{Format, Toml}};
/// use lock_starter::prelude::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = Figment::from(Toml::string("[telco.platform.lock]\nkey-prefix = \"billing:lock:\"\n"));
/// let starter = LockStarter::builder()
///     .figment(config) // read and checked as in production
///     .lock(Arc::new(InMemoryLock::new()))
///     .build()
///     .await?;
/// let lock = starter.lock()?;
/// assert_eq!(lock.with_lock("bill-run:2026-11", Lease::Watchdog, || async { 1_204 }).await?, 1_204);
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct LockStarterBuilder {
    toml_files: Vec<PathBuf>,
    /// Sources given instead of the default ones (a figment, or `ConfigSources`).
    sources: Option<ConfigSources>,
    lock: Option<Arc<dyn DistributedLock>>,
    idempotency_store: Option<Arc<dyn IdempotencyStore>>,
    branches: Option<Arc<dyn Branches>>,
    value_store: Option<Arc<dyn ValueStore>>,
    rate_limit_store: Option<Arc<dyn RateLimitStore>>,
    cache_store: Option<Arc<dyn CacheStore>>,
}

impl fmt::Debug for LockStarterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockStarterBuilder")
            .field("toml_files", &self.toml_files)
            .field("custom_sources", &self.sources.is_some())
            .field("custom_lock", &self.lock)
            .field("custom_idempotency_store", &self.idempotency_store)
            .field("custom_branches", &self.branches.is_some())
            .field("custom_value_store", &self.value_store)
            .field("custom_rate_limit_store", &self.rate_limit_store)
            .field("custom_cache_store", &self.cache_store)
            .finish()
    }
}

impl LockStarterBuilder {
    /// Adds a TOML file to the default sources; later files win over earlier ones, the
    /// environment over all. A file given here must exist. With a [`figment`](Self::figment) or
    /// [`sources`](Self::sources), add files to those instead: the build refuses both.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("lock.toml");
    /// std::fs::write(&path, "[telco.platform.lock]\nwatchdog-timeout = \"10s\"\n")?;
    ///
    /// let starter = LockStarter::builder()
    ///     .toml_file(&path)
    /// #   .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    /// assert_eq!(starter.settings().watchdog_timeout, Duration::from_secs(10));
    ///
    /// // A file that is not there stops the start, naming it:
    /// let missing = LockStarter::builder().toml_file("config/lock-typo.toml").build().await;
    /// assert!(missing.unwrap_err().to_string().starts_with("TOML file config/lock-typo.toml does not exist"));
    /// # Ok(()) }
    /// ```
    pub fn toml_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.toml_files.push(path.into());
        self
    }

    /// Uses this figment instead of the default sources (files and environment). Keys are read
    /// from the same `telco.platform.lock.*` paths and validated the same way. To layer it with
    /// files or the environment, use [`sources`](Self::sources).
    ///
    /// # Examples
    ///
    /// A service whose configuration lives in its own figment, under its own environment prefix:
    ///
    /// ```
    /// use lock_starter::figment::{Figment, providers::{Env, Format, Serialized, Toml}};
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let figment = Figment::new()
    ///     .merge(Toml::string("[telco.platform.lock]\nenabled = false\n"))
    ///     .merge(Env::prefixed("BILLING_").split("__"));
    /// let starter = LockStarter::builder().figment(figment).build().await?;
    /// assert!(!starter.is_enabled());
    ///
    /// // Values are checked as from any other source:
    /// let bad = Figment::from(Serialized::default("telco.platform.lock.key-prefix", "{lock}"));
    /// assert!(LockStarter::builder().figment(bad).build().await.is_err());
    /// # Ok(()) }
    /// ```
    pub fn figment(self, figment: Figment) -> Self {
        self.sources(ConfigSources::from_figment(figment))
    }

    /// Reads the configuration from `sources` instead of the default sources: files, figments
    /// and the environment layered as [`ConfigSources`] says.
    ///
    /// # Examples
    ///
    /// A service's own figment over its TOML file, and the environment over both:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_starter::config::ConfigSources;
    /// use lock_starter::figment::{Figment, providers::Serialized};
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("app.toml");
    /// std::fs::write(&path, "[telco.platform.lock]\nwait-time = \"2s\"\n")?;
    /// let computed = Figment::from(Serialized::default("telco.platform.lock.watchdog-timeout", "10s"));
    /// let sources = ConfigSources::new().toml_file(&path).figment(computed);
    /// # let sources = sources.env_from([("POD_NAME", "billing-7f9c")]);
    /// let starter = LockStarter::builder()
    ///     .sources(sources)
    /// #   .lock(Arc::new(InMemoryLock::new())) // no Redis in this example
    ///     .build()
    ///     .await?;
    /// assert_eq!(starter.settings().wait_time, Duration::from_secs(2));
    /// assert_eq!(starter.settings().watchdog_timeout, Duration::from_secs(10));
    ///
    /// // Files given to the builder beside such sources would not be read: an error says so.
    /// let both = LockStarter::builder().sources(ConfigSources::new()).toml_file(&path).build().await;
    /// assert!(both.unwrap_err().to_string().contains("the files would not be read"));
    /// # Ok(()) }
    /// ```
    pub fn sources(mut self, sources: ConfigSources) -> Self {
        self.sources = Some(sources);
        self
    }

    /// Uses this lock instead of building the Redis one (the override point: a fake in tests,
    /// your own implementation in production). The configuration is still read and validated,
    /// and `telco.platform.lock.enabled = false` still switches the lock off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fake = InMemoryLock::new();
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    ///     .lock(Arc::new(fake.clone()))
    ///     .build()
    ///     .await?;
    ///
    /// // The service takes the lock; the test sees it through its clone.
    /// let held = starter.lock()?.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// assert_eq!(fake.held_count(), 1);
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    pub fn lock(mut self, lock: Arc<dyn DistributedLock>) -> Self {
        self.lock = Some(lock);
        self
    }

    /// Keeps idempotency records in this store instead of on the starter's Redis client (a
    /// fake in tests, your own backend). `telco.platform.lock.enabled = false` still switches
    /// deduplication off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_starter::figment::Figment;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let records = Arc::new(InMemoryIdempotencyStore::new());
    /// let starter = LockStarter::builder()
    ///     .figment(Figment::new())
    ///     .lock(Arc::new(InMemoryLock::new()))
    ///     .idempotency_store(records.clone())
    ///     .build()
    ///     .await?;
    /// # let _ = starter;
    /// # Ok(()) }
    /// ```
    pub fn idempotency_store(mut self, store: Arc<dyn IdempotencyStore>) -> Self {
        self.idempotency_store = Some(store);
        self
    }

    /// Keeps master/sub locks' branches in this backend instead of on the starter's Redis
    /// client (with the service's lock: the Redis one, or [`lock`](Self::lock)'s).
    pub fn branches(mut self, branches: Arc<dyn Branches>) -> Self {
        self.branches = Some(branches);
        self
    }

    /// Keeps rate limits in this store instead of on the starter's Redis client.
    /// `telco.platform.lock.enabled = false` still admits every request.
    pub fn rate_limit_store(mut self, store: Arc<dyn RateLimitStore>) -> Self {
        self.rate_limit_store = Some(store);
        self
    }

    /// Keeps the caches in this store instead of on the starter's Redis client.
    /// `telco.platform.lock.enabled = false` still caches nothing.
    pub fn cache_store(mut self, store: Arc<dyn CacheStore>) -> Self {
        self.cache_store = Some(store);
        self
    }

    /// Keeps shared values in this store instead of on the starter's Redis client.
    /// `telco.platform.lock.enabled = false` still keeps them in this process only.
    pub fn value_store(mut self, store: Arc<dyn ValueStore>) -> Self {
        self.value_store = Some(store);
        self
    }

    /// Reads and validates the configuration, then builds the lock: the override if one was
    /// given, otherwise a [`RedisLock`] connected to `telco.platform.lock.redis.address`.
    /// Disabled: no connection is opened and [`LockStarter::lock`] says why. An unreachable
    /// Redis does not fail the start: acquisitions fail closed until it answers (a warning is
    /// logged). The start waits for the first connection attempt's outcome, at most one
    /// `redis.command-timeout`; a Redis that is down (connection refused) costs no wait.
    ///
    /// Must run inside a Tokio runtime (the Redis client's tasks run on it).
    ///
    /// # Errors
    /// [`StartError::Config`] for any bad value (unknown keys are warnings), and for an address whose credentials
    /// Redis refuses at connect (`WRONGPASS`, `NOAUTH`, or `NOPERM` for a command the connection
    /// set-up sends): it names `telco.platform.lock.redis.address`, the address (password as
    /// `***`) and where it came from; [`StartError::Lock`] when the Redis client rejects the
    /// settings otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::figment::{Figment, providers::{Format, Toml}};
    /// use lock_starter::prelude::*;
    /// use lock_starter::HealthStatus;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = format!("[telco.platform.lock.redis]\naddress = \"redis://127.0.0.1:{port}\"\ncommand-timeout = \"100ms\"\n");
    /// // A Redis that is down does not stop the start …
    /// let starter = LockStarter::builder().figment(Figment::from(Toml::string(&config))).build().await?;
    /// assert_eq!(starter.health().await.status, HealthStatus::Down);
    ///
    /// // … its acquisitions fail closed until it answers.
    /// let error = starter.lock()?.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
    /// assert_eq!(error.details()["reason"], "backend_unavailable");
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<LockStarter, StartError> {
        let sources = match self.sources {
            Some(_) if !self.toml_files.is_empty() => {
                let files: Vec<_> = self
                    .toml_files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect();
                let files = files.join(", ");
                return Err(ConfigError::IgnoredFiles { files }.into());
            }
            Some(sources) => sources,
            None => self
                .toml_files
                .into_iter()
                .fold(ConfigSources::new(), ConfigSources::toml_file),
        };
        let settings = LockSettings::load(&sources)?;
        if !settings.enabled {
            let detail = settings
                .describe("enabled")
                .unwrap_or_else(|| "telco.platform.lock.enabled = false".to_owned());
            tracing::info!(%detail, "distributed lock disabled; no Redis connection opened");
            let idempotency = idempotency::build(&settings, Store::Disabled(&detail)).await;
            let master_locks =
                branch_wiring::build(&settings, branch_wiring::Store::Disabled(&detail)).await;
            let values = SharedValues::new(Store::Disabled(&detail).build().await);
            let rate_limits =
                rate_limit_wiring::build(rate_limit_wiring::Store::Disabled(&detail)).await;
            let caches = Store::<dyn CacheStore>::Disabled(&detail).build().await;
            return Ok(LockStarter {
                lock: Err(detail),
                redis: None,
                idempotency,
                master_locks,
                values,
                rate_limits,
                caches,
                built: Arc::default(),
                settings,
            });
        }
        let (lock, redis): (Arc<dyn DistributedLock>, _) = match self.lock {
            Some(custom) => (custom, None),
            None => {
                let redis = RedisClient::connect(settings.redis_config())
                    .await
                    .map_err(|error| settings.start_error(error))?;
                let lock = RedisLock::new(&redis, settings.lock_config())
                    .await
                    .map_err(|error| settings.start_error(error))?;
                (Arc::new(lock), Some(redis))
            }
        };
        let store = Store::chosen(self.idempotency_store, redis.as_ref());
        let idempotency = idempotency::build(&settings, store).await;
        let branches = match (self.branches, &redis) {
            (Some(custom), _) => branch_wiring::Store::Custom(Arc::clone(&lock), custom),
            (None, Some(redis)) => branch_wiring::Store::Redis(Arc::clone(&lock), redis),
            (None, None) => branch_wiring::Store::InProcess(Arc::clone(&lock)),
        };
        let master_locks = branch_wiring::build(&settings, branches).await;
        let values = Store::chosen(self.value_store, redis.as_ref())
            .build()
            .await;
        let values = SharedValues::new(values);
        let rate_limits = match (self.rate_limit_store, &redis) {
            (Some(custom), _) => rate_limit_wiring::Store::Custom(custom),
            (None, Some(redis)) => rate_limit_wiring::Store::Redis(redis),
            (None, None) => rate_limit_wiring::Store::InProcess,
        };
        let rate_limits = rate_limit_wiring::build(rate_limits).await;
        let caches = Store::chosen(self.cache_store, redis.as_ref())
            .build()
            .await;
        let (prefix, instance) = (&settings.key_prefix, &settings.instance_id);
        match &redis {
            Some(_) => {
                let address = &settings.redis.address;
                tracing::info!(redis = %address, key_prefix = %prefix, instance_id = %instance, "lock starter ready");
            }
            None => {
                tracing::info!(key_prefix = %prefix, instance_id = %instance, "lock starter ready with a custom lock; no Redis connection opened");
            }
        }
        Ok(LockStarter {
            lock: Ok(lock),
            redis,
            idempotency,
            master_locks,
            values,
            rate_limits,
            caches,
            built: Arc::default(),
            settings,
        })
    }
}
