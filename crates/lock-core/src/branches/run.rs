//! [`MasterLocks`], the master orchestration over any [`DistributedLock`] and [`Branches`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::branches::error::BranchError;
use crate::branches::master::Master;
use crate::branches::options::{DEFAULT_BRANCH_WAIT, MasterOptions};
use crate::branches::outcome::{BranchRelease, BranchesOutcome, MasterOutcome};
use crate::branches::port::Branches;
use crate::branches::sub_key::SubKey;
use crate::branches::telemetry;
use crate::branches::token::BranchToken;
use crate::lock::lease::Lease;
use crate::lock::port::DistributedLock;
use crate::lock::status::{LeaseStatus, LostReason};
use crate::watch::ChangeWatch;

/// How much longer than the branch wait an invocation's record lives: 2 s, for the last read at
/// the wait's end (one command timeout) to find it.
const RECORD_SLACK: Duration = Duration::from_secs(2);

/// Master/sub locks: a [`DistributedLock`] for the master keys and a [`Branches`] backend for
/// the branches.
///
/// A master invocation holds the lock on its key for its block and for the wait for the
/// branches the block started. So the next invocation under the key starts only once the
/// previous one's branches are done, or its wait bound has passed.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::branches::{BranchError, Branches, InMemoryBranches, MasterLocks};
/// use lock_core::lock::{InMemoryLock, Lease};
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> Result<(), BranchError> {
/// let branches = Arc::new(InMemoryBranches::new());
/// let masters = MasterLocks::new(Arc::new(InMemoryLock::new()), branches.clone());
/// let (queue, mut consumer) = tokio::sync::mpsc::unbounded_channel::<String>();
///
/// // The indexing consumer, elsewhere: releases each branch once its write is visible.
/// let indexer = tokio::spawn(async move {
///     while let Some(header) = consumer.recv().await {
///         let token = header.parse().expect("a branch token");
///         branches.release_branch(&token).await.expect("released");
///     }
/// });
///
/// let outcome = masters
///     .with_master_lock("ticket:4711", Lease::Watchdog, |master| async move {
///         // … update the ticket in the database, then:
///         let token = master.register_branch("search-index").await?;
///         queue.send(token.to_string()).unwrap(); // stands in for a Kafka header
///         Ok::<_, BranchError>("updated")
///     })
///     .await?;
/// // Returns once the consumer has released the branch: the change is searchable.
/// assert!(outcome.is_complete());
/// assert_eq!(outcome.value?, "updated");
/// # indexer.abort();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MasterLocks {
    lock: Arc<dyn DistributedLock>,
    branches: Arc<dyn Branches>,
    /// The branch wait of a watchdog-leased master that gives none.
    branch_wait: Duration,
}

impl fmt::Debug for MasterLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterLocks")
            .field("lock", &self.lock.namespace())
            .field("branches", &self.branches.namespace())
            .finish()
    }
}

impl MasterLocks {
    /// Master locks on `lock`, with branches kept in `branches`.
    pub fn new(lock: Arc<dyn DistributedLock>, branches: Arc<dyn Branches>) -> Self {
        MasterLocks {
            lock,
            branches,
            branch_wait: DEFAULT_BRANCH_WAIT,
        }
    }

    /// Sets the branch wait of a [`Lease::Watchdog`] master whose options give none, by default
    /// [`DEFAULT_BRANCH_WAIT`].
    ///
    /// # Errors
    /// As [`MasterOptions::branch_wait`], for a wait over 1 h.
    pub fn with_branch_wait(mut self, wait: Duration) -> Result<Self, BranchError> {
        MasterOptions::new(Lease::Watchdog).branch_wait(wait)?;
        self.branch_wait = wait;
        Ok(self)
    }

    /// The branch wait of a watchdog-leased master whose options give none.
    pub fn branch_wait(&self) -> Duration {
        self.branch_wait
    }

    /// The lock the master keys are locked with.
    pub fn lock(&self) -> &Arc<dyn DistributedLock> {
        &self.lock
    }

    /// The branch backend.
    pub fn branches(&self) -> &Arc<dyn Branches> {
        &self.branches
    }

    /// [`Branches::release_branch`] on this backend.
    ///
    /// # Errors
    /// As [`Branches::release_branch`].
    pub async fn release_branch(&self, token: &BranchToken) -> Result<BranchRelease, BranchError> {
        self.branches.release_branch(token).await
    }

