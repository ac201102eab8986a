//! The HTTP mapping (feature `http`): problem bodies for every error code — the public form
//! without the holder or backend error text (logged server-side instead), the detailed form
//! with them — the content type and the `Retry-After` rule, no credentials in a body, and the
//! example service's router against a real redis-server — two concurrent bill runs of one
//! period give one 200 and one 503 with a short `Retry-After` — and its health endpoint with
//! Redis up and down.

use crate::common;

#[allow(dead_code, unreachable_pub, missing_docs)]
#[path = "../../examples/http_service.rs"]
mod http_service;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use lock_starter::HealthStatus;
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::http::{
    BACKEND_RETRY_AFTER, DetailedRejection, MAX_RETRY_AFTER, PROBLEM_JSON, ProblemDetails,
    Rejection, problem_response,
};
use lock_starter::lock::AcquireFailure;
use lock_starter::prelude::*;
use lock_testkit::RedisServer;
use lock_testkit::logs::CapturedLogs;
use tower::ServiceExt;

/// Held by `pod-a/1f/3` with `ttl_ms` of its lease left.
fn held_for(ttl_ms: u64) -> LockError {
    LockError::AcquisitionFailed {
        key: "bill-run:2026-11".into(),
        reason: AcquireFailure::HeldByAnotherOwner {
            holder: "pod-a/1f/3".into(),
            ttl: Some(Duration::from_millis(ttl_ms)),
            waited: Duration::from_millis(1000),
        },
    }
}

fn held() -> LockError {
    held_for(2900)
}

/// What a client outside the service must not learn from a body.
const INTERNALS: [&str; 4] = ["pod-a", "1f/3", "10.0.0.7", "ECONNREFUSED"];

fn outage() -> LockError {
    LockError::backend_unavailable("bill-run:2026-11", "10.0.0.7:6379: ECONNREFUSED")
}

#[tokio::test]
async fn the_default_body_names_key_and_reason_but_not_the_holder_or_the_backend_error() {
    for (error, reason, retry_after) in [
        (held(), "held_by_another_owner", "3"),
        (outage(), "backend_unavailable", "2"),
    ] {
        let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::DEBUG);
        let response = tracing::subscriber::with_default(subscriber, || {
            axum::response::IntoResponse::into_response(Rejection::from(error))
        });
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], retry_after);
        let body = common::json(response).await;
        assert_eq!(body["code"], "LOCK_ACQUISITION_FAILED", "{body}");
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["lockKey"], "bill-run:2026-11", "{body}");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("`bill-run:2026-11`")),
            "{body}"
        );
        let text = body.to_string();
        let leaked: Vec<&str> = INTERNALS.into_iter().filter(|s| text.contains(s)).collect();
        assert!(
            leaked.is_empty() && body.get("holder").is_none(),
            "{leaked:?} in {body}"
        );
        // The operator still finds what the client was not told.
        let logged = logs.text();
        assert!(
            logged.contains("error answered with a public problem body")
                && logged.contains(if reason == "backend_unavailable" {
                    "ECONNREFUSED"
                } else {
                    "pod-a/1f/3"
                }),
            "the withheld detail was not logged: {logged}"
        );
        // One line per request at INFO is the lock's own; an outage is warned of once.
        assert!(
            logged
                .lines()
                .all(|l| !l.contains("problem body") || l.contains("DEBUG")),
            "a 503 is logged at DEBUG: {logged}"
        );
    }
    assert_eq!(
        ProblemDetails::from(&held()),
        ProblemDetails::public(&held())
    );
}

#[tokio::test]
async fn retry_after_is_a_short_hint_not_a_watchdog_holders_ttl() {
    // A watchdog holder's TTL is back at the watchdog timeout after every renewal.
    let cap = MAX_RETRY_AFTER.as_secs().to_string();
    for (error, expected) in [
        (held_for(28_500), Some(cap.as_str())),
        (held_for(2_900), Some("3")),
        (held_for(200), Some("1")),
        (outage(), Some("2")),
        (
            LockError::AcquisitionFailed {
                key: "k".into(),
                reason: AcquireFailure::WaitersAhead {
                    ahead: 2,
                    waited: Duration::from_millis(5),
                },
            },
            None,
        ),
        (
            LockError::Disabled {
                detail: "telco.platform.lock.enabled = false".into(),
            },
            None,
        ),
    ] {
        let response = problem_response(&error);
        assert_eq!(
            response
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_owned())
                .as_deref(),
            expected,
            "{error}"
        );
    }
    assert_eq!(BACKEND_RETRY_AFTER, Duration::from_secs(2));
}

