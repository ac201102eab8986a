//! From the merged figment to checked [`LockSettings`]: serde extraction over the defaults of
//! the key table, origins from figment's metadata, the table's checks, the Spring fallback, and
//! warnings for keys the lock does not read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use figment::error::{Actual, Kind};
use figment::providers::Serialized;
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use lock_core::rate_limit::Quota;
use lock_core::{format_duration, parse_duration};
use lock_redis::{RedisAddress, redact};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Deserializer, de};

use super::error::ConfigError;
use super::error::one_line_message;
use super::keys::{
    KEYS, KeyDefault, KeySpec, NAMED_KEYS, PREFIX, SPRING_KEYS, Val, hint_part, known_keys,
    named_spec, near_miss_of_prefix, spec,
};
use super::origin::HostEnv;
use super::origin::{DEFAULTS_PROVIDER, HOST_NAME, Origin};
use super::{CacheSection, LockSettings, RedisSettings};

/// The longest value shown in a message, in characters.
const SHOWN_CHARS: usize = 120;

/// A string as messages show it: quoted and escaped, cut after 120 characters, passwords
/// redacted.
pub(crate) fn quote(text: &str) -> String {
    let redacted = redact(text);
    if redacted.chars().count() > SHOWN_CHARS {
        let cut: String = redacted.chars().take(SHOWN_CHARS).collect();
        format!("{cut:?}… ({} bytes)", text.len())
    } else {
        format!("{redacted:?}")
    }
}

/// A figment value as messages show it: `"5s"`, `5`, `true`, `a table {a, b}`.
fn show(value: &Value) -> String {
    match value {
        Value::String(_, text) => quote(text),
        Value::Char(_, c) => quote(&c.to_string()),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, num) => match (num.to_i128(), num.to_f64()) {
            (Some(int), _) => int.to_string(),
            (_, Some(float)) => float.to_string(),
            _ => "a number".to_owned(),
        },
        Value::Empty(..) => "nothing".to_owned(),
        Value::Dict(_, dict) => {
            let keys: Vec<&str> = dict.keys().map(String::as_str).collect();
            format!("a table {{{}}}", keys.join(", "))
        }
        Value::Array(_, items) => format!("an array of {} items", items.len()),
    }
}

/// A setting as [`LockSettings::describe`] shows it.
pub(crate) fn show_val(value: &Val<'_>) -> String {
    match value {
        Val::Bool(b) => b.to_string(),
        // In the syntax a file takes: `1m30s`, not humantime's `1m 30s`.
        Val::Duration(d) => humantime::format_duration(*d).to_string().replace(' ', ""),
        Val::Count(n) => n.to_string(),
        Val::Text(text) => quote(text),
        Val::Address(address) => address.to_string(),
        Val::Path(Some(path)) => quote(&path.display().to_string()),
        Val::Path(None) => "none (the system's root certificates)".to_owned(),
    }
}

/// Serde: a duration as [`parse_duration`] reads it; also a bare number 0 (TOML `wait-time = 0`).
pub(crate) fn duration<'de, D: Deserializer<'de>>(de: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a duration")]
    enum Raw {
        Text(String),
        Number(f64),
    }
    let text = match Raw::deserialize(de)? {
        Raw::Text(text) => text,
        Raw::Number(n) => n.to_string(),
    };
    parse_duration(&text).map_err(de::Error::custom)
}

/// Serde: a port, 1 to 65535, as a number or a text of digits (`port = "6380"`).
fn port<'de, D: Deserializer<'de>>(de: D) -> Result<Option<u16>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(i64),
        Text(String),
    }
    let port = match Raw::deserialize(de) {
        Ok(Raw::Number(n)) => u16::try_from(n).ok(),
        Ok(Raw::Text(text)) => text.trim().parse().ok(),
        Err(_) => None,
    };
    port.map(Some)
        .ok_or_else(|| de::Error::custom("not a port: a whole number from 1 to 65535"))
}

