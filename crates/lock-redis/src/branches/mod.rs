//! The master/sub locks on Redis: [`RedisBranches`], the [`Branches`] backend on a
//! [`RedisClient`]'s connections.
//!
//! - **Keys.** The invocation `42` of master key `ticket:4711` is one hash,
//!   `<prefix>branches:{ticket:4711}:42` (field `state`: `open`/`sealed`; one field
//!   `b:<branch id>` per branch: `0` pending, `1` released), and its releases are published on
//!   `<prefix>branches:{ticket:4711}:42:released`. The hash tag is the master key, as for its
//!   lock, so every script is single-slot on a Cluster.
//! - **TTL.** The record gets the TTL the master asks for (at least its lease) when opened, and
//!   is only ever lengthened (`PEXPIRE … GT`): by each registration, by the master's keep-alive
//!   while its block runs, and by the seal. It is deleted when the master finishes; after a
//!   crash it ends at its TTL, on Redis' clock.
//! - **Scripts** (`scripts/*.lua`, `EVALSHA` with a reload on `NOSCRIPT`): open, register,
//!   release, seal, pending; each idempotent, so fred's re-send after a reconnect changes
//!   nothing. The keep-alive is a plain `PEXPIRE … GT`, the clean-up a `DEL`.
//! - **Waiting.** The master subscribes (sharded pub/sub, through the core's shared
//!   subscriptions) before it reads, and re-reads after every wake-up: a release message, or the
//!   subscription being (re)confirmed — after which no release can go unheard.

pub(crate) mod scripts;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use fred::types::ExpireOptions;
use lock_core::ChangeWatch;
use lock_core::branches::{BranchError, BranchRelease, Branches, Registration, SubKey};

use crate::core::client::{RedisClient, RedisCore};
use crate::core::error::RedisFailure;
use crate::core::watch::ChannelWatch;

/// The capability's name in its keys: `<prefix>branches:{<master key>}…`.
const CAPABILITY: &str = "branches";

/// The master/sub-lock backend on Redis, on a [`RedisClient`]'s connections and key prefix.
/// Cheap to clone. Wire it with a lock on the same client:
///
/// ```no_run
/// use std::sync::Arc;
/// use lock_core::branches::MasterLocks;
/// use lock_redis::branches::RedisBranches;
/// use lock_redis::lock::{RedisLock, RedisLockConfig};
/// use lock_redis::{RedisClient, RedisConfig};
/// # async fn wire() -> Result<(), lock_core::LockError> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
/// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
/// let masters = MasterLocks::new(Arc::new(lock), Arc::new(RedisBranches::new(&redis).await));
/// # let _ = masters;
/// # Ok(()) }
/// ```
///
/// Needs, on top of the lock's ACL, `+hget +hset +hgetall` (called inside its scripts; the
/// keep-alive and clean-up use `PEXPIRE` and `DEL`, which the lock's ACL grants).
#[derive(Clone)]
pub struct RedisBranches {
    core: Arc<RedisCore>,
    scripts: Arc<scripts::Scripts>,
}

