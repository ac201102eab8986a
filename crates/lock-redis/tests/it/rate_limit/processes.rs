//! Rate limiting across OS processes whose clocks differ by 30 s (libfaketime on one): the
//! decisions come from Redis' clock, so both processes share one limit exactly.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use common::server;
use lock_core::rate_limit::FailurePolicy;
use lock_testkit::test_child;

const URL: &str = "RATE_LIMIT_CHILD_URL";
const REQUESTS: &str = "RATE_LIMIT_CHILD_REQUESTS";
const RESULT_LINE: &str = "RATE_LIMIT_RESULT ";

/// Debian's libfaketime.
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists());
    found.expect("libfaketime is installed (scripts/ensure-redis.sh installs it)")
}

/// Runs the child with `requests` requests, its clock `offset` off, and returns its result:
/// (admitted, the last retry-after in s, its wall clock in s).
async fn run_child(url: &str, requests: u32, offset: Option<&str>) -> (u32, f64, f64) {
    let mut command = test_child(module_path!(), "child_requests");
    command
        .env(URL, url)
        .env(REQUESTS, requests.to_string())
        .stdout(Stdio::piped());
    if let Some(offset) = offset {
        command
            .env("LD_PRELOAD", libfaketime())
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    let child = command.spawn().expect("start a child");
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(RESULT_LINE).map(|(_, r)| r.to_owned()))
        .unwrap_or_else(|| panic!("the child printed no result: {stdout}"));
    let fields: Vec<f64> = line.split(' ').map(|f| f.parse().unwrap()).collect();
    (fields[0] as u32, fields[1], fields[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_whose_clocks_differ_by_30_s_share_one_limit() {
    let redis = server().await;
    let url = redis.url();
    let (admitted, _, clock) = run_child(&url, 5, None).await;
    assert_eq!(admitted, 5);
    let (skewed_admitted, retry_after, skewed_clock) = run_child(&url, 10, Some("+30s")).await;
    assert!(
        skewed_clock - clock > 25.0,
        "the second child's clock is 30 s ahead: {clock} vs {skewed_clock}"
    );
    assert_eq!(
        skewed_admitted, 5,
        "10 per hour, whichever clock the process has"
    );
    // One request per 6 minutes on Redis' clock, less the time since the first child's charges
    // (a slow start-up takes some); a 30 s skew would show as 330 s or less.
    assert!(
        retry_after > 335.0 && retry_after <= 360.0,
        "retry-after {retry_after} s"
    );
}

/// The body of a child process: makes the requests, prints the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_requests() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let requests: u32 = std::env::var(REQUESTS).unwrap().parse().unwrap();
    let store = super::store(&common::connect(common::default_config(url)).await).await;
    let limiter = super::limiter(&store, "skewed", "10/1h", FailurePolicy::FailClosed);
    let (mut admitted, mut retry_after) = (0, Duration::ZERO);
    for _ in 0..requests {
        let decision = limiter.try_acquire("client", 1).await.unwrap();
        admitted += u32::from(decision.allowed);
        retry_after = decision.retry_after;
    }
    let clock = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    println!(
        "{RESULT_LINE}{admitted} {} {}",
        retry_after.as_secs_f64(),
        clock.as_secs_f64()
    );
}
