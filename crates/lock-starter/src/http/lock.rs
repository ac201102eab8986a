//! [`LockLayer`], which runs a handler holding the distributed lock of a key taken from the
//! request.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use axum::response::IntoResponse;

use super::problem::problem_response;
use super::{Answer, Handler, KeyFn, Req};
use crate::lock::{AcquireOptions, DistributedLock, DistributedLockExt, LockError};

/// A tower layer running the handlers below it under the distributed lock of a key taken from
/// the request: one request per key at a time, across every replica sharing the lock.
///
/// # Contract
/// - A request whose key closure gives a key runs its handler holding that key's lock, acquired
///   with the layer's lease and wait time (unless set, the lock's configured `wait-time`). A
///   request it gives `None` runs unguarded.
/// - Not granted (held by another request, Redis unavailable, the lock switched off or shut
///   down): 503 with the lock's public problem body (`LOCK_ACQUISITION_FAILED` or
///   `LOCK_DISABLED`) and its `Retry-After` (see [`retry_after`](super::retry_after)). The
///   handler does not run.
/// - The lock is released once the handler has produced its response, before the response is
///   returned. It covers producing the response, not streaming it: a body that streams is
///   sent after the release.
/// - As inside [`with_lock`](DistributedLockExt::with_lock), the handler's task re-enters the
///   key through the same lock, and a failed release or a lease that ran out before the handler
///   finished is logged as a `WARN`; the response is returned either way. A layer below that
///   runs the handler on a task of its own, as
///   [`IdempotencyLayer`](super::IdempotencyLayer) does, takes re-entry away: put that one
///   above (`.layer(lock).layer(idempotency)`), so that a replay does not wait for the lock
///   either.
/// - A key no key may be (empty, longer than 512 bytes, with a control character) answers 400
///   [`REQUEST_KEY_INVALID`](super::REQUEST_KEY_INVALID) naming the rule, and the handler does
///   not run: the key came from the client.
///
/// [`LockStarter::lock_layer`](crate::LockStarter::lock_layer) builds it on the configured
/// lock.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use axum::{Router, body::Body, http::Request, routing::post};
/// use lock_starter::http::LockLayer;
/// use lock_starter::prelude::*;
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // `starter.lock_layer(..)` in a service; in memory here.
/// let lock: Arc<dyn DistributedLock> = Arc::new(InMemoryLock::new());
/// let one_attempt = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::ZERO)?;
/// let per_period = LockLayer::new(Arc::clone(&lock), one_attempt, |request| {
///     let period = request.uri().path().strip_prefix("/bill-runs/")?;
///     Some(format!("bill-run:{period}"))
/// })?;
/// let app: Router = Router::new()
///     .route("/bill-runs/{period}", post(|| async { "1204 invoices" }))
///     .layer(per_period);
///
/// let request = || Request::post("/bill-runs/2026-11").body(Body::empty());
/// assert_eq!(app.clone().oneshot(request()?).await?.status(), 200);
///
/// // While another pod runs the bill run of this period:
/// let other_pod = lock.try_acquire("bill-run:2026-11", Lease::Watchdog).await?;
/// let contended = app.clone().oneshot(request()?).await?;
/// assert_eq!(contended.status(), 503);
/// assert_eq!(contended.headers()["content-type"], "application/problem+json");
/// # drop(other_pod);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockLayer {
    lock: Arc<dyn DistributedLock>,
    options: AcquireOptions,
    key: KeyFn,
}

impl std::fmt::Debug for LockLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockLayer")
            .field("lock", &self.lock)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl LockLayer {
    /// The layer holding `lock` on the key `key` gives while the handler runs, acquired with
    /// `options`: a [`Lease`](crate::lock::Lease), or [`AcquireOptions`] with a wait time of
    /// their own.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] (`LOCK_INVALID_ARGUMENT`) for a fixed lease outside
    /// 100 ms to 168 h.
    pub fn new<F>(
        lock: Arc<dyn DistributedLock>,
        options: impl Into<AcquireOptions>,
        key: F,
    ) -> Result<Self, LockError>
    where
        F: Fn(&Request<Body>) -> Option<String> + Send + Sync + 'static,
    {
        let options = options.into();
        options.lease().validate()?;
        Ok(LockLayer {
            lock,
            options,
            key: Arc::new(key),
        })
    }
}

super::layer_service!(LockLayer, LockService, keyed);

impl LockLayer {
    /// Runs `inner` for `request` under the lock of `key`; 503 with the lock's problem body
    /// when it is not granted.
    fn serve<S: Handler>(&self, mut inner: S, request: Req, key: String) -> Answer<S::Error> {
        let (lock, options) = (Arc::clone(&self.lock), self.options);
        Box::pin(async move {
            let handled = lock
                .with_lock(&key, options, move || inner.call(request))
                .await;
            match handled {
                Ok(response) => response.map(IntoResponse::into_response),
                Err(error) => Ok(problem_response(&error)),
            }
        })
    }
}