impl fmt::Debug for RedisBranches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBranches")
            .field("namespace", &self.core.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisBranches {
    /// The backend on `client`'s connections. Loads its scripts while Redis answers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::branches::SubKey;
    /// use lock_redis::branches::RedisBranches;
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    /// # let config = RedisConfig::new(format!("redis://127.0.0.1:{port}"))
    /// #     .command_timeout(Duration::from_millis(100));
    /// let redis = RedisClient::connect(config).await?; // no Redis needed for this
    /// let branches = RedisBranches::new(&redis).await;
    /// let sub_key = SubKey::new("ticket:4711", 42);
    /// assert_eq!(branches.record_key(&sub_key), "lock:branches:{ticket:4711}:42");
    /// assert_eq!(branches.release_channel(&sub_key), "lock:branches:{ticket:4711}:42:released");
    /// # Ok(()) }
    /// ```
    pub async fn new(client: &RedisClient) -> Self {
        let core = Arc::clone(&client.core);
        let scripts = Arc::new(scripts::Scripts::new());
        crate::core::scripts::preload(&core, &scripts.preloaded(), CAPABILITY).await;
        RedisBranches { core, scripts }
    }

    /// The Redis key of `sub_key`'s record, e.g. `lock:branches:{ticket:4711}:42` — for
    /// inspecting it (`HGETALL`) with `redis-cli`.
    pub fn record_key(&self, sub_key: &SubKey) -> String {
        let mut key = self.records_prefix(sub_key.master_key());
        key.push_str(&sub_key.invocation().to_string());
        key
    }

    /// The channel a release of one of `sub_key`'s branches is published on (the branch id is
    /// the message).
    pub fn release_channel(&self, sub_key: &SubKey) -> String {
        let mut channel = self.record_key(sub_key);
        channel.push_str(":released");
        channel
    }

    /// What every record of master key `master_key` starts with, e.g.
    /// `lock:branches:{ticket:4711}:`.
    pub fn records_prefix(&self, master_key: &str) -> String {
        let mut prefix = self.core.keys.capability_key(CAPABILITY, master_key);
        prefix.push(':');
        prefix
    }

    /// The command client, or at once the connection error while the client knows it is
    /// disconnected (rather than a command timeout later).
    fn client(&self, operation: &'static str, sub_key: &SubKey) -> Result<&Client, BranchError> {
        (self.core).client_for(redis_operation(operation), |failure| {
            BranchError::unavailable(operation, sub_key, failure)
        })
    }

    /// The error for a failed command or script: what went wrong talking to Redis.
    fn failed(&self, operation: &'static str, sub_key: &SubKey, error: Error) -> BranchError {
        BranchError::unavailable(
            operation,
            sub_key,
            self.core.failure(redis_operation(operation), error),
        )
    }

    /// Runs the seal or pending script and reads its reply: `None` for no record, else the
    /// pending ids, sorted.
    async fn pending_reply(
        &self,
        operation: &'static str,
        sub_key: &SubKey,
        args: Vec<Value>,
    ) -> Result<Option<Vec<String>>, BranchError> {
        let script = match operation {
            "seal" => &self.scripts.seal,
            _ => &self.scripts.pending,
        };
        let reply: Vec<String> = script
            .evalsha_with_reload(
                self.client(operation, sub_key)?,
                self.record_key(sub_key),
                args,
            )
            .await
            .map_err(|e| self.failed(operation, sub_key, e))?;
        let mut reply = reply.into_iter();
        match reply.next().as_deref() {
            Some("open" | "sealed") => {
                let mut pending: Vec<String> = reply.collect();
                pending.sort();
                Ok(Some(pending))
            }
            Some("missing") => Ok(None),
            other => Err(BranchError::unavailable(
                operation,
                sub_key,
                RedisFailure::protocol(
                    "branch pending script",
                    if other.is_none() {
                        "an empty reply"
                    } else {
                        "a reply that does not start with the record's state"
                    },
                ),
            )),
        }
    }
}

/// The Redis command or script behind a branch operation, as errors name it.
fn redis_operation(operation: &'static str) -> &'static str {
    match operation {
        "open" => "branch open script",
        "register" => "branch register script",
        "release" => "branch release script",
        "seal" => "branch seal script",
        "read" => "branch pending script",
        "refresh" => "branch record PEXPIRE",
        _ => "branch record DEL",
    }
}

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[async_trait]
impl Branches for RedisBranches {
    fn namespace(&self) -> &str {
        &self.core.namespace
    }

    async fn open(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError> {
        let _created: i64 = self
            .scripts
            .open
            .evalsha_with_reload(
                self.client("open", sub_key)?,
                self.record_key(sub_key),
                vec![Value::from(millis(ttl))],
            )
            .await
            .map_err(|e| self.failed("open", sub_key, e))?;
        Ok(())
    }

    async fn register(
        &self,
        sub_key: &SubKey,
        branch: &str,
        ttl: Duration,
    ) -> Result<Registration, BranchError> {
        let reply: String = self
            .scripts
            .register
            .evalsha_with_reload(
                self.client("register", sub_key)?,
                self.record_key(sub_key),
                vec![Value::from(branch), Value::from(millis(ttl))],
            )
            .await
            .map_err(|e| self.failed("register", sub_key, e))?;
        Ok(match reply.as_str() {
            "registered" => Registration::Registered,
            "already_registered" => Registration::AlreadyRegistered,
            "already_released" => Registration::AlreadyReleased,
            "sealed" => Registration::Sealed,
            "unknown" => Registration::Unknown,
            _ => {
                return Err(BranchError::unavailable(
                    "register",
                    sub_key,
                    RedisFailure::protocol("branch register script", "an unknown outcome"),
                ));
            }
        })
    }

    async fn refresh(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError> {
        let _set: i64 = self
            .client("refresh", sub_key)?
            .pexpire(
                self.record_key(sub_key),
                millis(ttl),
                Some(ExpireOptions::GT),
            )
            .await
            .map_err(|e| self.failed("refresh", sub_key, e))?;
        Ok(())
    }

    async fn seal(
        &self,
        sub_key: &SubKey,
        ttl: Duration,
    ) -> Result<Option<Vec<String>>, BranchError> {
        self.pending_reply("seal", sub_key, vec![Value::from(millis(ttl))])
            .await
    }

    async fn pending(&self, sub_key: &SubKey) -> Result<Option<Vec<String>>, BranchError> {
        self.pending_reply("read", sub_key, Vec::new()).await
    }

    async fn watch(&self, sub_key: &SubKey) -> Result<Box<dyn ChangeWatch>, BranchError> {
        let channel = self.release_channel(sub_key);
        Ok(Box::new(ChannelWatch::new(
            &self.core,
            self.core.subscriptions.subscribe(&channel),
            "branch wait",
        )))
    }

    async fn release(&self, sub_key: &SubKey, branch: &str) -> Result<BranchRelease, BranchError> {
        let reply: String = self
            .scripts
            .release
            .evalsha_with_reload(
                self.client("release", sub_key)?,
                self.record_key(sub_key),
                vec![
                    Value::from(branch),
                    Value::from(self.release_channel(sub_key)),
                ],
            )
            .await
            .map_err(|e| self.failed("release", sub_key, e))?;
        Ok(match reply.as_str() {
            "released" => BranchRelease::Released,
            "already_released" => BranchRelease::AlreadyReleased,
            "not_registered" => BranchRelease::NotRegistered,
            "unknown" => BranchRelease::Unknown,
            _ => {
                return Err(BranchError::unavailable(
                    "release",
                    sub_key,
                    RedisFailure::protocol("branch release script", "an unknown outcome"),
                ));
            }
        })
    }

    async fn close(&self, sub_key: &SubKey) -> Result<(), BranchError> {
        let _deleted: i64 = self
            .client("close", sub_key)?
            .del(self.record_key(sub_key))
            .await
            .map_err(|e| self.failed("close", sub_key, e))?;
        Ok(())
    }
}
