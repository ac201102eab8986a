//! Shared set-up for the Sentinel tests (`sentinel.rs`, `sentinel_key_loss.rs`): clients of a
//! [`RedisSentinel`] deployment, waiting for recovery, watching `lost()`, and a ledger of every
//! reported grant for the fencing checks.
//!
//! Nothing here sleeps for a fixed time to let something happen: every wait polls for an event
//! with a generous deadline.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockError;
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, LockHandle, LostReason};
use lock_redis::RedisFailure;
use lock_redis::lock::RedisLock;

use crate::common::Setup;
use lock_testkit::{RedisSentinel, RedisServer};
use tokio::time::Instant;

/// Watchdog timeout of the clients: renewed every 2 s, so a holder can ride out a failover of
/// a few seconds — or learn within 6 s that it could not.
pub const WATCHDOG: Duration = Duration::from_secs(6);
pub use crate::common::COMMAND_TIMEOUT;
pub use lock_testkit::{FAILOVER, GENEROUS};

/// Client settings for `sentinel`: the `redis-sentinel://` URL, short timeouts.
pub fn config(sentinel: &RedisSentinel) -> Setup {
    crate::common::config_at(sentinel.url())
        .watchdog_timeout(WATCHDOG)
        .instance_id("sentinel-pod")
}

pub use crate::common::{connect, value};
pub use lock_testkit::eventually;

/// Tries `name` (one attempt each, `lease`) until granted or `deadline`; returns the handle, the
/// time it took and the distinct failure reasons seen on the way.
pub async fn acquire_until_granted(
    lock: &RedisLock,
    name: &str,
    lease: Lease,
    deadline: Duration,
) -> (LockHandle, Duration, Vec<String>) {
    let started = Instant::now();
    let mut reasons: Vec<String> = Vec::new();
    loop {
        match lock
            .acquire_with(
                name,
                AcquireOptions::new(lease)
                    .wait_time(Duration::ZERO)
                    .unwrap(),
            )
            .await
        {
            Ok(handle) => return (handle, started.elapsed(), reasons),
            Err(error) => {
                let reason = describe(&error);
                if !reasons.contains(&reason) {
                    reasons.push(reason);
                }
            }
        }
        assert!(
            started.elapsed() < deadline,
            "`{name}` not granted within {deadline:?}; failures: {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `reason` of a failed acquisition, with the kind of Redis failure behind a
/// `backend_unavailable` (`refused read_only`, `unreachable`, `timeout`, …), for reports.
pub fn describe(error: &LockError) -> String {
    let reason = error.details().get("reason").cloned().unwrap_or_default();
    let Some(failure) = RedisFailure::find(error) else {
        return reason;
    };
    let kind = match failure.refusal() {
        Some(refusal) => format!("refused {}", refusal.as_str()),
        None => format!("{failure:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or_default()
            .to_lowercase(),
    };
    format!("{reason} ({kind})")
}

/// When and why a handle's `lost()` fired.
#[derive(Debug, Clone, Default)]
pub struct LostWatch(Arc<Mutex<Option<(Instant, LostReason)>>>);

impl LostWatch {
    /// Starts watching `handle.lost()`.
    pub fn start(handle: &LockHandle) -> Self {
        let watch = LostWatch::default();
        let lost = handle.lost();
        let record = watch.clone();
        tokio::spawn(async move {
            let reason = lost.await;
            *record.0.lock().unwrap() = Some((Instant::now(), reason));
        });
        watch
    }

    /// When and why it fired, if it has.
    pub fn fired(&self) -> Option<(Instant, LostReason)> {
        *self.0.lock().unwrap()
    }
}

/// One reported grant.
#[derive(Debug, Clone)]
pub struct Grant {
    pub name: String,
    pub token: u64,
    pub owner: String,
    pub at: Instant,
}

/// Every grant reported to any client in a scenario, in the order they were reported.
#[derive(Debug, Clone, Default)]
pub struct Ledger(Arc<Mutex<Vec<Grant>>>);

impl Ledger {
    pub fn record(&self, handle: &LockHandle) {
        self.0.lock().unwrap().push(Grant {
            name: handle.key().to_owned(),
            token: handle.fencing_token(),
            owner: handle.owner().to_owned(),
            at: Instant::now(),
        });
    }

    pub fn grants(&self) -> Vec<Grant> {
        self.0.lock().unwrap().clone()
    }

    /// Asserts that no fencing token was reported twice, and that per lock the tokens increase
    /// in the order the grants were reported.
    pub fn assert_tokens_unique_and_increasing(&self) {
        let grants = self.grants();
        let mut seen: BTreeMap<u64, &Grant> = BTreeMap::new();
        for grant in &grants {
            if let Some(earlier) = seen.insert(grant.token, grant) {
                panic!(
                    "fencing token {} granted twice: {earlier:?} and {grant:?}",
                    grant.token
                );
            }
        }
        let mut last: BTreeMap<&str, &Grant> = BTreeMap::new();
        for grant in &grants {
            if let Some(previous) = last.insert(grant.name.as_str(), grant) {
                assert!(
                    grant.token > previous.token,
                    "fencing token went backwards on `{}`: {previous:?} then {grant:?}",
                    grant.name
                );
            }
        }
    }
}

/// `PTTL` of `key` on `server` in ms (negative: no key / no TTL).
pub async fn pttl(server: &RedisServer, key: &str) -> i64 {
    server
        .cmd(&["PTTL", key])
        .await
        .ok()
        .and_then(|reply| reply.trim().parse().ok())
        .unwrap_or(-2)
}

/// Waits until `server` reports a replica of it synced (`connected_slaves:1` and the replica
/// online).
pub async fn wait_for_synced_replica(server: &RedisServer) -> bool {
    eventually(GENEROUS, || async {
        server
            .cmd(&["INFO", "replication"])
            .await
            .is_ok_and(|info| info.contains("connected_slaves:1") && info.contains("state=online"))
    })
    .await
}

/// The fencing token in a lock value `H|<token>|<owner>…` or `R|<token>|<owner>`.
pub fn token_of(value: &str) -> Option<u64> {
    value.split('|').nth(1)?.parse().ok()
}

/// The owner in a lock value.
pub fn owner_of(value: &str) -> Option<&str> {
    value.split('|').nth(2)
}
