//! The Redis implementation against the conformance suite, each check on its own redis-server.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use lock_core::DistributedLock;
use lock_core::conformance::LockFactory;
use lock_redis::RedisLock;
use lock_testkit::RedisServer;

struct Redis(RedisServer);

#[async_trait::async_trait]
impl LockFactory for Redis {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(RedisLock::connect(common::config(&self.0)).await.unwrap())
    }

    fn watchdog_timeout(&self) -> Duration {
        common::WATCHDOG
    }

    fn command_timeout(&self) -> Duration {
        common::COMMAND_TIMEOUT
    }
}

lock_core::conformance_tests!(async { Redis(common::server().await) });
