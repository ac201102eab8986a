//! The store of a started service's capability, by the defaults-then-overrides rule.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lock_redis::RedisClient;

/// A store being built, boxed so that a caller's future stays `Send` whatever the store.
pub(crate) type Building<'a, S> = Pin<Box<dyn Future<Output = Arc<S>> + Send + 'a>>;

/// Where the store of a capability lives, `S` the store's trait object.
pub(crate) enum Store<'a, S: ?Sized> {
    /// `enabled = false`: the detail says where it was switched off.
    Disabled(&'a str),
    /// The builder's override.
    Custom(Arc<S>),
    /// On the Redis client's connections.
    Redis(&'a RedisClient),
    /// A custom lock and no store: in this process only.
    InProcess,
}

impl<'a, S: Wired + ?Sized> Store<'a, S> {
    /// The builder's override if one was given, else the Redis client's connections, else
    /// this process.
    pub(crate) fn chosen(custom: Option<Arc<S>>, redis: Option<&'a RedisClient>) -> Self {
        match (custom, redis) {
            (Some(custom), _) => Store::Custom(custom),
            (None, Some(redis)) => Store::Redis(redis),
            (None, None) => Store::InProcess,
        }
    }

    /// The store this choice names.
    pub(crate) async fn build(self) -> Arc<S> {
        match self {
            Store::Disabled(detail) => S::disabled(detail),
            Store::Custom(store) => store,
            Store::Redis(client) => S::on_redis(client).await,
            Store::InProcess => {
                tracing::info!(
                    "a custom lock and no {name} store were given: {kept} are kept in this process only (LockStarterBuilder::{name}_store sets one)",
                    name = S::NAME,
                    kept = S::KEPT,
                );
                S::in_process()
            }
        }
    }
}

/// How a capability's store is built when the builder was given none.
pub(crate) trait Wired {
    /// The capability's name in its builder method, `<NAME>_store`.
    const NAME: &'static str;
    /// What its store keeps, in the plural.
    const KEPT: &'static str;
    /// The store switched off by `enabled = false`, `detail` saying where.
    fn disabled(detail: &str) -> Arc<Self>;
    /// The store on the Redis client's connections.
    fn on_redis(client: &RedisClient) -> Building<'_, Self>;
    /// The store in this process only, for a custom lock and no store.
    fn in_process() -> Arc<Self>;
}
