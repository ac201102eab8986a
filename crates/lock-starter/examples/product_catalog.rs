//! A product-catalog lookup through the shared cache `products` (cache-aside): a miss asks the
//! slow catalog once and caches the answer for every replica; a price change puts the new
//! product, and Redis pushes the change to every replica's in-process tier.
//!
//! The writer looks the product up once, then takes new prices on stdin, one number of cents a
//! line; the reader looks the product up every `--every` until its input ends. Run one of each:
//!
//! ```text
//! export TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379
//! export TELCO_PLATFORM_LOCK_CACHE_NEAR_CACHE_ENTRIES=1000
//! POD_NAME=writer cargo run -p lock-starter --example product_catalog -- --role writer   # then type 3900
//! POD_NAME=reader cargo run -p lock-starter --example product_catalog -- --role reader   # another terminal
//! ```
//!
//! `POD_NAME` names each process in its events; without it both take the host's name.
//!
//! It prints one JSON event per line on stdout (the demo reads them) and logs to stderr. Each
//! `read` says where the product came from, by the cache's own hit counters: `near` (this
//! process's memory), `shared` (Redis) or `loaded` (the catalog); the reader prints a read only
//! when that or the price changed. Exit codes: 0 when stdin ends, 78 bad configuration, 1 the cache
//! failed.

mod common;
#[path = "common/events.rs"]
mod events;

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lock_core::cache::telemetry::{HITS_TOTAL, LOADS_TOTAL};
use lock_starter::prelude::*;
use lock_testkit::metrics::{CapturedMetrics, Recorded};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::mpsc;

use events::{POD, config_error, emit, failed, start};

/// The cache's name; every replica uses the same one.
const CACHE: &str = "products";

#[derive(Debug, Parser)]
#[command(about = "Look a product up through the shared cache, and change its price")]
struct Args {
    /// `writer`: look the product up once, then put each price read from stdin; `reader`: look
    /// it up every `--every` until stdin ends.
    #[arg(long, value_enum)]
    role: Role,
    /// The product.
    #[arg(long, default_value = "sku-42")]
    sku: String,
    /// The catalog's price of the product until the writer changes it, in cents.
    #[arg(long, default_value_t = 4200)]
    price_cents: u64,
    /// How long one catalog call takes, e.g. 800ms.
    #[arg(long, default_value = "800ms", value_parser = humantime::parse_duration)]
    catalog_time: Duration,
    /// How often the reader looks the product up, e.g. 100ms.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    every: Duration,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    Writer,
    Reader,
}

/// What the cache holds: one product of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Product {
    sku: String,
    name: String,
    price_cents: u64,
}

/// The system of record, simulated: slow to ask, its price changed by the writer.
struct Catalog {
    call_time: Duration,
    price_cents: AtomicU64,
}

impl Catalog {
    /// Asks the catalog for `sku`, as a loader does on a miss.
    async fn fetch(&self, sku: &str) -> Result<Product, Infallible> {
        emit("catalog_call", json!({ "sku": sku }));
        tokio::time::sleep(self.call_time).await;
        Ok(Product {
            sku: sku.to_owned(),
            name: "Fibre 1000".to_owned(),
            price_cents: self.price_cents.load(Ordering::Relaxed),
        })
    }
}

/// The cache `products` and the counters that tell where each of its reads was served from.
struct Products {
    cache: Cache<Product>,
    counters: CapturedMetrics,
    catalog: Catalog,
}

impl Products {
    /// Looks `sku` up through the cache (the catalog on a miss); also says where it came from.
    async fn lookup(&self, sku: &str) -> Result<(Product, &'static str), CacheError> {
        self.counters.take();
        let product = self
            .cache
            .get_or_load(sku, || self.catalog.fetch(sku))
            .await?;
        Ok((product, served_from(&self.counters.take())))
    }
}

