//! Loading the configuration: every key of the table from files and the environment, the
//! errors of each kind of key, origins, unknown keys, the Spring fallback, and the documents
//! that follow the table. Most tests walk `KEYS`, so a new key is covered by its declaration.

use std::path::PathBuf;
use std::time::Duration;

use lock_starter::config::{
    Accepts, ConfigError, ConfigSources, KEYS, KeyDefault, KeySpec, LockSettings, NAMED_KEYS,
    Origin, SPRING_KEYS, key_spec,
};

const POD: (&str, &str) = ("POD_NAME", "billing-7f9c");

fn from_env(pairs: &[(&str, &str)]) -> Result<LockSettings, ConfigError> {
    let vars = pairs.iter().copied().chain([POD]);
    LockSettings::load(&ConfigSources::new().env_from(vars))
}

/// Writes `text` to a TOML file and loads it, with `env` on top.
fn from_toml(text: &str, env: &[(&str, &str)]) -> (Result<LockSettings, ConfigError>, PathBuf) {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join("lock.toml");
    std::fs::write(&path, text).unwrap();
    let vars = env.iter().copied().chain([POD]);
    let sources = ConfigSources::new().toml_file(&path).env_from(vars);
    (LockSettings::load(&sources), path)
}

/// `[telco.platform.lock]` (or `[spring.data.redis]`) with `key = value`.
fn toml_line(spec: &KeySpec, value: &str) -> String {
    let (table, key) = match spec.name.strip_prefix("telco.platform.lock.") {
        Some(short) => ("telco.platform.lock", short),
        None => (
            "spring.data.redis",
            spec.name.strip_prefix("spring.data.redis.").unwrap(),
        ),
    };
    format!("[{table}]\n{key} = {value}\n")
}

/// An accepted value of a key, as the environment would give it.
fn good_value(spec: &KeySpec) -> Option<&'static str> {
    Some(match spec.accepts {
        Accepts::Bool => "false",
        Accepts::Duration { .. } => "1s",
        Accepts::Count { .. } => "1",
        _ => match spec.short_name() {
            "redis.address" => "redis://cache.internal:6380",
            "key-prefix" => "billing:",
            "instance-id" => "billing-1",
            _ => return None, // the CA file: see its own test
        },
    })
}

fn invalid(result: Result<LockSettings, ConfigError>) -> (String, String, Origin, String) {
    match result {
        Err(ConfigError::InvalidValue {
            key,
            value,
            origin,
            problem,
            accepted,
        }) => {
            let message =
                format!("{key} = {value} (from {origin}): {problem}; accepted: {accepted}");
            (key, message, *origin, accepted)
        }
        other => panic!("expected an invalid value, got {other:?}"),
    }
}

#[test]
fn defaults_come_from_the_table() {
    let settings = from_env(&[]).unwrap();
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
    for spec in KEYS {
        let line = settings.describe(spec.name).unwrap();
        match spec.default {
            KeyDefault::Value(default) => {
                assert!(line.contains(default), "{line} shows {default}");
                assert!(line.ends_with("from default"), "{line}");
            }
            KeyDefault::Described(_) => {
                assert!(settings.source_of(spec.name).unwrap().is_default())
            }
        }
    }
    assert_eq!(settings.instance_id, "billing-7f9c");
    assert_eq!(
        settings.source_of("instance-id"),
        Some(&Origin::DefaultFromEnv("POD_NAME".into()))
    );
    let host = LockSettings::load(&ConfigSources::new().env_from([("HOSTNAME", "h-1")])).unwrap();
    assert_eq!(
        host.source_of("instance-id"),
        Some(&Origin::DefaultFromEnv("HOSTNAME".into()))
    );
    let none = LockSettings::load(&ConfigSources::new().env_from::<_, String, String>([])).unwrap();
    assert_eq!(
        none.source_of("instance-id"),
        Some(&Origin::DefaultFromHostname)
    );
}

#[test]
fn every_key_is_read_from_a_file_and_from_each_of_its_variables() {
    for spec in KEYS {
        let Some(value) = good_value(spec) else {
            continue;
        };
        let quoted = match spec.accepts {
            Accepts::Bool | Accepts::Count { .. } => value.to_owned(),
            _ => format!("{value:?}"),
        };
        let (settings, path) = from_toml(&toml_line(spec, &quoted), &[]);
        let settings = settings.unwrap();
        assert!(
            matches!(settings.source_of(spec.name), Some(Origin::File { path: p, .. }) if *p == path),
            "{}",
            spec.name
        );
        let from_file = settings.describe(spec.name).unwrap();
        for name in spec.env_names() {
            let settings = from_env(&[(&name, value)]).unwrap();
            assert_eq!(
                settings.source_of(spec.name),
                Some(&Origin::Env(name.clone()))
            );
            let line = settings.describe(spec.name).unwrap();
            assert_eq!(
                line.split(" from ").next(),
                from_file.split(" from ").next(),
                "{name}"
            );
        }
    }
    let env = key_spec("redis.command-timeout").unwrap().env_names();
    assert_eq!(
        env,
        [
            "TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT",
            "TELCO_PLATFORM_LOCK_REDIS_COMMANDTIMEOUT"
        ]
    );
    assert_eq!(
        key_spec("enabled").unwrap().env_names(),
        ["TELCO_PLATFORM_LOCK_ENABLED"]
    );
}

