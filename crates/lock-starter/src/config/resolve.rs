//! Reading the merged figment into [`LockSettings`]: unknown keys, value parsing, bounds, the
//! Spring fallback, the defaults, and warnings about settings the lock does not read.

use std::path::PathBuf;
use std::time::Duration;

use figment::value::{Dict, Value};
use figment::{Figment, Provider};
use lock_core::{
    LockError, MIN_WATCHDOG_TIMEOUT, validate_instance_id, validate_wait, validate_watchdog_timeout,
};

use super::address::{RedisAddress, encode_userinfo, parse_host_port, redact_text};
use super::error::ConfigError;
use super::keys::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_ENABLED, DEFAULT_FAIR_WAITER_TIMEOUT, DEFAULT_KEY_PREFIX,
    DEFAULT_MIN_REPLICAS, DEFAULT_REDIS_ADDRESS, DEFAULT_REPLICA_SYNC_TIMEOUT, DEFAULT_SPRING_HOST,
    DEFAULT_SPRING_PORT, DEFAULT_WAIT_TIME, DEFAULT_WATCHDOG_TIMEOUT, KEYS, KeySpec,
    MAX_COMMAND_TIMEOUT, MAX_FAIR_WAITER_TIMEOUT, MAX_MIN_REPLICAS, MAX_REPLICA_SYNC_TIMEOUT,
    MIN_COMMAND_TIMEOUT, MIN_FAIR_WAITER_TIMEOUT, MIN_REPLICA_SYNC_TIMEOUT, PREFIX,
    PREFIX_SEGMENTS, SPRING_COMBINATIONS, known_keys, looks_secret, near_miss_segment, spec,
    unknown_key_hint,
};
use super::origin::{Origin, Origins};
use super::sources::{HostEnv, SPRING_ENV_PREFIX, one_line_message};
use super::{LockSettings, RedisSettings};

/// The longest value shown in a message, in characters.
const SHOWN_CHARS: usize = 120;

/// The most keys a warning lists.
const LISTED_KEYS: usize = 10;

/// Warnings found while loading: each is logged with `tracing::warn!` when found, and kept for
/// [`LockSettings::warnings`].
#[derive(Default)]
struct Warnings(Vec<String>);

impl Warnings {
    fn warn(&mut self, message: String) {
        tracing::warn!("{message}");
        self.0.push(message);
    }
}

/// A string as messages show it: quoted and escaped, cut after 120 characters, passwords
/// redacted.
pub(crate) fn quote(text: &str) -> String {
    let redacted = redact_text(text);
    if redacted.chars().count() > SHOWN_CHARS {
        let cut: String = redacted.chars().take(SHOWN_CHARS).collect();
        format!("{cut:?}… ({} bytes)", text.len())
    } else {
        format!("{redacted:?}")
    }
}

/// A figment value as messages show it, e.g. `"5s"`, `5`, `true`, `a table {a, b}`.
fn show(value: &Value) -> String {
    match value {
        Value::String(_, text) => quote(text),
        Value::Char(_, c) => quote(&c.to_string()),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, num) => match (num.to_i128(), num.to_f64()) {
            (Some(int), _) => int.to_string(),
            (None, Some(float)) => float.to_string(),
            (None, None) => "a number".to_owned(),
        },
        Value::Empty(..) => "nothing".to_owned(),
        Value::Dict(_, dict) => {
            let keys: Vec<&str> = dict.keys().map(String::as_str).collect();
            format!("a table {{{}}}", keys.join(", "))
        }
        Value::Array(_, items) => format!("an array of {} items", items.len()),
    }
}

