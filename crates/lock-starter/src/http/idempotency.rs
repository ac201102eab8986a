//! Idempotent execution over HTTP: [`IdempotencyError`] as problem bodies, and
//! [`IdempotencyLayer`], which makes a handler idempotent by its `Idempotency-Key` header with
//! the IETF draft's semantics (draft-ietf-httpapi-idempotency-key-header).
//!
//! - The first `POST`/`PATCH` with a key runs the handler; its response (status, headers,
//!   body) is stored for the result TTL and replayed to every retry with the same key, marked
//!   `Idempotent-Replayed: true`.
//! - A retry while the first is still running gets **409** (or, with
//!   [`IdempotencyLayer::wait_time`], waits for the first and gets its response).
//! - The same key at the same endpoint with a different request (query, content type or body)
//!   gets **422**: another request's response is never replayed.
//! - The coordination backend down: **503** with `Retry-After`, and the handler does not run.
//! - A handler's 5xx response is not stored: the retry runs the handler again. 2xx–4xx are.
//!
//! Keys are scoped per method and path, so one client key cannot collide across endpoints; make
//! keys unique per client too (a UUID), since two clients sending the same key to one endpoint
//! share its response. Responses are buffered whole (no streaming bodies); the call that ran
//! the handler gets its response untouched, a replay the stored status, UTF-8 header values
//! and body (binary bodies as base64).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ProblemDetails;
use crate::{Idempotency, IdempotencyError, IdempotencyOptions, Idempotent};

/// The request header carrying the key: `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// The response header marking a replay: `Idempotent-Replayed: true`.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// The largest request body the layer reads by default: 1 MiB (larger: 413).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

impl ProblemDetails {
    /// The public problem body of an idempotency error: `type`
    /// `https://platform.telco/problems/idempotency-<in-progress|key-reused|backend-unavailable|…>`,
    /// a fixed `detail` per code, `code`, `reason` and `idempotencyKey` — never the holder or
    /// the backend's error text (log the error itself; [`IdempotencyRejection`] does).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_starter::IdempotencyError;
    /// use lock_starter::http::ProblemDetails;
    ///
    /// let error = IdempotencyError::KeyReused { key: "8e03978e".into() };
    /// let problem = ProblemDetails::idempotency(&error);
    /// assert_eq!(problem.status, 422);
    /// assert_eq!(problem.problem_type, "https://platform.telco/problems/idempotency-key-reused");
    /// assert_eq!(problem.extensions["idempotencyKey"], "8e03978e");
    /// ```
    pub fn idempotency(error: &IdempotencyError) -> Self {
        let code = error.code();
        let reason = code.trim_start_matches("IDEMPOTENCY_").to_ascii_lowercase();
        let key = error.key().unwrap_or_default();
        let (title, detail) = match error {
            IdempotencyError::InProgress { .. } => (
                "Request in progress",
                format!(
                    "a request with idempotency key `{key}` is still being processed; retry later"
                ),
            ),
            IdempotencyError::KeyReused { .. } => (
                "Idempotency key reused",
                format!(
                    "idempotency key `{key}` was already used for a different request; use a new key for a new request"
                ),
            ),
            IdempotencyError::Unavailable { .. } => (
                "Request not processed",
                format!(
                    "the request with idempotency key `{key}` was not processed: a backend is unavailable; retry later"
                ),
            ),
            _ => (
                "Idempotency error",
                "the request could not be processed idempotently".to_owned(),
            ),
        };
        let mut extensions = std::collections::BTreeMap::new();
        if error.key().is_some() {
            extensions.insert("idempotencyKey".to_owned(), serde_json::Value::from(key));
        }
        ProblemDetails {
            problem_type: format!(
                "https://platform.telco/problems/{}",
                code.to_ascii_lowercase().replace('_', "-")
            ),
            title: title.to_owned(),
            status: error.http_status(),
            detail,
            instance: None,
            code: code.to_owned(),
            lock_key: None,
            reason,
            extensions,
            // As for the lock's backend; a 409 has no hint (the first request's length is
            // unknown).
            retry_after_secs: matches!(error, IdempotencyError::Unavailable { .. })
                .then_some(super::BACKEND_RETRY_AFTER.as_secs()),
        }
    }
}

/// An [`IdempotencyError`] as an axum rejection: its status and public problem body; the error
/// itself is logged (target `lock_starter::http`).
///
/// # Examples
///
/// ```
/// use axum::response::IntoResponse;
/// use lock_starter::IdempotencyError;
/// use lock_starter::http::IdempotencyRejection;
///
/// let error = IdempotencyError::unavailable("8e03978e", "connection refused");
/// let response = IdempotencyRejection(error).into_response();
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["retry-after"], "2");
/// ```
#[derive(Debug)]
pub struct IdempotencyRejection(pub IdempotencyError);

impl From<IdempotencyError> for IdempotencyRejection {
    fn from(error: IdempotencyError) -> Self {
        IdempotencyRejection(error)
    }
}