/// The one line per key that hands it on (to `LockSettings::redis_config`, to `idempotency_settings` for
/// `idempotency.*`, to the layer for `idempotency.http-*`): a key left out would be read,
/// described and then ignored.
#[test]
fn every_key_reaches_the_redis_lock_config_or_its_capabilitys_settings() {
    let shown = |pairs: &[(&str, &str)]| {
        let settings = from_env(pairs).unwrap();
        format!("{:?} {:?}", settings.redis_config(), settings.lock_config())
    };
    let defaults = shown(&[]);
    let idempotency =
        |pairs: &[(&str, &str)]| format!("{:?}", from_env(pairs).unwrap().idempotency_settings());
    let idempotency_defaults = idempotency(&[]);
    for spec in KEYS.iter().filter(|spec| spec.short_name() != "enabled") {
        if spec.short_name().starts_with("branches.") {
            // Reaches MasterLocks: tests/tests/starter.rs checks `master_locks().branch_wait()`.
            let env = spec.env_name();
            let branches =
                |pairs: &[(&str, &str)]| format!("{:?}", from_env(pairs).unwrap().branches);
            assert_ne!(branches(&[(&env, "7s")]), branches(&[]), "{}", spec.name);
            continue;
        }
        if spec.short_name().starts_with("cache.") {
            // Reaches the cache options: cache::wiring checks `cache(name).options()`.
            let env = spec.env_name();
            let value = match spec.accepts {
                Accepts::Duration { .. } => "7s",
                _ => "4096",
            };
            let cache = |pairs: &[(&str, &str)]| format!("{:?}", from_env(pairs).unwrap().cache);
            assert_ne!(cache(&[(&env, value)]), cache(&[]), "{}", spec.name);
            continue;
        }
        if spec.short_name().starts_with("idempotency.http-") {
            // Reaches the Idempotency-Key layer: http_idempotency's
            // a_configured_wait_lets_a_concurrent_retry_get_the_first_response checks the wait.
            let env = spec.env_name();
            let value = if spec.short_name().ends_with("bytes") {
                "4096"
            } else {
                "7s"
            };
            let section =
                |pairs: &[(&str, &str)]| format!("{:?}", from_env(pairs).unwrap().idempotency);
            assert_ne!(section(&[(&env, value)]), section(&[]), "{}", spec.name);
            continue;
        }
        if spec.short_name().starts_with("idempotency.") {
            let env = spec.env_name();
            let value = if spec.short_name().ends_with("bytes") {
                "4096"
            } else {
                "7s"
            };
            assert_ne!(
                idempotency(&[(&env, value)]),
                idempotency_defaults,
                "{} = {value}",
                spec.name
            );
            continue;
        }
        let value = match (good_value(spec), spec.default) {
            (None, _) => continue, // the CA file: its own test checks it reaches the connection
            (Some(value), KeyDefault::Value(default)) if value == default => "3s",
            (Some(value), _) => value,
        };
        let env = spec.env_name();
        assert_ne!(shown(&[(&env, value)]), defaults, "{} = {value}", spec.name);
    }
}

