//! The key table: every key declared once, with its default, what it accepts and its doc line.
//! Loading, checking, error texts, [`LockSettings::describe`], the environment names,
//! `config/lock.toml` and the table of `docs/configuration.md` all follow from it (the last two
//! are tested against it).

use std::path::Path;
use std::time::Duration;

use lock_core::cache::{
    MAX_CROSS_POD_LOAD_WAIT, MAX_TTL as MAX_CACHE_TTL, MAX_VALUE_BYTES as MAX_CACHE_VALUE_BYTES,
    MIN_TTL as MIN_CACHE_TTL,
};
use lock_core::duration_range;
use lock_core::idempotency::{MAX_RESULT_BYTES, MIN_RESULT_TTL};
use lock_core::lock::{MAX_LEASE, MAX_WAIT, MAX_WATCHDOG_TIMEOUT, MIN_WATCHDOG_TIMEOUT};
use lock_core::rate_limit::{MAX_BURST, MAX_LOCAL_BATCH, Quota};
use lock_core::validate_instance_id;
use lock_redis::limits::{
    ACCEPTED_ADDRESSES, MAX_COMMAND_TIMEOUT, MAX_FAIR_WAITER_TIMEOUT, MAX_MIN_REPLICAS,
    MAX_REPLICA_SYNC_TIMEOUT, MIN_COMMAND_TIMEOUT, MIN_FAIR_WAITER_TIMEOUT,
    MIN_REPLICA_SYNC_TIMEOUT,
};
use lock_redis::{RedisAddress, key_prefix_problem};

use super::LockSettings;

// Both are exported by `http` and the second bounds a key of the table, also without `http`.

/// The largest request body the `Idempotency-Key` layer reads by default: 1 MiB
/// (`telco.platform.lock.idempotency.http-max-body-bytes`).
#[cfg_attr(not(feature = "http"), allow(dead_code, unreachable_pub))]
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// The largest accepted request body limit of the `Idempotency-Key` layer: 64 MiB (the body is
/// buffered whole to be fingerprinted).
#[cfg_attr(not(feature = "http"), allow(unreachable_pub))]
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// The section of every key of the lock.
pub const PREFIX: &str = "telco.platform.lock";
/// The start of every environment variable of the lock.
pub const ENV_PREFIX: &str = "TELCO_PLATFORM_LOCK_";

/// What a key accepts; the range checks and the "accepted" texts are derived from it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Accepts {
    /// `true` or `false`.
    Bool,
    /// A duration from `min` to `max`, both included.
    Duration {
        /// Shortest accepted.
        min: Duration,
        /// Longest accepted.
        max: Duration,
    },
    /// A whole number from `min` to `max`, both included.
    Count {
        /// Smallest accepted.
        min: u32,
        /// Largest accepted.
        max: u32,
    },
    /// Text checked by `check` (a problem, or `None` when accepted), accepted as `described`.
    Text {
        /// What is accepted, for messages and documentation.
        described: &'static str,
        /// What is wrong with a value, if anything.
        check: fn(&str) -> Option<String>,
    },
}

