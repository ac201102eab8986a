//! The cache on Redis: [`RedisCaches`], the [`CacheStore`] of `lock_core::cache::Cache`, on the
//! connections of a [`RedisClient`].
//!
//! - **Keys.** The cache `products` is one hash, `<prefix>cache:{products}`, of key →
//!   `<deadline>:<JSON>`, and one sorted set under the same hash tag, `…:deadlines`, of key →
//!   deadline (the server's time in ms): Redis 7.0 has no per-field expiry. The set also holds
//!   the write stamps of `scripts/stamps.lua`. Both expire with the last entry or 30 s after the
//!   last write, so an unused cache disappears.
//! - **A read is one `HGET`**; reads of one cache made at the same time share one `HMGET`
//!   (`reads.rs`). The deadline travels in the value and is compared with an upper
//!   bound of the server's time (its `TIME` as last read plus the local time since), so an
//!   expired entry is never returned; one may read as expired up to a round trip early.
//! - **Writes are scripts** (`scripts/*.lua`): a put sets the entry and its deadline and removes
//!   up to 100 expired entries; an invalidation removes one; a clear `UNLINK`s both keys, freed
//!   off Redis' main thread whatever their size. Each stamps its write; a load reads with the
//!   server's time (`get_marked.lua`) and stores only if no stamp is as late
//!   (`put_loaded.lua`). Each publishes the change on `<prefix>cache:{products}:changed`
//!   (sharded pub/sub, the same hash tag) for in-process tiers: `k<key>` or `c`. Each watch
//!   also publishes a probe, `p<token>`, every 5 s, and reports the stream down when it is not
//!   heard back.

mod clock;
mod reads;
pub(crate) mod scripts;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use lock_core::BoxError;
use lock_core::cache::{
    CacheError, CacheStore, CacheWatch, Change, Entry, LOAD_STORE_WINDOW, WriteMark,
};
use tokio::time::Instant;

use crate::cache::clock::ServerClock;
use crate::core::batch::Batcher;
use crate::core::client::{RedisClient, RedisCore};
use crate::core::error::RedisFailure;
use crate::core::subscriptions::{Heard, Listener};

/// The capability's name in its keys: `<prefix>cache:{<name>}`.
const CAPABILITY: &str = "cache";

/// Where named caches live in Redis: on the connections and key prefix of a [`RedisClient`].
/// Use it through `lock_core::cache::Cache`, or get both from lock-starter.
///
/// Needs `HGET`, `HMGET`, `TIME`, `EVALSHA`, `SCRIPT LOAD` and `SSUBSCRIBE`, and inside its
/// scripts `HSET`, `HDEL`, `ZADD`, `ZREM`, `ZSCORE`, `ZCOUNT`, `ZRANGE`, `ZRANGEBYSCORE`,
/// `PEXPIREAT`, `UNLINK` and `SPUBLISH`.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use lock_core::cache::{Cache, CacheOptions};
/// use lock_redis::cache::RedisCaches;
/// use lock_redis::{RedisClient, RedisConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://127.0.0.1:6379")).await?;
/// let products: Cache<String> =
///     Cache::new(Arc::new(RedisCaches::new(&redis).await), "products", CacheOptions::new())?;
/// products.put("sku-42", &"Fibre 1000".to_owned()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisCaches {
    core: Arc<RedisCore>,
    scripts: scripts::Scripts,
    clock: Arc<ServerClock>,
    refreshing: Arc<AtomicBool>,
    reads: Batcher<reads::Reads>,
}

impl RedisCaches {
    /// Caches on `client`'s connections, under its key prefix. Loads its scripts and reads the
    /// server's clock while Redis answers.
    pub async fn new(client: &RedisClient) -> Self {
        let core = Arc::clone(&client.core);
        let scripts = scripts::Scripts::new();
        crate::core::scripts::preload(&core, &scripts.preloaded(), CAPABILITY).await;
        let caches = RedisCaches {
            reads: reads::reads(&core.client),
            core,
            scripts,
            clock: Arc::default(),
            refreshing: Arc::default(),
        };
        if caches.core.answering() {
            let _ = read_clock(&caches.core.client, &caches.clock).await;
        }
        caches
    }

    /// The Redis keys of the cache `cache`: its hash, e.g. `lock:cache:{products}`, and the
    /// sorted set of its entries' deadlines, `…:deadlines`.
    pub fn cache_keys(&self, cache: &str) -> [String; 2] {
        let hash = self.core.keys.capability_key(CAPABILITY, cache);
        let deadlines = format!("{hash}:deadlines");
        [hash, deadlines]
    }

