//! What the branch operations report: [`Registration`], [`BranchRelease`], [`BranchesOutcome`]
//! and [`MasterOutcome`].

use std::time::Duration;

use crate::lock::status::LostReason;

/// What a backend's [`register`](crate::branches::Branches::register) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Registration {
    /// Registered now: the master waits for its release.
    Registered,
    /// Registered before, by a repeated or re-sent call: counted once.
    AlreadyRegistered,
    /// Its consumer released it before the registration arrived: counted as released.
    AlreadyReleased,
    /// Not registered: the master block had returned and sealed registration.
    Sealed,
    /// No such invocation: it never existed or ended, or its record expired or was lost.
    Unknown,
}

impl Registration {
    /// Whether the branch is known to the invocation: registered now or before, or released.
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

/// What a consumer's [`release_branch`](crate::branches::Branches::release_branch) did; every
/// variant but `Released` is a no-op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BranchRelease {
    /// This call released the branch; a waiting master is woken.
    Released,
    /// Released before, by a redelivered message: nothing changed.
    AlreadyReleased,
    /// The invocation never registered this branch, as when its registration was not
    /// confirmed. It is remembered as released, so a registration still on its way counts it
    /// as done.
    NotRegistered,
    /// No such invocation: its master finished or its record expired, or it never existed, as
    /// with a disabled backend. Nothing was written.
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

/// How the master's wait for its registered branches ended; `missing` lists branch ids, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BranchesOutcome {
    /// Every registered branch was released (or none was registered).
    AllReleased,
    /// The wait bound passed with these branches not released.
    TimedOut {
        /// The branches not released.
        missing: Vec<String>,
    },
    /// The master's lease ended before all branches were released, so another owner may be
    /// running under the key and the master stopped waiting.
    LeaseLost {
        /// The branches not released as last seen (may be empty).
        missing: Vec<String>,
        /// Why the lease was lost.
        reason: LostReason,
    },
    /// The backend could not tell: it was unreachable, or it lost the invocation's record.
    Unconfirmed {
        /// The branches not confirmed released as last seen, or all registered ones.
        missing: Vec<String>,
    },
}

impl BranchesOutcome {
    /// Whether every registered branch was released.
    pub fn is_all_released(&self) -> bool {
        matches!(self, BranchesOutcome::AllReleased)
    }

    /// The branches not confirmed released; empty for [`BranchesOutcome::AllReleased`].
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

/// The result of one master invocation: the block's value and how the wait for its branches
/// ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MasterOutcome<T> {
    /// What the master block returned.
    pub value: T,
    /// How the wait for the registered branches ended.
    pub branches: BranchesOutcome,
    /// The invocation id, the fencing token of the master's lock grant.
    pub invocation: u64,
    /// The branches whose registration failed open, sorted.
    pub unregistered: Vec<String>,
    /// How long the master waited for its branches after the block returned.
    pub waited: Duration,
}

impl<T> MasterOutcome<T> {
    /// Whether every branch the block started is known to be done: all released, none
    /// unregistered.
    pub fn is_complete(&self) -> bool {
        self.branches.is_all_released() && self.unregistered.is_empty()
    }
}
