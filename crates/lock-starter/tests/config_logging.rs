// Own binary: its scoped capture would race `it`'s config tests first hitting the same call sites.

//! The warnings of loading are logged with `tracing::warn!` as well as kept in
//! `LockSettings::warnings`.

use lock_starter::config::{ConfigSources, LockSettings};
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_testkit::logs::CapturedLogs;

#[test]
fn warnings_are_logged_as_they_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.toml");
    std::fs::write(&path, "[telco.platform.lok]\nwait-time = \"2s\"\n").unwrap();
    let sources = ConfigSources::new()
        .env_from([
            ("SPRING_DATA_REDIS_SENTINEL_PASSWORD", "hunter2"),
            ("TELCO_PLATFROM_LOCK_ENABLED", "false"),
        ])
        .toml_file(&path);

    let (captured, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    let settings = tracing::subscriber::with_default(subscriber, || {
        LockSettings::load(&sources).unwrap_or_else(|e| panic!("{e}"))
    });
    let logged = captured.text();

    let warnings = settings.warnings();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings[0].starts_with("environment variable TELCO_PLATFROM_LOCK_ENABLED "));
    assert!(warnings[1].starts_with("key telco.platform.lok.wait-time (from TOML file"));
    assert!(warnings[2].contains("environment variable SPRING_DATA_REDIS_SENTINEL_PASSWORD"));
    let lines: Vec<&str> = logged.lines().collect();
    assert_eq!(
        lines.len(),
        warnings.len(),
        "one line per warning:\n{logged}"
    );
    for (line, warning) in lines.iter().zip(warnings) {
        assert!(
            line.contains(" WARN ") && line.ends_with(warning.as_str()),
            "{warning:?} not logged as a warning:\n{logged}"
        );
    }
    assert!(!logged.contains("hunter2"), "{logged}");
    assert!(!logged.contains("false"), "no values: {logged}");
}

/// A section whose name is refused fails the load naming it; its keys are not also warned
/// about as unknown keys "ignored".
#[test]
fn a_refused_section_name_is_an_error_and_no_warning() {
    for toml in [
        "[telco.platform.lock.rate-limits.\"my.api\"]\nrate = \"5/1s\"\n",
        "[telco.platform.lock.rate-limits.\" api\"]\nrate = \"5/1s\"\n",
        "[telco.platform.lock.caches.\"a\\u0007b\"]\nttl = \"5s\"\n",
    ] {
        let sources = ConfigSources::from_figment(Figment::from(Toml::string(toml)))
            .env_from([("POD_NAME", "pod-1")]);
        let (captured, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
        let error = tracing::subscriber::with_default(subscriber, || {
            LockSettings::load(&sources).map(|_| ()).unwrap_err()
        });
        assert!(error.to_string().contains("the name"), "{toml}: {error}");
        assert_eq!(captured.text(), "", "{toml}: {error}");
    }
}
