//! [`RateLimitLayer`], which limits requests per key taken from the request.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request};
use axum::response::IntoResponse;

use super::problem::problem_response;
use super::{Answer, Handler, KeyFn, Req};
use crate::rate_limit::{Basis, Decision, RateLimiter};

/// The response field with the limit's state for this client: `RateLimit`.
pub const RATELIMIT_HEADER: &str = "ratelimit";
/// The response field with the limit's quota: `RateLimit-Policy`.
pub const RATELIMIT_POLICY_HEADER: &str = "ratelimit-policy";

/// A tower layer limiting the requests below it per key, such as a client id, an API key or an
/// address, on a shared [`RateLimiter`].
///
/// # Contract
/// - Each request whose key closure gives a key is charged 1 under that key before the handler
///   runs. A request it gives `None` passes unlimited.
/// - Admitted: the handler runs, and its response keeps its own headers and gains the limit's
///   `RateLimit-Policy` and `RateLimit` fields.
/// - Denied: 429 with the public problem body of
///   [`RateLimitError::Limited`](crate::rate_limit::RateLimitError::Limited) (`RATE_LIMITED`),
///   `Retry-After` in whole seconds rounded up (at least 1), and the same two fields. The
///   handler does not run.
/// - The store failed: by the limiter's [`FailurePolicy`](crate::rate_limit::FailurePolicy).
///   Fail closed answers 503 `RATE_LIMIT_UNAVAILABLE` with `Retry-After: 2`; fail open lets the
///   request pass. Rate limiting switched off (`enabled = false`) lets it pass too. Neither adds
///   the fields, as nothing was counted.
/// - A key no key may be (empty, longer than 512 bytes, with a control character) answers 400
///   [`REQUEST_KEY_INVALID`](super::REQUEST_KEY_INVALID) naming the rule, and the handler does
///   not run: the key came from the client. Nothing is charged.
/// - The fields follow draft-ietf-httpapi-ratelimit-headers-10:
///   `RateLimit-Policy: "<limit>";q=<burst>;w=<refill time>` and
///   `RateLimit: "<limit>";r=<remaining>;t=<reset after>`, in whole seconds rounded up. They
///   are appended, so stacked layers (per client, then global) each add theirs. A limit whose
///   name is not printable ASCII gets none.
///
/// [`LockStarter::rate_limit_layer`](crate::LockStarter::rate_limit_layer) builds it with a
/// configured limit.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use axum::{Router, body::Body, http::Request, routing::get};
/// use lock_starter::http::RateLimitLayer;
/// use lock_starter::rate_limit::{FailurePolicy, InMemoryRateLimits, RateLimiter};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // `starter.rate_limit_layer(..)` in a service; in memory here.
/// let store = Arc::new(InMemoryRateLimits::new());
/// let limiter = RateLimiter::new(store, "api", "3/1m".parse()?, FailurePolicy::FailOpen)?;
/// let per_client = RateLimitLayer::new(limiter, |request| {
///     let client = request.headers().get("x-client-id")?;
///     client.to_str().ok().map(str::to_owned)
/// });
/// let app: Router = Router::new().route("/tariffs", get(|| async { "[]" })).layer(per_client);
///
/// let request = || Request::get("/tariffs").header("x-client-id", "client-42").body(Body::empty());
/// let admitted = app.clone().oneshot(request()?).await?;
/// assert_eq!(admitted.headers()["ratelimit-policy"], r#""api";q=3;w=60"#);
/// assert_eq!(admitted.headers()["ratelimit"], r#""api";r=2;t=20"#); // one per 20 s
///
/// app.clone().oneshot(request()?).await?;
/// app.clone().oneshot(request()?).await?;
/// let denied = app.clone().oneshot(request()?).await?;
/// assert_eq!(denied.status(), 429);
/// assert_eq!(denied.headers()["content-type"], "application/problem+json");
/// assert_eq!(denied.headers()["retry-after"], "20");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: RateLimiter,
    key: KeyFn,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// The layer charging `limiter` 1 per request under the key `key` gives, or not at all when
    /// it gives `None`.
    pub fn new<F>(limiter: RateLimiter, key: F) -> Self
    where
        F: Fn(&Request<Body>) -> Option<String> + Send + Sync + 'static,
    {
        RateLimitLayer {
            limiter,
            key: Arc::new(key),
        }
    }

    /// The limiter the layer charges, for instance to change its quota with
    /// [`RateLimiter::set_quota`].
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }
}

super::layer_service!(RateLimitLayer, RateLimitService, keyed);

impl RateLimitLayer {
    /// Runs `inner` for `request` if the limit admits `key`; 429 with the rate limit's problem
    /// body when it does not. Every counted decision adds the `RateLimit` fields.
    fn serve<S: Handler>(&self, mut inner: S, request: Req, key: String) -> Answer<S::Error> {
        let limiter = self.limiter.clone();
        Box::pin(async move {
            let decision = match limiter.try_acquire(&key, 1).await {
                Ok(decision) => decision,
                Err(error) => return Ok(problem_response(&error)),
            };
            let fields = Fields::of(&decision);
            let mut response = match decision.admitted() {
                Ok(_) => inner.call(request).await?.into_response(),
                Err(error) => problem_response(&error),
            };
            if let Some(fields) = fields {
                fields.append_to(response.headers_mut());
            }
            Ok(response)
        })
    }
}

/// The `RateLimit-Policy` and `RateLimit` values of a counted decision.
struct Fields {
    policy: HeaderValue,
    state: HeaderValue,
}

impl Fields {
    /// The fields of `decision`, or `None` when it was not counted or its limit's name cannot
    /// be written as a structured-field string.
    fn of(decision: &Decision) -> Option<Fields> {
        if decision.basis != Basis::Counted {
            return None;
        }
        let name = sf_string(&decision.limit)?;
        let policy = format!(
            "{name};q={};w={}",
            decision.quota.burst(),
            whole_seconds(decision.quota.refill_time())
        );
        let state = format!(
            "{name};r={};t={}",
            decision.remaining,
            whole_seconds(decision.reset_after)
        );
        Some(Fields {
            policy: HeaderValue::try_from(policy).ok()?,
            state: HeaderValue::try_from(state).ok()?,
        })
    }

    fn append_to(self, headers: &mut HeaderMap) {
        headers.append(
            HeaderName::from_static(RATELIMIT_POLICY_HEADER),
            self.policy,
        );
        headers.append(HeaderName::from_static(RATELIMIT_HEADER), self.state);
    }
}

/// `duration` in whole seconds, rounded up.
fn whole_seconds(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

/// `text` as a structured-field string (RFC 9651): quoted, with `"` and `\` escaped; `None`
/// when it holds a character a string cannot carry, anything but printable ASCII.
fn sf_string(text: &str) -> Option<String> {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            ' '..='~' => quoted.push(c),
            _ => return None,
        }
    }
    quoted.push('"');
    Some(quoted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_escaped_or_refused() {
        assert_eq!(sf_string("api").as_deref(), Some(r#""api""#));
        assert_eq!(sf_string(r#"a"b\c"#).as_deref(), Some(r#""a\"b\\c""#));
        assert_eq!(sf_string("tarif-é"), None);
    }

    #[test]
    fn seconds_are_rounded_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::from_nanos(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(20_000)), 20);
        assert_eq!(whole_seconds(Duration::from_micros(20_000_001)), 21);
    }
}
