//! Operations for on-call: what a lock's key says ([`RedisLock::status`]), which locks are held
//! ([`RedisLock::list`]) and the forced release of a lock whose holder is stuck
//! ([`RedisLock::force_release`]). Services never need these; the `platform-lock` CLI uses them.

use std::time::Duration;

use fred::prelude::*;
use fred::types::scan::ScanType;
use lock_core::{LockError, OwnerTokens, validate_key};

use crate::core::error::RedisFailure;
use crate::core::keys::KeyLayout;
use crate::lock::RedisLock;
use crate::lock::config::limits::TOMBSTONE_TTL;

/// What Redis says about one lock, read in one atomic script call (plus one `PUBSUB
/// SHARDNUMSUB` for the subscribed clients).
///
/// # Examples
///
/// ```no_run
/// use lock_redis::lock::{RedisLock, RedisLockConfig};
/// use lock_redis::{RedisClient, RedisConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
/// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
/// let status = lock.status("bill-run:2026-11").await?;
/// println!(
///     "{} ({}): held {} time(s), {} fair waiter(s), {} client(s) waiting",
///     status.name, status.redis_key, status.hold_count(), status.fair_waiters, status.subscribed_clients
/// );
/// if !status.is_held() {
///     println!("free: {:?}", status.state);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock's name, e.g. `bill-run:2026-11`.
    pub name: String,
    /// Its Redis key, e.g. `lock:{bill-run:2026-11}`.
    pub redis_key: String,
    /// Held, recently released, or free.
    pub state: LockState,
    /// Fair waiters queued in Redis for it (`ZCARD` of its `…:queue` key).
    pub fair_waiters: u64,
    /// Clients subscribed to its release channel (`PUBSUB SHARDNUMSUB`): each client with at
    /// least one waiter for the key subscribes once, however many of its tasks wait.
    pub subscribed_clients: u64,
}

/// The state of a lock's key.
///
/// # Examples
///
/// ```no_run
/// use lock_redis::lock::{LockState, RedisLock, RedisLockConfig};
/// use lock_redis::{RedisClient, RedisConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// # let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
/// # let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
/// match lock.status("bill-run:2026-11").await?.state {
///     LockState::Held { instance_id, fencing_token, ttl, .. } => {
///         println!("held by pod {instance_id} (token {fencing_token}) for another {ttl:?}")
///     }
///     LockState::Released { released_by, .. } if released_by.ends_with("#forced") => {
///         println!("force-released recently")
///     }
///     LockState::Released { released_by, .. } => println!("released recently by {released_by}"),
///     LockState::Free => println!("free"),
///     _ => println!("in a state this tool does not know yet"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockState {
    /// No key: nobody holds it and it was not released within the tombstone TTL.
    Free,
    /// Held — also a grant its holder released before its minimum hold ended
    /// (`AcquireOptions::hold_at_least`): held by that owner until the hold ends (`ttl`).
    Held {
        /// The holder's owner token, `<instance-id>/<client id>/<n>`.
        holder: String,
        /// The holder's instance id (pod or host name): the owner token before its last two
        /// `/`-separated fields (`OwnerTokens::instance_id_of`), so an id with `/` comes whole.
        instance_id: String,
        /// The grant's fencing token.
        fencing_token: u64,
        /// The remaining TTL of the lease (or of the minimum hold, once released within it).
        ttl: Option<Duration>,
        /// `true` when its holder has released it but the grant's minimum hold
        /// (`AcquireOptions::hold_at_least`) keeps it held, never renewed, until `ttl` ends.
        kept_for_minimum_hold: bool,
    },
    /// Released recently: the tombstone that keeps the fencing token counting up.
    Released {
        /// Who released it: the last holder's owner token, with `#forced` appended when it was
        /// released by [`RedisLock::force_release`].
        released_by: String,
        /// The fencing token of the last grant.
        fencing_token: u64,
        /// How long the tombstone stays.
        ttl: Option<Duration>,
    },
}

impl LockStatus {
    /// How many holds Redis records: 1 while held, else 0. Re-entry is task-local in this
    /// library — a nested acquisition inside `with_lock` re-enters the same lease without a
    /// Redis call — so Redis only ever knows one grant per key; the nesting depth lives in the
    /// holding process (`LockHandle::hold_count`).
    pub fn hold_count(&self) -> u32 {
        u32::from(matches!(self.state, LockState::Held { .. }))
    }