/// Reads the lock settings from a merged figment.
pub(crate) fn resolve(figment: &Figment, host_env: &HostEnv) -> Result<LockSettings, ConfigError> {
    if let Err(error) = figment.data() {
        return Err(ConfigError::Source {
            message: one_line_message(&error),
        });
    }
    let reader = Reader { figment };
    let mut warnings = Warnings::default();
    for message in &host_env.near_misses {
        warnings.warn(message.clone());
    }
    reader.warn_near_misses(&mut warnings);
    reader.check_unknown_keys()?;

    let mut origins = Origins::default();
    let mut take = |spec: &'static KeySpec, origin: Origin| origins.set(spec.name, origin);

    let enabled = match reader.find(spec("enabled")) {
        Some(found) => {
            let value = found.bool()?;
            take(found.spec, found.origin);
            value
        }
        None => DEFAULT_ENABLED,
    };

    let (address, address_origin) = reader.address(host_env, &mut warnings)?;
    take(spec("redis.address"), address_origin.clone());

    let command_timeout = reader.duration(
        spec("redis.command-timeout"),
        DEFAULT_COMMAND_TIMEOUT,
        &mut take,
        |d| (MIN_COMMAND_TIMEOUT..=MAX_COMMAND_TIMEOUT).contains(&d),
        MIN_COMMAND_TIMEOUT,
    )?;
    let tls_ca_file = match reader.ca_file(&address, &address_origin)? {
        Some((path, origin)) => {
            take(spec("redis.tls.ca-file"), origin);
            Some(path)
        }
        None => None,
    };
    let wait_time = reader.duration(
        spec("wait-time"),
        DEFAULT_WAIT_TIME,
        &mut take,
        |d| validate_wait(d).is_ok(),
        Duration::ZERO,
    )?;
    let watchdog_timeout = reader.duration(
        spec("watchdog-timeout"),
        DEFAULT_WATCHDOG_TIMEOUT,
        &mut take,
        |d| validate_watchdog_timeout(d).is_ok(),
        MIN_WATCHDOG_TIMEOUT,
    )?;

    let min_replicas = match reader.find(spec("min-replicas")) {
        Some(found) => {
            let replicas = found.count(MAX_MIN_REPLICAS)?;
            take(found.spec, found.origin);
            replicas
        }
        None => DEFAULT_MIN_REPLICAS,
    };
    let replica_sync_timeout = reader.duration(
        spec("replica-sync-timeout"),
        DEFAULT_REPLICA_SYNC_TIMEOUT,
        &mut take,
        |d| (MIN_REPLICA_SYNC_TIMEOUT..=MAX_REPLICA_SYNC_TIMEOUT).contains(&d),
        MIN_REPLICA_SYNC_TIMEOUT,
    )?;

    let fair_waiter_timeout = reader.duration(
        spec("fair-waiter-timeout"),
        DEFAULT_FAIR_WAITER_TIMEOUT,
        &mut take,
        |d| (MIN_FAIR_WAITER_TIMEOUT..=MAX_FAIR_WAITER_TIMEOUT).contains(&d),
        MIN_FAIR_WAITER_TIMEOUT,
    )?;

    let key_prefix = match reader.find(spec("key-prefix")) {
        Some(found) => {
            let prefix = found.text()?;
            if let Some(problem) = lock_redis::key_prefix_problem(&prefix) {
                return Err(found.invalid(problem));
            }
            take(found.spec, found.origin);
            prefix
        }
        None => DEFAULT_KEY_PREFIX.to_owned(),
    };

    let instance_id_spec = spec("instance-id");
    let (instance_id, origin) = match reader.find(instance_id_spec) {
        Some(found) => (found.text()?, found.origin),
        None => default_instance_id(host_env),
    };
    if let Err(error) = validate_instance_id(&instance_id) {
        return Err(ConfigError::InvalidValue {
            key: instance_id_spec.name.to_owned(),
            value: quote(&instance_id),
            origin: Box::new(origin),
            problem: core_problem(error),
            accepted: instance_id_spec.accepted.to_owned(),
        });
    }
    take(instance_id_spec, origin);

    let settings = LockSettings {
        enabled,
        redis: RedisSettings {
            address,
            command_timeout,
            tls_ca_file,
        },
        wait_time,
        watchdog_timeout,
        min_replicas,
        replica_sync_timeout,
        fair_waiter_timeout,
        key_prefix,
        instance_id,
        origins,
        warnings: warnings.0,
    };
    for spec in KEYS {
        if let Some(line) = settings.describe(spec.name) {
            tracing::debug!("{line}");
        }
    }
    Ok(settings)
}

fn default_instance_id(host_env: &HostEnv) -> (String, Origin) {
    if let Some(pod) = &host_env.pod_name {
        return (pod.clone(), Origin::DefaultFromEnv("POD_NAME".to_owned()));
    }
    if let Some(host) = &host_env.hostname {
        return (host.clone(), Origin::DefaultFromEnv("HOSTNAME".to_owned()));
    }
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    (host, Origin::DefaultFromHostname)
}

/// The problem part of a lock-core validation error, without its own "accepted" (ours is
/// quoted instead).
fn core_problem(error: LockError) -> String {
    match error {
        LockError::InvalidArgument { problem, .. } => problem
            .split("; accepted")
            .next()
            .unwrap_or_default()
            .to_owned(),
        other => other.to_string(),
    }
}

struct Reader<'a> {
    figment: &'a Figment,
}

/// A value found for a key, with where it came from.
struct Found {
    spec: &'static KeySpec,
    value: Value,
    origin: Origin,
}

impl Found {
    /// The value as messages show it: `***` for a secret (`spring.data.redis.password`).
    fn shown(&self) -> String {
        if looks_secret(self.spec.name) {
            "***".to_owned()
        } else {
            show(&self.value)
        }
    }