    /// Runs `block` as a master invocation of `key`, and waits for the branches it started.
    ///
    /// 1. Acquires the lock on `key` with `options`, a [`Lease`] or [`MasterOptions`].
    /// 2. Opens the invocation's record, with a TTL of at least the lease and of the branch
    ///    wait plus 2 s, kept alive while the block runs.
    /// 3. Runs `block` with the [`Master`], which registers branches.
    /// 4. Seals registration and waits, woken by each release, until every registered branch
    ///    is released, the branch wait passes, or the lease is lost. A fixed lease's wait ends
    ///    at the latest a tenth of the lease, at most 1 s, before the lease does.
    /// 5. Deletes the record, releases the lock, and returns a [`MasterOutcome`].
    ///
    /// The master fails closed: the block runs only once the lock is granted and the record
    /// opened. The branches fail open, as [`Master::register_branch`] says. Inside the block
    /// the lock is re-entrant, as in [`with_lock`](crate::lock::DistributedLockExt::with_lock). If the
    /// returned future is dropped, the lock and the record are released in the background.
    ///
    /// # Errors
    /// None once the block has run: the outcome says what happened. Before it:
    /// - [`BranchError::MasterLock`]: the lock was not granted, with `BRANCHES_MASTER_LOCK_FAILED`
    ///   (HTTP 503), `BRANCHES_DISABLED` for a disabled lock, or `BRANCHES_INVALID_ARGUMENT` for
    ///   a key or lease the lock rejects.
    /// - [`BranchError::Unavailable`] (`BRANCHES_UNAVAILABLE`, HTTP 503): the record could not
    ///   be opened, and the lock was released.
    /// - [`BranchError::InvalidArgument`] (`BRANCHES_INVALID_ARGUMENT`, HTTP 500): this task
    ///   already holds `key` in an enclosing `with_lock` or master section.
    pub fn with_master_lock<F, Fut, T>(
        &self,
        key: &str,
        options: impl Into<MasterOptions>,
        block: F,
    ) -> impl Future<Output = Result<MasterOutcome<T>, BranchError>> + Send
    where
        F: FnOnce(Master) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let options = options.into();
        let span = telemetry::master_span(key);
        self.run(key, options, block, span.clone()).instrument(span)
    }

    async fn run<F, Fut, T>(
        &self,
        key: &str,
        options: MasterOptions,
        block: F,
        span: tracing::Span,
    ) -> Result<MasterOutcome<T>, BranchError>
    where
        F: FnOnce(Master) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let handle = self
            .lock
            .acquire_with(key, options.acquire_options())
            .await?;
        if handle.is_reentrant() {
            return Err(BranchError::InvalidArgument {
                name: "key",
                value: format!("{key:?}"),
                problem: "this task already holds it (an enclosing with_lock or master section): \
                          a master invocation needs a grant, and a fencing token, of its own"
                    .to_owned(),
            });
        }
        let sub_key = SubKey::new(key, handle.fencing_token());
        span.record("invocation", sub_key.invocation());
        let lease_end = match handle.status() {
            LeaseStatus::Held { valid_until } => valid_until,
            _ => None,
        };
        let bounds = Bounds::new(
            handle.lease(),
            lease_end,
            options.branch_wait_time(),
            self.branch_wait,
        );
        let disabled = match self.branches.open(&sub_key, bounds.ttl).await {
            Ok(()) => None,
            Err(BranchError::Disabled { detail }) => {
                tracing::debug!(master_key = key, %detail, "master/sub locks disabled; running the master untracked");
                Some(detail)
            }
            Err(error) => {
                // Fail closed: the block does not run, and the lock is free again when the
                // caller hears of it (a failed release leaves it to its TTL).
                if let Err(release) = handle.release().await {
                    tracing::debug!(master_key = key, error = %release, "releasing the master lock after a failed open was not confirmed");
                }
                return Err(error);
            }
        };
        let tracked = disabled.is_none();
        let lease = handle.lease_state().clone();
        let master = Master::new(
            Arc::clone(&self.branches),
            sub_key,
            lease.clone(),
            bounds.ttl,
            disabled,
        );
        let mut lost: Pin<Box<dyn Future<Output = LostReason> + Send>> = Box::pin(handle.lost());
        let namespace = self.lock.namespace().to_owned();
        let section = || async move {
            let cleanup = Cleanup::armed(&master);
            let value = {
                let block = block(master.clone());
                if tracked {
                    tokio::select! {
                        value = block => value,
                        never = keep_alive(&master) => match never {},
                    }
                } else {
                    block.await
                }
            };
            master.seal();
            // The critical section is the block: the wait that follows is bounded by the lease.
            let block_in_time = lease.is_held();
            let started = Instant::now();
            let (outcome, cause) = if tracked {
                wait_for_branches(&master, bounds.deadline(), bounds.lease_end, &mut lost).await
            } else {
                (BranchesOutcome::AllReleased, None)
            };
            let waited = started.elapsed();
            cleanup.run().await;
            let cause = cause.as_deref();
            telemetry::master_done(&span, key, master.invocation(), &outcome, cause, waited);
            let outcome = MasterOutcome {
                value,
                branches: outcome,
                invocation: master.invocation(),
                unregistered: master.unregistered(),
                waited,
            };
            (outcome, block_in_time)
        };
        Ok(crate::lock::reentrant::run_holding_split(&namespace, key, handle, section).await)
    }
}

