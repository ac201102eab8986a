//! The HTTP mapping (feature `http`): problem bodies for every error code, the content type and
//! `Retry-After`, no credentials in a body, and the example service's router against a real
//! redis-server — two concurrent bill runs of one period give one 200 and one 503 — and its
//! health endpoint with Redis up and down.

#[allow(dead_code, unreachable_pub, missing_docs)]
#[path = "../examples/http_service.rs"]
mod http_service;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::http::{PROBLEM_JSON, ProblemDetails, problem_response};
use lock_starter::prelude::*;
use lock_starter::{AcquireFailure, HealthStatus};
use lock_testkit::RedisServer;
use tower::ServiceExt;

async fn json_of(response: Response) -> serde_json::Value {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"))
}

fn held() -> LockError {
    LockError::AcquisitionFailed {
        key: "bill-run:2026-11".into(),
        reason: AcquireFailure::HeldByAnotherOwner {
            holder: "pod-a/1f/3".into(),
            ttl: Some(Duration::from_millis(2900)),
            waited: Duration::from_millis(1000),
        },
    }
}

#[tokio::test]
async fn held_by_another_owner_is_a_503_problem_naming_key_holder_and_retry_after() {
    let response = problem_response(&held());
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    let body = json_of(response).await;
    assert_eq!(
        body["type"],
        "https://platform.telco/problems/lock-acquisition-failed"
    );
    assert_eq!(body["title"], "Lock not acquired");
    assert_eq!(body["status"], 503);
    assert_eq!(body["code"], "LOCK_ACQUISITION_FAILED");
    assert_eq!(body["lockKey"], "bill-run:2026-11");
    assert_eq!(body["reason"], "held_by_another_owner");
    assert_eq!(body["holder"], "pod-a/1f/3");
    assert_eq!(body["holderTtlMs"], 2900);
    assert_eq!(body["waitedMs"], 1000);
    assert_eq!(body["detail"], held().to_string());
    assert!(
        body.get("instance").is_none() && body.get("message").is_none(),
        "{body}"
    );
}

#[tokio::test]
async fn every_error_code_has_its_status_type_and_reason() {
    let cases = [
        (
            LockError::backend_unavailable("k", "connection refused"),
            503,
            "lock-acquisition-failed",
            "backend_unavailable",
        ),
        (
            LockError::ReleaseFailed {
                key: "k".into(),
                cause: "timed out".into(),
            },
            503,
            "lock-release-failed",
            "release_failed",
        ),
        (
            LockError::invalid_argument("lease", "0ms", "accepted: 100ms to 7days").for_key("k"),
            500,
            "lock-invalid-argument",
            "invalid_argument",
        ),
        (
            LockError::Disabled {
                detail: "telco.platform.lock.enabled = false".into(),
            },
            503,
            "lock-disabled",
            "disabled",
        ),
    ];
    for (error, status, slug, reason) in cases {
        let problem = ProblemDetails::from_error(&error).instance("/bill-runs/2026-11");
        let response = axum::response::IntoResponse::into_response(problem);
        assert_eq!(response.status().as_u16(), status, "{error}");
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        // No TTL known: no Retry-After.
        assert!(
            response.headers().get(header::RETRY_AFTER).is_none(),
            "{error}"
        );
        let body = json_of(response).await;
        assert_eq!(body["status"], status, "{body}");
        assert_eq!(
            body["type"],
            format!("https://platform.telco/problems/{slug}"),
            "{body}"
        );
        assert_eq!(body["code"], error.code().as_str(), "{body}");
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["instance"], "/bill-runs/2026-11", "{body}");
        assert_eq!(body["detail"], error.to_string(), "{body}");
        match error.lock_key() {
            Some(key) => assert_eq!(body["lockKey"], key, "{body}"),
            None => assert!(body.get("lockKey").is_none(), "{body}"),
        }
    }
}

/// A started starter for `address` with short timeouts.
async fn starter(address: &str) -> LockStarter {
    let toml = format!(
        "[telco.platform.lock]\nwait-time = \"300ms\"\ninstance-id = \"http-test\"\n\
         [telco.platform.lock.redis]\naddress = \"{address}\"\ncommand-timeout = \"500ms\"\n"
    );
    LockStarter::builder()
        .figment(Figment::from(Toml::string(&toml)))
        .build()
        .await
        .unwrap()
}

