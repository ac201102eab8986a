//! The idempotency record store: the port a backend implements.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::idempotency::error::IdempotencyError;
use crate::watch::ChangeWatch;

/// What [`IdempotencyStore::claim`] found at a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller now owns the in-progress record (it was absent, or already the caller's: a
    /// claim re-sent after a lost reply). Run the action, then `complete` or `abandon`.
    Owner,
    /// A result is stored: replay it.
    Completed {
        /// The serialized result.
        result: Vec<u8>,
        /// The request fingerprint the result was produced for (empty: none given).
        fingerprint: String,
    },
    /// Another owner's in-progress record: wait for it.
    InProgress {
        /// Its owner token.
        holder: String,
        /// The request fingerprint it runs for (empty: none given).
        fingerprint: String,
        /// Its remaining lease, if the backend reported one.
        ttl: Option<Duration>,
    },
    /// The owner this caller waited on failed (see [`IdempotencyStore::fail`]): answer its
    /// failure rather than run the action again.
    Failed {
        /// The failed owner's token.
        holder: String,
    },
}

/// Where idempotency records live: one record per key, either *in progress* (owned by one
/// caller under a lease) or *completed* (holding the serialized result for its TTL).
///
/// Callers use [`Idempotency`](crate::idempotency::Idempotency), which runs the protocol over this port;
/// implement it to put records in another backend.
///
/// # Contract
///
/// Every implementation, checked by `lock_core::idempotency::conformance`:
/// 1. `claim` is atomic: of any number of concurrent claims of an absent key, exactly one gets
///    [`Claim::Owner`]; the others see [`Claim::InProgress`] with that owner and fingerprint.
///    A claim by the owner itself returns `Owner` again (idempotent under re-sent commands).
/// 2. A record `fail`ed by its owner answers [`Claim::Failed`] to every claim whose `waited_on`
///    names that owner, and is taken over by any other claim as if absent.
/// 3. The in-progress record lives for its lease (`ttl`) unless `renew`ed: then `claim`
///    grants it anew. `renew` extends only the caller's own in-progress record and never
///    re-creates one (returns `false` instead).
/// 4. `complete`, `abandon` and `fail` are fenced by the owner token: they change the record only
///    while it is the caller's and in progress, and return whether they did. A zombie whose
///    lease ended cannot overwrite or delete the next owner's record. Each is idempotent for
///    the owner: a repeated `complete` returns `true`.
/// 5. A completed record is returned by `claim` as [`Claim::Completed`] with the exact bytes
///    and fingerprint for its TTL, then disappears.
/// 6. `forget` deletes a completed record (returns `true`); it never touches an in-progress one.
/// 7. `complete`, `abandon`, `fail` and `forget` wake every [`ChangeWatch`] of the key made before
///    them.
/// 8. Backend failures are [`IdempotencyError::Unavailable`]; nothing is reported as granted
///    that was not.
/// 9. Time is the backend's: TTLs are kept by the store, never compared to a client's clock
///    across hosts.
#[async_trait]
pub trait IdempotencyStore: Send + Sync + Debug {
    /// Claims `key` for `owner` with an in-progress record living `ttl`, unless a record exists.
    /// `waited_on` is the holder this caller last saw in progress, if any: a record that holder
    /// failed answers [`Claim::Failed`].
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend fails.
    async fn claim(
        &self,
        key: &str,
        owner: &str,
        fingerprint: &str,
        ttl: Duration,
        waited_on: Option<&str>,
    ) -> Result<Claim, IdempotencyError>;

    /// Extends `owner`'s in-progress record of `key` to live `ttl` from now; `false` when it is
    /// no longer `owner`'s or no longer in progress.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend fails.
    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError>;

    /// Turns `owner`'s in-progress record into a completed one holding `result` for `ttl`, and
    /// wakes the key's watchers; `false` when the record is not `owner`'s in-progress one.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend fails.
    async fn complete(
        &self,
        key: &str,
        owner: &str,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, IdempotencyError>;

    /// Deletes `owner`'s in-progress record and wakes the key's watchers; `false` when it is not
    /// `owner`'s in-progress one.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend fails.
    async fn abandon(&self, key: &str, owner: &str) -> Result<bool, IdempotencyError>;

    /// Marks `owner`'s in-progress record failed for `ttl` and wakes the key's watchers: the
    /// duplicates waiting on `owner` are answered [`Claim::Failed`], any other claim takes the
    /// record over. `false` when it is not `owner`'s in-progress one. Repeating it is harmless.
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend fails.
    async fn fail(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError>;

    /// Deletes the completed record of `key`, so the next call runs the action again; `false`
    /// when there was none (absent, or in progress: that one is left alone).
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend fails.
    async fn forget(&self, key: &str) -> Result<bool, IdempotencyError>;

    /// Starts watching `key`. Returns once every later change is certain to be seen; a backend
    /// that cannot confirm that in time returns a watch that may miss changes (the caller also
    /// wakes at the holder's TTL).
    ///
    /// # Errors
    /// [`IdempotencyError::Unavailable`] when the backend fails.
    async fn watch(&self, key: &str) -> Result<Box<dyn ChangeWatch>, IdempotencyError>;

    /// A new owner token, unique per call, carrying a readable instance id.
    fn new_owner(&self) -> String;
}
