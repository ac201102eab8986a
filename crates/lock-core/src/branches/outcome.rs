//! What the operations report: a registration ([`Registration`]), a consumer's release
//! ([`BranchRelease`]), the master's wait ([`BranchesOutcome`]) and a whole master invocation
//! ([`MasterOutcome`]).

use std::time::Duration;

use crate::lock::status::LostReason;

/// What a backend's [`register`](crate::branches::Branches::register) found: the port's answer,
/// which [`Master::register_branch`](crate::branches::Master::register_branch) turns into a
/// token or an error.
///
/// # Examples
///
/// ```
/// use lock_core::branches::Registration;
///
/// assert!(Registration::AlreadyReleased.is_registered()); // counted, and already done
/// assert!(!Registration::Sealed.is_registered());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Registration {
    /// Registered now: the master waits for its release.
    Registered,
    /// Already registered (a repeated or re-sent registration): counted once.
    AlreadyRegistered,
    /// Its consumer released it before the registration arrived: counted as released.
    AlreadyReleased,
    /// The master block had returned: registration is sealed, not registered.
    Sealed,
    /// No such invocation: it never existed, ended, or its record expired or was lost.
    Unknown,
}

impl Registration {
    /// Whether the branch is known to the invocation (registered now or before, or released).
    pub fn is_registered(self) -> bool {
        matches!(
            self,
            Registration::Registered
                | Registration::AlreadyRegistered
                | Registration::AlreadyReleased
        )
    }

    /// The `outcome` label: `registered`, `already_registered`, `already_released`, `sealed` or
    /// `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Registration::Registered => "registered",
            Registration::AlreadyRegistered => "already_registered",
            Registration::AlreadyReleased => "already_released",
            Registration::Sealed => "sealed",
            Registration::Unknown => "unknown",
        }
    }
}

/// What a consumer's [`release_branch`](crate::branches::Branches::release_branch) did. Every
/// variant but `Released` is a no-op: releases are counted by branch id, never below zero.
///
/// # Examples
///
/// ```
/// use lock_core::branches::BranchRelease;
///
/// // A redelivered message: acknowledge it, nothing more to do.
/// let outcome = BranchRelease::AlreadyReleased;
/// assert_eq!(outcome.as_str(), "already_released");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BranchRelease {
    /// This call released the branch; a waiting master is woken.
    Released,
    /// The branch was released before (a redelivered message): nothing changed.
    AlreadyReleased,
    /// The invocation exists but never registered this branch (a token of a registration that
    /// was not confirmed). Remembered as released, so a registration still on its way counts
    /// it as done; the master does not wait for it.
    NotRegistered,
    /// No such invocation: its master finished (and cleaned up), timed out, crashed and its
    /// record expired, or it never existed (the backend was disabled when the token was made).
    /// Nothing was written.
    Unknown,
}

impl BranchRelease {
    /// The `outcome` label: `released`, `already_released`, `not_registered` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            BranchRelease::Released => "released",
            BranchRelease::AlreadyReleased => "already_released",
            BranchRelease::NotRegistered => "not_registered",
            BranchRelease::Unknown => "unknown",
        }
    }
}

/// How the master's wait for its registered branches ended. `missing` lists branch ids, sorted.
///
/// # Examples
///
/// ```
/// use lock_core::branches::BranchesOutcome;
///
/// let outcome = BranchesOutcome::TimedOut { missing: vec!["audit".into()] };
/// assert!(!outcome.is_all_released());
/// assert_eq!(outcome.missing(), ["audit"]);
/// assert_eq!(outcome.as_str(), "timed_out");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BranchesOutcome {
    /// Every registered branch was released (or none was registered).
    AllReleased,
    /// The wait bound passed (the branch wait, or shortly before a fixed lease's end) with
    /// these branches still not released: their consumers died, lag, or dropped the token.
    TimedOut {
        /// The branches not released.
        missing: Vec<String>,
    },
    /// The master's lease ended before all branches were released (or during the block): another
    /// owner may be running under the same key, so the master stopped waiting.
    LeaseLost {
        /// The branches not released as last seen (may be empty).
        missing: Vec<String>,
        /// Why the lease was lost.
        reason: LostReason,
    },
    /// The backend could not tell: unreachable for longer than its command timeout during the
    /// wait or at its bound, or the invocation's record was lost (e.g. Redis restarted without
    /// persistence).
    Unconfirmed {
        /// The branches not confirmed released as last seen, or all registered ones if no
        /// answer came.
        missing: Vec<String>,
    },
}

impl BranchesOutcome {
    /// Whether every registered branch was released.
    pub fn is_all_released(&self) -> bool {
        matches!(self, BranchesOutcome::AllReleased)
    }

    /// The branches not (confirmed) released; empty for [`BranchesOutcome::AllReleased`].
    pub fn missing(&self) -> &[String] {
        match self {
            BranchesOutcome::AllReleased => &[],
            BranchesOutcome::TimedOut { missing }
            | BranchesOutcome::LeaseLost { missing, .. }
            | BranchesOutcome::Unconfirmed { missing } => missing,
        }
    }

    /// The `outcome` label: `all_released`, `timed_out`, `lease_lost` or `unconfirmed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BranchesOutcome::AllReleased => "all_released",
            BranchesOutcome::TimedOut { .. } => "timed_out",
            BranchesOutcome::LeaseLost { .. } => "lease_lost",
            BranchesOutcome::Unconfirmed { .. } => "unconfirmed",
        }
    }
}

/// The result of one master invocation: the block's value, how the wait for its branches
/// ended, and the branches it did not wait for.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::branches::{InMemoryBranches, MasterLocks};
/// use lock_core::lock::{InMemoryLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::branches::BranchError> {
/// let masters = MasterLocks::new(Arc::new(InMemoryLock::new()), Arc::new(InMemoryBranches::new()));
/// let outcome = masters.with_master_lock("ticket:4711", Lease::Watchdog, |_master| async { 7 }).await?;
/// assert_eq!(outcome.value, 7);
/// assert!(outcome.is_complete()); // no branch registered, none missing
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MasterOutcome<T> {
    /// What the master block returned.
    pub value: T,
    /// How the wait for the registered branches ended.
    pub branches: BranchesOutcome,
    /// The invocation id (the fencing token of the master's lock grant).
    pub invocation: u64,
    /// Branches whose registration failed open (backend disabled or not confirming): their
    /// tokens are marked unregistered and the master did not wait for them. Sorted.
    pub unregistered: Vec<String>,
    /// How long the master waited for its branches after the block returned.
    pub waited: Duration,
}

impl<T> MasterOutcome<T> {
    /// Whether every branch the block started is known to be done: all registered branches
    /// released, none unregistered.
    pub fn is_complete(&self) -> bool {
        self.branches.is_all_released() && self.unregistered.is_empty()
    }
}
