//! The errors of the master/sub locks: [`BranchError`], and [`InvalidBranchToken`] for token
//! text that does not parse.

use std::collections::BTreeMap;

use crate::branches::sub_key::SubKey;
use crate::error::{BoxError, LockError, details_of, impl_problem};

/// Branch token text that does not parse. The grammar is in `docs/branches.md`.
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
/// It is a [`Problem`](crate::Problem): codes `BRANCHES_MASTER_LOCK_FAILED`,
/// `BRANCHES_UNAVAILABLE` and `BRANCHES_DISABLED` (HTTP 503), `BRANCHES_SEALED` and
/// `BRANCHES_INVALID_ARGUMENT` (500, a defect of the calling code), `BRANCHES_INVALID_TOKEN`
/// (400, token text from outside). `Display` is one sentence naming the master key and what to
/// do.
///
/// # Examples
///
/// ```
/// use lock_core::branches::BranchError;
/// use lock_core::LockError;
///
/// let lock_failed = BranchError::from(LockError::backend_unavailable("ticket:4711", "timed out"));
/// assert_eq!(lock_failed.code(), "BRANCHES_MASTER_LOCK_FAILED");
/// assert_eq!(lock_failed.http_status(), 503);
/// let details = lock_failed.details();
/// assert_eq!(details["lockCode"], "LOCK_ACQUISITION_FAILED");
/// assert_eq!(details["reason"], "backend_unavailable");
/// assert_eq!(details["lockKey"], "ticket:4711");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BranchError {
    /// The master lock was not acquired and the master block did not run. Code
    /// `BRANCHES_MASTER_LOCK_FAILED`, or `BRANCHES_INVALID_ARGUMENT` when the lock rejected an
    /// argument, `BRANCHES_DISABLED` when the lock is disabled or shut down.
    #[error("the master block did not run: {source}")]
    MasterLock {
        /// The lock's error.
        #[from]
        source: LockError,
    },
    /// The backend did not confirm `operation` on `sub_key`. After a failed `open` the block did
    /// not run. A failed `release` may be retried, as releases are idempotent. Code
    /// `BRANCHES_UNAVAILABLE`.
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
    /// `branch` was registered after the master block of `sub_key` returned, so the master does
    /// not wait for it. Code `BRANCHES_SEALED`.
    #[error(
        "branch `{branch}` of master `{}` (invocation {}) was not registered: the master block has returned and registration is sealed; register each branch inside the block, before starting it", .sub_key.master_key(), .sub_key.invocation()
    )]
    Sealed {
        /// The invocation whose block has returned.
        sub_key: SubKey,
        /// The branch id that came too late.
        branch: String,
    },
    /// An argument is not accepted and nothing was sent to the backend. Code
    /// `BRANCHES_INVALID_ARGUMENT`.
    #[error("invalid {name} {value}: {problem}")]
    InvalidArgument {
        /// The argument, such as `branch id` or `branch_wait`.
        name: &'static str,
        /// The rejected value as given.
        value: String,
        /// What is wrong and what is accepted.
        problem: String,
    },
    /// A branch token's text does not parse. Code `BRANCHES_INVALID_TOKEN`.
    #[error(transparent)]
    InvalidToken(#[from] InvalidBranchToken),
    /// The master/sub locks are switched off. Code `BRANCHES_DISABLED`.
    #[error(
        "master/sub locks are disabled ({detail}); no Redis connection exists, so branches are not tracked"
    )]
    Disabled {
        /// Where the switch was set.
        detail: String,
    },
}

impl BranchError {
    /// The stable code, such as `BRANCHES_UNAVAILABLE`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::branches::BranchError;
    /// use lock_core::validate_key;
    ///
    /// // A master key the lock rejects is an invalid argument, not a lock failure.
    /// let error = BranchError::from(validate_key("").unwrap_err());
    /// assert_eq!(error.code(), "BRANCHES_INVALID_ARGUMENT");
    /// assert_eq!(error.http_status(), 500);
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            BranchError::MasterLock { source } => match source {
                LockError::InvalidKey { .. } | LockError::InvalidArgument { .. } => {
                    "BRANCHES_INVALID_ARGUMENT"
                }
                // Switched off or shut down: no master can run, whatever the key.
                LockError::Disabled { .. } | LockError::ShutDown { .. } => "BRANCHES_DISABLED",
                _ => "BRANCHES_MASTER_LOCK_FAILED",
            },
            BranchError::Unavailable { .. } => "BRANCHES_UNAVAILABLE",
            BranchError::Sealed { .. } => "BRANCHES_SEALED",
            BranchError::InvalidArgument { .. } => "BRANCHES_INVALID_ARGUMENT",
            BranchError::InvalidToken(_) => "BRANCHES_INVALID_TOKEN",
            BranchError::Disabled { .. } => "BRANCHES_DISABLED",
        }
    }

    /// The HTTP status: 400 for an invalid token, 500 for an invalid argument or a sealed
    /// registration, else 503.
    pub fn http_status(&self) -> u16 {
        match self.code() {
            "BRANCHES_INVALID_TOKEN" => 400,
            "BRANCHES_INVALID_ARGUMENT" | "BRANCHES_SEALED" => 500,
            _ => 503,
        }
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

    /// The details map of a problem body or a log: `code`, `message`, `reason`
    /// (`backend_unavailable`, `sealed`, `invalid_argument`, `invalid_token`, `disabled`, or the
    /// lock's), and where known `masterKey`, `invocation`, `branch`, `operation` and `argument`.
    /// A master lock failure adds the lock's details and its code as `lockCode`.
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
                details.insert("lockCode", source.code().to_owned());
                details
            }
            _ => BTreeMap::new(),
        };
        details.extend(details_of(self.code(), self));
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

    /// A [`BranchError::Unavailable`] for `operation` on `sub_key`, for backends.
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

impl_problem!(BranchError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_status() {
        let sub_key = SubKey::new("m", 7);
        let errors = [
            (
                BranchError::from(LockError::backend_unavailable("m", "down")),
                503,
            ),
            (BranchError::unavailable("open", &sub_key, "down"), 503),
            (
                BranchError::Sealed {
                    sub_key: sub_key.clone(),
                    branch: "b".into(),
                },
                500,
            ),
            (
                BranchError::InvalidArgument {
                    name: "branch id",
                    value: "\"\"".into(),
                    problem: "empty".into(),
                },
                500,
            ),
            (
                BranchError::InvalidToken(InvalidBranchToken {
                    token: "x".into(),
                    problem: "no prefix".into(),
                }),
                400,
            ),
            (
                BranchError::Disabled {
                    detail: "off".into(),
                },
                503,
            ),
        ];
        for (error, status) in errors {
            assert!(error.code().starts_with("BRANCHES_"), "{error}");
            assert_eq!(error.http_status(), status, "{error}");
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
        assert_eq!(error.code(), "BRANCHES_DISABLED");
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
