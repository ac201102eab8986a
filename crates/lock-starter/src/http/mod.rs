//! Every capability's errors as HTTP answers, and tower layers for the capabilities (feature
//! `http`): [`IdempotencyLayer`] for `Idempotency-Key`, [`RateLimitLayer`] answering 429 with the
//! IETF `RateLimit` fields, and [`LockLayer`] running a handler under a key's lock.
//!
//! Any [`Problem`](crate::Problem) becomes an RFC 9457 problem body, [`ProblemDetails`], served
//! as `application/problem+json` with a `Retry-After` hint where a retry can help. The public
//! form, the default, names the subject and the reason and leaves out the service's insides,
//! which are logged instead. A lock that failed closed answers:
//!
//! ```json
//! {
//!   "type": "https://platform.telco/problems/lock-acquisition-failed",
//!   "title": "Lock not acquired",
//!   "status": 503,
//!   "detail": "lock `bill-run:2026-11` is held by another operation; retry later",
//!   "code": "LOCK_ACQUISITION_FAILED",
//!   "reason": "held_by_another_owner",
//!   "lockKey": "bill-run:2026-11",
//!   "waitedMs": 0
//! }
//! ```
//!
//! In a handler, return `Result<_, Rejection>` and use `?` on any capability's call:
//!
//! ```
//! use axum::Json;
//! use lock_starter::http::Rejection;
//! use lock_starter::prelude::*;
//! use std::sync::Arc;
//!
//! async fn start_bill_run(lock: Arc<dyn DistributedLock>) -> Result<Json<u32>, Rejection> {
//!     let invoices = lock
//!         .with_lock("bill-run:2026-11", Lease::Watchdog, || async { 1_204 })
//!         .await?; // 503 and a problem body when not granted
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
//! The body fields and the `Retry-After` rule are listed in `docs/observability.md`.

/// Declares the service `$service` the layer `$layer` wraps a handler in, with the layer's
/// `tower::Layer` impl. With `keyed`, also the service's `tower::Service` impl for a layer with
/// a `key` closure (a [`KeyFn`]): a request it gives no key goes straight to the handler; one it
/// gives a key goes to the layer's `serve(inner, request, key)`, `inner` being the handler's
/// clone that was polled ready.
macro_rules! layer_service {
    ($layer:ident, $service:ident) => {
        impl<S> tower::Layer<S> for $layer {
            type Service = $service<S>;

            fn layer(&self, inner: S) -> Self::Service {
                $service {
                    inner,
                    layer: self.clone(),
                }
            }
        }

        #[doc = concat!("The service [`", stringify!($layer), "`] wraps a handler in.")]
        #[derive(Debug, Clone)]
        pub struct $service<S> {
            inner: S,
            layer: $layer,
        }

        impl<S: Clone> $service<S> {
            /// The inner service that was polled ready, to serve this request; a clone of it
            /// takes its place.
            fn take_ready(&mut self) -> S {
                let ready = self.inner.clone();
                std::mem::replace(&mut self.inner, ready)
            }
        }
    };
    ($layer:ident, $service:ident, keyed) => {
        super::layer_service!($layer, $service);

        impl<S: super::Handler + Clone> tower::Service<super::Req> for $service<S> {
            type Response = axum::response::Response;
            type Error = S::Error;
            type Future = super::Answer<S::Error>;

            fn poll_ready(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), S::Error>> {
                self.inner.poll_ready(cx)
            }

            fn call(&mut self, request: super::Req) -> Self::Future {
                use axum::response::IntoResponse;
                let Some(key) = (self.layer.key)(&request) else {
                    let response = self.inner.call(request);
                    return Box::pin(
                        async move { response.await.map(IntoResponse::into_response) },
                    );
                };
                if let Some(refused) = super::refused_key(&key) {
                    return Box::pin(async move { Ok(refused) });
                }
                let inner = self.take_ready();
                self.layer.serve(inner, request, key)
            }
        }
    };
}
use layer_service;

