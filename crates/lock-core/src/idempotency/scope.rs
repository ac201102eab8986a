//! The owner's side of an idempotency record: its lease, kept alive while the action runs, and
//! the fenced write that ends it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::idempotency::error::{IdempotencyError, NotStored};
use crate::idempotency::options::Resolved;
use crate::idempotency::port::IdempotencyStore;
use crate::idempotency::telemetry;

/// The in-progress record a caller owns: it runs the action, then [`complete`]s the record with
/// the result (duplicates get it) or [`abandon`]s it (the next duplicate runs the action).
///
/// Under [`Lease::Watchdog`](crate::lock::Lease::Watchdog) the lease is renewed every third of the
/// watchdog timeout while the scope lives. Dropping the scope without either call abandons the
/// record in the background, so a cancelled request never blocks its duplicates for longer than
/// one round trip.
///
/// [`complete`]: IdempotencyScope::complete
/// [`abandon`]: IdempotencyScope::abandon
#[derive(Debug)]
pub struct IdempotencyScope {
    store: Arc<dyn IdempotencyStore>,
    key: String,
    owner: String,
    options: Resolved,
    lost: Arc<AtomicBool>,
    renewal: Option<tokio::task::JoinHandle<()>>,
    finished: bool,
}

impl IdempotencyScope {
    pub(crate) fn start(
        store: Arc<dyn IdempotencyStore>,
        key: &str,
        owner: String,
        options: Resolved,
    ) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let renewal = options.renewed.then(|| {
            tokio::spawn(renew_while_running(
                Arc::clone(&store),
                key.to_owned(),
                owner.clone(),
                options,
                Arc::clone(&lost),
            ))
        });
        IdempotencyScope {
            store,
            key: key.to_owned(),
            owner,
            options,
            lost,
            renewal,
            finished: false,
        }
    }

    /// The idempotency key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This caller's owner token, as duplicates see it in [`IdempotencyError::InProgress`].
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the watchdog found the record gone or taken over (a pause longer than the lease):
    /// another caller may be running the action too, and [`complete`](Self::complete) will fail
    /// with [`NotStored::LeaseLost`].
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Stores `value` (as JSON) for the result TTL and wakes every waiting duplicate, which then
    /// replays it. Fenced by the owner token: if the lease ended first, nothing is written.
    ///
    /// # Errors
    /// [`IdempotencyError::ResultNotStored`]: the value is larger than the result cap or does
    /// not serialize (the record is then failed, as by [`fail`](Self::fail)), the
    /// lease ended first ([`NotStored::LeaseLost`]), or the backend did not confirm the write
    /// (the record ends at its lease TTL).
    pub async fn complete<T: Serialize + ?Sized>(
        mut self,
        value: &T,
    ) -> Result<(), IdempotencyError> {
        self.stop_renewal();
        self.finished = true;
        let refused = match serde_json::to_vec(value) {
            Err(error) => NotStored::NotSerializable(error.into()),
            Ok(bytes) if bytes.len() > self.options.max_result_bytes => NotStored::TooLarge {
                size: bytes.len(),
                max: self.options.max_result_bytes,
            },
            Ok(bytes) => {
                let stored = self
                    .store
                    .complete(&self.key, &self.owner, &bytes, self.options.result_ttl)
                    .await;
                return match stored {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(self.not_stored(NotStored::LeaseLost)),
                    // The backend's own error: "did not run" would say the wrong thing here.
                    Err(IdempotencyError::Unavailable { cause, .. }) => {
                        Err(self.not_stored(NotStored::Unavailable(cause)))
                    }
                    Err(error) => Err(self.not_stored(NotStored::Unavailable(error.into()))),
                };
            }
        };
        // Nothing of this call can be replayed: answer the waiting duplicates, free the key.
        if let Err(error) = self.fail_record().await {
            tracing::debug!(key = %self.key, %error, "marking an unstorable result's record failed was not confirmed; it ends at its lease TTL");
        }
        Err(self.not_stored(refused))
    }

    /// Deletes the in-progress record and wakes the duplicates: the first of them runs the
    /// action. Returns whether the record was still this caller's. Use it when the work did not
    /// take effect (its transaction rolled back).
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend did not confirm it (the record then
    /// ends at its lease TTL).
    pub async fn abandon(mut self) -> Result<bool, IdempotencyError> {
        self.stop_renewal();
        self.finished = true;
        self.store.abandon(&self.key, &self.owner).await
    }

    /// Ends the record as failed: the duplicates waiting now get
    /// [`IdempotencyError::OwnerFailed`] instead of running the action one after another; the
    /// next call runs it. Returns whether the record was still this caller's. Use it when the
    /// action failed; [`abandon`](Self::abandon) when the work should simply be retried.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend did not confirm it (the record then
    /// ends at its lease TTL).
    pub async fn fail(mut self) -> Result<bool, IdempotencyError> {
        self.stop_renewal();
        self.finished = true;
        self.fail_record().await
    }

    async fn fail_record(&self) -> Result<bool, IdempotencyError> {
        self.store
            .fail(&self.key, &self.owner, self.options.lease_ttl)
            .await
    }

    fn not_stored(&self, reason: NotStored) -> IdempotencyError {
        telemetry::not_stored(&reason);
        IdempotencyError::ResultNotStored {
            key: self.key.clone(),
            reason,
        }
    }

    fn stop_renewal(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
    }
}

impl Drop for IdempotencyScope {
    fn drop(&mut self) {
        self.stop_renewal();
        if self.finished {
            return;
        }
        // Cancelled (the request future was dropped) or the action panicked: give the key
        // back now rather than at the end of the lease.
        abandon_in_background(&self.store, &self.key, &self.owner);
    }
}

/// Abandons `owner`'s record of `key` (owner-checked) on a task of its own; without a runtime
/// the lease ends it.
pub(crate) fn abandon_in_background(store: &Arc<dyn IdempotencyStore>, key: &str, owner: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (store, key, owner) = (Arc::clone(store), key.to_owned(), owner.to_owned());
    runtime.spawn(async move {
        if let Err(error) = store.abandon(&key, &owner).await {
            tracing::debug!(%key, %error, "abandoning an idempotency record failed; it ends at its lease TTL");
        }
    });
}

/// The watchdog of one record: renews it every third of its lease until the scope ends or the
/// record is found gone.
async fn renew_while_running(
    store: Arc<dyn IdempotencyStore>,
    key: String,
    owner: String,
    options: Resolved,
    lost: Arc<AtomicBool>,
) {
    let period = options.lease_ttl / 3;
    loop {
        tokio::time::sleep(period).await;
        match store.renew(&key, &owner, options.lease_ttl).await {
            Ok(true) => {}
            Ok(false) => {
                lost.store(true, Ordering::Relaxed);
                tracing::warn!(%key, %owner, "the in-progress idempotency record is gone (its lease ended during a pause?); a duplicate may run the action too, and this result will not be stored");
                return;
            }
            // Retried at the next period; the lease has two more periods to go.
            Err(error) => tracing::debug!(%key, %error, "renewing an idempotency record failed"),
        }
    }
}
