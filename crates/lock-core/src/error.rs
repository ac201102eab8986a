//! The error trait every capability's error implements, and the lock's error.

use crate::duration::{format_duration, out_of_range};
use std::collections::BTreeMap;
use std::time::Duration;

/// A boxed cause from a backend, such as a Redis or an I/O error.
///
/// # Examples
///
/// ```
/// use lock_core::{BoxError, LockError};
///
/// let cause: BoxError = std::io::Error::other("connection refused").into();
/// let error = LockError::backend_unavailable("bill-run:2026-11", cause);
/// let source = std::error::Error::source(error.acquire_failure().unwrap()).unwrap();
/// assert_eq!(source.to_string(), "connection refused");
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error a request can end with: a stable code, the HTTP status to answer with, and the
/// details of an RFC 9457 problem body or a structured log.
///
/// [`LockError`], [`IdempotencyError`](crate::idempotency::IdempotencyError) and
/// [`BranchError`](crate::branches::BranchError) implement it, and have the same methods
/// inherent so that a call needs no import. lock-starter's `http` module answers any of them.
///
/// # Contract
/// - `code()` is `<CAPABILITY>_<CONDITION>` in upper snake case, such as
///   `LOCK_ACQUISITION_FAILED`, and is never renamed.
/// - `http_status()` is 503 when a later retry may succeed, 409 or 422 for a conflict with an
///   earlier request, 400 for bad input from a client and 500 for a defect of the calling code.
/// - `details()` holds `code`, `message` (the `Display` text) and `reason` (lower snake case,
///   stable), and more camelCase keys per capability. Keys ending in `Ms` are milliseconds.
///
/// # Examples
///
/// ```
/// use lock_core::{LockError, Problem};
/// use lock_core::idempotency::IdempotencyError;
///
/// fn log_problem(error: &dyn Problem) -> String {
///     format!("{} {} {}", error.http_status(), error.code(), error.details()["reason"])
/// }
/// let lock = LockError::backend_unavailable("bill-run:2026-11", "timed out");
/// assert_eq!(log_problem(&lock), "503 LOCK_ACQUISITION_FAILED backend_unavailable");
/// let reused = IdempotencyError::KeyReused { key: "8e03978e".into() };
/// assert_eq!(log_problem(&reused), "422 IDEMPOTENCY_KEY_REUSED key_reused");
/// ```
pub trait Problem: std::error::Error + Send + Sync + 'static {
    /// The stable code, such as `LOCK_ACQUISITION_FAILED`.
    fn code(&self) -> &'static str;

    /// The HTTP status to answer with.
    fn http_status(&self) -> u16;

    /// The details map: `code`, `message`, `reason` and the capability's own keys.
    fn details(&self) -> BTreeMap<&'static str, String>;
}

/// Implements [`Problem`] for an error type by its inherent `code`, `http_status` and `details`.
macro_rules! impl_problem {
    ($error:ty) => {
        impl $crate::error::Problem for $error {
            fn code(&self) -> &'static str {
                <$error>::code(self)
            }
            fn http_status(&self) -> u16 {
                <$error>::http_status(self)
            }
            fn details(&self) -> std::collections::BTreeMap<&'static str, String> {
                <$error>::details(self)
            }
        }
    };
}
pub(crate) use impl_problem;

/// The entries every details map starts with: the error's `code` and its `message`.
pub(crate) fn details_of(
    code: &'static str,
    error: &impl std::fmt::Display,
) -> BTreeMap<&'static str, String> {
    BTreeMap::from([("code", code.to_owned()), ("message", error.to_string())])
}

impl_problem!(LockError);

