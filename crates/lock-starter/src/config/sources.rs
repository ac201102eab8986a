//! Which sources are read and in which order: TOML files, consumer figments, the environment.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use figment::providers::{Format, Toml};

use figment::{Figment, Metadata, Provider};

use super::error::{ConfigError, one_line_message};
use super::keys::{
    ENV_PREFIX, KEYS, KeySpec, NAMED_KEYS, SPRING_KEYS, hint_part, near_miss_of_prefix, normalize,
};
use super::load::{Parsed, check_tables, fixed, quote};
use super::origin::{ENV_PROVIDER, HostEnv};

/// The sources [`LockSettings::load`](super::LockSettings::load) reads, later winning over
/// earlier: built-in defaults, then the TOML files and figments in the order they were added,
/// then the environment (always last, when enabled).
///
/// [`new()`](Self::new) reads the defaults and the process environment; add files with
/// [`toml_file`](Self::toml_file). [`from_figment`](Self::from_figment) reads a consumer's figment
/// instead, without the environment unless [`env(true)`](Self::env) is added. Tests hand in their
/// variables with [`env_from`](Self::env_from), so they never touch the process environment.
///
/// # Examples
///
/// ```
/// use lock_starter::config::{ConfigSources, LockSettings};
///
/// # fn main() -> Result<(), lock_starter::config::ConfigError> {
/// // In a service: `ConfigSources::new().toml_file("config/app.toml")`.
/// let sources = ConfigSources::new().env_from([("TELCO_PLATFORM_LOCK_WAIT_TIME", "2s")]);
/// let settings = LockSettings::load(&sources)?;
/// assert_eq!(settings.wait_time, std::time::Duration::from_secs(2));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ConfigSources {
    layers: Vec<Layer>,
    env: EnvInput,
}

#[derive(Clone)]
enum Layer {
    Toml(PathBuf),
    Figment(Box<Figment>),
}

#[derive(Clone)]
enum EnvInput {
    Off,
    Process,
    Vars(BTreeMap<String, String>),
}

impl ConfigSources {
    /// The standard sources: built-in defaults and the process environment. Add TOML files with
    /// [`toml_file`](Self::toml_file).
    pub fn new() -> Self {
        ConfigSources {
            layers: Vec::new(),
            env: EnvInput::Process,
        }
    }

    /// A consumer's own figment instead of the standard sources: the figment is read like a TOML
    /// file (same key layout, unknown keys under `telco.platform.lock` warned about) and the
    /// environment is **not** read, as with [`LockSettings::from_figment`](super::LockSettings::from_figment).
    /// Add [`env(true)`](Self::env) to layer the environment on top, or more files or figments.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    /// use lock_starter::figment::{Figment, providers::{Format, Toml}};
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// let service_config = Figment::from(Toml::string("[telco.platform.lock]\nkey-prefix = \"billing:lock:\"\n"));
    /// let settings = LockSettings::load(&ConfigSources::from_figment(service_config))?;
    /// assert_eq!(settings.key_prefix, "billing:lock:");
    /// assert_eq!(settings.source_of("key-prefix").unwrap().to_string(), "TOML source string");
    /// # Ok(()) }
    /// ```
    pub fn from_figment(figment: Figment) -> Self {
        ConfigSources {
            layers: vec![Layer::Figment(Box::new(figment))],
            env: EnvInput::Off,
        }
    }

