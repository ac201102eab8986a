//! Lock and idempotency errors as HTTP responses: RFC 9457 problem details, axum's
//! `IntoResponse`, and the `Idempotency-Key` layer [`IdempotencyLayer`] (feature `http`).
//!
//! A lock that failed closed ends the request with **503 Service Unavailable** and, by default,
//! a **public** body that tells the client what happened and when to retry, and nothing about
//! the service's insides:
//!
//! ```json
//! {
//!   "type": "https://platform.telco/problems/lock-acquisition-failed",
//!   "title": "Lock not acquired",
//!   "status": 503,
//!   "detail": "lock `bill-run:2026-11` is held by another operation; retry later",
//!   "code": "LOCK_ACQUISITION_FAILED",
//!   "lockKey": "bill-run:2026-11",
//!   "reason": "held_by_another_owner",
//!   "waitedMs": 0
//! }
//! ```
//!
//! served as `application/problem+json`, with a `Retry-After` hint (see [`retry_after`]). The
//! holder (pod name and owner token), the backend's error text, replica counts and argument
//! names are left out of it and logged server-side instead (one event per response, target
//! `lock_starter::http`, with the full error). For an internal API whose callers are operators,
//! [`ProblemDetails::detailed`] / [`DetailedLockRejection`] keep them in the body.
//!
//! In a handler, return `Result<_, LockRejection>` and use `?` on lock calls:
//!
//! ```
//! use axum::Json;
//! use lock_starter::http::LockRejection;
//! use lock_starter::prelude::*;
//! use std::sync::Arc;
//!
//! async fn start_bill_run(lock: Arc<dyn DistributedLock>) -> Result<Json<u32>, LockRejection> {
//!     let invoices = lock
//!         .with_lock("bill-run:2026-11", Lease::Watchdog, || async { 1_204 })
//!         .await?; // 503 + problem body when not granted
//!     Ok(Json(invoices))
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use axum::response::IntoResponse;
//! # use std::time::Duration;
//! # let lock: Arc<dyn DistributedLock> = Arc::new(InMemoryLock::new().with_wait_time(Duration::ZERO)?);
//! // While another pod runs the bill run for this period:
//! let other_pod = lock.try_acquire("bill-run:2026-11", Lease::Fixed(Duration::from_secs(60))).await?;
//! let response = start_bill_run(Arc::clone(&lock)).await.into_response();
//! assert_eq!(response.status(), 503);
//! assert_eq!(response.headers()["content-type"], "application/problem+json");
//! assert_eq!(response.headers()["retry-after"], "5"); // 60 s left, capped at 5 s
//! # drop(other_pod);
//! # Ok(()) }
//! ```
//!
//! The `type` URI is stable per error code (see [`problem_type`]). In the detailed form,
//! `detail` is the error's one-line message, which names the lock, the reason and the holder but
//! never a credential (addresses in it are redacted), and the extension members are those of
//! [`LockError::details`], camelCase, with the numeric ones (`holderTtlMs`, `waitedMs`,
//! `waitersAhead`, `requiredReplicas`, `acknowledgedReplicas`) as JSON numbers.

mod idempotency;
mod idempotency_key;

pub use idempotency::{
    DEFAULT_MAX_BODY_BYTES, IDEMPOTENCY_KEY_HEADER, IN_PROGRESS_RETRY_AFTER, IdempotencyLayer,
    IdempotencyRejection, IdempotencyService, MAX_BODY_BYTES, REPLAYED_HEADER,
};

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::lock::{AcquireFailure, LockError, LockErrorCode};

/// The media type of a problem body (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The stable `type` URI of each error code:
/// `https://platform.telco/problems/lock-acquisition-failed`, `…/lock-release-failed`,
/// `…/lock-invalid-argument`, `…/lock-disabled` (`about:blank` for a code added later).
///
/// # Examples
///
/// ```
/// use lock_starter::lock::LockErrorCode;
/// use lock_starter::http::problem_type;
///
/// assert_eq!(
///     problem_type(LockErrorCode::LockDisabled),
///     "https://platform.telco/problems/lock-disabled"
/// );
/// ```
pub const fn problem_type(code: LockErrorCode) -> &'static str {
    match code {
        LockErrorCode::LockAcquisitionFailed => {
            "https://platform.telco/problems/lock-acquisition-failed"
        }
        LockErrorCode::LockReleaseFailed => "https://platform.telco/problems/lock-release-failed",
        LockErrorCode::LockInvalidArgument => {
            "https://platform.telco/problems/lock-invalid-argument"
        }
        LockErrorCode::LockDisabled => "https://platform.telco/problems/lock-disabled",
        // A code added later, until it gets a URI of its own.
        _ => "about:blank",
    }
}