#[tokio::test]
async fn held_by_another_owner_is_a_503_problem_naming_key_holder_and_retry_after_when_detailed() {
    let response = axum::response::IntoResponse::into_response(DetailedRejection::from(held()));
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    let body = common::json(response).await;
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
            LockError::invalid_argument("lease", "0", "accepted: 100 ms to 168 h").for_key("k"),
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
        (
            LockError::ShutDown { key: "k".into() },
            503,
            "lock-disabled",
            "shut_down",
        ),
    ];
    for (error, status, slug, reason) in cases {
        let problem = ProblemDetails::detailed(&error).instance("/bill-runs/2026-11");
        let public = ProblemDetails::public(&error);
        assert_eq!(
            (&public.code, &public.reason, public.status),
            (&problem.code, &problem.reason, problem.status)
        );
        assert!(
            !public.detail.contains("connection refused")
                && public.extensions.keys().all(|name| name == "lockKey"),
            "{public:?}"
        );
        // Every error has a public detail of its own, not the generic title.
        assert!(
            !public.detail.starts_with(&problem.title),
            "{}",
            public.detail
        );
        let response = axum::response::IntoResponse::into_response(problem);
        assert_eq!(response.status().as_u16(), status, "{error}");
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        // Only an outage has a hint (the reconnect back-off).
        assert_eq!(
            response.headers().get(header::RETRY_AFTER).is_some(),
            reason == "backend_unavailable",
            "{error}"
        );
        let body = common::json(response).await;
        assert_eq!(body["status"], status, "{body}");
        assert_eq!(
            body["type"],
            format!("https://platform.telco/problems/{slug}"),
            "{body}"
        );
        assert_eq!(body["code"], error.code(), "{body}");
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["instance"], "/bill-runs/2026-11", "{body}");
        assert_eq!(body["detail"], error.to_string(), "{body}");
        match error.lock_key() {
            Some(key) => assert_eq!(body["lockKey"], key, "{body}"),
            None => assert!(body.get("lockKey").is_none(), "{body}"),
        }
    }
}

#[tokio::test]
async fn every_capabilitys_error_is_answered_by_the_same_rejection() {
    use lock_starter::branches::{BranchError, SubKey};
    let sub_key = SubKey::new("ticket:4711", 42);
    let cases: [(Rejection, u16, &str, Option<&str>); 4] = [
        (
            BranchError::from(held()).into(),
            503,
            "BRANCHES_MASTER_LOCK_FAILED",
            Some("3"),
        ),
        (
            BranchError::unavailable("open", &sub_key, "10.0.0.7: ECONNREFUSED").into(),
            503,
            "BRANCHES_UNAVAILABLE",
            Some("2"),
        ),
        (
            IdempotencyError::InProgress {
                key: "8e03978e".into(),
                holder: "pod-a/1f/3".into(),
                waited: Duration::ZERO,
            }
            .into(),
            409,
            "IDEMPOTENCY_IN_PROGRESS",
            Some("1"),
        ),
        (
            IdempotencyError::KeyReused {
                key: "8e03978e".into(),
            }
            .into(),
            422,
            "IDEMPOTENCY_KEY_REUSED",
            None,
        ),
    ];
    for (rejection, status, code, retry_after) in cases {
        let response = axum::response::IntoResponse::into_response(rejection);
        assert_eq!(response.status().as_u16(), status, "{code}");
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(
            response
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap()),
            retry_after,
            "{code}"
        );
        let body = common::json(response).await;
        assert_eq!(body["code"], code, "{body}");
        let slug = code.to_ascii_lowercase().replace('_', "-");
        assert_eq!(
            body["type"],
            format!("https://platform.telco/problems/{slug}")
        );
        let text = body.to_string();
        let leaked: Vec<&str> = INTERNALS.into_iter().filter(|s| text.contains(s)).collect();
        assert!(leaked.is_empty(), "{leaked:?} in {body}");
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
async fn the_example_service_answers_a_contended_bill_run_with_503_and_a_short_retry_after() {
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
    let second = common::send(&router, post("/bill-runs/2026-11")).await;
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    // The holder's watchdog TTL is 30 s, but the run may end any moment: a short hint.
    let retry_after: u64 = second.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=MAX_RETRY_AFTER.as_secs()).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    let body = common::json(second).await;
    assert_eq!(body["code"], "LOCK_ACQUISITION_FAILED", "{body}");
    assert_eq!(body["reason"], "held_by_another_owner", "{body}");
    assert_eq!(body["lockKey"], "bill-run:2026-11", "{body}");
    // A public endpoint: the pod name and owner token stay in the service's logs.
    assert!(!body.to_string().contains("http-test"), "{body}");
    // Another period is not held up.
    let quick = app(starter(&redis.url()).await, Duration::ZERO);
    let other = common::send(&quick, post("/bill-runs/2026-12")).await;
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(common::json(other).await["invoices"], 1_204);
    first.abort();
}