    /// Adds a TOML file, read after the files and figments added before it. The file must
    /// exist: a missing file is an error naming the path (see
    /// [`ConfigError::MissingFile`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_starter::config::{ConfigSources, LockSettings, Origin};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let (base, prod) = (dir.path().join("lock.toml"), dir.path().join("lock-prod.toml"));
    /// std::fs::write(&base, "[telco.platform.lock]\nwait-time = \"2s\"\nkey-prefix = \"billing:\"\n")?;
    /// std::fs::write(&prod, "[telco.platform.lock]\nwait-time = \"10s\"\n")?;
    ///
    /// let sources = ConfigSources::new().toml_file(&base).toml_file(&prod).env_from([("POD_NAME", "billing-7f9c")]);
    /// let settings = LockSettings::load(&sources)?;
    /// assert_eq!(settings.wait_time, Duration::from_secs(10)); // the later file wins
    /// assert_eq!(settings.key_prefix, "billing:");
    /// assert!(matches!(settings.source_of("wait-time"), Some(Origin::File { path, .. }) if *path == prod));
    /// # Ok(()) }
    /// ```
    pub fn toml_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.layers.push(Layer::Toml(path.into()));
        self
    }

    /// Adds a consumer's figment, read after the files and figments added before it. Its values
    /// are reported as coming from its providers' metadata.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_starter::config::{ConfigSources, LockSettings};
    /// use lock_starter::figment::{Figment, providers::Serialized};
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// // A value the service computes, layered over the files, under the environment.
    /// let computed = Figment::from(Serialized::default("telco.platform.lock.wait-time", "250ms"));
    /// let sources = ConfigSources::new().figment(computed).env_from([("POD_NAME", "billing-7f9c")]);
    /// assert_eq!(LockSettings::load(&sources)?.wait_time, Duration::from_millis(250));
    /// # Ok(()) }
    /// ```
    pub fn figment(mut self, figment: Figment) -> Self {
        self.layers.push(Layer::Figment(Box::new(figment)));
        self
    }

    /// Reads the process environment (`true`, the default of [`new`](Self::new)) or no
    /// environment (`false`, the default of [`from_figment`](Self::from_figment)).
    ///
    /// `POD_NAME` and `HOSTNAME` (the default instance id) are read from the process either way.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings};
    /// use lock_starter::figment::Figment;
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// // A tool that takes its settings from files only, whatever TELCO_PLATFORM_LOCK_* says:
    /// let files_only = ConfigSources::new().env(false);
    /// let settings = LockSettings::load(&files_only)?;
    /// assert!(settings.source_of("wait-time").unwrap().is_default());
    ///
    /// // The service's own figment, with the environment on top after all:
    /// let layered = ConfigSources::from_figment(Figment::new()).env(true);
    /// # let _ = layered;
    /// # Ok(()) }
    /// ```
    pub fn env(mut self, read: bool) -> Self {
        self.env = if read {
            EnvInput::Process
        } else {
            EnvInput::Off
        };
        self
    }

    /// Reads these variables instead of the process environment, for tests and for services
    /// that assemble their environment themselves. They replace the process environment
    /// entirely, `POD_NAME` and `HOSTNAME` included; a name given twice keeps the last value.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::config::{ConfigSources, LockSettings, Origin};
    ///
    /// # fn main() -> Result<(), lock_starter::config::ConfigError> {
    /// // A test of a service's start-up, whatever the process environment holds:
    /// let sources = ConfigSources::new().env_from([
    ///     ("TELCO_PLATFORM_LOCK_ENABLED", "false"),
    ///     ("HOSTNAME", "billing-7f9c"),
    /// ]);
    /// let settings = LockSettings::load(&sources)?;
    /// assert!(!settings.enabled);
    /// assert_eq!(settings.instance_id, "billing-7f9c");
    /// assert_eq!(settings.source_of("instance-id"), Some(&Origin::DefaultFromEnv("HOSTNAME".into())));
    /// # Ok(()) }
    /// ```
    pub fn env_from<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env = EnvInput::Vars(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        self
    }

    /// Reads every source into one figment, and the variables the defaults need.
    pub(crate) fn build(&self) -> Result<(Figment, HostEnv), ConfigError> {
        let mut figment = Figment::new();
        for layer in &self.layers {
            let layer = match layer {
                Layer::Toml(path) => toml_file(path)?,
                Layer::Figment(other) => other.as_ref().clone(),
            };
            // Each source by itself: a later one must not hide a scalar where a table belongs.
            check_tables(&layer)?;
            figment = figment.merge(layer);
        }
        let host_env = match &self.env {
            EnvInput::Off => {
                let mut host_env = HostEnv::process();
                let unread: Vec<String> = std::env::vars_os()
                    .filter_map(|(name, _)| name.into_string().ok())
                    .filter(|name| name.starts_with(ENV_PREFIX))
                    .collect();
                if !unread.is_empty() {
                    host_env.warnings.push(format!(
                        "environment variables {} are set but not read: these sources read no \
                         environment (a figment handed in replaces it); add .env(true) to a \
                         ConfigSources to read them",
                        unread.join(", ")
                    ));
                }
                host_env
            }
            EnvInput::Process => {
                let mut vars = BTreeMap::new();
                for (name, value) in std::env::vars_os() {
                    let Ok(name) = name.into_string() else {
                        continue;
                    };
                    match value.into_string() {
                        Ok(value) => vars.insert(name, value),
                        // Read lossily, a value the lock reads (a password) would be another.
                        Err(_) if is_read(&name) => {
                            return Err(ConfigError::NotUtf8Env { variable: name });
                        }
                        Err(value) => vars.insert(name, value.to_string_lossy().into_owned()),
                    };
                }
                let mut host_env = HostEnv::process();
                figment = merge_env(figment, &vars, &mut host_env)?;
                host_env
            }
            EnvInput::Vars(vars) => {
                let mut host_env = HostEnv::with(|name| vars.get(name).cloned());
                figment = merge_env(figment, vars, &mut host_env)?;
                host_env
            }
        };
        Ok((figment, host_env))
    }
}