/// Why an acquisition failed: to the caller every variant means the lock is not held, to
/// on-call contention is not an outage.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::AcquireFailure;
/// use lock_core::lock::{DistributedLock, InMemoryLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let lock = InMemoryLock::new();
/// let other_pod = lock.acquire("bill-run:2026-11", Lease::Fixed(Duration::from_secs(30))).await?;
///
/// let error = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
/// match error.acquire_failure() {
///     Some(AcquireFailure::HeldByAnotherOwner { holder, ttl, .. }) => {
///         assert_eq!(holder, other_pod.owner());
///         assert!(ttl.unwrap() <= Duration::from_secs(30));
///     }
///     Some(AcquireFailure::BackendUnavailable { cause }) => eprintln!("outage: {cause}"),
///     other => panic!("unexpected: {other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireFailure {
    /// Another owner held the lock for the whole wait time, possibly another task of this
    /// process ([`crate::issued_by_this_process`]).
    #[error("{}", fmt_held(holder, *.ttl, *.waited))]
    HeldByAnotherOwner {
        /// The holder's owner token as last seen.
        holder: String,
        /// The holder's remaining TTL as last seen, if the backend reported one.
        ttl: Option<Duration>,
        /// How long this call waited before giving up.
        waited: Duration,
    },
    /// A [fair](crate::lock::AcquireOptions::fair) acquisition's wait was spent with earlier fair
    /// waiters still queued ahead of it, whether or not the lock was free.
    #[error("{ahead} earlier fair waiter(s) still queued ahead after waiting {}", format_duration(*.waited))]
    WaitersAhead {
        /// How many fair waiters were queued ahead of this one, as last seen.
        ahead: u64,
        /// How long this call waited before giving up.
        waited: Duration,
    },
    /// The backend could not be reached, timed out or answered with an error. Any grant this
    /// call may have caused has been released.
    #[error("backend unavailable: {cause}")]
    BackendUnavailable {
        /// The backend's error.
        #[source]
        cause: BoxError,
    },
    /// Too few replicas acknowledged the grant in time, so it was handed back: a failover
    /// could have lost it.
    #[error(
        "the grant reached {acknowledged} of the {required} replicas required (min-replicas) within replica-sync-timeout; it was released"
    )]
    ReplicationUnconfirmed {
        /// Replicas that had to acknowledge the grant.
        required: u32,
        /// Replicas that did.
        acknowledged: u32,
    },
    /// The grant arrived after its lease had run out on the local clock, so it was handed back.
    #[error("the grant arrived after its {} lease had run out (backend too slow); it was released", format_duration(*.lease))]
    LeaseExpiredBeforeGrant {
        /// The lease that was requested.
        lease: Duration,
    },
}

impl AcquireFailure {
    /// The stable `reason` of the details map, such as `held_by_another_owner`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::{AcquireFailure, LockError};
    ///
    /// let error = LockError::backend_unavailable("bill-run:2026-11", "connection refused");
    /// let reason = error.acquire_failure().map(AcquireFailure::reason);
    /// assert_eq!(reason, Some("backend_unavailable"));
    /// ```
    pub const fn reason(&self) -> &'static str {
        match self {
            AcquireFailure::HeldByAnotherOwner { .. } => "held_by_another_owner",
            AcquireFailure::WaitersAhead { .. } => "waiters_ahead",
            AcquireFailure::BackendUnavailable { .. } => "backend_unavailable",
            AcquireFailure::ReplicationUnconfirmed { .. } => "replication_unconfirmed",
            AcquireFailure::LeaseExpiredBeforeGrant { .. } => "lease_expired_before_grant",
        }
    }
}