    /// `key (from origin)`, for messages that name this key beside another.
    fn named(&self) -> String {
        format!("{} (from {})", self.spec.name, self.origin)
    }

    fn invalid(&self, problem: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            key: self.spec.name.to_owned(),
            value: self.shown(),
            origin: Box::new(self.origin.clone()),
            problem: problem.into(),
            accepted: self.spec.accepted.to_owned(),
        }
    }

    fn bool(&self) -> Result<bool, ConfigError> {
        match &self.value {
            Value::Bool(_, b) => Ok(*b),
            Value::String(_, text) if text.trim().eq_ignore_ascii_case("true") => Ok(true),
            Value::String(_, text) if text.trim().eq_ignore_ascii_case("false") => Ok(false),
            _ => Err(self.invalid("not a boolean")),
        }
    }

    /// A whole number from 0 to `max`: a TOML integer, or its digits in a string (the
    /// environment).
    fn count(&self, max: u32) -> Result<u32, ConfigError> {
        let number = match &self.value {
            Value::Num(_, num) => num
                .to_i128()
                .or_else(|| num.to_u128().and_then(|n| i128::try_from(n).ok())),
            Value::String(_, text) => text.trim().parse::<i128>().ok(),
            _ => None,
        };
        match number {
            Some(n) if n < 0 => Err(self.invalid("negative numbers are not accepted")),
            Some(n) if n > i128::from(max) => Err(self.invalid("larger than the maximum")),
            Some(n) => Ok(u32::try_from(n).expect("bounded by max")),
            None => Err(self.invalid("not a whole number")),
        }
    }

    fn text(&self) -> Result<String, ConfigError> {
        match &self.value {
            Value::String(_, text) => Ok(text.clone()),
            Value::Char(_, c) => Ok(c.to_string()),
            _ => Err(self.invalid("not a string (quote it)")),
        }
    }

    fn duration(&self) -> Result<Duration, ConfigError> {
        const UNIT_REQUIRED: &str = "a unit is required (ms, s, m or h)";
        let text = match &self.value {
            Value::String(_, text) => text.trim(),
            Value::Num(..) => return Err(self.invalid(UNIT_REQUIRED)),
            _ => return Err(self.invalid("not a duration")),
        };
        if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(self.invalid(UNIT_REQUIRED));
        }
        if text.starts_with('-') {
            return Err(self.invalid("negative durations are not accepted"));
        }
        humantime::parse_duration(text).map_err(|error| {
            self.invalid(match error {
                humantime::DurationError::UnknownUnit { unit, .. } => {
                    format!("not a duration (unknown unit {unit:?})")
                }
                humantime::DurationError::NumberOverflow => {
                    "not a duration (too large or too precise)".to_owned()
                }
                humantime::DurationError::Empty => "empty; a duration is required".to_owned(),
                _ => "not a duration".to_owned(),
            })
        })
    }
}

