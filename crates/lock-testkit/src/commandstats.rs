//! [`command_calls`]: the calls per command that `INFO commandstats` reports.

use std::collections::HashMap;

/// Parses the reply of `INFO commandstats` into command name → calls (`cmdstat_evalsha` →
/// `evalsha`). Lines that are not command stats are skipped.
///
/// # Examples
///
/// ```
/// let info = "# Commandstats\r\ncmdstat_get:calls=10,usec=5,usec_per_call=0.50\r\n";
/// assert_eq!(lock_testkit::command_calls(info)["get"], 10);
/// ```
pub fn command_calls(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}
