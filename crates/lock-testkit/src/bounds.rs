//! Time bounds for tests on a small, loaded machine, one per kind of claim.

use std::time::Duration;

/// How much later than its bound an event in this process may come: a test claims
/// `elapsed < bound + SLACK`, or waits `SLACK` for something due at once.
pub const SLACK: Duration = Duration::from_secs(5);

/// How much later than its bound an event may come when a child process must start, link and
/// connect first.
pub const PROCESS_SLACK: Duration = Duration::from_secs(15);

/// How long a Sentinel or Cluster failover of a test deployment may take: the down-after time
/// or node timeout, an election, and a loaded machine.
pub const FAILOVER: Duration = Duration::from_secs(30);

/// How long to wait for something whose timing is not the claim: only a broken run waits
/// this long.
pub const GENEROUS: Duration = Duration::from_secs(60);
