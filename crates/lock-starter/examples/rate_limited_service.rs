//! An HTTP service with a per-client rate limit and one route under the lock: each client (its
//! `X-Client-Id` header) gets the configured limit `api`, 5 requests per minute. Every counted
//! response carries the IETF `RateLimit-Policy` and `RateLimit` fields, and the sixth request of
//! a minute gets **429** with an RFC 9457 problem body and `Retry-After`. `POST
//! /bill-runs/{period}` also runs under the lock of its period, so a bill run already running
//! anywhere answers **503**.
//!
//! ```sh
//! cargo run -p lock-starter --features http --example rate_limited_service
//! cargo run -p lock-starter --features http --example rate_limited_service -- --serve
//! # with --serve, in another terminal:
//! curl -si -H 'X-Client-Id: carol' localhost:8080/tariffs
//! ```
//!
//! The configuration is read as in a service: `CONFIG` below as a TOML file, then the
//! `TELCO_PLATFORM_LOCK_*` environment variables (e.g. `TELCO_PLATFORM_LOCK_RATE_LIMITS_API_RATE
//! = 100/1m`). Without `TELCO_PLATFORM_LOCK_REDIS_ADDRESS` it starts a private `redis-server`
//! on a free loopback port, as the demo does. It serves, sends itself requests, checks the
//! answers and prints them, then exits: 0 when every check passed, 1 when one failed, 78 for a
//! bad configuration or no `redis-server` to start. With `--serve` it then serves on `--addr`
//! until Ctrl-C or SIGTERM.

mod common;
#[path = "common/shutdown.rs"]
mod shutdown;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Path;
use axum::http::Request;
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use lock_starter::http::header_key;
use lock_starter::prelude::*;
use lock_testkit::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The service's configuration file, written to a temporary directory and read as a TOML file.
const CONFIG: &str = r#"
[telco.platform.lock.rate-limits.api]
# Per client: 5 requests per minute, 5 at once from rest.
rate = "5/1m"
"#;

#[derive(Debug, Parser)]
#[command(
    about = "An HTTP service with a per-client rate limit and a route under the lock; checks itself",
    after_help = "Configuration: the example's TOML, then TELCO_PLATFORM_LOCK_* environment \
variables. Without TELCO_PLATFORM_LOCK_REDIS_ADDRESS a private redis-server is started.\n\
Exit codes: 0 every check passed, 1 a check failed, 78 bad configuration, lock disabled or no \
redis-server to start."
)]
struct Args {
    /// After the checks, serve until Ctrl-C or SIGTERM.
    #[arg(long)]
    serve: bool,
    /// Address to serve on with --serve.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
}

/// The service's routes, below the per-client rate limit: `GET /tariffs`, and `POST
/// /bill-runs/{period}` under the lock of `bill-run:<period>`, one attempt: a bill run is
/// answered, not queued for.
fn router(starter: &LockStarter, bill_run: Duration) -> Result<Router, Box<dyn std::error::Error>> {
    let one_attempt = AcquireOptions::new(Lease::Watchdog).wait_time(Duration::ZERO)?;
    let per_period = starter.lock_layer(one_attempt, period_key)?;
    // A read API: while Redis is away the limit is not enforced, the API stays up.
    let per_client = starter.rate_limit_layer("api", FailurePolicy::FailOpen, client_id)?;
    let bill_runs = Router::new()
        .route(
            "/bill-runs/{period}",
            post(move |Path(period): Path<String>| async move {
                tokio::time::sleep(bill_run).await; // … the bill run …
                Json(serde_json::json!({ "period": period, "invoices": 1_204 }))
            }),
        )
        .layer(per_period);
    Ok(Router::new()
        .route("/tariffs", get(|| async { Json(serde_json::json!([])) }))
        .merge(bill_runs)
        .layer(per_client))
}

/// The client a request is limited as. This example has no authentication and takes the
/// header as it is; a service takes the principal its authentication layer verified, and
/// refuses a request without one before it gets here (a request without a key is not
/// limited).
fn client_id(request: &Request<Body>) -> Option<String> {
    // An empty id, or one over 512 bytes, is the client's 400 `REQUEST_KEY_INVALID`. Not
    // `to_str`, which refuses non-ASCII: a request without a key is not limited.
    request.headers().get("x-client-id").map(header_key)
}