/// The default of a key.
#[derive(Debug, Clone, Copy)]
pub enum KeyDefault {
    /// A value, loaded as if it were written in a file.
    Value(&'static str),
    /// Worked out at load time (from the environment, the host name), as described.
    Described(&'static str),
}

/// A key's value as [`LockSettings`] holds it, for checks and [`LockSettings::describe`].
pub(crate) enum Val<'a> {
    Bool(bool),
    Duration(Duration),
    Count(u32),
    Text(&'a str),
    Address(&'a RedisAddress),
    Path(Option<&'a Path>),
}

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    /// The full dotted name, e.g. `telco.platform.lock.wait-time`.
    pub name: &'static str,
    /// The default.
    pub default: KeyDefault,
    /// What is accepted.
    pub accepts: Accepts,
    /// What the key does, one line (the doc table and `config/lock.toml` show it).
    pub doc: &'static str,
    get: Option<fn(&LockSettings) -> Val<'_>>,
}

impl PartialEq for KeySpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for KeySpec {}

const fn key(
    name: &'static str,
    default: KeyDefault,
    accepts: Accepts,
    doc: &'static str,
    get: fn(&LockSettings) -> Val<'_>,
) -> KeySpec {
    KeySpec {
        get: Some(get),
        ..named(name, default, accepts, doc)
    }
}

const fn duration(min: Duration, max: Duration) -> Accepts {
    Accepts::Duration { min, max }
}

use KeyDefault::{Described, Value};

/// Every key of the lock, in the order they are checked and documented.
#[rustfmt::skip]
pub const KEYS: &[KeySpec] = &[
    key("telco.platform.lock.enabled", Value("true"), Accepts::Bool,
        "Master switch. When false, no Redis connection is made and asking for the lock fails with LOCK_DISABLED, naming where it was switched off.",
        |s| Val::Bool(s.enabled)),
    key("telco.platform.lock.redis.address", Value("redis://localhost:6379"),
        text(ACCEPTED_ADDRESSES, |_| None),
        "Where Redis is: one server, a Sentinel group or a Cluster, with credentials and database; TLS by scheme. When not set: spring.data.redis.url, else spring.data.redis.host/port.",
        |s| Val::Address(&s.redis.address)),
    key("telco.platform.lock.redis.command-timeout", Value("2s"), duration(MIN_COMMAND_TIMEOUT, MAX_COMMAND_TIMEOUT),
        "Timeout of every Redis command, and of connecting.",
        |s| Val::Duration(s.redis.command_timeout)),
    key("telco.platform.lock.redis.tls.ca-file", Described("none: the system's root certificates"),
        text("a readable file with a PEM certificate, only with a rediss:// address", |_| None),
        "PEM file of the CA certificates to trust for TLS instead of the system's roots.",
        |s| Val::Path(s.redis.tls_ca_file.as_deref())),
    key("telco.platform.lock.wait-time", Value("5s"), duration(Duration::ZERO, MAX_WAIT),
        "Longest time an acquire waits for a held lock before failing with LOCK_ACQUISITION_FAILED; 0 means one attempt. A call may pass its own wait.",
        |s| Val::Duration(s.wait_time)),
    key("telco.platform.lock.watchdog-timeout", Value("30s"), duration(MIN_WATCHDOG_TIMEOUT, MAX_WATCHDOG_TIMEOUT),
        "TTL of watchdog leases (Lease::Watchdog), renewed every third of it; a crashed holder's lock frees itself within this long.",
        |s| Val::Duration(s.watchdog_timeout)),
    key("telco.platform.lock.min-replicas", Value("0"), Accepts::Count { min: 0, max: MAX_MIN_REPLICAS },
        "Replicas that must acknowledge a grant (Redis WAIT) before it is reported; with fewer, the acquire fails closed (reason replication_unconfirmed). 0 sends no WAIT.",
        |s| Val::Count(s.min_replicas)),
    key("telco.platform.lock.replica-sync-timeout", Value("1s"), duration(MIN_REPLICA_SYNC_TIMEOUT, MAX_REPLICA_SYNC_TIMEOUT),
        "How long a grant waits for min-replicas acknowledgements (only with min-replicas above 0).",
        |s| Val::Duration(s.replica_sync_timeout)),
    key("telco.platform.lock.fair-waiter-timeout", Value("5s"), duration(MIN_FAIR_WAITER_TIMEOUT, MAX_FAIR_WAITER_TIMEOUT),
        "How long a fair waiter keeps its place in a key's queue without calling again (plus one command timeout).",
        |s| Val::Duration(s.fair_waiter_timeout)),
    key("telco.platform.lock.key-prefix", Value("lock:"),
        text("1 to 64 bytes, no braces, whitespace or control characters", key_prefix_problem),
        "Prefix of every Redis key and channel the lock uses.",
        |s| Val::Text(&s.key_prefix)),
    key("telco.platform.lock.instance-id", Described("POD_NAME, else HOSTNAME, else the host name"),
        text("1 to 128 bytes, no control characters or |", instance_id_problem),
        "Readable part of every owner token, so on-call can see which pod holds a key.",
        |s| Val::Text(&s.instance_id)),
    key("telco.platform.lock.idempotency.wait-time", Value("3m20s"), duration(Duration::ZERO, MAX_WAIT),
        "Longest time a duplicate call of Idempotency::execute or begin waits for the first one to finish before failing with IDEMPOTENCY_IN_PROGRESS (409); 0 means do not wait. A call may pass its own. The Idempotency-Key layer uses http-wait-time instead.",
        |s| Val::Duration(s.idempotency.wait_time)),
    key("telco.platform.lock.idempotency.result-ttl", Value("1m30s"), duration(MIN_RESULT_TTL, MAX_LEASE),
        "How long an idempotent call's result is replayed to duplicates. A call may pass its own.",
        |s| Val::Duration(s.idempotency.result_ttl)),
    key("telco.platform.lock.idempotency.max-result-bytes", Value("1048576"), Accepts::Count { min: 1, max: MAX_RESULT_BYTES as u32 },
        "Largest result (serialized as JSON, bytes) stored for replay; a larger one is returned to its caller, not stored, and counted.",
        |s| Val::Count(s.idempotency.max_result_bytes)),
    key("telco.platform.lock.idempotency.http-wait-time", Value("0"), duration(Duration::ZERO, MAX_WAIT),
        "Longest time a retry at the Idempotency-Key layer (LockStarter::idempotency_layer) waits for the first request with its key to finish and gets its response; 0 answers 409 with Retry-After at once. wait-time governs execute, this key the layer.",
        |s| Val::Duration(s.idempotency.http_wait_time)),
    key("telco.platform.lock.idempotency.http-max-body-bytes", Value("1048576"), Accepts::Count { min: 1, max: MAX_BODY_BYTES as u32 },
        "Largest request body, bytes, the Idempotency-Key layer reads to fingerprint a request; a larger one is answered 413 and the handler does not run.",
        |s| Val::Count(s.idempotency.http_max_body_bytes)),
    key("telco.platform.lock.branches.wait-time", Value("30s"), duration(Duration::ZERO, lock_core::branches::MAX_BRANCH_WAIT),
        "How long a master lock with a watchdog lease waits for its registered branches after its block returned, unless the call gives its own; a fixed lease's master waits at most the rest of its lease.",
        |s| Val::Duration(s.branches.wait_time)),
    key("telco.platform.lock.cache.ttl", Value("1h"), duration(MIN_CACHE_TTL, MAX_CACHE_TTL),
        "TTL of the entries of every cache (LockStarter::cache); a put may pass its own.",
        |s| Val::Duration(s.cache.ttl)),
    key("telco.platform.lock.cache.max-value-bytes", Value("1048576"), MAX_VALUE_BYTES_ACCEPTED,
        "Largest value (serialized as JSON, bytes) a cache stores; a larger one is returned to its caller, not cached, and counted.",
        |s| Val::Count(s.cache.max_value_bytes)),
    key("telco.platform.lock.cache.near-cache-entries", Value("0"), NEAR_CACHE_ENTRIES_ACCEPTED,
        "Entries each cache keeps in process memory as well, dropped when any replica changes them (as Redis pushes it) and all while that push is down; 0 keeps none.",
        |s| Val::Count(s.cache.near_cache_entries)),
    key("telco.platform.lock.cache.cross-pod-load-wait", Value("0"), CROSS_POD_LOAD_WAIT_ACCEPTED,
        "How long a miss waits for another replica's load of the same key (and then reads its value) instead of loading itself; 0 loads in every replica that misses.",
        |s| Val::Duration(s.cache.cross_pod_load_wait)),
];

/// What `cache.max-value-bytes` and its per-cache form accept.
const MAX_VALUE_BYTES_ACCEPTED: Accepts = Accepts::Count {
    min: 1,
    max: MAX_CACHE_VALUE_BYTES as u32,
};

/// What `cache.cross-pod-load-wait` and its per-cache form accept.
const CROSS_POD_LOAD_WAIT_ACCEPTED: Accepts = duration(Duration::ZERO, MAX_CROSS_POD_LOAD_WAIT);

/// What `cache.near-cache-entries` and its per-cache form accept: up to 10 million.
const NEAR_CACHE_ENTRIES_ACCEPTED: Accepts = Accepts::Count {
    min: 0,
    max: 10_000_000,
};

/// What stands for the name in a key of [`NAMED_KEYS`].
pub(crate) const NAME: &str = "<name>";

/// The keys of named sections, `<name>` standing for a name the service chooses, such as
/// `telco.platform.lock.rate-limits.login.rate`.
#[rustfmt::skip]
pub const NAMED_KEYS: &[KeySpec] = &[
    named("telco.platform.lock.rate-limits.<name>.rate", Described("none: each limit needs its rate"),
        text("<count>/<period>, such as 100/1s or 5000/1h: 1 or more per 1 ms to 720 h, at most a million per second", quota_problem),
        "Quota of the rate limit <name> (LockStarter::rate_limiter): requests per period at the steady rate."),
    named("telco.platform.lock.rate-limits.<name>.burst", Described("the rate's count"),
        Accepts::Count { min: 1, max: MAX_BURST },
        "Most requests of the rate limit <name> admitted at once, from rest; at most 720 h of the rate."),
    named("telco.platform.lock.rate-limits.<name>.local-batch", Value("0"), Accepts::Count { min: 0, max: MAX_LOCAL_BATCH },
        "Permits of a key of the rate limit <name> taken from Redis at once and spent in this process (RateLimiter::local_batch), for a key decided far more often than Redis should be asked; 0 asks Redis every time. A window may admit up to a batch per replica beyond the limit, and permits unspent within 10 ms to 1 s are lost (docs/rate-limiting.md)."),
    named("telco.platform.lock.caches.<name>.ttl", Described("cache.ttl"), duration(MIN_CACHE_TTL, MAX_CACHE_TTL),
        "TTL of the entries of the cache <name> (LockStarter::cache), instead of cache.ttl."),
    named("telco.platform.lock.caches.<name>.max-value-bytes", Described("cache.max-value-bytes"), MAX_VALUE_BYTES_ACCEPTED,
        "Largest value the cache <name> stores, instead of cache.max-value-bytes."),
    named("telco.platform.lock.caches.<name>.near-cache-entries", Described("cache.near-cache-entries"), NEAR_CACHE_ENTRIES_ACCEPTED,
        "Entries the cache <name> keeps in process memory as well, instead of cache.near-cache-entries."),
    named("telco.platform.lock.caches.<name>.cross-pod-load-wait", Described("cache.cross-pod-load-wait"), CROSS_POD_LOAD_WAIT_ACCEPTED,
        "How long a miss of the cache <name> waits for another replica's load, instead of cache.cross-pod-load-wait."),
];

const fn named(
    name: &'static str,
    default: KeyDefault,
    accepts: Accepts,
    doc: &'static str,
) -> KeySpec {
    KeySpec {
        name,
        default,
        accepts,
        doc,
        get: None,
    }
}

fn quota_problem(text: &str) -> Option<String> {
    let problem = match text.parse::<Quota>().err()? {
        lock_core::rate_limit::RateLimitError::InvalidArgument { problem, .. } => problem,
        other => other.to_string(),
    };
    Some(without_accepted(&problem))
}

/// A check's problem without its `; accepted: …` part, which the key table says itself.
fn without_accepted(problem: &str) -> String {
    problem
        .split("; accepted")
        .next()
        .unwrap_or_default()
        .to_owned()
}

const fn text(described: &'static str, check: fn(&str) -> Option<String>) -> Accepts {
    Accepts::Text { described, check }
}

const fn spring(name: &'static str, described: &'static str, doc: &'static str) -> KeySpec {
    let accepts = text(described, |_| None);
    KeySpec {
        name,
        default: Described("none"),
        accepts,
        doc,
        get: None,
    }
}

/// The Spring Boot keys the address falls back to when `redis.address` is not set (ADR-024).
#[rustfmt::skip]
pub const SPRING_KEYS: &[KeySpec] = &[
    spring("spring.data.redis.url", "as telco.platform.lock.redis.address; not with host/port in the same source",
        "First fallback for the address."),
    spring("spring.data.redis.host", "a host name or IP address",
        "Fallback for the address, combined with port; when only port, username or password is set, localhost."),
    spring("spring.data.redis.port", "a port from 1 to 65535",
        "Fallback for the address, combined with host; when not set, 6379."),
    spring("spring.data.redis.username", "any text", "User (ACL) of an address built from host/port."),
    spring("spring.data.redis.password", "any text; an empty one is no password",
        "Password of an address built from host/port; shown as ***."),
];

fn instance_id_problem(id: &str) -> Option<String> {
    let problem = match validate_instance_id(id).err()? {
        lock_core::LockError::InvalidArgument { problem, .. } => problem,
        other => other.to_string(),
    };
    Some(without_accepted(&problem))
}

impl KeySpec {
    /// What the key accepts, as every error and document says it.
    ///
    /// ```
    /// use lock_starter::config::key_spec;
    /// assert_eq!(
    ///     key_spec("redis.command-timeout").unwrap().accepted(),
    ///     "a duration in ms, s, m or h (such as 250ms, 5s or 1m30s), from 10 ms to 60 s"
    /// );
    /// ```
    pub fn accepted(&self) -> String {
        match self.accepts {
            Accepts::Bool => "true or false (also yes/no, on/off, 1/0, in any case)".to_owned(),
            Accepts::Duration { min, max } => format!(
                "a duration in ms, s, m or h (such as 250ms, 5s or 1m30s{}), from {}",
                if min.is_zero() {
                    "; 0 needs no unit"
                } else {
                    ""
                },
                duration_range(min, max)
            ),
            Accepts::Count { min, max } => format!("a whole number from {min} to {max}"),
            Accepts::Text { described, .. } => described.to_owned(),
        }
    }

    /// The default as documents show it.
    pub fn default_text(&self) -> &'static str {
        match self.default {
            Value(text) | Described(text) => text,
        }
    }

    /// The key relative to `telco.platform.lock` (`redis.address`); Spring keys whole.
    pub fn short_name(&self) -> &'static str {
        self.name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_prefix('.'))
            .unwrap_or(self.name)
    }

