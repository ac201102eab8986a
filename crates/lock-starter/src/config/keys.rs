//! The key table: every accepted key with its environment names, default and accepted values,
//! and the hints given for keys that are not in it.

use std::time::Duration;

/// The section every lock key lives in: `telco.platform.lock`.
pub const PREFIX: &str = "telco.platform.lock";
/// The prefix of every lock environment variable: `TELCO_PLATFORM_LOCK_`. Any variable that starts
/// with it and is not in [`KEYS`] is an unknown-key error.
pub const ENV_PREFIX: &str = "TELCO_PLATFORM_LOCK_";

/// Default of `telco.platform.lock.enabled`: `true`.
pub const DEFAULT_ENABLED: bool = true;
/// Default of `telco.platform.lock.redis.address` when none of `spring.data.redis.url`,
/// `spring.data.redis.host` and `spring.data.redis.port` is set: `redis://localhost:6379`.
pub const DEFAULT_REDIS_ADDRESS: &str = lock_redis::DEFAULT_ADDRESS;
/// Default of `spring.data.redis.host` when only the port is set: `localhost`.
pub const DEFAULT_SPRING_HOST: &str = "localhost";
/// Default of `spring.data.redis.port` when only the host is set: 6379.
pub const DEFAULT_SPRING_PORT: u16 = 6379;
/// Default of `telco.platform.lock.redis.command-timeout`: 2 s.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = lock_redis::DEFAULT_COMMAND_TIMEOUT;
/// Shortest accepted `telco.platform.lock.redis.command-timeout`: 10 ms.
pub const MIN_COMMAND_TIMEOUT: Duration = lock_redis::MIN_COMMAND_TIMEOUT;
/// Longest accepted `telco.platform.lock.redis.command-timeout`: 60 s.
pub const MAX_COMMAND_TIMEOUT: Duration = lock_redis::MAX_COMMAND_TIMEOUT;
/// Default of `telco.platform.lock.wait-time`: 5 s (the same as [`lock_core::DEFAULT_WAIT_TIME`]).
/// Accepted: 0 (one attempt) to [`lock_core::MAX_WAIT`] (1 h).
pub const DEFAULT_WAIT_TIME: Duration = lock_core::DEFAULT_WAIT_TIME;
/// Default of `telco.platform.lock.watchdog-timeout`: 30 s (renewed every 10 s). Accepted:
/// [`lock_core::MIN_WATCHDOG_TIMEOUT`] (1 s) to [`lock_core::MAX_WATCHDOG_TIMEOUT`] (1 h).
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = lock_redis::DEFAULT_WATCHDOG_TIMEOUT;
/// Default of `telco.platform.lock.key-prefix`: `lock:`.
pub const DEFAULT_KEY_PREFIX: &str = lock_redis::DEFAULT_KEY_PREFIX;
/// Longest accepted `telco.platform.lock.key-prefix`, in bytes: 64.
pub const MAX_KEY_PREFIX_BYTES: usize = lock_redis::MAX_KEY_PREFIX_BYTES;
/// Default of `telco.platform.lock.min-replicas`: 0 (a grant is reported without waiting for
/// replicas).
pub const DEFAULT_MIN_REPLICAS: u32 = lock_redis::DEFAULT_MIN_REPLICAS;
/// Largest accepted `telco.platform.lock.min-replicas`: 16.
pub const MAX_MIN_REPLICAS: u32 = lock_redis::MAX_MIN_REPLICAS;
/// Default of `telco.platform.lock.replica-sync-timeout`: 1 s.
pub const DEFAULT_REPLICA_SYNC_TIMEOUT: Duration = lock_redis::DEFAULT_REPLICA_SYNC_TIMEOUT;
/// Shortest accepted `telco.platform.lock.replica-sync-timeout`: 1 ms.
pub const MIN_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_millis(1);
/// Longest accepted `telco.platform.lock.replica-sync-timeout`: 10 s.
pub const MAX_REPLICA_SYNC_TIMEOUT: Duration = lock_redis::MAX_REPLICA_SYNC_TIMEOUT;

/// Default of `telco.platform.lock.fair-waiter-timeout`: 5 s.
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = lock_redis::DEFAULT_FAIR_WAITER_TIMEOUT;
/// Shortest accepted `telco.platform.lock.fair-waiter-timeout`: 300 ms.
pub const MIN_FAIR_WAITER_TIMEOUT: Duration = lock_redis::MIN_FAIR_WAITER_TIMEOUT;
/// Longest accepted `telco.platform.lock.fair-waiter-timeout`: 5 min.
pub const MAX_FAIR_WAITER_TIMEOUT: Duration = lock_redis::MAX_FAIR_WAITER_TIMEOUT;

