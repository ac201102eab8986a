// Own binary: the jail sets real env vars and the cwd, seen by every test and child process.

//! The real process environment (`ConfigSources::env(true)`), inside figment's `Jail`, which
//! serialises access to the environment and restores it afterwards.

// `Jail` closures return `figment::Error`, which is large; it is figment's type, not ours.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use figment::Jail;
use lock_starter::config::{ConfigSources, LockSettings, Origin};

fn load(sources: &ConfigSources) -> figment::Result<LockSettings> {
    LockSettings::load(sources).map_err(|e| figment::Error::from(e.to_string()))
}

#[test]
fn the_process_environment_is_read_when_turned_on() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "app.toml",
            "[telco.platform.lock]\nwait-time = \"5s\"\nkey-prefix = \"file:\"\n",
        )?;
        jail.set_env("TELCO_PLATFORM_LOCK_WAITTIME", "750ms");
        jail.set_env("TELCO_PLATFORM_LOCK_ENABLED", "false");
        jail.set_env("SPRING_DATA_REDIS_HOST", "redis.internal");
        jail.set_env("POD_NAME", "jail-pod");

        let settings = load(&ConfigSources::new().toml_file("app.toml"))?;
        assert_eq!(settings.wait_time, Duration::from_millis(750));
        assert_eq!(
            settings.source_of("wait-time"),
            Some(&Origin::Env("TELCO_PLATFORM_LOCK_WAITTIME".into()))
        );
        assert_eq!(settings.key_prefix, "file:");
        assert_eq!(
            settings.source_of("key-prefix").unwrap().to_string(),
            "TOML file app.toml",
            "the path as given"
        );
        assert!(!settings.enabled);
        assert_eq!(
            settings.redis.address.expose(),
            "redis://redis.internal:6379"
        );
        assert_eq!(settings.instance_id, "jail-pod");

        // Off: the variables are not read, but POD_NAME still names the instance.
        let settings = load(&ConfigSources::new().toml_file("app.toml").env(false))?;
        assert_eq!(settings.wait_time, Duration::from_secs(5));
        assert!(settings.enabled);
        assert_eq!(settings.instance_id, "jail-pod");

        // A consumer's figment replaces the standard sources, environment included…
        let figment = figment::Figment::from(figment::providers::Serialized::default(
            "telco.platform.lock.key-prefix",
            "own:",
        ));
        let settings = load(&ConfigSources::from_figment(figment.clone()))?;
        assert_eq!(settings.key_prefix, "own:");
        assert!(settings.enabled);
        let settings = LockSettings::from_figment(&figment).unwrap();
        assert!(settings.enabled);
        // … unless the environment is asked for.
        let settings = load(&ConfigSources::from_figment(figment).env(true))?;
        assert!(!settings.enabled);
        assert_eq!(settings.wait_time, Duration::from_millis(750));

        // ConfigSources::default() is new().
        let settings = load(&ConfigSources::default().toml_file("app.toml").env(false))?;
        assert_eq!(settings.wait_time, Duration::from_secs(5));
        assert!(settings.enabled);
        assert_eq!(settings.instance_id, "jail-pod");

        // An unknown variable in the real environment is a warning with a suggestion.
        jail.set_env("TELCO_PLATFORM_LOCK_WATCHDOG", "30s");
        let settings = load(&ConfigSources::new())?;
        assert!(
            settings.warnings()[0].starts_with(
                "unknown environment variable TELCO_PLATFORM_LOCK_WATCHDOG is ignored"
            ),
            "{:?}",
            settings.warnings()
        );
        Ok(())
    });
}
