//! [`IdempotencyLayer`], which makes a handler idempotent by its `Idempotency-Key` header.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::OriginalUri;
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, Method, Request, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::Instrument;

use super::idempotency_key::{client_key, hex, record_key};
use super::problem::{Form, ProblemDetails, log_withheld};
pub use crate::config::keys::{DEFAULT_MAX_BODY_BYTES, MAX_BODY_BYTES};
use crate::idempotency::{Idempotency, IdempotencyError, IdempotencyOptions, Idempotent};

/// The request header carrying the key: `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// The response header marking a replay: `Idempotent-Replayed: true`.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The caller a request comes from, as the layer's scope: the authenticated principal, or
/// `None` for a request with none.
type Scope = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// A tower layer making the handlers below it idempotent by their `Idempotency-Key` header, as
/// the IETF draft-ietf-httpapi-idempotency-key-header describes.
///
/// # Contract
/// - The first `POST` or `PATCH` with a key runs the handler. Its status, headers and body are
///   stored for the result TTL and replayed to every retry with the same key from the same
///   caller, marked `Idempotent-Replayed: true`.
/// - Records are per method and path and, with [`IdempotencyLayer::scoped`], per caller.
/// - A retry while the first still runs gets 409 with `Retry-After: 1`, or with a wait time
///   waits for the first one's response.
/// - The same key with another query, content type or body gets 422.
/// - An unavailable backend gets 503 with `Retry-After`, and the handler does not run.
/// - A 5xx, 408, 425 or 429 response is not stored: it tells the client to retry, and the
///   retry runs the handler again.
/// - `Set-Cookie` and other credential-bearing headers are never stored.
/// - Requests without the header and other methods pass through.
/// - Responses are buffered whole. The call that ran the handler gets its response untouched.
/// - The handler runs on a task of its own, to its end, even when the client goes away
///   meanwhile: the retry gets the stored response, not a second run.
///
/// [`LockStarter::idempotency_layer`](crate::LockStarter::idempotency_layer) builds it with the
/// configured values. The key rules are in `docs/idempotency.md`.
///
/// # Examples
///
/// ```
/// use axum::{Router, http::StatusCode, routing::post};
/// use lock_starter::idempotency::Idempotency;
/// use lock_starter::http::IdempotencyLayer;
///
/// async fn create_ticket() -> (StatusCode, &'static str) {
///     (StatusCode::CREATED, r#"{"ticket":"TT-1001"}"#)
/// }
///
/// /// The principal an authentication layer in front stored in the request.
/// #[derive(Clone)]
/// struct Principal(String);
///
/// // `starter.idempotency_layer(..)` in a service; in memory here.
/// let layer = IdempotencyLayer::scoped(Idempotency::in_memory(), |request| {
///     request.extensions.get::<Principal>().map(|p| p.0.clone())
/// });
/// let app: Router = Router::new().route("/tickets", post(create_ticket)).layer(layer);
/// # let _ = app;
/// ```
#[derive(Clone)]
pub struct IdempotencyLayer {
    idempotency: Idempotency,
    /// `None`: unscoped.
    scope: Option<Scope>,
    options: IdempotencyOptions,
    max_body_bytes: usize,
    require_key: bool,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("idempotency", &self.idempotency)
            .field("scoped", &self.scope.is_some())
            .field("options", &self.options)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("require_key", &self.require_key)
            .finish()
    }
}

impl IdempotencyLayer {
    /// The layer on `idempotency`, with records per caller: `scope` names the caller of a
    /// request (the authenticated principal, from its extensions or headers), and a key is
    /// replayed only to the caller that sent it first. A request whose `scope` is `None` runs
    /// without deduplication, as one without the header. Defaults: a concurrent retry gets 409
    /// at once, results are kept for the configured result TTL, request bodies up to 1 MiB,
    /// the header optional.
    pub fn scoped<F>(idempotency: Idempotency, scope: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self::with_scope(idempotency, Some(Arc::new(scope)))
    }