/// What kind of value a key takes; decides how its text is read.
///
/// # Examples
///
/// ```
/// use lock_starter::config::{ValueKind, key_spec};
///
/// assert_eq!(key_spec("wait-time").unwrap().kind, ValueKind::Duration);
/// assert_eq!(key_spec("spring.data.redis.port").unwrap().kind, ValueKind::Port);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueKind {
    /// `true` or `false` (a TOML boolean, or the strings `"true"`/`"false"`).
    Bool,
    /// A duration with a unit, as [`humantime`] reads it: `5s`, `250ms`, `1m30s`.
    Duration,
    /// A Redis URL, see [`RedisAddress`](super::RedisAddress).
    RedisUrl,
    /// A string.
    Text,
    /// A host name or IP address.
    Host,
    /// A TCP port, 1 to 65535.
    Port,
    /// A path to a file.
    Path,
    /// A database number, 0 to 255.
    Database,
    /// A whole number of things (replicas), with the key's bounds.
    Count,
    /// Comma-separated `host:port` pairs (or, in TOML, an array of them).
    HostPortList,
}

/// One row of the key table: a key, what it means, its default and what it accepts.
///
/// The table ([`KEYS`], [`SPRING_KEYS`]) drives everything else: which environment variables are
/// read ([`KeySpec::env_names`]), which keys are unknown, the "accepted" part of every error
/// message, and `docs/configuration.md`.
///
/// # Examples
///
/// A `--help-config` listing for a service:
///
/// ```
/// use lock_starter::config::KEYS;
///
/// for spec in KEYS {
///     println!("{} (default {}; env {})", spec.name, spec.default, spec.env_name());
///     println!("    {} Accepted: {}.", spec.meaning, spec.accepted);
/// }
/// assert_eq!(KEYS[0].name, "telco.platform.lock.enabled");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeySpec {
    /// The full dotted key, e.g. `telco.platform.lock.wait-time`.
    pub name: &'static str,
    /// How the value is read.
    pub kind: ValueKind,
    /// The default, as a person reads it (`5s`, or how it is derived).
    pub default: &'static str,
    /// What the key does.
    pub meaning: &'static str,
    /// What is accepted, quoted at the end of every error about this key.
    pub accepted: &'static str,
}

/// What `telco.platform.lock.redis.address` and `spring.data.redis.url` accept.
const ADDRESS_ACCEPTED: &str = "redis://[user[:password]@]host[:port][/db] (one server); \
     redis-sentinel://[user[:password]@]host[:port][/db]?sentinelServiceName=name\
     [&node=host:port…][&sentinelUsername=user][&sentinelPassword=password] (Sentinel, port \
     26379 when omitted); redis-cluster://[user[:password]@]host[:port][?node=host:port…] \
     (Cluster, database 0 only); rediss://, rediss-sentinel:// and rediss-cluster:// for TLS; \
     ports 1 to 65535, databases 0 to 255";

/// What a Spring host/sentinel/cluster combination accepts.
pub(crate) const SPRING_COMBINATIONS: &str = "one of spring.data.redis.url; \
     spring.data.redis.host/port; spring.data.redis.sentinel.master with \
     spring.data.redis.sentinel.nodes; spring.data.redis.cluster.nodes (the last three with \
     spring.data.redis.username, password, database and ssl.enabled; a cluster with database 0 \
     only) — or telco.platform.lock.redis.address, which wins over every Spring key";

/// What `spring.data.redis.sentinel.nodes` and `spring.data.redis.cluster.nodes` accept.
const NODES_ACCEPTED: &str = "comma-separated host:port pairs, e.g. s1:26379,s2:26379 (host \
     names or IPv4 addresses, ports 1 to 65535; in TOML also an array of strings)";

/// The accepted text of a duration key: the units, examples inside the key's range, the range.
macro_rules! duration_accepted {
    ($examples:literal, $range:literal) => {
        concat!(
            "a duration with a unit (ms, s, m or h), such as ",
            $examples,
            ", ",
            $range
        )
    };
}

