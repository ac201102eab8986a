//! The Redis implementation against the conformance suite, each check on its own redis-server.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use lock_core::lock::DistributedLock;
use lock_core::lock::conformance::LockFactory;
use lock_testkit::RedisServer;

struct Redis(RedisServer);

#[async_trait::async_trait]
impl LockFactory for Redis {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(
            crate::common::try_connect(common::config(&self.0))
                .await
                .unwrap(),
        )
    }

    fn watchdog_timeout(&self) -> Duration {
        common::WATCHDOG
    }

    fn command_timeout(&self) -> Duration {
        common::COMMAND_TIMEOUT
    }

    /// Another owner written over the holder's value, keeping its TTL: the holder's renewals
    /// are refused, yet the key stays unavailable until it runs out (as it would if the
    /// renewals stopped arriving), so nobody can be granted it before the holder learns.
    async fn expire(&self, key: &str) -> bool {
        let lock = crate::common::try_connect(common::config(&self.0))
            .await
            .unwrap();
        let reply = self
            .0
            .cmd(&[
                "SET",
                &lock.redis_key(key),
                "H|1|conformance-expire|pod/x/1",
                "XX",
                "KEEPTTL",
            ])
            .await
            .unwrap();
        reply.trim() == "OK"
    }
}

lock_core::conformance_tests!(lock, async { Redis(common::server().await) });
