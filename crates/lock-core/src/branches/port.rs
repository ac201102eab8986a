//! The branches port, [`Branches`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::branches::error::BranchError;
use crate::branches::outcome::{BranchRelease, Registration};
use crate::branches::sub_key::SubKey;
use crate::branches::token::BranchToken;
use crate::watch::ChangeWatch;

/// The branch records of master invocations, shared by every process of the backend.
///
/// Consumers call [`release_branch`](Branches::release_branch); the other methods are the steps
/// [`MasterLocks`](crate::branches::MasterLocks) takes, for backends to implement. The trait is
/// object safe: services hold an `Arc<dyn Branches>`.
///
/// # Contract
/// Every implementation passes the conformance suite (feature `conformance`). In short:
/// - **One record per invocation**, created by [`open`](Branches::open) only and deleted by
///   [`close`](Branches::close). Its TTL is at least the `ttl` of the latest call, never
///   shortened, so a crashed master's record disappears within it.
/// - **Counted by id.** A branch id is registered once and released once however often either
///   is sent. Nothing counts against another id or below zero.
/// - **Sealed.** After [`seal`](Branches::seal), a registration of a new id answers
///   [`Registration::Sealed`] and changes nothing.
/// - **Releases before registrations** are remembered: the late registration answers
///   [`Registration::AlreadyReleased`] and is not waited for.
/// - **Unknown invocations** are no-ops that write nothing: `register` answers
///   [`Registration::Unknown`], `release` [`BranchRelease::Unknown`], `seal` and `pending`
///   `None`.
/// - **Wake-ups.** A [`watch`](Branches::watch) wakes after every release that follows it,
///   possibly spuriously or once for several, never missing the last. Callers re-read on each
///   wake.
/// - **Idempotent.** An operation re-sent after a reconnect has the effect of one.
/// - **Bounded.** Every call returns within the backend's command timeout, failing with
///   [`BranchError::Unavailable`] naming the operation.
/// - **Backend time.** TTLs run on the backend's clock, never a client's.
///
/// # Examples
///
/// A consumer releases the branch its message carries once the work is done:
///
/// ```
/// use lock_core::branches::{BranchError, BranchRelease, BranchToken, Branches, InMemoryBranches};
///
/// async fn on_indexed(branches: &dyn Branches, header: &str) -> Result<(), BranchError> {
///     let token: BranchToken = header.parse()?; // BRANCHES_INVALID_TOKEN: a bad header
///     match branches.release_branch(&token).await? {
///         BranchRelease::Released => {}                       // the master may go on now
///         BranchRelease::AlreadyReleased => {}                // a redelivery: counted once
///         BranchRelease::NotRegistered | BranchRelease::Unknown => {} // nobody waits for it
///         _ => {}
///     }
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BranchError> {
/// // A token of a master that has finished: a no-op.
/// on_indexed(&InMemoryBranches::new(), "br1|42|r|ticket:4711|search").await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Branches: Send + Sync + fmt::Debug {
    /// The space these records live in, never containing credentials.
    fn namespace(&self) -> &str;

    /// Creates the record of `sub_key` with a TTL of `ttl`, keeping an existing one.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`], and the master's block does not run.
    /// [`BranchError::Disabled`], and the master runs untracked.
    async fn open(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError>;

    /// Registers the branch id `branch` under `sub_key` and lengthens the record's TTL to `ttl`.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`]: not confirmed, though it may have arrived.
    async fn register(
        &self,
        sub_key: &SubKey,
        branch: &str,
        ttl: Duration,
    ) -> Result<Registration, BranchError>;

    /// Lengthens the TTL of `sub_key`'s record to `ttl`, if the record exists.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`].
    async fn refresh(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError>;

    /// Seals `sub_key` against new registrations, lengthens its TTL to `ttl`, and returns the
    /// branch ids not yet released, sorted; `None` when the record does not exist.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`].
    async fn seal(
        &self,
        sub_key: &SubKey,
        ttl: Duration,
    ) -> Result<Option<Vec<String>>, BranchError>;

    /// The branch ids of `sub_key` not yet released, sorted; `None` when the record does not
    /// exist.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`].
    async fn pending(&self, sub_key: &SubKey) -> Result<Option<Vec<String>>, BranchError>;

    /// Starts watching `sub_key` for releases; take it before the read it guards.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`]: the master then waits for its bound.
    async fn watch(&self, sub_key: &SubKey) -> Result<Box<dyn ChangeWatch>, BranchError>;

    /// The hook of [`release_branch`](Branches::release_branch): releases `branch` of `sub_key`
    /// and wakes its watches.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`]: not confirmed. Releases are idempotent, so retry.
    async fn release(&self, sub_key: &SubKey, branch: &str) -> Result<BranchRelease, BranchError>;

    /// Deletes `sub_key`'s record, if it exists.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`]: the record then ends at its TTL.
    async fn close(&self, sub_key: &SubKey) -> Result<(), BranchError>;

    /// The consumer side: marks the branch of `token` done, from any process. Release every
    /// token you receive, registered or not (an unconfirmed registration may have arrived).
    /// Idempotent: a redelivered release answers [`BranchRelease::AlreadyReleased`] and counts
    /// once. Runs in a `branches.release` span and records
    /// [`RELEASES_TOTAL`](crate::branches::telemetry::RELEASES_TOTAL).
    ///
    /// # Errors
    /// [`BranchError::Unavailable`] (`BRANCHES_UNAVAILABLE`): not confirmed. Retry, or let the
    /// master time out naming this branch.
    async fn release_branch(&self, token: &BranchToken) -> Result<BranchRelease, BranchError> {
        crate::branches::telemetry::release(token, self.release(token.sub_key(), token.branch()))
            .await
    }
}