/// The lock of a bill-run request: `bill-run:<period>`.
fn period_key(request: &Request<Body>) -> Option<String> {
    let period = request.uri().path().strip_prefix("/bill-runs/")?;
    Some(format!("bill-run:{period}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    let (starter, redis, _dir) = match start().await {
        Ok(started) => started,
        Err(error) => {
            eprintln!("cannot start: {error}");
            return ExitCode::from(78);
        }
    };
    let code = run(&args, &starter).await;
    // Last: releases what is left before the process ends.
    starter.shutdown().await;
    if let Some(redis) = redis {
        drop(starter);
        stop_quietly(redis).await;
    }
    code
}

/// Checks the service and, with `--serve`, serves it.
async fn run(args: &Args, starter: &LockStarter) -> ExitCode {
    let app = match router(starter, Duration::from_millis(200)) {
        Ok(app) => app,
        Err(error) => {
            eprintln!("configuration: {error}");
            return ExitCode::from(78);
        }
    };
    if let Err(failure) = check(starter, app.clone()).await {
        eprintln!("check failed: {failure}");
        return ExitCode::FAILURE;
    }
    println!("every check passed");
    if args.serve {
        if let Err(error) = serve(args.addr, app).await {
            eprintln!("serving failed: {error}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Stops the private server once the service's connections to it have quit (or after 2 s), so
/// that its going away is not logged as an outage.
async fn stop_quietly(redis: RedisServer) {
    for _ in 0..40 {
        let info = redis.cmd(&["INFO", "clients"]).await.unwrap_or_default();
        // The one left is `cmd`'s own.
        if info
            .lines()
            .any(|line| line.trim() == "connected_clients:1")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The started starter, with the Redis and the configuration file it keeps alive.
async fn start() -> Result<(LockStarter, Option<RedisServer>, tempfile::TempDir), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut config = CONFIG.to_owned();
    let redis = if std::env::var_os("TELCO_PLATFORM_LOCK_REDIS_ADDRESS").is_some() {
        println!("Using the Redis at TELCO_PLATFORM_LOCK_REDIS_ADDRESS");
        None
    } else {
        let server = RedisServer::start()
            .await
            .map_err(|e| format!("could not start a private redis-server: {e}"))?;
        println!(
            "Started a private redis-server on 127.0.0.1:{} (stopped at exit)",
            server.port()
        );
        config += &format!(
            "\n[telco.platform.lock.redis]\naddress = \"{}\"\n",
            server.url()
        );
        Some(server)
    };
    let path = dir.path().join("rate_limited_service.toml");
    std::fs::write(&path, config).map_err(|e| e.to_string())?;
    let starter = LockStarter::builder()
        .toml_file(path)
        .build()
        .await
        .map_err(|e| e.to_string())?;
    Ok((starter, redis, dir))
}

/// Serves `app` on a free loopback port, sends it requests and checks the answers.
async fn check(starter: &LockStarter, app: Router) -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let checked = check_at(addr, starter).await;
    server.abort();
    let _ = server.await; // drops the app's clients of Redis
    checked
}

async fn check_at(addr: SocketAddr, starter: &LockStarter) -> Result<(), String> {
    let quota = starter
        .rate_limiter("api", FailurePolicy::FailOpen)
        .map_err(|e| e.to_string())?
        .quota();
    let burst = quota.burst();
    let policy = format!("\"api\";q={burst};w=");
    // A client id of this run, so that a rerun on the same Redis starts from rest.
    let alice = format!("alice-{}", std::process::id());
    for n in 1..=burst {
        let answer = send(addr, "GET", "/tariffs", Some(&alice)).await?;
        answer.show(&format!("GET /tariffs as {alice}, request {n}"));
        expect(answer.status == 200, "admitted")?;
        expect(
            answer.header("ratelimit-policy").starts_with(&policy),
            "the policy",
        )?;
        let remaining = format!("\"api\";r={};t=", burst - n);
        expect(
            answer.header("ratelimit").starts_with(&remaining),
            "the remaining count",
        )?;
    }
    let denied = send(addr, "GET", "/tariffs", Some(&alice)).await?;
    denied.show(&format!("GET /tariffs as {alice}, request {}", burst + 1));
    expect(denied.status == 429, "429 past the limit")?;
    expect(
        denied.header("content-type") == "application/problem+json",
        "a problem body",
    )?;
    let retry_after: u64 = denied.header("retry-after").parse().unwrap_or(0);
    let longest = quota.emission_interval().as_secs() + 1;
    expect(
        (1..=longest).contains(&retry_after),
        "Retry-After of at most one emission interval",
    )?;
    let problem: serde_json::Value =
        serde_json::from_str(&denied.body).map_err(|e| e.to_string())?;
    expect(problem["code"] == "RATE_LIMITED", "code RATE_LIMITED")?;

    // Non-ASCII in the id: still a key, so still limited.
    let bob = format!("bøb-{}", std::process::id());
    let other = send(addr, "GET", "/tariffs", Some(&bob)).await?;
    other.show(&format!("GET /tariffs as {bob}"));
    expect(other.status == 200, "another client has a limit of its own")?;
    let remaining = format!("\"api\";r={};t=", burst - 1);
    expect(
        other.header("ratelimit").starts_with(&remaining),
        "a non-ASCII client id is limited too",
    )?;
    let anonymous = send(addr, "GET", "/tariffs", None).await?;
    anonymous.show("GET /tariffs without X-Client-Id");
    expect(
        anonymous.status == 200 && anonymous.header("ratelimit").is_empty(),
        "a request without a key is not limited",
    )?;

    let lock = starter.lock().map_err(|e| e.to_string())?;
    let other_pod = lock
        .try_acquire("bill-run:2026-11", Lease::Watchdog)
        .await
        .map_err(|e| e.to_string())?;
    let path = "/bill-runs/2026-11";
    let carol = format!("carol-{}", std::process::id());
    let held = send(addr, "POST", path, Some(&carol)).await?;
    held.show(&format!("POST {path} while another pod runs it"));
    expect(held.status == 503, "503 while the period's lock is held")?;
    let problem: serde_json::Value = serde_json::from_str(&held.body).map_err(|e| e.to_string())?;
    expect(
        problem["code"] == "LOCK_ACQUISITION_FAILED",
        "code LOCK_ACQUISITION_FAILED",
    )?;
    let _ = other_pod.release().await;
    let ran = send(addr, "POST", path, Some(&carol)).await?;
    ran.show(&format!("POST {path} once it is free"));
    expect(ran.status == 200, "the bill run runs once the lock is free")?;
    Ok(())
}

fn expect(holds: bool, what: &str) -> Result<(), String> {
    if holds {
        Ok(())
    } else {
        Err(format!("expected: {what}"))
    }
}

/// An HTTP answer as read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    /// The first value of the header `name` (lower case), or "".
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Prints the request's line and the answer's status and rate-limit headers.
    fn show(&self, request: &str) {
        println!("{request} → {}", self.status);
        for name in ["ratelimit-policy", "ratelimit", "retry-after"] {
            if !self.header(name).is_empty() {
                println!("    {name}: {}", self.header(name));
            }
        }
        if self.header("content-type") == "application/problem+json" {
            println!("    {}", self.body);
        }
    }
}

/// Sends one HTTP/1.1 request over a connection of its own and reads the whole answer.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    client: Option<&str>,
) -> Result<Answer, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let client = client.map_or_else(String::new, |c| format!("X-Client-Id: {c}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{client}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(|e| e.to_string())?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP answer: {raw:?}"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status line: {head:?}"))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// Serves `app` on `addr` until Ctrl-C or SIGTERM.
async fn serve(addr: SocketAddr, app: Router) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("listening on http://{addr}");
    println!("  curl -si -H 'X-Client-Id: carol' {addr}/tariffs");
    println!("  curl -si -X POST -H 'X-Client-Id: carol' {addr}/bill-runs/2026-11");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown::signal())
        .await
}