/// The error of every fallible lock operation.
///
/// It is a [`Problem`]: codes `LOCK_ACQUISITION_FAILED` and `LOCK_RELEASE_FAILED` (HTTP 503),
/// `LOCK_INVALID_ARGUMENT` (500, a defect of the calling service) and `LOCK_DISABLED` (503).
/// `Display` is one sentence naming the key and what to do.
///
/// # Examples
///
/// ```
/// use lock_core::LockError;
/// use lock_core::lock::{DistributedLock, InMemoryLock, Lease};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lock = InMemoryLock::new();
/// let _held = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap();
///
/// match lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await {
///     Ok(_) => unreachable!("the key is held"),
///     Err(error @ LockError::AcquisitionFailed { .. }) => {
///         // Fail closed: skip the critical section, answer 503.
///         assert_eq!(error.code(), "LOCK_ACQUISITION_FAILED");
///         assert_eq!(error.http_status(), 503);
///         assert_eq!(error.lock_key(), Some("bill-run:2026-11"));
///         assert!(error.to_string().starts_with("lock `bill-run:2026-11` was not acquired: held by"));
///     }
///     Err(other) => panic!("unexpected: {other}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock was not acquired and the critical section did not run. Code
    /// `LOCK_ACQUISITION_FAILED`.
    #[error("lock `{key}` was not acquired: {reason}")]
    AcquisitionFailed {
        /// The lock key as the caller gave it.
        key: String,
        /// Why: contention or an unavailable backend.
        #[source]
        reason: AcquireFailure,
    },
    /// An owner-checked release was not confirmed. The lease still ends at its TTL. Code
    /// `LOCK_RELEASE_FAILED`.
    #[error("lock `{key}` release was not confirmed (the lease still ends at its TTL): {cause}")]
    ReleaseFailed {
        /// The lock key.
        key: String,
        /// The backend's error.
        #[source]
        cause: BoxError,
    },
    /// The key is not accepted and nothing was sent to the backend. Code
    /// `LOCK_INVALID_ARGUMENT`.
    #[error("invalid lock key {key:?}: {problem}; {accepted}")]
    InvalidKey {
        /// The rejected key.
        key: String,
        /// What is wrong with it.
        problem: &'static str,
        /// What a valid key looks like.
        accepted: &'static str,
    },
    /// A duration or other argument is out of range and nothing was sent to the backend. Code
    /// `LOCK_INVALID_ARGUMENT`.
    #[error("invalid {name} {value}{}: {problem}", for_lock(.key.as_deref()))]
    InvalidArgument {
        /// The argument or setting, such as `lease` or `wait_time`.
        name: &'static str,
        /// The rejected value as given.
        value: String,
        /// What is wrong and what is accepted.
        problem: String,
        /// The lock the call was for, when the argument came with one.
        key: Option<String>,
    },
    /// The lock is switched off by configuration. Code `LOCK_DISABLED`.
    #[error(
        "the distributed lock is disabled ({detail}); no Redis connection exists. Set telco.platform.lock.enabled = true to use it"
    )]
    Disabled {
        /// Where the switch was set.
        detail: String,
    },
    /// This lock client was [shut down](crate::lock::DistributedLock::shutdown), before or during the
    /// acquisition. Code `LOCK_DISABLED`, reason `shut_down`.
    #[error(
        "lock `{key}` was not acquired: this lock client was shut down (its process is stopping) and grants no more leases; acquire before calling shutdown"
    )]
    ShutDown {
        /// The lock key as the caller gave it.
        key: String,
    },
}

impl LockError {
    /// This failed check of a shared argument (a key, a duration) as another capability's
    /// invalid argument: its name, its value as shown and the problem; `key` names a bad key,
    /// `other` any other failure.
    pub(crate) fn into_argument(
        self,
        key: &'static str,
        other: &'static str,
    ) -> (&'static str, String, String) {
        match self {
            LockError::InvalidKey {
                key: value,
                problem,
                accepted,
            } => (
                key,
                format!("{value:?}"),
                format!(
                    "{problem}; {}",
                    accepted.replacen("a lock key", &subject(key), 1)
                ),
            ),
            LockError::InvalidArgument {
                name,
                value,
                problem,
                ..
            } => (name, value, problem),
            other_error => (other, String::new(), other_error.to_string()),
        }
    }

