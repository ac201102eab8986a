//! The cache scene: two pods share the cache `products` with the in-process tier on. One looks
//! a product up (the catalog is asked once), the other reads it from Redis and then from its own
//! memory; the first changes the price with a put, and Redis' push evicts the other's copy, so
//! it sees the new price within milliseconds instead of at the entry's TTL.

use std::process::Stdio;
use std::time::Duration;

use lock_starter::figment::Figment;
use lock_starter::figment::providers::Serialized;
use lock_starter::prelude::*;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use super::{Checks, Event, Timeline, next_event, now_us, pod_command, sibling_binary, spawn};

const CACHE: &str = "products";
const SKU: &str = "sku-42";
/// The catalog's price before the change, in cents.
const OLD_PRICE: u64 = 4200;
/// The price the writer changes it to, in cents.
const NEW_PRICE: u64 = 3900;
const CATALOG_TIME: &str = "800ms";
/// How often the reader looks the product up: the resolution of the measured delay.
const READ_EVERY: &str = "2ms";
const NEAR_CACHE_ENTRIES: &str = "100";
/// The entries' TTL: far longer than the scene, so only the push can evict the reader's copy.
const CACHE_TTL: &str = "10m";
/// How soon after the writer's put returned the reader must see the new price.
const SEEN_BOUND: Duration = Duration::from_secs(2);
/// How long the reader keeps reading past that bound, to show it never goes back to the old one.
const WATCH_PAST_BOUND: Duration = Duration::from_secs(1);
/// How long each step may take to show in the pods' events: the catalog call, a pod's start.
const STEP_DEADLINE: Duration = Duration::from_secs(15);

const WRITER: &str = "shop-a";
const READER: &str = "shop-b";

/// Runs the scene on the Redis at `address`; returns whether its checks passed.
pub(super) async fn run(address: &str) -> Result<bool, String> {
    let binary = sibling_binary("product_catalog")?;
    clear(address).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut timeline = Timeline {
        start_us: now_us(),
        events: Vec::new(),
    };
    println!();
    println!(
        "Cache: two pods share the cache `{CACHE}` with the in-process tier on (near-cache-entries {NEAR_CACHE_ENTRIES}, TTL {CACHE_TTL})"
    );
    println!(
        "  {WRITER} looks {SKU} up (the catalog takes {CATALOG_TIME}) and later changes its price with a put;"
    );
    println!(
        "  {READER} reads it every {READ_EVERY} and must see the change by Redis' push, not by the TTL"
    );
    let pod = |name: &str, role: &str| {
        let mut command = pod_command(&binary, name, address);
        command
            .env(
                "TELCO_PLATFORM_LOCK_CACHE_NEAR_CACHE_ENTRIES",
                NEAR_CACHE_ENTRIES,
            )
            .env("TELCO_PLATFORM_LOCK_CACHE_TTL", CACHE_TTL)
            .args(["--role", role, "--sku", SKU])
            .args(["--price-cents", &OLD_PRICE.to_string()])
            .args(["--catalog-time", CATALOG_TIME, "--every", READ_EVERY])
            .stdin(Stdio::piped());
        command
    };

    let mut writer = spawn(pod(WRITER, "writer"), WRITER, &tx)?;
    let mut writer_input = input(&mut writer, WRITER)?;
    until(&mut rx, &mut timeline, "the writer's first lookup", |e| {
        e.pod == WRITER && e.event == "read"
    })
    .await?;

    let mut reader = spawn(pod(READER, "reader"), READER, &tx)?;
    drop(tx);
    let reader_input = input(&mut reader, READER)?;
    until(
        &mut rx,
        &mut timeline,
        "a read from the reader's memory",
        |e| e.pod == READER && e.event == "read" && e.fields["served_from"] == "near",
    )
    .await?;

    writer_input
        .write_all(format!("{NEW_PRICE}\n").as_bytes())
        .await
        .map_err(|e| format!("{WRITER}'s stdin: {e}"))?;
    let put = until(&mut rx, &mut timeline, "the writer's price change", |e| {
        e.pod == WRITER && e.event == "price_changed"
    })
    .await?;

    // Whether and when the reader sees the new price, and that it never goes back: its reads
    // until past the bound (the checks judge them).
    let watch_until = put.t_us + (SEEN_BOUND + WATCH_PAST_BOUND).as_micros() as u64;
    let left = Duration::from_micros(watch_until.saturating_sub(now_us()));
    let window_end = tokio::time::Instant::now() + left;
    while let Ok(event) = tokio::time::timeout_at(window_end, next_event(&mut rx)).await {
        keep(&mut timeline, event?)?;
    }

    // The end of their input ends both pods.
    drop(writer_input);
    drop(reader_input);
    while let Some(event) = tokio::time::timeout(super::DEADLINE, rx.recv())
        .await
        .map_err(|_| "a pod hangs: no event for 90 s".to_owned())?
    {
        if event.event != "exited" {
            timeline.record(event);
        }
    }
    let mut exits = Vec::new();
    for (name, mut child) in [(WRITER, writer), (READER, reader)] {
        let status = child.wait().await.map_err(|e| format!("{name}: {e}"))?;
        if !status.success() {
            exits.push(format!("{name} exited with {status}"));
        }
    }
    Ok(check(&timeline, &exits))
}

