//! One acquisition: the first attempt, then event-driven waiting, and cleanup of any grant whose
//! outcome is unknown.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::ClusterHash;
use lock_core::lock::{AcquireOptions, Lease, LeaseState, LockHandle};
use lock_core::{AcquireFailure, LockError};
use tokio::time::Instant;

use crate::core::backoff::Backoff;
use crate::core::error::{RedisFailure, Refusal};
use crate::core::scripts;
use crate::lock::background::BackgroundRelease;
use crate::lock::background::{Grant, Ticket};
use crate::lock::inner::Inner;
use crate::lock::release::RedisRelease;

mod fair;

pub(crate) use fair::FairCall;

/// First delay before a queued waiter retries after Redis was unreachable or slow; doubles up to
/// [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(1);

/// Whether `error` is Redis being unreachable or slow (worth retrying within the wait), not a
/// refusal, a protocol error or a replication shortfall.
fn is_transient(error: &LockError) -> bool {
    matches!(
        error,
        LockError::AcquisitionFailed {
            reason: AcquireFailure::BackendUnavailable { .. },
            ..
        }
    ) && RedisFailure::find(error).is_some_and(|failure| {
        matches!(
            failure,
            RedisFailure::Unreachable { .. }
                | RedisFailure::Command { .. }
                | RedisFailure::CommandTimeout { .. }
                | RedisFailure::Timeout { .. }
        ) || matches!(
            // Redis busy with a script, loading its data set, demoted mid-failover, or cut off
            // from its master: each passes.
            failure.refusal(),
            Some(Refusal::Busy | Refusal::Loading | Refusal::ReadOnly | Refusal::MasterDown)
        )
    })
}

/// The holder of a key as the acquire script reported it.
struct Holder {
    owner: String,
    ttl: Option<Duration>,
}

enum Attempt {
    Granted(LockHandle),
    /// Held by another owner; for a fair acquisition also how many fair waiters are ahead.
    Held(Holder, u64),
    /// Fair acquisitions only: the lock is free, but this many earlier fair waiters come first.
    WaitersAhead(u64),
}

/// One acquisition of one key under one owner token.
///
/// While a script call is in flight — or failed, or timed out — the grant may exist in Redis
/// without anyone knowing. `outcome_unknown` tracks that; dropping the acquisition in that state
/// (an error, a timeout, or the caller dropping the future) releases the owner token in the
/// background. The token is unique to this acquisition, so that release can only ever free a
/// grant made for it.
///
/// A fair acquisition also holds a place in the key's queue in Redis while `queued`; dropping
/// it in that state takes the place out in the background.
pub(crate) struct Acquisition<'a> {
    inner: &'a Arc<Inner>,
    name: &'a str,
    owner: String,
    lease: Lease,
    fair: bool,
    /// The minimum hold: the scripts record it in the grant, on the server's clock.
    hold_at_least: Duration,
    outcome_unknown: bool,
    queued: bool,
    /// Whether a script call was made (or failed fast) yet: only the first fails fast.
    attempted: bool,
    /// Counts the acquisition as a background task until it is dropped, so a shutdown waits for
    /// an acquisition whose script is in flight: its clean-up (releasing a grant of unknown
    /// outcome, leaving the fair queue) starts its own tickets in `Drop` before this one ends.
    /// Declared last: fields drop after `Drop::drop` has run.
    _in_flight: Ticket,
}

impl Drop for Acquisition<'_> {
    fn drop(&mut self) {
        if self.queued {
            self.inner
                .leave_queue_in_background(self.name.to_owned(), self.owner.clone());
        }
        if self.outcome_unknown {
            tracing::debug!(lock_key = self.name, owner = %self.owner, "releasing a grant of unknown outcome");
            self.inner.release_in_background(
                self.name.to_owned(),
                std::mem::take(&mut self.owner),
                None,
                BackgroundRelease::OutcomeUnknown,
                self.ttl(),
            );
        }
    }
}