    /// The layer on `idempotency` with records per endpoint only: any caller sending a key gets
    /// the response stored under it, another caller's included. Only for endpoints whose keys
    /// cannot be guessed (random, 128 bits or more) or whose callers trust each other; prefer
    /// [`scoped`](Self::scoped). The defaults are those of `scoped`.
    pub fn unscoped(idempotency: Idempotency) -> Self {
        Self::with_scope(idempotency, None)
    }

    fn with_scope(idempotency: Idempotency, scope: Option<Scope>) -> Self {
        IdempotencyLayer {
            idempotency,
            scope,
            options: IdempotencyOptions::new()
                .wait_time(Duration::ZERO)
                .expect("0 is a wait time"),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            require_key: false,
        }
    }

    /// With the `telco.platform.lock.idempotency.http-*` values, checked when they were loaded.
    pub(crate) fn configured(mut self, settings: &crate::config::LockSettings) -> Self {
        self.options = (self.options)
            .wait_time(settings.idempotency.http_wait_time)
            .expect("idempotency.http-wait-time was checked at load");
        self.max_body_bytes = settings.idempotency.http_max_body_bytes as usize;
        self
    }

    /// Lets a concurrent retry wait up to `wait` for the first request and get its response
    /// instead of a 409. 0 to 1 h; default 0.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `wait_time` for a value out of range.
    pub fn wait_time(mut self, wait: Duration) -> Result<Self, IdempotencyError> {
        self.options = self.options.wait_time(wait)?;
        Ok(self)
    }

    /// How long a response is replayed. 1 s to 7 days; default: the `Idempotency`'s result TTL
    /// (`telco.platform.lock.idempotency.result-ttl`).
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `result_ttl` for a value out of range.
    pub fn result_ttl(mut self, ttl: Duration) -> Result<Self, IdempotencyError> {
        self.options = self.options.result_ttl(ttl)?;
        Ok(self)
    }

    /// The largest request body read; a larger one gets 413 and the handler does not run.
    /// 1 byte to 64 MiB; default 1 MiB.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidArgument`] naming `max_body_bytes` for a value out of range.
    pub fn max_body_bytes(mut self, bytes: usize) -> Result<Self, IdempotencyError> {
        if !(1..=MAX_BODY_BYTES).contains(&bytes) {
            return Err(IdempotencyError::InvalidArgument {
                name: "max_body_bytes",
                value: bytes.to_string(),
                problem: format!("accepted: 1 to {MAX_BODY_BYTES} bytes"),
            });
        }
        self.max_body_bytes = bytes;
        Ok(self)
    }

    /// Answers a `POST`/`PATCH` without the header with 400 instead of passing it through.
    pub fn require_key(mut self) -> Self {
        self.require_key = true;
        self
    }
}

super::layer_service!(IdempotencyLayer, IdempotencyService);

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
        let inner = self.take_ready();
        let layer = self.layer.clone();
        Box::pin(async move { Ok(layer.handle(request, inner).await) })
    }
}

/// Why the handler's response is not stored.
enum NotReplayable {
    Idempotency(IdempotencyError),
    /// An answer asking for a retry ([`retry_later`]): returned, not stored, so that the retry
    /// runs the handler again.
    RetryLater(Response),
}

impl From<IdempotencyError> for NotReplayable {
    fn from(error: IdempotencyError) -> Self {
        NotReplayable::Idempotency(error)
    }
}

