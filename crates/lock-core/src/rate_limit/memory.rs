//! [`InMemoryRateLimits`] and [`DisabledRateLimits`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::rate_limit::error::RateLimitError;
use crate::rate_limit::gcra::{State, decide};
use crate::rate_limit::port::{Charge, RateLimitStore, Verdict};

/// Rate-limit state in this process, on its monotonic clock: for tests, and for a single
/// replica. Clones share the state.
///
/// Keys at rest are dropped by a sweep every 1,024 charges, so memory follows the keys in use.
#[derive(Debug, Clone)]
pub struct InMemoryRateLimits {
    started: Instant,
    states: Arc<Mutex<States>>,
}

/// Charges between two sweeps of the keys at rest.
const SWEEP_EVERY: u32 = 1024;

#[derive(Debug, Default)]
struct States {
    by_key: HashMap<(String, String), State>,
    since_sweep: u32,
}

impl InMemoryRateLimits {
    /// An empty store.
    pub fn new() -> Self {
        InMemoryRateLimits {
            started: Instant::now(),
            states: Arc::default(),
        }
    }
}

impl Default for InMemoryRateLimits {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl RateLimitStore for InMemoryRateLimits {
    async fn charge(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, RateLimitError> {
        let now = self.started.elapsed().as_secs_f64() * 1e6;
        let mut guard = self.states.lock().unwrap_or_else(|e| e.into_inner());
        guard.since_sweep += 1;
        if guard.since_sweep >= SWEEP_EVERY {
            guard.since_sweep = 0;
            guard.by_key.retain(|_, state| state.tat > now);
        }
        let states = &mut guard.by_key;
        let decided: Vec<_> = charges
            .iter()
            .map(|c| {
                let state = states.get(&(c.limit.to_owned(), c.key.to_owned())).copied();
                decide(now, state, &c.quota, c.cost)
            })
            .collect();
        let all = decided.iter().all(|d| d.verdict.allowed);
        for (charge, d) in charges.iter().zip(&decided) {
            if let Some(state) = d.charged.filter(|_| all).or(d.converted) {
                states.insert((charge.limit.to_owned(), charge.key.to_owned()), state);
            }
        }
        Ok(decided.into_iter().map(|d| d.verdict).collect())
    }
}

/// The store of switched-off rate limiting: every request is admitted, nothing is kept.
#[derive(Debug, Clone, Copy, Default)]
pub struct DisabledRateLimits;

#[async_trait]
impl RateLimitStore for DisabledRateLimits {
    async fn charge(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, RateLimitError> {
        Ok(charges
            .iter()
            .map(|c| Verdict {
                allowed: true,
                remaining: c.quota.burst(),
                retry_after: Default::default(),
                reset_after: Default::default(),
            })
            .collect())
    }

    fn disabled(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rate_limit::Quota;

    #[tokio::test(start_paused = true)]
    async fn keys_at_rest_are_swept() {
        let store = InMemoryRateLimits::new();
        let quota: Quota = "1/1s".parse().unwrap();
        for n in 1..SWEEP_EVERY {
            let key = n.to_string();
            let charge = Charge {
                limit: "api",
                key: &key,
                quota,
                cost: 1,
            };
            store.charge(&[charge]).await.unwrap();
        }
        tokio::time::advance(Duration::from_secs(2)).await;
        let charge = Charge {
            limit: "api",
            key: "last",
            quota,
            cost: 1,
        };
        store.charge(&[charge]).await.unwrap();
        let states = store.states.lock().unwrap();
        assert_eq!(
            states.by_key.len(),
            1,
            "only the key charged after the sweep is kept"
        );
    }
}
