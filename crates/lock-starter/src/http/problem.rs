//! Any capability's [`Problem`] as an RFC 9457 problem body and an axum response.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::Problem;

/// The `Retry-After` of a 409, while the first request still runs: 1 s.
///
/// Most API calls end within a second. A service whose creates run longer sets a wait time on
/// the layer instead, so that the retry waits for the response.
pub const IN_PROGRESS_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The media type of a problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The longest `Retry-After` hint for a held lock: 5 s.
///
/// A watchdog holder's TTL is renewed and says nothing about when its work ends, so a longer
/// hint would only make the client wait past a release.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// The `Retry-After` hint while the backend is unavailable: 2 s, the longest delay of the Redis
/// client's reconnect back-off.
pub const BACKEND_RETRY_AFTER: Duration = lock_redis::limits::RECONNECT_MAX_DELAY;

/// Details entries carried as JSON numbers.
const NUMERIC: [&str; 6] = [
    "holderTtlMs",
    "waitedMs",
    "waitersAhead",
    "requiredReplicas",
    "acknowledgedReplicas",
    "retryAfterMs",
];

/// Details entries the public form keeps: the subject of the request and what it went through.
/// The rest, such as `holder` and replica counts, describes the service's insides. A rate
/// limit's `key` is left out too: it may be an API key or a client's address.
const PUBLIC: [&str; 8] = [
    "lockKey",
    "masterKey",
    "idempotencyKey",
    "limit",
    "cache",
    "waitedMs",
    "waitersAhead",
    "retryAfterMs",
];

/// When a client should retry after `error`, or `None` when retrying soon will not help.
///
/// - Held by another owner: the holder's remaining TTL, at most [`MAX_RETRY_AFTER`].
/// - Rate limited: when the limit admits the request again.
/// - Backend unavailable, replicas not confirming, a grant too late: [`BACKEND_RETRY_AFTER`].
/// - A duplicate request still in progress, or its first request failed:
///   [`IN_PROGRESS_RETRY_AFTER`].
///
/// The `Retry-After` header carries it in whole seconds, rounded up, at least 1.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lock_starter::http::{BACKEND_RETRY_AFTER, MAX_RETRY_AFTER, retry_after};
/// use lock_starter::lock::{AcquireFailure, LockError};
/// use lock_starter::rate_limit::RateLimitError;
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
///
/// let limited = RateLimitError::Limited {
///     limit: "api".into(),
///     key: "client-42".into(),
///     retry_after: Duration::from_millis(1_500),
/// };
/// assert_eq!(retry_after(&limited), Some(Duration::from_millis(1_500))); // `Retry-After: 2`
/// ```
pub fn retry_after(error: &(impl Problem + ?Sized)) -> Option<Duration> {
    hint(&error.details())
}

fn hint(details: &BTreeMap<&'static str, String>) -> Option<Duration> {
    match details.get("reason").map(String::as_str)? {
        "held_by_another_owner" => {
            let ttl_ms = details.get("holderTtlMs")?.parse().ok()?;
            Some(Duration::from_millis(ttl_ms).min(MAX_RETRY_AFTER))
        }
        // The limit's own answer: exact, on the store's clock.
        "limited" => Some(Duration::from_millis(
            details.get("retryAfterMs")?.parse().ok()?,
        )),
        "backend_unavailable" | "replication_unconfirmed" | "lease_expired_before_grant" => {
            Some(BACKEND_RETRY_AFTER)
        }
        // A retry of a failed owner runs at once: one second spreads a burst of them.
        "in_progress" | "owner_failed" => Some(IN_PROGRESS_RETRY_AFTER),
        _ => None,
    }
}