/// The code of a keyed layer's 400 for a key no key may be.
pub const REQUEST_KEY_INVALID: &str = "REQUEST_KEY_INVALID";

/// 400 `REQUEST_KEY_INVALID` for a key a closure took from the request that no key may be
/// (empty, over 512 bytes, with a control character): the client's doing, never a 500. The
/// body names the rule, not the key.
fn refused_key(key: &str) -> Option<axum::response::Response> {
    use axum::response::IntoResponse;

    let Err(crate::lock::LockError::InvalidKey { problem, .. }) = lock_core::validate_key(key)
    else {
        return None;
    };
    tracing::debug!(
        key_bytes = key.len(),
        problem,
        "a key taken from the request is refused: 400"
    );
    let details = std::collections::BTreeMap::from([
        (
            "message",
            format!("the key this request gives is refused: {problem}"),
        ),
        ("reason", "key_invalid".to_owned()),
        (
            "rule",
            format!(
                "a key of 1 to {} bytes of UTF-8 with no control characters",
                lock_core::MAX_KEY_BYTES
            ),
        ),
    ]);
    let problem =
        problem::ProblemDetails::of(REQUEST_KEY_INVALID, 400, details, problem::Form::Detailed);
    Some(problem.into_response())
}

/// A header's value as a layer's key, one value to one key: UTF-8 text as it is, any other
/// byte, and `%`, as `%XX`. `HeaderValue::to_str` refuses non-ASCII, and a lossy conversion
/// would give every undecodable value one key. The layers still answer 400 for a key that is
/// none (empty, over 512 bytes, with a control character such as a tab).
///
/// # Examples
///
/// ```
/// use axum::http::HeaderValue;
/// use lock_starter::http::header_key;
///
/// assert_eq!(header_key(&HeaderValue::from_static("carol")), "carol");
/// assert_eq!(header_key(&HeaderValue::from_bytes(b"caf\xe9").unwrap()), "caf%E9");
/// assert_eq!(header_key(&HeaderValue::from_static("caf%E9")), "caf%25E9");
/// ```
pub fn header_key(value: &axum::http::HeaderValue) -> String {
    use std::fmt::Write;
    let mut key = String::with_capacity(value.len());
    for chunk in value.as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '%' => key.push_str("%25"),
                c => key.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(key, "%{byte:02X}");
        }
    }
    key
}

/// A request, as the layers take it.
type Req = axum::http::Request<axum::body::Body>;

/// The closure a keyed layer takes its key from: `None` leaves the request alone.
type KeyFn = std::sync::Arc<dyn Fn(&Req) -> Option<String> + Send + Sync>;

/// A handler a layer wraps: a service of requests whose answers become responses.
trait Handler:
    tower::Service<
        Req,
        Response: axum::response::IntoResponse + Send,
        Error: Send + 'static,
        Future: Send + 'static,
    > + Send
    + 'static
{
}

impl<S> Handler for S
where
    S: tower::Service<Req> + Send + 'static,
    S::Response: axum::response::IntoResponse + Send,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
{
}

/// What a layer's service answers with.
type Answer<E> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<axum::response::Response, E>> + Send>,
>;

mod idempotency;
mod idempotency_key;
mod lock;
mod problem;
mod rate_limit;

pub use idempotency::{
    DEFAULT_MAX_BODY_BYTES, IDEMPOTENCY_KEY_HEADER, IdempotencyLayer, IdempotencyService,
    MAX_BODY_BYTES, REPLAYED_HEADER,
};
pub use lock::{LockLayer, LockService};
pub use problem::{
    BACKEND_RETRY_AFTER, DetailedRejection, IN_PROGRESS_RETRY_AFTER, MAX_RETRY_AFTER, PROBLEM_JSON,
    ProblemDetails, Rejection, problem_response, retry_after,
};
pub use rate_limit::{RATELIMIT_HEADER, RATELIMIT_POLICY_HEADER, RateLimitLayer, RateLimitService};
