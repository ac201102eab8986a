//! A hand-written `DistributedLock`, handed in through `LockStarter::builder().lock(..)`, held
//! to the whole contract by the conformance suite: the suite is where a custom implementation
//! proves itself, and the starter must pass such a lock through untouched.

use std::sync::Arc;
use std::time::Duration;

use lock_starter::LockStarter;
use lock_starter::figment::Figment;
use lock_starter::lock::conformance::LockFactory;
use lock_starter::lock::{
    AcquireOptions, DistributedLock, InMemoryLock, LockError, LockHandle, ShutdownSummary,
};

/// A service's own lock: here a thin wrapper over an in-memory table, written against the
/// public trait only, as a custom backend would be.
#[derive(Debug)]
struct CustomLock(InMemoryLock);

#[async_trait::async_trait]
impl DistributedLock for CustomLock {
    fn namespace(&self) -> &str {
        self.0.namespace()
    }

    async fn acquire_lease(
        &self,
        key: &str,
        options: AcquireOptions,
    ) -> Result<LockHandle, LockError> {
        self.0.acquire_lease(key, options).await
    }

    async fn shutdown(&self, timeout: Duration) -> ShutdownSummary {
        self.0.shutdown(timeout).await
    }
}

/// Each client is a starter built around a new `CustomLock` on the shared table, and the lock
/// the suite uses is the one the starter hands out.
struct ThroughTheStarter(InMemoryLock);

#[async_trait::async_trait]
impl LockFactory for ThroughTheStarter {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        let custom: Arc<dyn DistributedLock> = Arc::new(CustomLock(self.0.clone()));
        let starter = LockStarter::builder()
            .figment(Figment::new())
            .lock(Arc::clone(&custom))
            .build()
            .await
            .expect("the starter takes the hand-written lock");
        let lock = starter.lock().expect("enabled by default");
        assert!(
            Arc::ptr_eq(&lock, &custom),
            "the starter did not hand out the lock it was given"
        );
        lock
    }

    fn watchdog_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn expire(&self, key: &str) -> bool {
        self.0.expire(key)
    }
}

lock_starter::lock::conformance_tests!(lock, async { ThroughTheStarter(InMemoryLock::new()) });
