//! The one duration syntax every setting and argument is read in, and every message written in.

use std::time::Duration;

/// Parses a duration: `0`, or numbers with the units ms, s, m and h, each once and largest
/// first, such as `1m30s`.
///
/// # Errors
/// What is wrong with `text`, in words: a missing, unknown, repeated or misplaced unit, a
/// negative or empty value.
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
/// assert_eq!(
///     parse_duration("5s5s").unwrap_err(),
///     "s is given twice; write each unit once, largest first, such as 1m30s"
/// );
/// assert!(parse_duration("500ms1s").unwrap_err().starts_with("s comes after ms"));
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
    // The units, smallest first. Each may come once, largest first: `5s5s` or `500ms1s` is
    // more likely a slip than a sum.
    const UNITS: [&str; 4] = ["ms", "s", "m", "h"];
    let mut larger: Option<(usize, &str)> = None;
    let units = text.split(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace());
    for unit in units.filter(|u| !u.is_empty()) {
        let Some(rank) = UNITS.iter().position(|u| *u == unit) else {
            let months = if unit == "M" {
                ": M is not minutes (it is months)"
            } else {
                ""
            };
            return Err(format!(
                "unknown unit {unit:?}{months}; the units are ms, s, m (minutes) and h"
            ));
        };
        if let Some((_, before)) = larger.filter(|(above, _)| *above <= rank) {
            let problem = if before == unit {
                format!("{unit} is given twice")
            } else {
                format!("{unit} comes after {before}")
            };
            return Err(format!(
                "{problem}; write each unit once, largest first, such as 1m30s"
            ));
        }
        larger = Some((rank, unit));
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

/// Writes a duration as [`parse_duration`] reads it, in the largest unit of `h`, `m` (from 5
/// minutes on), `s` and `ms` that says it exactly.
///
/// Rounded to the nearest millisecond, half up. Only zero prints as `0`: anything shorter than
/// a millisecond prints `1 ms`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::{format_duration, parse_duration};
///
/// assert_eq!(format_duration(Duration::from_secs(7 * 24 * 3600)), "168 h");
/// assert_eq!(format_duration(Duration::from_secs(300)), "5 m");
/// assert_eq!(format_duration(Duration::from_secs(90)), "90 s");
/// assert_eq!(format_duration(Duration::from_millis(1500)), "1500 ms");
/// assert_eq!(format_duration(Duration::ZERO), "0");
/// // Rounded to the millisecond; under one, never zero.
/// assert_eq!(format_duration(Duration::from_micros(313_859)), "314 ms");
/// assert_eq!(format_duration(Duration::from_micros(999_500)), "1 s");
/// assert_eq!(format_duration(Duration::from_nanos(313_859)), "1 ms");
/// assert_eq!(format_duration(Duration::MAX), "18446744073709551615 s");
/// // What it prints, `parse_duration` reads back.
/// assert_eq!(parse_duration("5 m"), Ok(Duration::from_secs(300)));
/// ```
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0".to_owned();
    }
    let rounded = (d.as_nanos() + NANOS_PER_MILLI / 2) / NANOS_PER_MILLI;
    // Never rounded past the largest whole second a `Duration` holds.
    format_millis(rounded.clamp(1, u128::from(u64::MAX) * 1000))
}

const NANOS_PER_MILLI: u128 = 1_000_000;

/// `ms` milliseconds in the largest unit that says them exactly.
fn format_millis(ms: u128) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 && ms > 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 60_000 == 0 && ms >= 300_000 => format!("{} m", ms / 60_000),
        ms if ms % 1000 == 0 && ms > 0 => format!("{} s", ms / 1000),
        ms => format!("{ms} ms"),
    }
}