impl IdempotencyLayer {
    async fn handle<S>(&self, request: Request<Body>, inner: S) -> Response
    where
        S: tower::Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
        S::Future: Send + 'static,
    {
        use tower::ServiceExt;
        if !matches!(*request.method(), Method::POST | Method::PATCH) {
            return inner.oneshot(request).await.unwrap_or_else(|e| match e {});
        }
        if !request.headers().contains_key(IDEMPOTENCY_KEY_HEADER) {
            if self.require_key {
                return bad_key(
                    "required",
                    "this endpoint requires an Idempotency-Key header".to_owned(),
                );
            }
            return inner.oneshot(request).await.unwrap_or_else(|e| match e {});
        }
        let client_key = match client_key(request.headers().get_all(IDEMPOTENCY_KEY_HEADER)) {
            Ok(key) => key,
            Err(problem) => {
                return bad_key(
                    problem.rule,
                    format!(
                        "the Idempotency-Key header is not accepted: {}. {KEY_RULES}",
                        problem.problem
                    ),
                );
            }
        };
        let (parts, body) = request.into_parts();
        let scope = match &self.scope {
            None => None,
            Some(scope) => match scope(&parts) {
                Some(scope) => Some(scope),
                None => {
                    tracing::debug!(
                        method = %parts.method,
                        path = sent_uri(&parts).path(),
                        idempotency_key = client_key,
                        "no caller scope: the request runs without deduplication"
                    );
                    let request = Request::from_parts(parts, body);
                    return inner.oneshot(request).await.unwrap_or_else(|e| match e {});
                }
            },
        };
        let Ok(body) = axum::body::to_bytes(body, self.max_body_bytes).await else {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "IDEMPOTENCY_REQUEST_TOO_LARGE",
                format!(
                    "an idempotent request body is at most {} bytes",
                    self.max_body_bytes
                ),
                None,
            );
        };
        let mut hash = Sha256::new();
        // The path and query: an absolute-form target (`POST http://host/path`) is the same
        // request as its origin form.
        let target = sent_uri(&parts)
            .path_and_query()
            .map_or("/", |target| target.as_str());
        for part in [parts.method.as_str(), target] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        if let Some(content_type) = parts.headers.get(header::CONTENT_TYPE) {
            hash.update(content_type.as_bytes());
        }
        hash.update([0]);
        hash.update(&body);
        let fingerprint = hex(&hash.finalize());
        let key = record_key(
            &parts.method,
            sent_uri(&parts).path(),
            scope.as_deref(),
            &client_key,
        );
        let options = match self.options.clone().fingerprint(fingerprint) {
            Ok(options) => options,
            Err(error) => return reject(error, &client_key),
        };
        // The run is a task of its own: a client that goes away (its request future dropped)
        // would otherwise abandon the record of a handler that may have acted, and its retry
        // would run the handler again.
        let idempotency = self.idempotency.clone();
        let run = tokio::spawn(
            async move {
                idempotency
                    .execute(&key, &options, || async move {
                        let request = Request::from_parts(parts, Body::from(body));
                        let response = inner.oneshot(request).await.unwrap_or_else(|e| match e {});
                        if retry_later(response.status()) {
                            return Err(NotReplayable::RetryLater(response));
                        }
                        StoredResponse::read(response).await
                    })
                    .await
            }
            .in_current_span(),
        );
        let executed = match run.await {
            Ok(executed) => executed,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // Cancelled: the runtime is shutting down, and this answer is unlikely to be sent.
            Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
        };
        match executed {
            Ok(Idempotent::Executed(stored) | Idempotent::Unstored(stored, _)) => {
                stored.into_live_response()
            }
            Ok(Idempotent::Replayed(stored)) => stored.into_response(true),
            Err(NotReplayable::RetryLater(response)) => response,
            Err(NotReplayable::Idempotency(error)) => reject(error, &client_key),
        }
    }
}

/// The request's target as the client sent it: below `Router::nest` the request's own URI has
/// lost the prefix, and two endpoints would share records.
fn sent_uri(parts: &Parts) -> &Uri {
    parts
        .extensions
        .get::<OriginalUri>()
        .map_or(&parts.uri, |original| &original.0)
}

/// Whether `status` asks the client to retry (a 5xx, 408 Request Timeout, 425 Too Early or
/// 429 Too Many Requests from a rate limit beneath the layer): replaying it would answer every
/// retry so.
fn retry_later(status: StatusCode) -> bool {
    status.is_server_error()
        || matches!(
            status,
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_EARLY | StatusCode::TOO_MANY_REQUESTS
        )
}