#[test]
fn the_environment_wins_and_both_forms_of_one_key_must_agree() {
    let (settings, _) = from_toml(
        "[telco.platform.lock]\nwait-time = \"2s\"\n",
        &[("TELCO_PLATFORM_LOCK_WAIT_TIME", "3s")],
    );
    assert_eq!(settings.unwrap().wait_time, Duration::from_secs(3));
    let same = from_env(&[
        ("TELCO_PLATFORM_LOCK_WAIT_TIME", "3s"),
        ("TELCO_PLATFORM_LOCK_WAITTIME", "3s"),
    ]);
    assert_eq!(same.unwrap().wait_time, Duration::from_secs(3));
    let error = from_env(&[
        ("TELCO_PLATFORM_LOCK_WAIT_TIME", "3s"),
        ("TELCO_PLATFORM_LOCK_WAITTIME", "4s"),
    ])
    .unwrap_err();
    assert!(
        matches!(error, ConfigError::ConflictingEnv { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("TELCO_PLATFORM_LOCK_WAITTIME = \"4s\""),
        "{error}"
    );
}

#[test]
fn bad_values_of_every_key_name_the_key_value_origin_and_what_is_accepted() {
    for spec in KEYS {
        let mut bad: Vec<(String, &str)> = match spec.accepts {
            Accepts::Bool => vec![("maybe".into(), "")],
            Accepts::Count { min, max } => {
                let mut cases = vec![
                    ((max + 1).to_string(), "larger than the maximum"),
                    ("-1".into(), ""),
                    ("x".into(), ""),
                ];
                if min > 0 {
                    cases.push(((min - 1).to_string(), "smaller than the minimum"));
                }
                cases
            }
            Accepts::Duration { min, max } => {
                let mut cases = vec![
                    (
                        format!("{}ms", max.as_millis() + 1),
                        "longer than the maximum",
                    ),
                    (
                        "500us".into(),
                        "unknown unit \"us\"; the units are ms, s, m (minutes) and h",
                    ),
                    ("1M".into(), "M is not minutes"),
                    ("5".into(), "a unit is required"),
                    ("-1s".into(), "negative"),
                    ("5 parsecs".into(), "unknown unit \"parsecs\""),
                    (
                        "abc".into(),
                        "not a duration; a duration starts with a number",
                    ),
                    ("1m30".into(), "a unit is required after 30"),
                    ("0.0001s".into(), "finer than a millisecond"),
                    ("".into(), "empty"),
                ];
                if !min.is_zero() {
                    cases.push(("0".into(), "0 is not accepted"));
                    if min > Duration::from_millis(1) {
                        cases.push((
                            format!("{}ms", min.as_millis() - 1),
                            "shorter than the minimum",
                        ));
                    }
                }
                cases
            }
            _ => match spec.short_name() {
                "redis.address" => vec![
                    ("http://cache:6379".into(), "scheme"),
                    ("redis://cache:0".into(), "port 0"),
                ],
                "key-prefix" => vec![
                    ("{billing}:".into(), "hash tag"),
                    ("".into(), "empty"),
                    ("a b".into(), "whitespace"),
                ],
                "instance-id" => vec![("pod|1".into(), ""), ("".into(), "")],
                _ => vec![],
            },
        };
        for (value, says) in bad.drain(..) {
            let var = spec.env_name();
            let result = from_env(&[(&var, &value)]);
            let (key, message, origin, accepted) = invalid(result);
            assert_eq!(key, spec.name);
            assert_eq!(origin, Origin::Env(var.clone()));
            assert_eq!(accepted, spec.accepted());
            assert!(message.contains(&format!("{:?}", value)), "{message}");
            assert!(message.contains(says), "{message} says {says}");
            let (result, path) = from_toml(&toml_line(spec, &format!("{value:?}")), &[]);
            let (key, message, origin, _) = invalid(result);
            assert_eq!(key, spec.name, "{message}");
            assert!(
                matches!(origin, Origin::File { path: p, .. } if p == path),
                "{message}"
            );
        }
    }
    let (_, message, _, _) = invalid(from_env(&[("TELCO_PLATFORM_LOCK_WAIT_TIME", "5 parsecs")]));
    assert_eq!(
        message,
        "telco.platform.lock.wait-time = \"5 parsecs\" (from environment variable \
         TELCO_PLATFORM_LOCK_WAIT_TIME): unknown unit \"parsecs\"; the units are ms, s, m (minutes) and h; \
         accepted: a duration in ms, s, m or h (such as 250ms, 5s or 1m30s; 0 needs no unit), from 0 to 1 h"
    );
    // A switch takes the spellings its accepted text names, and no others.
    for (value, enabled) in [
        ("off", false),
        ("No", false),
        ("0", false),
        ("YES", true),
        ("1", true),
    ] {
        let settings = from_env(&[("TELCO_PLATFORM_LOCK_ENABLED", value)]).unwrap();
        assert_eq!(settings.enabled, enabled, "{value}");
    }
    let (_, message, _, _) = invalid(from_env(&[("TELCO_PLATFORM_LOCK_ENABLED", "maybe")]));
    assert!(
        message.ends_with("accepted: true or false (also yes/no, on/off, 1/0, in any case)"),
        "{message}"
    );
    // A TOML value of the wrong type.
    let (result, _) = from_toml("[telco.platform.lock]\nenabled = 3\nkey-prefix = 5\n", &[]);
    assert_eq!(invalid(result).0, "telco.platform.lock.enabled");
    let (result, _) = from_toml("[telco.platform.lock]\nkey-prefix = 5\n", &[]);
    assert_eq!(invalid(result).0, "telco.platform.lock.key-prefix");
}

#[test]
fn durations_take_ms_s_m_h_their_combinations_and_a_bare_zero() {
    for (text, expected) in [
        ("250ms", 250),
        ("5s", 5_000),
        ("1m30s", 90_000),
        ("1h", 3_600_000),
        ("1m 30s", 90_000),
        ("0", 0),
        ("0s", 0),
    ] {
        let settings = from_env(&[("TELCO_PLATFORM_LOCK_WAIT_TIME", text)]).unwrap();
        assert_eq!(
            settings.wait_time,
            Duration::from_millis(expected),
            "{text}"
        );
    }
    let (settings, _) = from_toml("[telco.platform.lock]\nwait-time = 0\n", &[]);
    assert_eq!(settings.unwrap().wait_time, Duration::ZERO);
    let (result, _) = from_toml("[telco.platform.lock]\nwait-time = 5\n", &[]);
    assert!(invalid(result).1.contains("a unit is required"));
}

/// A count or boolean key given something else says so in the words the range keys use, not
/// serde's.
#[test]
fn a_count_that_is_not_one_says_why_plainly() {
    for (variable, value, problem) in [
        (
            "TELCO_PLATFORM_LOCK_CACHE_MAX_VALUE_BYTES",
            "1GB",
            "not a whole number",
        ),
        (
            "TELCO_PLATFORM_LOCK_MIN_REPLICAS",
            "2.5",
            "not a whole number",
        ),
        (
            "TELCO_PLATFORM_LOCK_CACHE_NEAR_CACHE_ENTRIES",
            "-5",
            "a negative number",
        ),
        (
            "TELCO_PLATFORM_LOCK_IDEMPOTENCY_MAX_RESULT_BYTES",
            "99999999999",
            "too large",
        ),
        (
            "TELCO_PLATFORM_LOCK_CACHE_NEAR_CACHE_ENTRIES",
            "99999999999999999999999",
            "too large",
        ),
        (
            "TELCO_PLATFORM_LOCK_CACHE_NEAR_CACHE_ENTRIES",
            "999999999999999999999999999999999999999999",
            "too large",
        ),
    ] {
        let message = from_env(&[(variable, value)]).unwrap_err().to_string();
        assert!(
            message.contains(&format!(
                "(from environment variable {variable}): {problem}; accepted: a whole number from"
            )),
            "{message}"
        );
        assert!(!message.contains("expected u32"), "{message}");
    }
    let message = from_env(&[("TELCO_PLATFORM_LOCK_ENABLED", "nope")])
        .unwrap_err()
        .to_string();
    assert!(
        message.contains(
            "(from environment variable TELCO_PLATFORM_LOCK_ENABLED): not true or false; accepted:"
        ),
        "{message}"
    );
}

#[test]
fn quoted_numbers_and_booleans_are_read_like_figment_reads_them() {
    let (settings, _) = from_toml(
        "[telco.platform.lock]\nmin-replicas = \"2\"\nenabled = \"false\"\n",
        &[],
    );
    let settings = settings.unwrap();
    assert_eq!(settings.min_replicas, 2);
    assert!(!settings.enabled);
}

#[test]
fn unknown_keys_and_variables_are_warnings_with_a_suggestion() {
    let (settings, path) = from_toml(
        "[telco.platform.lock]\nwait-tme = \"2s\"\nlease-time = \"30s\"\nnewer-key = 1\n\
         [telco.platform.lok]\nwait-time = \"2s\"\n[telco.platform.log]\nlevel = \"info\"\n",
        &[
            ("TELCO_PLATFORM_LOCK_WATCHDOG_TIMOUT", "10s"),
            ("TELCO_PLATFROM_LOCK_WAIT_TIME", "1s"),
            ("telco_platform_lock_enabled", "false"),
        ],
    );
    let settings = settings.unwrap();
    assert!(settings.enabled, "only upper-case variables are read");
    let warnings = settings.warnings().join("\n");
    assert_eq!(
        settings.wait_time,
        Duration::from_secs(5),
        "nothing misspelt is read"
    );
    for expected in [
        format!("unknown key telco.platform.lock.wait-tme (from TOML file {}) is ignored; did you mean telco.platform.lock.wait-time?", path.display()),
        "unknown key telco.platform.lock.newer-key (from TOML file".to_owned(),
        "is ignored. Accepted keys: telco.platform.lock.{enabled, redis.address,".to_owned(),
        "unknown key telco.platform.lock.lease-time".to_owned(),
        "there is deliberately no lease-time key".to_owned(),
        "unknown key telco.platform.lock.newer-key".to_owned(),
        "key telco.platform.lok.wait-time".to_owned(),
        "did you mean telco.platform.lock?".to_owned(),
        "unknown environment variable TELCO_PLATFORM_LOCK_WATCHDOG_TIMOUT is ignored: it names no key under telco.platform.lock; did you mean TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT?".to_owned(),
        "environment variable TELCO_PLATFROM_LOCK_WAIT_TIME is ignored".to_owned(),
        "environment variable telco_platform_lock_enabled is ignored: the lock reads only variables starting with TELCO_PLATFORM_LOCK_".to_owned(),
    ] {
        assert!(warnings.contains(&expected), "{expected}\nnot in\n{warnings}");
    }
    assert!(!warnings.contains("telco.platform.log"), "{warnings}");
    assert_eq!(settings.warnings().len(), 7, "{warnings}");
    // The key meant, without the accepted list it would be lost in.
    let meant: Vec<&String> = (settings.warnings().iter())
        .filter(|w| w.contains("did you mean TELCO_PLATFORM_LOCK_") || w.contains("wait-tme"))
        .collect();
    assert_eq!(meant.len(), 2, "{warnings}");
    assert!(meant.iter().all(|w| w.ends_with('?')), "{meant:?}");
}

#[test]
fn did_you_mean_covers_case_separators_and_the_last_segment() {
    for (written, meant) in [
        ("wait_time", "wait-time"),
        ("waitTime", "wait-time"),
        ("redis.adress", "redis.address"),
        ("command-timeout", "redis.command-timeout"),
        ("enable", "enabled"),
    ] {
        let (settings, _) = from_toml(&format!("[telco.platform.lock]\n{written} = 1\n"), &[]);
        let warnings = settings.unwrap().warnings().join("\n");
        assert!(
            warnings.contains(&format!("did you mean telco.platform.lock.{meant}?")),
            "{warnings}"
        );
    }
    let (settings, _) = from_toml("[telco.platform.lock]\ncolour = 1\n", &[]);
    assert!(!settings.unwrap().warnings()[0].contains("did you mean"));
}

#[test]
fn a_scalar_where_a_table_belongs_stops_start_up_even_under_an_env_key() {
    let broken = "[telco.platform.lock]\nredis = \"redis://cache:6379\"\n";
    for env in [
        &[][..],
        &[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://other:6379")][..],
    ] {
        let (result, path) = from_toml(broken, env);
        let (key, message, origin, accepted) = invalid(result);
        assert_eq!(key, "telco.platform.lock.redis", "{message}");
        assert!(message.contains("\"redis://cache:6379\""), "{message}");
        assert!(matches!(origin, Origin::File { path: p, .. } if p == path));
        assert!(
            accepted.contains("address, command-timeout, tls.ca-file"),
            "{accepted}"
        );
    }
    let (result, _) = from_toml(
        "[spring.data]\nredis = 5\n",
        &[("SPRING_DATA_REDIS_HOST", "h")],
    );
    assert_eq!(invalid(result).0, "spring.data.redis");
}

#[test]
fn the_spring_keys_give_the_address_when_the_lock_has_none() {
    let settings = from_env(&[("SPRING_DATA_REDIS_URL", "redis://cache:6380")]).unwrap();
    assert_eq!(settings.redis.address.port(), 6380);
    assert_eq!(
        settings.source_of("redis.address").unwrap().to_string(),
        "spring.data.redis.url from environment variable SPRING_DATA_REDIS_URL"
    );

    let (settings, path) = from_toml(
        "[spring.data.redis]\nhost = \"cache\"\nusername = \"app\"\ntimeout = \"2s\"\nsentinel.master = \"m\"\n",
        &[("SPRING_DATA_REDIS_PASSWORD", "s3cret@1")],
    );
    let settings = settings.unwrap();
    assert_eq!(
        settings.redis.address.expose(),
        "redis://app:s3cret%401@cache:6379"
    );
    assert_eq!(
        settings.source_of("redis.address").unwrap().to_string(),
        format!(
            "spring.data.redis.host from TOML file {0}, spring.data.redis.port from default, spring.data.redis.username from TOML file {0} and spring.data.redis.password from environment variable SPRING_DATA_REDIS_PASSWORD",
            path.display()
        )
    );
    let warnings = settings.warnings().join("\n");
    assert!(
        warnings.contains("spring.data.redis.timeout (from TOML file"),
        "{warnings}"
    );
    assert!(
        warnings.contains("spring.data.redis.sentinel.master"),
        "{warnings}"
    );
    assert!(!format!("{settings:?}{warnings}").contains("s3cret"));

    // The lock's own address wins, and the service's Spring settings are none of its business.
    let settings = from_env(&[
        ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://lock:6379"),
        ("SPRING_DATA_REDIS_HOST", "cache"),
    ])
    .unwrap();
    assert_eq!(settings.redis.address.host(), "lock");
    assert!(settings.warnings().is_empty());
}

#[test]
fn spring_url_with_host_or_port_in_one_source_is_a_conflict() {
    let (result, _) = from_toml(
        "[spring.data.redis]\nurl = \"redis://a:6379\"\nport = 6380\n",
        &[],
    );
    let (key, message, _, _) = invalid(result);
    assert_eq!(key, "spring.data.redis.url");
    assert!(
        message.contains("spring.data.redis.port is set in the same source"),
        "{message}"
    );
    let (_, message, _, _) = invalid(from_env(&[
        ("SPRING_DATA_REDIS_URL", "redis://a:6379"),
        ("SPRING_DATA_REDIS_HOST", "b"),
    ]));
    assert!(message.contains("spring.data.redis.host"), "{message}");
    // From different sources, the URL wins (as in Spring Boot), and the warning says so.
    let (settings, _) = from_toml(
        "[spring.data.redis]\nhost = \"b\"\npassword = \"s3cret\"\n",
        &[("SPRING_DATA_REDIS_URL", "redis://a:6379")],
    );
    let settings = settings.unwrap();
    assert_eq!(settings.redis.address.host(), "a");
    let warnings = settings.warnings().join("\n");
    assert!(
        warnings.contains("spring.data.redis.host (from TOML file")
            && warnings.contains("ignored: spring.data.redis.url (from environment variable SPRING_DATA_REDIS_URL) gives the whole address"),
        "{warnings}"
    );
    assert!(!warnings.contains("not read by the lock"), "{warnings}");
    assert!(!warnings.contains("s3cret"), "{warnings}");
}

#[test]
fn a_spring_host_is_a_host_without_a_port() {
    let (key, message, _, _) = invalid(from_env(&[("SPRING_DATA_REDIS_HOST", "10.0.0.5:6380")]));
    assert_eq!(key, "spring.data.redis.host");
    assert!(
        message.contains("a host without a port; set the port in spring.data.redis.port"),
        "{message}"
    );
    for host in ["::1", "[::1]"] {
        let settings = from_env(&[("SPRING_DATA_REDIS_HOST", host)]).unwrap();
        assert_eq!(settings.redis.address.host(), "[::1]", "{host}");
    }
}

#[test]
fn bad_spring_values_name_the_spring_key_and_hide_the_password() {
    for (pairs, key) in [
        (
            &[("SPRING_DATA_REDIS_PORT", "99999")][..],
            "spring.data.redis.port",
        ),
        (
            &[("SPRING_DATA_REDIS_PORT", "0")][..],
            "spring.data.redis.port",
        ),
        (
            &[("SPRING_DATA_REDIS_HOST", "bad host")][..],
            "spring.data.redis.host",
        ),
        (
            &[("SPRING_DATA_REDIS_URL", "http://x")][..],
            "spring.data.redis.url",
        ),
    ] {
        let pairs: Vec<_> = pairs
            .iter()
            .copied()
            .chain([("SPRING_DATA_REDIS_PASSWORD", "s3cret")])
            .collect();
        let (got, message, _, _) = invalid(from_env(&pairs));
        assert_eq!(got, key, "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    }
    for port in ["70000", "abc", "-1"] {
        let (_, message, _, _) = invalid(from_env(&[("SPRING_DATA_REDIS_PORT", port)]));
        assert!(
            message.contains("not a port: a whole number from 1 to 65535"),
            "{message}"
        );
    }
    // A password TOML reads as a number, a boolean or a date: serde's reason would quote it.
    for value in ["123456789", "true", "1979-05-27"] {
        let toml = format!("[spring.data.redis]\nhost = \"h\"\npassword = {value}\n");
        let (got, message, _, _) = invalid(from_toml(&toml, &[]).0);
        assert_eq!(got, "spring.data.redis.password", "{message}");
        assert!(message.contains("not text"), "{message}");
        assert!(!message.contains(value), "{message}");
    }
}

#[test]
fn the_ca_file_needs_tls_and_a_pem_file() {
    let dir = tempfile::tempdir().unwrap();
    let certificates = lock_testkit::TestCertificates::generate(dir.path()).unwrap();
    let not_pem = dir.path().join("ca.txt");
    std::fs::write(&not_pem, "hello").unwrap();
    let not_a_certificate = dir.path().join("garbled.pem");
    std::fs::write(
        &not_a_certificate,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let (pem, not_pem) = (certificates.ca.to_str().unwrap(), not_pem.to_str().unwrap());
    let not_a_certificate = not_a_certificate.to_str().unwrap();
    let ca = "TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE";
    let tls = ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "rediss://cache:6379");
    let settings = from_env(&[tls, (ca, pem)]).unwrap();
    assert_eq!(
        settings.redis.tls_ca_file.as_deref(),
        Some(std::path::Path::new(pem))
    );
    assert_eq!(
        settings.source_of("redis.tls.ca-file"),
        Some(&Origin::Env(ca.into()))
    );
    for (pairs, says) in [
        (vec![(ca, pem)], "does not use TLS"),
        (vec![tls, (ca, not_pem)], "no PEM certificate"),
        (
            vec![tls, (ca, not_a_certificate)],
            "not a usable CA certificate",
        ),
        (vec![tls, (ca, "/nonexistent/ca.pem")], "does not exist"),
        (vec![tls, (ca, dir.path().to_str().unwrap())], "directory"),
    ] {
        let (key, message, _, _) = invalid(from_env(&pairs));
        assert_eq!(key, "telco.platform.lock.redis.tls.ca-file");
        assert!(message.contains(says), "{message}");
    }
}

#[test]
fn sources_fail_by_path() {
    let missing = LockSettings::load(&ConfigSources::new().toml_file("/nonexistent/lock.toml"));
    assert!(matches!(missing, Err(ConfigError::MissingFile { .. })));
    let (result, path) = from_toml("[telco.platform.lock\n", &[]);
    match result {
        Err(ConfigError::InvalidToml { path: p, .. }) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
}

// The documents that follow the table. `UPDATE_CONFIG_DOCS=1 cargo test -p lock-starter
// --test it -- config::` rewrites them from the table.

fn env_list(spec: &KeySpec, code: bool) -> String {
    let names = spec.env_names();
    if code {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        names.join(" or ")
    }
}

fn doc_table() -> String {
    let mut out = String::from(
        "| key | default | environment variables | accepted | meaning |\n|---|---|---|---|---|\n",
    );
    for spec in KEYS.iter().chain(NAMED_KEYS).chain(SPRING_KEYS) {
        let default = match spec.default {
            KeyDefault::Value(value) => format!("`{value}`"),
            KeyDefault::Described(text) => text.to_owned(),
        };
        out.push_str(&format!(
            "| `{}` | {default} | {} | {} | {} |\n",
            spec.name,
            env_list(spec, true),
            spec.accepted().replace('|', "\\|"),
            spec.doc.replace('|', "\\|")
        ));
    }
    out
}

fn lock_toml() -> String {
    let mut out = String::from(LOCK_TOML_HEADER);
    let mut table = "";
    let mut keys: Vec<(&str, &str, &KeySpec)> = KEYS
        .iter()
        .chain(SPRING_KEYS)
        .map(
            |spec| match spec.name.strip_prefix("telco.platform.lock.") {
                Some(short) if short.starts_with("redis.") => {
                    ("telco.platform.lock.redis", &short[6..], spec)
                }
                Some(short) => ("telco.platform.lock", short, spec),
                None => (
                    "spring.data.redis",
                    &spec.name["spring.data.redis.".len()..],
                    spec,
                ),
            },
        )
        .collect();
    // Each table once: the lock's own keys, then `redis`, then Spring's.
    keys.sort_by_key(|(section, ..)| {
        ["telco.platform.lock", "telco.platform.lock.redis"]
            .iter()
            .position(|s| s == section)
            .unwrap_or(2)
    });
    for (section, key, spec) in keys {
        if section != table {
            table = section;
            out.push_str(&format!("\n[{section}]\n"));
        }
        lock_toml_entry(&mut out, key, spec);
    }
    // The named tables, in the order of NAMED_KEYS: what each is, and an example name.
    for (section, what, example) in [
        ("telco.platform.lock.rate-limits", "rate limit", "login"),
        ("telco.platform.lock.caches", "cache", "products"),
    ] {
        out.push_str(&format!(
            "\n# One table per {what}, such as [{section}.{example}]:\n# [{section}.<name>]\n"
        ));
        for spec in NAMED_KEYS {
            if let Some(key) = spec.name.strip_prefix(&format!("{section}.<name>.")) {
                lock_toml_entry(&mut out, key, spec);
            }
        }
    }
    let tables = out.matches(".<name>]").count();
    let named = NAMED_KEYS
        .iter()
        .filter(|spec| out.contains(spec.doc))
        .count();
    assert_eq!(
        (tables, named),
        (2, NAMED_KEYS.len()),
        "a named key outside the tables above"
    );
    out
}

/// One key's lines in config/lock.toml: what it does, its variables, what is accepted, and
/// its default as a commented-out line to uncomment, or in words.
fn lock_toml_entry(out: &mut String, key: &str, spec: &KeySpec) {
    out.push_str(&format!(
        "\n# {}\n# Env: {}. Accepted: {}.\n",
        spec.doc,
        env_list(spec, false),
        spec.accepted()
    ));
    match (spec.default, spec.accepts) {
        (KeyDefault::Value(v), Accepts::Bool | Accepts::Count { .. }) => {
            out.push_str(&format!("# {key} = {v}\n"))
        }
        (KeyDefault::Value(v), _) => out.push_str(&format!("# {key} = {v:?}\n")),
        (KeyDefault::Described(text), _) => {
            out.push_str(&format!("# {key}: defaults to {text}.\n"))
        }
    }
}

const LOCK_TOML_HEADER: &str = "\
# platform-lock: every configuration key with its default (generated from \
lock_starter::config::KEYS by crates/lock-starter/tests/it/config.rs).
#
# A key with a built-in value is a commented-out line with that value: uncomment it to change it;
# the others (no value, or one computed at start-up) say their default in words. Sources, later
# wins: built-in defaults, then TOML files (in the order the service passes them), then
# environment variables. Full reference: docs/configuration.md.
#
# Durations: a number with the unit ms, s, m (minutes) or h, combined as in 1m30s, or a bare 0;
# other units (500us, 1M) are rejected. Quoted numbers (min-replicas = \"1\") are read as numbers.
# An unknown or misspelt key under telco.platform.lock is a warning naming the key it probably
# meant, never a start-up failure; a bad value always stops start-up. There is deliberately no
# lease-time key: the lease is chosen per call (Lease::Watchdog or Lease::Fixed(duration)).
# The spring.data.redis keys give the address only when telco.platform.lock.redis.address is not
# set; url together with host or port in the same source stops start-up.
";

fn check_generated(path: &str, expected: &str, whole: bool) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    let text = std::fs::read_to_string(&path).unwrap();
    let (start, end) = if whole {
        (0, text.len())
    } else {
        let start = text.find("| key |").expect("the key table");
        (
            start,
            start
                + text[start..]
                    .find("\n\n")
                    .map_or(text.len() - start, |e| e + 1),
        )
    };
    if text[start..end] != *expected {
        if std::env::var_os("UPDATE_CONFIG_DOCS").is_some() {
            std::fs::write(
                &path,
                format!("{}{expected}{}", &text[..start], &text[end..]),
            )
            .unwrap();
        } else {
            panic!(
                "{} does not follow KEYS; run with UPDATE_CONFIG_DOCS=1:\n{expected}",
                path.display()
            );
        }
    }
}

#[test]
fn the_example_files_load_without_warnings() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config");
    for (file, topology) in [("sentinel.toml", "Sentinel"), ("cluster.toml", "Cluster")] {
        let sources = ConfigSources::new()
            .toml_file(root.join(file))
            .env_from([POD]);
        let settings = LockSettings::load(&sources).unwrap();
        assert!(
            settings.warnings().is_empty(),
            "{file}: {:?}",
            settings.warnings()
        );
        assert!(format!("{:?}", settings.redis.address.topology()).starts_with(topology));
    }
}

#[test]
fn the_docs_table_and_lock_toml_follow_the_table() {
    check_generated("docs/configuration.md", &doc_table(), false);
    check_generated("config/lock.toml", &lock_toml(), true);
    let (settings, _) = from_toml(&lock_toml(), &[]);
    let settings = settings.unwrap();
    assert!(settings.warnings().is_empty());
    assert!(
        KEYS.iter()
            .all(|spec| settings.source_of(spec.name).unwrap().is_default())
    );
}

/// The messages docs/configuration.md quotes, produced here.
fn quoted_messages() -> Vec<String> {
    use lock_starter::figment::{
        Figment,
        providers::{Format, Toml},
    };
    let error = |pairs: &[(&str, &str)]| from_env(pairs).unwrap_err().to_string();
    let toml = |text: &str| {
        LockSettings::load(&ConfigSources::from_figment(Figment::from(Toml::string(
            text,
        ))))
    };
    let warnings = |pairs: &[(&str, &str)]| from_env(pairs).unwrap().warnings().to_vec();
    let mut out = vec![
        error(&[("TELCO_PLATFORM_LOCK_WAIT_TIME", "5 parsecs")]),
        error(&[("TELCO_PLATFORM_LOCK_WAITTIME", "5")]),
        error(&[("TELCO_PLATFORM_LOCK_WAIT_TIME", "500us")]),
        error(&[("TELCO_PLATFORM_LOCK_WAIT_TIME", "1M")]),
        error(&[("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", "0")]),
        error(&[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "localhost:6379")]),
        error(&[(
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis://:s3cret@redis.internal:99999",
        )]),
        error(&[(
            "TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE",
            "/etc/ssl/certs/redis-ca.pem",
        )]),
        error(&[("TELCO_PLATFORM_LOCK_KEY_PREFIX", "lock{")]),
        error(&[
            ("TELCO_PLATFORM_LOCK_WAIT_TIME", "2s"),
            ("TELCO_PLATFORM_LOCK_WAITTIME", "3s"),
        ]),
        error(&[
            ("SPRING_DATA_REDIS_URL", "redis://cache:6379"),
            ("SPRING_DATA_REDIS_HOST", "redis.internal"),
        ]),
        toml("[telco.platform.lock]\nredis = \"redis://cache:6379\"\n")
            .unwrap_err()
            .to_string(),
    ];
    out.extend(warnings(&[
        ("TELCO_PLATFORM_LOCK_WAIT_TME", "5s"),
        ("TELCO_PLATFROM_LOCK_WAIT_TIME", "5s"),
    ]));
    out.extend(warnings(&[
        ("SPRING_DATA_REDIS_HOST", "cache"),
        ("SPRING_DATA_REDIS_TIMEOUT", "2s"),
    ]));
    out.extend(toml("[telco.platform.lock]\nwait-tme = \"5s\"\nlease-time = \"30s\"\n[telco.platform.lok]\nkey-prefix = \"x\"\n").unwrap().warnings().to_vec());
    out
}

#[test]
fn the_messages_the_docs_quote_are_real() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let docs = std::fs::read_to_string(path).unwrap();
    let missing: Vec<String> = quoted_messages()
        .into_iter()
        .filter(|m| !docs.contains(&format!("```text\n{m}\n```")))
        .collect();
    assert!(
        missing.is_empty(),
        "not quoted in docs/configuration.md:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_consumer_figment_keeps_its_selected_profile() {
    use lock_starter::figment::{
        Figment,
        providers::{Format, Toml},
    };
    let toml = "[default.telco.platform.lock]\nwait-time = \"1s\"\n[prod.telco.platform.lock]\nwait-time = \"2s\"\n";
    let figment = Figment::from(Toml::string(toml).nested()).select("prod");
    let settings = LockSettings::from_figment(&figment).unwrap();
    assert_eq!(settings.wait_time, Duration::from_secs(2));
    assert_eq!(settings.watchdog_timeout, Duration::from_secs(30));
}

/// The table's defaults of the toolkit keys are lock-core's own defaults (declared in both, so
/// checked here): a drift would make the starter and a hand-wired `Idempotency` disagree.
#[test]
fn the_toolkit_defaults_are_lock_cores() {
    let settings = from_env(&[]).unwrap();
    assert_eq!(
        settings.idempotency_settings(),
        lock_starter::idempotency::IdempotencySettings::default()
    );
    assert_eq!(
        settings.branches.wait_time,
        lock_core::branches::DEFAULT_BRANCH_WAIT
    );
}

/// A variable the lock reads whose value is not UTF-8 stops the load, naming the variable (a
/// lossy reading would turn a password into another); variables it does not read, with its
/// prefixes or not, are no concern.
#[test]
fn a_variable_that_is_not_utf8_is_an_error_naming_it() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    let load_with = |name: &str| {
        let output =
            lock_testkit::test_child(module_path!(), "child_loads_the_process_environment")
                .env(name, OsStr::from_bytes(b"s3cr\xffet"))
                .output()
                .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let refused = load_with("TELCO_PLATFORM_LOCK_KEY_PREFIX");
    assert!(
        refused.contains("LOAD: environment variable TELCO_PLATFORM_LOCK_KEY_PREFIX holds bytes that are not UTF-8"),
        "{refused}"
    );
    assert!(!refused.contains("s3cr"), "{refused}");
    let spring = load_with("SPRING_DATA_REDIS_PASSWORD");
    assert!(
        spring.contains("LOAD: environment variable SPRING_DATA_REDIS_PASSWORD"),
        "{spring}"
    );
    // With the prefixes but not read: warned of as unknown (or not read), never fatal.
    for unread in [
        "UNRELATED_NOT_UTF8",
        "TELCO_PLATFORM_LOCK_WAIT_TME",
        "SPRING_DATA_REDIS_CLIENT_NAME",
    ] {
        let loaded = load_with(unread);
        assert!(loaded.contains("LOAD: ok"), "{unread}: {loaded}");
    }
}

/// The body of a child process: loads the settings from the process environment.
#[test]
#[ignore = "the body of a child process a test starts"]
fn child_loads_the_process_environment() {
    match LockSettings::load(&ConfigSources::new()) {
        Ok(_) => println!("LOAD: ok"),
        Err(error) => println!("LOAD: {error}"),
    }
}

/// Sources that read no environment (a consumer's figment) warn of the lock's variables the
/// process has, by name, so that an override set there is not lost without a word.
#[test]
fn variables_a_figment_leaves_unread_are_a_warning() {
    let output = lock_testkit::test_child(module_path!(), "child_loads_a_figment_alone")
        .env("TELCO_PLATFORM_LOCK_WAIT_TIME", "9s")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "WARNING: environment variables TELCO_PLATFORM_LOCK_WAIT_TIME are set but not read"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("9s"), "{stdout}");
}

/// The body of a child process: loads the settings from an empty figment alone.
#[test]
#[ignore = "the body of a child process a test starts"]
fn child_loads_a_figment_alone() {
    let figment = lock_starter::figment::Figment::new();
    let settings = LockSettings::load(&ConfigSources::from_figment(figment)).unwrap();
    for warning in settings.warnings() {
        println!("WARNING: {warning}");
    }
}
