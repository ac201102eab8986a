//! Errors of the master/sub locks: [`BranchError`], its stable [`BranchErrorCode`], and
//! [`InvalidBranchToken`] for token text that does not parse.

use std::collections::BTreeMap;
use std::fmt;

use crate::branches::sub_key::SubKey;
use crate::error::{BoxError, LockError, LockErrorCode};

/// The stable, machine-readable code of a [`BranchError`]; never renamed (dashboards and problem
/// bodies key on it). [`BranchErrorCode::as_str`] is the wire form.
///
/// # Examples
///
/// ```
/// use lock_core::branches::{BranchError, BranchErrorCode};
///
/// let error = BranchError::Disabled { detail: "enabled = false".into() };
/// assert_eq!(error.code(), BranchErrorCode::BranchesDisabled);
/// assert_eq!(error.code().to_string(), "BRANCHES_DISABLED");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BranchErrorCode {
    /// The master lock was not granted (contention for the whole wait time, or the backend
    /// unavailable): the master block did not run (fail closed). HTTP 503.
    BranchesMasterLockFailed,
    /// The branch backend did not confirm an operation (unreachable, timed out, refusing).
    /// HTTP 503.
    BranchesUnavailable,
    /// A branch was registered after its master block had returned: registration is sealed, the
    /// master no longer waits for new branches. A defect of the producer code. HTTP 500.
    BranchesSealed,
    /// A key, branch id or duration the master/sub locks do not accept; nothing was sent to the
    /// backend. A defect of the calling code. HTTP 500.
    BranchesInvalidArgument,
    /// A branch token's text (e.g. from a message header) does not parse. HTTP 400: it came
    /// from outside.
    BranchesInvalidToken,
    /// The master/sub locks are switched off (no backend), or the master's lock is disabled or
    /// shut down. HTTP 503.
    BranchesDisabled,
}

impl BranchErrorCode {
    /// The wire form, e.g. `"BRANCHES_UNAVAILABLE"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::branches::BranchErrorCode;
    ///
    /// assert_eq!(BranchErrorCode::BranchesSealed.as_str(), "BRANCHES_SEALED");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            BranchErrorCode::BranchesMasterLockFailed => "BRANCHES_MASTER_LOCK_FAILED",
            BranchErrorCode::BranchesUnavailable => "BRANCHES_UNAVAILABLE",
            BranchErrorCode::BranchesSealed => "BRANCHES_SEALED",
            BranchErrorCode::BranchesInvalidArgument => "BRANCHES_INVALID_ARGUMENT",
            BranchErrorCode::BranchesInvalidToken => "BRANCHES_INVALID_TOKEN",
            BranchErrorCode::BranchesDisabled => "BRANCHES_DISABLED",
        }
    }

    /// The HTTP status a service should answer with when this error ends a request.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::branches::BranchErrorCode;
    ///
    /// assert_eq!(BranchErrorCode::BranchesMasterLockFailed.http_status(), 503);
    /// assert_eq!(BranchErrorCode::BranchesInvalidToken.http_status(), 400);
    /// ```
    pub const fn http_status(self) -> u16 {
        match self {
            BranchErrorCode::BranchesMasterLockFailed
            | BranchErrorCode::BranchesUnavailable
            | BranchErrorCode::BranchesDisabled => 503,
            BranchErrorCode::BranchesSealed | BranchErrorCode::BranchesInvalidArgument => 500,
            BranchErrorCode::BranchesInvalidToken => 400,
        }
    }
}

impl fmt::Display for BranchErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Branch token text that does not parse: what is wrong, and the accepted form (the grammar:
/// `docs/branches.md`, section "Branch tokens").
///
/// # Examples
///
/// ```
/// use lock_core::branches::BranchToken;
///
/// let error = "ticket:4711".parse::<BranchToken>().unwrap_err();
/// assert!(error.to_string().starts_with("invalid branch token \"ticket:4711\""), "{error}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid branch token {token:?}: {problem}; a branch token reads `br1|<invocation>|<r or u>|<master key>|<branch id>` (percent-encoded), as BranchToken's Display writes it"
)]
pub struct InvalidBranchToken {
    /// The rejected text, cut to its first 64 bytes with its length when longer.
    pub token: String,
    /// What is wrong with it.
    pub problem: String,
}