/// Every key under `telco.platform.lock`, in documentation order.
pub const KEYS: &[KeySpec] = &[
    KeySpec {
        name: "telco.platform.lock.enabled",
        kind: ValueKind::Bool,
        default: "true",
        meaning: "Master switch. When false, no Redis connection is made and asking for the lock \
                  fails with LOCK_DISABLED.",
        accepted: "true or false",
    },
    KeySpec {
        name: "telco.platform.lock.redis.address",
        kind: ValueKind::RedisUrl,
        default: "from spring.data.redis.url, else built from the other spring.data.redis keys \
                  (host/port, sentinel.master/nodes or cluster.nodes, with username, password, \
                  database and ssl.enabled) if any is set, else redis://localhost:6379",
        meaning: "Where Redis is — one server, a Sentinel group or a Cluster — with credentials, \
                  database, and TLS by scheme.",
        accepted: ADDRESS_ACCEPTED,
    },
    KeySpec {
        name: "telco.platform.lock.redis.command-timeout",
        kind: ValueKind::Duration,
        default: "2s",
        meaning: "Timeout of every Redis command, and of connecting. An acquire returns at most \
                  this long after its wait time.",
        accepted: duration_accepted!("2s or 500ms", "from 10 ms to 60 s"),
    },
    KeySpec {
        name: "telco.platform.lock.redis.tls.ca-file",
        kind: ValueKind::Path,
        default: "none: the system's root certificates",
        meaning: "PEM file of the CA certificates to trust for TLS instead of the system's roots; \
                  read at start-up. Only with a TLS address (rediss://, rediss-sentinel://, \
                  rediss-cluster://).",
        accepted: "a path (relative to the working directory) to a readable PEM file with at \
                   least one CA certificate, together with a rediss://, rediss-sentinel:// or \
                   rediss-cluster:// address",
    },
    KeySpec {
        name: "telco.platform.lock.wait-time",
        kind: ValueKind::Duration,
        default: "5s",
        meaning: "Longest time an acquire waits for a held lock before failing with \
                  LOCK_ACQUISITION_FAILED; 0 means one attempt. A call may pass its own.",
        accepted: duration_accepted!("5s, 250ms or 1m30s", "from 0 ms to 1 h"),
    },
    KeySpec {
        name: "telco.platform.lock.watchdog-timeout",
        kind: ValueKind::Duration,
        default: "30s",
        meaning: "TTL of watchdog leases (Lease::Watchdog), renewed every third of it; a crashed \
                  holder's lock frees itself within this long.",
        accepted: duration_accepted!("30s or 2m", "from 1 s to 1 h"),
    },
    KeySpec {
        name: "telco.platform.lock.min-replicas",
        kind: ValueKind::Count,
        default: "0",
        meaning: "Replicas that must acknowledge a grant (Redis WAIT on the connection that ran \
                  the acquire) before it is reported; with fewer, the grant is handed back and \
                  the acquire fails closed with reason replication_unconfirmed. 0 sends no WAIT.",
        accepted: "a whole number from 0 to 16",
    },
    KeySpec {
        name: "telco.platform.lock.replica-sync-timeout",
        kind: ValueKind::Duration,
        default: "1s",
        meaning: "How long a grant waits for min-replicas acknowledgements; only used when \
                  min-replicas is above 0, and adds to the longest time an acquire can take.",
        accepted: duration_accepted!("1s or 250ms", "from 1 ms to 10 s"),
    },
    KeySpec {
        name: "telco.platform.lock.fair-waiter-timeout",
        kind: ValueKind::Duration,
        default: "5s",
        meaning: "Fair waiters (AcquireOptions::fair) call every third of it while they wait, and \
                  each call keeps the waiter's place in the key's queue for this long plus one \
                  command timeout: a waiter whose process died holds up the queue for at most \
                  that long.",
        accepted: duration_accepted!("5s or 1m", "from 300 ms to 5 min"),
    },
    KeySpec {
        name: "telco.platform.lock.key-prefix",
        kind: ValueKind::Text,
        default: "lock:",
        meaning: "Prefix of every Redis key and channel the lock uses.",
        accepted: "1 to 64 bytes without braces ({ }), whitespace or control characters",
    },
    KeySpec {
        name: "telco.platform.lock.instance-id",
        kind: ValueKind::Text,
        default: "environment variable POD_NAME, else HOSTNAME, else the host name",
        meaning: "Readable part of every owner token, so on-call can see which pod holds a key.",
        accepted: "a host or pod name, 1 to 128 bytes, no control characters or |",
    },
];

