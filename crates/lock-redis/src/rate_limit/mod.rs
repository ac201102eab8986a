//! Rate limiting on Redis: [`RedisRateLimits`], the [`RateLimitStore`] of
//! `lock_core::rate_limit::RateLimiter`, on the connections of a [`RedisClient`].
//!
//! - **Keys.** Limit `login` of key `client-42` is one string, `<prefix>rate:{client-42}:login`,
//!   holding `<tat>:<interval>` (µs; the TAT by the server's `TIME`, from Unix time
//!   1,700,000,000) with the TTL of its reset-after: a key at rest is gone.
//! - **One script** (`scripts/gcra.lua`, `EVALSHA` with a reload on `NOSCRIPT`) reads the
//!   clock and every charge's state, decides them all, and writes a call's charges only if all
//!   are allowed: `TIME`, then a `GET` per key, then a `SET` per key changed.
//! - **Calls made together share a script call**: a call made while another is in flight is
//!   decided with the calls of its slot (all of them on one server) in one `EVALSHA`, in order,
//!   each call all or none as if alone; a call made alone is one `EVALSHA` of its own.
//! - **Cluster.** Charges of one call must share a slot: with the key as the hash tag, limits
//!   of the same key always do; charges of different keys are refused on a Cluster with an
//!   error saying so.

pub(crate) mod scripts;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::*;
use fred::types::scripts::Script;
use lock_core::rate_limit::{Charge, Quota, RateLimitError, RateLimitStore, Verdict};

use crate::core::address::Topology;
use crate::core::batch::{Batched, Batcher, Reply};
use crate::core::client::{RedisClient, RedisCore};
use crate::core::error::{RedisFailure, Refusal};

/// The capability's name in its keys: `<prefix>rate:{<key>}:<limit>`.
const CAPABILITY: &str = "rate";
/// The script as errors name it.
const OPERATION: &str = "rate limit script";

/// Where rate-limit state lives in Redis: on the connections and key prefix of a
/// [`RedisClient`]. Use it through `lock_core::rate_limit::RateLimiter`, or get both from
/// lock-starter.
///
/// Needs `EVALSHA` and `SCRIPT LOAD`, and `TIME`, `GET` and `SET` inside its script.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use lock_core::rate_limit::{FailurePolicy, RateLimiter};
/// use lock_redis::rate_limit::RedisRateLimits;
/// use lock_redis::{RedisClient, RedisConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisClient::connect(RedisConfig::new("redis://127.0.0.1:6379")).await?;
/// let store = Arc::new(RedisRateLimits::new(&redis).await);
/// let login = RateLimiter::new(store, "login", "5/1m".parse()?, FailurePolicy::FailClosed)?;
/// let decision = login.try_acquire("client-42", 1).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisRateLimits {
    core: Arc<RedisCore>,
    decisions: Batcher<Decisions>,
    cluster: bool,
}

impl RedisRateLimits {
    /// Rate limits on `client`'s connections, under its key prefix. Loads the script while
    /// Redis answers.
    pub async fn new(client: &RedisClient) -> Self {
        let core = Arc::clone(&client.core);
        let script = Script::from_lua(scripts::GCRA_SCRIPT);
        crate::core::scripts::preload(&core, &[&script], CAPABILITY).await;
        let cluster = matches!(
            core.config.address.as_ref().map(|a| a.topology()),
            Ok(Topology::Cluster)
        );
        let decisions = Batcher::new(
            Decisions {
                client: core.client.clone(),
                script,
            },
            MAX_BATCH,
        );
        RedisRateLimits {
            core,
            decisions,
            cluster,
        }
    }

    /// The Redis key of limit `limit` for `key`, e.g. `lock:rate:{client-42}:login`, for
    /// inspecting it with `redis-cli`.
    pub fn state_key(&self, limit: &str, key: &str) -> String {
        let mut state = self.core.keys.capability_key(CAPABILITY, key);
        state.push(':');
        state.push_str(limit);
        state
    }
}

