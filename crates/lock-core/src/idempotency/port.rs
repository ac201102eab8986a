//! The idempotency port, [`IdempotencyStore`].

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::idempotency::error::IdempotencyError;
use crate::watch::ChangeWatch;

/// What [`IdempotencyStore::claim`] found at a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller owns the in-progress record: run the action, then `complete` or `abandon`.
    Owner,
    /// A result is stored: replay it.
    Completed {
        /// The serialized result.
        result: Vec<u8>,
        /// The request fingerprint the result was produced for, empty if none.
        fingerprint: String,
    },
    /// Another owner's in-progress record: wait for it.
    InProgress {
        /// Its owner token.
        holder: String,
        /// The request fingerprint it runs for, empty if none.
        fingerprint: String,
        /// Its remaining lease, if known.
        ttl: Option<Duration>,
    },
    /// The owner this caller waited on [failed](IdempotencyStore::fail): answer its failure
    /// rather than run the action again.
    Failed {
        /// The failed owner's token.
        holder: String,
    },
}

/// Where idempotency records live: per key, one record either in progress, owned by one caller
/// under a lease, or completed, holding the serialized result for its TTL.
///
/// Callers use [`Idempotency`](crate::idempotency::Idempotency), which runs the protocol over this port.
///
/// # Contract
/// Every implementation passes the conformance suite (feature `conformance`). In short:
/// - **Atomic claims.** Of concurrent claims of an absent key, exactly one gets
///   [`Claim::Owner`], and the others see [`Claim::InProgress`] with that owner. The owner's
///   own re-sent claim gets `Owner` again.
/// - **Failures answered.** A record `fail`ed by its owner answers [`Claim::Failed`] to claims
///   whose `waited_on` names that owner. Any other claim takes it over as if absent.
/// - **Leases.** An in-progress record lives for its `ttl` unless renewed, then `claim` grants
///   it anew. `renew` extends only the caller's own record and never re-creates one.
/// - **Fenced writes.** `complete`, `abandon` and `fail` change the record only while it is the
///   caller's and in progress, and return whether they did. Each is idempotent for the owner.
/// - **Results.** `claim` returns a completed record as [`Claim::Completed`], with the exact
///   bytes and fingerprint, for its TTL. `forget` deletes it and never an in-progress one.
/// - **Wake-ups.** `complete`, `abandon`, `fail` and `forget` wake every [`ChangeWatch`] of the
///   key made before them.
/// - **Failures.** Every method fails with [`IdempotencyError::Unavailable`] when the backend
///   fails, and nothing is reported as granted that was not.
/// - **Backend time.** TTLs are kept by the store, never a client's clock.
#[async_trait]
pub trait IdempotencyStore: Send + Sync + Debug {
    /// Claims `key` for `owner` with an in-progress record living `ttl`, unless a record exists.
    ///
    /// `waited_on` is the holder this caller last saw in progress, whose failure answers
    /// [`Claim::Failed`].
    async fn claim(
        &self,
        key: &str,
        owner: &str,
        fingerprint: &str,
        ttl: Duration,
        waited_on: Option<&str>,
    ) -> Result<Claim, IdempotencyError>;

    /// Extends `owner`'s in-progress record of `key` to live `ttl` from now; `false` when it is
    /// not `owner`'s in-progress one.
    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError>;

    /// Turns `owner`'s in-progress record into a completed one holding `result` for `ttl`, and
    /// wakes the key's watchers; `false` when the record is not `owner`'s in-progress one.
    async fn complete(
        &self,
        key: &str,
        owner: &str,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, IdempotencyError>;

    /// Deletes `owner`'s in-progress record and wakes the key's watchers; `false` when it is not
    /// `owner`'s in-progress one.
    async fn abandon(&self, key: &str, owner: &str) -> Result<bool, IdempotencyError>;

    /// Marks `owner`'s in-progress record failed for `ttl` and wakes the key's watchers; `false`
    /// when it is not `owner`'s in-progress one.
    async fn fail(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError>;

    /// Deletes the completed record of `key`, so the next call runs the action again; `false`
    /// when there was none.
    async fn forget(&self, key: &str) -> Result<bool, IdempotencyError>;

    /// Starts watching `key`, returning once every later change is certain to be seen.
    ///
    /// A backend that cannot confirm that in time may return a watch that misses changes: the
    /// caller also wakes at the holder's TTL.
    async fn watch(&self, key: &str) -> Result<Box<dyn ChangeWatch>, IdempotencyError>;

    /// A new owner token, unique per call, carrying a readable instance id.
    fn new_owner(&self) -> String;
}
