//! The `Idempotency-Key` layer (feature `http`): a retried create runs once and is marked as a
//! replay, a concurrent retry gets 409, a reused key with another body 422, a handler's 5xx or
//! 429 is not stored, Redis down is 503 — in memory, and across two "pods" on one real redis-server.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::post;
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::http::{IdempotencyLayer, PROBLEM_JSON, REPLAYED_HEADER};
use lock_starter::prelude::*;
use lock_testkit::{ClosedPort, RedisServer};
use tokio::sync::Notify;
use tower::ServiceExt;

/// Holds a handler: it says it `entered`, then waits to be `released`.
#[derive(Clone, Default)]
pub(crate) struct Gate {
    pub(crate) entered: Arc<Notify>,
    pub(crate) released: Arc<Notify>,
}

/// One run of a handler: waits at `gate` first when one is given, then counts itself in `runs`;
/// returns its number, from 1.
pub(crate) async fn run(runs: &AtomicU32, gate: Option<Gate>) -> u32 {
    if let Some(gate) = gate {
        gate.entered.notify_one();
        gate.released.notified().await;
    }
    runs.fetch_add(1, Ordering::SeqCst) + 1
}

/// `POST /tickets` creating ticket `TT-<n>`; waits at `gate` first when one is given, and
/// answers 500 for a body of `fail`, 429 for `busy`.
fn app(idempotency: Idempotency, runs: Arc<AtomicU32>, gate: Option<Gate>) -> Router {
    let create = move |body: String| {
        let (runs, gate) = (Arc::clone(&runs), gate.clone());
        async move {
            let n = run(&runs, gate).await;
            if body == "fail" || body == "busy" {
                let status = match body.as_str() {
                    "fail" => StatusCode::INTERNAL_SERVER_ERROR,
                    _ => StatusCode::TOO_MANY_REQUESTS,
                };
                return (status, [(header::LOCATION, String::new())], String::new());
            }
            (
                StatusCode::CREATED,
                [(header::LOCATION, format!("/tickets/TT-{n}"))],
                format!(r#"{{"ticket":"TT-{n}"}}"#),
            )
        }
    };
    Router::new()
        .route("/tickets", post(create))
        .layer(IdempotencyLayer::unscoped(idempotency))
}

fn create(key: Option<&str>, body: &str) -> Request<Body> {
    let mut request = Request::post("/tickets").header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

#[tokio::test]
async fn a_retried_create_runs_once_and_the_retry_is_marked_as_a_replay() {
    let runs = Arc::new(AtomicU32::new(0));
    let app = app(Idempotency::in_memory(), Arc::clone(&runs), None);
    let first = common::send(&app, create(Some("key-1"), r#"{"title":"x"}"#)).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get(REPLAYED_HEADER).is_none());
    let retry = common::send(&app, create(Some("key-1"), r#"{"title":"x"}"#)).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(retry.headers()[header::LOCATION], "/tickets/TT-1");
    assert_eq!(common::text(retry).await, r#"{"ticket":"TT-1"}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Another key, or no key at all, is another request.
    common::send(&app, create(Some("key-2"), r#"{"title":"x"}"#)).await;
    common::send(&app, create(None, r#"{"title":"x"}"#)).await;
    common::send(&app, create(None, r#"{"title":"x"}"#)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_422_and_runs_nothing() {
    let runs = Arc::new(AtomicU32::new(0));
    let app = app(Idempotency::in_memory(), Arc::clone(&runs), None);
    common::send(&app, create(Some("key-1"), r#"{"title":"x"}"#)).await;
    let reused = common::send(&app, create(Some("key-1"), r#"{"title":"y"}"#)).await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reused.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    let problem = common::json(reused).await;
    assert_eq!(problem["code"], "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The in-memory app with a gated handler counting in `runs`, and its first `POST` with
/// `key-1`, started and inside the handler.
async fn first_inside_its_handler(
    runs: &Arc<AtomicU32>,
) -> (
    Router,
    Gate,
    tokio::task::JoinHandle<Result<axum::response::Response, std::convert::Infallible>>,
) {
    let gate = Gate::default();
    let app = app(
        Idempotency::in_memory(),
        Arc::clone(runs),
        Some(gate.clone()),
    );
    let first = tokio::spawn(app.clone().oneshot(create(Some("key-1"), "{}")));
    gate.entered.notified().await;
    (app, gate, first)
}

#[tokio::test]
async fn a_concurrent_retry_is_409_and_the_first_still_completes() {
    let runs = Arc::new(AtomicU32::new(0));
    let (app, gate, first) = first_inside_its_handler(&runs).await;
    let retry = common::send(&app, create(Some("key-1"), "{}")).await;
    assert_eq!(retry.status(), StatusCode::CONFLICT);
    let problem = common::json(retry).await;
    assert_eq!(problem["code"], "IDEMPOTENCY_IN_PROGRESS");
    assert!(
        !problem.to_string().contains("in-memory/"),
        "no holder in a public body: {problem}"
    );
    gate.released.notify_one();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// hyper drops a request's future when its client goes away: the handler runs on, and the
/// retry gets its response instead of running it a second time.
#[tokio::test]
async fn a_client_gone_mid_run_does_not_stop_the_run_and_its_retry_replays() {
    let runs = Arc::new(AtomicU32::new(0));
    let (app, gate, first) = first_inside_its_handler(&runs).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    gate.released.notify_one();
    let finished = lock_testkit::eventually(Duration::from_secs(10), || async {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(finished, "the handler stopped when its client went away");
    let retry = common::send(&app, create(Some("key-1"), "{}")).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(common::text(retry).await, r#"{"ticket":"TT-1"}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A request in absolute form (`POST http://host/path`, as some proxies send it) is the same
/// request as in origin form.
#[tokio::test]
async fn an_absolute_form_retry_replays_the_origin_form_request() {
    let runs = Arc::new(AtomicU32::new(0));
    let app = app(Idempotency::in_memory(), Arc::clone(&runs), None);
    common::send(&app, create(Some("key-1"), "{}")).await;
    let mut absolute = create(Some("key-1"), "{}");
    *absolute.uri_mut() = "http://pod-1.internal:8080/tickets".parse().unwrap();
    let retry = common::send(&app, absolute).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Below `Router::nest`, records are keyed on the path the client sent: two customers' orders
/// with one key are two records, not a replay of the other's.
#[tokio::test]
async fn a_nested_router_keeps_each_full_path_its_own_records() {
    let runs = Arc::new(AtomicU32::new(0));
    let tickets = app(Idempotency::in_memory(), Arc::clone(&runs), None);
    let app = Router::new().nest("/customers/{id}", tickets);
    let order = |customer: &str| {
        let mut request = create(Some("key-1"), "{}");
        *request.uri_mut() = format!("/customers/{customer}/tickets").parse().unwrap();
        request
    };
    let alice = common::send(&app, order("alice")).await;
    let bob = common::send(&app, order("bob")).await;
    assert_eq!(alice.status(), StatusCode::CREATED);
    assert_eq!(bob.status(), StatusCode::CREATED);
    assert!(
        bob.headers().get(REPLAYED_HEADER).is_none(),
        "bob got alice's response"
    );
    assert_eq!(common::text(bob).await, r#"{"ticket":"TT-2"}"#);
    let retry = common::send(&app, order("alice")).await;
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_handlers_5xx_or_429_is_not_stored_and_the_retry_runs_again() {
    let runs = Arc::new(AtomicU32::new(0));
    let app = app(Idempotency::in_memory(), Arc::clone(&runs), None);
    for (key, body, status) in [
        ("key-1", "fail", StatusCode::INTERNAL_SERVER_ERROR),
        ("key-2", "busy", StatusCode::TOO_MANY_REQUESTS),
    ] {
        for _ in 0..2 {
            let answered = common::send(&app, create(Some(key), body)).await;
            assert_eq!(answered.status(), status);
            assert!(answered.headers().get(REPLAYED_HEADER).is_none());
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn bad_or_missing_keys_and_big_bodies_are_client_errors() {
    let runs = Arc::new(AtomicU32::new(0));
    let required = Router::new()
        .route("/tickets", post(|| async { "made" }))
        .layer(
            IdempotencyLayer::unscoped(Idempotency::in_memory())
                .require_key()
                .max_body_bytes(8)
                .unwrap(),
        );
    let missing = common::send(&required, create(None, "{}")).await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    let too_long = "k".repeat(600);
    let long = common::send(&required, create(Some(&too_long), "{}")).await;
    assert_eq!(long.status(), StatusCode::BAD_REQUEST);
    assert!(common::text(long).await.contains("longer than 512 bytes"));
    let big = common::send(&required, create(Some("k"), "0123456789")).await;
    assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

fn starter_config(address: &str) -> Figment {
    Figment::from(Toml::string(&format!(
        "[telco.platform.lock.redis]\naddress = \"{address}\"\ncommand-timeout = \"500ms\"\n"
    )))
}

/// The payment-service case: two pods behind a load balancer, the client's retry lands on the
/// other pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_another_pod_replays_the_first_pods_response() {
    let redis = RedisServer::start().await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut pods = Vec::new();
    for _ in 0..2 {
        let starter = LockStarter::builder()
            .figment(starter_config(&redis.url()))
            .build()
            .await
            .unwrap();
        pods.push((
            app(starter.idempotency().clone(), Arc::clone(&runs), None),
            starter,
        ));
    }
    let first = common::send(&pods[0].0, create(Some("pay-77"), r#"{"amount":5}"#)).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let retry = common::send(&pods[1].0, create(Some("pay-77"), r#"{"amount":5}"#)).await;
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(common::text(retry).await, r#"{"ticket":"TT-1"}"#);
    let reused = common::send(&pods[1].0, create(Some("pay-77"), r#"{"amount":500}"#)).await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_handler_does_not_run_and_the_answer_is_503() {
    let closed = ClosedPort::new().unwrap();
    let address = format!("redis://127.0.0.1:{}", closed.port());
    let starter = LockStarter::builder()
        .figment(starter_config(&address))
        .build()
        .await
        .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let app = app(starter.idempotency().clone(), Arc::clone(&runs), None);
    let response = common::send(&app, create(Some("pay-78"), "{}")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    let problem = common::text(response).await;
    assert!(
        problem.contains("IDEMPOTENCY_BACKEND_UNAVAILABLE"),
        "{problem}"
    );
    assert!(
        !problem.contains("127.0.0.1"),
        "no backend detail in a public body: {problem}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// Each refused header form is a 400 whose problem names the rule it breaks; the handler never
/// runs. A quoted key and its bare form are one record.
#[tokio::test]
async fn each_refused_key_form_is_a_400_naming_its_rule() {
    let runs = Arc::new(AtomicU32::new(0));
    let app = app(Idempotency::in_memory(), Arc::clone(&runs), None);
    let cases: [(&[&str], &str); 11] = [
        (&["\"abc"], "quoting"),
        (&["ab\"c"], "quoting"),
        (&[r#""a\b""#], "escape"),
        (&["\"a\";p=1"], "parameters"),
        (&["\"a\", \"b\""], "list"),
        (&["a", "b"], "repeated"),
        (&[""], "empty"),
        (&["\"\""], "empty"),
        (&["a b"], "visible-ascii"),
        (&["\"a\tb\""], "visible-ascii"),
        (&[&"k".repeat(513)], "length"),
    ];
    for (lines, rule) in cases {
        let mut request =
            Request::post("/tickets").header(header::CONTENT_TYPE, "application/json");
        for line in lines {
            request = request.header("Idempotency-Key", *line);
        }
        let response = common::send(&app, request.body(Body::from("{}")).unwrap()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{lines:?}");
        let problem = common::json(response).await;
        assert_eq!(problem["code"], "IDEMPOTENCY_KEY_INVALID", "{lines:?}");
        assert_eq!(problem["rule"], rule, "{lines:?}: {problem}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let quoted = common::send(&app, create(Some(r#""k\"1""#), "{}")).await;
    assert_eq!(quoted.status(), StatusCode::CREATED);
    let bare = common::send(&app, create(Some(r#"k"1"#), "{}")).await;
    assert_eq!(
        bare.status(),
        StatusCode::BAD_REQUEST,
        "a bare key holds no quote"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Every range-checked setter fails when called, naming the setting, the value and the range.
#[test]
fn the_layers_setters_refuse_values_out_of_range() {
    let layer = || IdempotencyLayer::unscoped(Idempotency::in_memory());
    let cases = [
        (
            layer().wait_time(Duration::from_secs(7200)).unwrap_err(),
            "invalid wait_time \"2 h\": accepted: 0 to 1 h",
        ),
        (
            layer().result_ttl(Duration::from_millis(10)).unwrap_err(),
            "invalid result_ttl \"10 ms\": accepted: 1 s to 168 h",
        ),
        (
            layer().max_body_bytes(0).unwrap_err(),
            "invalid max_body_bytes \"0\": accepted: 1 to 67108864 bytes",
        ),
        (
            layer().max_body_bytes(65 << 20).unwrap_err(),
            "invalid max_body_bytes \"68157440\": accepted: 1 to 67108864 bytes",
        ),
    ];
    for (error, expected) in cases {
        assert_eq!(error.to_string(), expected);
        assert_eq!(error.code(), "IDEMPOTENCY_INVALID_ARGUMENT");
    }
    assert!(layer().wait_time(Duration::from_secs(3600)).is_ok());
    assert!(layer().max_body_bytes(1).is_ok());
}
