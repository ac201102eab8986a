//! [`RateLimiter`]: one named limit over a [`RateLimitStore`].

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::outage::{Change, Outage};
use crate::rate_limit::batch::{Batches, Local, MAX_LOCAL_BATCH, Refill};
use crate::rate_limit::decision::{Basis, Decision, FailurePolicy};
use crate::rate_limit::error::RateLimitError;
use crate::rate_limit::port::{Charge, RateLimitStore, Verdict};
use crate::rate_limit::quota::Quota;
use crate::rate_limit::telemetry;

/// The longest an [`acquire`](RateLimiter::acquire) waits: 1 h.
pub const MAX_ACQUIRE_WAIT: Duration = Duration::from_secs(3600);

/// A named limit, such as `login` at `5/1m`, checked per key (a client id, an API key, an IP)
/// on a shared [`RateLimitStore`].
///
/// Clones share the quota, the failure state and the permits held by a local batch.
///
/// # Contract
/// - Decisions are made by the store, on its clock: every replica sharing the store and the
///   name shares the limit.
/// - A denied request is not charged.
/// - [`set_quota`](RateLimiter::set_quota) changes the limit for every clone at once without
///   resetting any key: a lower rate holds from the next call, a higher one never denies what
///   the old one would have admitted, and the same quota again changes nothing.
/// - When the store fails, the decision follows the [`FailurePolicy`] and says so in its
///   [`Basis`]; the first failure of an outage is logged at `WARN`, the recovery at `INFO`,
///   both at `DEBUG` for an outage starting within a minute of the last one so logged.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::rate_limit::{FailurePolicy, InMemoryRateLimits, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::rate_limit::RateLimitError> {
/// let store = Arc::new(InMemoryRateLimits::new());
/// let login = RateLimiter::new(store, "login", "5/1m".parse()?, FailurePolicy::FailClosed)?;
///
/// for _ in 0..5 {
///     login.try_acquire("client-42", 1).await?.admitted()?;
/// }
/// let sixth = login.try_acquire("client-42", 1).await?;
/// assert!(!sixth.allowed);
/// assert_eq!(sixth.retry_after.as_secs(), 12); // one request per 12 s
/// assert_eq!(sixth.admitted().unwrap_err().http_status(), 429);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimiter {
    name: Arc<str>,
    quota: Arc<RwLock<Quota>>,
    policy: FailurePolicy,
    store: Arc<dyn RateLimitStore>,
    outage: Arc<Outage>,
    /// Permits charged per refill of a local batch; 0 when off.
    batch: u32,
    batches: Arc<Batches>,
}

/// One limit of a [`check_all`]: `cost` requests of `key` against `limiter`.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// The limit.
    pub limiter: &'a RateLimiter,
    /// The limited key.
    pub key: &'a str,
    /// Requests to charge.
    pub cost: u32,
}

impl RateLimiter {
    /// The limit `name` with `quota` on `store`, answering by `policy` when the store fails.
    /// The name is folded ([`fold_name`](crate::fold_name)): every spelling is one limit.
    ///
    /// # Errors
    /// [`RateLimitError::InvalidArgument`] for a name that is not a valid key.
    pub fn new(
        store: Arc<dyn RateLimitStore>,
        name: &str,
        quota: Quota,
        policy: FailurePolicy,
    ) -> Result<Self, RateLimitError> {
        crate::validate_key(name).map_err(|e| RateLimitError::argument("limit", e))?;
        let name: Arc<str> = crate::fold_name(name).into();
        crate::rate_limit::telemetry::register(&name);
        Ok(RateLimiter {
            name,
            quota: Arc::new(RwLock::new(quota)),
            policy,
            store,
            outage: Arc::default(),
            batch: 0,
            batches: Arc::default(),
        })
    }

