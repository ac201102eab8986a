//! An HTTP service whose bill-run endpoint is guarded by the lock: a second request for the same
//! period while the first runs gets **503** with an RFC 9457 problem body
//! (`reason: held_by_another_owner`) and a `Retry-After` of at most 5 s; with Redis down, 503
//! with `backend_unavailable` and `Retry-After: 2`. The body is the public form: the holder and
//! Redis's error text are logged by the service (`lock_starter::http`), not sent to the client.
//! An internal endpoint for operators could return `DetailedRejection` instead.
//!
//! ```sh
//! TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379 \
//!   cargo run -p lock-starter --features http --example http_service
//! # in another terminal: two concurrent bill runs for one period → one 200, one 503
//! curl -s -X POST localhost:8080/bill-runs/2026-11 & curl -si -X POST localhost:8080/bill-runs/2026-11; wait
//! curl -s localhost:8080/health   # the opt-in health check of the lock's Redis
//! curl -s localhost:8080/metrics | grep ^platform_   # the counters of docs/observability.md
//! # a create the client retries: the retry gets the first ticket, marked Idempotent-Replayed
//! curl -si -X POST -H 'Authorization: Bearer alice' -H 'Idempotency-Key: "3f0c"' -d '{"title":"no dial tone"}' localhost:8080/tickets
//! curl -si -X POST -H 'Authorization: Bearer alice' -H 'Idempotency-Key: "3f0c"' -d '{"title":"no dial tone"}' localhost:8080/tickets
//! # another caller with the same key: a ticket of its own, not Alice's
//! curl -si -X POST -H 'Authorization: Bearer bob' -H 'Idempotency-Key: "3f0c"' -d '{"title":"no dial tone"}' localhost:8080/tickets
//! ```
//!
//! `HTTP_SERVICE_ADDR` sets the listen address (default `127.0.0.1:8080`), `BILL_RUN_MS` how long
//! a bill run takes (default 3000).

#[path = "common/shutdown.rs"]
mod shutdown;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use lock_starter::http::Rejection;
use lock_starter::prelude::*;
use lock_starter::{Health, HealthStatus};

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct App {
    /// The started lock module.
    pub starter: LockStarter,
    /// The lock from it.
    pub lock: Arc<dyn DistributedLock>,
    /// How long one bill run takes.
    pub bill_run: Duration,
}

/// The service's routes: `POST /bill-runs/{period}` (one run per period at a time, 503 when the
/// period's lock is held elsewhere or Redis is unavailable), `POST /tickets` (idempotent by its
/// `Idempotency-Key` header per caller: a retry gets the first ticket) and `GET /health`.
pub fn router(app: App) -> Router {
    let tickets = Router::new()
        .route("/tickets", post(create_ticket))
        .layer(app.starter.idempotency_layer(caller).require_key());
    Router::new()
        .route("/bill-runs/{period}", post(start_bill_run))
        .route("/health", get(health))
        .with_state(app)
        .merge(tickets)
}

/// The caller of a request, scoping its idempotency keys. This example has no authentication
/// and takes the `Authorization` header as it is; a service returns the principal its
/// authentication layer verified (from `request.extensions`). The layer hashes it.
fn caller(request: &axum::http::request::Parts) -> Option<String> {
    let value = request.headers.get(axum::http::header::AUTHORIZATION)?;
    Some(lock_starter::http::header_key(value))
}

/// Creates a ticket; the layer runs this once per `Idempotency-Key` and replays its response.
async fn create_ticket(body: String) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1001);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed); // … insert the ticket …
    let ticket = serde_json::json!({ "ticket": format!("TT-{id}"), "request": body });
    (axum::http::StatusCode::CREATED, Json(ticket))
}

async fn start_bill_run(
    State(app): State<App>,
    Path(period): Path<String>,
) -> Result<Json<serde_json::Value>, Rejection> {
    // One attempt: a run already in progress elsewhere is an answer, not something to queue for.
    let options = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::ZERO)?;
    let invoices = app
        .lock
        .with_lock(&format!("bill-run:{period}"), options, || async {
            tokio::time::sleep(app.bill_run).await; // … the bill run …
            1_204
        })
        .await?;
    Ok(Json(
        serde_json::json!({ "period": period, "invoices": invoices }),
    ))
}

async fn health(State(app): State<App>) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    let Health {
        status,
        latency,
        detail,
        ..
    } = app.starter.health().await;
    // For a readiness probe, not a liveness probe: see LockStarter::health.
    let code = match status {
        HealthStatus::Down => axum::http::StatusCode::SERVICE_UNAVAILABLE,
        _ => axum::http::StatusCode::OK,
    };
    let body = serde_json::json!({
        "status": status.as_str(),
        "latencyMs": latency.map(|l| l.as_secs_f64() * 1000.0),
        "detail": detail,
    });
    (code, Json(body))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,fred=error".into()),
        )
        .init();
    // Installed before the starter is built, so that the series it registers at 0 are seen;
    // histograms with buckets from 1 ms to 60 s, for the `_bucket` queries of the docs' alerts.
    let buckets = [0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 60.0];
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&buckets)?
        .install_recorder()?;
    // The exporter's upkeep (draining histograms), which `install_recorder` leaves to its caller.
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    let starter = match LockStarter::builder().build().await {
        Ok(starter) => starter,
        Err(error) => {
            // Bad configuration or refused credentials: the error names the key and its source.
            tracing::error!("cannot start: {error}");
            std::process::exit(78);
        }
    };
    let lock = starter.lock()?;
    let lock_at_exit = Arc::clone(&lock);
    let bill_run = Duration::from_millis(
        std::env::var("BILL_RUN_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(3000),
    );
    let addr = std::env::var("HTTP_SERVICE_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("listening on http://{addr}");
    let metrics = get(move || std::future::ready(prometheus.render()));
    let app = router(App {
        starter,
        lock,
        bill_run,
    })
    .route("/metrics", metrics);
    axum::serve(listener, app)
        // Ctrl-C on a terminal, SIGTERM from Kubernetes or systemd.
        .with_graceful_shutdown(shutdown::signal())
        .await?;
    // Requests are done; release what is left before the process ends.
    let summary = lock_at_exit
        .shutdown(lock_starter::lock::limits::DEFAULT_SHUTDOWN_TIMEOUT)
        .await;
    eprintln!("lock shut down: {summary}");
    Ok(())
}