/// Serde: a Redis address, checked by [`RedisAddress::parse`].
pub(crate) fn address<'de, D: Deserializer<'de>>(de: D) -> Result<RedisAddress, D::Error> {
    let text = String::deserialize(de)?;
    RedisAddress::parse(&text).map_err(|e| de::Error::custom(e.problem()))
}

/// Serde: the `tls` table, of which the lock reads `ca-file`.
pub(crate) fn ca_file<'de, D: Deserializer<'de>>(de: D) -> Result<Option<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct Tls {
        ca_file: Option<PathBuf>,
    }
    Ok(Tls::deserialize(de)?.ca_file)
}

/// The Spring Boot keys of the address fallback.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Spring {
    url: Option<String>,
    host: Option<String>,
    #[serde(deserialize_with = "port")]
    port: Option<u16>,
    username: Option<String>,
    password: Option<String>,
}

/// Values already read, with the metadata of where they came from.
pub(crate) struct Parsed(pub(crate) Metadata, pub(crate) Map<Profile, Dict>);

impl Provider for Parsed {
    fn metadata(&self) -> Metadata {
        self.0.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(self.1.clone())
    }
}

/// One value at a dotted key, with its own metadata: a default of the table, or a variable.
pub(crate) fn fixed(metadata: Metadata, key: &str, value: &str) -> Parsed {
    // Serializing a string at a key cannot fail.
    Parsed(
        metadata,
        Serialized::default(key, value).data().unwrap_or_default(),
    )
}

/// The defaults of the key table, and the default instance id read from the host.
fn defaults(host_env: &HostEnv) -> Figment {
    let mut figment = Figment::new();
    for spec in KEYS {
        if let KeyDefault::Value(value) = spec.default {
            figment = figment.merge(fixed(Metadata::named(DEFAULTS_PROVIDER), spec.name, value));
        }
    }
    let (source, id) = match (&host_env.pod_name, &host_env.hostname) {
        (Some(pod), _) => ("POD_NAME", pod.clone()),
        (None, Some(host)) => ("HOSTNAME", host.clone()),
        (None, None) => (
            HOST_NAME,
            gethostname::gethostname().to_string_lossy().into_owned(),
        ),
    };
    let metadata = Metadata::named(DEFAULTS_PROVIDER).source(source);
    figment.merge(fixed(metadata, spec("instance-id").name, &id))
}

/// Where the value at `path` came from; [`Origin::Default`] when it is not set.
fn origin_of(figment: &Figment, path: &str) -> Origin {
    match figment.find_metadata(path) {
        Some(metadata) => Origin::from_metadata(Some(metadata), path),
        None => Origin::Default,
    }
}

fn invalid(figment: &Figment, spec: &KeySpec, problem: impl Into<String>) -> ConfigError {
    invalid_at(figment, spec, spec.name, problem)
}

/// The error of the value at `path`, which `spec` declares (a named key's path has the name).
fn invalid_at(
    figment: &Figment,
    spec: &KeySpec,
    path: &str,
    problem: impl Into<String>,
) -> ConfigError {
    let shown = match figment.find_value(path) {
        _ if spec.name.contains("password") => "***".to_owned(),
        Ok(value) => show(&value),
        Err(_) => "nothing".to_owned(),
    };
    ConfigError::InvalidValue {
        key: path.to_owned(),
        value: shown,
        origin: Box::new(origin_of(figment, path)),
        problem: problem.into(),
        accepted: spec.accepted(),
    }
}

/// The keys of the named sections of `table`: `rate, burst` for `…rate-limits`.
fn named_keys(table: &str) -> String {
    let keys: Vec<&str> = NAMED_KEYS
        .iter()
        .filter_map(|spec| spec.name.strip_prefix(table)?.strip_prefix(".<"))
        .filter_map(|rest| rest.rsplit('.').next())
        .collect();
    keys.join(", ")
}

/// What names of rate limits and of configuration sections are, as messages say it.
pub(crate) const NAME_RULES: &str = "names of 1 to 512 bytes of UTF-8 with no control characters, no `.` and no whitespace at either end";
/// What a cache's name may be: a `.` is accepted there, and leaves the cache no section.
pub(crate) const CACHE_NAME_RULES: &str =
    "names of 1 to 512 bytes of UTF-8 with no control characters and no whitespace at either end";