    /// Takes a hot key's permits from the store `permits` at a time and spends them in this
    /// process: one store call per `permits` decisions of a key, for a service deciding far more
    /// often than the store should be asked. 0 (the default) asks the store every time.
    ///
    /// - A refill charges `permits` (at most the burst, at least the request's cost) like one
    ///   request; when fewer are left it takes what is left, in a second call. Callers of one
    ///   key wait for the one refill in flight rather than each asking.
    /// - Permits are kept for as long as the rate takes to earn them, from 10 ms to 1 s, then
    ///   dropped: they were charged, so an idle key under-admits. A changed quota drops them too.
    /// - A denial is kept until one request would be admitted, and answered without the store.
    /// - Each local permit was charged on the store first, so counted from rest a key is
    ///   admitted at most `burst + rate × t` across every replica; a window starting later may
    ///   also see the permits held at its start, at most `permits` per replica.
    /// - `remaining` and `reset_after` of a decision from local permits are as of the refill,
    ///   plus the permits still held; `retry_after` of a denial is the store's.
    /// - Only [`try_acquire`](Self::try_acquire) and [`acquire`](Self::acquire) with a cost of 1
    ///   or more use the batch; [`check_all`] always asks the store.
    ///
    /// The batch belongs to this limiter and its clones; a clone made before this call has none.
    ///
    /// # Errors
    /// [`RateLimitError::InvalidArgument`] for more than 10,000 permits.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::rate_limit::{FailurePolicy, InMemoryRateLimits, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::rate_limit::RateLimitError> {
    /// let store = Arc::new(InMemoryRateLimits::new());
    /// let api = RateLimiter::new(store, "api", "1000/1s".parse()?, FailurePolicy::FailOpen)?
    ///     .local_batch(20)?;
    /// // The first call charges 20 on the store; the next 19 are spent here.
    /// for _ in 0..20 {
    ///     api.try_acquire("client-42", 1).await?.admitted()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn local_batch(mut self, permits: u32) -> Result<Self, RateLimitError> {
        if permits > MAX_LOCAL_BATCH {
            return Err(RateLimitError::invalid(
                "local_batch",
                permits.to_string(),
                format!(
                    "more than a batch of {MAX_LOCAL_BATCH}; accepted: 0 (off) to {MAX_LOCAL_BATCH}"
                ),
            ));
        }
        self.batch = permits;
        self.batches = Arc::default();
        Ok(self)
    }

    /// The most permits one refill of a local batch takes: the batch asked for, capped by the
    /// burst of the quota in force; 0 when off.
    pub fn local_batch_size(&self) -> u32 {
        self.batch.min(self.quota().burst())
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        *self.quota.read().unwrap_or_else(|e| e.into_inner())
    }

    /// This limit answering by `policy` when its store fails: a clone in all else, so its
    /// quota, local batch and outage state stay shared with this limiter.
    pub fn with_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// What the limiter answers when its store fails.
    pub fn policy(&self) -> FailurePolicy {
        self.policy
    }

    /// Changes the quota for this limiter and its clones, keeping every key's state.
    pub fn set_quota(&self, quota: Quota) {
        *self.quota.write().unwrap_or_else(|e| e.into_inner()) = quota;
    }

    /// Charges `cost` requests of `key` if the limit admits them now, without waiting.
    ///
    /// # Errors
    /// [`RateLimitError::CostAboveBurst`] when `cost` exceeds the burst;
    /// [`RateLimitError::InvalidArgument`] for a bad key. A store failure is a decision by the
    /// policy, not an error.
    pub async fn try_acquire(&self, key: &str, cost: u32) -> Result<Decision, RateLimitError> {
        if self.batch > 0 && cost > 0 && !self.store.disabled() {
            return self.batched(key, cost).await;
        }
        check_all(&[Part {
            limiter: self,
            key,
            cost,
        }])
        .await
    }

    /// Charges `cost` requests of `key`, waiting up to `timeout` for the limit to admit them.
    ///
    /// It sleeps until the retry-after each denial gives and asks again, never polling; it
    /// returns a denial at once when that retry-after is beyond `timeout`.
    ///
    /// # Errors
    /// As [`try_acquire`](RateLimiter::try_acquire), and [`RateLimitError::InvalidArgument`]
    /// for a timeout above 1 h.
    pub async fn acquire(
        &self,
        key: &str,
        cost: u32,
        timeout: Duration,
    ) -> Result<Decision, RateLimitError> {
        crate::check_duration("timeout", timeout, Duration::ZERO, MAX_ACQUIRE_WAIT)
            .map_err(|e| RateLimitError::argument("timeout", e))?;
        let deadline = Instant::now() + timeout;
        loop {
            let decision = self.try_acquire(key, cost).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if decision.allowed || decision.basis != Basis::Counted || decision.retry_after >= left
            {
                return Ok(decision);
            }
            // At least a millisecond: a store answering a zero retry-after is not asked in a loop.
            tokio::time::sleep(decision.retry_after.max(Duration::from_millis(1))).await;
        }
    }

    fn charge<'a>(&'a self, key: &'a str, cost: u32) -> Result<Charge<'a>, RateLimitError> {
        crate::validate_key(key).map_err(|e| RateLimitError::argument("key", e))?;
        let quota = self.quota();
        if cost > quota.burst() {
            return Err(RateLimitError::CostAboveBurst {
                limit: self.name.to_string(),
                cost,
                burst: quota.burst(),
            });
        }
        Ok(Charge {
            limit: &self.name,
            key,
            quota,
            cost,
        })
    }

    /// [`try_acquire`](Self::try_acquire) from the local batch, refilling it when it is spent.
    async fn batched(&self, key: &str, cost: u32) -> Result<Decision, RateLimitError> {
        let charge = self.charge(key, cost)?;
        let quota = charge.quota;
        let part = Part {
            limiter: self,
            key,
            cost,
        };
        loop {
            // A decision from the batch awaits nothing else: it spends the task's budget, so
            // that a loop of them still lets the runtime run the refill's reply and other tasks.
            tokio::task::coop::consume_budget().await;
            match self.batches.take(key, quota, cost, Instant::now()) {
                Ok(local) => return Ok(self.local_decision(key, quota, local)),
                Err(Refill::Mine) => break,
                Err(Refill::Wait(mut done, failures)) => {
                    // An error: the key's slot was swept meanwhile; look again all the same.
                    let _ = done.changed().await;
                    if self.batches.failed_since(key, failures) {
                        let error = RateLimitError::unavailable(
                            self.name.to_string(),
                            "the refill of the local batch this call waited for failed",
                        );
                        return Ok(failed(&[part], &[charge], &error));
                    }
                }
            }
        }
        // Given up if this call is dropped mid-refill, so that the waiting callers look again.
        let mut refilling = Refilling {
            batches: &self.batches,
            key,
            failed: None,
        };
        let mut charged = self.batch.min(quota.burst()).max(cost);
        let mut answered = self
            .charge_one(Charge {
                cost: charged,
                ..charge
            })
            .await;
        if let Ok(verdict) = answered {
            if !verdict.allowed && verdict.remaining >= cost && verdict.remaining < charged {
                // Fewer than a batch are left: take those.
                charged = verdict.remaining;
                answered = self
                    .charge_one(Charge {
                        cost: charged,
                        ..charge
                    })
                    .await;
            }
        }
        let decision = match answered {
            Ok(verdict) => {
                self.note_outage(None);
                refilling.failed = Some(false);
                let local = self
                    .batches
                    .fill(key, quota, charged, &verdict, cost, Instant::now());
                self.local_decision(key, quota, local)
            }
            Err(error @ RateLimitError::Unavailable { .. }) => {
                refilling.failed = Some(true);
                failed(&[part], &[charge], &error)
            }
            Err(other) => return Err(other),
        };
        Ok(decision)
    }

    /// The store's verdict on one charge.
    async fn charge_one(&self, charge: Charge<'_>) -> Result<Verdict, RateLimitError> {
        let verdicts = self.store.charge(&[charge]).await?;
        match verdicts[..] {
            [verdict] => Ok(verdict),
            _ => Err(RateLimitError::unavailable(
                self.name.to_string(),
                format!("{} verdicts for 1 charge", verdicts.len()),
            )),
        }
    }

    /// A decision made from the local batch, counted.
    fn local_decision(&self, key: &str, quota: Quota, local: Local) -> Decision {
        let decision = Decision {
            allowed: local.allowed,
            basis: Basis::Counted,
            limit: Arc::clone(&self.name),
            quota,
            key: key.to_owned(),
            remaining: local.remaining,
            retry_after: local.retry_after,
            reset_after: local.reset_after,
        };
        telemetry::decided(&self.name, &decision);
        decision
    }

    /// Notes a store failure or success, logging an outage's start and end.
    fn note_outage(&self, failed: Option<&RateLimitError>) {
        const FAILED: &str =
            "rate limit store failed: deciding by the failure policy until it answers";
        const ANSWERS: &str = "rate limit store answers again";
        let (name, policy) = (&self.name, self.policy);
        match (self.outage.note(failed.is_some()), failed) {
            (Some(Change::Started { loud: true }), Some(error)) => {
                tracing::warn!(limit = %name, ?policy, %error, "{FAILED}");
            }
            (Some(Change::Started { loud: false }), Some(error)) => {
                tracing::debug!(limit = %name, ?policy, %error, "{FAILED}");
            }
            (Some(Change::Ended { loud: true }), _) => tracing::info!(limit = %name, "{ANSWERS}"),
            (Some(Change::Ended { loud: false }), _) => tracing::debug!(limit = %name, "{ANSWERS}"),
            _ => {}
        }
    }
}