    /// Whether the lock is held now.
    pub fn is_held(&self) -> bool {
        matches!(self.state, LockState::Held { .. })
    }
}

/// What [`RedisLock::force_release`] did.
///
/// # Examples
///
/// ```no_run
/// use lock_redis::lock::{ForceReleased, RedisLock, RedisLockConfig};
/// use lock_redis::{RedisClient, RedisConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// # let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
/// # let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
/// match lock.force_release("bill-run:2026-11").await? {
///     ForceReleased::Released { holder, fencing_token, notified_clients } => println!(
///         "took the lock from {holder} (token {fencing_token}); {notified_clients} waiting client(s) told"
///     ),
///     ForceReleased::NotHeld => println!("nothing to do: not held"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForceReleased {
    /// The lock was held and is now released; its waiters were told.
    Released {
        /// The holder's owner token.
        holder: String,
        /// The fencing token of the released grant.
        fencing_token: u64,
        /// Clients that received the release message (clients with waiters for the key).
        notified_clients: u64,
    },
    /// The lock was not held (free, or already released): nothing was changed.
    NotHeld,
    /// [`RedisLock::force_release_grant`] only: the lock is held under another grant than the
    /// one named — it changed hands since it was read — and nothing was changed.
    HolderChanged {
        /// The current holder's owner token.
        holder: String,
        /// The current grant's fencing token.
        fencing_token: u64,
    },
}

/// How many keys one `SCAN` call asks for.
const SCAN_COUNT: u32 = 1_000;
/// The operation a failed `list` names (the `SCAN` itself, not a key).
const SCAN: &str = "SCAN";
/// The key a failed `list` reports in its `LockError`: it concerns no single lock.
const LIST: &str = "<list>";