/// An RFC 9457 problem body for any capability's [`Problem`].
///
/// The public form, the default, tells a client what happened to its request and when to
/// retry. The detailed form adds the service's insides, such as the holder and the backend's
/// error text, for operator APIs.
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
/// assert_eq!(problem.extensions["lockKey"], "bill-run:2026-11");
/// assert!(!problem.to_json().to_string().contains(other_pod.owner())); // no holder
/// assert_eq!(problem.retry_after_secs, Some(5)); // 30 s left, capped at 5 s
///
/// let internal = ProblemDetails::detailed(&error);
/// assert_eq!(internal.extensions["holder"], other_pod.owner());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ProblemDetails {
    /// `https://platform.telco/problems/` and the code in kebab case.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// The fixed title of the code.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// In the public form a fixed sentence naming the subject, in the detailed form the error's
    /// message.
    pub detail: String,
    /// The request this problem occurred on, if set with [`Self::instance`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The error code, such as `LOCK_ACQUISITION_FAILED`.
    pub code: String,
    /// The reason, such as `held_by_another_owner`.
    pub reason: String,
    /// The other details entries, camelCase: in the public form only the subject's key (or a
    /// rate limit's name, `limit`), `waitedMs`, `waitersAhead` and `retryAfterMs`.
    #[serde(flatten)]
    pub extensions: BTreeMap<String, serde_json::Value>,
    /// The `Retry-After` value in seconds, sent with a 409, a 429 or a 503. Not part of the
    /// body.
    #[serde(skip)]
    pub retry_after_secs: Option<u64>,
}

/// Which members a body shows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Public,
    Detailed,
}

impl ProblemDetails {
    /// The public problem body of `error`, without the holder, the backend's error text,
    /// replica counts, argument names or a rate-limited key.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_starter::http::ProblemDetails;
    /// use lock_starter::idempotency::IdempotencyError;
    /// use lock_starter::lock::LockError;
    ///
    /// let error = LockError::backend_unavailable("bill-run:2026-11", "10.0.0.7:6379 refused");
    /// let problem = ProblemDetails::public(&error);
    /// assert_eq!((problem.status, problem.reason.as_str()), (503, "backend_unavailable"));
    /// assert!(!problem.to_json().to_string().contains("10.0.0.7"));
    /// assert_eq!(problem.retry_after_secs, Some(2));
    ///
    /// let reused = ProblemDetails::public(&IdempotencyError::KeyReused { key: "8e03978e".into() });
    /// assert_eq!(reused.problem_type, "https://platform.telco/problems/idempotency-key-reused");
    /// assert_eq!((reused.status, reused.reason.as_str()), (422, "key_reused"));
    /// ```
    pub fn public(error: &(impl Problem + ?Sized)) -> Self {
        Self::of(
            error.code(),
            error.http_status(),
            error.details(),
            Form::Public,
        )
    }

    /// The detailed problem body of `error`, for operator APIs: `detail` is the error's message
    /// and every details entry is a member.
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
    /// assert_eq!(problem.extensions["argument"], "lease");
    /// assert_eq!(problem.retry_after_secs, None);
    /// ```
    pub fn detailed(error: &(impl Problem + ?Sized)) -> Self {
        Self::of(
            error.code(),
            error.http_status(),
            error.details(),
            Form::Detailed,
        )
    }

    /// The body of a problem given by its parts: `details` holds `message`, `reason` and the
    /// extension members.
    pub(crate) fn of(
        code: &str,
        status: u16,
        mut details: BTreeMap<&'static str, String>,
        form: Form,
    ) -> Self {
        let retry_after_secs = hint(&details).map(|d| {
            let secs = u64::try_from(d.as_millis().div_ceil(1000)).unwrap_or(u64::MAX);
            secs.max(1)
        });
        details.remove("code");
        let message = details.remove("message").unwrap_or_default();
        let reason = details.remove("reason").unwrap_or_default();
        let detail = match form {
            Form::Public => public_detail(code, &reason, &details),
            Form::Detailed => message,
        };
        let extensions = details
            .into_iter()
            .filter(|(name, _)| form == Form::Detailed || PUBLIC.contains(name))
            .map(|(name, value)| {
                let json = match value.parse::<u64>() {
                    Ok(n) if NUMERIC.contains(&name) => serde_json::Value::from(n),
                    _ => serde_json::Value::from(value),
                };
                (name.to_owned(), json)
            })
            .collect();
        ProblemDetails {
            problem_type: format!(
                "https://platform.telco/problems/{}",
                code.to_ascii_lowercase().replace('_', "-")
            ),
            title: title(code),
            status,
            detail,
            instance: None,
            code: code.to_owned(),
            reason,
            extensions,
            retry_after_secs,
        }
    }