impl Reader<'_> {
    fn find(&self, spec: &'static KeySpec) -> Option<Found> {
        let value = self.figment.find_value(spec.name).ok()?;
        let origin = Origin::from_metadata(self.figment.get_metadata(value.tag()), spec.name);
        Some(Found {
            spec,
            value,
            origin,
        })
    }

    /// A duration key: parsed, then checked with `in_range`.
    fn duration(
        &self,
        spec: &'static KeySpec,
        default: Duration,
        take: &mut impl FnMut(&'static KeySpec, Origin),
        in_range: impl Fn(Duration) -> bool,
        min: Duration,
    ) -> Result<Duration, ConfigError> {
        let Some(found) = self.find(spec) else {
            return Ok(default);
        };
        let duration = found.duration()?;
        if !in_range(duration) {
            return Err(found.invalid(if duration.is_zero() {
                "zero is not accepted"
            } else if duration < min {
                "shorter than the minimum"
            } else {
                "longer than the maximum"
            }));
        }
        take(found.spec, found.origin);
        Ok(duration)
    }

    /// `redis.address`, or the Spring fallback (`url`; else `sentinel.*`, `cluster.nodes` or
    /// `host`/`port`, with `username`, `password`, `database` and `ssl.enabled`), or the default.
    fn address(
        &self,
        host_env: &HostEnv,
        warnings: &mut Warnings,
    ) -> Result<(RedisAddress, Origin), ConfigError> {
        if let Some(found) = self.find(spec("redis.address")) {
            let address =
                RedisAddress::parse(&found.text()?).map_err(|e| found.invalid(e.problem()))?;
            return Ok((address, found.origin));
        }
        let spring = Spring::find(self);
        spring.check_combination()?;
        if let Some(found) = &spring.url {
            let address =
                RedisAddress::parse(&found.text()?).map_err(|e| found.invalid(e.problem()))?;
            self.warn_unread_spring(SpringUse::Url, host_env, warnings);
            return Ok((address, Origin::SpringUrl(Box::new(found.origin.clone()))));
        }
        let used = if spring.master.is_some() {
            SpringUse::Sentinel
        } else if spring.cluster_nodes.is_some() {
            SpringUse::Cluster
        } else if spring.host.is_some() || spring.port.is_some() || spring.extras().next().is_some()
        {
            SpringUse::HostPort
        } else {
            self.warn_unread_spring(SpringUse::Nothing, host_env, warnings);
            return Ok((RedisAddress::default(), Origin::Default));
        };
        let built = spring.build(used)?;
        self.warn_unread_spring(used, host_env, warnings);
        Ok(built)
    }

    /// `telco.platform.lock.redis.tls.ca-file`: only with a TLS address; the file must exist,
    /// be readable and hold a PEM certificate.
    fn ca_file(
        &self,
        address: &RedisAddress,
        address_origin: &Origin,
    ) -> Result<Option<(PathBuf, Origin)>, ConfigError> {
        let Some(found) = self.find(spec("redis.tls.ca-file")) else {
            return Ok(None);
        };
        let text = found.text()?;
        if text.trim().is_empty() {
            return Err(found.invalid("empty; a path is required"));
        }
        if !address.tls() {
            return Err(found.invalid(format!(
                "{} = {address} (from {address_origin}) does not use TLS, so a CA file would \
                 not be used; use rediss://, rediss-sentinel:// or rediss-cluster:// (or \
                 spring.data.redis.ssl.enabled = true for an address built from Spring keys), \
                 or remove {}",
                spec("redis.address").name,
                spec("redis.tls.ca-file").name,
            )));
        }
        let path = PathBuf::from(&text);
        let relative = || match std::env::current_dir() {
            Ok(dir) if path.is_relative() => {
                format!(" (relative to the working directory {})", dir.display())
            }
            _ => String::new(),
        };
        let contents = match std::fs::read(&path) {
            Ok(contents) => contents,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(found.invalid(format!("the file does not exist{}", relative())));
            }
            Err(_) if path.is_dir() => {
                return Err(found.invalid("it is a directory, not a file"));
            }
            Err(e) => {
                return Err(found.invalid(format!("the file cannot be read: {e}")));
            }
        };
        let pem = String::from_utf8_lossy(&contents);
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(found.invalid(
                "the file holds no PEM certificate (no -----BEGIN CERTIFICATE----- line)",
            ));
        }
        Ok(Some((path, found.origin)))
    }

    /// Warns about the `spring.data.redis` keys and `SPRING_DATA_REDIS_*` variables that are set
    /// but not used for the address (`timeout`, `sentinel.password`, `client-type`, …), naming
    /// each key with its source or each variable, never a value.
    fn warn_unread_spring(&self, used: SpringUse, host_env: &HostEnv, warnings: &mut Warnings) {
        let used_keys = used.keys();
        let mut unread = Vec::new();
        if let Ok(section @ Value::Dict(..)) = self.figment.find_value("spring.data.redis") {
            for (relative, value) in leaves(&section) {
                if used_keys.contains(&relative.as_str()) {
                    continue;
                }
                let full = format!("spring.data.redis.{relative}");
                unread.push(match self.origin(value, &full) {
                    Origin::Env(var) => format!("environment variable {var}"),
                    origin => format!("{full} (from {origin})"),
                });
            }
        }
        for var in &host_env.spring_unread {
            let key = var
                .strip_prefix(SPRING_ENV_PREFIX)
                .unwrap_or(var)
                .to_ascii_lowercase()
                .replace('_', ".");
            if !used_keys.contains(&key.as_str()) {
                unread.push(format!("environment variable {var}"));
            }
        }
        if unread.is_empty() {
            return;
        }
        let address = match used {
            SpringUse::Url => "is taken from spring.data.redis.url".to_owned(),
            SpringUse::HostPort => "is built from spring.data.redis.host/port (with username, \
                                    password, database and ssl.enabled)"
                .to_owned(),
            SpringUse::Sentinel => "is built from spring.data.redis.sentinel.master/nodes (with \
                                    username, password, database and ssl.enabled)"
                .to_owned(),
            SpringUse::Cluster => "is built from spring.data.redis.cluster.nodes (with username, \
                                   password, database 0 and ssl.enabled)"
                .to_owned(),
            SpringUse::Nothing => format!(
                "is the default {DEFAULT_REDIS_ADDRESS} (none of {} and the spring.data.redis \
                 keys url, host, port, username, password, database, ssl.enabled, \
                 sentinel.master, sentinel.nodes and cluster.nodes is set)",
                spec("redis.address").name
            ),
        };
        warnings.warn(format!(
            "the lock's Redis address {address}, so these Spring settings are ignored by the \
             lock: {}. Set {} if the lock needs them",
            unread.join(", "),
            spec("redis.address").name
        ));
    }

    /// Warns about every path that is not `telco.platform.lock` but looks like a misspelling of
    /// it (`telco.platform.lok`, `telco.platfrom.lock`, `Telco.Platform.Lock`): nothing under it
    /// is read. Other sections (`telco.platform.log`) are none of the lock's business.
    fn warn_near_misses(&self, warnings: &mut Warnings) {
        if let Ok(Value::Dict(_, root)) = self.figment.find_value("") {
            self.near_misses_in(&root, "", 0, false, warnings);
        }
    }

    /// Walks the paths of `dict` that follow `telco.platform.lock` from segment `depth` on,
    /// exactly or misspelt; `missed` says whether one before was misspelt.
    fn near_misses_in(
        &self,
        dict: &Dict,
        path: &str,
        depth: usize,
        missed: bool,
        warnings: &mut Warnings,
    ) {
        for (name, value) in dict {
            let (reached, missed) = if name == PREFIX_SEGMENTS[depth] {
                (depth + 1, missed)
            } else if let Some(end) = near_miss_segment(name, depth) {
                (end, true)
            } else {
                continue;
            };
            let shown = if name.contains(['.', ' ']) || name.is_empty() {
                format!("{name:?}")
            } else {
                name.clone()
            };
            let full = if path.is_empty() {
                shown
            } else {
                format!("{path}.{shown}")
            };
            if reached == PREFIX_SEGMENTS.len() {
                if missed {
                    warnings.warn(self.near_miss_warning(&full, value));
                }
            } else if let Value::Dict(_, inner) = value {
                self.near_misses_in(inner, &full, reached, missed, warnings);
            }
        }
    }

    /// `section telco.platform.lok (keys wait-time; from TOML file app.toml) is ignored: …`.
    fn near_miss_warning(&self, path: &str, value: &Value) -> String {
        let leaves = leaves(value);
        let mut origins: Vec<String> = Vec::new();
        for (relative, leaf) in &leaves {
            let origin = self.origin(leaf, &format!("{path}.{relative}")).to_string();
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        if origins.is_empty() {
            origins.push(self.origin(value, path).to_string());
        }
        let origins = origins.join(", ");
        let what = match value {
            Value::Dict(..) if leaves.is_empty() => {
                format!("section {path} (empty; from {origins})")
            }
            Value::Dict(..) => {
                let mut keys: Vec<&str> = leaves
                    .iter()
                    .take(LISTED_KEYS)
                    .map(|(relative, _)| relative.as_str())
                    .collect();
                let more = leaves.len().saturating_sub(LISTED_KEYS);
                let more = format!("{more} more");
                if leaves.len() > LISTED_KEYS {
                    keys.push(&more);
                }
                format!("section {path} (keys {}; from {origins})", keys.join(", "))
            }
            _ => format!("key {path} (from {origins})"),
        };
        format!(
            "{what} is ignored: the lock reads its settings only under {PREFIX}; did you mean \
             {PREFIX}?"
        )
    }

    /// Every key under `telco.platform.lock` must be in the key table.
    fn check_unknown_keys(&self) -> Result<(), ConfigError> {
        match self.figment.find_value(PREFIX) {
            Err(_) => Ok(()),
            Ok(Value::Dict(_, dict)) => self.check_section(PREFIX, &dict),
            Ok(other) => Err(self.not_a_table(PREFIX, &other)),
        }
    }

    fn check_section(&self, path: &str, dict: &Dict) -> Result<(), ConfigError> {
        for (name, value) in dict {
            let full = format!("{path}.{name}");
            if KEYS.iter().any(|spec| spec.name == full) {
                continue;
            }
            let is_section = KEYS.iter().any(|spec| {
                spec.name.starts_with(&full) && spec.name[full.len()..].starts_with('.')
            });
            if is_section {
                match value {
                    Value::Dict(_, inner) => self.check_section(&full, inner)?,
                    other => return Err(self.not_a_table(&full, other)),
                }
                continue;
            }
            let relative = &full[PREFIX.len() + 1..];
            return Err(ConfigError::UnknownKey {
                value: if looks_secret(relative) {
                    "***".to_owned()
                } else {
                    show(value)
                },
                origin: Box::new(self.origin(value, &full)),
                hint: unknown_key_hint(relative, false),
                known: known_keys(),
                key: full,
            });
        }
        Ok(())
    }

    fn not_a_table(&self, path: &str, value: &Value) -> ConfigError {
        let inner: Vec<&str> = KEYS
            .iter()
            .filter_map(|spec| spec.name.strip_prefix(path)?.strip_prefix('.'))
            .collect();
        ConfigError::InvalidValue {
            key: path.to_owned(),
            value: show(value),
            origin: Box::new(self.origin(value, path)),
            problem: "not a table".to_owned(),
            accepted: format!("a table [{path}] with the keys {}", inner.join(", ")),
        }
    }

    fn origin(&self, value: &Value, path: &str) -> Origin {
        Origin::from_metadata(self.figment.get_metadata(value.tag()), path)
    }
}

