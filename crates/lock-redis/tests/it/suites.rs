//! One factory for every capability's conformance suite: each client a store on a fresh lock
//! client, opened as a [`Connect`] says, so a deployment or a user needs one way to connect.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::cache::CacheStore;
use lock_core::cache::conformance::CacheFactory;
use lock_core::idempotency::IdempotencyStore;
use lock_core::idempotency::conformance::IdempotencyFactory;
use lock_core::lock::DistributedLock;
use lock_core::lock::conformance::LockFactory;
use lock_core::rate_limit::RateLimitStore;
use lock_core::rate_limit::conformance::RateLimitFactory;
use lock_core::values::SharedValues;
use lock_core::values::conformance::ValuesFactory;
use lock_redis::lock::RedisLock;
use lock_testkit::{RedisSentinel, RedisServer};

use crate::common::{self, COMMAND_TIMEOUT, Setup, WATCHDOG};

/// How a suite's factory opens a fresh lock client.
#[async_trait::async_trait]
pub(crate) trait Connect: Send + Sync + 'static {
    /// A fresh client.
    async fn lock(&self) -> RedisLock;
}

/// Clients with these settings (a Sentinel's or a Cluster's address, say).
#[async_trait::async_trait]
impl Connect for Setup {
    async fn lock(&self) -> RedisLock {
        common::connect(self.clone()).await
    }
}

/// Clients of this server with the test settings.
#[async_trait::async_trait]
impl Connect for RedisServer {
    async fn lock(&self) -> RedisLock {
        common::client(self).await
    }
}

/// Every suite's factory: its clients on the lock clients `C` opens, with the test timeouts.
pub(crate) struct Suite<C>(pub(crate) C);

#[async_trait::async_trait]
impl<C: Connect> LockFactory for Suite<C> {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.0.lock().await)
    }

    fn watchdog_timeout(&self) -> Duration {
        WATCHDOG
    }

    fn command_timeout(&self) -> Duration {
        COMMAND_TIMEOUT
    }
}

#[async_trait::async_trait]
impl<C: Connect> IdempotencyFactory for Suite<C> {
    async fn client(&self) -> Arc<dyn IdempotencyStore> {
        Arc::new(common::idempotency_store(&self.0.lock().await).await)
    }
}

#[async_trait::async_trait]
impl<C: Connect> ValuesFactory for Suite<C> {
    async fn client(&self) -> SharedValues {
        crate::values::values(&self.0.lock().await).await.0
    }
}

#[async_trait::async_trait]
impl<C: Connect> CacheFactory for Suite<C> {
    async fn client(&self) -> Arc<dyn CacheStore> {
        crate::cache::store(&self.0.lock().await).await
    }
}

#[async_trait::async_trait]
impl<C: Connect> RateLimitFactory for Suite<C> {
    async fn client(&self) -> Arc<dyn RateLimitStore> {
        crate::rate_limit::store(&self.0.lock().await).await
    }
}

/// Runs a suite, `run_all`, through a fresh Sentinel deployment and asserts that every check
/// passed and that it wrote to the deployment's master, not some other Redis.
pub(crate) async fn assert_passes_through_sentinel<Fut>(
    capability: &str,
    run_all: impl FnOnce(Arc<Suite<Setup>>) -> Fut,
) where
    Fut: Future<Output = Vec<&'static str>>,
{
    let sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let failed = run_all(Arc::new(Suite(common::config_at(sentinel.url())))).await;
    assert!(
        failed.is_empty(),
        "{capability} checks failed through Sentinel: {failed:?}"
    );
    let keys = sentinel.master().cmd(&["DBSIZE"]).await.unwrap();
    assert_ne!(
        keys.trim(),
        "0",
        "no {capability} key was ever written to the master"
    );
}
