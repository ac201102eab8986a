//! Loading `telco.platform.lock.*`: defaults, TOML files, the environment (injected, so the tests
//! run in parallel), the Spring fallback, and the message of every rejected value.

use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use lock_starter::config::{
    ConfigError, ConfigSources, KEYS, LockSettings, Origin, RedisAddress, SPRING_KEYS, Topology,
    ValueKind,
};

/// A temporary directory for TOML files.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Messages as they would read with the file under `config/`, for the documentation.
    fn as_config_dir(&self, message: &str) -> String {
        message.replace(&self.dir.path().display().to_string(), "config")
    }
}

fn env(vars: &[(&str, &str)]) -> ConfigSources {
    ConfigSources::new().env_from(vars.iter().copied())
}

fn load(sources: &ConfigSources) -> LockSettings {
    LockSettings::load(sources).unwrap_or_else(|e| panic!("{e}"))
}

fn load_err(sources: &ConfigSources) -> ConfigError {
    match LockSettings::load(sources) {
        Ok(settings) => panic!("expected an error, loaded {settings:?}"),
        Err(e) => e,
    }
}

fn toml_origin(path: &Path) -> String {
    format!("TOML file {}", path.display())
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            message.contains(part),
            "message does not mention {part:?}:\n{message}"
        );
    }
}

#[test]
fn defaults_apply_when_nothing_is_set() {
    let settings = load(&env(&[
        ("POD_NAME", "billing-7f9c"),
        ("HOSTNAME", "node-3"),
    ]));
    assert!(settings.enabled);
    assert_eq!(
        settings.redis.address.expose(),
        "redis://localhost:6379",
        "default address"
    );
    assert_eq!(settings.redis.command_timeout, Duration::from_secs(2));
    assert_eq!(settings.wait_time, Duration::from_secs(5));
    assert_eq!(settings.watchdog_timeout, Duration::from_secs(30));
    assert_eq!(settings.key_prefix, "lock:");
    assert_eq!(settings.instance_id, "billing-7f9c");
    for spec in KEYS.iter().filter(|s| !s.name.ends_with("instance-id")) {
        assert_eq!(
            settings.source_of(spec.name),
            Some(&Origin::Default),
            "{}",
            spec.name
        );
    }
    assert_eq!(
        settings.source_of("instance-id"),
        Some(&Origin::DefaultFromEnv("POD_NAME".into()))
    );
    assert_eq!(
        settings.describe("instance-id").unwrap(),
        "telco.platform.lock.instance-id = \"billing-7f9c\" from default, environment variable POD_NAME"
    );
}

#[test]
fn instance_id_falls_back_to_hostname_then_the_host_name() {
    let settings = load(&env(&[("POD_NAME", ""), ("HOSTNAME", "node-3")]));
    assert_eq!(settings.instance_id, "node-3");
    assert_eq!(
        settings.source_of("instance-id"),
        Some(&Origin::DefaultFromEnv("HOSTNAME".into()))
    );

    let settings = load(&env(&[]));
    assert!(!settings.instance_id.is_empty());
    assert_eq!(
        settings.source_of("instance-id"),
        Some(&Origin::DefaultFromHostname)
    );
}

/// Every key, `{ca}` standing for the path of a CA file.
const FULL_TOML: &str = r#"
[telco.platform.lock]
enabled = false
wait-time = "250ms"
watchdog-timeout = "1m30s"
min-replicas = 1
replica-sync-timeout = "250ms"
fair-waiter-timeout = "2s"
key-prefix = "locks/"
instance-id = "billing-7f9c"

[telco.platform.lock.redis]
address = "rediss://redis.internal:6380/2"
command-timeout = "500ms"
tls.ca-file = "{ca}"
"#;

/// A PEM file as the CA-file check wants it (the certificate itself is not parsed here).
const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

#[test]
fn toml_file_sets_every_key() {
    let files = Files::new();
    let ca = files.write("ca.pem", CA_PEM);
    let path = files.write(
        "app.toml",
        &FULL_TOML.replace("{ca}", &ca.display().to_string()),
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert!(!settings.enabled);
    assert_eq!(
        settings.redis.address.expose(),
        "rediss://redis.internal:6380/2"
    );
    assert!(settings.redis.address.tls());
    assert_eq!(settings.redis.tls_ca_file.as_deref(), Some(ca.as_path()));
    assert_eq!(settings.redis.address.database(), 2);
    assert_eq!(settings.redis.command_timeout, Duration::from_millis(500));
    assert_eq!(settings.wait_time, Duration::from_millis(250));
    assert_eq!(settings.watchdog_timeout, Duration::from_secs(90));
    assert_eq!(settings.min_replicas, 1);
    assert_eq!(settings.replica_sync_timeout, Duration::from_millis(250));
    assert_eq!(settings.fair_waiter_timeout, Duration::from_secs(2));
    assert_eq!(settings.key_prefix, "locks/");
    assert_eq!(settings.instance_id, "billing-7f9c");
    for spec in KEYS {
        let origin = settings.source_of(spec.name).unwrap();
        assert_eq!(origin.to_string(), toml_origin(&path), "{}", spec.name);
    }
}

#[test]
fn later_files_win_and_other_sections_are_ignored() {
    let files = Files::new();
    let first = files.write(
        "base.toml",
        r#"
        [server]
        port = 8080
        [spring.datasource]
        url = "jdbc:postgresql://db/app"
        [spring.data.redis]
        password = "ignored-by-the-lock"
        [telco.platform.lock]
        wait-time = "1s"
        watchdog-timeout = "10s"
        [telco.platform.other]
        anything = true
        "#,
    );
    let second = files.write(
        "override.toml",
        "[telco.platform.lock]\nwait-time = \"2s\"\n",
    );
    let settings = load(&env(&[]).toml_file(&first).toml_file(&second));
    assert_eq!(settings.wait_time, Duration::from_secs(2));
    assert_eq!(settings.watchdog_timeout, Duration::from_secs(10));
    assert_eq!(
        settings.source_of("wait-time").unwrap().to_string(),
        toml_origin(&second)
    );
    assert_eq!(
        settings.source_of("watchdog-timeout").unwrap().to_string(),
        toml_origin(&first)
    );
}

#[test]
fn environment_overrides_toml() {
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[telco.platform.lock]\nwait-time = \"5s\"\nkey-prefix = \"app:\"\n",
    );
    let sources = env(&[])
        .toml_file(&path)
        .env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "250ms")]);
    let settings = load(&sources);
    assert_eq!(settings.wait_time, Duration::from_millis(250));
    assert_eq!(
        settings.source_of("wait-time"),
        Some(&Origin::Env("TELCO_PLATFORM_LOCK_WAIT_TIME".into()))
    );
    assert_eq!(settings.key_prefix, "app:");
    assert_eq!(
        settings.source_of("key-prefix").unwrap().to_string(),
        toml_origin(&path)
    );
}

/// A valid value of every key, as the environment would give it (`ca` for a CA file).
fn sample(kind: ValueKind, name: &str, ca: &str) -> String {
    match (kind, name) {
        (ValueKind::Bool, _) => "false",
        (ValueKind::RedisUrl, _) => "redis://env-redis:7000",
        (ValueKind::Duration, _) => "1500ms",
        (ValueKind::Path, _) => ca,
        (ValueKind::Count, _) => "2",
        (_, n) if n.ends_with("key-prefix") => "env:",
        (_, n) if n.ends_with("host") => "env-host",
        (_, n) if n.ends_with("port") => "7001",
        _ => "env-instance",
    }
    .to_owned()
}

#[test]
fn every_environment_form_of_every_key_works() {
    let files = Files::new();
    let ca = files.write("ca.pem", CA_PEM).display().to_string();
    for spec in KEYS {
        let names = spec.env_names();
        if spec.name.contains('-') {
            assert_eq!(names.len(), 2, "{}: strict and relaxed forms", spec.name);
        }
        for name in names {
            let value = sample(spec.kind, spec.name, &ca);
            let value = value.as_str();
            // A CA file needs a TLS address.
            let tls = (
                "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
                "rediss://env-redis:7000",
            );
            let mut vars = vec![(name.as_str(), value)];
            if spec.kind == ValueKind::Path {
                vars.push(tls);
            }
            let settings = load(&env(&vars));
            let shown = settings.describe(spec.name).unwrap();
            assert!(
                shown.ends_with(&format!("from environment variable {name}")),
                "{shown}"
            );
            let expected = match spec.kind {
                ValueKind::Duration => "1s 500ms".to_owned(),
                ValueKind::Text | ValueKind::Path => format!("{value:?}"),
                _ => value.to_owned(),
            };
            assert!(shown.contains(&format!("= {expected} ")), "{shown}");
        }
    }
    // The relaxed forms named in the brief, explicitly.
    let settings = load(&env(&[
        ("TELCO_PLATFORM_LOCK_WAITTIME", "1s"),
        ("TELCO_PLATFORM_LOCK_WATCHDOGTIMEOUT", "20s"),
        ("TELCO_PLATFORM_LOCK_REDIS_COMMANDTIMEOUT", "3s"),
        ("TELCO_PLATFORM_LOCK_KEYPREFIX", "k:"),
        ("TELCO_PLATFORM_LOCK_INSTANCEID", "pod-a"),
        ("TELCO_PLATFORM_LOCK_ENABLED", "FALSE"),
        ("TELCO_PLATFORM_LOCK_REDIS_TLS_CAFILE", &ca),
        ("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "rediss://h:6380"),
    ]));
    assert_eq!(settings.wait_time, Duration::from_secs(1));
    assert_eq!(settings.watchdog_timeout, Duration::from_secs(20));
    assert_eq!(settings.redis.command_timeout, Duration::from_secs(3));
    assert_eq!(settings.key_prefix, "k:");
    assert_eq!(settings.instance_id, "pod-a");
    assert!(!settings.enabled);
    assert_eq!(
        settings
            .redis
            .tls_ca_file
            .as_ref()
            .map(|p| p.display().to_string()),
        Some(ca)
    );
}

#[test]
fn both_forms_with_one_value_are_fine_and_with_two_are_an_error() {
    let same = load(&env(&[
        ("TELCO_PLATFORM_LOCK_WAIT_TIME", "2s"),
        ("TELCO_PLATFORM_LOCK_WAITTIME", "2s"),
    ]));
    assert_eq!(same.wait_time, Duration::from_secs(2));

    let error = load_err(&env(&[
        ("TELCO_PLATFORM_LOCK_WAITTIME", "3s"),
        ("TELCO_PLATFORM_LOCK_WAIT_TIME", "2s"),
    ]));
    assert_eq!(
        error.to_string(),
        "telco.platform.lock.wait-time is set twice in the environment with different values: \
         TELCO_PLATFORM_LOCK_WAIT_TIME = \"2s\" and TELCO_PLATFORM_LOCK_WAITTIME = \"3s\"; \
         accepted: set only one of them (both name the same key)"
    );
    assert_eq!(error.key(), Some("telco.platform.lock.wait-time"));
}

#[test]
fn disabled_says_where_it_was_switched_off() {
    let settings = load(&env(&[("TELCO_PLATFORM_LOCK_ENABLED", "false")]));
    assert!(!settings.enabled);
    assert_eq!(
        settings.describe("enabled").unwrap(),
        "telco.platform.lock.enabled = false from environment variable TELCO_PLATFORM_LOCK_ENABLED"
    );
    assert_eq!(
        settings.source_of("telco.platform.lock.enabled"),
        settings.source_of("enabled")
    );
    assert_eq!(settings.source_of("lease-time"), None);
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());

    let files = Files::new();
    let path = files.write("app.toml", "[telco.platform.lock]\nenabled = false\n");
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(
        settings.describe("enabled").unwrap(),
        format!(
            "telco.platform.lock.enabled = false from {}",
            toml_origin(&path)
        )
    );
}

#[test]
fn spring_host_and_port_are_the_fallback_address() {
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[spring.data.redis]\nhost = \"redis.internal\"\nport = 6380\n",
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(
        settings.redis.address.expose(),
        "redis://redis.internal:6380"
    );
    assert_eq!(
        settings.source_of("redis.address").unwrap().to_string(),
        format!(
            "spring.data.redis.host from {0} and spring.data.redis.port from {0}",
            toml_origin(&path)
        )
    );

    // Host alone: port 6379. Port alone: host localhost. From the environment as well.
    let host_only = load(&env(&[("SPRING_DATA_REDIS_HOST", "10.0.0.7")]));
    assert_eq!(host_only.redis.address.expose(), "redis://10.0.0.7:6379");
    assert_eq!(
        host_only.source_of("redis.address"),
        Some(&Origin::SpringFallback {
            keys: vec![
                (
                    "spring.data.redis.host".into(),
                    Origin::Env("SPRING_DATA_REDIS_HOST".into())
                ),
                ("spring.data.redis.port".into(), Origin::Default),
            ],
        })
    );
    let port_only = load(&env(&[("SPRING_DATA_REDIS_PORT", "6390")]));
    assert_eq!(port_only.redis.address.expose(), "redis://localhost:6390");
    let ipv6 = load(&env(&[("SPRING_DATA_REDIS_HOST", "::1")]));
    assert_eq!(ipv6.redis.address.expose(), "redis://[::1]:6379");
}

