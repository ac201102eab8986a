//! The in-memory implementation against the conformance suite.

use std::sync::Arc;
use std::time::Duration;

use lock_core::conformance::LockFactory;
use lock_core::{DistributedLock, InMemoryLock};

struct Memory(InMemoryLock);

#[async_trait::async_trait]
impl LockFactory for Memory {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.0.clone())
    }

    fn watchdog_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
}

lock_core::conformance_tests!(async { Memory(InMemoryLock::new()) });
