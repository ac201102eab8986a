//! Named rate limits in the configuration: read from files and variables, checked, and warned
//! about like every other key.

use lock_starter::config::{ConfigSources, LockSettings};
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};

fn load(toml: &str, env: &[(&str, &str)]) -> Result<LockSettings, String> {
    let sources = ConfigSources::from_figment(Figment::from(Toml::string(toml)))
        .env_from(env.iter().copied().chain([("POD_NAME", "pod-1")]));
    LockSettings::load(&sources).map_err(|e| e.to_string())
}

/// Each limit as `<name> <quota>`, in name order.
fn quotas(settings: &LockSettings) -> Vec<String> {
    settings
        .rate_limits
        .iter()
        .map(|(name, quota)| format!("{name} {quota}"))
        .collect()
}

#[test]
fn limits_are_read_from_files_and_variables() {
    let settings = load(
        "[telco.platform.lock.rate-limits.login]\nrate = \"5/1m\"\nburst = 2\n\
         [telco.platform.lock.rate-limits.api]\nrate = \"100/1s\"\n",
        &[
            ("TELCO_PLATFORM_LOCK_RATE_LIMITS_SIGN_UP_RATE", "3/1h"),
            ("TELCO_PLATFORM_LOCK_RATELIMITS_API_BURST", "20"),
        ],
    )
    .unwrap();
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
    let quotas = quotas(&settings);
    assert_eq!(
        quotas,
        [
            "api 100/1s, burst 20",
            "login 5/60s, burst 2",
            "sign-up 3/1h"
        ]
    );
}

/// Two variables that set one limit's key must agree, as for any key: its two forms, or two
/// spellings of the section's name.
#[test]
fn two_variables_setting_one_limit_must_agree() {
    let same = [
        ("TELCO_PLATFORM_LOCK_RATE_LIMITS_API_RATE", "10/1s"),
        ("TELCO_PLATFORM_LOCK_RATELIMITS_API_RATE", "10/1s"),
    ];
    assert_eq!(quotas(&load("", &same).unwrap()), ["api 10/1s"]);
    for (toml, vars) in [
        (
            "",
            [
                ("TELCO_PLATFORM_LOCK_RATE_LIMITS_API_RATE", "10/1s"),
                ("TELCO_PLATFORM_LOCK_RATELIMITS_API_RATE", "1000/1s"),
            ],
        ),
        (
            "[telco.platform.lock.rate-limits.my-api]\nrate = \"1/1s\"\n",
            [
                ("TELCO_PLATFORM_LOCK_RATE_LIMITS_MY_API_RATE", "10/1s"),
                ("TELCO_PLATFORM_LOCK_RATE_LIMITS_MYAPI_RATE", "1000/1s"),
            ],
        ),
    ] {
        let text = load(toml, &vars).unwrap_err();
        assert!(text.contains("is set twice in the environment"), "{text}");
        assert!(text.contains("\"1000/1s\""), "{text}");
    }
}

/// A batch above the burst is warned about: a refill takes at most the burst.
#[test]
fn a_local_batch_above_the_burst_is_a_warning() {
    let settings = load(
        "[telco.platform.lock.rate-limits.api]\nrate = \"100/1s\"\nburst = 3\nlocal-batch = 100\n\
         [telco.platform.lock.rate-limits.login]\nrate = \"100/1s\"\nlocal-batch = 100\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        settings.warnings(),
        [
            "telco.platform.lock.rate-limits.api.local-batch = 100 is above the limit's burst of 3: \
          a refill takes at most the burst, so batches are of 3"
        ]
    );
}

