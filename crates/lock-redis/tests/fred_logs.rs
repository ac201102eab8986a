//! fred logs through the `log` crate under its own targets (`fred::…`), which reach a service's
//! `tracing` subscriber through the `log` bridge: when Redis goes away a service logging at
//! `WARN` sees fred's "Broadcasting error … Connection closed" lines. The library cannot filter
//! a subscriber the service owns; the `EnvFilter` line docs/observability.md gives does.
//!
//! One global subscriber (the `log` bridge is process-wide) with two layers: one at `WARN` as a
//! service would start, one with the documented filter. Also: a client dropped while Redis is
//! away makes fred warn of nothing.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::eventually;
use lock_testkit::logs::CapturedLogs;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The filter docs/observability.md suggests.
const QUIET_FRED: &str = "warn,fred=error";

/// A plain `fmt` layer writing into `logs`.
fn layer<S>(logs: &CapturedLogs) -> impl Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let writer = logs.clone();
    tracing_subscriber::fmt::layer()
        .with_writer(move || writer.clone())
        .with_ansi(false)
}

/// The global subscriber's two captures: at `WARN`, and with [`QUIET_FRED`].
fn logs() -> &'static (CapturedLogs, CapturedLogs) {
    static LOGS: OnceLock<(CapturedLogs, CapturedLogs)> = OnceLock::new();
    LOGS.get_or_init(|| {
        let (plain, quiet) = (CapturedLogs::default(), CapturedLogs::default());
        tracing_subscriber::registry()
            .with(layer(&plain).with_filter(tracing_subscriber::filter::LevelFilter::WARN))
            .with(layer(&quiet).with_filter(tracing_subscriber::EnvFilter::new(QUIET_FRED)))
            .try_init()
            .expect("the only global subscriber of this binary");
        (plain, quiet)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_filter_quiets_freds_warnings_when_redis_goes_away() {
    let (plain, quiet) = logs();

    let (mut redis, [lock]) = common::server_with().await;
    redis.kill().await.unwrap();
    let fred_warned = eventually(Duration::from_secs(30), || async {
        plain.text().lines().any(|l| l.contains(" WARN fred::"))
    })
    .await;
    assert!(
        fred_warned,
        "fred logged no WARN under a `fred::` target within 30 s of Redis going away:\n{}",
        plain.text()
    );
    let leaked: Vec<String> = quiet
        .text()
        .lines()
        .filter(|l| l.contains("fred::"))
        .map(str::to_owned)
        .collect();
    assert!(
        leaked.is_empty(),
        "{QUIET_FRED:?} let fred's lines through: {leaked:#?}"
    );
    drop(lock);
}

/// A service stopping while Redis is away drops clients fred has no connection for: asking fred
/// to quit them would log a `WARN` (an alert, for on-call) about nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dropped_while_redis_is_away_logs_no_quit_warning() {
    let (plain, _) = logs();
    let closed = lock_testkit::ClosedPort::new().unwrap();
    let lock = common::try_connect(common::config_at(format!(
        "redis://127.0.0.1:{}",
        closed.port()
    )))
    .await
    .expect("a service starts while Redis is away");
    drop(lock);
    // The warning came within milliseconds of the drop when it was logged.
    let warned = eventually(Duration::from_secs(2), || async {
        plain.text().contains("already stopped")
    })
    .await;
    assert!(!warned, "{}", plain.text());
}
