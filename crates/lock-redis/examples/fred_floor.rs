//! The floor under the lock's client-side cost: the peers' `uncontended` and `parallel` cycles
//! as two bare fred `EVALSHA` calls of our acquire and release scripts (no owner tokens, handles,
//! watchdog or re-entry scope), on a private redis-server, for comparing with `lock-bench`:
//!
//! ```sh
//! cargo run --release -p lock-redis --example fred_floor -- --workers 1 --duration 5
//! cargo run --release -p lock-redis --example fred_floor -- --workers 32 --current-thread
//! cargo run --release -p lock-redis --example fred_floor -- --workers 32 --connections 4
//! ```
//!
//! Prints cycles per second and client CPU µs per cycle. If the lock comes close to this, its
//! own layers cost little and the rest is the client library and the runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use fred::prelude::*;
use fred::types::scripts::Script;
use lock_testkit::RedisServer;

#[derive(Parser)]
struct Args {
    /// Concurrent workers (1 = uncontended, 32 = parallel).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Use a current-thread Tokio runtime instead of the multi-thread one.
    #[arg(long)]
    current_thread: bool,
    /// Connections (a fred `Pool`, round robin) instead of one multiplexed connection.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Run fred's connection tasks on a thread of their own (a current-thread runtime) while the
    /// workers stay on the benchmark's runtime.
    #[arg(long)]
    io_thread: bool,
    /// Redis to use instead of a private one.
    #[arg(long)]
    redis_url: Option<String>,
}

fn main() {
    let args = Args::parse();
    let mut runtime = if args.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    runtime
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run(args));
}

async fn run(args: Args) {
    let server;
    let url = match &args.redis_url {
        Some(url) => url.clone(),
        None => {
            server = RedisServer::start().await.expect("redis-server");
            server.url()
        }
    };
    let pool = Builder::from_config(Config::from_url(&url).expect("url"))
        .with_performance_config(|perf| perf.default_command_timeout = Duration::from_secs(2))
        .build_pool(args.connections)
        .expect("client");
    if args.io_thread {
        // fred spawns its connection tasks on the runtime that connects.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let io_pool = pool.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("io runtime");
            runtime.block_on(async move {
                io_pool.init().await.expect("connect");
                let _ = ready_tx.send(());
                std::future::pending::<()>().await;
            });
        });
        ready_rx.await.expect("io thread");
    } else {
        pool.init().await.expect("connect");
    }
    let client = pool.next().clone();
    let acquire = Arc::new(Script::from_lua(lock_redis::scripts::ACQUIRE_SCRIPT));
    let release = Arc::new(Script::from_lua(lock_redis::scripts::RELEASE_SCRIPT));
    acquire.load(&client).await.expect("load");
    release.load(&client).await.expect("load");

    let cycles = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration);
    let tasks: Vec<_> = (0..args.workers)
        .map(|w| {
            let (client, acquire, release, cycles) = (
                client.clone(),
                acquire.clone(),
                release.clone(),
                cycles.clone(),
            );
            tokio::spawn(async move {
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let name = if args.workers == 1 {
                        i % 1000
                    } else {
                        w as u64
                    };
                    let key = format!("lock:{{bench:f:{name}}}");
                    let owner = format!("floor/{w}/{i}");
                    let _: Vec<Value> = acquire
                        .evalsha(&client, key.as_str(), vec![owner.as_str(), "10000"])
                        .await
                        .expect("acquire");
                    let channel = format!("{key}:released");
                    let _: i64 = release
                        .evalsha(
                            &client,
                            key.as_str(),
                            vec![owner.as_str(), channel.as_str(), "10000"],
                        )
                        .await
                        .expect("release");
                    cycles.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("worker");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = cycles.load(Ordering::Relaxed) as f64;
    println!(
        "workers {} connections {} {}: {:.0} cycles/s, client CPU {:.1} µs/cycle",
        args.workers,
        args.connections,
        if args.current_thread {
            "current-thread"
        } else {
            "multi-thread"
        },
        n / elapsed,
        (cpu_seconds() - cpu_before) / n * 1e6
    );
}

fn cpu_seconds() -> f64 {
    let status = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // utime and stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    let fields: Vec<&str> = status
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}