/// Which Spring keys gave the address.
#[derive(Clone, Copy)]
enum SpringUse {
    /// `spring.data.redis.url`.
    Url,
    /// `spring.data.redis.host`/`port`, with the extras.
    HostPort,
    /// `spring.data.redis.sentinel.master` and `sentinel.nodes`, with the extras.
    Sentinel,
    /// `spring.data.redis.cluster.nodes`, with the extras.
    Cluster,
    /// None: the address is the default.
    Nothing,
}

impl SpringUse {
    /// The keys, relative to `spring.data.redis`, that this way of building the address reads
    /// (or, for the URL, that Spring Boot itself ignores then): they are not warned about.
    fn keys(self) -> &'static [&'static str] {
        match self {
            // With the URL, Spring Boot itself ignores host, port, username, password and
            // database.
            SpringUse::Url => &["url", "host", "port", "username", "password", "database"],
            SpringUse::HostPort => &[
                "host",
                "port",
                "username",
                "password",
                "database",
                "ssl.enabled",
            ],
            SpringUse::Sentinel => &[
                "sentinel.master",
                "sentinel.nodes",
                "username",
                "password",
                "database",
                "ssl.enabled",
            ],
            SpringUse::Cluster => &[
                "cluster.nodes",
                "username",
                "password",
                "database",
                "ssl.enabled",
            ],
            SpringUse::Nothing => &[],
        }
    }
}