impl RedisLock {
    /// The state of lock `name`: holder and TTL, or the tombstone of its last release, or free;
    /// its fair waiters and the clients waiting for its release.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a name the lock would refuse; otherwise
    /// [`LockError::AcquisitionFailed`] with reason `backend_unavailable` (its source a
    /// [`RedisFailure`]) when Redis is unreachable or refuses.
    ///
    /// # Examples
    ///
    /// A stuck bill run, seen by on-call:
    ///
    /// ```no_run
    /// use lock_redis::lock::{LockState, RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig, RedisFailure};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
    /// match lock.status("bill-run:2026-11").await {
    ///     Ok(status) => {
    ///         if let LockState::Held { holder, ttl, .. } = &status.state {
    ///             println!("{} is held by {holder}, TTL {ttl:?}", status.redis_key);
    ///         }
    ///     }
    ///     Err(error) => match RedisFailure::find(&error) {
    ///         Some(failure) => eprintln!("Redis: {failure}"),
    ///         None => eprintln!("{error}"), // e.g. an invalid name
    ///     },
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self, name: &str) -> Result<LockStatus, LockError> {
        validate_key(name)?;
        self.read_status(name).await?.ok_or_else(|| {
            LockError::backend_unavailable(
                name,
                RedisFailure::protocol(
                    "status script",
                    "the key holds no lock value (set by something else): see it with redis-cli \
                     TYPE and GET, and DEL it once nothing needs it",
                ),
            )
        })
    }

    /// [`status`](Self::status) of a valid name; `None` when its key holds something that is not
    /// a lock value.
    async fn read_status(&self, name: &str) -> Result<Option<LockStatus>, LockError> {
        let inner = &self.inner;
        let keys = vec![
            inner.core.keys.lock_key(name),
            inner.core.keys.queue_key(name),
        ];
        let unavailable = |failure| LockError::backend_unavailable(name, failure);
        inner.core.client_for("status script", unavailable)?;
        let fail = |e| unavailable(inner.core.failure("status script", e));
        let reply: Vec<Value> = inner
            .scripts
            .status
            .evalsha_with_reload(&inner.core.client, keys, Vec::<Value>::new())
            .await
            .map_err(fail)?;
        let [value, pttl, queued, lock] = <[Value; 4]>::try_from(reply).map_err(|_| {
            LockError::backend_unavailable(
                name,
                RedisFailure::protocol("status script", "not four values"),
            )
        })?;
        let channel = inner.core.keys.release_channel(name);
        let subscribed: Value = inner
            .core
            .client
            .pubsub_shardnumsub(channel.as_str())
            .await
            .map_err(|e| {
                LockError::backend_unavailable(name, inner.core.failure("PUBSUB SHARDNUMSUB", e))
            })?;
        let ttl = pttl
            .as_i64()
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis);
        let state = match (value.is_null(), lock) {
            (true, _) => LockState::Free,
            (false, Value::Array(fields)) => match lock_state(&fields, ttl) {
                Some(state) => state,
                None => return Ok(None),
            },
            // The script found something that is not a lock value.
            (false, _) => return Ok(None),
        };
        Ok(Some(LockStatus {
            name: name.to_owned(),
            redis_key: inner.core.keys.lock_key(name),
            state,
            fair_waiters: queued.as_u64().unwrap_or(0),
            subscribed_clients: shard_subscribers(subscribed),
        }))
    }

    /// The held locks whose names match the glob `pattern` (Redis `MATCH` syntax; `None`: all),
    /// at most `limit` of them (none for 0), with their state. Found with `SCAN` — never
    /// `KEYS`, which blocks Redis — on every primary of a Cluster, then read one by one with
    /// [`status`](Self::status); a lock released between the two is left out, and so is a key
    /// under the prefix that holds no lock value. The pattern is matched against names, not
    /// keys: `50%` and `a{b}` find those locks, although their keys hold `%`, `{` and `}`
    /// percent-encoded (inside a `[…]` class these three do not match). The order is Redis'
    /// scan order.
    ///
    /// As a Redis user with an ACL, this needs `+scan` on top of the lock's own ACL: see
    /// docs/design.md.
    ///
    /// # Errors
    /// As [`status`](Self::status); a `SCAN` that Redis refuses (e.g. `NOPERM` for a user
    /// without `+scan`) is [`LockError::AcquisitionFailed`] with reason `backend_unavailable`,
    /// its source a [`RedisFailure::Refused`] naming `SCAN`, the refusal and what to grant.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lock_redis::lock::{LockState, RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
    /// // At most 100 of the held bill-run locks.
    /// for status in lock.list(Some("bill-run:*"), 100).await? {
    ///     if let LockState::Held { instance_id, ttl, .. } = &status.state {
    ///         println!("{:<30} {instance_id:<20} {ttl:?}", status.name);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(
        &self,
        pattern: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LockStatus>, LockError> {
        let inner = &self.inner;
        let mut held = Vec::new();
        if limit == 0 {
            return Ok(held);
        }
        let mut glob = escape_glob(&inner.core.config.key_prefix);
        glob.push('{');
        // The pattern names lock names; keys hold them encoded (`%`, `{`, `}`).
        KeyLayout::push_encoded(&mut glob, pattern.unwrap_or("*"));
        glob.push('}');
        let unavailable = |failure| LockError::backend_unavailable(LIST, failure);
        inner.core.client_for(SCAN, unavailable)?;
        let fail = |e| unavailable(inner.core.failure(SCAN, e));
        for server in scan_targets(&inner.core.client).map_err(fail)? {
            let mut cursor = String::from("0");
            loop {
                // Page by page, as plain commands: fred's SCAN streams parse Redis' error reply
                // as a malformed page ("Expected bulk string array from SCAN"), losing the
                // NOPERM that says what to grant, and have no command timeout of their own.
                let page = match &server {
                    Some(server) => {
                        scan_page(
                            &inner.core.client.with_cluster_node(server.clone()),
                            cursor,
                            &glob,
                        )
                        .await
                    }
                    None => scan_page(&inner.core.client, cursor, &glob).await,
                }
                .map_err(fail)?;
                let (next, keys) = parse_scan_page(page).ok_or_else(|| {
                    LockError::backend_unavailable(
                        LIST,
                        RedisFailure::protocol(SCAN, "not a cursor and a list of keys"),
                    )
                })?;
                for key in keys {
                    let Some(name) = decode_name(&inner.core.config.key_prefix, &key) else {
                        continue;
                    };
                    if validate_key(&name).is_err() {
                        continue;
                    }
                    // A key under the prefix that holds no lock value (written by something
                    // else) is no lock: left out, not a failure of the whole listing.
                    let Some(status) = self.read_status(&name).await? else {
                        tracing::debug!(redis_key = %key, "list skips a key holding no lock value");
                        continue;
                    };
                    if status.is_held() {
                        held.push(status);
                        if held.len() >= limit {
                            return Ok(held);
                        }
                    }
                }
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
        Ok(held)
    }

    /// Releases lock `name` whoever holds it — the runbooks' "force unlock", for a holder that
    /// is stuck or gone — and wakes its waiters exactly as a release by the holder would (fair
    /// waiters in queue order). The key becomes a tombstone keeping the fencing token, so the
    /// next grant's token is still higher. The old holder is not told directly: a watchdog
    /// lease finds the key taken at its next renewal (within a third of the watchdog timeout)
    /// and fires `lost()`; its own release then returns `NotHeld`. A fixed-lease holder is not
    /// told at all and may keep working until its lease would have ended: fence its writes.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a bad name; [`LockError::ReleaseFailed`] when Redis is
    /// unreachable or refuses (the key is then unchanged, except after a refused `SPUBLISH`:
    /// see the ACL notes in docs/design.md).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lock_redis::lock::{ForceReleased, RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
    /// // The pod holding the bill run is gone and its fixed lease has days left.
    /// if let ForceReleased::Released { holder, .. } = lock.force_release("bill-run:2026-11").await? {
    ///     println!("released the lock {holder} held");
    /// }
    /// assert!(!lock.status("bill-run:2026-11").await?.is_held());
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, name: &str) -> Result<ForceReleased, LockError> {
        self.force(name, None).await
    }

    /// [`force_release`](Self::force_release), but only of the grant with `fencing_token`: the
    /// holder an operator was shown and confirmed. If the lock has changed hands since (the
    /// holder released it and another took it), nothing is changed and the result is
    /// [`ForceReleased::HolderChanged`] naming the current holder; a lock no longer held is
    /// [`ForceReleased::NotHeld`]. The check and the release are one atomic script call.
    ///
    /// # Errors
    /// As [`force_release`](Self::force_release).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use lock_redis::lock::{ForceReleased, LockState, RedisLock, RedisLockConfig};
    /// use lock_redis::{RedisClient, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let redis = RedisClient::connect(RedisConfig::new("redis://redis.internal:6379")).await?;
    /// let lock = RedisLock::new(&redis, RedisLockConfig::default()).await?;
    /// let shown = lock.status("bill-run:2026-11").await?;
    /// if let LockState::Held { fencing_token, .. } = shown.state {
    ///     // ... the operator confirms this holder ...
    ///     match lock.force_release_grant("bill-run:2026-11", fencing_token).await? {
    ///         ForceReleased::HolderChanged { holder, .. } => println!("now held by {holder}; left alone"),
    ///         other => println!("{other:?}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_release_grant(
        &self,
        name: &str,
        fencing_token: u64,
    ) -> Result<ForceReleased, LockError> {
        self.force(name, Some(fencing_token)).await
    }

    async fn force(&self, name: &str, grant: Option<u64>) -> Result<ForceReleased, LockError> {
        validate_key(name)?;
        let inner = &self.inner;
        let mut args: Vec<Value> = vec![
            inner.core.keys.release_channel(name).into(),
            (TOMBSTONE_TTL.as_millis() as i64).into(),
        ];
        if let Some(token) = grant {
            args.push(token.to_string().into());
        }
        let failed = |cause: RedisFailure| LockError::ReleaseFailed {
            key: name.to_owned(),
            cause: Box::new(cause),
        };
        inner.core.client_for("force-release script", failed)?;
        let reply: Vec<Value> = inner
            .scripts
            .force_release
            .evalsha_with_reload(&inner.core.client, inner.core.keys.fair_keys(name), args)
            .await
            .map_err(|e| failed(inner.core.failure("force-release script", e)))?;
        let token_of = |token: &Value| {
            token
                .as_string()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| failed(RedisFailure::protocol("force-release script", "bad token")))
        };
        match reply.as_slice() {
            [released] if released.as_i64() == Some(0) => Ok(ForceReleased::NotHeld),
            [changed, holder, token] if changed.as_i64() == Some(2) => {
                Ok(ForceReleased::HolderChanged {
                    holder: holder.as_string().unwrap_or_default(),
                    fencing_token: token_of(token)?,
                })
            }
            [_, holder, token, receivers] => Ok(ForceReleased::Released {
                holder: holder.as_string().unwrap_or_default(),
                fencing_token: token_of(token)?,
                notified_clients: receivers.as_u64().unwrap_or(0),
            }),
            _ => Err(failed(RedisFailure::protocol(
                "force-release script",
                "unexpected reply",
            ))),
        }
    }
}