#[test]
fn bad_limits_name_the_key_the_value_and_what_is_accepted() {
    for (toml, expected) in [
        (
            "[telco.platform.lock.rate-limits.login]\nrate = \"5 per minute\"\n",
            "telco.platform.lock.rate-limits.login.rate = \"5 per minute\" (from TOML source string): no /; accepted: <count>/<period>",
        ),
        (
            "[telco.platform.lock.rate-limits.login]\nrate = \"0/1s\"\n",
            "rate-limits.login.rate = \"0/1s\" (from TOML source string): a count of 0 admits nothing",
        ),
        (
            "[telco.platform.lock.rate-limits.login]\nburst = 3\n",
            "rate-limits.login = a table {burst} (from TOML source string): each rate limit needs its rate, and telco.platform.lock.rate-limits.login.rate is not set",
        ),
        (
            "[telco.platform.lock.rate-limits.login]\nrate = \"1/1h\"\nburst = 0\n",
            "rate-limits.login.burst = 0 (from TOML source string): smaller than the minimum; accepted: a whole number from 1 to 1000000",
        ),
        (
            "[telco.platform.lock.rate-limits.login]\nrate = \"1/1h\"\nburst = 721\n",
            "rate-limits.login.burst = 721 (from TOML source string): at 1/1h it takes 721 h to refill; at most 720 h",
        ),
        (
            "[telco.platform.lock.rate-limits]\nlogin = \"5/1m\"\n",
            "rate-limits.login = \"5/1m\" (from TOML source string): a value where a table is expected; accepted: a table with the keys rate, burst, local-batch",
        ),
        (
            "[telco.platform.lock]\nrate-limits = 5\n",
            "telco.platform.lock.rate-limits = 5 (from TOML source string): a value where a table is expected; accepted: a table of named tables, each with the keys rate, burst, local-batch",
        ),
        (
            "[telco.platform.lock.rate-limits.login]\nrate = \"1/1h\"\nburst = 99999999999\n",
            "rate-limits.login.burst = 99999999999 (from TOML source string): larger than the maximum",
        ),
        (
            "[telco.platform.lock.rate-limits.login]\nrate = \"4294967296/1h\"\n",
            "a count of 4294967296 is above 4294967295",
        ),
    ] {
        let error = load(toml, &[]).unwrap_err();
        assert!(
            error.contains(expected),
            "{toml}:\n{error}\nexpected: {expected}"
        );
    }
}

#[test]
fn a_misspelt_key_of_a_limit_is_a_warning() {
    let settings = load(
        "[telco.platform.lock.rate-limits.login]\nrate = \"5/1m\"\nbrust = 2\n",
        &[],
    )
    .unwrap();
    let warnings = settings.warnings().join("\n");
    assert!(
        warnings.contains("unknown key telco.platform.lock.rate-limits.login.brust"),
        "{warnings}"
    );
}

#[test]
fn a_local_batch_is_read_and_off_by_default() {
    let settings = load(
        "[telco.platform.lock.rate-limits.api]\nrate = \"1000/1s\"\nlocal-batch = 50\n\
         [telco.platform.lock.rate-limits.login]\nrate = \"5/1m\"\n\
         [telco.platform.lock.rate-limits.off]\nrate = \"5/1m\"\nlocal-batch = 0\n",
        &[
            ("TELCO_PLATFORM_LOCK_RATE_LIMITS_SIGN_UP_LOCAL_BATCH", "7"),
            ("TELCO_PLATFORM_LOCK_RATE_LIMITS_SIGN_UP_RATE", "10/1s"),
        ],
    )
    .unwrap();
    assert!(settings.warnings().is_empty(), "{:?}", settings.warnings());
    let batches: Vec<String> = settings
        .rate_limit_batches
        .iter()
        .map(|(name, batch)| format!("{name} {batch}"))
        .collect();
    assert_eq!(batches, ["api 50", "sign-up 7"]);
}