#[async_trait]
impl RateLimitStore for RedisRateLimits {
    async fn charge(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, RateLimitError> {
        let Some(first) = charges.first() else {
            return Ok(Vec::new());
        };
        if self.cluster {
            if let Some(other) = charges.iter().find(|c| c.key != first.key) {
                return Err(RateLimitError::invalid(
                    "parts",
                    format!("keys {:?} and {:?}", first.key, other.key),
                    "on a Redis Cluster, limits checked together must be of one key (it is their hash tag, so they share a slot); check the others separately",
                ));
            }
        }
        let failed = |cause: RedisFailure| RateLimitError::unavailable(first.limit, cause);
        self.core.client_for(OPERATION, failed)?;
        let call: Vec<Args> = charges
            .iter()
            .map(|c| Args {
                key: self.state_key(c.limit, c.key),
                interval: c.quota.emission_interval_micros(),
                burst: i64::from(c.quota.burst()),
                cost: i64::from(c.cost),
            })
            .collect();
        // Calls whose keys share a slot may share a script call: all of them on one server.
        let slot = if self.cluster {
            fred::util::redis_keyslot(call[0].key.as_bytes())
        } else {
            0
        };
        let reply = if charges.iter().all(|c| shares_an_instant(c.quota)) {
            self.decisions.call(&self.core.runtime, slot, call).await
        } else {
            self.decisions.call_alone(slot, call).await
        };
        let reply = reply.map_err(|e| failed(self.core.failure(OPERATION, e)))?;
        let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
        Ok(reply
            .chunks_exact(4)
            .map(|v| Verdict {
                allowed: v[0] == 1,
                remaining: u32::try_from(v[1]).unwrap_or(0),
                retry_after: micros(v[2]),
                reset_after: micros(v[3]),
            })
            .collect())
    }
}

/// The most calls one script call decides: a full collection is sent while the next calls
/// start another, so that several are in flight at once.
const MAX_BATCH: usize = 16;

/// The least burst tolerance (burst × emission interval) of a quota whose checks share script
/// calls with others.
const MIN_SHARED_TOLERANCE_MICROS: f64 = 10_000.0;

/// Whether checks of `quota` may share a script call. A shared call decides its checks at one
/// instant: a key whose burst tolerance is a few round trips or less would count checks that
/// came a round trip apart as a burst, and deny ones that, decided alone, it would admit.
fn shares_an_instant(quota: Quota) -> bool {
    quota.emission_interval_micros() * f64::from(quota.burst()) >= MIN_SHARED_TOLERANCE_MICROS
}

/// One charge of a call, as the script takes it.
struct Args {
    key: String,
    /// µs
    interval: f64,
    burst: i64,
    cost: i64,
}

/// Calls of one slot (the group), decided by one `EVALSHA` of the script.
#[derive(Debug)]
struct Decisions {
    client: Client,
    script: Script,
}

impl Decisions {
    /// Decides `calls` in one `EVALSHA`: 4 integers per charge. Sent once: a re-send after a
    /// lost reply would charge every call twice, and answer for the second run only.
    async fn decide(&self, calls: &[Vec<Args>]) -> Result<Vec<i64>, Error> {
        let reply: Vec<i64> = crate::core::scripts::call_once(&self.client, &self.script, || {
            let charges = calls.iter().flat_map(|call| {
                let last = call.len() - 1;
                call.iter().enumerate().map(move |(i, c)| (c, i == last))
            });
            let (mut keys, mut args) = (Vec::new(), Vec::new());
            for (charge, last) in charges {
                keys.push(charge.key.as_str().into());
                args.extend([
                    Value::from(charge.interval),
                    Value::from(charge.burst),
                    Value::from(charge.cost),
                    Value::from(i64::from(last)),
                ]);
            }
            (keys, args)
        })
        .await?;
        let charges: usize = calls.iter().map(Vec::len).sum();
        if reply.len() != 4 * charges {
            return Err(Error::new(ErrorKind::Protocol, "unexpected reply shape"));
        }
        Ok(reply)
    }
}

impl Batched for Decisions {
    type Group = u16;
    type Call = Vec<Args>;
    type Output = Vec<i64>;

    async fn send(&self, _slot: &u16, calls: Vec<Vec<Args>>) -> Vec<Reply<Self>> {
        match self.decide(&calls).await {
            Ok(mut reply) => calls
                .iter()
                .map(|call| Ok(reply.drain(..4 * call.len()).collect()))
                .collect(),
            // A refusal that may be of one call's keys alone (a key of another type, outside
            // the user's key patterns, in a slot being migrated): each call is decided on its
            // own, so that it reaches only that call.
            Err(error) if calls.len() > 1 && refuses_keys(&error) => {
                let alone = calls
                    .iter()
                    .map(|call| self.decide(std::slice::from_ref(call)));
                futures::future::join_all(alone).await
            }
            Err(error) => vec![Err(error); calls.len()],
        }
    }
}

/// Whether `error` is a refusal that may concern some keys of a script call and not others.
fn refuses_keys(error: &Error) -> bool {
    matches!(
        Refusal::of_reply(error),
        Some(Refusal::WrongType | Refusal::NoPermission | Refusal::Other)
    )
}