/// One page of `SCAN` on `client` (a Cluster node's, or the only server's), strings only.
async fn scan_page<C: KeysInterface + Sync>(
    client: &C,
    cursor: String,
    glob: &str,
) -> Result<Value, Error> {
    client
        .scan_page(cursor, glob, Some(SCAN_COUNT), Some(ScanType::String))
        .await
}

/// The servers `list` scans: every primary of a Cluster (each holds only its slots' keys), or
/// `None` for the one server of the other deployments.
fn scan_targets(client: &Client) -> Result<Vec<Option<Server>>, Error> {
    if !client.is_clustered() {
        return Ok(vec![None]);
    }
    match client.cached_cluster_state() {
        Some(state) => Ok(state.unique_primary_nodes().into_iter().map(Some).collect()),
        // As fred words it when a command finds no slot map (the client never connected).
        None => Err(Error::new(
            ErrorKind::Cluster,
            "Missing cluster routing state.",
        )),
    }
}

/// One `SCAN` reply: the next cursor (`0` when done) and the keys of this page (keys that are
/// not UTF-8 are left out: no lock key is).
fn parse_scan_page(page: Value) -> Option<(String, Vec<String>)> {
    let Value::Array(mut parts) = page else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let Some(Value::Array(keys)) = parts.pop() else {
        return None;
    };
    let cursor = parts.pop()?.as_string()?;
    Some((
        cursor,
        keys.into_iter().filter_map(|k| k.as_string()).collect(),
    ))
}

