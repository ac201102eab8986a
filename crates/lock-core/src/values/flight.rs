//! The single-flight guard: [`SharedValues::single_flight`].

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::check_duration;
use crate::values::error::ValuesError;
use crate::values::port::{Expiry, ValueWatch, Versioned, Waited, Written};
use crate::values::shared::{MAX_TTL, MAX_WAIT, SharedValues};

/// The shortest TTL of a single-flight guard: 1 s (it is renewed every third of it).
pub const MIN_FLIGHT_TTL: Duration = Duration::from_secs(1);

/// How long a published outcome stays at its key should its runner fail to delete it.
const DONE_TTL: Duration = MIN_FLIGHT_TTL;

/// What a caller of [`SharedValues::single_flight`] does while another caller runs the action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenBusy {
    /// Return at once with [`Flight::RunningElsewhere`].
    Report,
    /// Wait up to this long for the runner's outcome. If the runner goes away without one (it
    /// crashed and its guard expired, or it was cancelled), run the action here.
    Wait(Duration),
}

/// How a single flight ended for this caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flight<T, P> {
    /// This caller ran the action: its outcome.
    Ran(T),
    /// Another caller ran it while this one waited: that caller's outcome.
    Joined(T),
    /// Another caller runs it, and this one reported or stopped waiting.
    RunningElsewhere {
        /// The runner's owner token (its instance id first).
        owner: String,
        /// The runner's last reported progress.
        progress: Option<P>,
    },
}

/// The runner's handle on its guard, to report progress that other callers see.
#[derive(Debug)]
pub struct Progress<P> {
    guard: Arc<Guard>,
    _progress: PhantomData<fn(&P)>,
}

