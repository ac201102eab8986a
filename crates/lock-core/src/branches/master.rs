//! [`Master`], the producer side of a master invocation.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::branches::error::BranchError;
use crate::branches::outcome::Registration;
use crate::branches::port::Branches;
use crate::branches::sub_key::SubKey;
use crate::branches::telemetry;
use crate::branches::token::{BranchToken, validate_branch_id};
use crate::lock::{LeaseState, LostReason};

/// The master invocation a block runs in, which registers the block's branches.
///
/// Register each asynchronous branch with [`register_branch`](Master::register_branch) before
/// starting it, and send the token along. Clones are the same invocation. Registration is
/// sealed when the block returns, and a clone kept past it gets [`BranchError::Sealed`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::branches::{BranchError, InMemoryBranches, Master, MasterLocks};
/// use lock_core::lock::{InMemoryLock, Lease};
///
/// /// The producer: one branch per indexing consumer, each token in its message.
/// async fn publish(master: Master, outbox: &mut Vec<String>) -> Result<(), BranchError> {
///     for consumer in ["search", "audit"] {
///         let token = master.register_branch(consumer).await?; // before the message leaves
///         outbox.push(token.to_string());
///     }
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BranchError> {
/// let masters = MasterLocks::new(Arc::new(InMemoryLock::new()), Arc::new(InMemoryBranches::new()));
/// let mut outbox = Vec::new();
/// let options = lock_core::branches::MasterOptions::new(Lease::Watchdog)
///     .branch_wait(std::time::Duration::from_millis(100))?;
/// let outcome = masters
///     .with_master_lock("ticket:4711", options, |master| publish(master, &mut outbox))
///     .await?;
/// outcome.value?;
/// assert_eq!(outbox.len(), 2);
/// // Nobody consumed the messages: the master waited 100 ms and names both.
/// assert_eq!(outcome.branches.missing(), ["audit", "search"]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Master {
    state: Arc<State>,
}

struct State {
    branches: Arc<dyn Branches>,
    sub_key: SubKey,
    /// The master lock's lease.
    lease: LeaseState,
    /// The TTL every call gives the invocation's record (at least the lease).
    ttl: Duration,
    /// Where the backend was switched off, when it was: every registration then fails open
    /// without a call.
    disabled: Option<String>,
    sealed: AtomicBool,
    /// Branch ids confirmed registered, for naming them when the backend cannot.
    registered: Mutex<BTreeSet<String>>,
    /// Branch ids that failed open.
    unregistered: Mutex<BTreeSet<String>>,
}

impl fmt::Debug for Master {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Master")
            .field("sub_key", &self.state.sub_key)
            .field("tracked", &self.is_tracked())
            .field("sealed", &self.is_sealed())
            .finish_non_exhaustive()
    }
}

impl Master {
    /// The master of `sub_key`; `disabled` says where the backend was switched off, if it was.
    pub(crate) fn new(
        branches: Arc<dyn Branches>,
        sub_key: SubKey,
        lease: LeaseState,
        ttl: Duration,
        disabled: Option<String>,
    ) -> Self {
        Master {
            state: Arc::new(State {
                branches,
                sub_key,
                lease,
                ttl,
                disabled,
                sealed: AtomicBool::new(false),
                registered: Mutex::default(),
                unregistered: Mutex::default(),
            }),
        }
    }

    /// This invocation's master key and id.
    pub fn sub_key(&self) -> &SubKey {
        &self.state.sub_key
    }

    /// The invocation id: the fencing token of the master's lock grant, usable to fence the
    /// block's writes.
    pub fn invocation(&self) -> u64 {
        self.state.sub_key.invocation()
    }