#[test]
fn the_lock_address_wins_over_spring() {
    let files = Files::new();
    let path = files.write(
        "app.toml",
        r#"
        [telco.platform.lock.redis]
        address = "redis://lock-redis:6379"
        [spring.data.redis]
        host = "cache-redis"
        port = "not even a port"
        "#,
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(settings.redis.address.expose(), "redis://lock-redis:6379");
    assert_eq!(
        settings.source_of("redis.address").unwrap().to_string(),
        toml_origin(&path)
    );
    // The environment's Spring host does not beat the file's lock address either.
    let settings = load(
        &env(&[])
            .toml_file(&path)
            .env_from([("SPRING_DATA_REDIS_HOST", "env-redis")]),
    );
    assert_eq!(settings.redis.address.expose(), "redis://lock-redis:6379");
}

/// One rejected configuration and what its message must name.
struct Case {
    what: &'static str,
    sources: ConfigSources,
    key: String,
    value: &'static str,
    origin: String,
    accepted: &'static str,
    problem: &'static str,
}

fn env_case(
    what: &'static str,
    var: &'static str,
    value: &'static str,
    key: &str,
    shown: &'static str,
    accepted: &'static str,
    problem: &'static str,
) -> Case {
    Case {
        what,
        sources: env(&[(var, value)]),
        key: key.to_owned(),
        value: shown,
        origin: format!("environment variable {var}"),
        accepted,
        problem,
    }
}

const DURATION_FORMS: &str = "accepted: a duration with a unit (ms, s, m or h), such as ";

/// What the address accepts, as every message about it ends.
const ADDRESS_ACCEPTED: &str = "redis://[user[:password]@]host[:port][/db] (one server); \
     redis-sentinel://[user[:password]@]host[:port][/db]?sentinelServiceName=name\
     [&node=host:port…][&sentinelUsername=user][&sentinelPassword=password] (Sentinel, port \
     26379 when omitted); redis-cluster://[user[:password]@]host[:port][?node=host:port…] \
     (Cluster, database 0 only); rediss://, rediss-sentinel:// and rediss-cluster:// for TLS; \
     ports 1 to 65535, databases 0 to 255";

#[test]
fn every_rejected_value_names_key_value_source_and_what_is_accepted() {
    let files = Files::new();
    let bare = files.write("bare.toml", "[telco.platform.lock]\nwait-time = 5\n");
    let brace = files.write(
        "brace.toml",
        "[telco.platform.lock]\nkey-prefix = \"lock{\"\n",
    );
    let not_table = files.write(
        "not-table.toml",
        "[telco.platform.lock]\nredis = \"redis://h:6379\"\n",
    );
    let bad_bool = files.write("bool.toml", "[telco.platform.lock]\nenabled = \"yes\"\n");
    let port = files.write("port.toml", "[spring.data.redis]\nport = 70000\n");
    let float = files.write("float.toml", "[telco.platform.lock]\nwait-time = 1.5\n");
    let number_id = files.write("id.toml", "[telco.platform.lock]\ninstance-id = 42\n");
    let lock_number = files.write("lock.toml", "[telco.platform]\nlock = 5\n");
    let tab = files.write(
        "tab.toml",
        "[telco.platform.lock]\nkey-prefix = \"a\\tb\"\n",
    );
    let toml_case = |what, path: &PathBuf, key: &str, value, accepted, problem| Case {
        what,
        sources: env(&[]).toml_file(path),
        key: key.to_owned(),
        value,
        origin: toml_origin(path),
        accepted,
        problem,
    };
    let cases = vec![
        env_case(
            "not a duration",
            "TELCO_PLATFORM_LOCK_WAIT_TIME",
            "5 parsecs",
            "telco.platform.lock.wait-time",
            "\"5 parsecs\"",
            "from 0 ms to 1 h",
            "not a duration (unknown unit \"parsecs\")",
        ),
        env_case(
            "bare number from the environment",
            "TELCO_PLATFORM_LOCK_WATCHDOGTIMEOUT",
            "5",
            "telco.platform.lock.watchdog-timeout",
            "\"5\"",
            DURATION_FORMS,
            "a unit is required (ms, s, m or h)",
        ),
        toml_case(
            "bare number from TOML",
            &bare,
            "telco.platform.lock.wait-time",
            "5",
            DURATION_FORMS,
            "a unit is required (ms, s, m or h)",
        ),
        env_case(
            "zero watchdog timeout",
            "TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT",
            "0s",
            "telco.platform.lock.watchdog-timeout",
            "\"0s\"",
            "from 1 s to 1 h",
            "zero is not accepted",
        ),
        env_case(
            "watchdog timeout too short",
            "TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT",
            "500ms",
            "telco.platform.lock.watchdog-timeout",
            "\"500ms\"",
            "from 1 s to 1 h",
            "shorter than the minimum",
        ),
        env_case(
            "wait over an hour",
            "TELCO_PLATFORM_LOCK_WAIT_TIME",
            "61m",
            "telco.platform.lock.wait-time",
            "\"61m\"",
            "from 0 ms to 1 h",
            "longer than the maximum",
        ),
        env_case(
            "negative wait",
            "TELCO_PLATFORM_LOCK_WAIT_TIME",
            "-5s",
            "telco.platform.lock.wait-time",
            "\"-5s\"",
            "from 0 ms to 1 h",
            "negative durations are not accepted",
        ),
        env_case(
            "command timeout zero",
            "TELCO_PLATFORM_LOCK_REDIS_COMMAND_TIMEOUT",
            "0ms",
            "telco.platform.lock.redis.command-timeout",
            "\"0ms\"",
            "from 10 ms to 60 s",
            "zero is not accepted",
        ),
        env_case(
            "command timeout too long",
            "TELCO_PLATFORM_LOCK_REDIS_COMMANDTIMEOUT",
            "2m",
            "telco.platform.lock.redis.command-timeout",
            "\"2m\"",
            "from 10 ms to 60 s",
            "longer than the maximum",
        ),
        env_case(
            "port out of range",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis://redis.internal:99999",
            "telco.platform.lock.redis.address",
            "\"redis://redis.internal:99999\"",
            "accepted: redis://[user[:password]@]host[:port][/db]",
            "the port is not a number from 1 to 65535",
        ),
        env_case(
            "port out of range, with a password",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis://:pw@host:99999",
            "telco.platform.lock.redis.address",
            "\"redis://:***@host:99999\"",
            "accepted: redis://[user[:password]@]host[:port][/db]",
            "the port is not a number from 1 to 65535",
        ),
        env_case(
            "empty address",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "",
            "telco.platform.lock.redis.address",
            "\"\"",
            "accepted: redis://[user[:password]@]host[:port][/db]",
            "empty; a Redis URL is required",
        ),
        env_case(
            "a host without scheme",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis.internal",
            "telco.platform.lock.redis.address",
            "\"redis.internal\"",
            "accepted: redis://[user[:password]@]host[:port][/db]",
            "not a Redis URL (no scheme://)",
        ),
        env_case(
            "spring URL: sentinel without its service name",
            "SPRING_DATA_REDIS_URL",
            "rediss-sentinel://app:pw@s1:26379",
            "spring.data.redis.url",
            "\"rediss-sentinel://app:***@s1:26379\"",
            "redis-sentinel://[user[:password]@]host[:port][/db]?sentinelServiceName=name",
            "sentinelServiceName is missing",
        ),
        env_case(
            "empty spring URL",
            "SPRING_DATA_REDIS_URL",
            " ",
            "spring.data.redis.url",
            "\" \"",
            "rediss://, rediss-sentinel:// and rediss-cluster:// for TLS",
            "empty; a Redis URL is required",
        ),
        env_case(
            "no scheme",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "localhost:6379",
            "telco.platform.lock.redis.address",
            "\"localhost:6379\"",
            "accepted: redis://[user[:password]@]host[:port][/db]",
            "not a Redis URL",
        ),
        env_case(
            "another client's scheme",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "valkeys://redis.internal:6380",
            "telco.platform.lock.redis.address",
            "\"valkeys://redis.internal:6380\"",
            "accepted: redis://[user[:password]@]host[:port][/db]",
            "the scheme valkeys:// is not a Redis scheme",
        ),
        env_case(
            "sentinel without its service name",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis-sentinel://s1:26379",
            "telco.platform.lock.redis.address",
            "\"redis-sentinel://s1:26379\"",
            "redis-cluster://",
            "sentinelServiceName is missing",
        ),
        env_case(
            "foreign scheme",
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "http://redis.internal",
            "telco.platform.lock.redis.address",
            "\"http://redis.internal\"",
            "accepted: redis://[user[:password]@]host[:port][/db]",
            "the scheme http:// is not a Redis scheme",
        ),
        toml_case(
            "key prefix with a brace",
            &brace,
            "telco.platform.lock.key-prefix",
            "\"lock{\"",
            "1 to 64 bytes without braces ({ }), whitespace or control characters",
            "it contains a brace",
        ),
        env_case(
            "key prefix with a space",
            "TELCO_PLATFORM_LOCK_KEY_PREFIX",
            "my lock:",
            "telco.platform.lock.key-prefix",
            "\"my lock:\"",
            "1 to 64 bytes",
            "it contains whitespace",
        ),
        env_case(
            "empty instance id",
            "TELCO_PLATFORM_LOCK_INSTANCE_ID",
            "",
            "telco.platform.lock.instance-id",
            "\"\"",
            "a host or pod name, 1 to 128 bytes",
            "must not be empty",
        ),
        toml_case(
            "not a boolean",
            &bad_bool,
            "telco.platform.lock.enabled",
            "\"yes\"",
            "accepted: true or false",
            "not a boolean",
        ),
        toml_case(
            "redis as a string",
            &not_table,
            "telco.platform.lock.redis",
            "\"redis://h:6379\"",
            "a table [telco.platform.lock.redis] with the keys address, command-timeout, \
             tls.ca-file",
            "not a table",
        ),
        toml_case(
            "spring port out of range",
            &port,
            "spring.data.redis.port",
            "70000",
            "a port number from 1 to 65535",
            "not a port number",
        ),
        toml_case(
            "a float for a duration",
            &float,
            "telco.platform.lock.wait-time",
            "1.5",
            DURATION_FORMS,
            "a unit is required (ms, s, m or h)",
        ),
        toml_case(
            "a number for a string",
            &number_id,
            "telco.platform.lock.instance-id",
            "42",
            "a host or pod name",
            "not a string (quote it)",
        ),
        toml_case(
            "the section itself not a table",
            &lock_number,
            "telco.platform.lock",
            "5",
            "a table [telco.platform.lock] with the keys enabled, redis.address,",
            "not a table",
        ),
        toml_case(
            "a control character, shown escaped",
            &tab,
            "telco.platform.lock.key-prefix",
            "\"a\\tb\"",
            "1 to 64 bytes",
            "it contains a control character",
        ),
        env_case(
            "spring host with a slash",
            "SPRING_DATA_REDIS_HOST",
            "redis/0",
            "spring.data.redis.host",
            "\"redis/0\"",
            "a host name or IP address",
            "not a host name or IP address",
        ),
    ];
    for case in cases {
        let error = load_err(&case.sources);
        let message = error.to_string();
        assert_mentions(
            &message,
            &[
                &format!("{} = {} (from {}): ", case.key, case.value, case.origin),
                case.accepted,
                case.problem,
            ],
        );
        assert!(message.contains("accepted: "), "{}: {message}", case.what);
        assert_eq!(error.key(), Some(case.key.as_str()), "{}", case.what);
        assert_eq!(
            error.origin().map(ToString::to_string),
            Some(case.origin.clone()),
            "{}",
            case.what
        );
    }
}

#[test]
fn unknown_keys_in_toml_are_rejected_with_a_suggestion() {
    let files = Files::new();
    let path = files.write("app.toml", "[telco.platform.lock]\nwait-tme = \"5s\"\n");
    let error = load_err(&env(&[]).toml_file(&path));
    let message = error.to_string();
    assert_mentions(
        &message,
        &[
            "unknown key telco.platform.lock.wait-tme = \"5s\"",
            &format!("(from {})", toml_origin(&path)),
            "did you mean telco.platform.lock.wait-time?",
            "Known keys: telco.platform.lock.{enabled, redis.address, redis.command-timeout, \
             redis.tls.ca-file, wait-time, watchdog-timeout, min-replicas, \
             replica-sync-timeout, fair-waiter-timeout, key-prefix, instance-id}",
        ],
    );
    assert!(matches!(error, ConfigError::UnknownKey { .. }));

    // Nested sections are checked too.
    let nested = files.write(
        "nested.toml",
        "[telco.platform.lock.redis]\naddres = \"redis://h\"\n",
    );
    assert_mentions(
        &error_message(&env(&[]).toml_file(&nested)),
        &[
            "unknown key telco.platform.lock.redis.addres",
            "did you mean telco.platform.lock.redis.address?",
        ],
    );
    // A key nothing resembles gets the list only.
    let stranger = files.write("stranger.toml", "[telco.platform.lock]\ncolour = \"red\"\n");
    let message = error_message(&env(&[]).toml_file(&stranger));
    assert_mentions(
        &message,
        &[
            "unknown key telco.platform.lock.colour = \"red\" (from",
            "). Known keys: ",
        ],
    );
    assert!(!message.contains("did you mean"), "{message}");
    // A whole unknown table is shown by its keys only.
    let table = files.write(
        "table.toml",
        "[telco.platform.lock.retry]\nattempts = 3\nsecret = \"x\"\n",
    );
    assert_mentions(
        &error_message(&env(&[]).toml_file(&table)),
        &["unknown key telco.platform.lock.retry = a table {attempts, secret} (from TOML file"],
    );
}

fn error_message(sources: &ConfigSources) -> String {
    load_err(sources).to_string()
}

#[test]
fn unknown_environment_variables_are_rejected_with_a_suggestion() {
    let error = load_err(&env(&[("TELCO_PLATFORM_LOCK_WAIT_TME", "5s")]));
    assert_mentions(
        &error.to_string(),
        &[
            "unknown environment variable TELCO_PLATFORM_LOCK_WAIT_TME = \"5s\"",
            "did you mean TELCO_PLATFORM_LOCK_WAIT_TIME?",
            "Known variables: TELCO_PLATFORM_LOCK_ENABLED, ",
            "SPRING_DATA_REDIS_PORT",
        ],
    );
    assert_eq!(error.key(), Some("TELCO_PLATFORM_LOCK_WAIT_TME"));
    // Other prefixes are none of the lock's business.
    load(&env(&[
        ("TELCO_PLATFORM_BILLING_X", "1"),
        ("SPRING_DATA_REDIS_PASSWORD", "pw"),
    ]));
}

#[test]
fn lease_time_is_unknown_and_says_leases_are_chosen_per_call() {
    let files = Files::new();
    let path = files.write("app.toml", "[telco.platform.lock]\nlease-time = \"30s\"\n");
    let error = load_err(&env(&[]).toml_file(&path));
    assert_mentions(
        &error.to_string(),
        &[
            "unknown key telco.platform.lock.lease-time = \"30s\"",
            &toml_origin(&path),
            "there is deliberately no lease-time key",
            "Lease::Watchdog",
            "Lease::Fixed(duration)",
            "Known keys:",
        ],
    );
    for var in [
        "TELCO_PLATFORM_LOCK_LEASE_TIME",
        "TELCO_PLATFORM_LOCK_LEASETIME",
    ] {
        assert_mentions(
            &error_message(&env(&[(var, "30s")])),
            &[var, "\"30s\"", "Lease::Watchdog", "Lease::Fixed(duration)"],
        );
    }
}

#[test]
fn a_missing_explicit_file_is_an_error_naming_it() {
    let error = load_err(&env(&[]).toml_file("config/does-not-exist.toml"));
    assert_eq!(
        error.to_string(),
        "TOML file config/does-not-exist.toml does not exist; it was given as a configuration \
         source, so create it or stop passing it (accepted: a path to an existing TOML file)"
    );
    assert!(matches!(error, ConfigError::MissingFile { .. }));
}

#[test]
fn a_broken_file_is_an_error_naming_it_without_quoting_its_lines() {
    let files = Files::new();
    let path = files.write(
        "broken.toml",
        "[telco.platform.lock.redis]\naddress = \"redis://app:hunter2@h\n",
    );
    let message = error_message(&env(&[]).toml_file(&path));
    assert_mentions(
        &message,
        &[&format!(
            "TOML file {} is not valid TOML: TOML parse error at line 2",
            path.display()
        )],
    );
    assert!(!message.contains("hunter2"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");
}

const SECRET: &str = "hunter2";

fn assert_no_secret(text: &str) {
    assert!(!text.contains(SECRET), "password shown: {text}");
}

#[test]
fn passwords_never_appear_in_settings_or_errors() {
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[telco.platform.lock.redis]\naddress = \"redis://app:hunter2@redis.internal:6379/1\"\n",
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(
        settings.redis.address.expose(),
        "redis://app:hunter2@redis.internal:6379/1",
        "the client gets the password"
    );
    assert_eq!(
        settings.redis.address.to_string(),
        "redis://app:***@redis.internal:6379/1"
    );
    assert_no_secret(&format!("{settings:?}"));
    assert_no_secret(&format!("{:?}", settings.redis));
    assert_no_secret(&settings.describe("redis.address").unwrap());
    assert!(format!("{settings:?}").contains("redis://app:***@redis.internal:6379/1"));

    // Every way a bad address with a password can fail.
    for address in [
        "redis://app:hunter2@redis.internal:0",
        "redis://app:hunter2@redis.internal:99999",
        "redis://app:hunter2@redis.internal:port",
        "redis://app:hun/ter2@redis.internal",
        "rediss://app:hunter2@redis.internal?node=a:1",
        "app:hunter2@redis.internal:6379",
        "redis://app:hunter2@redis.internal/0?timeout=1",
        "redis-sentinel://app:hunter2@redis.internal",
        "rediss-sentinel://app:hunter2@redis.internal?sentinelServiceName=m\
         &sentinelPassword=hunter2&node=bad",
        "redis-sentinel://app:hunter2@redis.internal?sentinelServiceName=m&password=hunter2",
        "redis-cluster://app:hunter2@redis.internal/2",
        "rediss-cluster://app:hunter2@redis.internal?node=b:1&sentinelPassword=hunter2",
    ] {
        let secret_free = address.replace("hun/ter2", SECRET);
        let error = load_err(&env(&[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", address)]));
        for text in [error.to_string(), format!("{error:?}")] {
            assert_no_secret(&text);
            assert!(!text.contains("hun/ter2"), "{text}");
            assert!(
                text.contains("app:***@redis.internal"),
                "{secret_free}: {text}"
            );
        }
    }
    // A sentinelPassword alone: the parameter's value is hidden, in settings and in errors.
    let sentinel = load(&env(&[(
        "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
        "redis-sentinel://s1:26379?sentinelServiceName=m&sentinelPassword=hunter2",
    )]));
    assert_no_secret(&format!("{sentinel:?}"));
    assert_no_secret(&sentinel.describe("redis.address").unwrap());
    assert_eq!(
        sentinel.redis.address.to_string(),
        "redis-sentinel://s1:26379?sentinelServiceName=m&sentinelPassword=***"
    );
    for address in [
        "redis-sentinel://s1:26379?sentinelServiceName=m&sentinelPassword=hunter2&timeout=1",
        "redis-sentinel://s1:99999?sentinelServiceName=m&sentinelPassword=hunter2",
        "redis-sentinel://s1?sentinelPassword=hunter2",
        "redis://s1?sentinelPassword=hunter2",
    ] {
        let error = load_err(&env(&[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", address)]));
        for text in [error.to_string(), format!("{error:?}")] {
            assert_no_secret(&text);
            assert!(text.contains("sentinelPassword=***"), "{address}: {text}");
        }
    }
    // A misspelt address variable: its value is shown, redacted.
    let typo = load_err(&env(&[(
        "TELCO_PLATFORM_LOCK_REDIS_ADDRES",
        "redis://app:hunter2@redis.internal",
    )]));
    for text in [typo.to_string(), format!("{typo:?}")] {
        assert_no_secret(&text);
        assert_mentions(
            &text,
            &[
                "app:***@redis.internal",
                "TELCO_PLATFORM_LOCK_REDIS_ADDRESS?",
            ],
        );
    }
    // Unknown keys that look like secrets are not shown at all.
    let unknown = files.write(
        "unknown.toml",
        "[telco.platform.lock.redis]\npassword = \"hunter2\"\n",
    );
    let error = load_err(&env(&[]).toml_file(&unknown));
    for text in [error.to_string(), format!("{error:?}")] {
        assert_no_secret(&text);
        assert_mentions(
            &text,
            &[
                "telco.platform.lock.redis.password",
                "***",
                "redis://[user[:password]@]host",
            ],
        );
    }
    let error = load_err(&env(&[("TELCO_PLATFORM_LOCK_REDIS_PASSWORD", SECRET)]));
    assert_no_secret(&error.to_string());
    assert_no_secret(&format!("{error:?}"));
    // The sources' Debug shows no values.
    let sources = env(&[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://a:hunter2@h")]);
    assert_no_secret(&format!("{sources:?}"));
}

#[test]
fn a_consumer_figment_is_read_like_a_file() {
    let figment = Figment::new()
        .merge(Toml::string("[telco.platform.lock]\nwait-time = \"3s\"\n"))
        .merge(Serialized::default(
            "telco.platform.lock.key-prefix",
            "svc:",
        ));
    let settings = LockSettings::from_figment(&figment).unwrap();
    assert_eq!(settings.wait_time, Duration::from_secs(3));
    assert_eq!(settings.key_prefix, "svc:");
    assert_eq!(
        settings.source_of("wait-time").unwrap().to_string(),
        "TOML source string"
    );
    assert!(
        settings
            .source_of("key-prefix")
            .unwrap()
            .to_string()
            .contains("tests/config.rs"),
        "code location of the provider"
    );

    // Layered with the starter's own sources: the environment still wins.
    let sources = ConfigSources::from_figment(figment.clone())
        .env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "4s")]);
    assert_eq!(load(&sources).wait_time, Duration::from_secs(4));

    // Its unknown keys and bad values are rejected like a file's.
    let bad = figment.merge(Serialized::default("telco.platform.lock.wait-time", "5"));
    assert_mentions(
        &LockSettings::from_figment(&bad).unwrap_err().to_string(),
        &[
            "telco.platform.lock.wait-time = \"5\"",
            "a unit is required",
        ],
    );
    let unknown = Figment::from(Serialized::default("telco.platform.lock.lease-time", "5s"));
    assert_mentions(
        &LockSettings::from_figment(&unknown)
            .unwrap_err()
            .to_string(),
        &["unknown key telco.platform.lock.lease-time", "Lease::Fixed"],
    );
}

fn workspace_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

/// The keys whose line in `config/lock.toml` is an example rather than the default: uncommenting
/// them would change the address (or, for the CA file, need a TLS address and a real file).
const EXAMPLE_ONLY: &[&str] = &[
    "telco.platform.lock.redis.tls.ca-file",
    "spring.data.redis.username",
    "spring.data.redis.password",
    "spring.data.redis.sentinel.master",
    "spring.data.redis.sentinel.nodes",
    "spring.data.redis.cluster.nodes",
];

/// The commented-out `# key = value` lines of an example file: line index and full key name,
/// the section taken from the last `[section]` or `# [section]` line above.
fn commented_keys(text: &str) -> Vec<(usize, String)> {
    let mut section = String::new();
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bare = line.strip_prefix("# ").unwrap_or(line);
        if let Some(name) = bare.strip_prefix('[').and_then(|b| b.strip_suffix(']')) {
            section = name.to_owned();
        } else if let Some(rest) = line.strip_prefix("# ") {
            if let Some((key, _)) = rest.split_once(" = ") {
                let plain = key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
                if plain {
                    keys.push((i, format!("{section}.{key}")));
                }
            }
        }
    }
    keys
}

#[test]
fn the_example_file_loads_and_documents_the_true_defaults() {
    let path = workspace_file("config/lock.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let defaults = load(&env(&[("POD_NAME", "billing-7f9c")]));
    let as_is = load(
        &env(&[])
            .toml_file(&path)
            .env_from([("POD_NAME", "billing-7f9c")]),
    );
    assert_same_values(&as_is, &defaults);
    assert!(as_is.warnings().is_empty(), "{:?}", as_is.warnings());

    // Every key is listed, in its section; uncommenting every `# key = value` line that shows a
    // default changes nothing.
    let listed = commented_keys(&text);
    for spec in KEYS.iter().chain(SPRING_KEYS) {
        assert!(
            listed.iter().any(|(_, key)| key == spec.name),
            "config/lock.toml lists {} (found {listed:?})",
            spec.name
        );
    }
    let examples: Vec<usize> = listed
        .iter()
        .filter(|(_, key)| EXAMPLE_ONLY.contains(&key.as_str()))
        .map(|(i, _)| *i)
        .collect();
    let uncommented: String = text
        .lines()
        .enumerate()
        .map(|(i, line)| match line.strip_prefix("# ") {
            Some(rest) if examples.contains(&i) => {
                assert!(rest.contains(" = "));
                line
            }
            Some(rest) if rest.contains(" = ") || rest.starts_with('[') => rest,
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let files = Files::new();
    let copy = files.write("lock.toml", &uncommented);
    let explicit = load(
        &env(&[])
            .toml_file(&copy)
            .env_from([("POD_NAME", "ignored")]),
    );
    assert_eq!(
        explicit.instance_id, "billing-7f9c",
        "the file's example id"
    );
    assert_same_values(&explicit, &defaults);
    for spec in KEYS.iter().filter(|s| !EXAMPLE_ONLY.contains(&s.name)) {
        assert_eq!(
            explicit.source_of(spec.name).unwrap().to_string(),
            toml_origin(&copy),
            "{} is set by the uncommented file",
            spec.name
        );
    }

    // The example lines are valid too: the CA file with a TLS address, and each Spring
    // deployment on its own.
    let ca = files.write("ca.pem", CA_PEM);
    let line_of = |key: &str| {
        let (i, _) = listed.iter().find(|(_, k)| k == key).unwrap();
        text.lines()
            .nth(*i)
            .unwrap()
            .strip_prefix("# ")
            .unwrap()
            .to_owned()
    };
    let (_, ca_example) = line_of("telco.platform.lock.redis.tls.ca-file")
        .split_once(" = ")
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .unwrap();
    assert!(ca_example.ends_with(".pem"), "{ca_example}");
    let tls = files.write(
        "tls.toml",
        &format!(
            "[telco.platform.lock.redis]\naddress = \"rediss://h:6380\"\ntls.ca-file = {:?}\n",
            ca.display().to_string()
        ),
    );
    assert!(load(&env(&[]).toml_file(&tls)).redis.tls_ca_file.is_some());
    for keys in [
        &["sentinel.master", "sentinel.nodes", "username", "password"][..],
        &["cluster.nodes", "username", "password"][..],
    ] {
        let lines: Vec<String> = keys
            .iter()
            .map(|k| line_of(&format!("spring.data.redis.{k}")))
            .collect();
        let spring = files.write(
            "spring.toml",
            &format!("[spring.data.redis]\n{}\n", lines.join("\n")),
        );
        let settings = load(&env(&[]).toml_file(&spring));
        assert_ne!(settings.redis.address.topology(), &Topology::Single);
    }
}

/// A file under `config/`, loaded on its own.
fn load_example(name: &str) -> LockSettings {
    load(&env(&[("POD_NAME", "p")]).toml_file(workspace_file(&format!("config/{name}"))))
}

/// An example file with its address line removed and its Spring Boot form (the `# [section]`
/// and `# key = value` lines after `# --- Spring Boot form`) uncommented.
fn spring_form_of(name: &str) -> String {
    let text = std::fs::read_to_string(workspace_file(&format!("config/{name}"))).unwrap();
    let (lock, spring) = text
        .split_once("# --- Spring Boot form")
        .unwrap_or_else(|| panic!("config/{name} has a Spring Boot form"));
    let lock: Vec<&str> = lock
        .lines()
        .filter(|line| !line.starts_with("address = "))
        .collect();
    let spring: Vec<&str> = spring
        .lines()
        .skip(1) // the rest of the marker line
        .map(|line| match line.strip_prefix("# ") {
            Some(rest) if rest.starts_with('[') || rest.contains(" = ") => rest,
            _ => line,
        })
        .collect();
    format!("{}\n{}", lock.join("\n"), spring.join("\n"))
}

#[test]
fn the_sentinel_and_cluster_examples_load_and_match_their_spring_forms() {
    let sentinel = load_example("sentinel.toml");
    assert_eq!(
        sentinel.redis.address.topology(),
        &Topology::Sentinel {
            service_name: "mymaster".into()
        }
    );
    assert_eq!(sentinel.redis.address.nodes().len(), 3);
    assert!(sentinel.warnings().is_empty(), "{:?}", sentinel.warnings());

    let cluster = load_example("cluster.toml");
    assert_eq!(cluster.redis.address.topology(), &Topology::Cluster);
    assert_eq!(cluster.redis.address.nodes().len(), 3);
    assert!(cluster.warnings().is_empty(), "{:?}", cluster.warnings());

    // Each file's Spring Boot form builds the very same address.
    let files = Files::new();
    for (name, settings) in [("sentinel.toml", &sentinel), ("cluster.toml", &cluster)] {
        let spring = files.write(name, &spring_form_of(name));
        let from_spring = load(&env(&[("POD_NAME", "p")]).toml_file(&spring));
        assert_eq!(
            from_spring.redis.address.expose(),
            settings.redis.address.expose(),
            "{name}"
        );
        assert!(
            matches!(
                from_spring.source_of("redis.address"),
                Some(Origin::SpringFallback { .. })
            ),
            "{name}"
        );
        assert!(
            from_spring.warnings().is_empty(),
            "{:?}",
            from_spring.warnings()
        );
        assert_eq!(from_spring.wait_time, settings.wait_time, "{name}");
    }
}

fn assert_same_values(a: &LockSettings, b: &LockSettings) {
    assert_eq!(a.enabled, b.enabled);
    assert_eq!(a.redis, b.redis);
    assert_eq!(a.wait_time, b.wait_time);
    assert_eq!(a.watchdog_timeout, b.watchdog_timeout);
    assert_eq!(a.key_prefix, b.key_prefix);
    assert_eq!(a.instance_id, b.instance_id);
}

#[test]
fn the_documentation_lists_every_key_and_quotes_real_messages() {
    let docs = std::fs::read_to_string(workspace_file("docs/configuration.md")).unwrap();
    for spec in KEYS.iter().chain(SPRING_KEYS) {
        let row = docs
            .lines()
            .find(|line| line.starts_with(&format!("| `{}` |", spec.name)))
            .unwrap_or_else(|| panic!("no table row for {}", spec.name));
        for name in spec.env_names() {
            assert!(row.contains(&format!("`{name}`")), "{name} in {row}");
        }
    }
    let files = Files::new();
    let app = files.write("app.toml", "[telco.platform.lock]\nwait-tme = \"5s\"\n");
    let lease = files.write(
        "lease.toml",
        "[telco.platform.lock]\nlease-time = \"30s\"\n",
    );
    let brace = files.write(
        "prefix.toml",
        "[telco.platform.lock]\nkey-prefix = \"lock{\"\n",
    );
    let examples = [
        error_message(&env(&[("TELCO_PLATFORM_LOCK_WAIT_TIME", "5 parsecs")])),
        error_message(&env(&[("TELCO_PLATFORM_LOCK_WAITTIME", "5")])),
        error_message(&env(&[("TELCO_PLATFORM_LOCK_WATCHDOG_TIMEOUT", "0s")])),
        error_message(&env(&[(
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis-sentinel://app:hunter2@s1:26379/1",
        )])),
        error_message(&env(&[(
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "localhost:6379",
        )])),
        error_message(&env(&[(
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis-cluster://c1:7000?node=c2:7001&timeout=5",
        )])),
        error_message(&env(&[(
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "rediss-sentinel://s1?sentinelServiceName=mymaster&sentinelPassword=hunter2&node=s2",
        )])),
        error_message(&env(&[(
            "TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE",
            "/etc/ssl/certs/redis-ca.pem",
        )])),
        files.as_config_dir(&error_message(&env(&[
            (
                "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
                "rediss://redis.internal:6380",
            ),
            (
                "TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE",
                &files.dir.path().join("redis-ca.pem").display().to_string(),
            ),
        ]))),
        error_message(&env(&[("SPRING_DATA_REDIS_SENTINEL_MASTER", "mymaster")])),
        error_message(&env(&[
            ("SPRING_DATA_REDIS_HOST", "redis.internal"),
            ("SPRING_DATA_REDIS_SENTINEL_MASTER", "mymaster"),
            ("SPRING_DATA_REDIS_SENTINEL_NODES", "s1:26379,s2:26379"),
        ])),
        error_message(&env(&[
            ("SPRING_DATA_REDIS_URL", "redis://cache.internal:6379"),
            ("SPRING_DATA_REDIS_CLUSTER_NODES", "c1:7000,c2:7001"),
        ])),
        error_message(&env(&[
            ("SPRING_DATA_REDIS_CLUSTER_NODES", "c1:7000,c2:7001"),
            ("SPRING_DATA_REDIS_DATABASE", "2"),
        ])),
        error_message(&env(&[
            ("TELCO_PLATFORM_LOCK_WAIT_TIME", "2s"),
            ("TELCO_PLATFORM_LOCK_WAITTIME", "3s"),
        ])),
        error_message(&env(&[("TELCO_PLATFORM_LOCK_WAIT_TME", "5s")])),
        files.as_config_dir(&error_message(&env(&[]).toml_file(&app))),
        files.as_config_dir(&error_message(&env(&[]).toml_file(&lease))),
        files.as_config_dir(&error_message(&env(&[]).toml_file(&brace))),
        error_message(&env(&[]).toml_file("config/does-not-exist.toml")),
        error_message(&env(&[(
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis://:hunter2@redis.internal:99999",
        )])),
        error_message(&env(&[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "")])),
        error_message(&env(&[(
            "SPRING_DATA_REDIS_URL",
            "rediss-cluster://app:hunter2@cache.internal:6380/1",
        )])),
        error_message(&env(&[("TELCO_PLATFORM_LOCK_REDIS_PWD", "hunter2")])),
    ];
    let shared = files.write(
        "shared.toml",
        "[telco.platform.lok]\nwait-time = \"2s\"\nkey-prefix = \"billing:\"\n\
         [telco.platform.log]\nlevel = \"debug\"\n",
    );
    let spring = env(&[
        ("SPRING_DATA_REDIS_HOST", "redis.internal"),
        ("SPRING_DATA_REDIS_PASSWORD", "hunter2"),
        ("SPRING_DATA_REDIS_TIMEOUT", "3s"),
    ]);
    let sentinel = load(&env(&[
        ("SPRING_DATA_REDIS_SENTINEL_MASTER", "mymaster"),
        (
            "SPRING_DATA_REDIS_SENTINEL_NODES",
            "s1:26379,s2:26379,s3:26379",
        ),
        ("SPRING_DATA_REDIS_PASSWORD", "hunter2"),
    ]));
    let url = load(&env(&[(
        "SPRING_DATA_REDIS_URL",
        "redis://app:hunter2@cache.internal:6380/2",
    )]));
    let warnings = [
        files.as_config_dir(&load(&env(&[]).toml_file(&shared)).warnings().join("\n")),
        load(&env(&[("TELCO_PLATFROM_LOCK_WAIT_TIME", "2s")])).warnings()[0].clone(),
        load(&spring).warnings()[0].clone(),
        url.describe("redis.address").unwrap(),
        sentinel.describe("redis.address").unwrap(),
    ];
    let mut missing = Vec::new();
    for example in &warnings {
        if !docs.contains(example.as_str()) {
            missing.push(example.as_str());
        }
    }
    for example in &examples {
        if !docs.contains(example.as_str()) {
            missing.push(example.as_str());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not quote these messages:\n{}",
        missing.join("\n")
    );
    // LockSettings has no Display (only its Debug redacts); RedisAddress has one.
    let docs_text = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !docs_text.contains("`Display` and `Debug` of the settings"),
        "docs/configuration.md claims a Display the settings do not have"
    );
    assert!(docs_text.contains("`LockSettings` and `RedisSettings` have no `Display`"));

    // Every TOML example under "Deployments" loads (the CA file replaced by a real one), and
    // together they show each topology and TLS.
    let deployments = docs
        .split_once("\n## Deployments\n")
        .expect("docs/configuration.md has a Deployments section")
        .1;
    let deployments = deployments.split("\n## ").next().unwrap();
    let ca = files.write("ca.pem", CA_PEM);
    let mut seen = Vec::new();
    for (i, block) in deployments.split("```toml\n").skip(1).enumerate() {
        let block = block.split("```").next().unwrap();
        let block = block.replace("/etc/ssl/certs/redis-ca.pem", &ca.display().to_string());
        let path = files.write(&format!("deployment-{i}.toml"), &block);
        let settings = LockSettings::load(&env(&[]).toml_file(&path))
            .unwrap_or_else(|e| panic!("Deployments example {i}:\n{block}\n{e}"));
        assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
        let address = &settings.redis.address;
        seen.push((
            address.topology().clone(),
            address.tls(),
            settings.redis.tls_ca_file.is_some(),
        ));
    }
    for topology in [
        Topology::Single,
        Topology::Sentinel {
            service_name: "mymaster".into(),
        },
        Topology::Cluster,
    ] {
        assert!(
            seen.iter().any(|(t, ..)| *t == topology),
            "{topology:?} in {seen:?}"
        );
    }
    assert!(
        seen.iter().any(|(_, tls, ca)| *tls && *ca),
        "TLS with a CA file: {seen:?}"
    );
}

#[test]
fn addresses_parse_outside_configuration_too() {
    let address: RedisAddress = "redis://:hunter2@h:6379/3".parse().unwrap();
    assert_eq!(address.to_string(), "redis://:***@h:6379/3");
    assert_eq!(address.database(), 3);
    assert!(address.has_password());
    assert_eq!(address.username(), None);
}

#[test]
fn errors_and_settings_cross_threads_and_fit_error_chains() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<ConfigError>();
    assert_send_sync::<LockSettings>();
    assert_send_sync::<ConfigSources>();
    let error: Box<dyn std::error::Error + Send + Sync> =
        Box::new(load_err(&env(&[("TELCO_PLATFORM_LOCK_ENABLED", "maybe")])));
    assert!(error.to_string().contains("TELCO_PLATFORM_LOCK_ENABLED"));
}

#[test]
fn a_failing_consumer_figment_is_reported_on_one_line() {
    let figment = Figment::from(Toml::string(
        "[telco.platform.lock.redis]\naddress = \"redis://app:hunter2@h\n",
    ));
    let error = LockSettings::from_figment(&figment).unwrap_err();
    assert!(matches!(error, ConfigError::Source { .. }), "{error:?}");
    let message = error.to_string();
    assert_no_secret(&message);
    assert!(!message.contains('\n'), "{message}");
    assert_mentions(
        &message,
        &[
            "a configuration source of the supplied figment failed",
            "line 2",
        ],
    );
}

const NEAR_MISS_END: &str = "is ignored: the lock reads its settings only under telco.platform.lock; did you mean \
     telco.platform.lock?";

#[test]
fn a_misspelt_lock_section_is_a_warning_naming_it_and_its_source() {
    let files = Files::new();
    let lok = files.write(
        "lok.toml",
        "[telco.platform.lok]\nwait-time = \"2s\"\nkey-prefix = \"app:\"\n",
    );
    let settings = load(&env(&[]).toml_file(&lok));
    assert_eq!(settings.wait_time, Duration::from_secs(5), "not read");
    assert_eq!(
        settings.warnings(),
        [format!(
            "section telco.platform.lok (keys key-prefix, wait-time; from {}) {NEAR_MISS_END}",
            toml_origin(&lok)
        )]
    );

    // A misspelt segment higher up: the section is named down to where `lock` would be.
    let platfrom = files.write(
        "platfrom.toml",
        "[telco.platfrom.lock.redis]\naddress = \"redis://lock-redis:6380\"\n",
    );
    let settings = load(&env(&[]).toml_file(&platfrom));
    assert_eq!(settings.redis.address.expose(), "redis://localhost:6379");
    assert_eq!(
        settings.warnings(),
        [format!(
            "section telco.platfrom.lock (keys redis.address; from {}) {NEAR_MISS_END}",
            toml_origin(&platfrom)
        )]
    );

    // More misspellings, each one warning; the value is never shown.
    for (section, shown) in [
        ("[telco.platform.lcok]", "section telco.platform.lcok "),
        ("[telco.platform.locks]", "section telco.platform.locks "),
        ("[telco.platform.Lock]", "section telco.platform.Lock "),
        ("[Telco.Platform.Lock]", "section Telco.Platform.Lock "),
        ("[telco.platformlock]", "section telco.platformlock "),
        ("[telco_platform_lock]", "section telco_platform_lock "),
        ("[telko.platform.lock]", "section telko.platform.lock "),
        (
            "[\"telco.platform.lock\"]",
            "section \"telco.platform.lock\" ",
        ),
    ] {
        let path = files.write("typo.toml", &format!("{section}\nwait-time = \"2s\"\n"));
        let settings = load(&env(&[]).toml_file(&path));
        let [warning] = settings.warnings() else {
            panic!(
                "{section}: one warning expected, got {:?}",
                settings.warnings()
            );
        };
        assert!(warning.starts_with(shown), "{section}: {warning}");
        assert!(warning.ends_with(NEAR_MISS_END), "{section}: {warning}");
        assert!(!warning.contains("2s"), "{section}: {warning}");
    }

    // A key instead of a section, and an empty section.
    let key = files.write("key.toml", "[telco.platform]\nlok = \"x\"\n");
    assert_eq!(
        load(&env(&[]).toml_file(&key)).warnings(),
        [format!(
            "key telco.platform.lok (from {}) {NEAR_MISS_END}",
            toml_origin(&key)
        )]
    );
    let empty = files.write("empty.toml", "[telco.platform.lok]\n");
    let settings = load(&env(&[]).toml_file(&empty));
    assert_eq!(settings.warnings().len(), 1, "{:?}", settings.warnings());
    assert!(
        settings.warnings()[0].starts_with("section telco.platform.lok (empty; from "),
        "{:?}",
        settings.warnings()
    );
}

#[test]
fn other_sections_next_to_the_lock_are_not_warned_about() {
    let files = Files::new();
    let path = files.write(
        "app.toml",
        r#"
        [server]
        port = 8080
        [telecom]
        region = "eu"
        [telco.platform.log]
        level = "debug"
        [telco.platform.logs]
        dir = "/var/log"
        [telco.platform.kafka]
        brokers = "kafka:9092"
        [telco.platform.outbox]
        enabled = true
        [telco.platform.locking-service]
        url = "http://x"
        [telco.platfrom.kafka]
        brokers = "kafka:9092"
        [telco.billing.lock]
        enabled = true
        [telco.platform.lock]
        wait-time = "1s"
        "#,
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(settings.wait_time, Duration::from_secs(1));
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
}

#[test]
fn a_misspelt_section_in_a_consumer_figment_is_a_warning_too() {
    let figment = Figment::new()
        .merge(Toml::string("[telco.platform.lok]\nwait-time = \"3s\"\n"))
        .merge(Serialized::default(
            "telco.platfrom.lock.key-prefix",
            "svc:",
        ));
    let settings = LockSettings::from_figment(&figment).unwrap();
    assert_eq!(settings.wait_time, Duration::from_secs(5));
    assert_eq!(settings.key_prefix, "lock:");
    let warnings = settings.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert_eq!(
        warnings[0],
        format!(
            "section telco.platform.lok (keys wait-time; from TOML source string) {NEAR_MISS_END}"
        )
    );
    assert!(
        warnings[1].starts_with("section telco.platfrom.lock (keys key-prefix; from "),
        "{}",
        warnings[1]
    );
    assert!(warnings[1].contains("tests/config.rs"), "{}", warnings[1]);
    // Through ConfigSources as well.
    let sources = ConfigSources::from_figment(figment).env_from([("POD_NAME", "p")]);
    assert_eq!(load(&sources).warnings(), warnings);
}

#[test]
fn a_misspelt_lock_variable_is_a_warning_naming_it_without_its_value() {
    let settings = load(&env(&[
        ("TELCO_PLATFROM_LOCK_WAIT_TIME", "2s"),
        ("telco_platform_lock_key_prefix", "app:"),
        ("TELCO_PLATFORM_LOG_LEVEL", "debug"),
        ("TELCO_PLATFORM_KAFKA_BROKERS", "kafka:9092"),
        ("TELCO_PLATFORM_OUTBOX_ENABLED", "true"),
    ]));
    assert_eq!(settings.wait_time, Duration::from_secs(5));
    assert_eq!(
        settings.warnings(),
        [
            "environment variable TELCO_PLATFROM_LOCK_WAIT_TIME is ignored: the lock reads only \
             variables starting with TELCO_PLATFORM_LOCK_; did you mean \
             TELCO_PLATFORM_LOCK_WAIT_TIME?",
            "environment variable telco_platform_lock_key_prefix is ignored: the lock reads only \
             variables starting with TELCO_PLATFORM_LOCK_; did you mean \
             TELCO_PLATFORM_LOCK_KEY_PREFIX?",
        ]
    );
}

#[test]
fn unread_spring_variables_are_a_warning_naming_them_without_their_values() {
    let settings = load(&env(&[
        ("SPRING_DATA_REDIS_HOST", "redis.internal"),
        ("SPRING_DATA_REDIS_PASSWORD", SECRET),
        ("SPRING_DATA_REDIS_TIMEOUT", "5s"),
        ("SPRING_DATA_REDIS_CLIENT_TYPE", "lettuce"),
        ("SPRING_DATA_REDIS_SSL_BUNDLE", "redis"),
    ]));
    assert_eq!(
        settings.redis.address.expose(),
        "redis://:hunter2@redis.internal:6379"
    );
    assert_eq!(
        settings.warnings(),
        [
            "the lock's Redis address is built from spring.data.redis.host/port (with username, \
             password, database and ssl.enabled), so these Spring settings are ignored by the \
             lock: environment variable SPRING_DATA_REDIS_CLIENT_TYPE, environment variable \
             SPRING_DATA_REDIS_SSL_BUNDLE, environment variable SPRING_DATA_REDIS_TIMEOUT. Set \
             telco.platform.lock.redis.address if the lock needs them"
        ]
    );
    assert_no_secret(&format!("{settings:?}"));
    assert_no_secret(&settings.warnings().join(" "));

    // Sentinel settings: the sentinels' own password is not read, and said so.
    let settings = load(&env(&[
        ("SPRING_DATA_REDIS_SENTINEL_MASTER", "mymaster"),
        ("SPRING_DATA_REDIS_SENTINEL_NODES", "s1:26379,s2:26379"),
        ("SPRING_DATA_REDIS_SENTINEL_PASSWORD", SECRET),
    ]));
    assert_eq!(
        settings.redis.address.expose(),
        "redis-sentinel://s1:26379?sentinelServiceName=mymaster&node=s2:26379"
    );
    assert_eq!(
        settings.warnings(),
        [
            "the lock's Redis address is built from spring.data.redis.sentinel.master/nodes \
             (with username, password, database and ssl.enabled), so these Spring settings are \
             ignored by the lock: environment variable SPRING_DATA_REDIS_SENTINEL_PASSWORD. Set \
             telco.platform.lock.redis.address if the lock needs them"
        ]
    );

    // Nothing the address can be built from: the default, and a warning saying so.
    let settings = load(&env(&[
        ("SPRING_DATA_REDIS_TIMEOUT", "5s"),
        ("SPRING_DATA_REDIS_SENTINEL_PASSWORD", SECRET),
    ]));
    assert_eq!(settings.redis.address.expose(), "redis://localhost:6379");
    assert_eq!(settings.source_of("redis.address"), Some(&Origin::Default));
    assert_eq!(
        settings.warnings(),
        [
            "the lock's Redis address is the default redis://localhost:6379 (none of \
             telco.platform.lock.redis.address and the spring.data.redis keys url, host, port, \
             username, password, database, ssl.enabled, sentinel.master, sentinel.nodes and \
             cluster.nodes is set), so these Spring settings are ignored by the lock: \
             environment variable SPRING_DATA_REDIS_SENTINEL_PASSWORD, environment variable \
             SPRING_DATA_REDIS_TIMEOUT. Set telco.platform.lock.redis.address if the lock needs \
             them"
        ]
    );

    // The lock's own address: the Spring settings are not the lock's business, not even
    // contradictory ones.
    let settings = load(&env(&[
        (
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis://lock-redis:6379",
        ),
        ("SPRING_DATA_REDIS_PASSWORD", SECRET),
        ("SPRING_DATA_REDIS_CLUSTER_NODES", "c1:6379"),
        ("SPRING_DATA_REDIS_SENTINEL_MASTER", "mymaster"),
        ("SPRING_DATA_REDIS_HOST", "h"),
    ]));
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
    assert_eq!(settings.redis.address.expose(), "redis://lock-redis:6379");
}

#[test]
fn unread_spring_keys_in_toml_are_a_warning_naming_them_and_their_source() {
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[spring.data.redis]\nhost = \"redis.internal\"\npassword = \"hunter2\"\n\
         timeout = \"5s\"\n[spring.data.redis.ssl]\nenabled = true\nbundle = \"redis\"\n",
    );
    let settings = load(
        &env(&[])
            .toml_file(&path)
            .env_from([("SPRING_DATA_REDIS_DATABASE", "2")]),
    );
    assert_eq!(
        settings.redis.address.expose(),
        "rediss://:hunter2@redis.internal:6379/2"
    );
    assert_eq!(
        settings.warnings(),
        [format!(
            "the lock's Redis address is built from spring.data.redis.host/port (with username, \
             password, database and ssl.enabled), so these Spring settings are ignored by the \
             lock: spring.data.redis.ssl.bundle (from {0}), spring.data.redis.timeout (from {0}). \
             Set telco.platform.lock.redis.address if the lock needs them",
            toml_origin(&path)
        )]
    );
    assert_no_secret(&settings.warnings().join(" "));
}

#[test]
fn spring_url_is_the_first_fallback_and_reports_its_origin() {
    let settings = load(&env(&[
        (
            "SPRING_DATA_REDIS_URL",
            "redis://app:hunter2@cache.internal:6380/2",
        ),
        ("SPRING_DATA_REDIS_HOST", "ignored-host"),
        ("SPRING_DATA_REDIS_PORT", "7000"),
    ]));
    assert_eq!(
        settings.redis.address.expose(),
        "redis://app:hunter2@cache.internal:6380/2"
    );
    assert_eq!(
        settings.source_of("redis.address"),
        Some(&Origin::SpringUrl(Box::new(Origin::Env(
            "SPRING_DATA_REDIS_URL".into()
        ))))
    );
    assert_eq!(
        settings.describe("redis.address").unwrap(),
        "telco.platform.lock.redis.address = redis://app:***@cache.internal:6380/2 from \
         spring.data.redis.url from environment variable SPRING_DATA_REDIS_URL"
    );
    // Host and port are overridden by the URL, as in Spring Boot: no warning about them.
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());

    // From a file; the lock's own address still wins over it.
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[spring.data.redis]\nurl = \"redis://cache.internal:6381\"\nhost = \"other\"\n",
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(
        settings.redis.address.expose(),
        "redis://cache.internal:6381"
    );
    assert_eq!(
        settings.source_of("redis.address").unwrap().to_string(),
        format!("spring.data.redis.url from {}", toml_origin(&path))
    );
    let settings =
        load(&env(&[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", "redis://lock:6379")]).toml_file(&path));
    assert_eq!(settings.redis.address.expose(), "redis://lock:6379");

    // Settings the URL does not override are still named.
    let settings = load(&env(&[
        ("SPRING_DATA_REDIS_URL", "redis://cache.internal:6380"),
        ("SPRING_DATA_REDIS_PASSWORD", SECRET),
        ("SPRING_DATA_REDIS_SSL_ENABLED", "true"),
    ]));
    assert_eq!(
        settings.warnings(),
        [
            "the lock's Redis address is taken from spring.data.redis.url, so these Spring \
             settings are ignored by the lock: environment variable \
             SPRING_DATA_REDIS_SSL_ENABLED. Set telco.platform.lock.redis.address if the lock \
             needs them"
        ]
    );

    // Checked exactly like the address, password redacted.
    let error = load_err(&env(&[(
        "SPRING_DATA_REDIS_URL",
        "redis://app:hunter2@cache.internal:99999",
    )]));
    assert_eq!(
        error.to_string(),
        format!(
            "spring.data.redis.url = \"redis://app:***@cache.internal:99999\" (from environment \
             variable SPRING_DATA_REDIS_URL): the port is not a number from 1 to 65535; \
             accepted: {ADDRESS_ACCEPTED}"
        )
    );
    assert_eq!(error.key(), Some("spring.data.redis.url"));
    assert_no_secret(&format!("{error:?}"));
}

#[test]
fn secret_looking_unknown_names_hide_their_values_and_real_keys_do_not() {
    for var in [
        "TELCO_PLATFORM_LOCK_REDIS_PWD",
        "TELCO_PLATFORM_LOCK_REDIS_PASSWD",
        "TELCO_PLATFORM_LOCK_REDIS_PASS",
        "TELCO_PLATFORM_LOCK_API_KEY",
        "TELCO_PLATFORM_LOCK_KEY",
        "TELCO_PLATFORM_LOCK_REDIS_CREDENTIALS",
        "TELCO_PLATFORM_LOCK_AUTH",
        "TELCO_PLATFORM_LOCK_TOKEN",
        "TELCO_PLATFORM_LOCK_CLIENT_SECRET",
    ] {
        let error = load_err(&env(&[(var, SECRET)]));
        assert_no_secret(&format!("{error:?}"));
        assert_mentions(
            &error.to_string(),
            &[&format!("unknown environment variable {var} = ***: ")],
        );
    }
    let files = Files::new();
    for (line, key) in [
        (
            "[telco.platform.lock.redis]\npwd = \"hunter2\"",
            "telco.platform.lock.redis.pwd",
        ),
        (
            "[telco.platform.lock]\napi-key = \"hunter2\"",
            "telco.platform.lock.api-key",
        ),
        (
            "[telco.platform.lock.redis]\nauth = \"hunter2\"",
            "telco.platform.lock.redis.auth",
        ),
    ] {
        let path = files.write("secret.toml", line);
        let error = load_err(&env(&[]).toml_file(&path));
        for text in [error.to_string(), format!("{error:?}")] {
            assert_no_secret(&text);
        }
        assert_mentions(
            &error.to_string(),
            &[&format!("unknown key {key} = *** (from")],
        );
    }
    // The password-like spelling points at the address.
    let error = load_err(&env(&[("TELCO_PLATFORM_LOCK_REDIS_PWD", SECRET)]));
    assert_mentions(
        &error.to_string(),
        &["all go into TELCO_PLATFORM_LOCK_REDIS_ADDRESS"],
    );

    // A misspelt key-prefix is not a secret: its value is shown, with the suggestion.
    let path = files.write(
        "prefix.toml",
        "[telco.platform.lock]\nkey-prefx = \"app:\"\n",
    );
    assert_mentions(
        &error_message(&env(&[]).toml_file(&path)),
        &[
            "unknown key telco.platform.lock.key-prefx = \"app:\"",
            "did you mean telco.platform.lock.key-prefix?",
        ],
    );
    assert_mentions(
        &error_message(&env(&[("TELCO_PLATFORM_LOCK_KEY_PREFX", "app:")])),
        &[
            "TELCO_PLATFORM_LOCK_KEY_PREFX = \"app:\"",
            "did you mean TELCO_PLATFORM_LOCK_KEY_PREFIX?",
        ],
    );
    // The real key shows its value when it is rejected.
    assert_mentions(
        &error_message(&env(&[("TELCO_PLATFORM_LOCK_KEY_PREFIX", "a b")])),
        &["telco.platform.lock.key-prefix = \"a b\" (from environment variable"],
    );
}

#[test]
fn every_accepted_address_form_parses_with_its_topology() {
    let sentinel = |name: &str| Topology::Sentinel {
        service_name: name.to_owned(),
    };
    for (text, topology, tls, nodes, db) in [
        ("redis://redis.internal", Topology::Single, false, 1, 0),
        (
            "rediss://app:pw@redis.internal:6380/2",
            Topology::Single,
            true,
            1,
            2,
        ),
        (
            "redis-sentinel://s1:26379?sentinelServiceName=mymaster",
            sentinel("mymaster"),
            false,
            1,
            0,
        ),
        (
            "redis-sentinel://app:pw@s1/3?sentinelServiceName=mymaster&node=s2:26379\
             &node=s3:26379&sentinelUsername=sentinel-user&sentinelPassword=spw",
            sentinel("mymaster"),
            false,
            3,
            3,
        ),
        (
            "rediss-sentinel://s1:26379?node=s2:26379&sentinelServiceName=orders",
            sentinel("orders"),
            true,
            2,
            0,
        ),
        (
            "redis-cluster://c1:7000?node=c2:7001&node=c3:7002",
            Topology::Cluster,
            false,
            3,
            0,
        ),
        ("redis-cluster://c1:7000/0", Topology::Cluster, false, 1, 0),
        (
            "rediss-cluster://app:pw@c1:7000?node=10.0.0.2:7001",
            Topology::Cluster,
            true,
            2,
            0,
        ),
    ] {
        for sources in [
            env(&[("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", text)]),
            env(&[("SPRING_DATA_REDIS_URL", text)]),
        ] {
            let settings = load(&sources);
            let address = &settings.redis.address;
            assert_eq!(address.expose(), text);
            assert_eq!(address.topology(), &topology, "{text}");
            assert_eq!(address.tls(), tls, "{text}");
            assert_eq!(address.nodes().len(), nodes, "{text}");
            assert_eq!(address.database(), db, "{text}");
            assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
        }
    }
    // From a TOML file as well, with the sentinel port defaulted.
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[telco.platform.lock.redis]\n\
         address = \"redis-sentinel://s1?sentinelServiceName=mymaster&node=s2:26380\"\n",
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(
        settings.redis.address.nodes(),
        [("s1".to_owned(), 26379), ("s2".to_owned(), 26380)]
    );
}

#[test]
fn every_bad_url_names_key_value_source_and_what_is_accepted() {
    let files = Files::new();
    let toml = files.write(
        "app.toml",
        "[telco.platform.lock.redis]\n\
         address = \"redis-cluster://app:hunter2@c1:7000/2?node=c2:7001\"\n",
    );
    let error = load_err(&env(&[]).toml_file(&toml));
    assert_eq!(
        error.to_string(),
        format!(
            "telco.platform.lock.redis.address = \"redis-cluster://app:***@c1:7000/2?node=c2:7001\" \
             (from {}): a Redis Cluster has only database 0, so the path /2 is not accepted; \
             leave the path out; accepted: {ADDRESS_ACCEPTED}",
            toml_origin(&toml)
        )
    );
    for (address, shown, problem) in [
        (
            "redis-sentinel://app:hunter2@s1:26379/1",
            "redis-sentinel://app:***@s1:26379/1",
            "sentinelServiceName is missing; a sentinel address needs \
             ?sentinelServiceName=<master name> (the name the sentinels know the primary by, \
             e.g. mymaster)",
        ),
        (
            "redis-sentinel://s1?sentinelServiceName=",
            "redis-sentinel://s1?sentinelServiceName=",
            "sentinelServiceName is empty",
        ),
        (
            "redis-cluster://c1:7000?node=c2:7001&timeout=5",
            "redis-cluster://c1:7000?node=c2:7001&timeout=5",
            "unknown query parameter timeout (redis-cluster:// takes node)",
        ),
        (
            "rediss-sentinel://s1?sentinelServiceName=m&sentinelPassword=hunter2&node=s2",
            "rediss-sentinel://s1?sentinelServiceName=m&sentinelPassword=***&node=s2",
            "node=s2: the port is missing; host:port is required; each node= is host:port",
        ),
        (
            "redis-cluster://c1?node=c2:65536",
            "redis-cluster://c1?node=c2:65536",
            "node=c2:65536: the port is not a number from 1 to 65535",
        ),
        (
            "redis-cluster://c1:0",
            "redis-cluster://c1:0",
            "port 0 is not accepted",
        ),
        (
            "rediss-sentinel://s1:70000?sentinelServiceName=m",
            "rediss-sentinel://s1:70000?sentinelServiceName=m",
            "the port is not a number from 1 to 65535",
        ),
        (
            "rediss-cluster://c1?node=[::1]:7000",
            "rediss-cluster://c1?node=[::1]:7000",
            "node=\"[::1]:7000\": an IPv6 address is not accepted here",
        ),
        (
            "redis://h:6379?node=h2:6379",
            "redis://h:6379?node=h2:6379",
            "the query parameter node is only accepted with redis-sentinel:// and \
             redis-cluster://",
        ),
        (
            "redis-cluster://c1?sentinelServiceName=m",
            "redis-cluster://c1?sentinelServiceName=m",
            "the query parameter sentinelServiceName is only accepted with redis-sentinel://",
        ),
        (
            "redis-sentinel://s1?sentinelServiceName=m&SentinelPassword=hunter2",
            "redis-sentinel://s1?sentinelServiceName=m&SentinelPassword=***",
            "unknown query parameter SentinelPassword (did you mean sentinelPassword?)",
        ),
        (
            "redis-sentinel:///0?sentinelServiceName=m",
            "redis-sentinel:///0?sentinelServiceName=m",
            "the host is missing",
        ),
        (
            "rediss+unix:///run/redis.sock",
            "rediss+unix:///run/redis.sock",
            "Unix sockets (rediss+unix://) are not supported",
        ),
    ] {
        for (var, key) in [
            (
                "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
                "telco.platform.lock.redis.address",
            ),
            ("SPRING_DATA_REDIS_URL", "spring.data.redis.url"),
        ] {
            let error = load_err(&env(&[(var, address)]));
            let message = error.to_string();
            assert_mentions(
                &message,
                &[
                    &format!("{key} = {shown:?} (from environment variable {var}): {problem}"),
                    &format!("; accepted: {ADDRESS_ACCEPTED}"),
                ],
            );
            assert_eq!(error.key(), Some(key));
            assert_eq!(
                error.origin().map(ToString::to_string),
                Some(format!("environment variable {var}"))
            );
            assert_no_secret(&message);
            assert_no_secret(&format!("{error:?}"));
        }
    }
}

#[test]
fn spring_sentinel_keys_build_a_sentinel_address() {
    let files = Files::new();
    let path = files.write(
        "app.toml",
        r#"
        [spring.data.redis]
        username = "app"
        database = 2
        [spring.data.redis.sentinel]
        master = "mymaster"
        nodes = "s1:26379, s2:26380,10.0.0.3:26379"
        [spring.data.redis.ssl]
        enabled = true
        "#,
    );
    let settings = load(&env(&[("SPRING_DATA_REDIS_PASSWORD", "p@ss:w/rd")]).toml_file(&path));
    let address = &settings.redis.address;
    assert_eq!(
        address.expose(),
        "rediss-sentinel://app:p%40ss%3Aw%2Frd@s1:26379/2?sentinelServiceName=mymaster\
         &node=s2:26380&node=10.0.0.3:26379"
    );
    assert_eq!(
        address.topology(),
        &Topology::Sentinel {
            service_name: "mymaster".into()
        }
    );
    assert!(address.tls());
    assert_eq!(address.database(), 2);
    let file = || Origin::File {
        format: "TOML file".into(),
        path: path.clone(),
    };
    assert_eq!(
        settings.source_of("redis.address"),
        Some(&Origin::SpringFallback {
            keys: vec![
                ("spring.data.redis.sentinel.master".into(), file()),
                ("spring.data.redis.sentinel.nodes".into(), file()),
                ("spring.data.redis.username".into(), file()),
                (
                    "spring.data.redis.password".into(),
                    Origin::Env("SPRING_DATA_REDIS_PASSWORD".into())
                ),
                ("spring.data.redis.database".into(), file()),
                ("spring.data.redis.ssl.enabled".into(), file()),
            ]
        })
    );
    let toml = toml_origin(&path);
    assert_eq!(
        settings.describe("redis.address").unwrap(),
        format!(
            "telco.platform.lock.redis.address = rediss-sentinel://app:***@s1:26379/2?\
             sentinelServiceName=mymaster&node=s2:26380&node=10.0.0.3:26379 from \
             spring.data.redis.sentinel.master from {toml}, spring.data.redis.sentinel.nodes \
             from {toml}, spring.data.redis.username from {toml}, spring.data.redis.password \
             from environment variable SPRING_DATA_REDIS_PASSWORD, spring.data.redis.database \
             from {toml} and spring.data.redis.ssl.enabled from {toml}"
        )
    );
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
    assert!(!format!("{settings:?}").contains("p%40ss"));

    // From the environment only, one sentinel, a master name that needs encoding.
    let settings = load(&env(&[
        ("SPRING_DATA_REDIS_SENTINEL_MASTER", "orders primary"),
        (
            "SPRING_DATA_REDIS_SENTINEL_NODES",
            "sentinel.internal:26379",
        ),
        ("SPRING_DATA_REDIS_SSL_ENABLED", "false"),
    ]));
    assert_eq!(
        settings.redis.address.expose(),
        "redis-sentinel://sentinel.internal:26379?sentinelServiceName=orders+primary"
    );
    assert_eq!(
        settings.redis.address.topology(),
        &Topology::Sentinel {
            service_name: "orders primary".into()
        }
    );
    assert_eq!(
        settings.source_of("redis.address").unwrap().to_string(),
        "spring.data.redis.sentinel.master from environment variable \
         SPRING_DATA_REDIS_SENTINEL_MASTER, spring.data.redis.sentinel.nodes from environment \
         variable SPRING_DATA_REDIS_SENTINEL_NODES and spring.data.redis.ssl.enabled from \
         environment variable SPRING_DATA_REDIS_SSL_ENABLED"
    );
}

#[test]
fn spring_cluster_keys_build_a_cluster_address() {
    let settings = load(&env(&[
        ("SPRING_DATA_REDIS_CLUSTER_NODES", "c1:7000,c2:7001,c3:7002"),
        ("SPRING_DATA_REDIS_USERNAME", "app"),
        ("SPRING_DATA_REDIS_PASSWORD", SECRET),
        ("SPRING_DATA_REDIS_SSL_ENABLED", "TRUE"),
        ("SPRING_DATA_REDIS_DATABASE", "0"),
    ]));
    assert_eq!(
        settings.redis.address.expose(),
        "rediss-cluster://app:hunter2@c1:7000?node=c2:7001&node=c3:7002"
    );
    assert_eq!(settings.redis.address.topology(), &Topology::Cluster);
    let var = |name: &str| Origin::Env(name.into());
    assert_eq!(
        settings.source_of("redis.address"),
        Some(&Origin::SpringFallback {
            keys: vec![
                (
                    "spring.data.redis.cluster.nodes".into(),
                    var("SPRING_DATA_REDIS_CLUSTER_NODES")
                ),
                (
                    "spring.data.redis.username".into(),
                    var("SPRING_DATA_REDIS_USERNAME")
                ),
                (
                    "spring.data.redis.password".into(),
                    var("SPRING_DATA_REDIS_PASSWORD")
                ),
                (
                    "spring.data.redis.database".into(),
                    var("SPRING_DATA_REDIS_DATABASE")
                ),
                (
                    "spring.data.redis.ssl.enabled".into(),
                    var("SPRING_DATA_REDIS_SSL_ENABLED")
                ),
            ]
        })
    );
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
    assert_no_secret(&format!("{settings:?}"));
    assert_no_secret(&settings.describe("redis.address").unwrap());

    // A TOML array, one node.
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[spring.data.redis.cluster]\nnodes = [\"c1:7000\", \" c2:7001 \"]\n",
    );
    assert_eq!(
        load(&env(&[]).toml_file(&path)).redis.address.expose(),
        "redis-cluster://c1:7000?node=c2:7001"
    );
    let one = load(&env(&[("SPRING_DATA_REDIS_CLUSTER_NODES", "c1:7000")]));
    assert_eq!(one.redis.address.expose(), "redis-cluster://c1:7000");
}

#[test]
fn spring_credentials_database_and_tls_apply_to_host_and_port() {
    let settings = load(&env(&[
        ("SPRING_DATA_REDIS_HOST", "redis.internal"),
        ("SPRING_DATA_REDIS_PORT", "6380"),
        ("SPRING_DATA_REDIS_USERNAME", "app"),
        ("SPRING_DATA_REDIS_PASSWORD", SECRET),
        ("SPRING_DATA_REDIS_DATABASE", "3"),
        ("SPRING_DATA_REDIS_SSL_ENABLED", "true"),
    ]));
    assert_eq!(
        settings.redis.address.expose(),
        "rediss://app:hunter2@redis.internal:6380/3"
    );
    assert_eq!(settings.redis.address.topology(), &Topology::Single);
    assert_eq!(
        settings.describe("redis.address").unwrap(),
        "telco.platform.lock.redis.address = rediss://app:***@redis.internal:6380/3 from \
         spring.data.redis.host from environment variable SPRING_DATA_REDIS_HOST, \
         spring.data.redis.port from environment variable SPRING_DATA_REDIS_PORT, \
         spring.data.redis.username from environment variable SPRING_DATA_REDIS_USERNAME, \
         spring.data.redis.password from environment variable SPRING_DATA_REDIS_PASSWORD, \
         spring.data.redis.database from environment variable SPRING_DATA_REDIS_DATABASE and \
         spring.data.redis.ssl.enabled from environment variable SPRING_DATA_REDIS_SSL_ENABLED"
    );
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());

    // A password alone: Spring Boot's localhost:6379, with it.
    let settings = load(&env(&[("SPRING_DATA_REDIS_PASSWORD", SECRET)]));
    assert_eq!(
        settings.redis.address.expose(),
        "redis://:hunter2@localhost:6379"
    );
    assert_eq!(
        settings.source_of("redis.address"),
        Some(&Origin::SpringFallback {
            keys: vec![
                ("spring.data.redis.host".into(), Origin::Default),
                ("spring.data.redis.port".into(), Origin::Default),
                (
                    "spring.data.redis.password".into(),
                    Origin::Env("SPRING_DATA_REDIS_PASSWORD".into())
                ),
            ]
        })
    );
    // Database 0 and an empty password add nothing; TLS off is redis://.
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[spring.data.redis]\nhost = \"h\"\ndatabase = 0\npassword = \"\"\n\
         [spring.data.redis.ssl]\nenabled = false\n",
    );
    assert_eq!(
        load(&env(&[]).toml_file(&path)).redis.address.expose(),
        "redis://h:6379"
    );
}

#[test]
fn bad_spring_combinations_fail_naming_the_keys() {
    const COMBINATIONS: &str = "accepted: one of spring.data.redis.url; \
         spring.data.redis.host/port; spring.data.redis.sentinel.master with \
         spring.data.redis.sentinel.nodes; spring.data.redis.cluster.nodes (the last three with \
         spring.data.redis.username, password, database and ssl.enabled; a cluster with \
         database 0 only) — or telco.platform.lock.redis.address, which wins over every Spring \
         key";
    let master = ("SPRING_DATA_REDIS_SENTINEL_MASTER", "mymaster");
    let sentinels = ("SPRING_DATA_REDIS_SENTINEL_NODES", "s1:26379,s2:26379");
    let cluster = ("SPRING_DATA_REDIS_CLUSTER_NODES", "c1:7000,c2:7001");
    for (vars, key, var, value, problem, accepted) in [
        (
            vec![master],
            "spring.data.redis.sentinel.master",
            "SPRING_DATA_REDIS_SENTINEL_MASTER",
            "\"mymaster\"",
            "spring.data.redis.sentinel.nodes is not set; a Sentinel address needs both the \
             master name and the sentinels",
            COMBINATIONS,
        ),
        (
            vec![sentinels],
            "spring.data.redis.sentinel.nodes",
            "SPRING_DATA_REDIS_SENTINEL_NODES",
            "\"s1:26379,s2:26379\"",
            "spring.data.redis.sentinel.master is not set; a Sentinel address needs both the \
             master name and the sentinels",
            COMBINATIONS,
        ),
        (
            vec![master, sentinels, cluster],
            "spring.data.redis.cluster.nodes",
            "SPRING_DATA_REDIS_CLUSTER_NODES",
            "\"c1:7000,c2:7001\"",
            "spring.data.redis.sentinel.master (from environment variable \
             SPRING_DATA_REDIS_SENTINEL_MASTER) is set too; a deployment is either Sentinel or \
             Cluster, so set only one of them",
            COMBINATIONS,
        ),
        (
            vec![sentinels, cluster],
            "spring.data.redis.cluster.nodes",
            "SPRING_DATA_REDIS_CLUSTER_NODES",
            "\"c1:7000,c2:7001\"",
            "spring.data.redis.sentinel.nodes (from environment variable \
             SPRING_DATA_REDIS_SENTINEL_NODES) is set too; a deployment is either Sentinel or \
             Cluster",
            COMBINATIONS,
        ),
        (
            vec![cluster, ("SPRING_DATA_REDIS_DATABASE", "3")],
            "spring.data.redis.database",
            "SPRING_DATA_REDIS_DATABASE",
            "\"3\"",
            "a Redis Cluster has only database 0, and spring.data.redis.cluster.nodes (from \
             environment variable SPRING_DATA_REDIS_CLUSTER_NODES) is set",
            "accepted: a database number from 0 to 255 (0 only with \
             spring.data.redis.cluster.nodes)",
        ),
        (
            vec![
                master,
                sentinels,
                ("SPRING_DATA_REDIS_HOST", "redis.internal"),
            ],
            "spring.data.redis.host",
            "SPRING_DATA_REDIS_HOST",
            "\"redis.internal\"",
            "spring.data.redis.sentinel.nodes (from environment variable \
             SPRING_DATA_REDIS_SENTINEL_NODES) is set too; host/port name one server and the \
             nodes a Sentinel group, so which Redis the lock should use is ambiguous: remove \
             spring.data.redis.host/port, or set telco.platform.lock.redis.address",
            COMBINATIONS,
        ),
        (
            vec![cluster, ("SPRING_DATA_REDIS_PORT", "6379")],
            "spring.data.redis.port",
            "SPRING_DATA_REDIS_PORT",
            "\"6379\"",
            "spring.data.redis.cluster.nodes (from environment variable \
             SPRING_DATA_REDIS_CLUSTER_NODES) is set too; host/port name one server and the \
             nodes a Redis Cluster",
            COMBINATIONS,
        ),
        (
            vec![
                master,
                sentinels,
                ("SPRING_DATA_REDIS_URL", "redis://app:hunter2@cache:6379"),
            ],
            "spring.data.redis.url",
            "SPRING_DATA_REDIS_URL",
            "\"redis://app:***@cache:6379\"",
            "spring.data.redis.sentinel.master (from environment variable \
             SPRING_DATA_REDIS_SENTINEL_MASTER) is set too, so which Redis the lock should use \
             is ambiguous (Spring Boot would use the Sentinel settings and ignore the URL); \
             remove one, or set telco.platform.lock.redis.address",
            COMBINATIONS,
        ),
        (
            vec![cluster, ("SPRING_DATA_REDIS_URL", "redis://cache:6379")],
            "spring.data.redis.url",
            "SPRING_DATA_REDIS_URL",
            "\"redis://cache:6379\"",
            "spring.data.redis.cluster.nodes (from environment variable \
             SPRING_DATA_REDIS_CLUSTER_NODES) is set too, so which Redis the lock should use is \
             ambiguous (Spring Boot would use the Cluster settings and ignore the URL)",
            COMBINATIONS,
        ),
        (
            vec![
                master,
                ("SPRING_DATA_REDIS_SENTINEL_NODES", "s1:26379,,s2:26379"),
            ],
            "spring.data.redis.sentinel.nodes",
            "SPRING_DATA_REDIS_SENTINEL_NODES",
            "\"s1:26379,,s2:26379\"",
            "entry 2 (\"\"): empty; host:port is required",
            "accepted: comma-separated host:port pairs, e.g. s1:26379,s2:26379",
        ),
        (
            vec![("SPRING_DATA_REDIS_CLUSTER_NODES", "c1:7000,c2")],
            "spring.data.redis.cluster.nodes",
            "SPRING_DATA_REDIS_CLUSTER_NODES",
            "\"c1:7000,c2\"",
            "entry 2 (\"c2\"): the port is missing; host:port is required",
            "(host names or IPv4 addresses, ports 1 to 65535; in TOML also an array of strings)",
        ),
        (
            vec![("SPRING_DATA_REDIS_CLUSTER_NODES", "[::1]:7000")],
            "spring.data.redis.cluster.nodes",
            "SPRING_DATA_REDIS_CLUSTER_NODES",
            "\"[::1]:7000\"",
            "entry 1 (\"[::1]:7000\"): an IPv6 address is not accepted here",
            "accepted: comma-separated host:port pairs",
        ),
        (
            vec![("SPRING_DATA_REDIS_CLUSTER_NODES", " ")],
            "spring.data.redis.cluster.nodes",
            "SPRING_DATA_REDIS_CLUSTER_NODES",
            "\" \"",
            "empty; at least one host:port is required",
            "accepted: comma-separated host:port pairs",
        ),
        (
            vec![("SPRING_DATA_REDIS_SENTINEL_MASTER", " "), sentinels],
            "spring.data.redis.sentinel.master",
            "SPRING_DATA_REDIS_SENTINEL_MASTER",
            "\" \"",
            "empty; the master name is required",
            "accepted: a Sentinel master name, e.g. mymaster",
        ),
        (
            vec![
                ("SPRING_DATA_REDIS_HOST", "h"),
                ("SPRING_DATA_REDIS_DATABASE", "256"),
            ],
            "spring.data.redis.database",
            "SPRING_DATA_REDIS_DATABASE",
            "\"256\"",
            "not a database number from 0 to 255",
            "accepted: a database number from 0 to 255",
        ),
        (
            vec![("SPRING_DATA_REDIS_SSL_ENABLED", "yes")],
            "spring.data.redis.ssl.enabled",
            "SPRING_DATA_REDIS_SSL_ENABLED",
            "\"yes\"",
            "not a boolean",
            "accepted: true or false",
        ),
    ] {
        let error = load_err(&env(&vars));
        let message = error.to_string();
        assert_mentions(
            &message,
            &[
                &format!("{key} = {value} (from environment variable {var}): {problem}"),
                accepted,
            ],
        );
        assert_eq!(error.key(), Some(key), "{message}");
        assert_eq!(
            error.origin().map(ToString::to_string),
            Some(format!("environment variable {var}")),
            "{message}"
        );
        assert_no_secret(&message);
    }

    // A password is never shown, even when it is the value in error.
    let files = Files::new();
    let path = files.write(
        "app.toml",
        "[spring.data.redis]\nhost = \"h\"\npassword = 1234\n",
    );
    let error = load_err(&env(&[]).toml_file(&path));
    assert_eq!(
        error.to_string(),
        format!(
            "spring.data.redis.password = *** (from {}): not a string (quote it); accepted: a \
             password string (special characters are percent-encoded into the URL)",
            toml_origin(&path)
        )
    );
    // In TOML, an array of nodes must hold strings.
    let path = files.write(
        "nodes.toml",
        "[spring.data.redis.cluster]\nnodes = [\"c1:7000\", 7001]\n",
    );
    assert_mentions(
        &error_message(&env(&[]).toml_file(&path)),
        &[
            "spring.data.redis.cluster.nodes = an array of 2 items (from TOML file",
            "an entry of the array is not a string",
        ],
    );
}

#[test]
fn the_ca_file_needs_tls_and_a_readable_pem_file() {
    let files = Files::new();
    let ca = files.write("ca.pem", CA_PEM);
    let ca_text = ca.display().to_string();
    let tls = (
        "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
        "rediss://redis.internal:6380",
    );

    let settings = load(&env(&[
        tls,
        ("TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE", &ca_text),
    ]));
    assert_eq!(settings.redis.tls_ca_file.as_deref(), Some(ca.as_path()));
    assert_eq!(
        settings.source_of("redis.tls.ca-file"),
        Some(&Origin::Env("TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE".into()))
    );
    assert_eq!(
        settings.describe("redis.tls.ca-file").unwrap(),
        format!(
            "telco.platform.lock.redis.tls.ca-file = {ca_text:?} from environment variable \
             TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE"
        )
    );
    let default = load(&env(&[tls]));
    assert_eq!(default.redis.tls_ca_file, None);
    assert_eq!(
        default.describe("redis.tls.ca-file").unwrap(),
        "telco.platform.lock.redis.tls.ca-file = none (the system's root certificates) from \
         default"
    );

    // With a TLS address built from Spring keys, and from a TOML file.
    let path = files.write(
        "app.toml",
        &format!(
            "[telco.platform.lock.redis.tls]\nca-file = {ca_text:?}\n\
             [spring.data.redis]\nhost = \"redis.internal\"\nssl.enabled = true\n"
        ),
    );
    let settings = load(&env(&[]).toml_file(&path));
    assert_eq!(
        settings.redis.address.expose(),
        "rediss://redis.internal:6379"
    );
    assert_eq!(settings.redis.tls_ca_file.as_deref(), Some(ca.as_path()));

    // Without TLS: both keys named, with their sources.
    let error = load_err(&env(&[("TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE", &ca_text)]));
    assert_eq!(
        error.to_string(),
        format!(
            "telco.platform.lock.redis.tls.ca-file = {ca_text:?} (from environment variable \
             TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE): telco.platform.lock.redis.address = \
             redis://localhost:6379 (from default) does not use TLS, so a CA file would not be \
             used; use rediss://, rediss-sentinel:// or rediss-cluster:// (or \
             spring.data.redis.ssl.enabled = true for an address built from Spring keys), or \
             remove telco.platform.lock.redis.tls.ca-file; accepted: a path (relative to the \
             working directory) to a readable PEM file with at least one CA certificate, \
             together with a rediss://, rediss-sentinel:// or rediss-cluster:// address"
        )
    );
    assert_eq!(error.key(), Some("telco.platform.lock.redis.tls.ca-file"));
    let error = load_err(&env(&[
        ("TELCO_PLATFORM_LOCK_REDIS_TLS_CAFILE", ca_text.as_str()),
        (
            "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
            "redis-sentinel://:hunter2@s1?sentinelServiceName=m",
        ),
    ]));
    assert_mentions(
        &error.to_string(),
        &[
            "(from environment variable TELCO_PLATFORM_LOCK_REDIS_TLS_CAFILE): \
             telco.platform.lock.redis.address = redis-sentinel://:***@s1?sentinelServiceName=m \
             (from environment variable TELCO_PLATFORM_LOCK_REDIS_ADDRESS) does not use TLS",
        ],
    );
    assert_no_secret(&error.to_string());

    // The file itself.
    let dir = files.dir.path().display().to_string();
    let not_pem = files.write("ca.der", "\u{30}\u{82}binary");
    let missing = files.dir.path().join("missing.pem").display().to_string();
    let not_pem = not_pem.display().to_string();
    for (value, problem) in [
        (missing.as_str(), "the file does not exist"),
        (
            "certs/none-such.pem",
            "the file does not exist (relative to the working directory ",
        ),
        (dir.as_str(), "it is a directory, not a file"),
        (
            not_pem.as_str(),
            "the file holds no PEM certificate (no -----BEGIN CERTIFICATE----- line)",
        ),
        ("", "empty; a path is required"),
    ] {
        let error = load_err(&env(&[
            tls,
            ("TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE", value),
        ]));
        assert_mentions(
            &error.to_string(),
            &[
                &format!(
                    "telco.platform.lock.redis.tls.ca-file = {value:?} (from environment \
                     variable TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE): {problem}"
                ),
                "; accepted: a path (relative to the working directory) to a readable PEM file",
            ],
        );
    }
    // Not a string, and a tls that is not a table.
    let number = files.write(
        "number.toml",
        "[telco.platform.lock.redis]\naddress = \"rediss://h\"\ntls.ca-file = 5\n",
    );
    assert_mentions(
        &error_message(&env(&[]).toml_file(&number)),
        &[
            "telco.platform.lock.redis.tls.ca-file = 5 (from TOML file",
            "not a string (quote it)",
        ],
    );
    let flat = files.write("flat.toml", "[telco.platform.lock.redis]\ntls = true\n");
    assert_mentions(
        &error_message(&env(&[]).toml_file(&flat)),
        &[
            "telco.platform.lock.redis.tls = true (from TOML file",
            "not a table; accepted: a table [telco.platform.lock.redis.tls] with the keys ca-file",
        ],
    );
    // A TLS switch that does not exist points at the scheme.
    let enabled = files.write(
        "enabled.toml",
        "[telco.platform.lock.redis.tls]\nenabled = true\n",
    );
    assert_mentions(
        &error_message(&env(&[]).toml_file(&enabled)),
        &[
            "unknown key telco.platform.lock.redis.tls.enabled = true (from TOML file",
            "TLS is chosen by the scheme of telco.platform.lock.redis.address (rediss://, \
             rediss-sentinel://, rediss-cluster://); the only TLS key is \
             telco.platform.lock.redis.tls.ca-file",
        ],
    );
    assert_mentions(
        &error_message(&env(&[("TELCO_PLATFORM_LOCK_REDIS_SSL", "true")])),
        &["the only TLS key is TELCO_PLATFORM_LOCK_REDIS_TLS_CA_FILE"],
    );
}

#[test]
fn replica_counts_and_sync_timeouts_out_of_bounds_are_named() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "TELCO_PLATFORM_LOCK_MIN_REPLICAS",
            "17",
            "larger than the maximum",
        ),
        (
            "TELCO_PLATFORM_LOCK_MIN_REPLICAS",
            "-1",
            "negative numbers are not accepted",
        ),
        (
            "TELCO_PLATFORM_LOCK_MIN_REPLICAS",
            "two",
            "not a whole number",
        ),
        (
            "TELCO_PLATFORM_LOCK_MIN_REPLICAS",
            "1.5",
            "not a whole number",
        ),
        (
            "TELCO_PLATFORM_LOCK_REPLICA_SYNC_TIMEOUT",
            "0s",
            "zero is not accepted",
        ),
        (
            "TELCO_PLATFORM_LOCK_REPLICA_SYNC_TIMEOUT",
            "11s",
            "longer than the maximum",
        ),
        (
            "TELCO_PLATFORM_LOCK_REPLICA_SYNC_TIMEOUT",
            "500",
            "a unit is required",
        ),
    ];
    for (name, value, problem) in cases {
        let message = error_message(&env(&[(name, value)]));
        let key = if name.ends_with("REPLICAS") {
            "telco.platform.lock.min-replicas"
        } else {
            "telco.platform.lock.replica-sync-timeout"
        };
        let accepted = if name.ends_with("REPLICAS") {
            "accepted: a whole number from 0 to 16"
        } else {
            "from 1 ms to 10 s"
        };
        assert_mentions(
            &message,
            &[
                key,
                &format!("(from environment variable {name})"),
                problem,
                accepted,
            ],
        );
    }
    // A TOML integer and the environment's digits are the same value.
    let files = Files::new();
    let path = files.write("app.toml", "[telco.platform.lock]\nmin-replicas = 2\n");
    assert_eq!(load(&env(&[]).toml_file(&path)).min_replicas, 2);
    assert_eq!(
        load(&env(&[("TELCO_PLATFORM_LOCK_MINREPLICAS", " 3 ")])).min_replicas,
        3
    );
    let defaults = load(&env(&[]));
    assert_eq!(defaults.min_replicas, 0);
    assert_eq!(defaults.replica_sync_timeout, Duration::from_secs(1));
    assert_eq!(defaults.fair_waiter_timeout, Duration::from_secs(5));
}

#[test]
fn fair_waiter_timeout_is_read_and_checked() {
    let settings = load(&env(&[("TELCO_PLATFORM_LOCK_FAIRWAITERTIMEOUT", "1500ms")]));
    assert_eq!(settings.fair_waiter_timeout, Duration::from_millis(1500));
    for (value, problem) in [
        ("100ms", "shorter than the minimum"),
        ("6m", "longer than the maximum"),
        ("5", "a unit is required"),
    ] {
        let message = error_message(&env(&[("TELCO_PLATFORM_LOCK_FAIR_WAITER_TIMEOUT", value)]));
        assert_mentions(
            &message,
            &[
                "telco.platform.lock.fair-waiter-timeout",
                "(from environment variable TELCO_PLATFORM_LOCK_FAIR_WAITER_TIMEOUT)",
                problem,
                "from 300 ms to 5 min",
            ],
        );
    }
}

/// Spring's user name and password go into the address percent-encoded whole, `%` included, so
/// the Redis client (which percent-decodes the user part) gets them as written: `pa%41ss` stays
/// `pa%41ss`, not `paAss`.
#[test]
fn spring_credentials_are_percent_encoded_whole() {
    for (user, password, user_part) in [
        ("app", "pa%41ss", "app:pa%2541ss"),
        ("app", "100%", "app:100%25"),
        ("app", "a+b", "app:a%2Bb"),
        ("app", "p@ss:w/rd?#", "app:p%40ss%3Aw%2Frd%3F%23"),
        ("app", "späß", "app:sp%C3%A4%C3%9F"),
        ("app", "a b'\"`", "app:a%20b%27%22%60"),
        ("us%41er", "x-y_z.~", "us%2541er:x-y_z.~"),
        ("u@s:r", "pw", "u%40s%3Ar:pw"),
    ] {
        let settings = load(&env(&[
            ("SPRING_DATA_REDIS_HOST", "redis.internal"),
            ("SPRING_DATA_REDIS_USERNAME", user),
            ("SPRING_DATA_REDIS_PASSWORD", password),
        ]));
        let address = &settings.redis.address;
        assert_eq!(
            address.expose(),
            format!("redis://{user_part}@redis.internal:6379"),
            "{user:?}/{password:?}"
        );
        let user_shown = user_part.split(':').next().unwrap();
        assert_eq!(
            address.to_string(),
            format!("redis://{user_shown}:***@redis.internal:6379")
        );
    }
}

/// The reviewer's case: a blank in the password of an address with a bad port. Everything
/// from the user part's `:` to its last `@` is hidden, whatever it contains.
#[test]
fn a_password_with_a_blank_in_a_bad_address_is_hidden() {
    let error = load_err(&env(&[(
        "TELCO_PLATFORM_LOCK_REDIS_ADDRESS",
        "redis://app:hunter2 word@127.0.0.1:99999",
    )]));
    assert_eq!(
        error.to_string(),
        "telco.platform.lock.redis.address = \"redis://app:***@127.0.0.1:99999\" (from \
         environment variable TELCO_PLATFORM_LOCK_REDIS_ADDRESS): the port is not a number \
         from 1 to 65535; accepted: "
            .to_owned()
            + lock_starter::config::KEYS
                .iter()
                .find(|spec| spec.name == "telco.platform.lock.redis.address")
                .unwrap()
                .accepted
    );
    for password in [
        "hunter2 x",
        "x hunter2",
        "hunter2`x",
        "hunter2'x",
        "x\"hunter2",
        "hunter2\u{2028}x",
        "hunter2\r\nx",
        "hunter2#x",
        "x?hunter2",
        "x/hunter2",
        "x://hunter2",
        "x@hunter2",
        "hunter2%zz",
    ] {
        for address in [
            format!("redis://app:{password}@127.0.0.1:99999"),
            format!("redis://app:{password}@127.0.0.1:port"),
            format!("redis://app:{password}@127.0.0.1/x"),
            format!("redis-sentinel://app:{password}@127.0.0.1:26379"),
            format!("redis-sentinel://h?sentinelServiceName=m&sentinelPassword={password}&x=1"),
            format!("redis://{password}@127.0.0.1/x"),
            format!("app:{password}@127.0.0.1:6379"),
        ] {
            for vars in [
                [("TELCO_PLATFORM_LOCK_REDIS_ADDRESS", address.as_str())],
                [("SPRING_DATA_REDIS_URL", address.as_str())],
            ] {
                match LockSettings::load(&env(&vars)) {
                    Err(error) => {
                        assert_no_secret(&error.to_string());
                        assert_no_secret(&format!("{error:?}"));
                    }
                    Ok(settings) => {
                        assert_no_secret(&format!("{settings:?}"));
                        assert_no_secret(&settings.describe("redis.address").unwrap());
                        assert_no_secret(&format!("{:?}", settings.warnings()));
                    }
                }
            }
        }
    }
}

/// The examples a duration key's errors quote ("such as 2s or 500ms") are values the key
/// accepts: an example outside the key's range would send the reader from one error to the next.
#[test]
fn every_duration_example_in_an_error_is_accepted_by_its_key() {
    let mut checked = 0;
    for spec in KEYS.iter().filter(|spec| spec.kind == ValueKind::Duration) {
        let examples = spec
            .accepted
            .split_once("such as ")
            .and_then(|(_, rest)| rest.split_once(", from "))
            .map(|(examples, _)| examples)
            .unwrap_or_else(|| panic!("{}: no examples in {:?}", spec.name, spec.accepted));
        for example in examples
            .split([',', ' '])
            .filter(|w| !w.is_empty() && *w != "or")
        {
            let env = [(spec.env_name(), example.to_owned())];
            let loaded = LockSettings::load(&ConfigSources::new().env_from(env));
            assert!(
                loaded.is_ok(),
                "{} quotes {example} as an example, but rejects it: {}",
                spec.name,
                loaded.unwrap_err()
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} examples found");
}
