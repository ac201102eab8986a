//! The `Idempotency-Key` layer from the starter, on a real redis-server: records per caller,
//! credentials never replayed, the configured wait, and the client's key in every answer.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::http::REPLAYED_HEADER;
use lock_starter::prelude::*;
use lock_testkit::RedisServer;
use tower::ServiceExt;

/// How long anything awaited here may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// The caller: the bearer token (a service takes its verified principal).
fn caller(request: &Parts) -> Option<String> {
    let value = request.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

/// A redis-server and a starter on it with `idempotency` in its `idempotency` section.
async fn started(idempotency: &str) -> (RedisServer, LockStarter) {
    let redis = RedisServer::start().await.unwrap();
    let starter = starter_with(&redis, "", idempotency).await;
    (redis, starter)
}

/// A starter on `redis` with more keys in its `redis` and `idempotency` sections.
async fn starter_with(redis: &RedisServer, connection: &str, idempotency: &str) -> LockStarter {
    let config = format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n{connection}\n[telco.platform.lock.idempotency]\n{idempotency}\n",
        redis.url()
    );
    LockStarter::builder()
        .figment(Figment::from(Toml::string(&config)))
        .build()
        .await
        .unwrap()
}

use super::http::Gate;

/// `POST /orders` answering 201 with order `O-<n>`, a session cookie and
/// `Authentication-Info`; waits at `gate` first when one is given.
fn orders(
    layer: lock_starter::http::IdempotencyLayer,
    runs: Arc<AtomicU32>,
    gate: Option<Gate>,
) -> Router {
    let create = move || {
        let (runs, gate) = (Arc::clone(&runs), gate.clone());
        async move {
            let n = super::http::run(&runs, gate).await;
            (
                StatusCode::CREATED,
                [
                    (header::LOCATION, format!("/orders/O-{n}")),
                    (header::SET_COOKIE, format!("session=s3cret-{n}; HttpOnly")),
                    (
                        header::HeaderName::from_static("authentication-info"),
                        format!("nextnonce=\"n-{n}\""),
                    ),
                ],
                format!(r#"{{"order":"O-{n}"}}"#),
            )
        }
    };
    Router::new().route("/orders", post(create)).layer(layer)
}

fn order(caller: Option<&str>, key: &str) -> Request<Body> {
    let mut request = Request::post("/orders")
        .header(header::CONTENT_TYPE, "application/json")
        .header("Idempotency-Key", key);
    if let Some(caller) = caller {
        request = request.header(header::AUTHORIZATION, format!("Bearer {caller}"));
    }
    request.body(Body::from(r#"{"sku":"sim-1"}"#)).unwrap()
}

/// `orders` behind the starter's scoped layer, and its count of runs.
fn scoped_orders(starter: &LockStarter) -> (Router, Arc<AtomicU32>) {
    let runs = Arc::new(AtomicU32::new(0));
    let app = orders(starter.idempotency_layer(caller), Arc::clone(&runs), None);
    (app, runs)
}

/// `orders` behind the starter's scoped layer, its handler held at a gate.
fn gated_orders(starter: &LockStarter) -> (Router, Arc<AtomicU32>, Gate) {
    let (runs, gate) = (Arc::new(AtomicU32::new(0)), Gate::default());
    let app = orders(
        starter.idempotency_layer(caller),
        Arc::clone(&runs),
        Some(gate.clone()),
    );
    (app, runs, gate)
}

type Pending = tokio::task::JoinHandle<Result<Response, std::convert::Infallible>>;

/// The answer to a request sent before, within [`DEADLINE`].
async fn answer(pending: Pending) -> Response {
    let answered = tokio::time::timeout(DEADLINE, pending).await;
    answered.expect("answered in time").unwrap().unwrap()
}

/// Sends alice's `k-1` and returns once its handler holds at `gate`.
async fn first_in_handler(app: &Router, gate: &Gate) -> Pending {
    let first = tokio::spawn(app.clone().oneshot(order(Some("alice"), "k-1")));
    tokio::time::timeout(DEADLINE, gate.entered.notified())
        .await
        .expect("the first request reached the handler");
    first
}

/// Sends alice's retry of `k-1` and returns once it waits on the record's change channel (it
/// subscribes after finding the first in progress).
async fn retry_waiting(app: &Router, redis: &RedisServer) -> Pending {
    let retry = tokio::spawn(app.clone().oneshot(order(Some("alice"), "k-1")));
    let waiting = tokio::time::timeout(DEADLINE, async {
        while !redis
            .cmd(&["PUBSUB", "SHARDCHANNELS"])
            .await
            .unwrap()
            .contains("idempotency")
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(waiting.is_ok(), "the retry never waited for the first");
    retry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_callers_with_one_key_get_two_executions() {
    let (_redis, starter) = started("").await;
    let (app, runs) = scoped_orders(&starter);
    let alice = common::send(&app, order(Some("alice"), "k-1")).await;
    assert_eq!(alice.status(), StatusCode::CREATED);
    let bob = common::send(&app, order(Some("bob"), "k-1")).await;
    assert_eq!(bob.status(), StatusCode::CREATED);
    assert!(
        bob.headers().get(REPLAYED_HEADER).is_none(),
        "Bob got a replay"
    );
    assert_eq!(bob.headers()[header::LOCATION], "/orders/O-2");
    assert_eq!(
        bob.headers()[header::SET_COOKIE],
        "session=s3cret-2; HttpOnly"
    );
    assert_eq!(common::text(bob).await, r#"{"order":"O-2"}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_caller_gets_a_replay_without_set_cookie() {
    let (redis, starter) = started("").await;
    let (app, runs) = scoped_orders(&starter);
    let first = common::send(&app, order(Some("alice"), "k-1")).await;
    // The call that ran the handler gets its response untouched.
    assert_eq!(
        first.headers()[header::SET_COOKIE],
        "session=s3cret-1; HttpOnly"
    );
    assert!(first.headers().contains_key("authentication-info"));
    // The quoted form of the same key is the same record.
    let retry = common::send(&app, order(Some("alice"), "\"k-1\"")).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(retry.headers()[header::LOCATION], "/orders/O-1");
    assert!(
        retry.headers().get(header::SET_COOKIE).is_none(),
        "a replay carries the first response's cookie: {:?}",
        retry.headers()
    );
    assert!(retry.headers().get("authentication-info").is_none());
    assert_eq!(common::text(retry).await, r#"{"order":"O-1"}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let stored = redis.cmd(&["KEYS", "*idempotency*"]).await.unwrap();
    assert!(!stored.contains("alice"), "the scope is hashed: {stored}");
}

/// A request whose scope is `None` is never deduplicated: it runs each time and is never
/// answered with anyone's stored response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_caller_runs_every_time() {
    let (_redis, starter) = started("").await;
    let (app, runs) = scoped_orders(&starter);
    common::send(&app, order(Some("alice"), "k-1")).await;
    for n in 2..=3 {
        let anonymous = common::send(&app, order(None, "k-1")).await;
        assert_eq!(anonymous.status(), StatusCode::CREATED);
        assert!(anonymous.headers().get(REPLAYED_HEADER).is_none());
        assert_eq!(
            common::text(anonymous).await,
            format!(r#"{{"order":"O-{n}"}}"#)
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

/// With `idempotency.http-wait-time = "5s"`, a retry while the first request runs waits for it
/// and gets its response instead of 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_wait_lets_a_concurrent_retry_get_the_first_response() {
    let (redis, starter) = started("http-wait-time = \"5s\"").await;
    let (app, runs, gate) = gated_orders(&starter);
    let first = first_in_handler(&app, &gate).await;
    let retry = retry_waiting(&app, &redis).await;
    gate.released.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let retry = answer(retry).await;
    assert_eq!(retry.status(), StatusCode::CREATED, "not a 409");
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(common::text(retry).await, r#"{"order":"O-1"}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Without a wait, the concurrent retry gets 409 with `Retry-After: 1`, and the problem body
/// shows the key the client sent, not the layer's record key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_carries_retry_after_and_the_clients_key() {
    let (_redis, starter) = started("").await;
    let (app, runs, gate) = gated_orders(&starter);
    let first = first_in_handler(&app, &gate).await;
    let retry = common::send(&app, order(Some("alice"), "\"k-1\"")).await;
    assert_eq!(retry.status(), StatusCode::CONFLICT);
    assert_eq!(retry.headers()[header::RETRY_AFTER], "1");
    let problem: serde_json::Value = common::json(retry).await;
    assert_eq!(problem["idempotencyKey"], "k-1");
    assert!(
        !problem.to_string().contains("http POST") && !problem.to_string().contains('@'),
        "the record key leaked: {problem}"
    );
    gate.released.notify_one();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the 409 ran the handler");
}

/// The unscoped layer from the starter shares a key's response across callers: what
/// `unscoped` says it does, for endpoints whose keys cannot be guessed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unscoped_layer_replays_across_callers() {
    let (_redis, starter) = started("").await;
    let runs = Arc::new(AtomicU32::new(0));
    let app = orders(
        starter.unscoped_idempotency_layer(),
        Arc::clone(&runs),
        None,
    );
    common::send(&app, order(Some("alice"), "k-1")).await;
    let bob = common::send(&app, order(Some("bob"), "k-1")).await;
    assert_eq!(bob.headers()[REPLAYED_HEADER], "true");
    assert!(bob.headers().get(header::SET_COOKIE).is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Redis is lost while a retry waits for the first request: the retry answers 503 one command
/// timeout (1 s here) after the loss, not at the end of its minute-long wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_retry_answers_503_within_a_command_timeout_of_losing_redis() {
    let mut redis = RedisServer::start().await.unwrap();
    let starter = starter_with(
        &redis,
        "command-timeout = \"1s\"",
        "http-wait-time = \"60s\"",
    )
    .await;
    let gate = Gate::default();
    let app = orders(
        starter.idempotency_layer(caller),
        Arc::new(AtomicU32::new(0)),
        Some(gate.clone()),
    );
    let first = first_in_handler(&app, &gate).await;
    let retry = retry_waiting(&app, &redis).await;
    redis.kill().await.unwrap();
    let killed = tokio::time::Instant::now();
    let retry = tokio::time::timeout(Duration::from_secs(60), retry)
        .await
        .expect("the retry outlived Redis by a minute")
        .unwrap()
        .unwrap();
    let after = killed.elapsed();
    assert!(
        after < Duration::from_secs(6),
        "answered {after:?} after the loss"
    );
    assert_eq!(retry.status(), StatusCode::SERVICE_UNAVAILABLE);
    let problem: serde_json::Value = common::json(retry).await;
    assert_eq!(problem["code"], "IDEMPOTENCY_BACKEND_UNAVAILABLE");
    assert_eq!(problem["idempotencyKey"], "k-1");
    gate.released.notify_one();
    let _ = first.await.unwrap();
}

/// A retry waiting on a first request whose handler answers 500 gets 503
/// `IDEMPOTENCY_OWNER_FAILED` with `Retry-After: 1` as soon as the first ends, without running
/// the handler; the next retry runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_retry_of_a_failed_request_gets_503_owner_failed() {
    let (redis, starter) = started("http-wait-time = \"60s\"").await;
    let runs = Arc::new(AtomicU32::new(0));
    let gate = Gate::default();
    let failing = {
        let (runs, gate) = (Arc::clone(&runs), gate.clone());
        move || async move {
            if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                gate.entered.notify_one();
                gate.released.notified().await;
            }
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    let app = Router::new()
        .route("/orders", post(failing))
        .layer(starter.idempotency_layer(caller));
    let first = first_in_handler(&app, &gate).await;
    let retry = retry_waiting(&app, &redis).await;
    gate.released.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let retry = answer(retry).await;
    assert_eq!(retry.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry.headers()[header::RETRY_AFTER], "1");
    let problem: serde_json::Value = common::json(retry).await;
    assert_eq!(problem["code"], "IDEMPOTENCY_OWNER_FAILED");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the waiting retry ran the handler"
    );
    let next = common::send(&app, order(Some("alice"), "k-1")).await;
    assert_eq!(next.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the next retry runs it");
}
