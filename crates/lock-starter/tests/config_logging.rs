// Own binary: its scoped capture would race `it`'s config tests first hitting the same call sites.

//! The warnings of loading are logged with `tracing::warn!` as well as kept in
//! `LockSettings::warnings`.

use lock_starter::config::{ConfigSources, LockSettings};
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