/// The problem of a name with a `.`.
pub(crate) const NAME_DOTTED: &str = "contains `.`, which a configuration key cannot hold";
const _: () = assert!(lock_core::MAX_KEY_BYTES == 512, "NAME_RULES says 512 bytes");

/// What is wrong with `name` as the name of a rate limit or cache, if anything: the rules of
/// keys ([`lock_core::validate_key`]), no whitespace at either end, and no `.`, which a key's
/// path could not hold.
pub(crate) fn name_problem(name: &str) -> Result<(), &'static str> {
    match lock_core::validate_key(name) {
        Err(lock_core::LockError::InvalidKey { problem, .. }) => Err(problem),
        _ if name.trim() != name => Err("begins or ends with whitespace"),
        _ if name.contains('.') => Err(NAME_DOTTED),
        _ => Ok(()),
    }
}

/// `name` as a TOML key: bare when TOML allows it (`login`), else quoted (`"a b"`).
pub(crate) fn toml_key(name: &str) -> String {
    if !name.is_empty() && (name.chars()).all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// The names of the sections of the table that `first`, a key of [`NAMED_KEYS`], is in:
/// `login` for `rate-limits.login.rate`; each section checked to be a table with a valid name.
fn named_sections(figment: &Figment, first: &KeySpec) -> Result<Vec<String>, ConfigError> {
    let table = first
        .name
        .split_once(".<")
        .map_or(first.name, |(table, _)| table);
    let Ok(Value::Dict(_, sections)) = figment.find_value(table) else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for (name, section) in &sections {
        let path = first.for_name(name);
        let section_path = path.rsplit_once('.').map_or(path.as_str(), |(t, _)| t);
        // Shown escaped: a control character in a name must not break the message's line.
        let shown_path = section_path.escape_debug().to_string();
        if !matches!(section, Value::Dict(..)) {
            return Err(ConfigError::InvalidValue {
                key: shown_path,
                value: show(section),
                origin: Box::new(origin_of(figment, section_path)),
                problem: "a value where a table is expected".to_owned(),
                accepted: format!("a table with the keys {}", named_keys(table)),
            });
        }
        if let Err(problem) = name_problem(name) {
            // A name with `.` is no path figment finds: its table's origin stands for it.
            let found = figment.contains(section_path);
            return Err(ConfigError::InvalidValue {
                key: shown_path,
                value: "a table".to_owned(),
                origin: Box::new(origin_of(figment, if found { section_path } else { table })),
                problem: format!("the name {name:?}: {problem}"),
                accepted: NAME_RULES.to_owned(),
            });
        }
        // Names are compared, and used on Redis, folded: two such sections would be one.
        if let Some(other) = names
            .iter()
            .find(|other: &&String| lock_core::fold_name(other) == lock_core::fold_name(name))
        {
            return Err(ConfigError::InvalidValue {
                key: shown_path,
                value: "a table".to_owned(),
                origin: Box::new(origin_of(figment, section_path)),
                problem: format!(
                    "the names {other:?} and {name:?} are one name (compared in lower case, with - for _)"
                ),
                accepted: "one section per name".to_owned(),
            });
        }
        names.push(name.clone());
    }
    Ok(names)
}

/// The quota of every named rate limit, and the local batches above 0.
type RateLimits = (BTreeMap<String, Quota>, BTreeMap<String, u32>);

/// `rate-limits.<name>.{rate, burst, local-batch}`: every named rate limit, checked.
fn rate_limits(figment: &Figment) -> Result<RateLimits, ConfigError> {
    let [rate, burst, local_batch] = [
        "rate-limits.<name>.rate",
        "rate-limits.<name>.burst",
        "rate-limits.<name>.local-batch",
    ]
    .map(named_spec);
    let mut quotas = BTreeMap::new();
    let mut batches = BTreeMap::new();
    for name in named_sections(figment, rate)? {
        let path = rate.for_name(&name);
        let text = match figment.find_value(&path) {
            Ok(Value::String(_, text)) => text,
            Ok(_) => return Err(invalid_at(figment, rate, &path, "not text")),
            // Said of the section, which has a source: the rate has none.
            Err(_) => {
                let table = path.rsplit_once('.').map_or(path.as_str(), |(t, _)| t);
                return Err(ConfigError::InvalidValue {
                    key: table.to_owned(),
                    value: figment
                        .find_value(table)
                        .map_or_else(|_| "nothing".to_owned(), |v| show(&v)),
                    origin: Box::new(origin_of(figment, table)),
                    problem: format!("each rate limit needs its rate, and {path} is not set"),
                    accepted: rate.accepted(),
                });
            }
        };
        if let Some(problem) = rate.problem(&Val::Text(&text)) {
            return Err(invalid_at(figment, rate, &path, problem));
        }
        let mut quota: Quota =
            text.parse()
                .map_err(|e: lock_core::rate_limit::RateLimitError| {
                    invalid_at(figment, rate, &path, e.to_string())
                })?;
        if let Some(count) = named_count(figment, burst, &name)? {
            let burst_path = burst.for_name(&name);
            quota = quota.with_burst(count).map_err(|e| match e {
                lock_core::rate_limit::RateLimitError::InvalidArgument { problem, .. } => {
                    invalid_at(figment, burst, &burst_path, problem)
                }
                other => invalid_at(figment, burst, &burst_path, other.to_string()),
            })?;
        }
        if let Some(batch) = named_count(figment, local_batch, &name)?.filter(|n| *n > 0) {
            batches.insert(name.clone(), batch);
        }
        quotas.insert(name, quota);
    }
    Ok((quotas, batches))
}

/// `caches.<name>.*`: the settings of every cache that overrides `cache.*`, checked.
fn caches(
    figment: &Figment,
    base: &CacheSection,
) -> Result<BTreeMap<String, CacheSection>, ConfigError> {
    let [
        ttl,
        max_value_bytes,
        near_cache_entries,
        cross_pod_load_wait,
    ] = [
        "caches.<name>.ttl",
        "caches.<name>.max-value-bytes",
        "caches.<name>.near-cache-entries",
        "caches.<name>.cross-pod-load-wait",
    ]
    .map(named_spec);
    let mut sections = BTreeMap::new();
    for name in named_sections(figment, ttl)? {
        let mut section = base.clone();
        if let Some(duration) = named_duration(figment, ttl, &name)? {
            section.ttl = duration;
        }
        if let Some(count) = named_count(figment, max_value_bytes, &name)? {
            section.max_value_bytes = count;
        }
        if let Some(count) = named_count(figment, near_cache_entries, &name)? {
            section.near_cache_entries = count;
        }
        if let Some(duration) = named_duration(figment, cross_pod_load_wait, &name)? {
            section.cross_pod_load_wait = duration;
        }
        sections.insert(name, section);
    }
    Ok(sections)
}

/// The duration that the named key `spec` of `name` is set to, if it is set, checked.
fn named_duration(
    figment: &Figment,
    spec: &KeySpec,
    name: &str,
) -> Result<Option<Duration>, ConfigError> {
    let path = spec.for_name(name);
    let Ok(value) = figment.find_value(&path) else {
        return Ok(None);
    };
    // The deserializer of the table's durations, so both read a value alike.
    let duration =
        duration(&value).map_err(|e| invalid_at(figment, spec, &path, one_line_message(&e)))?;
    if let Some(problem) = spec.problem(&Val::Duration(duration)) {
        return Err(invalid_at(figment, spec, &path, problem));
    }
    Ok(Some(duration))
}

/// The sign of `text` if it is a whole number in digits, of any length (one too long for any
/// integer type is still one): `Some(true)` for `-99…9`, `Some(false)` for `99…9`.
fn whole_number_sign(text: &str) -> Option<bool> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(negative)
}

