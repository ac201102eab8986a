//! Edges of the `Idempotency-Key` layer, against what README.md and docs/idempotency.md
//! promise: header values and binary bodies kept exactly (first response
//! and replay), keys up to 512 bytes on any path, per-endpoint scoping, non-UTF-8 request
//! bodies, 204s, pass-through methods, a panicking handler.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use lock_starter::http::{IdempotencyLayer, REPLAYED_HEADER};
use lock_starter::idempotency::Idempotency;
use tower::ServiceExt;

fn post_with(path: &str, key: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header("Idempotency-Key", key)
        .body(body.into())
        .unwrap()
}

/// A handler that adds one to `runs` each time it runs and answers `respond()`.
fn counting<R>(
    runs: &Arc<AtomicU32>,
    respond: fn() -> R,
) -> impl FnOnce() -> std::future::Ready<R> + Clone + Send + Sync + 'static
where
    R: IntoResponse + Send + 'static,
{
    let runs = Arc::clone(runs);
    move || {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(respond())
    }
}

/// A handler counting its runs, answering 201 with a header whose value is UTF-8 (obs-text,
/// legal in HTTP: `HeaderValue::from_bytes` accepts it).
fn app_with_utf8_header(runs: Arc<AtomicU32>) -> Router {
    let create = move || {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let mut response = (StatusCode::CREATED, "{}").into_response();
            response.headers_mut().insert(
                "x-city",
                HeaderValue::from_bytes("Zürich".as_bytes()).unwrap(),
            );
            response
        }
    };
    Router::new()
        .route("/tickets", post(create))
        .layer(IdempotencyLayer::unscoped(Idempotency::in_memory()))
}

/// The layer rebuilds even the first response from its stored form, so that form keeps header
/// values that are not visible ASCII. Docs: "first POST/PATCH with a key → the handler's
/// response, stored (status, headers, body)".
#[tokio::test]
async fn the_first_response_keeps_a_non_ascii_header_value() {
    let runs = Arc::new(AtomicU32::new(0));
    let app = app_with_utf8_header(Arc::clone(&runs));
    let first = common::send(&app, post_with("/tickets", "k-1", "x")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        first.headers().get("x-city").map(HeaderValue::as_bytes),
        Some("Zürich".as_bytes()),
        "the handler's header was dropped from the first response"
    );
}

/// The same for the replay ("a retry … → the stored response").
#[tokio::test]
async fn a_replay_keeps_a_non_ascii_header_value() {
    let runs = Arc::new(AtomicU32::new(0));
    let app = app_with_utf8_header(Arc::clone(&runs));
    common::send(&app, post_with("/tickets", "k-1", "x")).await;
    let retry = common::send(&app, post_with("/tickets", "k-1", "x")).await;
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        retry.headers().get("x-city").map(HeaderValue::as_bytes),
        Some("Zürich".as_bytes())
    );
}

