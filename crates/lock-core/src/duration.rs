//! Durations: the one syntax every duration setting and argument is read in ([`parse_duration`]),
//! as every message writes them — `250 ms`, `5 s`, `5 min`, `1 h`, `0` — and the one range check.

use std::time::Duration;

use crate::error::LockError;

/// The duration syntax of every duration key (and of the CLI's `--wait` and `--lease`): `0`, or
/// numbers with the units ms, s, m and h (`1m30s`); parsed by humantime once the units are
/// checked, since humantime also takes `us`, `M` (months) and more.
///
/// # Errors
/// What is wrong with `text`, in words (a missing or unknown unit, a negative or empty value).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::parse_duration;
///
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
/// assert!(parse_duration("1M").unwrap_err().contains("M is not minutes"));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("1m30").unwrap_err(), "a unit is required after 30 (ms, s, m or h)");
/// assert!(parse_duration("0.0001s").unwrap_err().contains("finer than a millisecond"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty; a duration is required".to_owned());
    }
    if text.starts_with('-') {
        return Err("negative durations are not accepted".to_owned());
    }
    if !text.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err("not a duration; a duration starts with a number, such as 5s".to_owned());
    }
    if text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err("a unit is required (ms, s, m or h; only 0 goes without)".to_owned());
    }
    let mut units = text.split(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace());
    if let Some(unit) = units.find(|u| !["", "ms", "s", "m", "h"].contains(u)) {
        let months = if unit == "M" {
            ": M is not minutes (it is months)"
        } else {
            ""
        };
        return Err(format!(
            "unknown unit {unit:?}{months}; the units are ms, s, m (minutes) and h"
        ));
    }
    if text.ends_with(|c: char| c.is_ascii_digit() || c == '.') {
        let last = text
            .rsplit(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next();
        return Err(format!(
            "a unit is required after {} (ms, s, m or h)",
            last.unwrap_or(text)
        ));
    }
    let duration = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => "too large".to_owned(),
        other => format!("not a duration ({other})"),
    })?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err("finer than a millisecond; the smallest unit is ms".to_owned());
    }
    Ok(duration)
}

/// A duration as messages write it: the largest of `h`, `min` (from 5 min), `s` and `ms` that
/// says it exactly, `0` for zero; below a millisecond, humantime's notation (`500us`).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::format_duration;
///
/// assert_eq!(format_duration(Duration::from_secs(7 * 24 * 3600)), "168 h");
/// assert_eq!(format_duration(Duration::from_secs(300)), "5 min");
/// assert_eq!(format_duration(Duration::from_secs(90)), "90 s");
/// assert_eq!(format_duration(Duration::from_millis(1500)), "1500 ms");
/// assert_eq!(format_duration(Duration::ZERO), "0");
/// assert_eq!(format_duration(Duration::from_micros(500)), "500us");
/// ```
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() % 1_000_000 != 0 {
        return humantime::format_duration(d).to_string();
    }
    match d.as_millis() {
        0 => "0".to_owned(),
        ms if ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 60_000 == 0 && ms >= 300_000 => format!("{} min", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{ms} ms"),
    }
}

/// A range of durations as every message writes it: `10 ms to 60 s`, `0 to 1 h`.
///
/// # Examples
///
/// ```
/// use lock_core::{MAX_LEASE, MIN_LEASE, duration_range};
/// assert_eq!(duration_range(MIN_LEASE, MAX_LEASE), "100 ms to 168 h");
/// ```
pub fn duration_range(min: Duration, max: Duration) -> String {
    format!("{} to {}", format_duration(min), format_duration(max))
}

/// Checks that `value`, the setting or argument `name`, lies in `min..=max`.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `name` and `value`, with the accepted range.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::check_duration;
///
/// let (min, max) = (Duration::from_millis(10), Duration::from_secs(60));
/// assert!(check_duration("command_timeout", Duration::from_secs(2), min, max).is_ok());
/// let error = check_duration("command_timeout", Duration::from_secs(120), min, max).unwrap_err();
/// assert_eq!(error.to_string(), "invalid command_timeout 120 s: accepted: 10 ms to 60 s");
/// ```
pub fn check_duration(
    name: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), LockError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(LockError::invalid_argument(
        name,
        format_duration(value),
        format!("accepted: {}", duration_range(min, max)),
    ))
}