/// The TTL of an invocation's record and the bound of its wait.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    ttl: Duration,
    /// The branch wait: measured from the block's return.
    wait: Duration,
    /// When a fixed lease's wait ends at the latest: [`closing_margin`] before the lease's
    /// local end.
    wait_end: Option<Instant>,
    /// A fixed lease's local end: its wait's last read ends by then.
    lease_end: Option<Instant>,
}

/// How long before a fixed lease's end its master stops waiting for branches: a tenth of the
/// lease, at most 1 s, for the last read to answer while the lease is held.
fn closing_margin(lease: Duration) -> Duration {
    (lease / 10).min(Duration::from_secs(1))
}

impl Bounds {
    fn new(
        lease: Lease,
        lease_end: Option<Instant>,
        branch_wait: Option<Duration>,
        watchdog_default: Duration,
    ) -> Self {
        let remaining = lease_end.map(|end| end.saturating_duration_since(Instant::now()));
        let (lease_span, wait_end, fixed_end) = match lease {
            Lease::Fixed(d) => (
                d,
                lease_end.map(|end| end.checked_sub(closing_margin(d)).unwrap_or(end)),
                lease_end,
            ),
            // A watchdog lease is renewed: its present validity is about one watchdog timeout.
            Lease::Watchdog => (remaining.unwrap_or_default(), None, None),
        };
        let wait = branch_wait.unwrap_or(match lease {
            Lease::Fixed(d) => remaining.unwrap_or(d),
            Lease::Watchdog => watchdog_default,
        });
        Bounds {
            ttl: lease_span.max(wait + RECORD_SLACK),
            wait,
            wait_end,
            lease_end: fixed_end,
        }
    }

    /// When the wait ends, for a block that returns now.
    fn deadline(&self) -> Instant {
        let end = Instant::now() + self.wait;
        self.wait_end.map_or(end, |wait_end| end.min(wait_end))
    }
}

/// Keeps the record alive while the block runs: its TTL lengthened every third of it, as the
/// watchdog does for a lease (a block may outlast one TTL without registering anything).
async fn keep_alive(master: &Master) -> std::convert::Infallible {
    let period = master.ttl() / 3;
    loop {
        tokio::time::sleep(period).await;
        if let Err(error) = master
            .branches()
            .refresh(master.sub_key(), master.ttl())
            .await
        {
            tracing::debug!(sub_key = %master.sub_key(), %error, "refreshing the branch record's TTL failed; retrying in a third of it");
        }
    }
}