/// The Spring Boot keys read as a fallback for `telco.platform.lock.redis.address` (only when
/// the address itself is not set): `spring.data.redis.url` first; else an address built from
/// `sentinel.master` and `sentinel.nodes`, or `cluster.nodes`, or `host`/`port`, with
/// `username`, `password`, `database` and `ssl.enabled` applied. Other keys under
/// `spring.data.redis` are not read; when they are set and a fallback is used, a warning names
/// them.
pub const SPRING_KEYS: &[KeySpec] = &[
    KeySpec {
        name: "spring.data.redis.url",
        kind: ValueKind::RedisUrl,
        default: "none",
        meaning: "Redis URL shared with the service's other Redis clients; used for the lock when \
                  telco.platform.lock.redis.address is not set, before spring.data.redis.host/port.",
        accepted: ADDRESS_ACCEPTED,
    },
    KeySpec {
        name: "spring.data.redis.host",
        kind: ValueKind::Host,
        default: "localhost",
        meaning: "Redis host shared with the service's other Redis clients; used for the lock \
                  when telco.platform.lock.redis.address is not set.",
        accepted: "a host name or IP address, e.g. redis.internal or 10.0.0.7",
    },
    KeySpec {
        name: "spring.data.redis.port",
        kind: ValueKind::Port,
        default: "6379",
        meaning: "Redis port, used with spring.data.redis.host.",
        accepted: "a port number from 1 to 65535",
    },
    KeySpec {
        name: "spring.data.redis.username",
        kind: ValueKind::Text,
        default: "none",
        meaning: "Redis user (ACL), put into an address built from the Spring keys.",
        accepted: "a user name (special characters are percent-encoded into the URL)",
    },
    KeySpec {
        name: "spring.data.redis.password",
        kind: ValueKind::Text,
        default: "none",
        meaning: "Redis password, put into an address built from the Spring keys; shown as ***.",
        accepted: "a password string (special characters are percent-encoded into the URL)",
    },
    KeySpec {
        name: "spring.data.redis.database",
        kind: ValueKind::Database,
        default: "0",
        meaning: "Database number of an address built from the Spring keys (a cluster has only \
                  database 0).",
        accepted: "a database number from 0 to 255 (0 only with spring.data.redis.cluster.nodes)",
    },
    KeySpec {
        name: "spring.data.redis.ssl.enabled",
        kind: ValueKind::Bool,
        default: "false",
        meaning: "TLS for an address built from the Spring keys: rediss://, rediss-sentinel://, \
                  rediss-cluster://.",
        accepted: "true or false",
    },
    KeySpec {
        name: "spring.data.redis.sentinel.master",
        kind: ValueKind::Text,
        default: "none",
        meaning: "Name of the primary the sentinels watch; with sentinel.nodes gives a \
                  redis-sentinel:// address.",
        accepted: "a Sentinel master name, e.g. mymaster, together with \
                   spring.data.redis.sentinel.nodes",
    },
    KeySpec {
        name: "spring.data.redis.sentinel.nodes",
        kind: ValueKind::HostPortList,
        default: "none",
        meaning: "The sentinels, host:port, comma-separated; with sentinel.master gives a \
                  redis-sentinel:// address.",
        accepted: NODES_ACCEPTED,
    },
    KeySpec {
        name: "spring.data.redis.cluster.nodes",
        kind: ValueKind::HostPortList,
        default: "none",
        meaning: "Seed nodes of a Redis Cluster, host:port, comma-separated; gives a \
                  redis-cluster:// address.",
        accepted: NODES_ACCEPTED,
    },
];