/// The short, fixed `title` of each error code.
///
/// # Examples
///
/// ```
/// use lock_starter::lock::LockErrorCode;
/// use lock_starter::http::problem_title;
///
/// assert_eq!(problem_title(LockErrorCode::LockAcquisitionFailed), "Lock not acquired");
/// ```
pub const fn problem_title(code: LockErrorCode) -> &'static str {
    match code {
        LockErrorCode::LockAcquisitionFailed => "Lock not acquired",
        LockErrorCode::LockReleaseFailed => "Lock release not confirmed",
        LockErrorCode::LockInvalidArgument => "Invalid lock argument",
        LockErrorCode::LockDisabled => "Lock disabled",
        _ => "Lock error",
    }
}

/// Details entries carried as JSON numbers.
const NUMERIC: [&str; 5] = [
    "holderTtlMs",
    "waitedMs",
    "waitersAhead",
    "requiredReplicas",
    "acknowledgedReplicas",
];

/// Details entries the public form keeps: what the client's own request went through. Everything
/// else (`holder`, `holderTtlMs`, replica counts, `argument`) describes the service's insides.
const PUBLIC: [&str; 2] = ["waitedMs", "waitersAhead"];

/// The longest `Retry-After` hint for a held lock: 5 s. A watchdog holder's TTL is the watchdog
/// timeout again after every renewal and says nothing about when its work ends, so a longer hint
/// would only make the client wait past a release.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// The `Retry-After` hint while the backend is unavailable: 2 s, about how long a client takes
/// to be connected again once Redis answers (`lock_redis::limits::RECONNECT_MAX_DELAY`, the longest
/// delay of its reconnect back-off).
pub const BACKEND_RETRY_AFTER: Duration = lock_redis::limits::RECONNECT_MAX_DELAY;

/// When a client should retry after `error`, or `None` when retrying soon will not help:
///
/// - held by another owner: the holder's remaining TTL, at most [`MAX_RETRY_AFTER`] — for a
///   fixed lease the time until it expires at the latest, for a watchdog lease (whose TTL is
///   renewed) the cap: check again soon;
/// - Redis unavailable, replicas not confirming, a grant too late: [`BACKEND_RETRY_AFTER`];
/// - earlier fair waiters queued (no holder TTL known), disabled, a failed release, an invalid
///   argument: `None`.
///
/// The header carries it in whole seconds, rounded up, at least 1.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_starter::http::{BACKEND_RETRY_AFTER, MAX_RETRY_AFTER, retry_after};
/// use lock_starter::lock::{AcquireFailure, LockError};
///
/// let held = |ttl_ms| LockError::AcquisitionFailed {
///     key: "bill-run:2026-11".into(),
///     reason: AcquireFailure::HeldByAnotherOwner {
///         holder: "pod-a/1f/3".into(),
///         ttl: Some(Duration::from_millis(ttl_ms)),
///         waited: Duration::ZERO,
///     },
/// };
/// assert_eq!(retry_after(&held(2_900)), Some(Duration::from_millis(2_900))); // a fixed lease
/// assert_eq!(retry_after(&held(28_500)), Some(MAX_RETRY_AFTER)); // a watchdog lease
/// let outage = LockError::backend_unavailable("bill-run:2026-11", "connection refused");
/// assert_eq!(retry_after(&outage), Some(BACKEND_RETRY_AFTER));
/// ```
pub fn retry_after(error: &LockError) -> Option<Duration> {
    match error.acquire_failure()? {
        AcquireFailure::HeldByAnotherOwner { ttl, .. } => ttl.map(|ttl| ttl.min(MAX_RETRY_AFTER)),
        AcquireFailure::BackendUnavailable { .. }
        | AcquireFailure::ReplicationUnconfirmed { .. }
        | AcquireFailure::LeaseExpiredBeforeGrant { .. } => Some(BACKEND_RETRY_AFTER),
        _ => None,
    }
}