    /// The variable named after the key: `.` and `-` become `_`, uppercased
    /// (`TELCO_PLATFORM_LOCK_WAIT_TIME`).
    pub fn env_name(&self) -> String {
        self.name.replace(['.', '-'], "_").to_ascii_uppercase()
    }

    /// Every variable that sets the key: [`KeySpec::env_name`], then Spring's relaxed form without
    /// the dashes (`TELCO_PLATFORM_LOCK_WAITTIME`) if it differs.
    ///
    /// ```
    /// use lock_starter::config::key_spec;
    /// assert_eq!(
    ///     key_spec("wait-time").unwrap().env_names(),
    ///     ["TELCO_PLATFORM_LOCK_WAIT_TIME", "TELCO_PLATFORM_LOCK_WAITTIME"]
    /// );
    /// ```
    pub fn env_names(&self) -> Vec<String> {
        let relaxed = self
            .name
            .replace('-', "")
            .replace('.', "_")
            .to_ascii_uppercase();
        let strict = self.env_name();
        if strict == relaxed {
            vec![strict]
        } else {
            vec![strict, relaxed]
        }
    }

    /// For a key of [`NAMED_KEYS`]: the name `path` gives it, if `path` is this key.
    pub(crate) fn name_in<'a>(&self, path: &'a str) -> Option<&'a str> {
        let (before, after) = self.name.split_once(NAME)?;
        let name = path.strip_prefix(before)?.strip_suffix(after)?;
        (!name.is_empty() && !name.contains('.')).then_some(name)
    }

    /// For a key of [`NAMED_KEYS`]: the name a variable gives it, if the variable sets this
    /// key (`TELCO_PLATFORM_LOCK_RATE_LIMITS_LOGIN_RATE` gives `login`; `_` stands for `-`),
    /// with the place of the variable's form in [`KeySpec::env_names`].
    pub(crate) fn name_in_env(&self, var: &str) -> Option<(String, usize)> {
        self.env_names()
            .iter()
            .enumerate()
            .find_map(|(form, pattern)| {
                let (before, after) = pattern.split_once(&NAME.to_ascii_uppercase())?;
                let name = var.strip_prefix(before)?.strip_suffix(after)?;
                (!name.is_empty()).then(|| (name.to_ascii_lowercase().replace('_', "-"), form))
            })
    }

    /// For a key of [`NAMED_KEYS`]: the key of `name`.
    pub(crate) fn for_name(&self, name: &str) -> String {
        self.name.replace(NAME, name)
    }

    pub(crate) fn value<'a>(&self, settings: &'a LockSettings) -> Option<Val<'a>> {
        self.get.map(|get| get(settings))
    }

    /// What is wrong with `value`, if anything: the one range check of every key.
    pub(crate) fn problem(&self, value: &Val<'_>) -> Option<String> {
        match (self.accepts, value) {
            (Accepts::Duration { min, .. }, Val::Duration(d)) if *d < min => Some(if d.is_zero() {
                "0 is not accepted".to_owned()
            } else {
                "shorter than the minimum".to_owned()
            }),
            (Accepts::Duration { max, .. }, Val::Duration(d)) if *d > max => {
                Some("longer than the maximum".to_owned())
            }
            (Accepts::Count { min, .. }, Val::Count(n)) if *n < min => {
                Some("smaller than the minimum".to_owned())
            }
            (Accepts::Count { max, .. }, Val::Count(n)) if *n > max => {
                Some("larger than the maximum".to_owned())
            }
            (Accepts::Text { check, .. }, Val::Text(text)) => check(text),
            _ => None,
        }
    }
}