impl Default for ConfigSources {
    /// The same as [`ConfigSources::new`]: defaults and the process environment.
    fn default() -> Self {
        ConfigSources::new()
    }
}

impl fmt::Debug for ConfigSources {
    /// Names the files and counts the variables; values (which may hold passwords) are not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for layer in &self.layers {
            match layer {
                Layer::Toml(path) => list.entry(&format_args!("TOML file {}", path.display())),
                Layer::Figment(_) => list.entry(&format_args!("figment")),
            };
        }
        match &self.env {
            EnvInput::Off => list.entry(&format_args!("no environment")),
            EnvInput::Process => list.entry(&format_args!("process environment")),
            EnvInput::Vars(vars) => list.entry(&format_args!("{} given variables", vars.len())),
        };
        list.finish()
    }
}

/// A TOML file, read and parsed up front so a missing or broken file is reported by path.
fn toml_file(path: &Path) -> Result<Figment, ConfigError> {
    let path = path.to_owned();
    let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ConfigError::MissingFile { path: path.clone() },
        _ => ConfigError::UnreadableFile {
            path: path.clone(),
            reason: e.to_string(),
        },
    })?;
    let data = Toml::string(&text)
        .data()
        .map_err(|e| ConfigError::InvalidToml {
            path: path.clone(),
            message: one_line_message(&e),
        })?;
    Ok(Figment::from(Parsed(
        Metadata::from("TOML file", path.as_path()),
        data,
    )))
}

/// The prefix of the Spring variables the lock reads.
const SPRING_ENV_PREFIX: &str = "SPRING_DATA_REDIS_";

/// Whether the variable `name` sets a key the lock reads (one of its own, or a Spring key for
/// Redis); others with its prefixes are warned of as unknown.
fn is_read(name: &str) -> bool {
    key_set_by(name).is_some() || named_key_set_by(name).is_some()
}

/// The key (its own or Spring's) the variable `name` sets, with its form's place in the key's
/// `env_names`.
fn key_set_by(name: &str) -> Option<(&'static KeySpec, usize)> {
    KEYS.iter().chain(SPRING_KEYS).find_map(|spec| {
        let form = spec.env_names().iter().position(|n| n == name)?;
        Some((spec, form))
    })
}

/// The named key (`rate-limits.<name>.rate`, …) the variable `name` sets: the spec, the
/// section's name and the form's place.
fn named_key_set_by(name: &str) -> Option<(&'static KeySpec, (String, usize))> {
    NAMED_KEYS
        .iter()
        .find_map(|spec| Some((spec, spec.name_in_env(name)?)))
}