impl KeySpec {
    /// The key relative to its section: `wait-time` for `telco.platform.lock.wait-time`,
    /// `redis.address` for `telco.platform.lock.redis.address`. Spring keys are returned whole.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::key_spec;
    ///
    /// assert_eq!(key_spec("telco.platform.lock.redis.address").unwrap().short_name(), "redis.address");
    /// assert_eq!(key_spec("spring.data.redis.url").unwrap().short_name(), "spring.data.redis.url");
    /// ```
    pub fn short_name(&self) -> &'static str {
        self.name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_prefix('.'))
            .unwrap_or(self.name)
    }

    /// The environment variable named after the key: `.` and `-` become `_`, letters are
    /// uppercased (`TELCO_PLATFORM_LOCK_WAIT_TIME`).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::key_spec;
    ///
    /// let spec = key_spec("redis.command-timeout").unwrap();
    /// assert_eq!(spec.env_name(), "TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT");
    /// ```
    pub fn env_name(&self) -> String {
        self.name
            .chars()
            .map(|c| match c {
                '.' | '-' => '_',
                c => c.to_ascii_uppercase(),
            })
            .collect()
    }

    /// Spring's relaxed form of [`KeySpec::env_name`]: dashes are dropped instead of becoming `_`
    /// (`TELCO_PLATFORM_LOCK_WAITTIME`). The same as `env_name` for keys without dashes.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::key_spec;
    ///
    /// let spec = key_spec("redis.command-timeout").unwrap();
    /// assert_eq!(spec.relaxed_env_name(), "TELCO_PLATFORM_LOCK_REDIS_COMMANDTIMEOUT");
    /// ```
    pub fn relaxed_env_name(&self) -> String {
        self.name
            .chars()
            .filter(|&c| c != '-')
            .map(|c| match c {
                '.' => '_',
                c => c.to_ascii_uppercase(),
            })
            .collect()
    }

    /// Every environment variable that sets this key: [`KeySpec::env_name`], then
    /// [`KeySpec::relaxed_env_name`] if it differs.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::key_spec;
    ///
    /// assert_eq!(
    ///     key_spec("wait-time").unwrap().env_names(),
    ///     ["TELCO_PLATFORM_LOCK_WAIT_TIME", "TELCO_PLATFORM_LOCK_WAITTIME"]
    /// );
    /// assert_eq!(key_spec("enabled").unwrap().env_names(), ["TELCO_PLATFORM_LOCK_ENABLED"]);
    /// ```
    pub fn env_names(&self) -> Vec<String> {
        let (strict, relaxed) = (self.env_name(), self.relaxed_env_name());
        if strict == relaxed {
            vec![strict]
        } else {
            vec![strict, relaxed]
        }
    }
}

/// The row of `key`, given as the full dotted name (`telco.platform.lock.wait-time`) or
/// relative to `telco.platform.lock` (`wait-time`). Spring keys are found by their full name.
///
/// # Examples
///
/// ```
/// use lock_starter::config::key_spec;
///
/// let spec = key_spec("wait-time").unwrap();
/// assert_eq!(spec.name, "telco.platform.lock.wait-time");
/// assert_eq!(spec.default, "5s");
/// assert_eq!(key_spec("telco.platform.lock.wait-time"), Some(spec));
/// assert_eq!(key_spec("lease-time"), None); // the lease is chosen per call
/// ```
pub fn key_spec(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter()
        .chain(SPRING_KEYS)
        .find(|spec| spec.name == key || spec.short_name() == key)
}

pub(crate) fn spec(name: &str) -> &'static KeySpec {
    key_spec(name).unwrap_or_else(|| panic!("{name} is not in the key table"))
}

/// `telco.platform.lock.{enabled, redis.address, …}`, for "known keys" lists.
pub(crate) fn known_keys() -> String {
    let short: Vec<&str> = KEYS.iter().map(KeySpec::short_name).collect();
    format!("{PREFIX}.{{{}}}", short.join(", "))
}

/// The canonical variable of every key, for "known variables" lists.
pub(crate) fn known_env_names() -> String {
    let names: Vec<String> = KEYS.iter().map(KeySpec::env_name).collect();
    let spring: Vec<String> = SPRING_KEYS.iter().map(KeySpec::env_name).collect();
    format!(
        "{} (each also without the underscores that stand for dashes, e.g. \
         TELCO_PLATFORM_LOCK_WAITTIME), {}",
        names.join(", "),
        spring.join(", ")
    )
}