/// The error of every fallible master/sub-lock operation.
///
/// Use [`BranchError::code`] for the stable [`BranchErrorCode`], [`BranchError::http_status`]
/// for the status to answer with, and [`BranchError::details`] for a problem body. `Display` is
/// one sentence naming the master key and what to do.
///
/// # Examples
///
/// ```
/// use lock_core::branches::BranchError;
/// use lock_core::LockError;
///
/// let lock_failed = BranchError::from(LockError::backend_unavailable("ticket:4711", "timed out"));
/// assert_eq!(lock_failed.code().as_str(), "BRANCHES_MASTER_LOCK_FAILED");
/// assert_eq!(lock_failed.http_status(), 503);
/// let details = lock_failed.details();
/// assert_eq!(details["lockCode"], "LOCK_ACQUISITION_FAILED");
/// assert_eq!(details["reason"], "backend_unavailable");
/// assert_eq!(details["lockKey"], "ticket:4711");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BranchError {
    /// The master lock was not acquired (or its key or lease was rejected): the master block did
    /// not run. Code `BRANCHES_MASTER_LOCK_FAILED`; `BRANCHES_INVALID_ARGUMENT` when the lock
    /// rejected an argument, `BRANCHES_DISABLED` when the lock is disabled or shut down.
    #[error("the master block did not run: {source}")]
    MasterLock {
        /// The lock's error (its details carry the holder, the reason, …).
        #[from]
        source: LockError,
    },
    /// The backend did not confirm `operation` on `sub_key`. For a master's start (`open`) the
    /// block did not run (fail closed); for a consumer's release the branch is not confirmed
    /// released — retry it (releases are idempotent). Code `BRANCHES_UNAVAILABLE`.
    #[error("branch {operation} for master `{}` (invocation {}) was not confirmed: {cause}", .sub_key.master_key(), .sub_key.invocation())]
    Unavailable {
        /// What was being done: `open`, `register`, `release`, `seal`, `read`, `watch`,
        /// `refresh` or `close`.
        operation: &'static str,
        /// The invocation it was for.
        sub_key: SubKey,
        /// The backend's error.
        #[source]
        cause: BoxError,
    },
    /// `branch` was registered after the master block of `sub_key` returned. The master does
    /// not wait for it; start branches inside the block, after registering them. Code
    /// `BRANCHES_SEALED`.
    #[error(
        "branch `{branch}` of master `{}` (invocation {}) was not registered: the master block has returned and registration is sealed; register each branch inside the block, before starting it", .sub_key.master_key(), .sub_key.invocation()
    )]
    Sealed {
        /// The invocation whose block has returned.
        sub_key: SubKey,
        /// The branch id that came too late.
        branch: String,
    },
    /// An argument is not accepted; nothing was sent to the backend. Code
    /// `BRANCHES_INVALID_ARGUMENT`.
    #[error("invalid {name} {value}: {problem}")]
    InvalidArgument {
        /// The argument, e.g. `branch id` or `branch_wait`.
        name: &'static str,
        /// The rejected value as given (quoted for text).
        value: String,
        /// What is wrong and what is accepted.
        problem: String,
    },
    /// A branch token's text does not parse. Code `BRANCHES_INVALID_TOKEN`.
    #[error(transparent)]
    InvalidToken(#[from] InvalidBranchToken),
    /// The master/sub locks are switched off (no backend). Code `BRANCHES_DISABLED`.
    #[error(
        "master/sub locks are disabled ({detail}); no Redis connection exists, so branches are not tracked"
    )]
    Disabled {
        /// Where the switch was set.
        detail: String,
    },
}

impl BranchError {
    /// The stable code of this error.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::branches::{BranchError, BranchErrorCode};
    /// use lock_core::validate_key;
    ///
    /// // A master key the lock rejects is an invalid argument, not a lock failure.
    /// let error = BranchError::from(validate_key("").unwrap_err());
    /// assert_eq!(error.code(), BranchErrorCode::BranchesInvalidArgument);
    /// assert_eq!(error.http_status(), 500);
    /// ```
    pub fn code(&self) -> BranchErrorCode {
        match self {
            BranchError::MasterLock { source } => match source.code() {
                LockErrorCode::LockInvalidArgument => BranchErrorCode::BranchesInvalidArgument,
                // Switched off (or shut down): no master can run, whatever the key.
                LockErrorCode::LockDisabled => BranchErrorCode::BranchesDisabled,
                _ => BranchErrorCode::BranchesMasterLockFailed,
            },
            BranchError::Unavailable { .. } => BranchErrorCode::BranchesUnavailable,
            BranchError::Sealed { .. } => BranchErrorCode::BranchesSealed,
            BranchError::InvalidArgument { .. } => BranchErrorCode::BranchesInvalidArgument,
            BranchError::InvalidToken(_) => BranchErrorCode::BranchesInvalidToken,
            BranchError::Disabled { .. } => BranchErrorCode::BranchesDisabled,
        }
    }

    /// The HTTP status for this error (its code's).
    pub fn http_status(&self) -> u16 {
        self.code().http_status()
    }

    /// The invocation this error is about, if any.
    pub fn sub_key(&self) -> Option<&SubKey> {
        match self {
            BranchError::Unavailable { sub_key, .. } | BranchError::Sealed { sub_key, .. } => {
                Some(sub_key)
            }
            _ => None,
        }
    }

