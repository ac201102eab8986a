//! What a replica-acknowledged grant (`min_replicas`) costs per acquire, measured on private
//! loopback Redis deployments started by lock-testkit:
//!
//! ```sh
//! cargo run --release -p lock-redis --example replication_cost -- --duration 5
//! ```
//!
//! Each case runs the peers' `uncontended` cycle (one worker, keys `bench:u:<i mod 1000>`,
//! acquire with a 10 s fixed lease, release, no hold) for `--duration` seconds and prints one
//! table row and one JSON line: acquire and release latency percentiles in microseconds and
//! cycles per second. The numbers are for comparing the cases with each other on one machine;
//! absolute figures on a noisy 2-core machine mean little.

use std::time::{Duration, Instant};

use clap::Parser;
use lock_core::lock::{DistributedLock, Lease, ReleaseOutcome};
use lock_redis::lock::{RedisLock, RedisLockConfig};
use lock_redis::{RedisClient, RedisConfig};
use lock_testkit::{RedisCluster, RedisServer};

#[derive(Parser)]
#[command(about = "Per-acquire cost of min-replicas (Redis WAIT) on loopback deployments")]
struct Args {
    /// Seconds each case runs.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Also measure a 3-master Redis Cluster with one replica each (takes ~10 s to start).
    #[arg(long)]
    cluster: bool,
}

/// Latencies of one case, in microseconds.
struct Samples {
    acquire: Vec<u64>,
    release: Vec<u64>,
    elapsed: Duration,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

async fn run_case((redis, config): (RedisConfig, RedisLockConfig), duration: Duration) -> Samples {
    let redis = RedisClient::connect(redis).await.expect("connect");
    let lock = RedisLock::new(&redis, config).expect("lock settings");
    let mut samples = Samples {
        acquire: Vec::new(),
        release: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let lease = Lease::Fixed(Duration::from_secs(10));
    // Warm-up: scripts loaded, connections up, replica links busy.
    for i in 0..200 {
        let handle = lock.acquire(&format!("bench:u:{}", i % 1000), lease).await;
        let released = handle.expect("warm-up acquire").release().await;
        assert_eq!(released.expect("release"), ReleaseOutcome::Released);
    }
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < duration {
        let key = format!("bench:u:{}", i % 1000);
        let t0 = Instant::now();
        let handle = lock.acquire(&key, lease).await.expect("acquire");
        let t1 = Instant::now();
        let released = handle.release().await.expect("release");
        let t2 = Instant::now();
        assert_eq!(released, ReleaseOutcome::Released, "{key}");
        samples.acquire.push((t1 - t0).as_micros() as u64);
        samples.release.push((t2 - t1).as_micros() as u64);
        i += 1;
    }
    samples.elapsed = start.elapsed();
    samples
}

fn report(name: &str, min_replicas: u32, mut samples: Samples) {
    samples.acquire.sort_unstable();
    samples.release.sort_unstable();
    let cycles = samples.acquire.len();
    let per_sec = cycles as f64 / samples.elapsed.as_secs_f64();
    let (a50, a99) = (
        percentile(&samples.acquire, 50.0),
        percentile(&samples.acquire, 99.0),
    );
    let (r50, r99) = (
        percentile(&samples.release, 50.0),
        percentile(&samples.release, 99.0),
    );
    println!(
        "{name:<31} min-replicas={min_replicas}  acquire p50 {a50:>5} µs  p99 {a99:>6} µs  \
         release p50 {r50:>5} µs  p99 {r99:>6} µs  {per_sec:>7.0} cycles/s"
    );
    println!(
        "{}",
        serde_json::json!({
            "impl": "platform-lock",
            "scenario": "uncontended",
            "deployment": name,
            "min_replicas": min_replicas,
            "cycles": cycles,
            "cycles_per_sec": per_sec.round(),
            "acquire_us": {"p50": a50, "p99": a99},
            "release_us": {"p50": r50, "p99": r99},
        })
    );
}

fn config(address: String, min_replicas: u32) -> (RedisConfig, RedisLockConfig) {
    (
        RedisConfig::new(address).instance_id("replication-cost"),
        RedisLockConfig::default().min_replicas(min_replicas),
    )
}

async fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start().await.expect("primary");
    let replica = RedisServer::start().await.expect("replica");
    replica
        .cmd(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()])
        .await
        .expect("REPLICAOF");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = replica.cmd(&["INFO", "replication"]).await.expect("INFO");
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (primary, replica)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let duration = Duration::from_secs(args.duration);

    let alone = RedisServer::start().await.expect("redis-server");
    report(
        "single, no replica",
        0,
        run_case(config(alone.url(), 0), duration).await,
    );
    drop(alone);

    let (primary, _replica) = primary_with_replica().await;
    for min_replicas in [0, 1] {
        let config = config(primary.url(), min_replicas);
        report(
            "primary + 1 replica",
            min_replicas,
            run_case(config, duration).await,
        );
    }

    if args.cluster {
        let cluster = RedisCluster::start().await.expect("cluster");
        for min_replicas in [0, 1] {
            let config = config(cluster.url(), min_replicas);
            report(
                "cluster 3 x (master + replica)",
                min_replicas,
                run_case(config, duration).await,
            );
        }
    }
}
