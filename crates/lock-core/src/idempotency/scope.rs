//! [`IdempotencyScope`], the owner's side of an idempotency record.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::idempotency::error::{IdempotencyError, NotStored};
use crate::idempotency::options::Resolved;
use crate::idempotency::port::IdempotencyStore;
use crate::idempotency::telemetry;

/// The in-progress record a caller owns while it runs the action.
///
/// End it with [`complete`](IdempotencyScope::complete),
/// [`abandon`](IdempotencyScope::abandon) or [`fail`](IdempotencyScope::fail). A
/// [`Lease::Watchdog`](crate::lock::Lease::Watchdog) lease is renewed while the scope lives. Dropping
/// the scope abandons the record in the background, so a cancelled request does not block its
/// duplicates.
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

    /// This caller's owner token, as duplicates see it.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the watchdog found the record gone or taken over, so that another caller may be
    /// running the action too.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Stores `value` as JSON for the result TTL, for every duplicate to replay.
    ///
    /// # Errors
    /// [`IdempotencyError::ResultNotStored`], whose [`NotStored`] says why: the value is over the
    /// result cap or does not serialize (the record is then [failed](Self::fail)), the lease
    /// ended first, or the backend did not confirm the write.
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

    /// Deletes the record so that the next duplicate runs the action, for work that did not
    /// take effect; `false` when the record was no longer this caller's.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`]: not confirmed, and the record ends at its lease TTL.
    pub async fn abandon(mut self) -> Result<bool, IdempotencyError> {
        self.stop_renewal();
        self.finished = true;
        self.store.abandon(&self.key, &self.owner).await
    }

    /// Ends the record as failed, for an action that failed; `false` when the record was no
    /// longer this caller's.
    ///
    /// The duplicates waiting now get [`IdempotencyError::OwnerFailed`] rather than each running
    /// the action in turn, and the next call runs it.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`]: not confirmed, and the record ends at its lease TTL.
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
        // Cancelled (the request future was dropped), or a `begin` caller's action panicked:
        // give the key back now rather than at the end of the lease.
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