/// The wait before re-reading after a read failed: doubled after each failure, up to
/// [`RETRY_MAX`], reset by a read that succeeds.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Seals the invocation and waits until its pending branches are released, `deadline` passes
/// or the lease is lost. Subscribes before each read; re-reads on every wake, and after a failed
/// read; one last read at the deadline (a wake-up lost with a connection must not turn a done
/// branch into a missing one), ended by `last_read_by` if it comes first. Reads before the
/// deadline end with it. Returns the outcome, and why the branches could not be read when it is
/// `Unconfirmed`.
async fn wait_for_branches(
    master: &Master,
    deadline: Instant,
    last_read_by: Option<Instant>,
    lost: &mut Pin<Box<dyn Future<Output = LostReason> + Send>>,
) -> (BranchesOutcome, Option<String>) {
    let (branches, sub_key) = (master.branches(), master.sub_key());
    // What to name when the backend never answers: every branch it confirmed.
    let mut last = master.registered();
    let mut sealed = false;
    let mut watch: Option<Box<dyn ChangeWatch>> = None;
    let mut retry = RETRY_FIRST;
    let mut retry_at: Option<Instant>;
    let mut read = by(
        deadline,
        "seal",
        sub_key,
        branches.seal(sub_key, master.ttl()),
    )
    .await;
    // Lost while the block ran (a fixed lease shorter than the block, a failed renewal): the
    // next owner may be running already, so do not wait.
    if let Some(reason) = poll_lost(lost) {
        let missing = match read {
            Ok(Some(pending)) => pending,
            _ => last,
        };
        return (BranchesOutcome::LeaseLost { missing, reason }, None);
    }
    loop {
        sealed |= read.is_ok();
        match read {
            Ok(Some(pending)) if pending.is_empty() => {
                let outcome = match poll_lost(lost) {
                    Some(reason) => BranchesOutcome::LeaseLost {
                        missing: Vec::new(),
                        reason,
                    },
                    None => BranchesOutcome::AllReleased,
                };
                return (outcome, None);
            }
            Ok(Some(pending)) => {
                last = pending;
                (retry, retry_at) = (RETRY_FIRST, None);
            }
            Ok(None) => return record_gone(last),
            Err(error) => {
                tracing::debug!(%sub_key, %error, retry_in = ?retry, "reading the branches failed; reading again after a wake-up or the retry");
                retry_at = Some(Instant::now() + retry);
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
        if watch.is_none() {
            match by(deadline, "watch", sub_key, branches.watch(sub_key)).await {
                Ok(taken) => {
                    watch = Some(taken);
                    // Releases before the watch existed woke nobody: read again behind it.
                    read = by(deadline, "read", sub_key, next_read(master, sealed)).await;
                    continue;
                }
                Err(error) => {
                    // Unwoken, it reads (and watches) again within a second.
                    tracing::debug!(%sub_key, %error, "watching for releases failed; trying again within a second");
                    let again = Instant::now() + RETRY_MAX;
                    retry_at = Some(retry_at.map_or(again, |at| at.min(again)));
                }
            }
        }
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => {
                let read = next_read(master, sealed);
                let read = match last_read_by {
                    Some(end) => by(end, "read", sub_key, read).await,
                    None => read.await,
                };
                return match read {
                    Ok(Some(pending)) if pending.is_empty() => (BranchesOutcome::AllReleased, None),
                    Ok(Some(missing)) => (BranchesOutcome::TimedOut { missing }, None),
                    Ok(None) => record_gone(last),
                    Err(error) => unconfirmed(last, error.to_string()),
                };
            }
            reason = lost.as_mut() => return (BranchesOutcome::LeaseLost { missing: last, reason }, None),
            () = sleep_until_some(retry_at) => {
                read = by(deadline, "read", sub_key, next_read(master, sealed)).await;
            }
            changed = changed(&mut watch) => match changed {
                Ok(()) => read = by(deadline, "read", sub_key, next_read(master, sealed)).await,
                Err(cause) => return unconfirmed(last, format!("the branch backend is unreachable: {cause}")),
            },
        }
    }
}

/// `call`'s result, or [`BranchError::Unavailable`] for `operation` if `end` comes first.
async fn by<T>(
    end: Instant,
    operation: &'static str,
    sub_key: &SubKey,
    call: impl Future<Output = Result<T, BranchError>>,
) -> Result<T, BranchError> {
    tokio::time::timeout_at(end, call)
        .await
        .unwrap_or_else(|_| {
            Err(BranchError::unavailable(
                operation,
                sub_key,
                "no answer before the wait's bound",
            ))
        })
}

/// Sleeps until `at`; never wakes when it is `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Seals if no seal was confirmed yet, else reads.
async fn next_read(master: &Master, sealed: bool) -> Result<Option<Vec<String>>, BranchError> {
    if sealed {
        master.branches().pending(master.sub_key()).await
    } else {
        master.branches().seal(master.sub_key(), master.ttl()).await
    }
}

async fn changed(watch: &mut Option<Box<dyn ChangeWatch>>) -> Result<(), crate::BoxError> {
    match watch {
        Some(watch) => watch.changed().await,
        None => std::future::pending().await,
    }
}

/// The lease's loss, if `lost` has already fired.
fn poll_lost(lost: &mut Pin<Box<dyn Future<Output = LostReason> + Send>>) -> Option<LostReason> {
    let waker = std::task::Waker::noop();
    match lost
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(reason) => Some(reason),
        std::task::Poll::Pending => None,
    }
}

fn record_gone(last: Vec<String>) -> (BranchesOutcome, Option<String>) {
    unconfirmed(last, "the invocation's branch record is gone (the backend lost it, e.g. a restart without persistence)".to_owned())
}

fn unconfirmed(last: Vec<String>, cause: String) -> (BranchesOutcome, Option<String>) {
    (BranchesOutcome::Unconfirmed { missing: last }, Some(cause))
}

/// Deletes the record when the invocation ends: awaited normally, in the background if the
/// invocation's future is dropped or its block panics.
struct Cleanup {
    branches: Arc<dyn Branches>,
    sub_key: SubKey,
    armed: bool,
}

impl Cleanup {
    fn armed(master: &Master) -> Self {
        Cleanup {
            branches: Arc::clone(master.branches()),
            sub_key: master.sub_key().clone(),
            armed: master.is_tracked(),
        }
    }

    async fn run(mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        if let Err(error) = self.branches.close(&self.sub_key).await {
            tracing::debug!(sub_key = %self.sub_key, %error, "deleting the branch record failed; it ends at its TTL");
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime (dropped at exit) the record ends at its TTL.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (branches, sub_key) = (Arc::clone(&self.branches), self.sub_key.clone());
            runtime.spawn(async move {
                let _ = branches.close(&sub_key).await;
            });
        }
    }
}