/// The whole number that the named key `spec` of `name` is set to, if it is set, checked.
fn named_count(figment: &Figment, spec: &KeySpec, name: &str) -> Result<Option<u32>, ConfigError> {
    let path = spec.for_name(name);
    let Ok(value) = figment.find_value(&path) else {
        return Ok(None);
    };
    let count: Option<i128> = match &value {
        Value::Num(_, num) => num.to_i128(),
        // Digits beyond i128 are still a whole number: too large, said below.
        Value::String(_, text) => text.trim().parse().ok().or_else(|| {
            whole_number_sign(text).map(|negative| if negative { -1 } else { i128::MAX })
        }),
        _ => None,
    };
    let count = count.ok_or_else(|| invalid_at(figment, spec, &path, "not a whole number"))?;
    let count = u32::try_from(count).map_err(|_| {
        let problem = if count < 0 {
            "smaller than the minimum"
        } else {
            "larger than the maximum"
        };
        invalid_at(figment, spec, &path, problem)
    })?;
    if let Some(problem) = spec.problem(&Val::Count(count)) {
        return Err(invalid_at(figment, spec, &path, problem));
    }
    Ok(Some(count))
}

/// A serde error as the error of the key (or table) it is about.
fn extraction_error(figment: &Figment, section: &str, error: figment::Error) -> ConfigError {
    // Figment appends the extracted section's segments after the keys inside it.
    let inside = error.path.len().saturating_sub(section.split('.').count());
    let (keys, outer) = error.path.split_at(inside);
    let key = outer
        .iter()
        .chain(keys)
        .cloned()
        .collect::<Vec<_>>()
        .join(".");
    let problem = match &error.kind {
        Kind::Message(message) => message.clone(),
        // A count key (`u32`): said as the range keys say it, not in serde's words.
        Kind::InvalidType(actual, expected) | Kind::InvalidValue(actual, expected)
            if expected
                .strip_prefix('u')
                .is_some_and(|bits| bits.parse::<u8>().is_ok()) =>
        {
            match actual {
                Actual::Signed(n) if *n < 0 => "a negative number",
                Actual::Signed(_) | Actual::Unsigned(_) => "too large",
                Actual::Str(text) => match whole_number_sign(text) {
                    Some(true) => "a negative number",
                    Some(false) => "too large",
                    None => "not a whole number",
                },
                // figment's 128-bit integers: "integer `99…9` as u128".
                Actual::Other(text) if text.starts_with("integer `-") => "a negative number",
                Actual::Other(text) if text.starts_with("integer `") => "too large",
                _ => "not a whole number",
            }
            .to_owned()
        }
        Kind::InvalidType(_, expected) | Kind::InvalidValue(_, expected)
            if expected == "a boolean" =>
        {
            "not true or false".to_owned()
        }
        kind => kind.to_string(),
    };
    match KEYS.iter().chain(SPRING_KEYS).find(|spec| spec.name == key) {
        // serde quotes the value it refused ("found signed int `123456`"): not for a secret.
        Some(spec) if spec.name.contains("password") => invalid(
            figment,
            spec,
            "not text; a password is a string (in TOML, in quotes)",
        ),
        Some(spec) => invalid(figment, spec, problem),
        None => ConfigError::InvalidValue {
            value: figment
                .find_value(&key)
                .map_or_else(|_| "nothing".to_owned(), |v| show(&v)),
            origin: Box::new(Origin::from_metadata(error.metadata.as_ref(), &key)),
            accepted: table_accepted(&key),
            key,
            problem,
        },
    }
}