impl<P: Serialize> Progress<P> {
    /// Publishes `progress` with the guard, for [`Flight::RunningElsewhere`] and waiters;
    /// `false` when the guard is no longer this runner's (it expired and another took it).
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`], or a progress value that does not serialize.
    pub async fn report(&self, progress: &P) -> Result<bool, ValuesError> {
        let progress = serde_json::to_value(progress).map_err(|error| {
            ValuesError::invalid(
                "progress",
                std::any::type_name::<P>(),
                format!("it does not serialize as JSON: {error}"),
            )
        })?;
        self.guard.write(Some(progress)).await
    }

    /// The owner token of this run, as other callers see it.
    pub fn owner(&self) -> &str {
        &self.guard.owner
    }
}

/// A guard as stored: running with its progress, or done with its outcome.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Record<T, P> {
    Running { owner: String, progress: Option<P> },
    Done { owner: String, outcome: T },
}

/// A runner's guard: its key, TTL, owner token, and the version it last wrote (`None` once lost).
#[derive(Debug)]
struct Guard {
    values: SharedValues,
    key: String,
    ttl: Duration,
    owner: String,
    state: tokio::sync::Mutex<GuardState>,
}

#[derive(Debug)]
struct GuardState {
    version: Option<u64>,
    progress: Option<serde_json::Value>,
}

impl Guard {
    /// Rewrites the running record over the version this runner holds, with `progress` when
    /// given, and a fresh TTL; `false` when it is no longer this runner's.
    async fn write(&self, progress: Option<serde_json::Value>) -> Result<bool, ValuesError> {
        let state = self.state.lock().await;
        self.rewrite(state, progress).await
    }

    /// Renews the guard's TTL, unless the action is rewriting it right now, which renews it
    /// too. Waiting for that rewrite here would never end: the runner does not poll the action
    /// while it renews.
    async fn renew(&self) -> Result<bool, ValuesError> {
        match self.state.try_lock() {
            Ok(state) => self.rewrite(state, None).await,
            Err(_) => Ok(true),
        }
    }

    async fn rewrite(
        &self,
        mut state: tokio::sync::MutexGuard<'_, GuardState>,
        progress: Option<serde_json::Value>,
    ) -> Result<bool, ValuesError> {
        let Some(version) = state.version else {
            return Ok(false);
        };
        // Kept only once written: a report the store refuses (too large) must not ride along
        // with every later renewal.
        let progress = progress.or_else(|| state.progress.clone());
        let record = serde_json::json!({
            "state": "running", "owner": self.owner, "progress": progress,
        });
        state.version = match self
            .write_over(version, &record, Expiry::After(self.ttl))
            .await?
        {
            Written::Stored { version } => {
                state.progress = progress;
                Some(version)
            }
            Written::Refused { .. } => {
                tracing::warn!(key = %self.key, owner = %self.owner, "single-flight guard lost while its action ran: another caller may run it too");
                None
            }
        };
        Ok(state.version.is_some())
    }

    /// Writes `record` over `version`, the one this runner last saw. A write unconfirmed or
    /// refused may follow one of its own whose reply was lost (and whose settling read failed
    /// too): if the guard holds this runner's record, the write goes on from that version.
    async fn write_over(
        &self,
        version: u64,
        record: &serde_json::Value,
        expiry: Expiry,
    ) -> Result<Written, ValuesError> {
        let written = self
            .values
            .compare_and_set(&self.key, Some(version), record, expiry)
            .await;
        if matches!(
            written,
            Err(ValuesError::Unavailable { .. }) | Ok(Written::Refused { .. })
        ) && let Some(own) = self.own_version().await
        {
            return self
                .values
                .compare_and_set(&self.key, Some(own), record, expiry)
                .await;
        }
        written
    }

    /// The version of the guard if it holds this runner's running record.
    async fn own_version(&self) -> Option<u64> {
        running_version(&self.values, &self.key, &self.owner)
            .await
            .ok()
            .flatten()
    }

    /// Publishes the outcome over the guard and then deletes it, so waiters get the outcome
    /// and the next caller runs anew; an outcome that is an error, or not published, deletes
    /// the guard alone.
    async fn complete(
        &self,
        outcome: Result<serde_json::Value, ValuesError>,
    ) -> Result<(), Unpublished> {
        let mut state = self.state.lock().await;
        let Some(version) = state.version.take() else {
            return Ok(());
        };
        let done = match outcome {
            Ok(outcome) => {
                let record =
                    serde_json::json!({"state": "done", "owner": self.owner, "outcome": outcome});
                // Deleted next; should the delete fail, it outlives the run by DONE_TTL at most.
                self.write_over(version, &record, Expiry::After(DONE_TTL))
                    .await
            }
            Err(error) => Err(error),
        };
        match done {
            Ok(Written::Stored { version }) => {
                let deleted = self.values.compare_and_delete(&self.key, version).await;
                deleted.map(drop).map_err(|error| Unpublished {
                    error,
                    guard_deleted: false,
                })
            }
            Ok(Written::Refused { .. }) => {
                tracing::warn!(key = %self.key, owner = %self.owner, "single-flight guard lost while its action ran: another caller may have run it too");
                Ok(())
            }
            // Deleted, the guard lets waiting callers run the action themselves (they find no
            // outcome), and the next caller need not wait out its TTL. A write whose reply was
            // lost may have been stored: the delete then finds another version and does nothing.
            Err(error) => {
                let deleted = self.values.compare_and_delete(&self.key, version).await;
                Err(Unpublished {
                    error,
                    guard_deleted: matches!(deleted, Ok(Written::Stored { .. })),
                })
            }
        }
    }

    /// Deletes the guard without an outcome: the run was cancelled.
    fn abandon(self: Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // No runtime: the guard ends at its TTL.
        };
        runtime.spawn(async move {
            let version = self.state.lock().await.version.take();
            if let Some(version) = version {
                let _ = self.values.compare_and_delete(&self.key, version).await;
            }
        });
    }
}

/// An outcome the runner could not publish, and whether its guard was deleted all the same.
struct Unpublished {
    error: ValuesError,
    guard_deleted: bool,
}

/// Abandons the guard when the runner's future is dropped before its action finished.
struct AbandonOnDrop(Option<Arc<Guard>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if let Some(guard) = self.0.take() {
            guard.abandon();
        }
    }
}

impl SharedValues {
    /// Runs `action` on one caller at a time across every replica sharing `key`: the others
    /// report it running elsewhere, with its progress, or wait for its outcome.
    ///
    /// # Contract
    /// - The runner holds a guard at `key` with a TTL of `ttl` (1 s to 30 days), renewed every
    ///   third of it by a task of its own while the action runs, and deleted when it ends or
    ///   any caller is cancelled (a claim on its way is deleted once answered). After a
    ///   crash the guard and its progress expire within `ttl`, and the next caller runs; a
    ///   waiting caller looks again every third of its own `ttl`, so it runs within 4/3 ×
    ///   `ttl` of the crashed runner's last renewal (give every caller of a key the same one).
    /// - Only the runner writes its guard: every write compares the version it last wrote.
    /// - The outcome is published to the callers waiting at that moment, then the guard is
    ///   deleted: a caller arriving later runs the action again. A waiter that misses the
    ///   outcome (its subscription was down) runs the action itself.
    /// - A cancelled waiter changes nothing for the runner or the other waiters.
    ///
    /// # Errors
    /// [`ValuesError::Unavailable`] before the action ran (it did not run), an invalid argument,
    /// or [`ValuesError::Undecodable`] for a guard of other outcome or progress types. Once the
    /// action has run, its outcome is returned whatever its publication did (failures are
    /// logged; the guard then ends at its TTL).
    pub async fn single_flight<T, P, F, Fut>(
        &self,
        key: &str,
        ttl: Duration,
        when_busy: WhenBusy,
        action: F,
    ) -> Result<Flight<T, P>, ValuesError>
    where
        T: Serialize + DeserializeOwned + Send,
        P: Serialize + DeserializeOwned + Send,
        F: FnOnce(Progress<P>) -> Fut,
        Fut: Future<Output = T>,
    {
        check_duration("ttl", ttl, MIN_FLIGHT_TTL, MAX_TTL).map_err(ValuesError::argument)?;
        let wait = match when_busy {
            WhenBusy::Report => Duration::ZERO,
            WhenBusy::Wait(wait) => {
                check_duration("wait", wait, Duration::ZERO, MAX_WAIT)
                    .map_err(ValuesError::argument)?;
                wait
            }
        };
        let deadline = Instant::now() + wait;
        // One watch across every wait of this call, so an outcome published between two of
        // them is still seen.
        let mut watch: Option<Box<dyn ValueWatch>> = None;
        loop {
            let owner = self.store().new_owner();
            let claim = Claim::send(self, key, &owner, ttl);
            if let Some(version) = claim.outcome().await? {
                let guard = Arc::new(Guard {
                    values: self.clone(),
                    key: key.to_owned(),
                    ttl,
                    owner,
                    state: tokio::sync::Mutex::new(GuardState {
                        version: Some(version),
                        progress: None,
                    }),
                });
                let mut abandon = AbandonOnDrop(Some(Arc::clone(&guard)));
                if let Some(outcome) = self.published_outcome::<T, P>(key, &mut watch).await? {
                    // The runner finished between this caller's last look and its claim: its
                    // outcome stands, and this guard goes again (on drop, should this fail).
                    if self.compare_and_delete(key, version).await.is_ok() {
                        abandon.0 = None;
                    }
                    return Ok(Flight::Joined(outcome));
                }
                return Ok(Flight::Ran(run(guard, abandon, action).await));
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let waited = if remaining.is_zero() {
                Waited::TimedOut(self.get::<Record<T, P>>(key).await?)
            } else {
                let watch = match &mut watch {
                    Some(watch) => watch,
                    None => watch.insert(self.store().watch(key).await?),
                };
                let running = |v: Option<&Versioned<Record<T, P>>>| {
                    matches!(v.map(|v| &v.value), Some(Record::Running { .. }))
                };
                // A guard's expiry is not published: look again every third of the TTL, as
                // often as a runner renews it.
                let until = Instant::now() + remaining.min(ttl / 3);
                self.wait_on(&mut **watch, key, until, |v, _| !running(v))
                    .await?
            };
            match waited.into_value().map(|v| v.value) {
                Some(Record::Done { outcome, .. }) => return Ok(Flight::Joined(outcome)),
                Some(Record::Running { owner, progress }) if Instant::now() >= deadline => {
                    return Ok(Flight::RunningElsewhere { owner, progress });
                }
                // The runner went away without an outcome, finished unseen, or may have
                // expired: try to run it here.
                _ => {}
            }
        }
    }
}

impl SharedValues {
    /// The outcome a runner published that `watch` (if this caller has one) observed and no
    /// wait has consumed yet.
    async fn published_outcome<T, P>(
        &self,
        key: &str,
        watch: &mut Option<Box<dyn ValueWatch>>,
    ) -> Result<Option<T>, ValuesError>
    where
        T: DeserializeOwned + Send,
        P: DeserializeOwned + Send,
    {
        let Some(watch) = watch else {
            return Ok(None);
        };
        let done = |v: Option<&Versioned<Record<T, P>>>, _: Option<u64>| {
            matches!(v.map(|v| &v.value), Some(Record::Done { .. }))
        };
        Ok(
            match self
                .wait_on(&mut **watch, key, Instant::now(), done)
                .await?
            {
                Waited::Met(Some(Versioned {
                    value: Record::Done { outcome, .. },
                    ..
                })) => Some(outcome),
                _ => None,
            },
        )
    }
}

/// Runs `action` under `guard`, renewed from a task of its own every third of its TTL, and
/// publishes the outcome from another, which a cancelled caller does not stop.
async fn run<T, P, F, Fut>(guard: Arc<Guard>, mut abandon: AbandonOnDrop, action: F) -> T
where
    T: Serialize,
    F: FnOnce(Progress<P>) -> Fut,
    Fut: Future<Output = T>,
{
    let (stop_renewing, stopped) = oneshot::channel::<()>();
    tokio::spawn(renew_until(Arc::clone(&guard), stopped));
    // Lets the renewal task start (and be taken by another thread) before an action that
    // might block this one.
    tokio::task::yield_now().await;
    let outcome = action(Progress {
        guard: Arc::clone(&guard),
        _progress: PhantomData,
    })
    .await;
    drop(stop_renewing);
    abandon.0 = None;
    let json = serde_json::to_value(&outcome).map_err(|error| {
        ValuesError::invalid(
            "outcome",
            std::any::type_name::<T>(),
            format!("it does not serialize as JSON: {error}"),
        )
    });
    let _ = tokio::spawn(publish(guard, json)).await;
    outcome
}

/// Renews `guard` every third of its TTL until `stopped` (its sender dropped) or it is lost.
/// A renewal under way when `stopped` fires still ends, holding the guard's state, so the
/// outcome is written over the version it leaves.
async fn renew_until(guard: Arc<Guard>, mut stopped: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            () = tokio::time::sleep(guard.ttl / 3) => match guard.renew().await {
                Ok(true) => {}
                Ok(false) => return,
                Err(error) => {
                    tracing::warn!(key = %guard.key, %error, "single-flight guard not renewed; retrying");
                }
            },
        }
    }
}

/// Publishes the outcome over `guard` and deletes it, logging what could not be done.
async fn publish(guard: Arc<Guard>, outcome: Result<serde_json::Value, ValuesError>) {
    match guard.complete(outcome).await {
        Ok(()) => {}
        Err(Unpublished {
            error,
            guard_deleted: true,
        }) => {
            tracing::warn!(key = %guard.key, %error, "single-flight outcome not published; the guard is deleted, so callers run the action themselves");
        }
        Err(Unpublished { error, .. }) => {
            tracing::warn!(key = %guard.key, %error, "single-flight outcome not published; the guard ends at its TTL");
        }
    }
}

/// The version of the guard at `key` if it holds `owner`'s running record.
async fn running_version(
    values: &SharedValues,
    key: &str,
    owner: &str,
) -> Result<Option<u64>, ValuesError> {
    let read = values.get::<Record<serde_json::Value, serde_json::Value>>(key);
    Ok(match read.await? {
        Some(Versioned {
            version,
            value: Record::Running { owner: found, .. },
        }) if found == owner => Some(version),
        _ => None,
    })
}

/// How long a claim whose reply was lost is looked after: past it, its guard is left to its TTL.
const SETTLE_FOR: Duration = Duration::from_secs(60);

/// Deletes the guard of a claim whose reply was lost, should Redis have run it: no action runs
/// under it. Reads come after the claim on its connection, so the first answered one settles
/// it; tried for `ttl` or [`SETTLE_FOR`], whichever is shorter.
async fn settle_unconfirmed_claim(values: SharedValues, key: String, owner: String, ttl: Duration) {
    let deadline = Instant::now() + ttl.min(SETTLE_FOR);
    let mut pause = Duration::from_millis(100);
    while Instant::now() < deadline {
        match running_version(&values, &key, &owner).await {
            Ok(None) => return,
            Ok(Some(version)) => {
                if values.compare_and_delete(&key, version).await.is_ok() {
                    return;
                }
            }
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// A claim of a guard, sent from a task of its own: should the caller be dropped before it
/// takes the claim's outcome, the guard claimed is deleted, as no action runs under it.
struct Claim {
    task: Option<JoinHandle<Result<Option<u64>, ValuesError>>>,
    values: SharedValues,
    key: String,
}

impl Claim {
    fn send(values: &SharedValues, key: &str, owner: &str, ttl: Duration) -> Self {
        let task = tokio::spawn({
            let (values, key, owner) = (values.clone(), key.to_owned(), owner.to_owned());
            async move {
                let running = Record::<(), ()>::Running {
                    owner: owner.clone(),
                    progress: None,
                };
                let claimed = values
                    .set_if_absent(&key, &running, Expiry::After(ttl))
                    .await;
                if let Err(ValuesError::Unavailable { .. }) = claimed {
                    tokio::spawn(settle_unconfirmed_claim(values, key, owner, ttl));
                }
                claimed
            }
        });
        Claim {
            task: Some(task),
            values: values.clone(),
            key: key.to_owned(),
        }
    }

    /// The claimed guard's version, `None` when another holds the key.
    async fn outcome(mut self) -> Result<Option<u64>, ValuesError> {
        let Some(task) = &mut self.task else {
            unreachable!("a claim's outcome is taken once");
        };
        let joined = task.await;
        self.task = None;
        match joined {
            Ok(claimed) => claimed,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => Err(ValuesError::unavailable("set", &self.key, error)),
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let (values, key) = (self.values.clone(), std::mem::take(&mut self.key));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Ok(Ok(Some(version))) = task.await {
                    let _ = values.compare_and_delete(&key, version).await;
                }
            });
        }
    }
}
