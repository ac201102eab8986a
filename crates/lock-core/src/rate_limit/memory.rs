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
/// Keys at rest are dropped at the next charge after a full refill time, so memory follows the
/// keys in use.
#[derive(Debug, Clone)]
pub struct InMemoryRateLimits {
    started: Instant,
    states: Arc<Mutex<HashMap<(String, String), State>>>,
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
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.retain(|_, state| state.tat > now);
        let decided: Vec<_> = charges
            .iter()
            .map(|c| {
                let state = states.get(&(c.limit.to_owned(), c.key.to_owned())).copied();
                decide(now, state, &c.quota, c.cost)
            })
            .collect();
        if decided.iter().all(|(verdict, _)| verdict.allowed) {
            for (charge, (_, state)) in charges.iter().zip(&decided) {
                if let Some(state) = state {
                    states.insert((charge.limit.to_owned(), charge.key.to_owned()), *state);
                }
            }
        }
        Ok(decided.into_iter().map(|(verdict, _)| verdict).collect())
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