/// Where the one read counted in `recorded` was served from.
fn served_from(recorded: &Recorded) -> &'static str {
    let counted = |name: &str, label: &str, value: &str| {
        recorded.counter_at(name, &format!("cache={CACHE},{label}={value}")) > 0
    };
    if counted(HITS_TOTAL, "tier", "near") {
        "near"
    } else if counted(HITS_TOTAL, "tier", "shared") {
        "shared"
    } else if counted(LOADS_TOTAL, "outcome", "loaded") {
        "loaded"
    } else {
        "unknown"
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    common::log_to_stderr();
    let args = Args::parse();
    let starter = match start(None).await {
        Ok(starter) => starter,
        Err(code) => return code,
    };
    let _ = POD.set(starter.settings().instance_id.clone());
    // The cache registers its metric handles as it is built: here into a capturing recorder, so
    // each read can say which tier served it. A service installs its exporter instead.
    let counters = CapturedMetrics::new();
    let cache = match metrics::with_local_recorder(counters.recorder(), || starter.cache(CACHE)) {
        Ok(cache) => cache,
        Err(error) => return config_error(error),
    };
    let products = Products {
        cache,
        counters,
        catalog: Catalog {
            call_time: args.catalog_time,
            price_cents: AtomicU64::new(args.price_cents),
        },
    };
    let role = match args.role {
        Role::Writer => "writer",
        Role::Reader => "reader",
    };
    emit(
        "started",
        json!({
            "role": role, "sku": args.sku,
            "near_cache_entries": starter.settings().cache_of(CACHE).near_cache_entries,
        }),
    );
    let input = stdin_lines();
    let outcome = match args.role {
        Role::Writer => write(&args, &products, input).await,
        Role::Reader => read(&args, &products, input).await,
    };
    let code = match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => failed(&error),
    };
    starter.shutdown().await;
    code
}

/// The writer: one lookup, then a price change per line of input, each put into the cache.
async fn write(
    args: &Args,
    products: &Products,
    mut input: mpsc::UnboundedReceiver<String>,
) -> Result<(), CacheError> {
    let (product, from) = products.lookup(&args.sku).await?;
    emit_read(&product, from);
    while let Some(line) = input.recv().await {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Ok(price_cents) = line.parse::<u64>() else {
            emit(
                "bad_input",
                json!({ "line": line, "expected": "a price in cents, such as 3900" }),
            );
            continue;
        };
        // The catalog changes first, then the cache: a load from now on finds the new price.
        products
            .catalog
            .price_cents
            .store(price_cents, Ordering::Relaxed);
        let changed = Product {
            price_cents,
            ..product.clone()
        };
        let put_started_us = events::now_us();
        products.cache.put(&args.sku, &changed).await?;
        emit(
            "price_changed",
            json!({ "sku": args.sku, "price_cents": price_cents, "put_started_us": put_started_us }),
        );
    }
    emit("done", json!({}));
    Ok(())
}

/// The reader: a lookup every `--every` until the input ends, printing each change of the
/// price or of where it came from, then the totals.
async fn read(
    args: &Args,
    products: &Products,
    mut input: mpsc::UnboundedReceiver<String>,
) -> Result<(), CacheError> {
    let mut tick = tokio::time::interval(args.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut reads, mut near, mut shared, mut loaded) = (0u64, 0u64, 0u64, 0u64);
    let mut last: Option<(u64, &str)> = None;
    loop {
        tokio::select! {
            line = input.recv() => match line {
                Some(_) => continue,
                None => break,
            },
            _ = tick.tick() => {}
        }
        let (product, from) = products.lookup(&args.sku).await?;
        reads += 1;
        match from {
            "near" => near += 1,
            "shared" => shared += 1,
            "loaded" => loaded += 1,
            _ => {}
        }
        if last != Some((product.price_cents, from)) {
            emit_read(&product, from);
            last = Some((product.price_cents, from));
        }
    }
    emit(
        "done",
        json!({ "reads": reads, "near": near, "shared": shared, "loaded": loaded }),
    );
    Ok(())
}

/// Prints a `read` event: the product's price and where it was served from.
fn emit_read(product: &Product, from: &str) {
    emit(
        "read",
        json!({ "sku": product.sku, "price_cents": product.price_cents, "served_from": from }),
    );
}

/// The lines of stdin as they come, read on a thread of their own; the channel closes when
/// the input ends.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