impl IntoResponse for IdempotencyRejection {
    fn into_response(self) -> Response {
        let error = &self.0;
        let (status, code) = (error.http_status(), error.code());
        let message = "idempotency error answered with a public problem body";
        match error {
            IdempotencyError::InProgress { .. } | IdempotencyError::KeyReused { .. } => {
                tracing::debug!(status, code, %error, "{message}");
            }
            _ => tracing::warn!(status, code, %error, "{message}"),
        }
        ProblemDetails::idempotency(error).into_response()
    }
}

/// A tower layer making the handlers below it idempotent by their `Idempotency-Key` header (see
/// the [module](self) for the semantics). Requests without the header, and methods other than
/// `POST` and `PATCH`, pass through untouched.
///
/// # Examples
///
/// ```
/// use axum::{Router, http::StatusCode, routing::post};
/// use lock_starter::Idempotency;
/// use lock_starter::http::IdempotencyLayer;
///
/// async fn create_ticket() -> (StatusCode, &'static str) {
///     (StatusCode::CREATED, r#"{"ticket":"TT-1001"}"#)
/// }
///
/// // `starter.idempotency().clone()` in a service; in memory here.
/// let app: Router = Router::new()
///     .route("/tickets", post(create_ticket))
///     .layer(IdempotencyLayer::new(Idempotency::in_memory()));
/// # let _ = app;
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyLayer {
    idempotency: Idempotency,
    options: IdempotencyOptions,
    max_body_bytes: usize,
    require_key: bool,
}

impl IdempotencyLayer {
    /// The layer on `idempotency` (`LockStarter::idempotency`): a concurrent retry gets 409 at
    /// once, results are kept for the configured result TTL, request bodies up to 1 MiB, the
    /// header optional.
    pub fn new(idempotency: Idempotency) -> Self {
        IdempotencyLayer {
            idempotency,
            options: IdempotencyOptions::new().wait_time(Duration::ZERO),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            require_key: false,
        }
    }

    /// Lets a concurrent retry wait up to `wait` for the first request and get its response
    /// instead of a 409 (0 to 1 h).
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.options = self.options.wait_time(wait);
        self
    }

    /// How long a response is replayed (1 s to 7 days); default: the configured
    /// `idempotency.result-ttl`.
    pub fn result_ttl(mut self, ttl: Duration) -> Self {
        self.options = self.options.result_ttl(ttl);
        self
    }

    /// Answers a `POST`/`PATCH` without the header with 400 instead of passing it through.
    pub fn require_key(mut self) -> Self {
        self.require_key = true;
        self
    }

    /// The largest request body read (larger: 413 and the handler does not run).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }
}

impl<S> tower::Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`IdempotencyLayer`] wraps a handler in.
#[derive(Debug, Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    layer: IdempotencyLayer,
}

impl<S> tower::Service<Request<Body>> for IdempotencyService<S>
where
    S: tower::Service<Request<Body>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let layer = self.layer.clone();
        Box::pin(async move { Ok(layer.handle(request, inner).await) })
    }
}

/// Why the handler's response is not stored.
enum NotReplayable {
    Idempotency(IdempotencyError),
    /// A 5xx: returned, not stored, so that the retry runs the handler again.
    ServerError(Response),
}

impl From<IdempotencyError> for NotReplayable {
    fn from(error: IdempotencyError) -> Self {
        NotReplayable::Idempotency(error)
    }
}

impl IdempotencyLayer {
    async fn handle<S>(&self, request: Request<Body>, inner: S) -> Response
    where
        S: tower::Service<Request<Body>, Response = Response, Error = Infallible>,
    {
        use tower::ServiceExt;
        if !matches!(*request.method(), Method::POST | Method::PATCH) {
            return inner.oneshot(request).await.unwrap_or_else(|e| match e {});
        }
        let Some(header) = request.headers().get(IDEMPOTENCY_KEY_HEADER) else {
            if self.require_key {
                return bad_request("this endpoint requires an Idempotency-Key header");
            }
            return inner.oneshot(request).await.unwrap_or_else(|e| match e {});
        };
        let Ok(client_key) = header.to_str().map(str::to_owned) else {
            return bad_request("the Idempotency-Key header is not visible ASCII");
        };
        if let Err(error) = crate::backend::validate_key(&client_key) {
            let problem = match error {
                crate::LockError::InvalidKey { problem, .. } => problem,
                _ => "it is not accepted",
            };
            return bad_request(&format!(
                "the Idempotency-Key header is not accepted: {problem}; a key is 1 to 512 bytes"
            ));
        }
        let (parts, body) = request.into_parts();
        let Ok(body) = axum::body::to_bytes(body, self.max_body_bytes).await else {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "IDEMPOTENCY_REQUEST_TOO_LARGE",
                "Request body too large",
                format!(
                    "an idempotent request body is at most {} bytes",
                    self.max_body_bytes
                ),
            );
        };
        let mut hash = Sha256::new();
        for part in [parts.method.as_str(), &parts.uri.to_string()] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        if let Some(content_type) = parts.headers.get(header::CONTENT_TYPE) {
            hash.update(content_type.as_bytes());
        }
        hash.update([0]);
        hash.update(&body);
        let fingerprint: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let key = record_key(&parts.method, parts.uri.path(), &client_key);
        let options = self.options.clone().fingerprint(fingerprint);
        let executed = self
            .idempotency
            .execute(&key, &options, || async move {
                let request = Request::from_parts(parts, Body::from(body));
                let response = inner.oneshot(request).await.unwrap_or_else(|e| match e {});
                if response.status().is_server_error() {
                    return Err(NotReplayable::ServerError(response));
                }
                StoredResponse::read(response).await
            })
            .await;
        match executed {
            Ok(Idempotent::Executed(stored) | Idempotent::Unstored(stored, _)) => {
                stored.into_live_response()
            }
            Ok(Idempotent::Replayed(stored)) => stored.into_response(true),
            Err(NotReplayable::ServerError(response)) => response,
            Err(NotReplayable::Idempotency(error)) => IdempotencyRejection(error).into_response(),
        }
    }
}

