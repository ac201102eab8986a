//! The lock layer (feature `http`): a handler runs holding its request's key, a second request
//! for a held key gets 503 while the first runs, other keys and requests without a key run
//! meanwhile, and the key is free once the response is produced.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{Request, StatusCode, header};
use axum::routing::{get, post};
use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::http::{LockLayer, PROBLEM_JSON};
use lock_starter::prelude::*;
use tokio::sync::oneshot;
use tower::ServiceExt;

/// Holds the next bill run: it sends on the first channel when it has started, then waits for
/// the second.
type Hold = Arc<Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>>;

/// `POST /bill-runs/{period}` under the lock of `bill-run:<period>` (a fixed lease of 60 s),
/// answering how many keys `lock` held when it started; `GET /health` unguarded, answering the
/// same.
fn app(lock: &InMemoryLock, hold: &Hold) -> Router {
    let lease = Lease::Fixed(Duration::from_secs(60));
    let layer = LockLayer::new(Arc::new(lock.clone()), lease, bill_run_key).unwrap();
    let (seen, hold) = (lock.clone(), Arc::clone(hold));
    let bill_run = move |Path(period): Path<String>| async move {
        let held = seen.held_count();
        let waiting = hold.lock().unwrap().take();
        if let Some((started, release)) = waiting {
            started.send(()).unwrap();
            release.await.unwrap();
        }
        format!("{period}: {held} held")
    };
    let seen = lock.clone();
    let health = move || async move { format!("{} held", seen.held_count()) };
    Router::new()
        .route("/bill-runs/{period}", post(bill_run))
        .route("/health", get(health))
        .layer(layer)
}

fn bill_run_key(request: &Request<Body>) -> Option<String> {
    let period = request.uri().path().strip_prefix("/bill-runs/")?;
    Some(format!("bill-run:{period}"))
}

fn bill_run(period: &str) -> Request<Body> {
    Request::post(format!("/bill-runs/{period}"))
        .body(Body::empty())
        .unwrap()
}

/// One attempt, so that a held key is answered at once.
fn one_attempt() -> InMemoryLock {
    InMemoryLock::new().with_wait_time(Duration::ZERO).unwrap()
}

#[tokio::test]
async fn a_second_request_for_a_held_key_gets_503_while_the_first_runs() {
    let lock = one_attempt();
    let hold = Hold::default();
    let app = app(&lock, &hold);
    let (started, first_started) = oneshot::channel();
    let (release, released) = oneshot::channel();
    *hold.lock().unwrap() = Some((started, released));
    let first = tokio::spawn(app.clone().oneshot(bill_run("2026-11")));
    first_started.await.unwrap();

    let second = common::send(&app, bill_run("2026-11")).await;
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    // The holder's 60 s lease, capped.
    assert_eq!(second.headers()[header::RETRY_AFTER], "5");
    let body = common::json(second).await;
    assert_eq!(body["code"], "LOCK_ACQUISITION_FAILED", "{body}");
    assert_eq!(body["reason"], "held_by_another_owner", "{body}");
    assert_eq!(body["lockKey"], "bill-run:2026-11", "{body}");

    // Another period, and an unguarded request, run meanwhile.
    let other = common::send(&app, bill_run("2026-12")).await;
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(common::text(other).await, "2026-12: 2 held");
    let health = common::send(&app, Request::get("/health").body(Body::empty()).unwrap()).await;
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(common::text(health).await, "1 held");

    release.send(()).unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(common::text(first).await, "2026-11: 1 held");
    // Released with the response: the next request for the period runs.
    assert_eq!(lock.held_count(), 0);
    let next = common::send(&app, bill_run("2026-11")).await;
    assert_eq!(next.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_refused_key_is_a_400_and_a_lock_switched_off_a_503() {
    let invalid = LockLayer::new(
        Arc::new(one_attempt()),
        Lease::Watchdog,
        |_: &Request<Body>| Some(String::new()),
    )
    .unwrap();
    let empty_key = Router::new()
        .route("/", get(|| async { "ran" }))
        .layer(invalid);
    let refused = common::send(&empty_key, Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(common::json(refused).await["code"], "REQUEST_KEY_INVALID");

    let short = LockLayer::new(
        Arc::new(one_attempt()),
        Lease::Fixed(Duration::from_millis(10)),
        bill_run_key,
    );
    assert_eq!(short.unwrap_err().code(), "LOCK_INVALID_ARGUMENT");

    let off = Figment::from(Toml::string("[telco.platform.lock]\nenabled = false\n"));
    let starter = LockStarter::builder().figment(off).build().await.unwrap();
    let error = starter
        .lock_layer(Lease::Watchdog, bill_run_key)
        .unwrap_err();
    assert_eq!(error.code(), "LOCK_DISABLED");
    let disabled =
        LockLayer::new(starter.lock_or_disabled(), Lease::Watchdog, bill_run_key).unwrap();
    let app = Router::new()
        .route("/bill-runs/{period}", post(|| async { "ran" }))
        .layer(disabled);
    let answer = common::send(&app, bill_run("2026-11")).await;
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(common::json(answer).await["code"], "LOCK_DISABLED");
}