/// The sections of `spec`'s table in `figment` whose name a variable spells as it spells
/// `name`, letters and digits compared alike (`my_api`, `My-Api` or `myapi` for `my-api`): a
/// variable sets the one that matches rather than a new one beside it. With none, or more than
/// one, the variable sets the section spelt as it is read (`my-api`).
fn sections_spelt(figment: &Figment, spec: &KeySpec, name: &str) -> Vec<String> {
    let Some((table, _)) = spec.name.split_once(".<") else {
        return Vec::new();
    };
    let Ok(figment::value::Value::Dict(_, sections)) = figment.find_value(table) else {
        return Vec::new();
    };
    // Tables only: a section written as a value fails the load, which the variable must not hide.
    sections
        .iter()
        .filter(|(section, value)| {
            normalize(section) == normalize(name)
                && matches!(value, figment::value::Value::Dict(..))
        })
        .map(|(section, _)| section.clone())
        .collect()
}

/// Maps the variables named after the keys onto them; a key set by both its forms with
/// different values is an error. A `TELCO_PLATFORM_LOCK_*` variable that names no key, or one
/// with a misspelt prefix, is a warning, like an unknown key in a file.
fn merge_env(
    mut figment: Figment,
    vars: &BTreeMap<String, String>,
    host_env: &mut HostEnv,
) -> Result<Figment, ConfigError> {
    // Per key (a named key with its name), the variables that set it, with their form's place
    // in the key's `env_names`.
    let mut by_key: BTreeMap<String, Vec<(usize, &String, &String)>> = BTreeMap::new();
    for (name, value) in vars {
        let (spec, named) = (key_set_by(name), named_key_set_by(name));
        if let Some((spec, form)) = spec {
            by_key
                .entry(spec.name.to_owned())
                .or_default()
                .push((form, name, value));
        } else if let Some((spec, (key_name, form))) = named {
            let key_name = match sections_spelt(&figment, spec, &key_name).as_slice() {
                [section] => section.clone(),
                // None, or several, which the load refuses: the variable's own spelling.
                _ => key_name,
            };
            by_key
                .entry(spec.for_name(&key_name))
                .or_default()
                .push((form, name, value));
        } else if let Some(rest) = name.strip_prefix(ENV_PREFIX) {
            host_env.warnings.push(format!(
                "unknown environment variable {name} is ignored: it names no key under \
                 telco.platform.lock{}",
                hint_part(rest, true, || format!(
                    "Accepted variables: {}",
                    known_env_names()
                ))
            ));
        } else if name.starts_with(SPRING_ENV_PREFIX) {
            host_env.spring_unread.push(name.clone());
        } else if name.split('_').count() > 3 {
            let prefix: Vec<&str> = name.splitn(4, '_').take(3).collect();
            if near_miss_of_prefix(&prefix, ENV_PREFIX.trim_end_matches('_')) {
                host_env.warnings.push(format!(
                    "environment variable {name} is ignored: the lock reads only variables \
                     starting with {ENV_PREFIX}"
                ));
            }
        }
    }
    for (key, mut set) in by_key {
        set.sort();
        let (_, name, value) = set[0];
        if let Some((_, other, other_value)) = set.iter().find(|(_, _, v)| *v != value) {
            let shown = |value: &str| {
                if key.contains("password") {
                    "***".to_owned()
                } else {
                    quote(value)
                }
            };
            return Err(ConfigError::ConflictingEnv {
                first: name.clone(),
                first_value: shown(value),
                second: (*other).clone(),
                second_value: shown(other_value),
                key,
            });
        }
        let metadata = Metadata::named(ENV_PROVIDER).source(name.clone());
        figment = figment.merge(fixed(metadata, &key, value));
    }
    Ok(figment)
}

/// The strict variable of every key, for "accepted variables" lists.
fn known_env_names() -> String {
    let names: Vec<String> = KEYS
        .iter()
        .chain(NAMED_KEYS)
        .chain(SPRING_KEYS)
        .map(KeySpec::env_name)
        .collect();
    format!(
        "{} (each also in Spring's form, with every dash of the key left out, e.g. \
         TELCO_PLATFORM_LOCK_WAITTIME)",
        names.join(", ")
    )
}