/// A problem body of the layer's own (the request never reached the idempotency store).
fn problem(status: StatusCode, code: &str, title: &str, detail: String) -> Response {
    let body = serde_json::json!({
        "type": format!("https://platform.telco/problems/{}", code.to_ascii_lowercase().replace('_', "-")),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
        "code": code,
        "reason": code.trim_start_matches("IDEMPOTENCY_").to_ascii_lowercase(),
    });
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(super::PROBLEM_JSON),
    );
    response
}

fn bad_request(detail: &str) -> Response {
    problem(
        StatusCode::BAD_REQUEST,
        "IDEMPOTENCY_KEY_INVALID",
        "Bad Idempotency-Key",
        detail.to_owned(),
    )
}

/// The record of `client_key` at `method` `path`: readable (`http POST /tickets <key>`) when it
/// fits the 512-byte key limit, else a hash of the path and key, so a long path never shortens
/// the keys a client may send.
fn record_key(method: &Method, path: &str, client_key: &str) -> String {
    let key = format!("http {method} {path} {client_key}");
    if key.len() <= crate::MAX_KEY_BYTES {
        return key;
    }
    let mut hash = Sha256::new();
    hash.update(path.as_bytes());
    hash.update([0]);
    hash.update(client_key.as_bytes());
    let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("http {method} #{digest}")
}

/// A response as stored for replay, and — for the call that ran the handler — the response
/// itself, returned untouched (never stored).
#[derive(Debug, Serialize, Deserialize)]
struct StoredResponse {
    status: u16,
    /// Values as UTF-8 text; a value that is not (rare, and not allowed by RFC 9110 for new
    /// fields) is not replayed.
    headers: Vec<(String, String)>,
    body: StoredBody,
    #[serde(skip)]
    live: Option<(axum::http::response::Parts, axum::body::Bytes)>,
}

#[derive(Debug, Serialize, Deserialize)]
enum StoredBody {
    /// Most API bodies (JSON): stored as they read.
    Text(String),
    /// Anything else, as base64 (4 bytes of JSON per 3 of body).
    Base64(String),
}

/// Headers that describe one transfer, not the response: recomputed on replay.
const PER_TRANSFER: [HeaderName; 4] = [
    header::CONNECTION,
    header::CONTENT_LENGTH,
    header::DATE,
    header::TRANSFER_ENCODING,
];

impl StoredResponse {
    async fn read(response: Response) -> Result<StoredResponse, NotReplayable> {
        use base64::Engine;
        let (parts, body) = response.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            // The client would get a cut-off body: a server error, not a result to replay.
            return Err(NotReplayable::ServerError(problem(
                StatusCode::BAD_GATEWAY,
                "IDEMPOTENCY_RESPONSE_FAILED",
                "Response failed",
                "the handler's response body failed while it was read".to_owned(),
            )));
        };
        let headers = parts
            .headers
            .iter()
            .filter(|(name, _)| !PER_TRANSFER.contains(name))
            .filter_map(|(name, value)| {
                let text = std::str::from_utf8(value.as_bytes()).ok()?;
                Some((name.to_string(), text.to_owned()))
            })
            .collect();
        let body = match std::str::from_utf8(&bytes) {
            Ok(text) => StoredBody::Text(text.to_owned()),
            Err(_) => StoredBody::Base64(base64::engine::general_purpose::STANDARD.encode(&bytes)),
        };
        Ok(StoredResponse {
            status: parts.status.as_u16(),
            headers,
            body,
            live: Some((parts, bytes)),
        })
    }

    /// The handler's own response (this call ran it).
    fn into_live_response(self) -> Response {
        match self.live {
            Some((parts, bytes)) => Response::from_parts(parts, Body::from(bytes)),
            None => self.into_response(false),
        }
    }

    fn into_response(self, replayed: bool) -> Response {
        use base64::Engine;
        let body = match self.body {
            StoredBody::Text(text) => Body::from(text),
            StoredBody::Base64(encoded) => Body::from(
                base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .unwrap_or_default(),
            ),
        };
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        let headers = response.headers_mut();
        for (name, value) in self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                headers.append(name, value);
            }
        }
        if replayed {
            headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        }
        response
    }
}
