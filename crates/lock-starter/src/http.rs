//! Lock errors as HTTP responses: RFC 9457 problem details, and axum's `IntoResponse` (feature
//! `http`).
//!
//! A lock that failed closed ends the request with **503 Service Unavailable** and a body like
//!
//! ```json
//! {
//!   "type": "https://platform.telco/problems/lock-acquisition-failed",
//!   "title": "Lock not acquired",
//!   "status": 503,
//!   "detail": "lock `bill-run:2026-11` was not acquired: held by another owner `pod-a/1f/3` (TTL 2900 ms) after waiting 0 ms",
//!   "code": "LOCK_ACQUISITION_FAILED",
//!   "lockKey": "bill-run:2026-11",
//!   "reason": "held_by_another_owner",
//!   "holder": "pod-a/1f/3",
//!   "holderTtlMs": 2900,
//!   "waitedMs": 0
//! }
//! ```
//!
//! served as `application/problem+json`, with `Retry-After` (seconds, rounded up) when the
//! holder's remaining TTL is known. In a handler, return `Result<_, LockRejection>` and use `?`
//! on lock calls:
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
//! let other_pod = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
//! let response = start_bill_run(Arc::clone(&lock)).await.into_response();
//! assert_eq!(response.status(), 503);
//! assert_eq!(response.headers()["content-type"], "application/problem+json");
//! # drop(other_pod);
//! # Ok(()) }
//! ```
//!
//! The `type` URI is stable per error code (see [`problem_type`]); `detail` is the error's
//! one-line message, which names the lock and the reason but never a credential (addresses in
//! it are redacted). The extension members are those of [`LockError::details`], camelCase, with
//! the numeric ones (`holderTtlMs`, `waitedMs`, `waitersAhead`, `requiredReplicas`,
//! `acknowledgedReplicas`) as JSON numbers.

use std::collections::BTreeMap;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::{LockError, LockErrorCode};

/// The media type of a problem body (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The stable `type` URI of each error code:
/// `https://platform.telco/problems/lock-acquisition-failed`, `…/lock-release-failed`,
/// `…/lock-invalid-argument`, `…/lock-disabled` (`about:blank` for a code added later).
///
/// # Examples
///
/// ```
/// use lock_starter::LockErrorCode;
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
/// use lock_starter::LockErrorCode;
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
/// let problem = ProblemDetails::from_error(&error).instance("/bill-runs/2026-11");
/// assert_eq!(problem.problem_type, "https://platform.telco/problems/lock-acquisition-failed");
/// assert_eq!((problem.status, problem.title.as_str()), (503, "Lock not acquired"));
/// assert_eq!(problem.code, "LOCK_ACQUISITION_FAILED");
/// assert_eq!(problem.reason, "held_by_another_owner");
/// assert_eq!(problem.lock_key.as_deref(), Some("bill-run:2026-11"));
/// assert_eq!(problem.instance.as_deref(), Some("/bill-runs/2026-11"));
/// assert_eq!(problem.extensions["holder"], other_pod.owner());
/// assert_eq!(problem.retry_after_secs, Some(30)); // the holder's TTL, rounded up
/// assert!(problem.detail.starts_with("lock `bill-run:2026-11` was not acquired"));
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
    /// The error's one-line message.
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
    /// The other [`LockError::details`] entries: `holder`, `holderTtlMs`, `waitedMs`, ….
    #[serde(flatten)]
    pub extensions: BTreeMap<String, serde_json::Value>,
    /// The `Retry-After` header value in seconds, when a wait hint is known (the holder's
    /// remaining TTL, rounded up). Not part of the body.
    #[serde(skip)]
    pub retry_after_secs: Option<u64>,
}

impl ProblemDetails {
    /// The problem body of `error`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::LockError;
    ///
    /// let error = LockError::invalid_argument("lease", "0s", "accepted: 100ms to 7days")
    ///     .for_key("bill-run:2026-11");
    /// let problem = ProblemDetails::from_error(&error);
    /// assert_eq!(problem.status, 500); // a bug of the calling service
    /// assert_eq!(problem.reason, "invalid_argument");
    /// assert_eq!(problem.extensions["argument"], "lease");
    /// assert_eq!(problem.retry_after_secs, None);
    /// ```
    pub fn from_error(error: &LockError) -> Self {
        let code = error.code();
        let mut details = error.details();
        let reason = details.remove("reason").unwrap_or_default();
        let lock_key = details.remove("lockKey");
        details.remove("code");
        details.remove("message");
        let retry_after_secs = details
            .get("holderTtlMs")
            .and_then(|ms| ms.parse::<u64>().ok())
            .map(|ms| ms.div_ceil(1000).max(1));
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

    /// Sets `instance`: a URI of this occurrence, e.g. the request path.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::LockError;
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
        if let Some(secs) = self.retry_after_secs.filter(|_| status.as_u16() == 503) {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The response for `error`: its status and problem body ([`ProblemDetails`]).
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
/// assert_eq!(response.headers()["retry-after"], "3"); // seconds, rounded up
/// # Ok(()) }
/// ```
pub fn problem_response(error: &LockError) -> Response {
    ProblemDetails::from_error(error).into_response()
}

/// A [`LockError`] as an axum rejection: return `Result<_, LockRejection>` from a handler and
/// use `?` on lock calls; the error becomes its status and problem body.
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
