//! Shared values on Redis: [`RedisValues`], the [`ValueStore`] of
//! `lock_core::values::SharedValues`, on the connections of a [`RedisClient`].
//!
//! - **Keys.** The value `catalog:warm-up` is one string, `<prefix>values:{catalog:warm-up}`,
//!   holding `<version>:<JSON>` with the TTL of its last write: a read is one `GET`. Writes are
//!   published on `<prefix>values:{catalog:warm-up}:written` (sharded pub/sub, the same hash
//!   tag) as `s<version>:<JSON>` or `d<version>`.
//! - **Versions** are the greater of the last version + 1 and Redis' `TIME` in microseconds, so
//!   a value re-created after a delete or an expiry gets a higher one, on the server's clock.
//! - **Scripts** (`scripts/*.lua`, `EVALSHA` with a reload on `NOSCRIPT`): set and delete, each
//!   checking its condition, writing and publishing atomically.
//! - **Watching.** A watch listens through the core's shared subscriptions, one per channel
//!   per client however many wait. Each published write reaches every listener with its value,
//!   so no waiter reads after a write; a (re)confirmed subscription makes each re-read once.
//!   A watch fails once the connection has been lost for one command timeout.

pub(crate) mod scripts;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fred::prelude::*;
use lock_core::BoxError;
use lock_core::values::{
    Condition, Delivery, Expiry, Observed, Pushed, ValueStore, ValueWatch, ValuesError, Versioned,
    Written,
};

use crate::core::client::{RedisClient, RedisCore};
use crate::core::error::RedisFailure;
use crate::core::subscriptions::{Heard, Listener};

/// The capability's name in its keys: `<prefix>values:{<key>}`.
const CAPABILITY: &str = "values";

/// Where shared values live in Redis: on the connections and key prefix of a [`RedisClient`].
/// Use it through `lock_core::values::SharedValues`, or get both from lock-starter.
///
/// Needs nothing beyond the lock's ACL: `GET`, and `SET`, `DEL`, `TIME` and `SPUBLISH` inside
/// its scripts.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::values::{Expiry, SharedValues};
/// use lock_redis::values::RedisValues;
/// use lock_redis::{RedisClient, RedisConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://127.0.0.1:6379")).await?;
/// let values = SharedValues::new(Arc::new(RedisValues::new(&redis).await));
/// values.set("catalog:warm-up", &"loading", Expiry::After(Duration::from_secs(60))).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisValues {
    core: Arc<RedisCore>,
    scripts: scripts::Scripts,
    /// When this client last removed the consumers that left each queue.
    pruned: Mutex<HashMap<String, Instant>>,
}

/// How often a client removes the consumers that left a queue, on one of its takes: each
/// process that ever took is a consumer, and processes come and go with deploys.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// The most consumers a take looks through to remove those that left; a queue with more is
/// warned about instead, as looking through them all would hold Redis up.
const PRUNE_MOST: u64 = 1_000;

impl RedisValues {
    /// Values on `client`'s connections, under its key prefix. Loads its scripts while Redis
    /// answers.
    pub async fn new(client: &RedisClient) -> Self {
        let core = Arc::clone(&client.core);
        let scripts = scripts::Scripts::new();
        crate::core::scripts::preload(&core, &scripts.preloaded(), CAPABILITY).await;
        RedisValues {
            core,
            scripts,
            pruned: Mutex::default(),
        }
    }

    /// The Redis key of the value `key`, e.g. `lock:values:{catalog:warm-up}`, for inspecting it
    /// with `redis-cli`.
    pub fn value_key(&self, key: &str) -> String {
        self.core.keys.capability_key(CAPABILITY, key)
    }

    /// The channel the writes of `key` are published on.
    pub fn write_channel(&self, key: &str) -> String {
        let mut channel = self.value_key(key);
        channel.push_str(":written");
        channel
    }