/// The answer to `error`, showing the client's key where the error holds the record key.
fn reject(error: IdempotencyError, client_key: &str) -> Response {
    let (code, status) = (error.code(), error.http_status());
    let mut details = error.details();
    match with_client_key(error, client_key) {
        Ok(error) => {
            if details.contains_key("idempotencyKey") {
                details.insert("idempotencyKey", client_key.to_owned());
            }
            log_withheld(code, status, &details, &error);
        }
        Err(_) => {
            // A kind of error whose key cannot be replaced: its message is not logged.
            details.insert("idempotencyKey", client_key.to_owned());
            log_withheld(code, status, &details, code);
        }
    }
    ProblemDetails::of(code, status, details, Form::Public).into_response()
}

/// `error` with `client_key` in place of the record key, or the error as it was when it is of a
/// kind whose key this layer does not know how to replace.
fn with_client_key(
    mut error: IdempotencyError,
    client_key: &str,
) -> Result<IdempotencyError, IdempotencyError> {
    match &mut error {
        IdempotencyError::Unavailable { key, .. }
        | IdempotencyError::InProgress { key, .. }
        | IdempotencyError::OwnerFailed { key, .. }
        | IdempotencyError::KeyReused { key }
        | IdempotencyError::ResultUnreadable { key, .. }
        | IdempotencyError::ResultNotStored { key, .. } => *key = client_key.to_owned(),
        IdempotencyError::InvalidArgument {
            name: "idempotency key",
            value,
            ..
        } => *value = client_key.to_owned(),
        IdempotencyError::InvalidArgument { .. } => {}
        _ => return Err(error),
    }
    Ok(error)
}

/// What an accepted key looks like, for 400 answers.
const KEY_RULES: &str = "Send the header once, with one key of 1 to 512 visible ASCII characters, quoted (\"…\", escaping \\\" and \\\\) or bare, without parameters";

/// A problem of the layer's own, which never reached the idempotency store. Its `detail` is
/// public.
fn problem(status: StatusCode, code: &str, detail: String, rule: Option<&str>) -> Response {
    let mut details = std::collections::BTreeMap::new();
    details.insert("message", detail);
    let reason = code.trim_start_matches("IDEMPOTENCY_").to_ascii_lowercase();
    details.insert("reason", reason);
    if let Some(rule) = rule {
        details.insert("rule", rule.to_owned());
    }
    ProblemDetails::of(code, status.as_u16(), details, Form::Detailed).into_response()
}

/// 400 for a missing or refused key, naming the `rule` it breaks.
fn bad_key(rule: &str, detail: String) -> Response {
    problem(
        StatusCode::BAD_REQUEST,
        "IDEMPOTENCY_KEY_INVALID",
        detail,
        Some(rule),
    )
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

/// Headers that carry credentials or set them in the client: never stored, so never replayed,
/// not even to the caller that got them first. Challenges (`WWW-Authenticate`,
/// `Proxy-Authenticate`) hold no secret and a replayed 401 or 407 needs them: they are kept.
const NEVER_REPLAYED: [HeaderName; 6] = [
    header::SET_COOKIE,
    HeaderName::from_static("set-cookie2"),
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("authentication-info"),
    HeaderName::from_static("proxy-authentication-info"),
];

impl StoredResponse {
    async fn read(response: Response) -> Result<StoredResponse, NotReplayable> {
        use base64::Engine;
        let (parts, body) = response.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            // The client would get a cut-off body: a server error, not a result to replay.
            return Err(NotReplayable::RetryLater(problem(
                StatusCode::BAD_GATEWAY,
                "IDEMPOTENCY_RESPONSE_FAILED",
                "the handler's response body failed while it was read".to_owned(),
                None,
            )));
        };
        let headers = parts
            .headers
            .iter()
            .filter(|(name, _)| !PER_TRANSFER.contains(name) && !NEVER_REPLAYED.contains(name))
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
