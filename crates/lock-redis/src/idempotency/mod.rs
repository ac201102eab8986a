//! Idempotent execution on Redis: [`RedisIdempotencyStore`], the
//! [`IdempotencyStore`] of `lock_core::idempotency::Idempotency`, on the connections of a [`RedisClient`].
//!
//! One hash per idempotency key, `<prefix>idempotency:{<key>}` (fields `o` owner token, `f`
//! request fingerprint, `r` result once completed, `x` once its owner failed), with a TTL: the
//! in-progress lease, then the result TTL. Completions, failures, abandonments and forgets are
//! announced on
//! `<prefix>idempotency:{<key>}:changed` (sharded pub/sub, the same hash tag), which waiting
//! duplicates subscribe to through the client's shared subscriptions. Every script is
//! single-key and owner-checked, so a re-sent command (fred re-sends after a reconnect) is
//! harmless.

pub(crate) mod scripts;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use lock_core::ChangeWatch;
use lock_core::idempotency::{Claim, IdempotencyError, IdempotencyStore};
use tokio::time::Instant;

use crate::core::client::{RedisClient, RedisCore};
use crate::core::error::RedisFailure;
use crate::core::watch::ChannelWatch;
use scripts::Scripts;

/// Where idempotency records live in Redis: on the connections, key prefix and instance id of
/// a [`RedisClient`]. Use it through `lock_core::idempotency::Idempotency`, or get
/// both from lock-starter.
///
/// Duplicates wait event-driven: they subscribe to the record's change channel, look again once
/// the subscription is confirmed (closing the complete-before-subscribe race), then sleep until
/// a change message or the holder's TTL. Redis unreachable (after a failed connection attempt)
/// fails a call at once with [`IdempotencyError::Unavailable`]; a slow Redis after the command
/// timeout. A waiting duplicate fails once the connection has been lost for one command
/// timeout; a shorter drop ends no wait (its next claim is sent and answered on reconnect).
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use lock_core::idempotency::{Idempotency, IdempotencyOptions, IdempotencySettings};
/// use lock_redis::idempotency::RedisIdempotencyStore;
/// use lock_redis::{RedisClient, RedisConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://127.0.0.1:6379")).await?;
/// let store = Arc::new(RedisIdempotencyStore::new(&redis).await);
/// let idempotency = Idempotency::new(store, IdempotencySettings::default())?;
/// let ticket = idempotency
///     .execute("ticket-create:req-42", &IdempotencyOptions::new(), || async {
///         Ok::<_, lock_core::idempotency::IdempotencyError>(String::from("TT-1001"))
///     })
///     .await?;
/// # let _ = ticket;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisIdempotencyStore {
    core: Arc<RedisCore>,
    scripts: Scripts,
}

impl RedisIdempotencyStore {
    /// A store on `client`'s connections, under its key prefix. Loads its scripts while Redis
    /// answers.
    pub async fn new(client: &RedisClient) -> Self {
        let core = Arc::clone(&client.core);
        let scripts = Scripts::new();
        crate::core::scripts::preload(&core, &scripts.preloaded(), "idempotency").await;
        RedisIdempotencyStore { core, scripts }
    }

    /// The Redis key of the record of `key` (for operators and tests).
    pub fn record_key(&self, key: &str) -> String {
        self.core.keys.capability_key("idempotency", key)
    }

    fn channel(record: &str) -> String {
        format!("{record}:changed")
    }

    fn unavailable(&self, key: &str, operation: &'static str, error: Error) -> IdempotencyError {
        IdempotencyError::unavailable(key, self.core.failure(operation, error))
    }

    /// Runs `script` on the record of `key`. With `fail_fast`, fails at once while Redis is
    /// known to be unreachable, instead of waiting a command timeout for an answer that cannot
    /// come; without it the call is sent, and answered as soon as the client reconnects.
    async fn call(
        &self,
        key: &str,
        operation: &'static str,
        script: &fred::types::scripts::Script,
        args: Vec<Value>,
        fail_fast: bool,
    ) -> Result<Value, IdempotencyError> {
        if let Some(failure) = self.core.unreachable(operation).filter(|_| fail_fast) {
            return Err(IdempotencyError::unavailable(key, failure));
        }
        script
            .evalsha_with_reload(&self.core.client, self.record_key(key), args)
            .await
            .map_err(|e| self.unavailable(key, operation, e))
    }

    /// An owner's write (renew, complete, fail, abandon), or `forget`: a call whose reply is a
    /// flag. An owner's write is sent even while the client is disconnected: it finishes work
    /// already done, and is answered on reconnect (within the command timeout) rather than lost
    /// to a dropped connection. Only `forget`, a new call, fails fast.
    async fn flag(
        &self,
        key: &str,
        operation: &'static str,
        script: &fred::types::scripts::Script,
        args: Vec<Value>,
        fail_fast: bool,
    ) -> Result<bool, IdempotencyError> {
        match self.call(key, operation, script, args, fail_fast).await? {
            Value::Integer(n) => Ok(n == 1),
            _ => Err(protocol(key, operation)),
        }
    }
}