/// `value`, which lies outside `min..=max`, rounded away from the range so that it never reads
/// as inside it (`3600001 ms` for 1 h and 1 ns against `0 to 1 h`); under a millisecond, exact
/// (`500 µs`, `1 ns`).
fn format_outside(value: Duration, min: Duration, max: Duration) -> String {
    let nanos = value.as_nanos();
    if value.is_zero() {
        "0".to_owned()
    } else if value > max {
        // Up, but not past the last whole millisecond a `Duration` holds.
        format_millis(
            nanos
                .div_ceil(NANOS_PER_MILLI)
                .min(Duration::MAX.as_millis()),
        )
    } else if nanos < NANOS_PER_MILLI {
        match nanos {
            n if n % 1000 == 0 => format!("{} µs", n / 1000),
            n => format!("{n} ns"),
        }
    } else {
        debug_assert!(value < min);
        format_millis(nanos / NANOS_PER_MILLI)
    }
}

/// A range of durations as every message writes it: `10 ms to 60 s`, `0 to 1 h`.
///
/// # Examples
///
/// ```
/// use lock_core::duration_range;
/// use lock_core::lock::{MAX_LEASE, MIN_LEASE};
/// assert_eq!(duration_range(MIN_LEASE, MAX_LEASE), "100 ms to 168 h");
/// ```
pub fn duration_range(min: Duration, max: Duration) -> String {
    format!("{} to {}", format_duration(min), format_duration(max))
}

/// For `value` outside `min..=max`: the value as a message writes it (rounded away from the
/// range) and the problem, `accepted: <range>`; `None` inside it.
pub(crate) fn out_of_range(
    value: Duration,
    min: Duration,
    max: Duration,
) -> Option<(String, String)> {
    if (min..=max).contains(&value) {
        return None;
    }
    Some((
        format_outside(value, min, max),
        format!("accepted: {}", duration_range(min, max)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn every_printed_duration_parses_back_to_its_rounded_value() {
        let cases = [
            (Duration::from_nanos(1), "1 ms", ms(1)),
            (Duration::from_nanos(499_999), "1 ms", ms(1)),
            (Duration::from_nanos(1_499_999), "1 ms", ms(1)),
            (Duration::from_nanos(1_500_000), "2 ms", ms(2)),
            (Duration::from_nanos(59_999_500_000), "60 s", ms(60_000)),
            (ms(240_000), "240 s", ms(240_000)),
            (ms(300_000), "5 m", ms(300_000)),
            (ms(5_400_000), "90 m", ms(5_400_000)),
            (
                ms(3_600_000) + Duration::from_nanos(400_000),
                "1 h",
                ms(3_600_000),
            ),
            (ms(3_600_001), "3600001 ms", ms(3_600_001)),
            (Duration::MAX, "18446744073709551615 s", Duration::MAX),
        ];
        for (value, text, parsed) in cases {
            assert_eq!(format_duration(value), text, "{value:?}");
            if value != Duration::MAX {
                assert_eq!(parse_duration(text), Ok(parsed), "{text}");
            }
        }
    }

    #[test]
    fn a_value_outside_a_range_never_reads_as_inside_it() {
        let (min, max) = (ms(10), ms(60_000));
        let outside = |value| out_of_range(value, min, max).map(|(text, _)| text);
        assert_eq!(
            outside(ms(60_000) + Duration::from_nanos(1)).unwrap(),
            "60001 ms"
        );
        assert_eq!(outside(ms(10) - Duration::from_nanos(1)).unwrap(), "9 ms");
        assert_eq!(outside(Duration::from_nanos(1)).unwrap(), "1 ns");
        assert_eq!(outside(Duration::ZERO).unwrap(), "0");
        assert_eq!(
            outside(Duration::MAX).unwrap(),
            "18446744073709551615999 ms",
            "no more than a Duration holds"
        );
        assert_eq!(outside(ms(10)), None);
        // A range starting at 1 ms: a sub-millisecond value is below it, and says so.
        let below = |value| out_of_range(value, ms(1), ms(10)).unwrap().0;
        assert_eq!(below(Duration::from_micros(500)), "500 µs");
        assert_eq!(below(Duration::from_nanos(999_999)), "999999 ns");
    }
}
