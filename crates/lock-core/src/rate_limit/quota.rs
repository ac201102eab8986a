//! [`Quota`]: a rate and a burst.

use std::fmt;
use std::time::Duration;

use crate::duration::{duration_range, format_duration, parse_duration};
use crate::rate_limit::error::RateLimitError;

/// The longest period of a quota, and the longest a key's state is kept: 30 days.
pub const MAX_PERIOD: Duration = Duration::from_secs(30 * 24 * 3600);
/// The largest burst: 1,000,000.
pub const MAX_BURST: u32 = 1_000_000;
/// The shortest time between two admissions at the steady rate: 1 µs, a million per second.
pub const MIN_EMISSION_INTERVAL: Duration = Duration::from_micros(1);

/// What a limit admits: `count` requests per `period` at a steady rate, and at most `burst` at
/// once.
///
/// Written `<count>/<period>`, such as `100/1s` or `5000/1h`. The burst defaults to the count (at
/// most 1,000,000), so a quota of `100/1s` admits 100 at once from rest and then one every 10 ms.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::rate_limit::Quota;
///
/// let quota: Quota = "100/1s".parse()?;
/// assert_eq!(quota.burst(), 100);
/// assert_eq!(quota.emission_interval(), Duration::from_millis(10));
///
/// let quota = quota.with_burst(20)?;
/// assert_eq!(quota.to_string(), "100/1s, burst 20");
///
/// let error = "100/1d".parse::<Quota>().unwrap_err();
/// assert_eq!(error.code(), "RATE_LIMIT_INVALID_ARGUMENT");
/// # Ok::<(), lock_core::rate_limit::RateLimitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    count: u32,
    period: Duration,
    burst: u32,
}

impl Quota {
    /// `count` requests per `period`, with a burst of `count`.
    ///
    /// # Errors
    /// [`RateLimitError::InvalidArgument`] for a count of 0, a period outside 1 ms to 30 days, or
    /// a rate above a million per second.
    pub fn new(count: u32, period: Duration) -> Result<Quota, RateLimitError> {
        let invalid = |problem: String| {
            RateLimitError::invalid(
                "quota",
                format!("{count}/{}", format_duration(period)),
                problem,
            )
        };
        if count == 0 {
            return Err(invalid(
                "a count of 0 admits nothing; accepted: 1 or more".to_owned(),
            ));
        }
        if period < Duration::from_millis(1) || period > MAX_PERIOD {
            return Err(invalid(format!(
                "the period must be from {}",
                duration_range(Duration::from_millis(1), MAX_PERIOD)
            )));
        }
        let quota = Quota {
            count,
            period,
            burst: count.min(MAX_BURST),
        };
        if quota.emission_interval() < MIN_EMISSION_INTERVAL {
            return Err(invalid("above a million per second".to_owned()));
        }
        Ok(quota)
    }

    /// The same rate with a burst of `burst`.
    ///
    /// # Errors
    /// [`RateLimitError::InvalidArgument`] for a burst of 0 or above 1,000,000, or one that
    /// takes more than 30 days to refill at the rate.
    pub fn with_burst(self, burst: u32) -> Result<Quota, RateLimitError> {
        let invalid =
            |problem: String| RateLimitError::invalid("burst", burst.to_string(), problem);
        if burst == 0 || burst > MAX_BURST {
            return Err(invalid(format!("accepted: 1 to {MAX_BURST}")));
        }
        let quota = Quota { burst, ..self };
        if quota.refill_time() > MAX_PERIOD {
            return Err(invalid(format!(
                "at {} it takes {} to refill; at most {}",
                self.rate_text(),
                format_duration(quota.refill_time()),
                format_duration(MAX_PERIOD)
            )));
        }
        Ok(quota)
    }

    /// Requests per period at the steady rate.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period of [`count`](Quota::count).
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The most requests admitted at once, from rest.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The time between two admissions at the steady rate: period / count.
    pub fn emission_interval(&self) -> Duration {
        self.period / self.count
    }

    /// How long an empty bucket takes to fill to the burst: burst × emission interval.
    pub fn refill_time(&self) -> Duration {
        self.period
            .mul_f64(f64::from(self.burst) / f64::from(self.count))
    }

    /// The emission interval in microseconds, the unit of backends' clocks.
    pub fn emission_interval_micros(&self) -> f64 {
        self.period.as_secs_f64() * 1e6 / f64::from(self.count)
    }

    fn rate_text(&self) -> String {
        format!(
            "{}/{}",
            self.count,
            format_duration(self.period).replace(' ', "")
        )
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rate_text())?;
        if self.burst != self.count {
            write!(f, ", burst {}", self.burst)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Quota {
    type Err = RateLimitError;

    /// Reads `<count>/<period>`, such as `100/1s`; the burst is the count.
    fn from_str(text: &str) -> Result<Quota, RateLimitError> {
        let invalid = |problem: String| {
            RateLimitError::invalid(
                "quota",
                format!("{text:?}"),
                format!("{problem}; accepted: <count>/<period>, such as 100/1s or 5000/1h"),
            )
        };
        let (count, period) = text
            .split_once('/')
            .ok_or_else(|| invalid("no /".to_owned()))?;
        let count: u64 = count
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{:?} is not a whole number", count.trim())))?;
        let count = u32::try_from(count)
            .map_err(|_| invalid(format!("a count of {count} is above {}", u32::MAX)))?;
        let period = parse_duration(period).map_err(|problem| match period.trim() {
            // `100/s`: the period's unit without its number.
            unit if parse_duration(&format!("1{unit}")).is_ok() => invalid(format!(
                "the period {unit:?} has no number; write {count}/1{unit}"
            )),
            _ => invalid(problem),
        })?;
        Quota::new(count, period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_read_and_written_alike() {
        for text in ["100/1s", "5000/1h", "1/250ms", "3/90s"] {
            let quota: Quota = text.parse().unwrap();
            assert_eq!(quota.to_string(), text);
            assert_eq!(quota.burst(), quota.count());
        }
        let quota: Quota = "3/1s".parse().unwrap();
        assert!((quota.emission_interval_micros() - 333_333.333).abs() < 0.01);
    }

    #[test]
    fn bad_quotas_say_what_is_accepted() {
        for (text, problem) in [
            ("100", "no /"),
            ("100/s", "the period \"s\" has no number; write 100/1s"),
            ("5/ m", "write 5/1m"),
            ("x/1s", "\"x\" is not a whole number"),
            ("0/1s", "a count of 0"),
            ("100/0", "the period must be from 1 ms to 720 h"),
            ("100/1s5", "a unit is required"),
            ("2000000/1s", "above a million per second"),
            ("1/721h", "the period must be"),
        ] {
            let error = text.parse::<Quota>().unwrap_err().to_string();
            assert!(error.contains(problem), "{text}: {error}");
        }
        let quota: Quota = "1/1h".parse().unwrap();
        assert!(quota.with_burst(0).is_err());
        let error = quota.with_burst(721).unwrap_err().to_string();
        assert_eq!(
            error,
            "invalid burst 721: at 1/1h it takes 721 h to refill; at most 720 h"
        );
        assert_eq!(quota.with_burst(720).unwrap().refill_time(), MAX_PERIOD);
    }
}