/// The state of a lock value the status script parsed (`scripts/lock_value.lua` declares the
/// grammar, for every script): `{state, fencing token, owner}`. A grant released within its
/// minimum hold (`M`) is still held by its owner until the hold ends.
fn lock_state(fields: &[Value], ttl: Option<Duration>) -> Option<LockState> {
    let [state, token, owner] = fields else {
        return None;
    };
    let fencing_token = token.as_string()?.parse().ok()?;
    let owner = owner.as_string()?;
    match state.as_string()?.as_str() {
        state @ ("H" | "M") => Some(LockState::Held {
            instance_id: OwnerTokens::instance_id_of(&owner).to_owned(),
            holder: owner,
            fencing_token,
            ttl,
            kept_for_minimum_hold: state == "M",
        }),
        "R" => Some(LockState::Released {
            released_by: owner,
            fencing_token,
            ttl,
        }),
        _ => None,
    }
}

/// The count of `PUBSUB SHARDNUMSUB <channel>`: `[channel, count]` (RESP2) or a map (RESP3).
fn shard_subscribers(reply: Value) -> u64 {
    match reply {
        Value::Array(values) => values.get(1).and_then(Value::as_u64).unwrap_or(0),
        Value::Map(map) => map
            .inner()
            .values()
            .next()
            .and_then(Value::as_u64)
            .unwrap_or(0),
        _ => 0,
    }
}

/// The lock name of Redis key `key` (`<prefix>{<encoded name>}`); `None` for other keys (a fair
/// queue, a timeout, anything else under the prefix).
fn decode_name(prefix: &str, key: &str) -> Option<String> {
    let encoded = key
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    if encoded.contains(['{', '}']) {
        return None;
    }
    Some(
        encoded
            .replace("%7B", "{")
            .replace("%7D", "}")
            .replace("%25", "%"),
    )
}

/// `text` with the glob characters of `MATCH` escaped, to match it literally.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_decode_back_from_their_keys() {
        let layout = KeyLayout::new("lock:");
        for name in ["plain", "a{b}", "%7B", "%", "ünï:cødé", "}{"] {
            assert_eq!(
                decode_name("lock:", &layout.lock_key(name)).as_deref(),
                Some(name)
            );
        }
        assert_eq!(decode_name("lock:", "lock:{x}:queue"), None);
        assert_eq!(decode_name("lock:", "other:{x}"), None);
    }

    #[test]
    fn parsed_values_map_to_states() {
        let ttl = Some(Duration::from_millis(1500));
        let fields = |f: [&str; 3]| f.map(Value::from).to_vec();
        for state in ["H", "M"] {
            assert_eq!(
                lock_state(&fields([state, "17", "eu/pod-a/ab12/3"]), ttl),
                Some(LockState::Held {
                    holder: "eu/pod-a/ab12/3".into(),
                    instance_id: "eu/pod-a".into(),
                    fencing_token: 17,
                    ttl,
                    kept_for_minimum_hold: state == "M",
                })
            );
        }
        assert!(matches!(
            lock_state(&fields(["R", "18", "pod-a/ab12/3#forced"]), ttl),
            Some(LockState::Released {
                fencing_token: 18,
                ..
            })
        ));
        assert_eq!(lock_state(&fields(["X", "1", "o"]), ttl), None);
        assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