    /// The channel the changes of `cache` are published on.
    pub fn change_channel(&self, cache: &str) -> String {
        let mut channel = self.core.keys.capability_key(CAPABILITY, cache);
        channel.push_str(":changed");
        channel
    }

    /// The command client, or at once the connection error while the client knows it is
    /// disconnected.
    fn client(
        &self,
        operation: &'static str,
        cache: &str,
        key: &str,
    ) -> Result<&Client, CacheError> {
        (self.core).client_for(redis_operation(operation), |failure| {
            CacheError::unavailable(operation, cache, key, failure)
        })
    }

    fn failed(&self, operation: &'static str, cache: &str, key: &str, error: Error) -> CacheError {
        let failure = self.core.failure(redis_operation(operation), error);
        CacheError::unavailable(operation, cache, key, failure)
    }

    /// Runs a write script on `cache` with `args` after the channel and the window of stamps;
    /// its result (1 or 0). Notes the server's time the script replies with.
    async fn write(
        &self,
        operation: &'static str,
        cache: &str,
        key: &str,
        script: &fred::types::scripts::Script,
        args: &[&[u8]],
    ) -> Result<bool, CacheError> {
        let client = self.client(operation, cache, key)?;
        let sent = Instant::now();
        let keys = self.cache_keys(cache);
        let channel = self.change_channel(cache);
        let window = LOAD_STORE_WINDOW.as_millis().to_string();
        let reply: Value = crate::core::scripts::call(client, script, || {
            let mut values = vec![Value::from(channel.as_str()), Value::from(window.as_str())];
            values.extend(args.iter().map(|a| Value::Bytes(a.to_vec().into())));
            (keys.iter().map(|k| k.as_str().into()).collect(), values)
        })
        .await
        .map_err(|e| self.failed(operation, cache, key, e))?;
        let Value::Array(reply) = reply else {
            return Err(self.unexpected(operation, cache, key));
        };
        match reply.iter().map(Value::as_u64).collect::<Vec<_>>()[..] {
            [Some(result), Some(server_us)] => {
                self.clock.record(sent, server_us / 1000);
                Ok(result == 1)
            }
            _ => Err(self.unexpected(operation, cache, key)),
        }
    }

    fn unexpected(&self, operation: &'static str, cache: &str, key: &str) -> CacheError {
        let failure = RedisFailure::protocol(redis_operation(operation), "unexpected reply shape");
        CacheError::unavailable(operation, cache, key, failure)
    }

    /// The latest the server's time can be now, reading the clock first if it never was, and
    /// refreshing it in the background when the reading is old.
    async fn server_now(&self, client: &Client) -> Result<u64, Error> {
        match self.clock.upper_bound_now() {
            Some((now, stale)) => {
                if stale && !self.refreshing.swap(true, Ordering::AcqRel) {
                    let (client, clock) = (client.clone(), Arc::clone(&self.clock));
                    let refreshing = Arc::clone(&self.refreshing);
                    tokio::spawn(async move {
                        let _ = read_clock(&client, &clock).await;
                        refreshing.store(false, Ordering::Release);
                    });
                }
                Ok(now)
            }
            None => {
                read_clock(client, &self.clock).await?;
                let upper = self.clock.upper_bound_now().map(|(now, _)| now);
                Ok(upper.unwrap_or(u64::MAX))
            }
        }
    }
}

/// Reads the server's clock with `TIME`.
async fn read_clock(client: &Client, clock: &ServerClock) -> Result<(), Error> {
    let sent = Instant::now();
    let command = fred::types::CustomCommand::new_static("TIME", None, false);
    let (seconds, micros): (u64, u64) = client.custom(command, Vec::<Value>::new()).await?;
    clock.record(sent, seconds * 1000 + micros / 1000);
    Ok(())
}

/// The Redis command or script behind an operation, as errors name it.
fn redis_operation(operation: &'static str) -> &'static str {
    match operation {
        "get" => "cache HGET",
        "get for load" => "cache get-marked script",
        "put" => "cache put script",
        "put loaded" => "cache put-loaded script",
        "invalidate" => "cache invalidate script",
        "clear" => "cache clear script",
        _ => "cache watch",
    }
}

/// A TTL in ms, at least 1.
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Splits `<deadline>:<JSON>`; `None`, logged, for a field written by something else or cut
/// short: a miss, which the load overwrites.
fn parse_entry<'a>(cache: &str, key: &str, stored: &'a [u8]) -> Option<(u64, &'a [u8])> {
    let parsed = stored.iter().position(|b| *b == b':').and_then(|colon| {
        let digits = &stored[..colon];
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let deadline = std::str::from_utf8(digits).ok()?.parse().ok()?;
        Some((deadline, &stored[colon + 1..]))
    });
    if parsed.is_none() {
        tracing::debug!(
            cache,
            key,
            "the field holds no `<deadline>:` prefix; a miss"
        );
    }
    parsed
}