    /// The Redis keys of the TTL map `map`: its hash, e.g. `lock:maps:{login-attempts}`, and the
    /// sorted set of its fields' deadlines, `…:deadlines`.
    pub fn map_keys(&self, map: &str) -> [String; 2] {
        let hash = self.core.keys.capability_key("maps", map);
        let deadlines = format!("{hash}:deadlines");
        [hash, deadlines]
    }

    /// The Redis key of the queue `queue`: a stream, e.g. `lock:queues:{tariff-changes}`, read
    /// through its consumer group `consumers`.
    pub fn queue_key(&self, queue: &str) -> String {
        self.core.keys.capability_key("queues", queue)
    }

    /// Runs `script` on `keys` with `args`, for `operation` on the map or queue `name`.
    async fn script_call(
        &self,
        operation: &'static str,
        name: &str,
        keys: &[String],
        script: &fred::types::scripts::Script,
        args: &[&[u8]],
    ) -> Result<Value, ValuesError> {
        let client = self.client(operation, name)?;
        let call = || {
            (
                keys.iter().map(|k| k.as_str().into()).collect(),
                args.iter()
                    .map(|a| Value::Bytes(a.to_vec().into()))
                    .collect(),
            )
        };
        // A push or an acknowledgement run twice would count twice.
        let reply = match operation {
            "queue push" | "queue ack" => {
                crate::core::scripts::call_once(client, script, call).await
            }
            _ => crate::core::scripts::call(client, script, call).await,
        };
        reply.map_err(|e| self.failed(operation, name, e))
    }

    async fn map_call(
        &self,
        operation: &'static str,
        map: &str,
        script: &fred::types::scripts::Script,
        args: &[&[u8]],
    ) -> Result<Value, ValuesError> {
        let keys = self.map_keys(map);
        self.script_call(operation, map, &keys, script, args).await
    }

    /// The command client, or at once the connection error while the client knows it is
    /// disconnected.
    fn client(&self, operation: &'static str, key: &str) -> Result<&Client, ValuesError> {
        (self.core).client_for(redis_operation(operation), |failure| {
            ValuesError::unavailable(operation, key, failure)
        })
    }

    fn failed(&self, operation: &'static str, key: &str, error: Error) -> ValuesError {
        ValuesError::unavailable(
            operation,
            key,
            self.core.failure(redis_operation(operation), error),
        )
    }

    /// Runs the set or delete script and reads its reply.
    async fn write(
        &self,
        operation: &'static str,
        key: &str,
        args: impl Fn() -> Vec<Value>,
    ) -> Result<Written, ValuesError> {
        let script = match operation {
            "set" => &self.scripts.set,
            _ => &self.scripts.delete,
        };
        let client = self.client(operation, key)?;
        let value_key = self.value_key(key);
        // A compare-and-set run twice would answer for its second run: refused.
        let reply: Vec<Value> = crate::core::scripts::call_once(client, script, || {
            (vec![value_key.as_str().into()], args())
        })
        .await
        .map_err(|e| self.failed(operation, key, e))?;
        let version = |value: Option<&Value>| value.and_then(Value::as_u64);
        match (version(reply.first()), reply.get(1)) {
            (Some(1), Some(stored)) => match version(Some(stored)) {
                Some(version) => Ok(Written::Stored { version }),
                None => Err(protocol(operation, key)),
            },
            (Some(0), current) => Ok(Written::Refused {
                current: version(current),
            }),
            _ => Err(protocol(operation, key)),
        }
    }
}

