//! A fair acquisition: waits in the key's queue of fair waiters in Redis, so the lock is granted
//! in the order the fair acquisitions of all clients asked for it.
//!
//! The order lives in Redis (`fair_acquire.lua`): the first call that finds the lock held or
//! other waiters first takes a place at the end of the key's queue, and the lock is granted only
//! to the first waiter. A waiter calls again every third of the fair waiter timeout while it
//! waits, and each call keeps its place for the timeout plus one command timeout — so a call
//! that takes the whole command timeout still arrives in time, and a waiter whose process died
//! is evicted within that long. One that gives up, fails or is dropped takes its place out at
//! once.
//!
//! Wake-ups: a release names the first fair waiter in its message, and a first waiter that
//! leaves names the next one, so exactly that waiter tries (about two round trips from release
//! to grant). A waiter also tries when its subscription is (re)confirmed, when the holder's TTL
//! runs out (only the first waiter watches it), and on every refresh of its place — so a lost
//! message costs at most a third of the fair waiter timeout.

use std::time::Duration;

use lock_core::lock::LockHandle;
use lock_core::{AcquireFailure, LockError};
use tokio::time::Instant;

use super::{Acquisition, Attempt, FIRST_RETRY, MAX_RETRY, is_transient};
use crate::core::backoff::Backoff;

/// How a call of the fair acquire script treats the caller's place in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FairCall {
    /// A zero wait: granted only if the lock is free and nobody is queued; never queues.
    Try,
    /// Takes a place at the end of the queue, or keeps the one it has, when not granted.
    Wait,
    /// The last attempt when the wait is spent: leaves the queue when not granted.
    Last,
}

impl FairCall {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FairCall::Try => "try",
            FairCall::Wait => "wait",
            FairCall::Last => "last",
        }
    }
}

impl Acquisition<'_> {
    pub(super) async fn run_fair(&mut self, wait: Duration) -> Result<LockHandle, LockError> {
        let started = Instant::now();
        let deadline = started + wait;
        if wait.is_zero() {
            let attempt = self.fair_call(FairCall::Try, deadline).await?;
            return self.granted_or_refused(attempt, started);
        }
        let channel = self.inner.core.keys.release_channel(self.name);
        // A key this client already waits on has its subscription: register before the first
        // call, so no release naming this waiter can be missed. Otherwise the first call goes
        // alone — an uncontended acquisition costs no subscription — and the waiter registers
        // if it was not granted (see below).
        let mut subscription = self
            .inner
            .core
            .subscriptions
            .is_subscribed(&channel)
            .then(|| {
                self.inner
                    .core
                    .subscriptions
                    .subscribe_fair(&channel, &self.owner)
            });
        let refresh = self.inner.config.fair_waiter_timeout / 3;
        // Retries keep the place alive: never further apart than a refresh.
        let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY.min(refresh));
        let mut first = true;
        loop {
            let called = self.fair_call(FairCall::Wait, deadline).await;
            // Like any acquisition, the first attempt fails closed at once when Redis fails
            // it; only a waiter that has a place keeps trying.
            let called = if std::mem::take(&mut first) {
                Ok(called?)
            } else {
                called
            };
            let now = Instant::now();
            if now >= deadline {
                // The wait is spent: no further round trip. A place this call kept is taken
                // out in the background when the acquisition drops.
                return match called {
                    Ok(attempt) => self.granted_or_refused(attempt, started),
                    Err(error) => Err(error),
                };
            }
            let wake_at = match called {
                Ok(Attempt::Granted(handle)) => return Ok(handle),
                // First in line behind a holder: it tries again when the holder's TTL runs out.
                Ok(Attempt::Held(holder, 0)) => {
                    retry.reset();
                    let refresh_at = now + refresh;
                    holder
                        .ttl
                        .map_or(refresh_at, |ttl| refresh_at.min(now + ttl))
                }
                Ok(Attempt::Held(_, _) | Attempt::WaitersAhead(_)) => {
                    retry.reset();
                    now + refresh
                }
                // A waiter keeps trying through a passing Redis failure (see `is_transient`)
                // until its wait is spent or the connection has been lost for a command
                // timeout, and keeps its place as long as a call gets through before the place
                // times out (see docs/design.md, "Fair locks").
                Err(error) if is_transient(&error) => {
                    let delay = retry.next_delay();
                    tracing::debug!(lock_key = self.name, %error, retry_in_ms = delay.as_millis() as u64, "fair waiter retrying");
                    now + delay
                }
                Err(error) => return Err(error),
            };
            let subscription = match subscription.as_mut() {
                Some(subscription) => subscription,
                None => {
                    let registered = self
                        .inner
                        .core
                        .subscriptions
                        .subscribe_fair(&channel, &self.owner);
                    // A release between the call and the registration went unheard: a new
                    // subscription's confirmation wakes the waiter to look again; one already
                    // confirmed (another waiter of this client subscribed meanwhile) cannot,
                    // so look again now.
                    let look_now = registered.is_confirmed();
                    subscription = Some(registered);
                    if look_now {
                        continue;
                    }
                    subscription.as_mut().expect("just registered")
                }
            };
            tokio::select! {
                () = subscription.woken().notified() => {}
                () = tokio::time::sleep_until(wake_at.min(deadline)) => {}
                // Gone for a command timeout: fail closed now (the place ends at its timeout).
                failure = self.inner.core.connection_lost("fair acquire wait") => {
                    return Err(self.failed(failure));
                }
            }
            if Instant::now() >= deadline {
                let attempt = self.fair_call(FairCall::Last, deadline).await?;
                return self.granted_or_refused(attempt, started);
            }
        }
    }

    /// One call of the fair acquire script. The place is kept for the fair waiter timeout plus
    /// one command timeout (the next call, a refresh later, may take that long to arrive), but
    /// not much past the wait: a waiter that dies just before its wait is spent frees its place
    /// about when it would have given up anyway.
    async fn fair_call(&mut self, call: FairCall, deadline: Instant) -> Result<Attempt, LockError> {
        let config = &self.inner.config;
        let place_ttl = config
            .fair_waiter_timeout
            .min(deadline.saturating_duration_since(Instant::now()))
            + self.inner.core.command_timeout;
        self.call(Some((call, place_ttl))).await
    }

    fn granted_or_refused(
        &self,
        attempt: Attempt,
        started: Instant,
    ) -> Result<LockHandle, LockError> {
        match attempt {
            Attempt::Granted(handle) => Ok(handle),
            Attempt::Held(holder, _) => Err(self.held(Some(holder), started)),
            Attempt::WaitersAhead(ahead) => Err(LockError::AcquisitionFailed {
                key: self.name.to_owned(),
                reason: AcquireFailure::WaitersAhead {
                    ahead,
                    waited: started.elapsed(),
                },
            }),
        }
    }
}
