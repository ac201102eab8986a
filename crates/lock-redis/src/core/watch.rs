//! [`ChannelWatch`]: a [`ChangeWatch`] on one channel of the shared subscriptions.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{BoxError, ChangeWatch};

use crate::core::client::RedisCore;
use crate::core::subscriptions::Subscription;

/// A waiter's place on a change channel: woken by each message when it is the channel's first
/// waiter on this client (it wakes the next one when it leaves) and whenever the subscription is
/// (re)confirmed, since messages published while it was down went unheard. Fails once the
/// connection has been lost for one command timeout. Dropping it leaves the channel.
#[derive(Debug)]
pub(crate) struct ChannelWatch {
    subscription: Subscription,
    core: Arc<RedisCore>,
    /// Named in the error when the connection is lost.
    operation: &'static str,
}

impl ChannelWatch {
    pub(crate) fn new(
        core: &Arc<RedisCore>,
        subscription: Subscription,
        operation: &'static str,
    ) -> Self {
        ChannelWatch {
            subscription,
            core: Arc::clone(core),
            operation,
        }
    }
}

#[async_trait]
impl ChangeWatch for ChannelWatch {
    async fn changed(&mut self) -> Result<(), BoxError> {
        tokio::select! {
            // `notify_one` keeps a wake-up that came while the waiter was reading.
            () = self.subscription.woken().notified() => Ok(()),
            failure = self.core.connection_lost(self.operation) => Err(failure.into()),
        }
    }
}
