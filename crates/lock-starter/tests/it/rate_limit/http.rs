//! The rate-limit layer (feature `http`): the `RateLimit` fields on an admitted response, a 429
//! problem with `Retry-After` on a denied one, requests without a key unlimited, a failing
//! store answered by the failure policy — in memory on paused time, and a configured limit on a
//! real redis-server.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::get;
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::http::{PROBLEM_JSON, RATELIMIT_HEADER, RATELIMIT_POLICY_HEADER, RateLimitLayer};
use lock_starter::prelude::*;
use lock_starter::rate_limit::{
    Charge, DisabledRateLimits, InMemoryRateLimits, RateLimitStore, Verdict,
};
use lock_testkit::RedisServer;

/// `GET /tariffs`, counting its runs in `runs`, with a header of its own; limited by `layer`.
fn app(layer: RateLimitLayer, runs: &Arc<AtomicU32>) -> Router {
    let runs = Arc::clone(runs);
    let tariffs = move || {
        runs.fetch_add(1, Ordering::SeqCst);
        async { ([(header::CACHE_CONTROL, "no-store")], "[]") }
    };
    Router::new().route("/tariffs", get(tariffs)).layer(layer)
}

/// The layer charging `limit` on `store` under the request's `X-Client-Id`.
fn per_client(store: Arc<dyn RateLimitStore>, limit: &str, quota: Quota) -> RateLimitLayer {
    per_client_by(store, limit, quota, FailurePolicy::FailClosed)
}

fn per_client_by(
    store: Arc<dyn RateLimitStore>,
    limit: &str,
    quota: Quota,
    policy: FailurePolicy,
) -> RateLimitLayer {
    let limiter = RateLimiter::new(store, limit, quota, policy).unwrap();
    RateLimitLayer::new(limiter, client_id)
}

fn client_id(request: &Request<Body>) -> Option<String> {
    let client = request.headers().get("x-client-id")?;
    client.to_str().ok().map(str::to_owned)
}

/// `GET /tariffs` from `client`, or from no client.
fn tariffs(client: Option<&str>) -> Request<Body> {
    let mut request = Request::get("/tariffs");
    if let Some(client) = client {
        request = request.header("x-client-id", client);
    }
    request.body(Body::empty()).unwrap()
}

fn field<'a>(response: &'a axum::response::Response, name: &str) -> Option<&'a str> {
    response
        .headers()
        .get(name)
        .map(|value| value.to_str().unwrap())
}