/// Keys are scoped per method and path, as docs/idempotency.md's table says: a client key
/// cannot collide across endpoints, and the same key on another path is another request.
#[tokio::test]
async fn the_same_key_on_another_path_is_another_request() {
    let runs = Arc::new(AtomicU32::new(0));
    let handler = counting(&runs, || StatusCode::CREATED);
    let app = Router::new()
        .route("/a", post(handler.clone()))
        .route("/b", post(handler))
        .layer(IdempotencyLayer::unscoped(Idempotency::in_memory()));
    common::send(&app, post_with("/a", "k-1", "x")).await;
    let other_path = common::send(&app, post_with("/b", "k-1", "x")).await;
    assert_eq!(other_path.status(), StatusCode::CREATED);
    assert!(other_path.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// The 512-byte limit applies to the client's key, not to the layer's internal key
/// (`http POST /path <client key>`): a 512-byte key is accepted and replayed, a 513-byte one
/// is refused with 400.
#[tokio::test]
async fn a_500_byte_client_key_is_accepted_on_a_long_path_too() {
    let app = Router::new()
        .route("/tickets", post(|| async { StatusCode::CREATED }))
        .layer(IdempotencyLayer::unscoped(Idempotency::in_memory()));
    let key = "k".repeat(512);
    let response = common::send(&app, post_with("/tickets", &key, "x")).await;
    let status = response.status();
    let text = String::from_utf8_lossy(&common::bytes(response).await).into_owned();
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let retry = common::send(&app, post_with("/tickets", &key, "x")).await;
    assert_eq!(
        retry.headers()[REPLAYED_HEADER],
        "true",
        "the hashed record replays"
    );
    let too_long = common::send(&app, post_with("/tickets", &"k".repeat(513), "x")).await;
    assert_eq!(too_long.status(), StatusCode::BAD_REQUEST);
    let problem = String::from_utf8_lossy(&common::bytes(too_long).await).into_owned();
    assert!(
        problem.contains("IDEMPOTENCY_KEY_INVALID") && problem.contains("longer than 512 bytes"),
        "{problem}"
    );
}

/// A 400 KB binary body, well under the documented 1 MiB `max-result-bytes`, is stored and
/// replayed: the retry does not run the handler again.
#[tokio::test]
async fn a_400kb_binary_response_is_replayed() {
    let runs = Arc::new(AtomicU32::new(0));
    // Not UTF-8: every byte 0xFF.
    let handler = counting(&runs, || (StatusCode::CREATED, vec![0xFF_u8; 400 * 1024]));
    let app = Router::new()
        .route("/files", post(handler))
        .layer(IdempotencyLayer::unscoped(Idempotency::in_memory()));
    common::send(&app, post_with("/files", "k-1", "x")).await;
    let retry = common::send(&app, post_with("/files", "k-1", "x")).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the retry ran the handler");
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(common::bytes(retry).await.len(), 400 * 1024);
}

/// A non-UTF-8 request body, echoed back; a 204 with no body; both replayed exactly.
#[tokio::test]
async fn adv_non_utf8_body_and_204_replay_exactly() {
    let app = Router::new()
        .route(
            "/echo",
            post(|body: Bytes| async move { (StatusCode::OK, body) }),
        )
        .route("/empty", post(|| async { StatusCode::NO_CONTENT }))
        .layer(IdempotencyLayer::unscoped(Idempotency::in_memory()));
    let raw = vec![0xC3_u8, 0x28, 0x00, 0xFF];
    for _ in 0..2 {
        let echoed = common::send(&app, post_with("/echo", "k-1", raw.clone())).await;
        assert_eq!(echoed.status(), StatusCode::OK);
        assert_eq!(common::bytes(echoed).await.as_ref(), raw.as_slice());
    }
    for n in 0..2 {
        let empty = common::send(&app, post_with("/empty", "k-2", "")).await;
        assert_eq!(empty.status(), StatusCode::NO_CONTENT);
        assert_eq!(empty.headers().get(REPLAYED_HEADER).is_some(), n == 1);
        assert!(common::bytes(empty).await.is_empty());
    }
}

/// PUT and GET with a key pass through (run every time, never marked a replay).
#[tokio::test]
async fn adv_put_and_get_pass_through() {
    let runs = Arc::new(AtomicU32::new(0));
    let handler = counting(&runs, || StatusCode::OK);
    let app = Router::new()
        .route("/t", axum::routing::put(handler.clone()).get(handler))
        .layer(IdempotencyLayer::unscoped(Idempotency::in_memory()).require_key());
    for method in ["PUT", "PUT", "GET", "GET"] {
        let request = Request::builder()
            .method(method)
            .uri("/t")
            .header("Idempotency-Key", "k-1")
            .body(Body::empty())
            .unwrap();
        let response = common::send(&app, request).await;
        assert!(response.headers().get(REPLAYED_HEADER).is_none());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

/// A handler that panics fails its record before the panic goes on (duplicates waiting then
/// get 503, as the conformance suite checks): a retry waiting up to 5 s runs the handler
/// instead of getting 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv_a_panicking_handler_frees_its_key() {
    let runs = Arc::new(AtomicU32::new(0));
    let handler = {
        let runs = Arc::clone(&runs);
        move || {
            let runs = Arc::clone(&runs);
            async move {
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("adversary: the first run panics");
                }
                StatusCode::CREATED
            }
        }
    };
    let app = Router::new().route("/t", post(handler)).layer(
        IdempotencyLayer::unscoped(Idempotency::in_memory())
            .wait_time(Duration::from_secs(5))
            .unwrap(),
    );
    let panicked = tokio::spawn(app.clone().oneshot(post_with("/t", "k-1", "x"))).await;
    assert!(panicked.is_err());
    let retry = common::send(&app, post_with("/t", "k-1", "x")).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(retry.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