/// Empties the cache under the demo's prefix: on a Redis of your own, a previous run's entry
/// would be a hit where the scene needs the catalog to be asked.
async fn clear(address: &str) -> Result<(), String> {
    let settings = Figment::new()
        .merge(Serialized::default(
            "telco.platform.lock.redis.address",
            address,
        ))
        .merge(Serialized::default(
            "telco.platform.lock.key-prefix",
            super::KEY_PREFIX,
        ))
        .merge(Serialized::default(
            "telco.platform.lock.instance-id",
            "demo",
        ));
    let starter = LockStarter::builder()
        .figment(settings)
        .build()
        .await
        .map_err(|e| format!("connecting to clear the cache {CACHE}: {e}"))?;
    let cleared = match starter.cache::<serde_json::Value>(CACHE) {
        Ok(cache) => cache.clear().await.map(drop),
        Err(error) => Err(error),
    };
    starter.shutdown().await;
    cleared.map_err(|e| format!("clearing the cache {CACHE}: {e}"))
}

/// The stdin of a pod spawned with a piped one.
fn input(child: &mut Child, name: &str) -> Result<ChildStdin, String> {
    child
        .stdin
        .take()
        .ok_or_else(|| format!("{name} has no stdin to write to"))
}

/// Shows and keeps events until one is `wanted`, which it returns; fails if a pod exits first
/// or none comes within the step deadline.
async fn until(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    timeline: &mut Timeline,
    what: &str,
    wanted: impl Fn(&Event) -> bool,
) -> Result<Event, String> {
    let waited = tokio::time::timeout(STEP_DEADLINE, async {
        loop {
            let event = next_event(rx).await?;
            let found = wanted(&event);
            keep(timeline, event.clone())
                .map_err(|exit| format!("{exit} while the scene waited for {what} (see above)"))?;
            if found {
                return Ok(event);
            }
        }
    })
    .await;
    waited.unwrap_or_else(|_| {
        Err(format!(
            "{what} did not come within {} s (see above)",
            STEP_DEADLINE.as_secs()
        ))
    })
}

/// Shows `event` and keeps it in the timeline; a pod exiting this early is an error.
fn keep(timeline: &mut Timeline, event: Event) -> Result<(), String> {
    if event.event == "exited" {
        return Err(format!("{} exited", event.pod));
    }
    timeline.record(event);
    Ok(())
}