/// The Redis command or script behind an operation, as errors name it.
fn redis_operation(operation: &'static str) -> &'static str {
    match operation {
        "get" => "value GET",
        "set" => "value set script",
        "delete" => "value delete script",
        "map put" => "map put script",
        "map get" => "map get script",
        "map remove" => "map remove script",
        "map entries" => "map entries script",
        "map clear" => "map clear script",
        "queue push" => "queue push script",
        "queue take" => "queue take script",
        "queue ack" => "queue ack script",
        _ => "queue XLEN",
    }
}

fn flag(operation: &'static str, key: &str, reply: Value) -> Result<bool, ValuesError> {
    match reply.as_i64() {
        Some(flag) => Ok(flag == 1),
        None => Err(protocol(operation, key)),
    }
}

fn protocol(operation: &'static str, key: &str) -> ValuesError {
    ValuesError::unavailable(
        operation,
        key,
        RedisFailure::protocol(redis_operation(operation), "unexpected reply shape"),
    )
}

fn condition_arg(condition: Condition) -> Value {
    match condition {
        Condition::Always => "always".into(),
        Condition::Absent => "absent".into(),
        Condition::Version(version) => version.to_string().into(),
    }
}

/// Splits `<version>:<JSON>`.
fn parse_stored(stored: &[u8]) -> Option<Versioned<Vec<u8>>> {
    let colon = stored.iter().position(|b| *b == b':')?;
    let version = std::str::from_utf8(&stored[..colon]).ok()?.parse().ok()?;
    // As the scripts: above 2^53 a version no longer counts exactly.
    if version >= 1 << 53 {
        return None;
    }
    Some(Versioned {
        value: stored[colon + 1..].to_vec(),
        version,
    })
}

/// Reads a published write: `s<version>:<JSON>` or `d<version>`; anything else as
/// [`Observed::Unknown`], so the waiter reads instead.
fn parse_written(message: &Value) -> Observed {
    let Some(bytes) = message.as_bytes() else {
        return Observed::Unknown;
    };
    match bytes.split_first() {
        Some((b's', stored)) => parse_stored(stored).map_or(Observed::Unknown, Observed::Set),
        Some((b'd', version)) => std::str::from_utf8(version)
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Observed::Unknown, |version| Observed::Deleted { version }),
        _ => Observed::Unknown,
    }
}

#[async_trait]
impl ValueStore for RedisValues {
    fn namespace(&self) -> &str {
        &self.core.namespace
    }

    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>, ValuesError> {
        let stored: Option<Vec<u8>> = self
            .client("get", key)?
            .get(self.value_key(key))
            .await
            .map_err(|e| self.failed("get", key, e))?;
        match stored {
            None => Ok(None),
            Some(stored) => parse_stored(&stored).map(Some).ok_or_else(|| {
                ValuesError::unavailable(
                    "get",
                    key,
                    RedisFailure::protocol(
                        "value GET",
                        "the key holds something that is not a shared value",
                    ),
                )
            }),
        }
    }