/// The public `detail`: what happened to the client's request, without the holder or the
/// backend's error text.
fn public_detail(error: &LockError) -> String {
    let lock = error
        .lock_key()
        .map_or_else(|| "the lock".to_owned(), |key| format!("lock `{key}`"));
    match error {
        LockError::AcquisitionFailed { reason, .. } => match reason {
            AcquireFailure::HeldByAnotherOwner { .. } => {
                format!("{lock} is held by another operation; retry later")
            }
            AcquireFailure::WaitersAhead { .. } => {
                format!("{lock} has earlier requests queued ahead of this one; retry later")
            }
            _ => format!("{lock} was not acquired: the lock service is unavailable; retry later"),
        },
        LockError::ReleaseFailed { .. } => {
            format!("the release of {lock} was not confirmed; it ends when its lease runs out")
        }
        LockError::Disabled { .. } => "locking is disabled on this server".to_owned(),
        LockError::ShutDown { .. } => {
            format!("{lock} was not acquired: this server is shutting down; retry on another")
        }
        // A bug of the calling service (500): the argument is its business, not the client's.
        LockError::InvalidKey { .. } | LockError::InvalidArgument { .. } => {
            format!("the server used {lock} with an invalid argument")
        }
        _ => format!("{}: {lock}", problem_title(error.code())),
    }
}

/// An RFC 9457 problem body for a [`LockError`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_starter::http::ProblemDetails;
/// use lock_starter::prelude::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let lock = InMemoryLock::new();
/// let other_pod = lock.acquire("bill-run:2026-11", Lease::Fixed(Duration::from_secs(30))).await?;
/// let error = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
///
/// let problem = ProblemDetails::public(&error).instance("/bill-runs/2026-11");
/// assert_eq!(problem.problem_type, "https://platform.telco/problems/lock-acquisition-failed");
/// assert_eq!((problem.status, problem.title.as_str()), (503, "Lock not acquired"));
/// assert_eq!(problem.code, "LOCK_ACQUISITION_FAILED");
/// assert_eq!(problem.reason, "held_by_another_owner");
/// assert_eq!(problem.lock_key.as_deref(), Some("bill-run:2026-11"));
/// assert_eq!(problem.instance.as_deref(), Some("/bill-runs/2026-11"));
/// assert!(!problem.to_json().to_string().contains(other_pod.owner())); // no holder
/// assert_eq!(problem.retry_after_secs, Some(5)); // 30 s left, capped at 5 s
///
/// let internal = ProblemDetails::detailed(&error);
/// assert_eq!(internal.extensions["holder"], other_pod.owner());
/// assert!(internal.detail.starts_with("lock `bill-run:2026-11` was not acquired"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ProblemDetails {
    /// The stable URI of the error code ([`problem_type`]).
    #[serde(rename = "type")]
    pub problem_type: String,
    /// The fixed title of the error code ([`problem_title`]).
    pub title: String,
    /// The HTTP status ([`LockError::http_status`]): 503, or 500 for an invalid argument.
    pub status: u16,
    /// What happened: in the public form a fixed sentence per reason naming the lock key; in the
    /// detailed form the error's one-line message (holder, backend error text).
    pub detail: String,
    /// The request this problem occurred on, if the service sets it ([`Self::instance`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The error code, e.g. `LOCK_ACQUISITION_FAILED`.
    pub code: String,
    /// The lock key, when the error is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_key: Option<String>,
    /// The reason, e.g. `held_by_another_owner`, `backend_unavailable`, `disabled`.
    pub reason: String,
    /// The other [`LockError::details`] entries: in the public form only `waitedMs` and
    /// `waitersAhead`; in the detailed form all of them (`holder`, `holderTtlMs`, …).
    #[serde(flatten)]
    pub extensions: BTreeMap<String, serde_json::Value>,
    /// The `Retry-After` header value in seconds ([`retry_after`], rounded up), on a 409 or 503 when a
    /// hint is known. Not part of the body.
    #[serde(skip)]
    pub retry_after_secs: Option<u64>,
}

