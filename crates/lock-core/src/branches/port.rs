//! The port: [`Branches`], the branch bookkeeping of master invocations.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::branches::error::BranchError;
use crate::branches::outcome::{BranchRelease, Registration};
use crate::branches::sub_key::SubKey;
use crate::branches::token::BranchToken;
use crate::watch::ChangeWatch;

/// The branch bookkeeping of master invocations, shared by every process of the backend: which
/// branches each invocation registered, which were released, and a wake-up when one is.
///
/// Services do not call most of this themselves: producers go through
/// [`MasterLocks::with_master_lock`](crate::branches::MasterLocks::with_master_lock) and
/// [`Master::register_branch`](crate::branches::Master::register_branch), consumers call
/// [`release_branch`](Branches::release_branch). The other methods are the steps the master
/// orchestration takes, for backends to implement.
///
/// # Contract
/// Every implementation passes the conformance suite (`lock_core::branches::conformance`,
/// feature `conformance`). In short:
/// - **One record per invocation**, created by [`open`](Branches::open), shared by all clients
///   of the backend, with a TTL of at least the `ttl` given (never shortened by a later call),
///   refreshed by `register`, `refresh` and `seal`; deleted by [`close`](Branches::close). A
///   record whose process crashed disappears within its TTL. No other method creates one.
/// - **Counted by id.** A branch id registers once however often it is registered, and is
///   released once however often it is released; a release never counts against another id,
///   and nothing counts below zero.
/// - **Sealed.** After [`seal`](Branches::seal), a registration of a new id answers
///   [`Registration::Sealed`] and changes nothing; one that arrived before the seal is in the
///   pending set the seal returns.
/// - **Releases before registrations.** A release of an id the record does not know
///   ([`BranchRelease::NotRegistered`]) is remembered, so a registration arriving after it
///   answers [`Registration::AlreadyReleased`] and is not waited for.
/// - **Unknown invocations** (no record: never opened, closed, expired) are no-ops:
///   `register` → [`Registration::Unknown`], `release` → [`BranchRelease::Unknown`], `seal` and
///   `pending` → `None`; nothing is written.
/// - **Wake-ups.** A [`watch`](Branches::watch) taken before a `pending` read is woken
///   ([`ChangeWatch::changed`]) after every release that happens after the watch was taken —
///   possibly spuriously, possibly once for several releases, but never missing the last one.
///   Callers re-read on every wake; nobody polls.
/// - **Idempotent under retries.** Each operation applied twice (a client re-sending after a
///   reconnect) has the effect of applying it once.
/// - **Bounded.** Every call returns within the backend's command timeout; a failure is
///   [`BranchError::Unavailable`] naming the operation (or [`BranchError::Disabled`]).
/// - **Time from the backend.** TTLs run on the backend's clock, never a client's.
///
/// The trait is object safe; services hold it as `Arc<dyn Branches>`.
///
/// # Examples
///
/// A consumer: releases the branch its message carries once the work is done.
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
    /// The space these records live in (same backend, same key prefix), e.g.
    /// `redis://cache:6379/0 lock:`. Never contains credentials.
    fn namespace(&self) -> &str;

    /// Creates the record of `sub_key` (open for registration, no branches) with a TTL of
    /// `ttl`. Idempotent: an existing record is kept (its TTL only lengthened).
    ///
    /// # Errors
    /// [`BranchError::Unavailable`] (the master then fails closed: its block does not run), or
    /// [`BranchError::Disabled`] (the master runs untracked: every registration fails open).
    async fn open(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError>;

    /// Registers `branch` (a valid branch id) under `sub_key` and lengthens the record's TTL to
    /// at least `ttl`.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`]: not confirmed (it may still have arrived).
    async fn register(
        &self,
        sub_key: &SubKey,
        branch: &str,
        ttl: Duration,
    ) -> Result<Registration, BranchError>;

    /// Lengthens the TTL of `sub_key`'s record to at least `ttl`, if it exists (a long master
    /// block keeps its record alive with it).
    ///
    /// # Errors
    /// [`BranchError::Unavailable`].
    async fn refresh(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError>;

    /// Seals `sub_key` (no new registrations), lengthens its TTL to at least `ttl`, and returns
    /// the branch ids not yet released, sorted; `None` when the record does not exist.
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

    /// Starts watching `sub_key` for releases. Take it before the read it guards.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`]: no notifications; the master then waits for its bound.
    async fn watch(&self, sub_key: &SubKey) -> Result<Box<dyn ChangeWatch>, BranchError>;

    /// The implementation hook of [`release_branch`](Branches::release_branch): releases
    /// `branch` of `sub_key` and wakes its watch, if the branch was pending.
    ///
    /// # Errors
    /// [`BranchError::Unavailable`]: not confirmed (retry; releases are idempotent).
    async fn release(&self, sub_key: &SubKey, branch: &str) -> Result<BranchRelease, BranchError>;

    /// Deletes `sub_key`'s record. Idempotent.
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
    /// [`BranchError::Unavailable`] (`BRANCHES_UNAVAILABLE`): not confirmed — retry, or let the
    /// master time out naming this branch.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lock_core::branches::{BranchRelease, Branches, InMemoryBranches, MasterLocks};
    /// use lock_core::{InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::branches::BranchError> {
    /// let branches = Arc::new(InMemoryBranches::new());
    /// let masters = MasterLocks::new(Arc::new(InMemoryLock::new()), branches.clone());
    /// let outcome = masters
    ///     .with_master_lock("ticket:4711", Lease::Watchdog, |master| async move {
    ///         let token = master.register_branch("search").await?;
    ///         // … send the message carrying `token.to_string()`; its consumer, later:
    ///         assert_eq!(branches.release_branch(&token).await?, BranchRelease::Released);
    ///         assert_eq!(branches.release_branch(&token).await?, BranchRelease::AlreadyReleased);
    ///         Ok::<_, lock_core::branches::BranchError>(())
    ///     })
    ///     .await?;
    /// outcome.value?;
    /// assert!(outcome.branches.is_all_released());
    /// # Ok(()) }
    /// ```
    async fn release_branch(&self, token: &BranchToken) -> Result<BranchRelease, BranchError> {
        crate::branches::telemetry::release(token, self.release(token.sub_key(), token.branch()))
            .await
    }
}
