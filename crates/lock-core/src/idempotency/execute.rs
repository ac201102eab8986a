//! [`Idempotency`], the protocol of idempotent execution over an [`IdempotencyStore`].

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::idempotency::error::{IdempotencyError, NotStored, Unstored};
use crate::idempotency::memory::InMemoryIdempotencyStore;
use crate::idempotency::options::{IdempotencyOptions, IdempotencySettings};
use crate::idempotency::port::{Claim, IdempotencyStore};
use crate::idempotency::scope::{IdempotencyScope, abandon_in_background};
use crate::idempotency::telemetry;
use crate::key::validate_key;
use crate::watch::ChangeWatch;

/// The result of an idempotent call, telling an execution from a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Idempotent<T> {
    /// This call ran the action and stored its result.
    Executed(T),
    /// An earlier call ran it; this is its stored result.
    Replayed(T),
    /// This call ran the action, but retries will not get this result: [`Unstored`] says what
    /// they get instead.
    Unstored(T, Unstored),
}

impl<T> Idempotent<T> {
    /// The result, however it was obtained.
    pub fn into_inner(self) -> T {
        match self {
            Idempotent::Executed(value)
            | Idempotent::Replayed(value)
            | Idempotent::Unstored(value, _) => value,
        }
    }

    /// The result, borrowed.
    pub fn get(&self) -> &T {
        match self {
            Idempotent::Executed(value)
            | Idempotent::Replayed(value)
            | Idempotent::Unstored(value, _) => value,
        }
    }

    /// Whether this is an earlier call's stored result (mark the response as a replay).
    pub fn is_replay(&self) -> bool {
        matches!(self, Idempotent::Replayed(_))
    }
}

/// What [`Idempotency::begin`] found: a stored result, or the record to run the action under.
#[derive(Debug)]
pub enum Begun<T> {
    /// An earlier call's result: do not run the action.
    Replayed(T),
    /// This caller owns the key: run the action, then complete or abandon the scope.
    Owner(IdempotencyScope),
}

/// Idempotent execution: a repeated call with the same key returns the first call's result
/// instead of running the action again.
///
/// # Contract
/// - **Duplicates wait.** A concurrent duplicate waits for the first execution, up to the wait
///   time, and gets its result. A later one within the result TTL gets the stored result
///   ([`Idempotent::is_replay`]).
/// - **Leases.** The in-progress record is a lease, renewed by a watchdog by default. A crashed
///   owner's record frees itself within the lease, and one waiting duplicate then runs the
///   action. Writes are fenced by the owner token.
/// - **Failures.** An action that fails stores nothing: the waiting duplicates get
///   [`IdempotencyError::OwnerFailed`] (HTTP 503) and the next call runs it again.
/// - **Unstorable results.** A result over the size cap or not serializable reaches its caller
///   as [`Idempotent::Unstored`], and the waiting duplicates get `OwnerFailed`.
/// - **Fingerprints.** With [`IdempotencyOptions::fingerprint`], the same key with another
///   request is [`IdempotencyError::KeyReused`] (HTTP 422), not a replay.
/// - **Fail closed.** With the backend down the action does not run
///   ([`IdempotencyError::Unavailable`], HTTP 503). A duplicate whose wait ran out gets
///   [`IdempotencyError::InProgress`] (HTTP 409).
///
/// This is best-effort deduplication, not exactly-once: a crash between the action's effect
/// and the stored result, or a lease that ended during a pause, lets the action run again. A
/// stored result also outlives a transaction that rolls back: complete it after the commit
/// with [`begin`](Idempotency::begin), or drop it with [`forget`](Idempotency::forget).
///
/// # Examples
///
/// ```
/// use lock_core::idempotency::{Idempotency, IdempotencyError, IdempotencyOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), IdempotencyError> {
/// let idempotency = Idempotency::in_memory();
/// let create = || async { Ok::<_, IdempotencyError>(String::from("TT-1001")) };
///
/// let first = idempotency.execute("ticket-create:req-42", &IdempotencyOptions::new(), create).await?;
/// assert!(!first.is_replay());
///
/// // A client retry after a timeout: the first result, the action does not run again.
/// let retry = idempotency
///     .execute("ticket-create:req-42", &IdempotencyOptions::new(), || async {
///         unreachable!("replayed, not run") as Result<String, IdempotencyError>
///     })
///     .await?;
/// assert!(retry.is_replay());
/// assert_eq!(retry.into_inner(), "TT-1001");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Idempotency {
    store: Arc<dyn IdempotencyStore>,
    settings: IdempotencySettings,
}