    /// The stable code: `LOCK_ACQUISITION_FAILED`, `LOCK_RELEASE_FAILED`,
    /// `LOCK_INVALID_ARGUMENT` or `LOCK_DISABLED`.
    pub fn code(&self) -> &'static str {
        match self {
            LockError::AcquisitionFailed { .. } => "LOCK_ACQUISITION_FAILED",
            LockError::ReleaseFailed { .. } => "LOCK_RELEASE_FAILED",
            LockError::InvalidKey { .. } | LockError::InvalidArgument { .. } => {
                "LOCK_INVALID_ARGUMENT"
            }
            LockError::Disabled { .. } | LockError::ShutDown { .. } => "LOCK_DISABLED",
        }
    }

    /// The HTTP status: 500 for an invalid argument, else 503.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::{LockError, validate_key};
    ///
    /// assert_eq!(LockError::backend_unavailable("k", "timed out").http_status(), 503);
    /// assert_eq!(validate_key("").unwrap_err().http_status(), 500);
    /// ```
    pub fn http_status(&self) -> u16 {
        match self {
            LockError::InvalidKey { .. } | LockError::InvalidArgument { .. } => 500,
            _ => 503,
        }
    }

    /// The lock key this error is about, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::LockError;
    ///
    /// let error = LockError::backend_unavailable("bill-run:2026-11", "timed out");
    /// assert_eq!(error.lock_key(), Some("bill-run:2026-11"));
    /// assert_eq!(LockError::Disabled { detail: "off".into() }.lock_key(), None);
    /// ```
    pub fn lock_key(&self) -> Option<&str> {
        match self {
            LockError::AcquisitionFailed { key, .. }
            | LockError::ReleaseFailed { key, .. }
            | LockError::InvalidKey { key, .. }
            | LockError::ShutDown { key } => Some(key),
            LockError::InvalidArgument { key, .. } => key.as_deref(),
            LockError::Disabled { .. } => None,
        }
    }

    /// Why an acquisition failed, for [`LockError::AcquisitionFailed`].
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::{AcquireFailure, LockError};
    ///
    /// let outage = LockError::backend_unavailable("bill-run:2026-11", "connection refused");
    /// assert!(matches!(
    ///     outage.acquire_failure(),
    ///     Some(AcquireFailure::BackendUnavailable { .. })
    /// ));
    /// let bad_wait = LockError::invalid_argument("wait_time", "2h", "accepted: 0 to 1 h");
    /// assert!(bad_wait.acquire_failure().is_none());
    /// ```
    pub fn acquire_failure(&self) -> Option<&AcquireFailure> {
        match self {
            LockError::AcquisitionFailed { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// The details map of a problem body or a log: `code`, `message`, `reason` (an
    /// [`AcquireFailure::reason`], `release_failed`, `invalid_key`, `invalid_argument`,
    /// `disabled` or `shut_down`), and where known `lockKey`, `holder`, `holderTtlMs`,
    /// `waitedMs`, `waitersAhead`, `requiredReplicas`, `acknowledgedReplicas` and `argument`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::lock::{DistributedLock, InMemoryLock, Lease};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let lock = InMemoryLock::new();
    /// let held = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
    ///
    /// let details = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err().details();
    /// assert_eq!(details["code"], "LOCK_ACQUISITION_FAILED");
    /// assert_eq!(details["lockKey"], "bill-run:2026-11");
    /// assert_eq!(details["reason"], "held_by_another_owner");
    /// assert_eq!(details["holder"], held.owner());
    /// assert!(details.contains_key("waitedMs"));
    /// # Ok(()) }
    /// ```
    pub fn details(&self) -> BTreeMap<&'static str, String> {
        let mut details = details_of(self.code(), self);
        if let Some(key) = self.lock_key() {
            details.insert("lockKey", key.to_owned());
        }
        let reason = match self {
            LockError::AcquisitionFailed { reason, .. } => {
                if let AcquireFailure::HeldByAnotherOwner {
                    holder,
                    ttl,
                    waited,
                } = reason
                {
                    details.insert("holder", holder.clone());
                    if let Some(ttl) = ttl {
                        details.insert("holderTtlMs", ttl.as_millis().to_string());
                    }
                    details.insert("waitedMs", waited.as_millis().to_string());
                }
                if let AcquireFailure::WaitersAhead { ahead, waited } = reason {
                    details.insert("waitersAhead", ahead.to_string());
                    details.insert("waitedMs", waited.as_millis().to_string());
                }
                if let AcquireFailure::ReplicationUnconfirmed {
                    required,
                    acknowledged,
                } = reason
                {
                    details.insert("requiredReplicas", required.to_string());
                    details.insert("acknowledgedReplicas", acknowledged.to_string());
                }
                reason.reason()
            }
            LockError::ReleaseFailed { .. } => "release_failed",
            LockError::InvalidKey { .. } => "invalid_key",
            LockError::InvalidArgument { name, .. } => {
                details.insert("argument", (*name).to_owned());
                "invalid_argument"
            }
            LockError::Disabled { .. } => "disabled",
            LockError::ShutDown { .. } => "shut_down",
        };
        details.insert("reason", reason.to_owned());
        details
    }

    /// An [`LockError::InvalidArgument`] not tied to a lock key (see [`LockError::for_key`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::LockError;
    ///
    /// let error = LockError::invalid_argument("batch-size", "0", "accepted: 1 to 500");
    /// assert_eq!(error.to_string(), "invalid batch-size 0: accepted: 1 to 500");
    /// assert_eq!(error.details()["argument"], "batch-size");
    /// assert_eq!(error.lock_key(), None);
    /// ```
    pub fn invalid_argument(
        name: &'static str,
        value: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        // An empty value would leave a gap in "invalid address : empty".
        let value = match value.into() {
            empty if empty.is_empty() => "\"\"".to_owned(),
            value => value,
        };
        LockError::InvalidArgument {
            name,
            value,
            problem: problem.into(),
            key: None,
        }
    }

    /// Names the lock an [`LockError::InvalidArgument`] was for; other errors are returned
    /// unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::lock::Lease;
    ///
    /// let error = Lease::Fixed(Duration::ZERO).validate().unwrap_err().for_key("bill-run:2026-11");
    /// assert_eq!(error.lock_key(), Some("bill-run:2026-11"));
    /// assert_eq!(
    ///     error.to_string(),
    ///     "invalid lease 0 for lock `bill-run:2026-11`: accepted: 100 ms to 168 h"
    /// );
    /// ```
    pub fn for_key(self, lock_key: &str) -> Self {
        match self {
            LockError::InvalidArgument {
                name,
                value,
                problem,
                key: None,
            } => LockError::InvalidArgument {
                name,
                value,
                problem,
                key: Some(lock_key.to_owned()),
            },
            other => other,
        }
    }

    /// Shorthand for an [`LockError::AcquisitionFailed`] caused by the backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::LockError;
    ///
    /// // In a backend: the store did not answer in time.
    /// let error = LockError::backend_unavailable("bill-run:2026-11", "no answer within 2 s");
    /// assert_eq!(error.details()["reason"], "backend_unavailable");
    /// assert_eq!(
    ///     error.to_string(),
    ///     "lock `bill-run:2026-11` was not acquired: backend unavailable: no answer within 2 s"
    /// );
    /// ```
    pub fn backend_unavailable(key: impl Into<String>, cause: impl Into<BoxError>) -> Self {
        LockError::AcquisitionFailed {
            key: key.into(),
            reason: AcquireFailure::BackendUnavailable {
                cause: cause.into(),
            },
        }
    }
}

fn for_lock(key: Option<&str>) -> String {
    key.map(|key| format!(" for lock `{key}`"))
        .unwrap_or_default()
}

/// Who held a contended key, for humans.
fn fmt_held(holder: &str, ttl: Option<Duration>, waited: Duration) -> String {
    let (ttl, waited) = (fmt_ttl(ttl), format_duration(waited));
    if crate::process::issued_by_this_process(holder) {
        format!(
            "held by this process, owner `{holder}` ({ttl}), after waiting {waited}: only code \
             running inside a `with_lock` section of this key re-enters its lease (one nested \
             section at a time); other tasks and futures of this process contend like other pods"
        )
    } else {
        format!("held by another owner `{holder}` ({ttl}) after waiting {waited}")
    }
}

fn fmt_ttl(ttl: Option<Duration>) -> String {
    match ttl {
        Some(ttl) => format!("TTL {}", format_duration(ttl)),
        None => "TTL unknown".to_owned(),
    }
}

/// Checks that `value`, the setting or argument `name`, lies in `min..=max`.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `name` and `value`, with the accepted range.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_core::check_duration;
///
/// let (min, max) = (Duration::from_millis(10), Duration::from_secs(60));
/// assert!(check_duration("command_timeout", Duration::from_secs(2), min, max).is_ok());
/// let error = check_duration("command_timeout", Duration::from_secs(120), min, max).unwrap_err();
/// assert_eq!(error.to_string(), "invalid command_timeout 120 s: accepted: 10 ms to 60 s");
/// // A value off the range by less than a millisecond is rounded away from it.
/// let just_over = Duration::from_secs(60) + Duration::from_nanos(1);
/// let error = check_duration("command_timeout", just_over, min, max).unwrap_err();
/// assert_eq!(error.to_string(), "invalid command_timeout 60001 ms: accepted: 10 ms to 60 s");
/// ```
pub fn check_duration(
    name: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), LockError> {
    match out_of_range(value, min, max) {
        None => Ok(()),
        Some((value, problem)) => Err(LockError::invalid_argument(name, value, problem)),
    }
}

/// What an argument named `name` is called in a key rule: "a key", "a cache name".
fn subject(name: &str) -> String {
    match name {
        "key" => "a key".to_owned(),
        _ => format!("a {name} name"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_by_another_owner_details_name_holder_ttl_and_wait() {
        let err = LockError::AcquisitionFailed {
            key: "bill-run:2026-11".into(),
            reason: AcquireFailure::HeldByAnotherOwner {
                holder: "pod-a/1f/3".into(),
                ttl: Some(Duration::from_millis(2900)),
                waited: Duration::from_millis(1000),
            },
        };
        assert_eq!(err.code(), "LOCK_ACQUISITION_FAILED");
        assert_eq!(err.http_status(), 503);
        let d = err.details();
        assert_eq!(d["code"], "LOCK_ACQUISITION_FAILED");
        assert_eq!(d["lockKey"], "bill-run:2026-11");
        assert_eq!(d["reason"], "held_by_another_owner");
        assert_eq!(d["holder"], "pod-a/1f/3");
        assert_eq!(d["holderTtlMs"], "2900");
        assert_eq!(d["waitedMs"], "1000");
        let text = err.to_string();
        assert!(
            text.contains("bill-run:2026-11") && text.contains("pod-a/1f/3"),
            "{text}"
        );
        assert!(text.contains("2900 ms"), "{text}");
    }

    #[test]
    fn backend_unavailable_is_told_apart_from_contention() {
        let err = LockError::backend_unavailable("k", "connection refused");
        assert_eq!(err.http_status(), 503);
        let d = err.details();
        assert_eq!(d["reason"], "backend_unavailable");
        assert!(!d.contains_key("holder"));
        assert!(err.to_string().contains("connection refused"));
    }

    #[test]
    fn shut_down_is_lock_disabled_with_a_reason_of_its_own() {
        let err = LockError::ShutDown {
            key: "bill-run:2026-11".into(),
        };
        assert_eq!(err.code(), "LOCK_DISABLED");
        assert_eq!(err.http_status(), 503);
        let d = err.details();
        assert_eq!(d["reason"], "shut_down");
        assert_eq!(d["lockKey"], "bill-run:2026-11");
        assert!(err.to_string().contains("shut down"), "{err}");
    }

    #[test]
    fn invalid_arguments_are_500_and_name_the_argument() {
        let empty = LockError::invalid_argument("address", "", "empty; a Redis URL is required");
        assert_eq!(
            empty.to_string(),
            "invalid address \"\": empty; a Redis URL is required"
        );
        let err = LockError::invalid_argument("lease", "0", "accepted: 100 ms to 168 h");
        assert_eq!(err.code(), "LOCK_INVALID_ARGUMENT");
        assert_eq!(err.http_status(), 500);
        assert_eq!(err.details()["argument"], "lease");
        assert!(!err.details().contains_key("lockKey"));
        let err = err.for_key("bill-run:2026-11");
        assert_eq!(err.details()["lockKey"], "bill-run:2026-11");
        assert_eq!(
            err.to_string(),
            "invalid lease 0 for lock `bill-run:2026-11`: accepted: 100 ms to 168 h"
        );
    }
}