#[tokio::test(start_paused = true)]
async fn an_admitted_response_keeps_its_headers_and_gains_the_ratelimit_fields() {
    let runs = Arc::new(AtomicU32::new(0));
    let store = Arc::new(InMemoryRateLimits::new());
    let app = app(per_client(store, "api", "3/1m".parse().unwrap()), &runs);

    let first = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()[header::CACHE_CONTROL], "no-store");
    assert_eq!(
        field(&first, RATELIMIT_POLICY_HEADER),
        Some(r#""api";q=3;w=60"#)
    );
    assert_eq!(field(&first, RATELIMIT_HEADER), Some(r#""api";r=2;t=20"#));
    assert_eq!(common::text(first).await, "[]");

    let second = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(field(&second, RATELIMIT_HEADER), Some(r#""api";r=1;t=40"#));
    // 10 s later: half a request has come back, not a whole one.
    tokio::time::advance(Duration::from_secs(10)).await;
    let third = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(third.status(), StatusCode::OK);
    assert_eq!(field(&third, RATELIMIT_HEADER), Some(r#""api";r=0;t=50"#));
    // Another client has a budget of its own.
    let other = common::send(&app, tariffs(Some("client-7"))).await;
    assert_eq!(field(&other, RATELIMIT_HEADER), Some(r#""api";r=2;t=20"#));
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn the_policy_field_gives_the_burst_and_its_refill_time_in_seconds_rounded_up() {
    let runs = Arc::new(AtomicU32::new(0));
    let store: Arc<dyn RateLimitStore> = Arc::new(InMemoryRateLimits::new());
    for (quota, policy, state) in [
        // 10 at once, refilled in 6 s at 100 per minute.
        (
            "100/1m".parse::<Quota>().unwrap().with_burst(10).unwrap(),
            r#""burst";q=10;w=6"#,
            r#""burst";r=9;t=1"#,
        ),
        // One per 10/7 s: 1.43 s is 2 s, whole seconds rounded up.
        (
            "7/10s".parse::<Quota>().unwrap().with_burst(1).unwrap(),
            r#""burst";q=1;w=2"#,
            r#""burst";r=0;t=2"#,
        ),
    ] {
        let app = app(per_client(Arc::clone(&store), "burst", quota), &runs);
        let client = format!("client-{}", quota.count());
        let admitted = common::send(&app, tariffs(Some(&client))).await;
        assert_eq!(field(&admitted, RATELIMIT_POLICY_HEADER), Some(policy));
        assert_eq!(field(&admitted, RATELIMIT_HEADER), Some(state));
    }
}

#[tokio::test(start_paused = true)]
async fn a_denied_request_is_a_429_problem_with_retry_after_and_the_handler_does_not_run() {
    let runs = Arc::new(AtomicU32::new(0));
    let store = Arc::new(InMemoryRateLimits::new());
    let app = app(per_client(store, "api", "2/1h".parse().unwrap()), &runs);
    for _ in 0..2 {
        let admitted = common::send(&app, tariffs(Some("client-42"))).await;
        assert_eq!(admitted.status(), StatusCode::OK);
    }

    let denied = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    assert_eq!(denied.headers()[header::RETRY_AFTER], "1800");
    assert_eq!(
        field(&denied, RATELIMIT_POLICY_HEADER),
        Some(r#""api";q=2;w=3600"#)
    );
    assert_eq!(
        field(&denied, RATELIMIT_HEADER),
        Some(r#""api";r=0;t=3600"#)
    );
    assert!(denied.headers().get(header::CACHE_CONTROL).is_none());
    let body = common::json(denied).await;
    assert_eq!(body["status"], 429, "{body}");
    assert_eq!(body["code"], "RATE_LIMITED", "{body}");
    assert_eq!(body["reason"], "limited", "{body}");
    assert_eq!(body["title"], "Too many requests", "{body}");
    assert_eq!(
        body["type"], "https://platform.telco/problems/rate-limited",
        "{body}"
    );
    assert_eq!(body["limit"], "api", "{body}");
    assert_eq!(body["retryAfterMs"], 1_800_000, "{body}");
    assert_eq!(
        body["detail"],
        "rate limit `api` is used up for this client; retry after the Retry-After time"
    );
    assert!(
        !body.to_string().contains("client-42"),
        "no client key in a public body: {body}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // Half a second before the next admission: `Retry-After` rounds up to 1.
    tokio::time::advance(Duration::from_millis(1_799_500)).await;
    let soon = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(soon.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(soon.headers()[header::RETRY_AFTER], "1");
    tokio::time::advance(Duration::from_millis(500)).await;
    let admitted = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_key_passes_unlimited_and_a_refused_key_is_a_400() {
    let runs = Arc::new(AtomicU32::new(0));
    let store = Arc::new(InMemoryRateLimits::new());
    let app = app(per_client(store, "api", "1/1h".parse().unwrap()), &runs);
    for _ in 0..5 {
        let unlimited = common::send(&app, tariffs(None)).await;
        assert_eq!(unlimited.status(), StatusCode::OK);
        assert!(field(&unlimited, RATELIMIT_HEADER).is_none());
        assert!(field(&unlimited, RATELIMIT_POLICY_HEADER).is_none());
    }
    // They charged nobody's budget.
    let keyed = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(field(&keyed, RATELIMIT_HEADER), Some(r#""api";r=0;t=3600"#));
    assert_eq!(runs.load(Ordering::SeqCst), 6);

    // An empty or oversized client id is not a key: the client's 400, not let through
    // unlimited, and no 500 or WARN line a client could trip at will.
    let (logs, subscriber) = lock_testkit::logs::CapturedLogs::scoped(tracing::Level::INFO);
    let _guard = tracing::subscriber::set_default(subscriber);
    for client in [String::new(), "c".repeat(513)] {
        let refused = common::send(&app, tariffs(Some(&client))).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert_eq!(refused.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let body = common::json(refused).await;
        assert_eq!(body["code"], "REQUEST_KEY_INVALID");
        assert_eq!(body["title"], "Bad request key");
        assert!(
            body["rule"].as_str().unwrap().contains("512 bytes"),
            "{body}"
        );
    }
    assert_eq!(
        logs.text(),
        "",
        "a client's bad key is not logged above DEBUG"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 6);
}

/// A store whose backend never answers.
#[derive(Debug)]
struct FailingStore;

#[async_trait]
impl RateLimitStore for FailingStore {
    async fn charge(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, RateLimitError> {
        Err(RateLimitError::unavailable(
            charges[0].limit,
            "10.0.0.7:6379: ECONNREFUSED",
        ))
    }
}

#[tokio::test]
async fn a_failing_store_is_a_503_when_failing_closed_and_passes_when_failing_open() {
    let runs = Arc::new(AtomicU32::new(0));
    let quota: Quota = "100/1s".parse().unwrap();
    let closed = app(
        per_client_by(
            Arc::new(FailingStore),
            "api",
            quota,
            FailurePolicy::FailClosed,
        ),
        &runs,
    );
    let unavailable = common::send(&closed, tariffs(Some("client-42"))).await;
    assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(unavailable.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    assert_eq!(unavailable.headers()[header::RETRY_AFTER], "2");
    assert!(field(&unavailable, RATELIMIT_HEADER).is_none());
    let body = common::json(unavailable).await;
    assert_eq!(body["code"], "RATE_LIMIT_UNAVAILABLE", "{body}");
    assert_eq!(body["reason"], "backend_unavailable", "{body}");
    assert_eq!(body["title"], "Rate limit not checked", "{body}");
    assert!(!body.to_string().contains("10.0.0.7"), "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    for store in [
        Arc::new(FailingStore) as Arc<dyn RateLimitStore>,
        Arc::new(DisabledRateLimits),
    ] {
        let open = app(
            per_client_by(store, "api", quota, FailurePolicy::FailOpen),
            &runs,
        );
        let passed = common::send(&open, tariffs(Some("client-42"))).await;
        assert_eq!(passed.status(), StatusCode::OK);
        assert!(field(&passed, RATELIMIT_HEADER).is_none());
        assert!(field(&passed, RATELIMIT_POLICY_HEADER).is_none());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_limit_on_redis_answers_the_third_request_with_429() {
    let redis = RedisServer::start().await.unwrap();
    let config = format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n\
         [telco.platform.lock.rate-limits.api]\nrate = \"2/1h\"\n",
        redis.url()
    );
    let starter = LockStarter::builder()
        .figment(Figment::from(Toml::string(&config)))
        .build()
        .await
        .unwrap();
    let layer = starter
        .rate_limit_layer("api", FailurePolicy::FailClosed, client_id)
        .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let app = app(layer, &runs);

    for remaining in [1, 0] {
        let admitted = common::send(&app, tariffs(Some("client-42"))).await;
        assert_eq!(admitted.status(), StatusCode::OK);
        assert_eq!(
            field(&admitted, RATELIMIT_POLICY_HEADER),
            Some(r#""api";q=2;w=3600"#)
        );
        let state = field(&admitted, RATELIMIT_HEADER).unwrap();
        assert!(
            state.starts_with(&format!(r#""api";r={remaining};t="#)),
            "{state}"
        );
    }
    let denied = common::send(&app, tariffs(Some("client-42"))).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = field(&denied, header::RETRY_AFTER.as_str())
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=1800).contains(&retry_after), "{retry_after}");
    assert_eq!(common::json(denied).await["code"], "RATE_LIMITED");
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    let unconfigured = starter
        .rate_limit_layer("login", FailurePolicy::FailClosed, client_id)
        .unwrap_err();
    assert_eq!(unconfigured.code(), "RATE_LIMIT_INVALID_ARGUMENT");
}
