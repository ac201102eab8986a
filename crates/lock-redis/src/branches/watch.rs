//! A master's watch on its release channel: a place in the core's shared subscription.

use async_trait::async_trait;
use lock_core::branches::BranchWatch;

use crate::core::subscriptions::Subscription;

/// Woken by every release message on the invocation's channel and whenever the subscription is
/// (re)confirmed — after a reconnect or a Cluster slot move, releases published meanwhile went
/// unheard, so the master must read again. The only waiter on its channel (one invocation, one
/// master), so always the one woken. Dropping it leaves the channel, and the core unsubscribes.
#[derive(Debug)]
pub(crate) struct RedisWatch {
    subscription: Subscription,
}

impl RedisWatch {
    pub(crate) fn new(subscription: Subscription) -> Self {
        RedisWatch { subscription }
    }
}

#[async_trait]
impl BranchWatch for RedisWatch {
    async fn changed(&mut self) {
        // `notify_one` keeps a wake-up that came while the master was reading.
        self.subscription.woken().notified().await;
    }
}