/// Checks several limits in one call: charges every part if all admit, none otherwise.
///
/// The decision describes the binding part: the one that denies with the longest wait, or when
/// all admit, the one with the fewest remaining. Every part must use the same store; on a backend
/// that places keys on shards (a Redis Cluster), parts with different keys may be refused:
/// give them the same key. When the store fails the request is admitted only if every part's
/// policy is [`FailurePolicy::FailOpen`].
///
/// # Errors
/// As [`RateLimiter::try_acquire`], and [`RateLimitError::InvalidArgument`] for no parts, parts
/// on different stores, or one limit and key in two parts.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::rate_limit::{check_all, FailurePolicy, InMemoryRateLimits, Part, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::rate_limit::RateLimitError> {
/// let store = Arc::new(InMemoryRateLimits::new());
/// let per_second = RateLimiter::new(store.clone(), "api-second", "10/1s".parse()?, FailurePolicy::FailOpen)?;
/// let per_day = RateLimiter::new(store, "api-day", "2/24h".parse()?, FailurePolicy::FailOpen)?;
/// let parts = |key| [Part { limiter: &per_second, key, cost: 1 }, Part { limiter: &per_day, key, cost: 1 }];
///
/// assert!(check_all(&parts("client-42")).await?.allowed);
/// assert!(check_all(&parts("client-42")).await?.allowed);
/// let third = check_all(&parts("client-42")).await?;
/// assert!(!third.allowed);
/// assert_eq!(&*third.limit, "api-day");
/// // The denied call charged neither limit.
/// assert_eq!(per_second.try_acquire("client-42", 0).await?.remaining, 8);
/// # Ok(()) }
/// ```
pub async fn check_all(parts: &[Part<'_>]) -> Result<Decision, RateLimitError> {
    let Some(first) = parts.first() else {
        return Err(RateLimitError::invalid(
            "parts",
            "[]",
            "at least one part is required",
        ));
    };
    if let Some(other) = parts
        .iter()
        .find(|p| !Arc::ptr_eq(&p.limiter.store, &first.limiter.store))
    {
        return Err(RateLimitError::invalid(
            "parts",
            format!("`{}` and `{}`", first.limiter.name, other.limiter.name),
            "the limits use different stores; limits checked together share one",
        ));
    }
    let charges = parts
        .iter()
        .map(|p| p.limiter.charge(p.key, p.cost))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, charge) in charges.iter().enumerate() {
        if charges[..i]
            .iter()
            .any(|c| c.limit == charge.limit && c.key == charge.key)
        {
            return Err(RateLimitError::invalid(
                "parts",
                format!("`{}` of {:?} twice", charge.limit, charge.key),
                "each limit and key once; give one part the summed cost",
            ));
        }
    }
    if first.limiter.store.disabled() {
        let name = Arc::clone(&first.limiter.name);
        let decision =
            Decision::unchecked(true, Basis::Disabled, name, charges[0].quota, first.key);
        count(parts, &decision, |_| (Basis::Disabled, true));
        return Ok(decision);
    }
    match first.limiter.store.charge(&charges).await {
        Ok(verdicts) if verdicts.len() == parts.len() => {
            for part in parts {
                part.limiter.note_outage(None);
            }
            let decision = binding(parts, &charges, &verdicts);
            count(parts, &decision, |i| (Basis::Counted, verdicts[i].allowed));
            Ok(decision)
        }
        Ok(verdicts) => {
            let error = RateLimitError::unavailable(
                first.limiter.name.to_string(),
                format!("{} verdicts for {} charges", verdicts.len(), parts.len()),
            );
            Ok(failed(parts, &charges, &error))
        }
        Err(error @ RateLimitError::Unavailable { .. }) => Ok(failed(parts, &charges, &error)),
        Err(other) => Err(other),
    }
}