/// What a table of the key table accepts: its keys.
fn table_accepted(table: &str) -> String {
    let keys: Vec<&str> = KEYS
        .iter()
        .chain(SPRING_KEYS)
        .filter_map(|spec| spec.name.strip_prefix(table)?.strip_prefix('.'))
        .collect();
    if keys.is_empty() && !named_keys(table).is_empty() {
        return format!(
            "a table of named tables, each with the keys {}",
            named_keys(table)
        );
    }
    format!("a table with the keys {}", keys.join(", "))
}

/// Rejects a value that is not a table where the key table has one (`redis = "redis://…"`
/// under `[telco.platform.lock]`). Run on every source by itself, before they are merged, so a
/// later source setting a key inside the table cannot hide it.
pub(crate) fn check_tables(figment: &Figment) -> Result<(), ConfigError> {
    for spec in KEYS.iter().chain(SPRING_KEYS).chain(NAMED_KEYS) {
        let mut table = spec.name;
        while let Some((parent, _)) = table.rsplit_once('.') {
            table = parent;
            if let Ok(value) = figment.find_value(table) {
                if !matches!(value, Value::Dict(..)) {
                    return Err(ConfigError::InvalidValue {
                        key: table.to_owned(),
                        value: show(&value),
                        origin: Box::new(origin_of(figment, table)),
                        problem: "a value where a table is expected".to_owned(),
                        accepted: table_accepted(table),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Every value under `value` that is not a table, by dotted path below it.
fn leaves(value: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Dict(_, dict) => {
            for (name, inner) in dict {
                let inner_path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                leaves(inner, &inner_path, out);
            }
        }
        _ => out.push((path.to_owned(), value.clone())),
    }
}

/// Warnings found while loading, each also logged with `tracing::warn!`.
#[derive(Default)]
pub(crate) struct Warnings(pub(crate) Vec<String>);

impl Warnings {
    pub(crate) fn warn(&mut self, message: String) {
        tracing::warn!("{message}");
        self.0.push(message);
    }
}

/// Keys under `telco.platform.lock` that are not in the table, and sections that look like a
/// misspelt `telco.platform.lock`: warnings, never errors, since a file is shared (a key a newer
/// version added must not stop an older service). Values are not shown: one may be a secret.
fn warn_unknown(figment: &Figment, warnings: &mut Warnings) {
    let mut all = Vec::new();
    if let Ok(root) = figment.find_value("") {
        leaves(&root, "", &mut all);
    }
    for (path, value) in &all {
        let origin = Origin::from_metadata(figment.get_metadata(value.tag()), path);
        if let Some(rest) = path.strip_prefix(PREFIX).and_then(|r| r.strip_prefix('.')) {
            // A named section that is not a table fails the load, naming it: not warned twice.
            if KEYS.iter().any(|spec| spec.name == path)
                || NAMED_KEYS.iter().any(|spec| spec.name_in(path).is_some())
                || NAMED_KEYS.iter().any(|spec| is_section(spec, path))
            {
                continue;
            }
            warnings.warn(format!(
                "unknown key {path} (from {origin}) is ignored{}",
                hint_part(rest, false, || format!("Accepted keys: {}", known_keys()))
            ));
        } else {
            let section: Vec<&str> = path.splitn(4, '.').take(3).collect();
            if near_miss_of_prefix(&section, PREFIX) {
                warnings.warn(format!(
                    "key {path} (from {origin}) is not read by the lock; did you mean {PREFIX}?"
                ));
            }
        }
    }
}

/// Whether `path` is a section of the table of `spec`, a key of [`NAMED_KEYS`]
/// (`…rate-limits.api`).
fn is_section(spec: &KeySpec, path: &str) -> bool {
    spec.name
        .split_once(".<")
        .and_then(|(table, _)| path.strip_prefix(table)?.strip_prefix('.'))
        .is_some_and(|name| !name.is_empty() && !name.contains('.'))
}

/// Reads, checks and completes the lock settings from a merged figment.
pub(crate) fn resolve(figment: &Figment, host_env: &HostEnv) -> Result<LockSettings, ConfigError> {
    if let Err(error) = figment.data() {
        return Err(ConfigError::Source {
            message: one_line_message(&error),
        });
    }
    check_tables(figment)?;
    let mut warnings = Warnings::default();
    for message in &host_env.warnings {
        warnings.warn(message.clone());
    }
    // A refused section name fails the load, naming it, before its keys are warned about as
    // unknown ones.
    for spec in NAMED_KEYS {
        named_sections(figment, spec)?;
    }
    warn_unknown(figment, &mut warnings);

    let full = defaults(host_env).merge(figment.clone());
    let mut settings: LockSettings = full
        .extract_inner_lossy(PREFIX)
        .map_err(|e| extraction_error(&full, PREFIX, e))?;
    for spec in KEYS {
        settings.origins.set(spec.name, origin_of(&full, spec.name));
    }
    if settings.origins.get(spec("redis.address").name) == Some(&Origin::Default) {
        if let Some((address, origin)) = spring_address(&full, host_env, &mut warnings)? {
            settings.redis.address = address;
            settings.origins.set(spec("redis.address").name, origin);
        }
    }
    for spec in KEYS {
        if let Some(problem) = spec.value(&settings).and_then(|value| spec.problem(&value)) {
            return Err(invalid(&full, spec, problem));
        }
    }
    check_ca_file(&full, &settings.redis)?;
    (settings.rate_limits, settings.rate_limit_batches) = rate_limits(&full)?;
    for (name, batch) in &settings.rate_limit_batches {
        let burst = settings.rate_limits[name].burst();
        if *batch > burst {
            let key = named_spec("rate-limits.<name>.local-batch").for_name(name);
            warnings.warn(format!(
                "{key} = {batch} is above the limit's burst of {burst}: a refill takes at most \
                 the burst, so batches are of {burst}"
            ));
        }
    }
    settings.caches = caches(&full, &settings.cache)?;
    settings.warnings = warnings.0;
    for spec in KEYS {
        if let Some(line) = settings.describe(spec.name) {
            tracing::debug!("{line}");
        }
    }
    for (name, quota) in &settings.rate_limits {
        let batch = settings.rate_limit_batches.get(name).copied().unwrap_or(0);
        tracing::debug!("{PREFIX}.rate-limits.{name}: {quota}, local-batch {batch}");
    }
    for (name, cache) in &settings.caches {
        tracing::debug!(
            "{PREFIX}.caches.{name}: ttl {}, max-value-bytes {}, near-cache-entries {}, \
             cross-pod-load-wait {}",
            format_duration(cache.ttl),
            cache.max_value_bytes,
            cache.near_cache_entries,
            format_duration(cache.cross_pod_load_wait)
        );
    }
    Ok(settings)
}

/// The address from `spring.data.redis.url`, else from `host`/`port` with `username` and
/// `password`; `None` when none is set. The URL with host/port from the same source leaves open
/// which Redis is meant: an error naming both. Other Spring keys are named in a warning.
fn spring_address(
    figment: &Figment,
    host_env: &HostEnv,
    warnings: &mut Warnings,
) -> Result<Option<(RedisAddress, Origin)>, ConfigError> {
    const SECTION: &str = "spring.data.redis";
    let section = figment.find_value(SECTION).ok();
    let spring: Spring = match section {
        Some(_) => figment
            .extract_inner_lossy(SECTION)
            .map_err(|e| extraction_error(figment, SECTION, e))?,
        None => Spring::default(),
    };
    let key = |name: &str| spec(&format!("{SECTION}.{name}"));
    let origin = |name: &str| origin_of(figment, key(name).name);
    let set = |name: &str| figment.contains(key(name).name);
    let parse = |name: &str, url: &str| {
        RedisAddress::parse(url).map_err(|e| invalid(figment, key(name), e.problem()))
    };
    let built = ["host", "port", "username", "password"];
    let (found, used) = if let Some(url) = &spring.url {
        if let Some(other) = ["host", "port"]
            .into_iter()
            .find(|k| set(k) && origin(k).same_source(&origin("url")))
        {
            let problem = format!(
                "{SECTION}.{other} is set in the same source ({}), so which Redis is meant is \
                 ambiguous; remove one of them, or set {}",
                origin(other),
                spec("redis.address").name
            );
            return Err(invalid(figment, key("url"), problem));
        }
        let address = parse("url", url)?;
        (
            Some((address, Origin::SpringUrl(Box::new(origin("url"))))),
            &["url"][..],
        )
    } else if built.iter().any(|k| set(k)) {
        let host = spring.host.as_deref().unwrap_or("localhost");
        // `[::1]` as written in a URL, or `::1`; one colon is a port, which has a key of its own.
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.matches(':').count() == 1 {
            return Err(invalid(
                figment,
                key("host"),
                format!("a host without a port; set the port in {SECTION}.port"),
            ));
        }
        if host.is_empty() || host.contains(|c: char| c.is_whitespace() || "/@?#[]".contains(c)) {
            return Err(invalid(
                figment,
                key("host"),
                "not a host name or IP address",
            ));
        }
        if spring.port == Some(0) {
            return Err(invalid(figment, key("port"), "port 0 is not accepted"));
        }
        // Percent-encoded, every character but the unreserved ones, so the client, which
        // decodes them, sends them as written.
        let text = |v: &Option<String>| v.as_deref().filter(|t| !t.is_empty()).map(encode_userinfo);
        let userinfo = match (text(&spring.username), text(&spring.password)) {
            (None, None) => String::new(),
            (user, None) => format!("{}@", user.unwrap_or_default()),
            (user, Some(password)) => format!("{}:{password}@", user.unwrap_or_default()),
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let port = spring.port.unwrap_or(6379);
        let address = parse("host", &format!("redis://{userinfo}{host}:{port}"))?;
        let keys = built
            .into_iter()
            .filter(|k| matches!(*k, "host" | "port") || set(k))
            .map(|k| (key(k).name.to_owned(), origin(k)))
            .collect();
        (Some((address, Origin::SpringFallback { keys })), &built[..])
    } else {
        (None, &[][..])
    };
    let mut unread = Vec::new();
    if let Some(section) = &section {
        leaves(section, "", &mut unread);
    }
    let shown = |(path, value): &(String, Value)| {
        let origin = Origin::from_metadata(figment.get_metadata(value.tag()), path);
        format!("{SECTION}.{path} (from {origin})")
    };
    let (overridden, unread): (Vec<_>, Vec<_>) = unread
        .iter()
        .filter(|(path, _)| !used.contains(&path.as_str()))
        .partition(|(path, _)| used == ["url"] && built.contains(&path.as_str()));
    if !overridden.is_empty() {
        let overridden: Vec<String> = overridden.into_iter().map(shown).collect();
        warnings.warn(format!(
            "{} ignored: {SECTION}.url (from {}) gives the whole address",
            overridden.join(", "),
            origin("url")
        ));
    }
    let mut unread: Vec<String> = unread.into_iter().map(shown).collect();
    unread.extend(
        host_env
            .spring_unread
            .iter()
            .map(|var| format!("environment variable {var}")),
    );
    if !unread.is_empty() {
        warnings.warn(format!(
            "these Spring settings are not read by the lock, which takes its address only from \
             {0} or spring.data.redis url, host, port, username and password: {1}. Set {0} if \
             the lock needs them",
            spec("redis.address").name,
            unread.join(", "),
        ));
    }
    Ok(found)
}

/// `redis.tls.ca-file`: as lock-redis checks it (a TLS address, a file of CA certificates).
fn check_ca_file(figment: &Figment, redis: &RedisSettings) -> Result<(), ConfigError> {
    let Some(path) = &redis.tls_ca_file else {
        return Ok(());
    };
    lock_redis::check_ca_file(path, &redis.address)
        .map_err(|problem| invalid(figment, spec("redis.tls.ca-file"), problem))
}

/// `text` (a user name or password) for the user part of a URL: every character but the
/// unreserved ones (`A-Z a-z 0-9 - . _ ~`) percent-encoded, `%` included, so the Redis client,
/// which percent-decodes the user part, gets `text` exactly as written.
fn encode_userinfo(text: &str) -> String {
    const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    utf8_percent_encode(text, NOT_UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_parts_are_encoded_whole() {
        for (text, encoded) in [
            ("plain-ok_1.2~", "plain-ok_1.2~"),
            ("pa%41ss", "pa%2541ss"),
            ("100%", "100%25"),
            ("a+b", "a%2Bb"),
            ("p@ss:w/rd?#", "p%40ss%3Aw%2Frd%3F%23"),
            ("späß", "sp%C3%A4%C3%9F"),
            ("a b&c=d'\"`", "a%20b%26c%3Dd%27%22%60"),
        ] {
            assert_eq!(encode_userinfo(text), encoded, "{text}");
            let decoded = percent_encoding::percent_decode_str(encoded).decode_utf8();
            assert_eq!(decoded.unwrap(), text);
        }
    }
}