/// The entry `stored` holds if it is live at `now` (ms of the server's clock).
fn live_entry(cache: &str, key: &str, stored: &[u8], now: u64) -> Option<Entry> {
    let (deadline, value) = parse_entry(cache, key, stored)?;
    (deadline > now).then(|| Entry {
        value: value.to_vec(),
        expires_in: Duration::from_millis(deadline - now),
    })
}

#[async_trait]
impl CacheStore for RedisCaches {
    async fn get(&self, cache: &str, key: &str) -> Result<Option<Entry>, CacheError> {
        let client = self.client("get", cache, key)?;
        let hash = self.core.keys.capability_key(CAPABILITY, cache);
        let stored = self
            .reads
            .call(&self.core.runtime, hash, key.to_owned())
            .await
            .map_err(|e| self.failed("get", cache, key, e))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        if parse_entry(cache, key, &stored).is_none() {
            return Ok(None);
        }
        let now = self
            .server_now(client)
            .await
            .map_err(|e| self.failed("get", cache, key, e))?;
        Ok(live_entry(cache, key, &stored, now))
    }

    async fn get_for_load(
        &self,
        cache: &str,
        key: &str,
    ) -> Result<(Option<Entry>, WriteMark), CacheError> {
        let client = self.client("get for load", cache, key)?;
        let hash = self.core.keys.capability_key(CAPABILITY, cache);
        let sent = Instant::now();
        let reply: Value = crate::core::scripts::call(client, &self.scripts.get_marked, || {
            (vec![hash.as_str().into()], vec![Value::from(key)])
        })
        .await
        .map_err(|e| self.failed("get for load", cache, key, e))?;
        let (server_us, stored) = match reply {
            Value::Array(reply) => match &reply[..] {
                [us, stored] => (us.as_u64(), stored.as_bytes().map(<[u8]>::to_vec)),
                _ => (None, None),
            },
            _ => (None, None),
        };
        let Some(server_us) = server_us else {
            return Err(self.unexpected("get for load", cache, key));
        };
        self.clock.record(sent, server_us / 1000);
        let entry = stored.and_then(|stored| live_entry(cache, key, &stored, server_us / 1000));
        Ok((entry, WriteMark(server_us)))
    }

    async fn put(
        &self,
        cache: &str,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let ttl = millis(ttl).to_string();
        let args = [key.as_bytes(), value, ttl.as_bytes()];
        self.write("put", cache, key, &self.scripts.put, &args)
            .await
            .map(drop)
    }

    async fn put_if_unwritten(
        &self,
        cache: &str,
        key: &str,
        value: &[u8],
        ttl: Duration,
        mark: WriteMark,
    ) -> Result<bool, CacheError> {
        let ttl = millis(ttl).to_string();
        let mark = mark.0.to_string();
        let args = [key.as_bytes(), value, ttl.as_bytes(), mark.as_bytes()];
        let script = &self.scripts.put_loaded;
        self.write("put loaded", cache, key, script, &args).await
    }

    async fn invalidate(&self, cache: &str, key: &str) -> Result<bool, CacheError> {
        let script = &self.scripts.invalidate;
        let args = [key.as_bytes()];
        self.write("invalidate", cache, key, script, &args).await
    }

    async fn clear(&self, cache: &str) -> Result<bool, CacheError> {
        self.write("clear", cache, "*", &self.scripts.clear, &[])
            .await
    }

    async fn watch(&self, cache: &str) -> Result<Box<dyn CacheWatch>, CacheError> {
        let channel = self.change_channel(cache);
        Ok(Box::new(RedisCacheWatch {
            listener: self.core.subscriptions.listen(&channel),
            core: Arc::clone(&self.core),
            channel,
            started: false,
            probe: None,
            next_probe_at: Instant::now() + PROBE_EVERY,
            silent: false,
        }))
    }
}

/// How often a watch publishes a probe (a message of its own on the cache's channel), to find a subscription that died
/// without an error (a middlebox dropping an idle connection): the in-process tier may serve
/// an entry changed elsewhere for at most this plus [`PROBE_TIMEOUT`] before it is flushed.
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// How long a probe may take to come back before the watch reports [`Change::Down`].
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The changes of one cache, heard on its channel through the core's shared subscriptions.
#[derive(Debug)]
struct RedisCacheWatch {
    listener: Listener,
    core: Arc<RedisCore>,
    channel: String,
    started: bool,
    /// The probe in flight and when it is overdue.
    probe: Option<(String, Instant)>,
    next_probe_at: Instant,
    /// A probe went unheard: `Down` was reported, and `Live` is due when one is heard.
    silent: bool,
}