/// Counts each part's own verdict, `own(i)` as basis and admission: a limit that would admit
/// where another denied admitted nothing, and a cost of 0 reads the standing; neither counts.
fn count(parts: &[Part<'_>], decision: &Decision, own: impl Fn(usize) -> (Basis, bool)) {
    for (i, part) in parts.iter().enumerate() {
        let (basis, allowed) = own(i);
        if part.cost > 0 && (decision.allowed || !allowed) {
            telemetry::counted(&part.limiter.name, basis, allowed);
        }
    }
}

/// The decision of the binding part.
fn binding(parts: &[Part<'_>], charges: &[Charge<'_>], verdicts: &[Verdict]) -> Decision {
    let allowed = verdicts.iter().all(|v| v.allowed);
    let index = (0..parts.len())
        .max_by_key(|&i| {
            let v = verdicts[i];
            (!v.allowed, v.retry_after, std::cmp::Reverse(v.remaining))
        })
        .unwrap_or(0);
    let v = verdicts[index];
    Decision {
        allowed,
        basis: Basis::Counted,
        limit: Arc::clone(&parts[index].limiter.name),
        quota: charges[index].quota,
        key: parts[index].key.to_owned(),
        remaining: v.remaining,
        retry_after: v.retry_after,
        reset_after: v.reset_after,
    }
}

/// The decision by the parts' policies when the store failed.
fn failed(parts: &[Part<'_>], charges: &[Charge<'_>], error: &RateLimitError) -> Decision {
    for part in parts {
        part.limiter.note_outage(Some(error));
    }
    let open = parts
        .iter()
        .all(|p| p.limiter.policy == FailurePolicy::FailOpen);
    let basis = if open {
        Basis::FailedOpen
    } else {
        Basis::FailedClosed
    };
    let first = &parts[0];
    let decision = Decision::unchecked(
        open,
        basis,
        Arc::clone(&first.limiter.name),
        charges[0].quota,
        first.key,
    );
    count(parts, &decision, |i| match parts[i].limiter.policy {
        FailurePolicy::FailOpen => (Basis::FailedOpen, true),
        FailurePolicy::FailClosed => (Basis::FailedClosed, false),
    });
    decision
}

/// The refill of a key in flight: ended when dropped, so that the callers waiting for it wake
/// even if the refilling call is dropped.
struct Refilling<'a> {
    batches: &'a Batches,
    key: &'a str,
    /// `Some(false)` once filled, `Some(true)` once failed; `None` while in flight.
    failed: Option<bool>,
}

impl Drop for Refilling<'_> {
    fn drop(&mut self) {
        match self.failed {
            // Filled: `fill` ended it.
            Some(false) => {}
            Some(true) => self.batches.abandon(self.key, true),
            None => self.batches.abandon(self.key, false),
        }
    }
}