/// The `spring.data.redis` keys the address can be built from, as found.
struct Spring {
    url: Option<Found>,
    host: Option<Found>,
    port: Option<Found>,
    master: Option<Found>,
    sentinel_nodes: Option<Found>,
    cluster_nodes: Option<Found>,
    username: Option<Found>,
    password: Option<Found>,
    database: Option<Found>,
    ssl: Option<Found>,
}

impl Spring {
    fn find(reader: &Reader<'_>) -> Spring {
        let find = |relative: &str| reader.find(spec(&format!("spring.data.redis.{relative}")));
        Spring {
            url: find("url"),
            host: find("host"),
            port: find("port"),
            master: find("sentinel.master"),
            sentinel_nodes: find("sentinel.nodes"),
            cluster_nodes: find("cluster.nodes"),
            username: find("username"),
            password: find("password"),
            database: find("database"),
            ssl: find("ssl.enabled"),
        }
    }

    /// `username`, `password`, `database`, `ssl.enabled`: those that are set.
    fn extras(&self) -> impl Iterator<Item = &Found> {
        [&self.username, &self.password, &self.database, &self.ssl]
            .into_iter()
            .flatten()
    }

    /// Rejects the combinations that leave open which Redis is meant: the URL with Sentinel or
    /// Cluster keys, Sentinel with Cluster, half of Sentinel, host/port with nodes.
    fn check_combination(&self) -> Result<(), ConfigError> {
        let sentinel = self.master.as_ref().or(self.sentinel_nodes.as_ref());
        let conflict = |found: &Found, problem: String| ConfigError::InvalidValue {
            key: found.spec.name.to_owned(),
            value: found.shown(),
            origin: Box::new(found.origin.clone()),
            problem,
            accepted: SPRING_COMBINATIONS.to_owned(),
        };
        if let Some(url) = &self.url {
            if let Some(other) = sentinel.or(self.cluster_nodes.as_ref()) {
                let kind = if sentinel.is_some() {
                    "Sentinel"
                } else {
                    "Cluster"
                };
                return Err(conflict(
                    url,
                    format!(
                        "{} is set too, so which Redis the lock should use is ambiguous (Spring \
                         Boot would use the {kind} settings and ignore the URL); remove one, or \
                         set {}",
                        other.named(),
                        spec("redis.address").name
                    ),
                ));
            }
        }
        if let (Some(sentinel), Some(cluster)) = (sentinel, &self.cluster_nodes) {
            return Err(conflict(
                cluster,
                format!(
                    "{} is set too; a deployment is either Sentinel or Cluster, so set only one \
                     of them",
                    sentinel.named()
                ),
            ));
        }
        match (&self.master, &self.sentinel_nodes) {
            (Some(master), None) => {
                return Err(conflict(
                    master,
                    format!(
                        "{} is not set; a Sentinel address needs both the master name and the \
                         sentinels",
                        spec("spring.data.redis.sentinel.nodes").name
                    ),
                ));
            }
            (None, Some(nodes)) => {
                return Err(conflict(
                    nodes,
                    format!(
                        "{} is not set; a Sentinel address needs both the master name and the \
                         sentinels",
                        spec("spring.data.redis.sentinel.master").name
                    ),
                ));
            }
            _ => {}
        }
        let nodes = self.sentinel_nodes.as_ref().or(self.cluster_nodes.as_ref());
        if let (Some(server), Some(nodes)) = (self.host.as_ref().or(self.port.as_ref()), nodes) {
            return Err(conflict(
                server,
                format!(
                    "{} is set too; host/port name one server and the nodes a {}, so which \
                     Redis the lock should use is ambiguous: remove spring.data.redis.host/port, \
                     or set {}",
                    nodes.named(),
                    if self.sentinel_nodes.is_some() {
                        "Sentinel group"
                    } else {
                        "Redis Cluster"
                    },
                    spec("redis.address").name
                ),
            ));
        }
        Ok(())
    }