/// The row of `key`: its full name, or its name relative to `telco.platform.lock`.
///
/// ```
/// use lock_starter::config::key_spec;
/// assert_eq!(key_spec("wait-time").unwrap().name, "telco.platform.lock.wait-time");
/// assert_eq!(key_spec("lease-time"), None); // the lease is chosen per call
/// ```
pub fn key_spec(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter()
        .chain(SPRING_KEYS)
        .find(|spec| spec.name == key || spec.short_name() == key)
}

/// The key of a [`RedisLockConfig`](lock_redis::RedisLockConfig) setting, as lock-redis names
/// it in its errors: its builder method (`address`, `command_timeout`, `tls_ca_file`,
/// `wait_time`, …) is the key relative to `telco.platform.lock`, without `redis.`, with `_` for
/// `-` and `.`.
pub(crate) fn key_of_setting(setting: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|spec| {
        let short = spec.short_name();
        let short = short.strip_prefix("redis.").unwrap_or(short);
        short.replace(['-', '.'], "_") == setting
    })
}

pub(crate) fn spec(name: &str) -> &'static KeySpec {
    key_spec(name).unwrap_or_else(|| panic!("{name} is not in the key table"))
}

/// The row of the named key `name`, relative to `telco.platform.lock` (`caches.<name>.ttl`).
pub(crate) fn named_spec(name: &str) -> &'static KeySpec {
    NAMED_KEYS
        .iter()
        .find(|spec| spec.short_name() == name)
        .unwrap_or_else(|| panic!("{name} is not in the table of named keys"))
}