/// What a watch hears on its channel.
#[derive(Debug, PartialEq)]
enum Published {
    Change(Change),
    /// A watch's probe, `p<token>`.
    Probe(String),
}

/// Reads a published message: `k<key>`, `c` or a probe; anything else as a change of anything.
fn parse_change(message: &Value) -> Published {
    match message.as_str().as_deref() {
        Some("c") => Published::Change(Change::Cleared),
        Some(text) if text.starts_with('k') => Published::Change(Change::Key(text[1..].to_owned())),
        Some(text) if text.starts_with('p') => Published::Probe(text.to_owned()),
        _ => Published::Change(Change::Live),
    }
}

impl RedisCacheWatch {
    /// Publishes a probe, due back by [`PROBE_TIMEOUT`]; one that cannot be published is
    /// overdue at once, since nothing says the stream still works.
    async fn send_probe(&mut self) {
        self.next_probe_at = Instant::now() + PROBE_EVERY;
        if !self.listener.is_confirmed() {
            return;
        }
        let probe = format!("p{}", self.core.owners.next_token());
        let sent: Result<i64, Error> = self
            .core
            .client
            .spublish(self.channel.as_str(), probe.as_str())
            .await;
        let due = if sent.is_ok() {
            Instant::now() + PROBE_TIMEOUT
        } else {
            Instant::now()
        };
        self.probe = Some((probe, due));
    }
}

#[async_trait]
impl CacheWatch for RedisCacheWatch {
    async fn next(&mut self) -> Result<Change, BoxError> {
        if !std::mem::replace(&mut self.started, true) && self.listener.joined_confirmed() {
            return Ok(Change::Live);
        }
        loop {
            let overdue = self.probe.as_ref().map(|(_, at)| *at);
            tokio::select! {
                heard = self.listener.next() => match heard {
                    Heard::Message(message) => match parse_change(&message) {
                        Published::Change(change) => return Ok(change),
                        Published::Probe(probe) => {
                            if self.probe.as_ref().is_some_and(|(sent, _)| *sent == probe) {
                                self.probe = None;
                                if std::mem::take(&mut self.silent) {
                                    return Ok(Change::Live);
                                }
                            }
                        }
                    },
                    Heard::Missed => {
                        self.silent = false;
                        return Ok(Change::Live);
                    }
                    Heard::Lost => return Ok(Change::Down),
                },
                () = tokio::time::sleep_until(self.next_probe_at), if overdue.is_none() => {
                    self.send_probe().await;
                }
                () = tokio::time::sleep_until(overdue.unwrap_or(self.next_probe_at)), if overdue.is_some() => {
                    self.probe = None;
                    if !std::mem::replace(&mut self.silent, true) {
                        tracing::debug!(channel = %self.channel, "a probe of the cache's change stream went unheard; its in-process tiers serve nothing until one is heard");
                        return Ok(Change::Down);
                    }
                }
                failure = self.core.connection_lost("cache watch") => return Err(failure.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_changes_read_as_written_and_anything_else_is_no_entry() {
        let parse = |stored| parse_entry("products", "sku-1", stored);
        assert_eq!(
            parse(b"1764500000123:{\"a\":1}"),
            Some((1_764_500_000_123, &b"{\"a\":1}"[..]))
        );
        assert_eq!(parse(b"17:"), Some((17, &b""[..])));
        for junk in [&b""[..], b"abc", b":{}", b"x1:{}", b"-1:{}"] {
            assert_eq!(parse(junk), None, "{junk:?}");
        }
        let live = |now| live_entry("products", "sku-1", b"1000:{}", now);
        assert_eq!(
            live(999).map(|e| e.expires_in),
            Some(Duration::from_millis(1))
        );
        assert_eq!(live(1000), None, "expired at its deadline");
        let change = |text: &str| parse_change(&Value::from(text));
        assert_eq!(
            change("ksku:42"),
            Published::Change(Change::Key("sku:42".to_owned()))
        );
        assert_eq!(change("c"), Published::Change(Change::Cleared));
        assert_eq!(change("pt-1"), Published::Probe("pt-1".to_owned()));
        for junk in ["", "x", "cc"] {
            assert_eq!(change(junk), Published::Change(Change::Live), "{junk}");
        }
    }
}