    /// Completes when the master's lease is lost (see
    /// [`LockHandle::lost`](crate::lock::LockHandle::lost)): a block that outlives it may run
    /// beside the next master of its key, so a long block should stop then.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.state.lease.lost()
    }

    /// Whether branches are tracked; `false` when the backend is disabled.
    pub fn is_tracked(&self) -> bool {
        self.state.disabled.is_none()
    }

    /// Whether the block has returned and registration is sealed.
    pub fn is_sealed(&self) -> bool {
        self.state.sealed.load(Ordering::SeqCst)
    }

    /// Registers the branch `branch_id` and returns the token its consumer releases it with.
    ///
    /// Call it before starting the branch, so that its release cannot come first. Registering
    /// an id again returns an equal token and counts once.
    ///
    /// It fails open: when the backend is disabled or does not confirm, or the invocation's
    /// record is gone, it returns a token [marked unregistered](BranchToken::is_registered) and
    /// logs an `INFO` (disabled) or a `WARN` (anything else). Start the branch all the same. The
    /// master lists it in
    /// [`MasterOutcome::unregistered`](crate::branches::MasterOutcome::unregistered) and waits
    /// for it only if the registration arrived after all.
    ///
    /// # Errors
    /// - [`BranchError::InvalidArgument`] (`BRANCHES_INVALID_ARGUMENT`): the id is not accepted
    ///   by [`validate_branch_id`], and nothing was sent.
    /// - [`BranchError::Sealed`] (`BRANCHES_SEALED`): the block has returned, and nobody waits
    ///   for a branch started now.
    pub async fn register_branch(&self, branch_id: &str) -> Result<BranchToken, BranchError> {
        validate_branch_id(branch_id)?;
        let state = &self.state;
        let sealed = || {
            telemetry::registered("sealed");
            BranchError::Sealed {
                sub_key: state.sub_key.clone(),
                branch: branch_id.to_owned(),
            }
        };
        if self.is_sealed() {
            return Err(sealed());
        }
        if let Some(detail) = &state.disabled {
            return Ok(self.fail_open(branch_id, FailOpen::Disabled(detail)));
        }
        match state
            .branches
            .register(&state.sub_key, branch_id, state.ttl)
            .await
        {
            Ok(registration) if registration.is_registered() => {
                telemetry::registered("registered");
                lock(&state.registered).insert(branch_id.to_owned());
                Ok(BranchToken::new(state.sub_key.clone(), branch_id, true))
            }
            Ok(Registration::Sealed) => Err(sealed()),
            Ok(_) => Ok(self.fail_open(branch_id, FailOpen::RecordGone)),
            Err(error @ BranchError::InvalidArgument { .. }) => Err(error),
            Err(error) => Ok(self.fail_open(branch_id, FailOpen::Unconfirmed(error))),
        }
    }

    /// The unregistered token of `branch`, with its log line.
    fn fail_open(&self, branch: &str, why: FailOpen<'_>) -> BranchToken {
        let state = &self.state;
        telemetry::registered("unregistered");
        lock(&state.unregistered).insert(branch.to_owned());
        let (master_key, invocation) = (state.sub_key.master_key(), state.sub_key.invocation());
        match why {
            FailOpen::Disabled(detail) => tracing::info!(
                master_key,
                invocation,
                branch,
                detail,
                "master/sub locks are disabled; the branch runs untracked and the master does not wait for it"
            ),
            FailOpen::RecordGone => tracing::warn!(
                master_key,
                invocation,
                branch,
                "the invocation's record is gone (expired or lost); the branch runs unregistered and the master does not wait for it (fail open)"
            ),
            FailOpen::Unconfirmed(error) => tracing::warn!(
                master_key,
                invocation,
                branch,
                %error,
                "the registration was not confirmed; the branch runs unregistered and the master does not wait for it (fail open)"
            ),
        }
        BranchToken::new(state.sub_key.clone(), branch, false)
    }

    /// Seals registration locally: later calls fail without a backend call.
    pub(crate) fn seal(&self) {
        self.state.sealed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn branches(&self) -> &Arc<dyn Branches> {
        &self.state.branches
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.state.ttl
    }

    /// The branch ids confirmed registered, sorted.
    pub(crate) fn registered(&self) -> Vec<String> {
        lock(&self.state.registered).iter().cloned().collect()
    }

    /// The branch ids that failed open, sorted.
    pub(crate) fn unregistered(&self) -> Vec<String> {
        lock(&self.state.unregistered).iter().cloned().collect()
    }
}

/// Why a registration failed open.
enum FailOpen<'a> {
    /// The backend is switched off, here: nothing is wrong.
    Disabled(&'a str),
    /// The backend answered that the invocation's record does not exist.
    RecordGone,
    /// The backend did not confirm the registration.
    Unconfirmed(BranchError),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Sets of names: a panic elsewhere cannot leave one half-written.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