    /// The address built from the keys of `used` (not `Url` or `Nothing`), with its origin.
    fn build(&self, used: SpringUse) -> Result<(RedisAddress, Origin), ConfigError> {
        let username = self.optional_text(&self.username)?;
        let password = self.optional_text(&self.password)?;
        let database = match &self.database {
            Some(found) => spring_database(found)?,
            None => 0,
        };
        let tls = match &self.ssl {
            Some(found) => found.bool()?,
            None => false,
        };
        let s = if tls { "s" } else { "" };
        let mut keys: Vec<(String, Origin)> = Vec::new();
        let mut note =
            |found: &Found| keys.push((found.spec.name.to_owned(), found.origin.clone()));
        let (scheme, first, query, blame) = match used {
            SpringUse::Sentinel => {
                let (master, nodes) = (self.master.as_ref(), self.sentinel_nodes.as_ref());
                let (Some(master), Some(nodes)) = (master, nodes) else {
                    unreachable!("checked by check_combination");
                };
                let name = master.text()?;
                let name = name.trim();
                if name.is_empty() || name.chars().any(char::is_control) {
                    return Err(master.invalid(if name.is_empty() {
                        "empty; the master name is required"
                    } else {
                        "it contains a control character"
                    }));
                }
                let mut nodes_list = spring_nodes(nodes)?;
                let first = nodes_list.remove(0);
                note(master);
                note(nodes);
                let service: String =
                    url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
                let mut query = format!("sentinelServiceName={service}");
                for (host, port) in &nodes_list {
                    query.push_str(&format!("&node={host}:{port}"));
                }
                (format!("redis{s}-sentinel"), first, Some(query), nodes)
            }
            SpringUse::Cluster => {
                let Some(nodes) = self.cluster_nodes.as_ref() else {
                    unreachable!("cluster is chosen when its nodes are set");
                };
                if let Some(found) = self.database.as_ref().filter(|_| database != 0) {
                    return Err(found.invalid(format!(
                        "a Redis Cluster has only database 0, and {} is set",
                        nodes.named()
                    )));
                }
                let mut nodes_list = spring_nodes(nodes)?;
                let first = nodes_list.remove(0);
                note(nodes);
                let query = (!nodes_list.is_empty()).then(|| {
                    nodes_list
                        .iter()
                        .map(|(host, port)| format!("node={host}:{port}"))
                        .collect::<Vec<_>>()
                        .join("&")
                });
                (format!("redis{s}-cluster"), first, query, nodes)
            }
            _ => {
                let host = self.spring_host()?;
                let port = match &self.port {
                    Some(found) => spring_port(found)?,
                    None => DEFAULT_SPRING_PORT,
                };
                let default_origin = |found: &Option<Found>| {
                    found.as_ref().map_or(Origin::Default, |f| f.origin.clone())
                };
                keys.push((
                    spec("spring.data.redis.host").name.to_owned(),
                    default_origin(&self.host),
                ));
                keys.push((
                    spec("spring.data.redis.port").name.to_owned(),
                    default_origin(&self.port),
                ));
                let blame = self.host.as_ref().or(self.port.as_ref());
                let blame = blame.or_else(|| self.extras().next());
                let Some(blame) = blame else {
                    unreachable!("host/port is chosen when one of its keys is set");
                };
                (format!("redis{s}"), (host, port), None, blame)
            }
        };
        for found in self.extras() {
            keys.push((found.spec.name.to_owned(), found.origin.clone()));
        }
        let (host, port) = first;
        let bracketed = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        let mut url = url::Url::parse(&format!("{scheme}://{bracketed}:{port}"))
            .map_err(|e| blame.invalid(format!("not a host name or IP address ({e})")))?;
        // The user and password go into the URL percent-encoded, every character but the
        // unreserved ones (`%` too), so the Redis client, which percent-decodes them, sends them
        // exactly as written. Only fails for URLs without a host, which the line above rules out.
        if let Some(username) = &username {
            let _ = url.set_username(&encode_userinfo(username));
        }
        if let Some(password) = &password {
            let _ = url.set_password(Some(&encode_userinfo(password)));
        }
        if database != 0 {
            url.set_path(&format!("/{database}"));
        }
        url.set_query(query.as_deref());
        let address = RedisAddress::parse(url.as_str()).map_err(|e| blame.invalid(e.problem()))?;
        Ok((address, Origin::SpringFallback { keys }))
    }