#[test]
fn a_bad_local_batch_names_the_key_the_value_and_what_is_accepted() {
    for (toml, expected) in [
        (
            "[telco.platform.lock.rate-limits.api]\nrate = \"1/1s\"\nlocal-batch = 10001\n",
            "telco.platform.lock.rate-limits.api.local-batch = 10001 (from TOML source string): larger than the maximum; accepted: a whole number from 0 to 10000",
        ),
        (
            "[telco.platform.lock.rate-limits.api]\nrate = \"1/1s\"\nlocal-batch = -1\n",
            "rate-limits.api.local-batch = -1 (from TOML source string): smaller than the minimum; accepted: a whole number from 0 to 10000",
        ),
        (
            "[telco.platform.lock.rate-limits.api]\nrate = \"1/1s\"\nlocal-batch = \"many\"\n",
            "rate-limits.api.local-batch = \"many\" (from TOML source string): not a whole number",
        ),
        (
            "[telco.platform.lock.rate-limits.api]\nrate = \"1/1s\"\nlocal-batch = \"999999999999999999999999999999999999999999\"\n",
            "(from TOML source string): larger than the maximum; accepted: a whole number from 0 to 10000",
        ),
    ] {
        let error = load(toml, &[]).unwrap_err();
        assert!(
            error.contains(expected),
            "{toml}:\n{error}\nexpected: {expected}"
        );
    }
}

/// A variable sets the file's section whose name it spells, even when the file writes the name
/// with `_` or capitals, which a variable cannot: it does not start a second limit beside it.
#[test]
fn a_variable_sets_the_section_whose_name_it_spells() {
    let settings = load(
        "[telco.platform.lock.rate-limits.my_api]\nrate = \"4/1s\"\n\
         [telco.platform.lock.rate-limits.Partner-Feed]\nrate = \"2/1s\"\n",
        &[
            ("TELCO_PLATFORM_LOCK_RATE_LIMITS_MY_API_RATE", "9/1s"),
            ("TELCO_PLATFORM_LOCK_RATELIMITS_PARTNERFEED_BURST", "5"),
        ],
    )
    .unwrap();
    let quotas = quotas(&settings);
    assert_eq!(quotas, ["Partner-Feed 2/1s, burst 5", "my_api 9/1s"]);
}

/// A limit written as a value, not a table, fails the load naming it, and is not also warned
/// about as an unknown key; the accepted keys that warnings list include the named ones.
#[test]
fn a_limit_that_is_not_a_table_is_one_error_not_also_a_warning() {
    let (logs, subscriber) = lock_testkit::logs::CapturedLogs::scoped(tracing::Level::WARN);
    let error = tracing::subscriber::with_default(subscriber, || {
        load("[telco.platform.lock.rate-limits]\napi = \"10/1s\"\n", &[]).unwrap_err()
    });
    assert!(
        error.contains("telco.platform.lock.rate-limits.api")
            && error.contains("a value where a table is expected"),
        "{error}"
    );
    assert!(!logs.text().contains("unknown key"), "{}", logs.text());
    let settings = load("[telco.platform.lock]\nnewer-key = \"1s\"\n", &[]).unwrap();
    let warnings = settings.warnings().join("\n");
    assert!(warnings.contains("rate-limits.<name>.rate"), "{warnings}");
}

/// A variable does not hide a file's limit written as a value rather than a table.
#[test]
fn a_variable_does_not_hide_a_limit_that_is_not_a_table() {
    let error = load(
        "[telco.platform.lock.rate-limits]\nmy_api = \"10/1s\"\n",
        &[("TELCO_PLATFORM_LOCK_RATE_LIMITS_MY_API_RATE", "5/1s")],
    )
    .unwrap_err();
    assert!(
        error.contains("rate-limits.my_api") && error.contains("a value where a table is expected"),
        "{error}"
    );
}

/// Two sections spelt alike would be one limit on Redis with two quotas: they stop start-up,
/// whatever a variable sets.
#[test]
fn two_sections_spelt_alike_are_refused() {
    let error = load(
        "[telco.platform.lock.rate-limits.my-api]\nrate = \"4/1s\"\n\
         [telco.platform.lock.rate-limits.my_api]\nrate = \"2/1s\"\n",
        &[("TELCO_PLATFORM_LOCK_RATE_LIMITS_MY_API_RATE", "9/1s")],
    )
    .unwrap_err();
    assert!(
        error.contains("the names \"my-api\" and \"my_api\" are one name"),
        "{error}"
    );
}