/// Lowercase letters and digits only, so `wait_time`, `waitTime` and `WAIT-TIME` compare equal.
fn normalize(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Why an unknown key is unknown, given relative to `telco.platform.lock` (`wait-tme`,
/// `redis.host`) or as the part of an environment variable after `TELCO_PLATFORM_LOCK_`.
/// `as_env` picks how the suggested key is spelled.
pub(crate) fn unknown_key_hint(unknown: &str, as_env: bool) -> Option<String> {
    let norm = normalize(unknown);
    if norm.contains("lease") {
        return Some(
            "there is deliberately no lease-time key: the lease is chosen per call, \
             Lease::Watchdog (renewed while the holder lives, TTL = watchdog-timeout) or \
             Lease::Fixed(duration)"
                .to_owned(),
        );
    }
    if let Some(rest) = norm.strip_prefix("redis") {
        let address = if as_env {
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS"
        } else {
            "telco.platform.lock.redis.address"
        };
        if [
            "host", "hostname", "port", "user", "username", "password", "pass", "passwd", "pwd",
            "auth", "database", "db", "url", "uri",
        ]
        .contains(&rest)
        {
            return Some(format!(
                "host, port, user, password and database all go into {address}, as \
                 redis://[user[:password]@]host[:port][/db]"
            ));
        }
        if ["sentinel", "cluster", "nodes", "node", "master"]
            .iter()
            .any(|word| rest.starts_with(word))
        {
            return Some(format!(
                "Sentinel and Cluster are configured through {address}, as \
                 redis-sentinel://host:26379?sentinelServiceName=mymaster&node=host2:26379 or \
                 redis-cluster://host:6379?node=host2:6379"
            ));
        }
        if (rest.starts_with("ssl") || rest.starts_with("tls")) && suggest(&norm).is_none() {
            let ca_file = if as_env {
                "TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE"
            } else {
                "telco.platform.lock.redis.tls.ca-file"
            };
            return Some(format!(
                "TLS is chosen by the scheme of {address} (rediss://, rediss-sentinel://, \
                 rediss-cluster://); the only TLS key is {ca_file}"
            ));
        }
    }
    let suggestion = suggest(&norm)?;
    let spelled = if as_env {
        suggestion.env_name()
    } else {
        suggestion.name.to_owned()
    };
    Some(format!("did you mean {spelled}?"))
}

/// The closest known key, if one is close enough to be a likely typo.
fn suggest(norm: &str) -> Option<&'static KeySpec> {
    if norm.is_empty() {
        return None;
    }
    KEYS.iter()
        .filter_map(|spec| {
            let whole = normalize(spec.short_name());
            // Also compare with the last segment, for `command-timeout` written outside `redis`.
            let last = normalize(spec.short_name().rsplit('.').next().unwrap_or_default());
            let distance = strsim::damerau_levenshtein(norm, &whole)
                .min(strsim::damerau_levenshtein(norm, &last));
            let allowed = (whole.len() / 4).max(1);
            (distance <= allowed).then_some((distance, spec))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, spec)| spec)
}

/// Whether an unknown key's value may be a secret and must not be shown. `name` is a key or a
/// variable name (any case and separators).
///
/// Hidden: names containing `pass` (`password`, `passwd`, `passphrase`), `pwd`, `secret`,
/// `token`, `credential`, `auth`, `private`, `apikey`, `accesskey` or `signingkey`, and names
/// whose last segment is `key`, `pw` or `pin` (`redis.key`, `TELCO_PLATFORM_LOCK_KEY`). Not
/// hidden: other names with `key` in them (`key-prefix`, or a misspelt `key-prefx`), so a
/// wrong prefix is still shown.
pub(crate) fn looks_secret(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "pass",
        "pwd",
        "secret",
        "token",
        "credential",
        "auth",
        "private",
        "apikey",
        "accesskey",
        "signingkey",
    ];
    const SEGMENTS: &[&str] = &["key", "pw", "pin"];
    let norm = normalize(name);
    WORDS.iter().any(|word| norm.contains(word))
        || name
            .rsplit(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .is_some_and(|last| SEGMENTS.iter().any(|word| last.eq_ignore_ascii_case(word)))
}

/// The segments of [`PREFIX`]: `telco`, `platform`, `lock`.
pub(crate) const PREFIX_SEGMENTS: [&str; 3] = ["telco", "platform", "lock"];

/// How similar a name must be to a segment of `telco.platform.lock` to count as a misspelling
/// of it, as strsim's normalized Damerau-Levenshtein similarity of the [`normalize`]d names: one
/// edit in `telco` or `lock` (`lok`, `lcok`, `locks`), two in `platform` (`platfrom`,
/// `pltfrom`). `log`, `logs`, `kafka`, `outbox` and `telecom` stay below it.
pub(crate) const NEAR_MISS_SIMILARITY: f64 = 0.75;

/// Whether `segment`, found where the path `telco.platform.lock` has its segment number
/// `depth`, is a misspelling of that segment, or of it and the following ones run together
/// (`platformlock`, `telco_platform_lock`). Also true for a different case or separators
/// (`Lock`). Returns how many segments of the prefix it stands for, counted from the start:
/// `Some(2)` for `platfrom` at depth 1, `Some(3)` for `platformlock` at depth 1.
///
/// The caller handles the exact segment; this is for names that differ from it.
pub(crate) fn near_miss_segment(segment: &str, depth: usize) -> Option<usize> {
    let got = normalize(segment);
    if got.is_empty() || depth >= PREFIX_SEGMENTS.len() {
        return None;
    }
    (depth + 1..=PREFIX_SEGMENTS.len())
        .map(|end| {
            let want = PREFIX_SEGMENTS[depth..end].concat();
            (strsim::normalized_damerau_levenshtein(&got, &want), end)
        })
        .filter(|(similarity, _)| *similarity >= NEAR_MISS_SIMILARITY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, end)| end)
}