/// `telco.platform.lock.{enabled, redis.address, …}`.
pub(crate) fn known_keys() -> String {
    let short: Vec<&str> = KEYS
        .iter()
        .chain(NAMED_KEYS)
        .map(KeySpec::short_name)
        .collect();
    format!("{PREFIX}.{{{}}}", short.join(", "))
}

/// Lowercase letters and digits only, so `wait_time`, `waitTime` and `WAIT-TIME` compare equal.
pub(crate) fn normalize(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A hint for an unknown key, relative to `telco.platform.lock` (`wait-tme`) or the rest of a
/// variable after `TELCO_PLATFORM_LOCK_`: `did you mean …?`, or why there is no such key.
pub(crate) fn unknown_key_hint(unknown: &str, as_env: bool) -> Option<String> {
    let norm = normalize(unknown);
    if norm.contains("lease") {
        return Some(
            "there is deliberately no lease-time key: the lease is chosen per call, \
             Lease::Watchdog or Lease::Fixed(duration)"
                .to_owned(),
        );
    }
    let spec = KEYS
        .iter()
        .filter_map(|spec| {
            let whole = normalize(spec.short_name());
            // The last segment too, for `command-timeout` written outside `redis`.
            let last = normalize(spec.short_name().rsplit('.').next().unwrap_or_default());
            let d = strsim::damerau_levenshtein(&norm, &whole)
                .min(strsim::damerau_levenshtein(&norm, &last));
            (d <= edits_allowed(whole.len())).then_some((d, spec))
        })
        .min_by_key(|(d, _)| *d);
    let name = match spec {
        Some((_, spec)) if as_env => spec.env_name(),
        Some((_, spec)) => spec.name.to_owned(),
        None => named_key_hint(unknown, as_env)?,
    };
    (!norm.is_empty()).then(|| format!("did you mean {name}?"))
}

/// The key of [`NAMED_KEYS`] closest to `unknown`, for the name `unknown` gives: every run of
/// its segments is tried as the name, so only the table and the key's own part are compared
/// (`caches.products.tll` gives `caches.products.ttl`; `CACHE_PRODUCTS_TTL`,
/// `TELCO_PLATFORM_LOCK_CACHES_PRODUCTS_TTL`).
fn named_key_hint(unknown: &str, as_env: bool) -> Option<String> {
    let separator = if as_env { '_' } else { '.' };
    let segments: Vec<&str> = unknown.split(separator).collect();
    let norm = normalize(unknown);
    let mut best: Option<(usize, String)> = None;
    for first in 1..segments.len() {
        for end in first + 1..segments.len() {
            if segments[first..end].iter().any(|s| s.is_empty()) {
                continue; // no name, so no key of one to suggest
            }
            let name = segments[first..end].join(&separator.to_string());
            for spec in NAMED_KEYS {
                let candidate = if as_env {
                    spec.env_name().replace(&NAME.to_ascii_uppercase(), &name)
                } else {
                    spec.for_name(&name)
                };
                let short = if as_env {
                    normalize(&candidate[ENV_PREFIX.len()..])
                } else {
                    normalize(&candidate[PREFIX.len() + 1..])
                };
                let d = strsim::damerau_levenshtein(&norm, &short);
                if d == 0 {
                    // Spelt right under a name holding the separator (`caches."a.b".ttl`):
                    // the name is what is wrong, and its check says so.
                    return None;
                }
                let allowed = edits_allowed(short.len() - normalize(&name).len());
                if d <= allowed && best.as_ref().is_none_or(|(b, _)| d < *b) {
                    best = Some((d, candidate));
                }
            }
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// The end of the message of an unknown key: `; did you mean …?`, or `; explanation. ` or `. `
/// followed by the `accepted` list.
pub(crate) fn hint_part(unknown: &str, as_env: bool, accepted: impl FnOnce() -> String) -> String {
    match unknown_key_hint(unknown, as_env) {
        // The key it meant: the whole list would bury it.
        Some(hint) if hint.ends_with('?') => format!("; {hint}"),
        Some(hint) => format!("; {hint}. {}", accepted()),
        None => format!(". {}", accepted()),
    }
}

/// Whether three segments (of a section path or a variable's name) are a misspelt `spelt`,
/// the prefix as their source writes it (`telco.platform.lock` in a file,
/// `TELCO_PLATFORM_LOCK` in a variable): each within one edit per four letters of its segment,
/// case aside, and not spelt so (`telco.platform.lok`, `TELCO_PLATFROM_LOCK`,
/// `Telco.Platform.Lock`, `telco_platform_lock`). `log` and `kafka` are other sections.
pub(crate) fn near_miss_of_prefix(segments: &[&str], spelt: &str) -> bool {
    let wanted: Vec<&str> = spelt.split(['.', '_']).collect();
    segments.len() == 3
        && segments != wanted.as_slice()
        && segments.iter().zip(&wanted).all(|(got, want)| {
            strsim::damerau_levenshtein(&normalize(got), &normalize(want))
                <= edits_allowed(want.len())
        })
}

/// The edits a spelling of a name of `len` letters may be from it to count as a misspelling:
/// one per four letters, at least one.
pub(crate) fn edits_allowed(len: usize) -> usize {
    (len / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_of_the_redis_lock_has_its_key() {
        for (setting, key) in [
            ("address", "redis.address"),
            ("command_timeout", "redis.command-timeout"),
            ("tls_ca_file", "redis.tls.ca-file"),
            ("wait_time", "wait-time"),
            ("watchdog_timeout", "watchdog-timeout"),
            ("min_replicas", "min-replicas"),
            ("replica_sync_timeout", "replica-sync-timeout"),
            ("fair_waiter_timeout", "fair-waiter-timeout"),
            ("key_prefix", "key-prefix"),
            ("instance_id", "instance-id"),
        ] {
            assert_eq!(key_of_setting(setting), key_spec(key), "{setting}");
            assert!(key_of_setting(setting).is_some(), "{setting}");
        }
        // The starter's own spelling is not a lock-redis setting.
        assert_eq!(key_of_setting("wait-time"), None);
        assert_eq!(key_of_setting("redis.address"), None);
    }

    #[test]
    fn a_named_key_is_suggested_with_a_name_and_never_as_itself() {
        assert_eq!(
            unknown_key_hint("caches.products.tll", false).as_deref(),
            Some("did you mean telco.platform.lock.caches.products.ttl?")
        );
        assert_eq!(unknown_key_hint("rate-limits..rate", false), None);
        assert_eq!(unknown_key_hint("caches.a.b.ttl", false), None);
        assert_eq!(unknown_key_hint("rate-limits.my.api.rate", false), None);
        assert_eq!(unknown_key_hint("RATE_LIMITS__RATE", true), None);
    }
}