#[tokio::test]
async fn no_password_of_the_address_reaches_a_problem_body_when_redis_is_down() {
    let mut redis = RedisServer::start().await.unwrap();
    let port = redis.port();
    redis.kill().await.unwrap();
    let address = format!("redis://default:pa55-w0rd-s3cret@127.0.0.1:{port}");
    let router = app(starter(&address).await, Duration::ZERO);
    let response = common::send(&router, post("/bill-runs/2026-11")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = common::json(response).await;
    assert_eq!(body["reason"], "backend_unavailable", "{body}");
    assert!(!body.to_string().contains("pa55-w0rd-s3cret"), "{body}");
    // The health endpoint says DOWN, also without the password.
    let health = common::send(
        &router,
        Request::get("/health").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = common::json(health).await;
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

/// The example's `POST /tickets`: a retry with the same `Idempotency-Key` from the same caller
/// gets the first ticket, marked as a replay, whether the key is quoted or bare; another caller
/// with that key gets a ticket of its own; without the header, 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_services_ticket_create_is_idempotent_by_its_header() {
    let redis = RedisServer::start().await.unwrap();
    let starter = common::starter(&common::on_redis(&redis)).await;
    let lock = starter.lock().unwrap();
    let app = http_service::router(http_service::App {
        starter,
        lock,
        bill_run: Duration::from_millis(10),
    });
    let create = |caller: &str, key: Option<&str>| {
        let mut request =
            Request::post("/tickets").header("Authorization", format!("Bearer {caller}"));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request
            .body(Body::from(r#"{"title":"no dial tone"}"#))
            .unwrap()
    };
    let first = common::send(&app, create("alice", Some("\"3f0c\""))).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first = common::json(first).await;
    let retry = common::send(&app, create("alice", Some("3f0c"))).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(common::json(retry).await, first);
    let other = common::send(&app, create("bob", Some("\"3f0c\""))).await;
    assert_eq!(other.status(), StatusCode::CREATED);
    assert!(other.headers().get("idempotent-replayed").is_none());
    assert_ne!(common::json(other).await["ticket"], first["ticket"]);
    let missing = common::send(&app, create("alice", None)).await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
}

/// The operator's log line names what failed for every capability: a shared value's key, a
/// cache's name.
#[tokio::test]
async fn the_withheld_log_line_names_a_values_key_and_a_cache() {
    use lock_starter::cache::CacheError;
    use lock_starter::values::ValuesError;
    let cases: [(Rejection, &str); 2] = [
        (
            ValuesError::unavailable("get", "catalog:warm-up", "ECONNREFUSED").into(),
            "subject=\"catalog:warm-up\"",
        ),
        (
            CacheError::unavailable("get", "products", "sku-1", "ECONNREFUSED").into(),
            "subject=\"products\"",
        ),
    ];
    for (rejection, subject) in cases {
        let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::DEBUG);
        let response = tracing::subscriber::with_default(subscriber, || {
            axum::response::IntoResponse::into_response(rejection)
        });
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let logged = logs.text();
        assert!(logged.contains(subject), "{subject} in {logged}");
    }
}

/// A cache's error answers with a body naming the cache (never the entry's key), in words of
/// its own; a failed load is logged at INFO, since the failure is the loader's, not Redis'.
#[tokio::test]
async fn a_cache_error_names_the_cache_and_a_failed_load_is_logged_at_info() {
    use lock_starter::cache::CacheError;
    let load_failed = || CacheError::LoadFailed {
        cache: "prices".into(),
        key: "sku-secret-1".into(),
        cause: Arc::new("catalog answered 502".into()),
    };
    let cases = [
        (
            CacheError::unavailable("put", "prices", "sku-secret-1", "ECONNREFUSED"),
            "a change to cache `prices` was not confirmed",
        ),
        (
            load_failed(),
            "a value of cache `prices` could not be loaded",
        ),
        (
            CacheError::LoaderPanicked {
                cache: "prices".into(),
                key: "sku-secret-1".into(),
                message: "boom".into(),
            },
            "the server failed using cache `prices`",
        ),
    ];
    for (error, detail) in cases {
        let body = ProblemDetails::public(&error);
        assert!(body.detail.contains(detail), "{}", body.detail);
        assert_eq!(body.extensions["cache"], "prices", "{body:?}");
        assert!(
            !body.to_json().to_string().contains("sku-secret"),
            "{body:?}"
        );
    }
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    tracing::subscriber::with_default(subscriber, || {
        axum::response::IntoResponse::into_response(Rejection::from(load_failed()))
    });
    assert!(
        logs.text().contains("catalog answered 502"),
        "{}",
        logs.text()
    );
}