impl Idempotency {
    /// Idempotent execution on `store`, with `settings` as every call's defaults.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] for a setting out of its range.
    pub fn new(
        store: Arc<dyn IdempotencyStore>,
        settings: IdempotencySettings,
    ) -> Result<Self, IdempotencyError> {
        settings.validate()?;
        Ok(Idempotency { store, settings })
    }

    /// An in-process store with the default settings, for tests and single-process tools.
    pub fn in_memory() -> Self {
        Idempotency {
            store: Arc::new(InMemoryIdempotencyStore::new()),
            settings: IdempotencySettings::default(),
        }
    }

    /// The defaults of every call.
    pub fn settings(&self) -> &IdempotencySettings {
        &self.settings
    }

    /// The store the records live in.
    pub fn store(&self) -> &Arc<dyn IdempotencyStore> {
        &self.store
    }

    /// Runs `action` once per `key`, storing its `Ok` result as JSON for the result TTL.
    ///
    /// # Errors
    /// The action's own error, and nothing is stored. Or an [`IdempotencyError`] converted into
    /// `E`: `Unavailable`, `InProgress`, `OwnerFailed`, `KeyReused`, `ResultUnreadable` or
    /// `InvalidArgument`, and the action did not run.
    ///
    /// # Panics
    /// When `action` panics, after marking the record failed as for its error: duplicates
    /// waiting on it get `OwnerFailed` rather than each running the action in turn.
    pub async fn execute<T, E, F, Fut>(
        &self,
        key: &str,
        options: &IdempotencyOptions,
        action: F,
    ) -> Result<Idempotent<T>, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<IdempotencyError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        telemetry::execute(key, async {
            let scope = match self.begin(key, options).await {
                Ok(Begun::Replayed(value)) => {
                    return (Ok(Idempotent::Replayed(value)), "replayed");
                }
                Ok(Begun::Owner(scope)) => scope,
                Err(error) => return (Err(E::from(error)), "refused"),
            };
            let outcome = match AssertUnwindSafe(async { action().await })
                .catch_unwind()
                .await
            {
                Ok(outcome) => outcome,
                Err(panic) => {
                    if let Err(error) = scope.fail().await {
                        tracing::debug!(%key, %error, "marking a panicked action's record was not confirmed; it ends at its lease TTL");
                    }
                    std::panic::resume_unwind(panic)
                }
            };
            match outcome {
                Ok(value) => match scope.complete(&value).await {
                    Ok(()) => (Ok(Idempotent::Executed(value)), "executed"),
                    Err(IdempotencyError::ResultNotStored { reason, .. }) => {
                        warn_unstored(key, &reason);
                        (Ok(Idempotent::Unstored(value, reason.kind())), "executed")
                    }
                    Err(error) => {
                        tracing::warn!(%key, %error, "the result is returned; whether it was stored is unknown");
                        (Ok(Idempotent::Unstored(value, Unstored::Unconfirmed)), "executed")
                    }
                },
                Err(error) => {
                    if let Err(error) = scope.fail().await {
                        tracing::debug!(%key, %error, "marking a failed action's record was not confirmed; it ends at its lease TTL");
                    }
                    (Err(error), "action_failed")
                }
            }
        })
        .await
    }

    /// The first half of [`execute`](Self::execute), for callers that complete the record
    /// themselves, such as after their transaction commits.
    ///
    /// Returns a stored result, or the [`IdempotencyScope`] to run the action under. Waits for a
    /// running duplicate like `execute`, and sleeps the options' delayed start before returning
    /// a scope.
    ///
    /// # Errors
    /// As [`execute`](Self::execute), without the action's.
    pub async fn begin<T: DeserializeOwned>(
        &self,
        key: &str,
        options: &IdempotencyOptions,
    ) -> Result<Begun<T>, IdempotencyError> {
        validate_key(key).map_err(IdempotencyError::from_validation)?;
        let resolved = options.resolve(&self.settings)?;
        let owner = self.store.new_owner();
        let started = Instant::now();
        let deadline = started + resolved.wait_time;
        let mut watch: Option<Box<dyn ChangeWatch>> = None;
        // The owner last seen in progress: if it fails, this duplicate answers its failure.
        let mut waited_on: Option<String> = None;
        loop {
            // Until its reply arrives, a claim may have created a record of ours: if this
            // future is dropped or the reply is lost, the guard abandons it (owner-checked).
            let in_flight = ClaimInFlight {
                store: &self.store,
                key,
                owner: &owner,
            };
            let claim = self
                .store
                .claim(
                    key,
                    &owner,
                    &options.fingerprint,
                    resolved.lease_ttl,
                    waited_on.as_deref(),
                )
                .await?;
            std::mem::forget(in_flight);
            let (holder, ttl) = match claim {
                Claim::Owner => {
                    drop(watch);
                    let scope =
                        IdempotencyScope::start(Arc::clone(&self.store), key, owner, resolved);
                    if !options.delayed_start.is_zero() {
                        tokio::time::sleep(options.delayed_start).await;
                    }
                    return Ok(Begun::Owner(scope));
                }
                Claim::Completed {
                    result,
                    fingerprint,
                } => {
                    reused(key, &fingerprint, &options.fingerprint)?;
                    return serde_json::from_slice(&result)
                        .map(Begun::Replayed)
                        .map_err(|cause| IdempotencyError::ResultUnreadable {
                            key: key.to_owned(),
                            cause: cause.into(),
                        });
                }
                Claim::InProgress {
                    holder,
                    fingerprint,
                    ttl,
                } => {
                    reused(key, &fingerprint, &options.fingerprint)?;
                    waited_on = Some(holder.clone());
                    (holder, ttl)
                }
                Claim::Failed { holder } => {
                    return Err(IdempotencyError::OwnerFailed {
                        key: key.to_owned(),
                        holder,
                    });
                }
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(IdempotencyError::InProgress {
                    key: key.to_owned(),
                    holder,
                    waited: now - started,
                });
            }
            let Some(watch) = watch.as_mut() else {
                // Watch first, then look again: a completion between the first look and the
                // watch would otherwise be missed until the holder's TTL.
                watch = Some(self.store.watch(key).await?);
                continue;
            };
            // The holder's TTL bounds the sleep: its record may expire (a crashed owner)
            // without any message.
            let wake_at = ttl.map_or(deadline, |ttl| {
                deadline.min(now + ttl.max(Duration::from_millis(1)))
            });
            tokio::select! {
                changed = watch.changed() => {
                    // The backend cannot be heard: fail closed now rather than at the deadline.
                    changed.map_err(|cause| IdempotencyError::unavailable(key, cause))?;
                }
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// Deletes the stored result of `key`, so that the next call runs the action again; `false`
    /// when there was none. A record in progress is left alone.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`], [`IdempotencyError::InvalidArgument`] for a bad key.
    pub async fn forget(&self, key: &str) -> Result<bool, IdempotencyError> {
        validate_key(key).map_err(IdempotencyError::from_validation)?;
        self.store.forget(key).await
    }
}

/// Says what a result that was not stored means for the retries.
fn warn_unstored(key: &str, reason: &NotStored) {
    let what = match reason.kind() {
        Unstored::TooLarge | Unstored::NotSerializable => {
            "any duplicates waiting got the failure, and the next call runs the action again"
        }
        Unstored::LeaseLost => {
            "the lease ended first: another caller may have run the action, and retries get its result, not this one"
        }
        _ => "retries replay it if the write landed, else run the action again",
    };
    tracing::warn!(%key, reason = %reason, "the result is returned but not stored; {what}");
}

/// A claim without its reply yet; see [`Idempotency::begin`].
struct ClaimInFlight<'a> {
    store: &'a Arc<dyn IdempotencyStore>,
    key: &'a str,
    owner: &'a str,
}

impl Drop for ClaimInFlight<'_> {
    fn drop(&mut self) {
        abandon_in_background(self.store, self.key, self.owner);
    }
}

fn reused(key: &str, stored: &str, ours: &str) -> Result<(), IdempotencyError> {
    if stored == ours {
        return Ok(());
    }
    Err(IdempotencyError::KeyReused {
        key: key.to_owned(),
    })
}