/// If the environment variable `name` looks like a misspelt `TELCO_PLATFORM_LOCK_…` variable
/// (`TELCO_PLATFROM_LOCK_WAIT_TIME`, `telco_platform_lock_wait_time`), the name it was probably
/// meant to have. `None` for the exact prefix (those variables are checked as keys) and for
/// anything else.
pub(crate) fn env_near_miss(name: &str) -> Option<String> {
    let segments: Vec<&str> = name.split('_').collect();
    let (mut depth, mut pos, mut missed) = (0, 0, false);
    while depth < PREFIX_SEGMENTS.len() {
        let segment = segments.get(pos)?;
        if *segment == PREFIX_SEGMENTS[depth].to_ascii_uppercase() {
            depth += 1;
        } else {
            depth = near_miss_segment(segment, depth)?;
            missed = true;
        }
        pos += 1;
    }
    let rest = segments[pos..].join("_");
    (missed && !rest.is_empty()).then(|| format!("{ENV_PREFIX}{}", rest.to_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_follow_the_key_names() {
        let wait = key_spec("wait-time").unwrap();
        assert_eq!(
            wait.env_names(),
            [
                "TELCO_PLATFORM_LOCK_WAIT_TIME",
                "TELCO_PLATFORM_LOCK_WAITTIME"
            ]
        );
        let timeout = key_spec("telco.platform.lock.redis.command-timeout").unwrap();
        assert_eq!(
            timeout.env_names(),
            [
                "TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT",
                "TELCO_PLATFORM_LOCK_REDIS_COMMANDTIMEOUT"
            ]
        );
        assert_eq!(
            key_spec("enabled").unwrap().env_names(),
            ["TELCO_PLATFORM_LOCK_ENABLED"]
        );
        assert_eq!(
            key_spec("spring.data.redis.host").unwrap().env_names(),
            ["SPRING_DATA_REDIS_HOST"]
        );
        for spec in KEYS {
            for env in spec.env_names() {
                assert!(env.starts_with(ENV_PREFIX), "{env}");
            }
        }
    }

    #[test]
    fn accepted_ranges_match_the_core_bounds() {
        fn human(d: Duration) -> String {
            match d.as_millis() {
                0 => "0 ms".to_owned(),
                ms if ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
                ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
                ms => format!("{ms} ms"),
            }
        }
        let range = |key: &str, min: Duration, max: Duration| {
            let accepted = key_spec(key).unwrap().accepted;
            let expected = format!("from {} to {}", human(min), human(max));
            assert!(accepted.ends_with(&expected), "{accepted} vs {expected}");
        };
        range("wait-time", Duration::ZERO, lock_core::MAX_WAIT);
        range(
            "watchdog-timeout",
            lock_core::MIN_WATCHDOG_TIMEOUT,
            lock_core::MAX_WATCHDOG_TIMEOUT,
        );
        range(
            "redis.command-timeout",
            MIN_COMMAND_TIMEOUT,
            MAX_COMMAND_TIMEOUT,
        );
        assert!(
            key_spec("instance-id")
                .unwrap()
                .accepted
                .contains(&format!("{} bytes", lock_core::MAX_INSTANCE_ID_BYTES))
        );
        assert!(
            key_spec("key-prefix")
                .unwrap()
                .accepted
                .contains(&format!("{MAX_KEY_PREFIX_BYTES} bytes"))
        );
    }

    #[test]
    fn typos_get_a_suggestion_and_strangers_do_not() {
        let hint = |k: &str| unknown_key_hint(k, false).unwrap_or_default();
        assert_eq!(
            hint("wait-tme"),
            "did you mean telco.platform.lock.wait-time?"
        );
        assert_eq!(
            hint("wait_time"),
            "did you mean telco.platform.lock.wait-time?"
        );
        assert_eq!(
            hint("waitTime"),
            "did you mean telco.platform.lock.wait-time?"
        );
        assert_eq!(
            hint("redis.adress"),
            "did you mean telco.platform.lock.redis.address?"
        );
        assert_eq!(
            hint("command-timeout"),
            "did you mean telco.platform.lock.redis.command-timeout?"
        );
        assert_eq!(hint("enable"), "did you mean telco.platform.lock.enabled?");
        assert!(hint("lease-time").contains("Lease::Fixed"));
        assert!(hint("redis.password").contains("redis://[user[:password]@]"));
        assert_eq!(unknown_key_hint("colour", false), None);
        assert_eq!(
            unknown_key_hint("WAIT_TME", true).unwrap(),
            "did you mean TELCO_PLATFORM_LOCK_WAIT_TIME?"
        );
    }

    #[test]
    fn the_prefix_segments_are_the_prefix() {
        assert_eq!(PREFIX_SEGMENTS.join("."), PREFIX);
    }

    #[test]
    fn near_misses_of_the_section_are_close_and_other_sections_are_not() {
        // (segment, depth in telco.platform.lock) → segments it stands for.
        for (segment, depth, end) in [
            ("lok", 2, 3),
            ("lcok", 2, 3),
            ("lokc", 2, 3),
            ("locks", 2, 3),
            ("Lock", 2, 3),
            ("LOCK", 2, 3),
            ("platfrom", 1, 2),
            ("platfom", 1, 2),
            ("pltfrom", 1, 2),
            ("Platform", 1, 2),
            ("platform-lock", 1, 3),
            ("platformlock", 1, 3),
            ("telko", 0, 1),
            ("telco_platform_lock", 0, 3),
            ("telco.platform.lock", 0, 3),
        ] {
            assert_eq!(
                near_miss_segment(segment, depth),
                Some(end),
                "{segment} at {depth}"
            );
        }
        for (segment, depth) in [
            ("log", 2),
            ("logs", 2),
            ("kafka", 2),
            ("outbox", 2),
            ("locking", 2),
            ("locale", 2),
            ("loki", 2),
            ("cache", 2),
            ("", 2),
            ("billing", 1),
            ("payments", 1),
            ("telecom", 0),
            ("tracing", 0),
            ("server", 0),
            ("spring", 0),
            ("lock", 3),
        ] {
            assert_eq!(
                near_miss_segment(segment, depth),
                None,
                "{segment} at {depth}"
            );
        }
    }

    #[test]
    fn misspelt_lock_variables_are_recognised() {
        for (name, meant) in [
            (
                "TELCO_PLATFROM_LOCK_WAIT_TIME",
                "TELCO_PLATFORM_LOCK_WAIT_TIME",
            ),
            (
                "TELCO_PLATFORM_LOK_REDIS_ADDRESS",
                "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            ),
            ("TELCO_PLATFORMLOCK_ENABLED", "TELCO_PLATFORM_LOCK_ENABLED"),
            (
                "telco_platform_lock_wait_time",
                "TELCO_PLATFORM_LOCK_WAIT_TIME",
            ),
            (
                "TELKO_PLATFORM_LOCK_KEY_PREFIX",
                "TELCO_PLATFORM_LOCK_KEY_PREFIX",
            ),
        ] {
            assert_eq!(env_near_miss(name).as_deref(), Some(meant), "{name}");
        }
        for name in [
            "TELCO_PLATFORM_LOCK_WAIT_TIME",
            "TELCO_PLATFORM_LOG_LEVEL",
            "TELCO_PLATFORM_KAFKA_BROKERS",
            "TELCO_PLATFORM_OUTBOX_ENABLED",
            "TELCO_PLATFORM_LOK",
            "TELCO_BILLING_X",
            "SPRING_DATA_REDIS_HOST",
            "PATH",
            "TELCO",
        ] {
            assert_eq!(env_near_miss(name), None, "{name}");
        }
    }

    #[test]
    fn secret_looking_names_hide_their_values() {
        for name in [
            "password",
            "redis.password",
            "redis.pwd",
            "REDIS_PWD",
            "passwd",
            "pass",
            "passphrase",
            "secret",
            "client-secret",
            "token",
            "auth-token",
            "credentials",
            "credential",
            "auth",
            "private-key",
            "api-key",
            "API_KEY",
            "apiKey",
            "access-key",
            "signing_key",
            "key",
            "redis.key",
            "KEY",
            "redis.pw",
            "pin",
        ] {
            assert!(looks_secret(name), "{name} looks secret");
        }
        for name in [
            "key-prefix",
            "key-prefx",
            "KEY_PREFX",
            "keyprefix",
            "wait-tme",
            "colour",
            "redis.adress",
            "redis.host",
            "instance-id",
            "lease-time",
            "keys",
            "ping",
        ] {
            assert!(!looks_secret(name), "{name} does not look secret");
        }
    }
}
