//! What the consumer processes (`lock-holder`, `lock-worker`) take the same way: their lease
//! argument, and their lock, configured from the environment as a service's is.

use std::sync::Arc;

use lock_starter::prelude::*;

/// `watchdog`, or a fixed lease given as a duration such as `800ms` or `3s`.
///
/// # Errors
/// The duration's parse error when `text` is neither.
pub fn parse_lease(text: &str) -> Result<Lease, humantime::DurationError> {
    match text {
        "watchdog" => Ok(Lease::Watchdog),
        fixed => humantime::parse_duration(fixed).map(Lease::Fixed),
    }
}

/// The lock lock-starter configures from the environment (`TELCO_PLATFORM_LOCK_*`).
///
/// # Errors
/// The start-up error (bad configuration, Redis unreachable), or the reason the lock is
/// disabled; the consumers exit 78 with it.
pub async fn lock_from_environment() -> Result<Arc<dyn DistributedLock>, Box<dyn std::error::Error>>
{
    Ok(LockStarter::builder().build().await?.lock()?)
}