    /// A details map for problem bodies and structured logs, like
    /// [`LockError::details`]. Keys are camelCase and stable: `code`, `message`, `reason`
    /// (`backend_unavailable`, `sealed`, `invalid_argument`, `invalid_token`, `disabled`, or
    /// for a master lock failure the lock's reason), and where known `masterKey`, `invocation`,
    /// `branch`, `operation`, `argument`; a master lock failure adds the lock's own details
    /// (`lockKey`, `holder`, …) and its code as `lockCode`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::branches::{BranchError, SubKey};
    ///
    /// let error = BranchError::Sealed { sub_key: SubKey::new("ticket:4711", 42), branch: "search".into() };
    /// let details = error.details();
    /// assert_eq!(details["code"], "BRANCHES_SEALED");
    /// assert_eq!(details["reason"], "sealed");
    /// assert_eq!(details["masterKey"], "ticket:4711");
    /// assert_eq!(details["invocation"], "42");
    /// assert_eq!(details["branch"], "search");
    /// ```
    pub fn details(&self) -> BTreeMap<&'static str, String> {
        let mut details = match self {
            BranchError::MasterLock { source } => {
                let mut details = source.details();
                details.insert("lockCode", source.code().as_str().to_owned());
                details
            }
            _ => BTreeMap::new(),
        };
        details.insert("code", self.code().as_str().to_owned());
        details.insert("message", self.to_string());
        if let Some(sub_key) = self.sub_key() {
            details.insert("masterKey", sub_key.master_key().to_owned());
            details.insert("invocation", sub_key.invocation().to_string());
        }
        let reason = match self {
            BranchError::MasterLock { .. } => None,
            BranchError::Unavailable { operation, .. } => {
                details.insert("operation", (*operation).to_owned());
                Some("backend_unavailable")
            }
            BranchError::Sealed { branch, .. } => {
                details.insert("branch", branch.clone());
                Some("sealed")
            }
            BranchError::InvalidArgument { name, .. } => {
                details.insert("argument", (*name).to_owned());
                Some("invalid_argument")
            }
            BranchError::InvalidToken(_) => Some("invalid_token"),
            BranchError::Disabled { .. } => Some("disabled"),
        };
        if let Some(reason) = reason {
            details.insert("reason", reason.to_owned());
        }
        details
    }

    /// A [`BranchError::Unavailable`] for `operation` on `sub_key`: for backends.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::branches::{BranchError, SubKey};
    ///
    /// let error = BranchError::unavailable("release", &SubKey::new("ticket:4711", 42), "timed out");
    /// assert_eq!(
    ///     error.to_string(),
    ///     "branch release for master `ticket:4711` (invocation 42) was not confirmed: timed out"
    /// );
    /// ```
    pub fn unavailable(
        operation: &'static str,
        sub_key: &SubKey,
        cause: impl Into<BoxError>,
    ) -> Self {
        BranchError::Unavailable {
            operation,
            sub_key: sub_key.clone(),
            cause: cause.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_wire_form_and_status() {
        let codes = [
            (BranchErrorCode::BranchesMasterLockFailed, 503),
            (BranchErrorCode::BranchesUnavailable, 503),
            (BranchErrorCode::BranchesSealed, 500),
            (BranchErrorCode::BranchesInvalidArgument, 500),
            (BranchErrorCode::BranchesInvalidToken, 400),
            (BranchErrorCode::BranchesDisabled, 503),
        ];
        for (code, status) in codes {
            assert!(code.as_str().starts_with("BRANCHES_"), "{code}");
            assert_eq!(code.http_status(), status, "{code}");
        }
    }

    #[test]
    fn a_held_master_lock_keeps_the_lock_details() {
        let error = BranchError::from(LockError::AcquisitionFailed {
            key: "ticket:4711".into(),
            reason: crate::AcquireFailure::HeldByAnotherOwner {
                holder: "pod-a/1/2".into(),
                ttl: None,
                waited: std::time::Duration::from_secs(5),
            },
        });
        let details = error.details();
        assert_eq!(details["code"], "BRANCHES_MASTER_LOCK_FAILED");
        assert_eq!(details["lockCode"], "LOCK_ACQUISITION_FAILED");
        assert_eq!(details["reason"], "held_by_another_owner");
        assert_eq!(details["holder"], "pod-a/1/2");
        assert!(
            error
                .to_string()
                .starts_with("the master block did not run: lock `ticket:4711`")
        );
    }

    #[test]
    fn a_disabled_master_lock_is_branches_disabled() {
        let error = BranchError::from(LockError::Disabled {
            detail: "enabled = false".into(),
        });
        assert_eq!(error.code(), BranchErrorCode::BranchesDisabled);
        assert_eq!(error.details()["lockCode"], "LOCK_DISABLED");
        assert_eq!(error.details()["reason"], "disabled");
    }

    #[test]
    fn unavailable_names_the_operation_and_the_invocation() {
        let error = BranchError::unavailable("open", &SubKey::new("m", 7), "connection refused");
        assert_eq!(error.http_status(), 503);
        let details = error.details();
        assert_eq!(details["reason"], "backend_unavailable");
        assert_eq!(details["operation"], "open");
        assert_eq!(details["invocation"], "7");
        assert!(std::error::Error::source(&error).is_some());
    }
}