fn millis(d: Duration) -> Value {
    Value::from(i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1))
}

fn protocol(key: &str, operation: &'static str) -> IdempotencyError {
    IdempotencyError::unavailable(
        key,
        RedisFailure::protocol(operation, "unexpected reply shape"),
    )
}

fn text(value: Option<Value>) -> String {
    value.and_then(|v| v.into_string()).unwrap_or_default()
}

#[async_trait]
impl IdempotencyStore for RedisIdempotencyStore {
    async fn claim(
        &self,
        key: &str,
        owner: &str,
        fingerprint: &str,
        ttl: Duration,
        waited_on: Option<&str>,
    ) -> Result<Claim, IdempotencyError> {
        const OP: &str = "idempotency claim script";
        let args = vec![
            owner.into(),
            fingerprint.into(),
            millis(ttl),
            waited_on.unwrap_or_default().into(),
        ];
        // A duplicate that is waiting (it saw an owner) chose to wait: its claim is sent even
        // while the client is disconnected, so a dropped connection does not end its wait (a
        // lost one does, through the watch, after a command timeout).
        let fail_fast = waited_on.is_none();
        let reply = self.call(key, OP, &self.scripts.claim, args, fail_fast);
        let Value::Array(reply) = reply.await? else {
            return Err(protocol(key, OP));
        };
        let mut reply = reply.into_iter();
        match reply.next().and_then(|v| v.as_i64()) {
            Some(0) => Ok(Claim::Owner),
            Some(1) => {
                let fingerprint = text(reply.next());
                let result = reply
                    .next()
                    .and_then(|v| v.into_bytes())
                    .ok_or_else(|| protocol(key, OP))?;
                Ok(Claim::Completed {
                    result: result.to_vec(),
                    fingerprint,
                })
            }
            Some(2) => {
                let holder = text(reply.next());
                let fingerprint = text(reply.next());
                let ttl = reply
                    .next()
                    .and_then(|v| v.as_i64())
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis);
                Ok(Claim::InProgress {
                    holder,
                    fingerprint,
                    ttl,
                })
            }
            Some(3) => Ok(Claim::Failed {
                holder: text(reply.next()),
            }),
            _ => Err(protocol(key, OP)),
        }
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError> {
        let args = vec![owner.into(), millis(ttl)];
        self.flag(
            key,
            "idempotency renew script",
            &self.scripts.renew,
            args,
            false,
        )
        .await
    }

    async fn complete(
        &self,
        key: &str,
        owner: &str,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        let channel = Self::channel(&self.record_key(key));
        let args = vec![
            owner.into(),
            Value::Bytes(result.to_vec().into()),
            millis(ttl),
            channel.into(),
        ];
        self.flag(
            key,
            "idempotency complete script",
            &self.scripts.complete,
            args,
            false,
        )
        .await
    }

    async fn abandon(&self, key: &str, owner: &str) -> Result<bool, IdempotencyError> {
        let channel = Self::channel(&self.record_key(key));
        let args = vec![owner.into(), channel.into()];
        self.flag(
            key,
            "idempotency abandon script",
            &self.scripts.abandon,
            args,
            false,
        )
        .await
    }

    async fn fail(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError> {
        let channel = Self::channel(&self.record_key(key));
        let args = vec![owner.into(), millis(ttl), channel.into()];
        self.flag(
            key,
            "idempotency fail script",
            &self.scripts.fail,
            args,
            false,
        )
        .await
    }

    async fn forget(&self, key: &str) -> Result<bool, IdempotencyError> {
        let channel = Self::channel(&self.record_key(key));
        self.flag(
            key,
            "idempotency forget script",
            &self.scripts.forget,
            vec![channel.into()],
            true,
        )
        .await
    }

    async fn watch(&self, key: &str) -> Result<Box<dyn ChangeWatch>, IdempotencyError> {
        let channel = Self::channel(&self.record_key(key));
        let mut subscription = self.core.subscriptions.subscribe(&channel);
        // Unconfirmed in time, the watch may miss a change: the caller also wakes at the
        // holder's TTL, so it is late, never stuck.
        let deadline = Instant::now() + self.core.command_timeout;
        if !subscription.confirmed_by(deadline).await {
            tracing::debug!(%channel, "idempotency change channel not confirmed within the command timeout; waiting on the holder's TTL too");
        }
        Ok(Box::new(ChannelWatch::new(
            &self.core,
            subscription,
            "idempotency duplicate wait",
        )))
    }

    fn new_owner(&self) -> String {
        self.core.owners.next_token()
    }
}