    /// A text key's value; `None` when it is not set or empty.
    fn optional_text(&self, found: &Option<Found>) -> Result<Option<String>, ConfigError> {
        Ok(match found {
            Some(found) => Some(found.text()?).filter(|text| !text.is_empty()),
            None => None,
        })
    }

    /// `spring.data.redis.host`, `localhost` when not set; checked.
    fn spring_host(&self) -> Result<String, ConfigError> {
        let (host_name, host_found) = match &self.host {
            Some(found) => (found.text()?, Some(found)),
            None => (DEFAULT_SPRING_HOST.to_owned(), None),
        };
        if host_name.is_empty()
            || host_name
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || "/@?#\\".contains(c))
        {
            let problem = "not a host name or IP address".to_owned();
            return Err(match host_found {
                Some(found) => found.invalid(problem),
                None => ConfigError::InvalidValue {
                    key: spec("spring.data.redis.host").name.to_owned(),
                    value: quote(DEFAULT_SPRING_HOST),
                    origin: Box::new(Origin::Default),
                    problem,
                    accepted: spec("spring.data.redis.host").accepted.to_owned(),
                },
            });
        }
        Ok(host_name)
    }
}

/// Every value under the table `value` that is not a table (or is an empty one), with its
/// dotted path relative to `value`, in key order. Empty when `value` is not a table.
fn leaves(value: &Value) -> Vec<(String, &Value)> {
    fn walk<'a>(value: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
        match value {
            Value::Dict(_, dict) if !dict.is_empty() => {
                for (name, inner) in dict {
                    let inner_path = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}.{name}")
                    };
                    walk(inner, inner_path, out);
                }
            }
            _ => out.push((path, value)),
        }
    }
    let mut out = Vec::new();
    if matches!(value, Value::Dict(..)) {
        walk(value, String::new(), &mut out);
        out.retain(|(path, _)| !path.is_empty());
    }
    out
}

/// `sentinel.nodes` or `cluster.nodes`: a comma-separated string or an array of strings, each
/// `host:port`; at least one.
fn spring_nodes(found: &Found) -> Result<Vec<(String, u16)>, ConfigError> {
    let entries: Vec<String> = match &found.value {
        Value::String(_, text) => text.split(',').map(|e| e.trim().to_owned()).collect(),
        Value::Array(_, items) => {
            let mut entries = Vec::new();
            for item in items {
                match item {
                    Value::String(_, text) => entries.push(text.trim().to_owned()),
                    _ => return Err(found.invalid("an entry of the array is not a string")),
                }
            }
            entries
        }
        _ => return Err(found.invalid("not a string of host:port pairs (quote it)")),
    };
    if entries.iter().all(String::is_empty) {
        return Err(found.invalid("empty; at least one host:port is required"));
    }
    let mut nodes = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        match parse_host_port(entry) {
            Ok((host, port)) => nodes.push((host.to_owned(), port)),
            Err(problem) => {
                return Err(found.invalid(format!("entry {} ({entry:?}): {problem}", i + 1)));
            }
        }
    }
    Ok(nodes)
}

/// `spring.data.redis.database`: a number from 0 to 255, in TOML or as text.
fn spring_database(found: &Found) -> Result<u8, ConfigError> {
    let number = match &found.value {
        Value::Num(_, num) => num
            .to_u128()
            .or_else(|| num.to_i128().and_then(|n| u128::try_from(n).ok())),
        Value::String(_, text) => text.trim().parse::<u128>().ok(),
        _ => None,
    };
    number
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| found.invalid("not a database number from 0 to 255"))
}

fn spring_port(found: &Found) -> Result<u16, ConfigError> {
    let number = match &found.value {
        Value::Num(_, num) => num
            .to_u128()
            .or_else(|| num.to_i128().and_then(|n| u128::try_from(n).ok())),
        Value::String(_, text) => text.trim().parse::<u128>().ok(),
        _ => None,
    };
    match number.and_then(|n| u16::try_from(n).ok()) {
        Some(port) if port > 0 => Ok(port),
        _ => Err(found.invalid("not a port number")),
    }
}