    async fn set(
        &self,
        key: &str,
        value: &[u8],
        expiry: Expiry,
        condition: Condition,
    ) -> Result<Written, ValuesError> {
        let ttl: Value = match expiry {
            Expiry::After(ttl) => millis(ttl).into(),
            Expiry::Keep => "keep".into(),
            Expiry::Never => "never".into(),
        };
        let channel = self.write_channel(key);
        self.write("set", key, || {
            vec![
                Value::Bytes(value.to_vec().into()),
                ttl.clone(),
                condition_arg(condition),
                channel.as_str().into(),
            ]
        })
        .await
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Written, ValuesError> {
        let channel = self.write_channel(key);
        self.write("delete", key, || {
            vec![condition_arg(condition), channel.as_str().into()]
        })
        .await
    }

    async fn watch(&self, key: &str) -> Result<Box<dyn ValueWatch>, ValuesError> {
        Ok(Box::new(RedisValueWatch {
            listener: self.core.subscriptions.listen(&self.write_channel(key)),
            core: Arc::clone(&self.core),
        }))
    }

    fn new_owner(&self) -> String {
        self.core.owners.next_token()
    }

    async fn map_put(
        &self,
        map: &str,
        field: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), ValuesError> {
        let ttl = millis(ttl).to_string();
        let script = &self.scripts.map_put;
        let args: [&[u8]; 3] = [field.as_bytes(), value, ttl.as_bytes()];
        self.map_call("map put", map, script, &args).await?;
        Ok(())
    }

    async fn map_get(&self, map: &str, field: &str) -> Result<Option<Vec<u8>>, ValuesError> {
        let script = &self.scripts.map_get;
        match self
            .map_call("map get", map, script, &[field.as_bytes()])
            .await?
        {
            Value::Null => Ok(None),
            reply => match reply.into_bytes() {
                Some(bytes) => Ok(Some(bytes.to_vec())),
                None => Err(protocol("map get", map)),
            },
        }
    }

    async fn map_remove(&self, map: &str, field: &str) -> Result<bool, ValuesError> {
        let script = &self.scripts.map_remove;
        let reply = self
            .map_call("map remove", map, script, &[field.as_bytes()])
            .await?;
        flag("map remove", map, reply)
    }

    async fn map_entries(&self, map: &str) -> Result<Vec<(String, Vec<u8>)>, ValuesError> {
        let script = &self.scripts.map_entries;
        let Value::Array(reply) = self.map_call("map entries", map, script, &[]).await? else {
            return Err(protocol("map entries", map));
        };
        let mut entries = Vec::with_capacity(reply.len() / 2);
        let mut reply = reply.into_iter();
        while let (Some(field), Some(value)) = (reply.next(), reply.next()) {
            match (field.into_string(), value.into_bytes()) {
                (Some(field), Some(value)) => entries.push((field, value.to_vec())),
                _ => return Err(protocol("map entries", map)),
            }
        }
        entries.sort();
        Ok(entries)
    }

    async fn map_clear(&self, map: &str) -> Result<bool, ValuesError> {
        let reply = self
            .map_call("map clear", map, &self.scripts.map_clear, &[])
            .await?;
        flag("map clear", map, reply)
    }

    async fn queue_push(
        &self,
        queue: &str,
        items: &[Vec<u8>],
        max_len: u64,
        ttl: Duration,
    ) -> Result<Pushed, ValuesError> {
        let (max_len, ttl) = (max_len.to_string(), millis(ttl).to_string());
        let mut args: Vec<&[u8]> = vec![max_len.as_bytes(), ttl.as_bytes()];
        args.extend(items.iter().map(Vec::as_slice));
        let keys = [self.queue_key(queue)];
        let script = &self.scripts.queue_push;
        let reply = self.script_call("queue push", queue, &keys, script, &args);
        let Value::Array(reply) = reply.await? else {
            return Err(protocol("queue push", queue));
        };
        let mut reply = reply.into_iter();
        match reply.next().and_then(|v| v.as_i64()) {
            Some(1) => Ok(Pushed::Appended(
                reply.filter_map(Value::into_string).collect(),
            )),
            Some(0) => Ok(Pushed::Full {
                len: reply.next().and_then(|v| v.as_u64()).unwrap_or(0),
            }),
            _ => Err(protocol("queue push", queue)),
        }
    }

    async fn queue_take(
        &self,
        queue: &str,
        consumer: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery<Vec<u8>>>, ValuesError> {
        let (max, visibility) = (max.to_string(), millis(visibility).to_string());
        let prune = {
            let pruned = self.pruned.lock().unwrap_or_else(|p| p.into_inner());
            pruned
                .get(queue)
                .is_none_or(|at| at.elapsed() >= PRUNE_EVERY)
        };
        let most = if prune { PRUNE_MOST } else { 0 }.to_string();
        let args: [&[u8]; 4] = [
            consumer.as_bytes(),
            max.as_bytes(),
            visibility.as_bytes(),
            most.as_bytes(),
        ];
        let keys = [self.queue_key(queue)];
        let script = &self.scripts.queue_take;
        let reply = self.script_call("queue take", queue, &keys, script, &args);
        let Value::Array(reply) = reply.await? else {
            return Err(protocol("queue take", queue));
        };
        let mut taken = Vec::with_capacity(reply.len() / 3);
        let mut reply = reply.into_iter();
        let Some(crowded) = reply.next().and_then(|v| v.as_u64()) else {
            return Err(protocol("queue take", queue));
        };
        if prune {
            let mut pruned = self.pruned.lock().unwrap_or_else(|p| p.into_inner());
            pruned.insert(queue.to_owned(), Instant::now());
        }
        if crowded > 0 {
            tracing::warn!(
                queue,
                consumers = crowded,
                "the queue's consumer group has more consumers than a take removes ({PRUNE_MOST}): remove the ones that left with XGROUP DELCONSUMER (docs/values.md)"
            );
        }
        while let (Some(id), Some(item), Some(deliveries)) =
            (reply.next(), reply.next(), reply.next())
        {
            match (id.into_string(), item.into_bytes(), deliveries.as_u64()) {
                (Some(id), Some(item), Some(deliveries)) => taken.push(Delivery {
                    id,
                    item: item.to_vec(),
                    deliveries,
                }),
                _ => return Err(protocol("queue take", queue)),
            }
        }
        Ok(taken)
    }

    async fn queue_ack(&self, queue: &str, ids: &[String]) -> Result<u64, ValuesError> {
        if let Some(id) = ids.iter().find(|id| !is_stream_id(id)) {
            return Err(ValuesError::not_a_queue_id(id));
        }
        let args: Vec<&[u8]> = ids.iter().map(String::as_bytes).collect();
        let keys = [self.queue_key(queue)];
        let script = &self.scripts.queue_ack;
        let reply = self
            .script_call("queue ack", queue, &keys, script, &args)
            .await?;
        match reply {
            Value::Array(untaken) => match untaken.first().and_then(Value::as_string) {
                Some(id) => Err(ValuesError::not_a_queue_id(&id)),
                None => Err(protocol("queue ack", queue)),
            },
            reply => reply.as_u64().ok_or_else(|| protocol("queue ack", queue)),
        }
    }

    async fn queue_len(&self, queue: &str) -> Result<u64, ValuesError> {
        self.client("queue len", queue)?
            .xlen(self.queue_key(queue))
            .await
            .map_err(|e| self.failed("queue len", queue, e))
    }
}

/// Whether `id` is a stream entry's id as `XREADGROUP` gives it: `<ms>-<seq>`.
fn is_stream_id(id: &str) -> bool {
    id.split_once('-').is_some_and(|(ms, seq)| {
        [ms, seq]
            .iter()
            .all(|n| n.bytes().all(|b| b.is_ascii_digit()) && n.parse::<u64>().is_ok())
    })
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

/// A watch on one value's write channel.
#[derive(Debug)]
struct RedisValueWatch {
    listener: Listener,
    core: Arc<RedisCore>,
}

#[async_trait]
impl ValueWatch for RedisValueWatch {
    async fn next(&mut self) -> Result<Observed, BoxError> {
        loop {
            tokio::select! {
                heard = self.listener.next() => match heard {
                    Heard::Message(message) => return Ok(parse_written(&message)),
                    Heard::Missed => return Ok(Observed::Unknown),
                    // A `Missed` follows once subscribed again.
                    Heard::Lost => {}
                },
                failure = self.core.connection_lost("shared value wait") => {
                    return Err(failure.into());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_writes_carry_the_version_and_value_and_anything_else_means_read() {
        let set = parse_written(&Value::from("s1764500000123456:{\"step\":3}"));
        assert_eq!(
            set,
            Observed::Set(Versioned {
                value: b"{\"step\":3}".to_vec(),
                version: 1_764_500_000_123_456
            })
        );
        assert_eq!(
            parse_written(&Value::from("d17")),
            Observed::Deleted { version: 17 }
        );
        for junk in ["", "x1:2", "s:1", "sabc:1", "d", "d1.5"] {
            assert_eq!(
                parse_written(&Value::from(junk)),
                Observed::Unknown,
                "{junk}"
            );
        }
        assert_eq!(parse_written(&Value::Integer(5)), Observed::Unknown);
    }

    #[test]
    fn queue_ids_are_stream_ids() {
        for id in ["1764500000123-0", "0-0", "18446744073709551615-7"] {
            assert!(is_stream_id(id), "{id}");
        }
        for id in [
            "",
            "bogus",
            "17",
            "1-",
            "-1",
            "1-2-3",
            "+1-0",
            "1- 0",
            "18446744073709551616-0",
        ] {
            assert!(!is_stream_id(id), "{id}");
        }
    }
}