impl ProblemDetails {
    /// The public problem body of `error`, for clients outside the service: `type`, `title`,
    /// `status`, a `detail` naming the lock key and the reason, `code`, `lockKey`, `reason`,
    /// `waitedMs` / `waitersAhead`, and the [`retry_after`] hint — never the holder (pod name,
    /// owner token), the backend's error text, replica counts or argument names. Log the error
    /// itself server-side ([`problem_response`] and [`LockRejection`] do).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::lock::LockError;
    ///
    /// let error = LockError::backend_unavailable("bill-run:2026-11", "10.0.0.7:6379 refused");
    /// let problem = ProblemDetails::public(&error);
    /// assert_eq!((problem.status, problem.reason.as_str()), (503, "backend_unavailable"));
    /// assert!(!problem.to_json().to_string().contains("10.0.0.7"));
    /// assert_eq!(problem.retry_after_secs, Some(2));
    /// ```
    pub fn public(error: &LockError) -> Self {
        let mut problem = Self::detailed(error);
        problem.detail = public_detail(error);
        problem
            .extensions
            .retain(|name, _| PUBLIC.contains(&name.as_str()));
        problem
    }

    /// The detailed problem body of `error`, for internal APIs whose callers may see the
    /// service's insides: `detail` is the error's message and every [`LockError::details`] entry
    /// is a member (`holder`, `holderTtlMs`, `requiredReplicas`, `argument`, …).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::lock::LockError;
    ///
    /// let error = LockError::invalid_argument("lease", "0s", "accepted: 100 ms to 168 h")
    ///     .for_key("bill-run:2026-11");
    /// let problem = ProblemDetails::detailed(&error);
    /// assert_eq!(problem.status, 500); // a bug of the calling service
    /// assert_eq!(problem.reason, "invalid_argument");
    /// assert_eq!(problem.extensions["argument"], "lease");
    /// assert_eq!(problem.retry_after_secs, None);
    /// ```
    pub fn detailed(error: &LockError) -> Self {
        let code = error.code();
        let mut details = error.details();
        let reason = details.remove("reason").unwrap_or_default();
        let lock_key = details.remove("lockKey");
        details.remove("code");
        details.remove("message");
        let retry_after_secs = retry_after(error).map(|d| {
            let secs = u64::try_from(d.as_millis().div_ceil(1000)).unwrap_or(u64::MAX);
            secs.max(1)
        });
        let extensions = details
            .into_iter()
            .map(|(name, value)| {
                let json = match value.parse::<u64>() {
                    Ok(n) if NUMERIC.contains(&name) => serde_json::Value::from(n),
                    _ => serde_json::Value::from(value),
                };
                (name.to_owned(), json)
            })
            .collect();
        ProblemDetails {
            problem_type: problem_type(code).to_owned(),
            title: problem_title(code).to_owned(),
            status: error.http_status(),
            detail: error.to_string(),
            instance: None,
            code: code.as_str().to_owned(),
            lock_key,
            reason,
            extensions,
            retry_after_secs,
        }
    }

    /// The default form: [`public`](Self::public). A library behind a public API must not leak
    /// its insides unless asked to; ask with [`detailed`](Self::detailed).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::lock::LockError;
    ///
    /// let error = LockError::backend_unavailable("bill-run:2026-11", "connection refused");
    /// assert_eq!(ProblemDetails::from_error(&error), ProblemDetails::public(&error));
    /// ```
    pub fn from_error(error: &LockError) -> Self {
        Self::public(error)
    }