/// Checks the scene's timeline; prints one line per check.
fn check(timeline: &Timeline, exits: &[String]) -> bool {
    let events = &timeline.events;
    println!();
    let mut checks = Checks::new();
    let calls: Vec<&str> = events
        .iter()
        .filter(|e| e.event == "catalog_call")
        .map(|e| e.pod.as_str())
        .collect();
    checks.report(
        calls == [WRITER],
        format!(
            "the catalog was asked once across both pods, by {WRITER} (asked by: {})",
            calls.join(", ")
        ),
    );
    let done = events.iter().find(|e| e.pod == READER && e.event == "done");
    let count = |name: &str| done.and_then(|e| e.fields[name].as_u64()).unwrap_or(0);
    checks.report(
        done.is_some() && count("loaded") == 0 && !calls.contains(&READER),
        format!(
            "{READER} never loaded: its {} reads were {} from Redis and {} from memory",
            count("reads"),
            count("shared"),
            count("near")
        ),
    );
    checks.report(
        count("near") > 0,
        format!(
            "{READER} served from its own memory ({} reads without a round trip)",
            count("near")
        ),
    );

    let reads: Vec<&Event> = events
        .iter()
        .filter(|e| e.pod == READER && e.event == "read")
        .collect();
    let put = events
        .iter()
        .find(|e| e.pod == WRITER && e.event == "price_changed");
    let first_new = reads
        .iter()
        .position(|e| e.fields["price_cents"] == NEW_PRICE);
    match (put, first_new) {
        (Some(put), Some(at)) => {
            let watch_until = put.t_us + (SEEN_BOUND + WATCH_PAST_BOUND).as_micros() as u64;
            let seen = reads[at];
            let delay_ms = (seen.t_us as f64 - put.t_us as f64) / 1e3;
            let when = if delay_ms >= 0.0 {
                format!("{delay_ms:.1} ms after {WRITER}'s put returned")
            } else {
                format!(
                    "{:.1} ms before {WRITER}'s put returned (the push beat the reply)",
                    -delay_ms
                )
            };
            let in_time = seen.t_us <= put.t_us + SEEN_BOUND.as_micros() as u64;
            checks.report(
                in_time,
                format!(
                    "{READER} saw the new price {when} (bound {} s; it reads every {READ_EVERY})",
                    SEEN_BOUND.as_secs()
                ),
            );
            let evicted = at > 0
                && reads[at - 1].fields["served_from"] == "near"
                && seen.fields["served_from"] == "shared";
            checks.report(
                evicted,
                format!(
                    "the push evicted {READER}'s copy, not its TTL ({CACHE_TTL}): its last old read came from memory, its first new one from Redis"
                ),
            );
            let old_after = reads[at..]
                .iter()
                .filter(|e| e.fields["price_cents"] == OLD_PRICE)
                .count();
            let watched = done.is_some_and(|e| e.t_us >= watch_until);
            checks.report(
                old_after == 0 && watched,
                format!(
                    "{READER} never read the old price again, reading until {} s after the put ({old_after} old reads)",
                    (SEEN_BOUND + WATCH_PAST_BOUND).as_secs()
                ),
            );
        }
        (None, _) => checks.report(false, format!("{WRITER} changed the price")),
        (Some(_), None) => checks.report(
            false,
            format!(
                "{READER} saw the new price (not in the {} s it kept reading)",
                (SEEN_BOUND + WATCH_PAST_BOUND).as_secs()
            ),
        ),
    }
    let failed: Vec<String> = events
        .iter()
        .filter(|e| matches!(e.event.as_str(), "failed" | "config_error" | "bad_input"))
        .map(|e| format!("{} {}", e.pod, e.event))
        .chain(exits.iter().cloned())
        .collect();
    checks.report(
        failed.is_empty(),
        if failed.is_empty() {
            "both pods ran and exited cleanly".to_owned()
        } else {
            format!("both pods ran and exited cleanly: {}", failed.join("; "))
        },
    );
    checks.passed()
}