impl<'a> Acquisition<'a> {
    /// The TTL the acquire script gives the key.
    fn ttl(&self) -> Duration {
        match self.lease {
            Lease::Fixed(duration) => duration,
            Lease::Watchdog => self.inner.config.watchdog_timeout,
        }
    }

    pub(crate) fn new(inner: &'a Arc<Inner>, name: &'a str, options: AcquireOptions) -> Self {
        Acquisition {
            inner,
            name,
            owner: inner.core.owners.next_token(),
            lease: options.lease(),
            fair: options.is_fair(),
            hold_at_least: options.minimum_hold(),
            outcome_unknown: false,
            queued: false,
            attempted: false,
            _in_flight: inner.background.start(),
        }
    }

    /// Tries once; if the key is held and `wait` allows, joins the key's queue of this client's
    /// waiters (subscribing to its release channel) and waits its turn: the head of the queue
    /// tries once more when the subscription is confirmed (a release published before that
    /// would otherwise be missed), then sleeps until it is woken (a release) or the holder's TTL
    /// runs out, whichever comes first, and tries again, until `wait` is spent. When this client
    /// already has waiters on the key, a new acquisition joins the end of the queue without
    /// trying first, so they are served in order.
    ///
    /// A fair acquisition waits in the key's queue in Redis instead (see `fair.rs`).
    pub(crate) async fn run(&mut self, wait: Duration) -> Result<LockHandle, LockError> {
        if self.fair {
            return self.run_fair(wait).await;
        }
        let started = Instant::now();
        let deadline = started + wait;
        let channel = self.inner.core.keys.release_channel(self.name);
        let mut holder = None;
        if wait.is_zero() || self.inner.core.subscriptions.waiters(&channel) == 0 {
            match self.attempt().await? {
                Attempt::Granted(handle) => return Ok(handle),
                Attempt::Held(held, _) => holder = Some(held),
                Attempt::WaitersAhead(_) => unreachable!("only fair acquisitions queue"),
            }
            if Instant::now() >= deadline {
                return Err(self.held(holder, started));
            }
        }

        let mut subscription = self.inner.core.subscriptions.subscribe(&channel);
        // A head that found the lock held waits for the confirmation before trying again, no
        // longer than it would take the holder's lease to run out: a slow or dead pub/sub
        // connection costs at most that, and the subscription's driver wakes the head if it
        // confirms later (so a head that has not tried yet need not wait for it at all).
        if let Some(holder) = holder.as_ref().filter(|_| subscription.is_head()) {
            let bound = holder
                .ttl
                .map_or(deadline, |ttl| deadline.min(Instant::now() + ttl));
            if !subscription.confirmed_by(bound).await {
                tracing::debug!(
                    lock_key = self.name,
                    "release subscription not confirmed yet; waiting for the holder's TTL meanwhile"
                );
            }
        }
        let mut try_now = subscription.is_head();
        let mut wake_at = deadline;
        let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY);
        loop {
            if try_now {
                match self.attempt().await {
                    Ok(Attempt::Granted(handle)) => {
                        subscription.leave_next_try_at(Instant::now() + self.ttl());
                        return Ok(handle);
                    }
                    Ok(Attempt::WaitersAhead(_)) => unreachable!("only fair acquisitions queue"),
                    Ok(Attempt::Held(held, _)) => {
                        let now = Instant::now();
                        if now >= deadline {
                            return Err(self.held(Some(held), started));
                        }
                        wake_at = held.ttl.map_or(deadline, |ttl| deadline.min(now + ttl));
                        retry.reset();
                    }
                    // A queued waiter has chosen to wait: a Redis that is briefly unreachable,
                    // slow or refusing for a passing reason (`is_transient`) is retried (100 ms
                    // doubling to 1 s) until the wait is spent or the connection has been lost
                    // for a command timeout, rather than failing this waiter — and, one after
                    // the other, every waiter behind it. Other errors end the wait at once.
                    // (A retry due after the deadline becomes the last try at the deadline.)
                    Err(error) if is_transient(&error) && Instant::now() < deadline => {
                        let delay = retry.next_delay();
                        tracing::debug!(lock_key = self.name, %error, retry_in_ms = delay.as_millis() as u64, "queued waiter retrying");
                        wake_at = deadline.min(Instant::now() + delay);
                    }
                    Err(error) => {
                        // The next waiter backs off before trying: Redis just failed this one.
                        subscription.leave_next_try_at(Instant::now() + FIRST_RETRY);
                        return Err(error);
                    }
                }
            }
            // Only the head keeps a timer on the holder's TTL; the others sleep until they
            // become the head or their wait is spent.
            let was_head = subscription.is_head();
            let sleep_until = if was_head { wake_at } else { deadline };
            tokio::select! {
                () = subscription.woken().notified() => {}
                () = tokio::time::sleep_until(sleep_until) => {}
                // Gone for a command timeout: fail closed now rather than at the deadline.
                failure = self.inner.core.connection_lost("acquire wait") => {
                    subscription.leave_next_try_at(Instant::now() + FIRST_RETRY);
                    return Err(self.failed(failure));
                }
            }
            if Instant::now() >= deadline {
                // The wait is spent: one last try, in or out of turn.
                return match self.attempt().await? {
                    Attempt::Granted(handle) => {
                        subscription.leave_next_try_at(Instant::now() + self.ttl());
                        Ok(handle)
                    }
                    Attempt::Held(held, _) => Err(self.held(Some(held), started)),
                    Attempt::WaitersAhead(_) => unreachable!("only fair acquisitions queue"),
                };
            }
            let is_head = subscription.is_head();
            // Taken by every head, so a later wake-up never finds an old one.
            let next_try_at = is_head.then(|| subscription.take_next_try_at()).flatten();
            try_now = is_head;
            if let Some(at) = next_try_at.filter(|_| !was_head) {
                // Just became the head after one that was granted the lock (or that Redis
                // failed): no point trying before its lease ends (its back-off passes) or a
                // release comes.
                wake_at = deadline.min(at);
                try_now = false;
            }
        }
    }

    fn held(&self, holder: Option<Holder>, started: Instant) -> LockError {
        let Holder { owner, ttl } = holder.unwrap_or(Holder {
            owner: String::new(),
            ttl: None,
        });
        LockError::AcquisitionFailed {
            key: self.name.to_owned(),
            reason: AcquireFailure::HeldByAnotherOwner {
                holder: owner,
                ttl,
                waited: started.elapsed(),
            },
        }
    }

    fn failed(&self, failure: RedisFailure) -> LockError {
        LockError::backend_unavailable(self.name, failure)
    }

    /// One run of the acquire script: exactly one round trip when the scripts are loaded.
    async fn attempt(&mut self) -> Result<Attempt, LockError> {
        self.call(None).await
    }

    /// One run of the acquire script, or of the fair acquire script with `fair`: how to treat
    /// the queue, and how long the place in it is kept without another call.
    async fn call(&mut self, fair: Option<(FairCall, Duration)>) -> Result<Attempt, LockError> {
        let ttl_ms = self
            .lease
            .ttl(self.inner.config.watchdog_timeout)
            .as_millis()
            .max(1);
        let ttl = Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(u64::MAX));
        let redis_key = self.inner.core.keys.lock_key(self.name);
        let ttl_ms = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
        let hold_ms = i64::try_from(self.hold_at_least.as_millis()).unwrap_or(i64::MAX);
        // Fail fast: while the client knows it is disconnected (a connection attempt failed and
        // none has succeeded since), fred would hold the command until it reconnects or the
        // command timeout passes; the first attempt fails at once instead, with the connection
        // error. Nothing is sent, so no grant can exist and the outcome stays as it was. A
        // client still making its first connection has no error yet and sends as usual. Later
        // attempts (a queued waiter's, which chose to wait) are sent, so they are answered as
        // soon as Redis is back.
        if !std::mem::replace(&mut self.attempted, true) {
            if let Some(unreachable) = self.inner.core.unreachable("acquire script") {
                // Nothing here waits: yield, so a caller retrying in a loop cannot starve the
                // runtime's other tasks — the reconnect and the health task among them.
                tokio::task::yield_now().await;
                return Err(self.failed(unreachable));
            }
        }
        let sent = Instant::now();
        self.outcome_unknown = true;
        let reply = match fair {
            None => {
                let call = || {
                    let args = vec![self.owner.as_str().into(), ttl_ms.into(), hold_ms.into()];
                    (vec![Key::from(redis_key.as_str())], args)
                };
                scripts::call(&self.inner.core.client, &self.inner.scripts.acquire, call).await
            }
            Some((call, place_ttl)) => {
                let place_ms = i64::try_from(place_ttl.as_millis()).unwrap_or(i64::MAX);
                let args: Vec<Value> = vec![
                    self.owner.as_str().into(),
                    ttl_ms.into(),
                    place_ms.max(1).into(),
                    call.as_str().into(),
                    hold_ms.into(),
                ];
                // Queued (maybe) from here until a reply says otherwise.
                self.queued |= call == FairCall::Wait;
                self.inner
                    .scripts
                    .fair_acquire
                    .evalsha_with_reload(
                        &self.inner.core.client,
                        self.inner.core.keys.fair_keys(self.name),
                        args,
                    )
                    .await
            }
        };
        let reply: Vec<Value> =
            reply.map_err(|e| self.failed(self.inner.core.failure("acquire script", e)))?;
        // The reply tells where this owner stands; only `wait` keeps a place when not granted.
        if matches!(reply.first().and_then(Value::as_i64), Some(0 | 3)) {
            self.queued = fair.is_some_and(|(call, _)| call == FairCall::Wait);
        } else {
            self.queued = false;
        }

        match reply.as_slice() {
            [granted, token] if granted.as_i64() == Some(1) => {
                let token = token.as_u64().ok_or_else(|| {
                    self.failed(RedisFailure::protocol(
                        "acquire script",
                        "fencing token is not an integer",
                    ))
                })?;
                if self.inner.config.min_replicas > 0 {
                    // Still "outcome unknown" until confirmed: dropping the acquisition on any
                    // early return below hands the grant back.
                    self.confirm_replication(&redis_key).await?;
                }
                let valid_until = sent + ttl - crate::lock::config::safety_margin(ttl);
                if Instant::now() >= valid_until {
                    // Stay "outcome unknown": dropping the acquisition hands the grant back.
                    return Err(LockError::AcquisitionFailed {
                        key: self.name.to_owned(),
                        reason: AcquireFailure::LeaseExpiredBeforeGrant { lease: ttl },
                    });
                }
                // Refused by a shutdown: stay "outcome unknown", so the grant is handed back.
                let handle = self.handle(redis_key, token, valid_until)?;
                self.outcome_unknown = false;
                Ok(Attempt::Granted(handle))
            }
            [held, holder, pttl, rest @ ..] if held.as_i64() == Some(0) && rest.len() <= 1 => {
                self.outcome_unknown = false;
                let ttl = pttl
                    .as_i64()
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis);
                let ahead = rest.first().and_then(Value::as_u64).unwrap_or(0);
                Ok(Attempt::Held(
                    Holder {
                        owner: holder.as_string().unwrap_or_default(),
                        ttl,
                    },
                    ahead,
                ))
            }
            [queued, ahead] if queued.as_i64() == Some(3) => {
                self.outcome_unknown = false;
                Ok(Attempt::WaitersAhead(ahead.as_u64().unwrap_or(0)))
            }
            [released] if released.as_i64() == Some(2) => {
                self.outcome_unknown = false;
                Err(self.failed(RedisFailure::protocol(
                    "acquire script",
                    "this acquisition was already released (a duplicate request)",
                )))
            }
            _ => Err(self.failed(RedisFailure::protocol(
                "acquire script",
                "unexpected reply shape",
            ))),
        }
    }

    /// `WAIT min-replicas replica-sync-timeout` on the connection that ran the acquire script
    /// (in a Cluster: the node serving the key's slot), so a failover cannot lose a reported
    /// grant.
    ///
    /// # Errors
    /// `replication_unconfirmed` when too few replicas acknowledged in time;
    /// `backend_unavailable` when `WAIT` failed.
    async fn confirm_replication(&self, redis_key: &str) -> Result<(), LockError> {
        let config = &self.inner.config;
        let options = Options {
            cluster_hash: Some(ClusterHash::Custom(fred::util::redis_keyslot(
                redis_key.as_bytes(),
            ))),
            timeout: Some(config.replica_sync_timeout + self.inner.core.command_timeout),
            ..Options::default()
        };
        let timeout_ms = i64::try_from(config.replica_sync_timeout.as_millis()).unwrap_or(i64::MAX);
        let acknowledged: i64 = self
            .inner
            .core
            .client
            .with_options(&options)
            .wait(i64::from(config.min_replicas), timeout_ms)
            .await
            .map_err(|e| {
                self.failed(self.inner.core.failure_within(
                    "WAIT for replicas",
                    e,
                    config.replica_sync_timeout + self.inner.core.command_timeout,
                    "replica_sync_timeout + command_timeout",
                ))
            })?;
        let acknowledged = u32::try_from(acknowledged).unwrap_or(0);
        if acknowledged < config.min_replicas {
            return Err(LockError::AcquisitionFailed {
                key: self.name.to_owned(),
                reason: AcquireFailure::ReplicationUnconfirmed {
                    required: config.min_replicas,
                    acknowledged,
                },
            });
        }
        Ok(())
    }

    /// The handle of a grant, registered with the watchdog and the client's held leases.
    ///
    /// # Errors
    /// [`LockError::ShutDown`] when the client was shut down meanwhile.
    fn handle(
        &self,
        redis_key: String,
        token: u64,
        valid_until: Instant,
    ) -> Result<LockHandle, LockError> {
        let state = LeaseState::new(Some(valid_until));
        let renewal = matches!(self.lease, Lease::Watchdog).then(|| {
            self.inner.watchdog.register(
                redis_key,
                token,
                &self.owner,
                state.clone(),
                crate::lock::registry::renewal_period(self.inner.config.watchdog_timeout),
            )
        });
        let grant = Arc::new(Grant {
            name: self.name.to_owned(),
            owner: self.owner.clone(),
            token,
            renewal,
            ttl: self.ttl(),
        });
        let Some(held) = self.inner.held.insert(state.clone(), Arc::clone(&grant)) else {
            if let Some(id) = renewal {
                self.inner.watchdog.unregister(id);
            }
            return Err(LockError::ShutDown {
                key: self.name.to_owned(),
            });
        };
        let release = RedisRelease {
            inner: Arc::clone(self.inner),
            grant,
            held,
        };
        Ok(LockHandle::new(
            self.name,
            self.lease,
            self.owner.clone(),
            token,
            state,
            Box::new(release),
        ))
    }
}

/// Warns at connect when `min-replicas` asks for more replicas than the primary has: every
/// acquisition would then fail closed with `replication_unconfirmed`. Checked on one server and
/// through Sentinel (`INFO replication` of the primary); a Cluster's shards are not asked.
/// Silent when `INFO` is refused.
pub(crate) async fn check_replica_count(client: &Client, min_replicas: u32) {
    if min_replicas == 0 || client.is_clustered() {
        return;
    }
    let info: Result<String, Error> = client.info(Some(fred::types::InfoKind::Replication)).await;
    let Ok(info) = info else {
        return;
    };
    let connected = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
        .and_then(|n| n.parse::<u32>().ok());
    if let Some(connected) = connected.filter(|n| *n < min_replicas) {
        tracing::warn!(
            min_replicas,
            connected_replicas = connected,
            "min-replicas asks for more replicas than the Redis primary has; acquisitions fail closed (replication_unconfirmed) until enough replicas are connected"
        );
    }
}