    /// Sets `instance`: a URI of this occurrence, e.g. the request path.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::lock::LockError;
    ///
    /// let error = LockError::backend_unavailable("bill-run:2026-11", "connection refused");
    /// let problem = ProblemDetails::from_error(&error).instance("/bill-runs/2026-11");
    /// assert_eq!(problem.to_json()["instance"], "/bill-runs/2026-11");
    /// ```
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// The body as JSON.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let lock = InMemoryLock::new();
    /// let _other_pod = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
    /// let error = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
    ///
    /// let body = ProblemDetails::from_error(&error).to_json();
    /// assert_eq!(body["status"], 503);
    /// assert_eq!(body["lockKey"], "bill-run:2026-11"); // camelCase members
    /// assert!(body["waitedMs"].is_u64()); // numbers as JSON numbers
    /// assert!(body.get("instance").is_none()); // unset members are left out
    /// # Ok(()) }
    /// ```
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl From<&LockError> for ProblemDetails {
    fn from(error: &LockError) -> Self {
        ProblemDetails::from_error(error)
    }
}

impl IntoResponse for ProblemDetails {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(secs) = self
            .retry_after_secs
            .filter(|_| matches!(status.as_u16(), 409 | 503))
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The response for `error`: its status, the public problem body ([`ProblemDetails::public`])
/// and `Retry-After`; the error itself — holder, backend error text — is logged server-side
/// (target `lock_starter::http`, `DEBUG` for contention and a disabled lock, `WARN` for an
/// invalid argument, `INFO` otherwise).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_starter::http::problem_response;
/// use lock_starter::prelude::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let lock = InMemoryLock::new();
/// let _other_pod = lock.acquire("bill-run:2026-11", Lease::Fixed(Duration::from_millis(2500))).await?;
/// let error = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
///
/// let response = problem_response(&error);
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// assert_eq!(response.headers()["retry-after"], "3"); // the fixed lease's 2.5 s, rounded up
/// # Ok(()) }
/// ```
pub fn problem_response(error: &LockError) -> Response {
    log_withheld(error);
    ProblemDetails::public(error).into_response()
}

/// Logs what the public body leaves out.
fn log_withheld(error: &LockError) {
    let details = error.details();
    let reason = details.get("reason").map_or("", String::as_str);
    let lock_key = error.lock_key().unwrap_or("");
    let (status, code) = (error.http_status(), error.code().as_str());
    let message = "lock error answered with a public problem body";
    match reason {
        // Expected answers: contention, and a server switched off or stopping.
        "held_by_another_owner" | "waiters_ahead" | "disabled" | "shut_down" => {
            tracing::debug!(status, code, reason, lock_key, %error, "{message}");
        }
        "invalid_argument" | "invalid_key" => {
            tracing::warn!(status, code, reason, lock_key, %error, "{message}");
        }
        _ => tracing::info!(status, code, reason, lock_key, %error, "{message}"),
    }
}

/// A [`LockError`] as an axum rejection: return `Result<_, LockRejection>` from a handler and
/// use `?` on lock calls; the error becomes its status and the public problem body
/// ([`problem_response`]: the detail is logged, not sent).
///
/// # Examples
///
/// ```
/// use axum::response::IntoResponse;
/// use lock_starter::figment::{Figment, providers::{Format, Toml}};
/// use lock_starter::http::LockRejection;
/// use lock_starter::prelude::*;
///
/// async fn send_digest(starter: &LockStarter) -> Result<&'static str, LockRejection> {
///     starter.lock()?; // LOCK_DISABLED when switched off: 503
///     Ok("sent")
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let off = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
/// let starter = LockStarter::builder().figment(off).build().await?;
/// let response = send_digest(&starter).await.into_response();
/// assert_eq!(response.status(), 503);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LockRejection(pub LockError);

impl From<LockError> for LockRejection {
    fn from(error: LockError) -> Self {
        LockRejection(error)
    }
}

impl IntoResponse for LockRejection {
    fn into_response(self) -> Response {
        problem_response(&self.0)
    }
}

/// Like [`LockRejection`], with the detailed problem body ([`ProblemDetails::detailed`]: the
/// holder, the backend's error text): for internal or operator APIs only.
///
/// # Examples
///
/// ```
/// use axum::response::IntoResponse;
/// use lock_starter::http::DetailedLockRejection;
/// use lock_starter::prelude::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let lock = InMemoryLock::new();
/// let other_pod = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
/// let error = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
///
/// let response = DetailedLockRejection::from(error).into_response();
/// assert_eq!(response.status(), 503);
/// # drop(other_pod);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DetailedLockRejection(pub LockError);

impl From<LockError> for DetailedLockRejection {
    fn from(error: LockError) -> Self {
        DetailedLockRejection(error)
    }
}

impl IntoResponse for DetailedLockRejection {
    fn into_response(self) -> Response {
        ProblemDetails::detailed(&self.0).into_response()
    }
}