fn app(starter: LockStarter, bill_run: Duration) -> axum::Router {
    let lock = starter.lock().unwrap();
    http_service::router(http_service::App {
        starter,
        lock,
        bill_run,
    })
}

fn post(path: &str) -> Request<Body> {
    Request::post(path).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn the_example_service_answers_a_contended_bill_run_with_503_naming_the_holder() {
    let redis = RedisServer::start().await.unwrap();
    let router = app(starter(&redis.url()).await, Duration::from_secs(30));

    // The first run holds the period's lock for 30 s; the second asks while it does.
    let first = tokio::spawn(router.clone().oneshot(post("/bill-runs/2026-11")));
    let lock_key = "lock:{bill-run:2026-11}";
    let mut held = false;
    for _ in 0..500 {
        if redis.cmd(&["EXISTS", lock_key]).await.unwrap() == "1" {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(held, "the first bill run never took the lock");
    let second = router
        .clone()
        .oneshot(post("/bill-runs/2026-11"))
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    assert!(second.headers().get(header::RETRY_AFTER).is_some());
    let body = json_of(second).await;
    assert_eq!(body["code"], "LOCK_ACQUISITION_FAILED", "{body}");
    assert_eq!(body["reason"], "held_by_another_owner", "{body}");
    assert_eq!(body["lockKey"], "bill-run:2026-11", "{body}");
    assert!(
        body["holder"]
            .as_str()
            .is_some_and(|h| h.starts_with("http-test/")),
        "{body}"
    );
    // Another period is not held up.
    let quick = app(starter(&redis.url()).await, Duration::ZERO);
    let other = quick.oneshot(post("/bill-runs/2026-12")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(json_of(other).await["invoices"], 1_204);
    first.abort();
}

#[tokio::test]
async fn no_password_of_the_address_reaches_a_problem_body_when_redis_is_down() {
    let mut redis = RedisServer::start().await.unwrap();
    let port = redis.port();
    redis.kill().await.unwrap();
    let address = format!("redis://default:pa55-w0rd-s3cret@127.0.0.1:{port}");
    let router = app(starter(&address).await, Duration::ZERO);
    let response = router
        .clone()
        .oneshot(post("/bill-runs/2026-11"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = json_of(response).await;
    assert_eq!(body["reason"], "backend_unavailable", "{body}");
    assert!(!body.to_string().contains("pa55-w0rd-s3cret"), "{body}");
    // The health endpoint says DOWN, also without the password.
    let health = router
        .oneshot(Request::get("/health").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = json_of(health).await;
    assert_eq!(body["status"], "DOWN", "{body}");
    assert!(!body.to_string().contains("pa55-w0rd-s3cret"), "{body}");
}

#[tokio::test]
async fn health_is_up_with_a_running_redis_down_with_a_stopped_one_and_disabled_when_off() {
    let mut redis = RedisServer::start().await.unwrap();
    let starter = starter(&redis.url()).await;
    let up = starter.health().await;
    assert_eq!(up.status, HealthStatus::Up, "{up:?}");
    assert!(up.latency.is_some());
    redis.kill().await.unwrap();
    let down = starter.health().await;
    assert_eq!(down.status, HealthStatus::Down, "{down:?}");
    assert!(down.latency.is_none());
    assert!(down.detail.contains("backend unavailable"), "{down:?}");

    let off = LockStarter::builder()
        .figment(Figment::from(Toml::string(
            "[telco.platform.lock]\nenabled = false\n",
        )))
        .build()
        .await
        .unwrap();
    assert_eq!(off.health().await.status, HealthStatus::Disabled);
    let custom = LockStarter::builder()
        .figment(Figment::from(Toml::string("[telco.platform.lock]\n")))
        .lock(Arc::new(InMemoryLock::new()))
        .build()
        .await
        .unwrap();
    assert_eq!(custom.health().await.status, HealthStatus::Unknown);
}