    /// Sets `instance`, a URI of this occurrence such as the request path.
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
    /// let body = ProblemDetails::public(&error).to_json();
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

impl<E: Problem> From<&E> for ProblemDetails {
    fn from(error: &E) -> Self {
        ProblemDetails::public(error)
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
            .filter(|_| matches!(status.as_u16(), 409 | 429 | 503))
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The fixed title of a code: from the table, else the code in sentence case.
fn title(code: &str) -> String {
    let known = match code {
        "LOCK_ACQUISITION_FAILED" => "Lock not acquired",
        "LOCK_RELEASE_FAILED" => "Lock release not confirmed",
        "LOCK_INVALID_ARGUMENT" => "Invalid lock argument",
        "LOCK_DISABLED" => "Lock disabled",
        "IDEMPOTENCY_IN_PROGRESS" => "Request in progress",
        "IDEMPOTENCY_KEY_REUSED" => "Idempotency key reused",
        "IDEMPOTENCY_BACKEND_UNAVAILABLE" | "IDEMPOTENCY_OWNER_FAILED" => "Request not processed",
        "IDEMPOTENCY_RESULT_UNREADABLE"
        | "IDEMPOTENCY_RESULT_NOT_STORED"
        | "IDEMPOTENCY_INVALID_ARGUMENT" => "Idempotency error",
        "IDEMPOTENCY_KEY_INVALID" => "Bad Idempotency-Key",
        "REQUEST_KEY_INVALID" => "Bad request key",
        "IDEMPOTENCY_REQUEST_TOO_LARGE" => "Request body too large",
        "IDEMPOTENCY_RESPONSE_FAILED" => "Response failed",
        "BRANCHES_MASTER_LOCK_FAILED" => "Master lock not acquired",
        "BRANCHES_UNAVAILABLE" => "Branches not tracked",
        "BRANCHES_DISABLED" => "Master/sub locks disabled",
        "BRANCHES_SEALED" => "Branch registered too late",
        "BRANCHES_INVALID_ARGUMENT" => "Invalid branch argument",
        "BRANCHES_INVALID_TOKEN" => "Invalid branch token",
        "RATE_LIMITED" => "Too many requests",
        "RATE_LIMIT_UNAVAILABLE" => "Rate limit not checked",
        "RATE_LIMIT_COST_ABOVE_BURST" | "RATE_LIMIT_INVALID_ARGUMENT" => "Rate limit error",
        "VALUES_UNAVAILABLE" => "Shared values unavailable",
        "VALUES_QUEUE_FULL" => "Queue full",
        "VALUES_UNDECODABLE" | "VALUES_INVALID_ARGUMENT" => "Shared values error",
        "CACHE_UNAVAILABLE" => "Cache unavailable",
        "CACHE_LOAD_FAILED" | "CACHE_LOADER_PANICKED" => "Value not loaded",
        "CACHE_INVALID_ARGUMENT" => "Cache error",
        _ => {
            let words = code.to_ascii_lowercase().replace('_', " ");
            let mut chars = words.chars();
            return chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            });
        }
    };
    known.to_owned()
}

/// The public `detail`: what happened to the client's request, naming its subject, without the
/// service's insides.
fn public_detail(code: &str, reason: &str, details: &BTreeMap<&'static str, String>) -> String {
    let named = |key: &str, noun: &str| {
        details.get(key).map_or_else(
            || format!("the {noun}"),
            |value| format!("{noun} `{value}`"),
        )
    };
    let lock = named("lockKey", "lock");
    let cache = named("cache", "cache");
    let key = details.get("idempotencyKey").map_or("", String::as_str);
    match (code, reason) {
        (_, "held_by_another_owner") => format!("{lock} is held by another operation; retry later"),
        (_, "waiters_ahead") => {
            format!("{lock} has earlier requests queued ahead of this one; retry later")
        }
        ("LOCK_ACQUISITION_FAILED" | "BRANCHES_MASTER_LOCK_FAILED", _) => {
            format!("{lock} was not acquired: the lock service is unavailable; retry later")
        }
        ("LOCK_RELEASE_FAILED", _) => {
            format!("the release of {lock} was not confirmed; it ends when its lease runs out")
        }
        (_, "shut_down") => {
            format!("{lock} was not acquired: this server is shutting down; retry on another")
        }
        ("LOCK_DISABLED", _) => "locking is disabled on this server".to_owned(),
        // A bug of the calling service: the argument is its business, not the client's.
        ("LOCK_INVALID_ARGUMENT", _) => format!("the server used {lock} with an invalid argument"),
        ("IDEMPOTENCY_IN_PROGRESS", _) => {
            format!("a request with idempotency key `{key}` is still being processed; retry later")
        }
        ("IDEMPOTENCY_KEY_REUSED", _) => format!(
            "idempotency key `{key}` was already used for a different request; use a new key for a new request"
        ),
        ("IDEMPOTENCY_BACKEND_UNAVAILABLE", _) => format!(
            "the request with idempotency key `{key}` was not processed: a backend is unavailable; retry later"
        ),
        ("IDEMPOTENCY_OWNER_FAILED", _) => format!(
            "the first request with idempotency key `{key}` left no response to replay (it failed, or its response could not be stored) while this one waited for it; a retry runs it again"
        ),
        (code, _) if code.starts_with("IDEMPOTENCY_") => {
            "the request could not be processed idempotently".to_owned()
        }
        ("BRANCHES_UNAVAILABLE", _) => format!(
            "the branches of {} could not be tracked: a backend is unavailable; retry later",
            named("masterKey", "master")
        ),
        ("BRANCHES_DISABLED", _) => "master/sub locks are disabled on this server".to_owned(),
        ("RATE_LIMITED", _) => format!(
            "{} is used up for this client; retry after the Retry-After time",
            named("limit", "rate limit")
        ),
        ("RATE_LIMIT_UNAVAILABLE", _) => format!(
            "the request was not processed: {} could not be checked; retry later",
            named("limit", "rate limit")
        ),
        // A bug of the calling service, as for a lock's invalid argument.
        (code, _) if code.starts_with("RATE_LIMIT_") => format!(
            "the server checked {} with an invalid argument",
            named("limit", "rate limit")
        ),
        ("CACHE_UNAVAILABLE", _) => format!(
            "a change to {cache} was not confirmed: the cache service is unavailable; retry later"
        ),
        ("CACHE_LOAD_FAILED", _) => format!(
            "the request was not processed: a value of {cache} could not be loaded; retry later"
        ),
        // A bug of the calling service, as for a lock's invalid argument.
        ("CACHE_LOADER_PANICKED" | "CACHE_INVALID_ARGUMENT", _) => {
            format!("the request was not processed: the server failed using {cache}")
        }
        _ => format!("{}: the request was not processed", title(code)),
    }
}

/// The response for `error`: its status, its public problem body and `Retry-After`. The error
/// itself is logged at target `lock_starter::http`: `DEBUG` for contention, a duplicate, a
/// request over its rate limit, a server switched off or stopping and a backend failing (503,
/// warned of once per outage where it is seen), `WARN` for a defect (HTTP 500), `INFO`
/// otherwise, a cache's failed load included.
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
pub fn problem_response(error: &(impl Problem + ?Sized)) -> Response {
    log_withheld(error.code(), error.http_status(), &error.details(), error);
    ProblemDetails::public(error).into_response()
}

/// Logs what the public body leaves out.
pub(crate) fn log_withheld(
    code: &str,
    status: u16,
    details: &BTreeMap<&'static str, String>,
    error: &(impl std::fmt::Display + ?Sized),
) {
    let reason = details.get("reason").map_or("", String::as_str);
    let subject = [
        "lockKey",
        "idempotencyKey",
        "masterKey",
        "limit",
        "cache",
        "key",
    ]
    .into_iter()
    .find_map(|key| details.get(key))
    .map_or("", String::as_str);
    let message = "error answered with a public problem body";
    match reason {
        "held_by_another_owner"
        | "waiters_ahead"
        | "disabled"
        | "shut_down"
        | "in_progress"
        | "key_reused"
        | "limited" => tracing::debug!(status, code, reason, subject, %error, "{message}"),
        _ if status == 500 => tracing::warn!(status, code, reason, subject, %error, "{message}"),
        // Redis failing: warned of once per outage where it is seen, and counted. A loader's
        // failure is the service's own, so it is told as any other.
        _ if status == 503 && reason != "load_failed" => {
            tracing::debug!(status, code, reason, subject, %error, "{message}")
        }
        _ => tracing::info!(status, code, reason, subject, %error, "{message}"),
    }
}

/// Any capability's error as an axum rejection, answered with [`problem_response`].
///
/// Return `Result<_, Rejection>` from a handler and use `?` on lock, idempotency and
/// master/sub-lock calls alike.
///
/// # Examples
///
/// ```
/// use axum::response::IntoResponse;
/// use lock_starter::figment::{Figment, providers::{Format, Toml}};
/// use lock_starter::http::Rejection;
/// use lock_starter::prelude::*;
///
/// async fn send_digest(starter: &LockStarter) -> Result<&'static str, Rejection> {
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
pub struct Rejection(pub Box<dyn Problem>);

impl<E: Problem> From<E> for Rejection {
    fn from(error: E) -> Self {
        Rejection(Box::new(error))
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        problem_response(&*self.0)
    }
}

/// Like [`Rejection`], answered with the detailed problem body: for operator APIs only.
///
/// # Examples
///
/// ```
/// use axum::response::IntoResponse;
/// use lock_starter::http::DetailedRejection;
/// use lock_starter::prelude::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let lock = InMemoryLock::new();
/// let other_pod = lock.acquire("bill-run:2026-11", Lease::Watchdog).await?;
/// let error = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await.unwrap_err();
///
/// let response = DetailedRejection::from(error).into_response();
/// assert_eq!(response.status(), 503);
/// # drop(other_pod);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DetailedRejection(pub Box<dyn Problem>);

impl<E: Problem> From<E> for DetailedRejection {
    fn from(error: E) -> Self {
        DetailedRejection(Box::new(error))
    }
}

impl IntoResponse for DetailedRejection {
    fn into_response(self) -> Response {
        ProblemDetails::detailed(&*self.0).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::title;

    /// Every code of the table in docs/observability.md gets the title the table gives it.
    #[test]
    fn the_documented_titles_are_the_titles() {
        let doc = include_str!("../../../../docs/observability.md");
        let rows: Vec<(Vec<&str>, &str)> = doc
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split(" | ").collect();
                let [codes, status, documented] = cells[..] else {
                    return None;
                };
                let codes = codes.strip_prefix("| `")?;
                status.parse::<u16>().ok()?;
                let codes = codes.split(", ").map(|c| c.trim_matches('`')).collect();
                Some((codes, documented.trim_end_matches(" |")))
            })
            .collect();
        assert!(rows.len() >= 25, "the code table was not found: {rows:?}");
        for (codes, documented) in rows {
            for code in codes {
                assert_eq!(title(code), documented, "{code}");
            }
        }
    }
}
