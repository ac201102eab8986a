//! The rate-limiting scene: three gateway replicas offer one client's requests as fast as they
//! can, each checking the limit they share on Redis; together they are admitted no more than the
//! limit allows, however the requests fall across replicas.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{Checks, Event, Timeline, next_event, now_us, pod_command, sibling_binary, spawn};

const REPLICAS: u32 = 3;
const RATE: &str = "20/1s";
const BURST: u32 = 10;
const OFFER_FOR: &str = "3s";

/// Runs the scene on the Redis at `address`; returns whether its checks passed.
pub(super) async fn run(address: &str) -> Result<bool, String> {
    let binary = sibling_binary("gateway_replica")?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let timeline = Timeline {
        start_us: now_us(),
        events: Vec::new(),
    };
    println!();
    println!(
        "Rate limiting: {REPLICAS} gateway replicas share the limit `api` ({RATE}, burst {BURST})"
    );
    println!("  each offers client-42's requests as fast as it can for {OFFER_FOR}");
    let start_at = now_us() / 1000 + super::START_DELAY.as_millis() as u64;
    let mut replicas = Vec::new();
    for n in 1..=REPLICAS {
        let name = format!("gw-{n}");
        let mut command = pod_command(&binary, &name, address);
        command
            .env("TELCO_PLATFORM_LOCK_RATE_LIMITS_API_RATE", RATE)
            .env(
                "TELCO_PLATFORM_LOCK_RATE_LIMITS_API_BURST",
                BURST.to_string(),
            )
            .args(["--for", OFFER_FOR])
            .arg(format!("--start-at-unix-ms={start_at}"));
        replicas.push(spawn(command, &name, &tx)?);
    }
    drop(tx);
    let mut done = Vec::new();
    let mut failed = Vec::new();
    while done.len() + failed.len() < REPLICAS as usize {
        let event = next_event(&mut rx).await?;
        match event.event.as_str() {
            "done" => {
                timeline.show(&event);
                done.push(event);
            }
            "exited" | "log" => {}
            _ => {
                timeline.show(&event);
                failed.push(event);
            }
        }
    }
    for mut child in replicas {
        let _ = child.wait().await;
    }
    Ok(check(&done, failed.len()))
}

/// Checks the replicas' counts against the bound; prints one line per check.
fn check(done: &[Event], failed: usize) -> bool {
    println!();
    let mut checks = Checks::new();
    checks.report(
        failed == 0 && done.len() == REPLICAS as usize,
        format!("every replica ran ({} done, {failed} failed)", done.len()),
    );
    let field = |e: &Event, name: &str| e.fields[name].as_f64().unwrap_or(0.0);
    let admitted: f64 = done.iter().map(|e| field(e, "admitted")).sum();
    let denied: f64 = done.iter().map(|e| field(e, "denied")).sum();
    let first = done
        .iter()
        .map(|e| field(e, "started_us"))
        .fold(f64::MAX, f64::min);
    let last = done.iter().map(|e| e.t_us as f64).fold(0.0, f64::max);
    let seconds = Duration::from_micros((last - first).max(0.0) as u64).as_secs_f64();
    let per_second = done
        .first()
        .map_or(0.0, |e| field(e, "rate") / field(e, "period_s"));
    let bound = f64::from(BURST) + per_second * seconds;
    let spread: Vec<String> = done
        .iter()
        .map(|e| format!("{} {}", e.pod, field(e, "admitted")))
        .collect();
    checks.report(
        admitted <= bound,
        format!(
            "{admitted} admitted of {} offered in {seconds:.2}s ({}): within the bound of burst + rate × time = {bound:.0} (offered more, a GCRA admits up to it)",
            admitted + denied,
            spread.join(", ")
        ),
    );
    checks.report(
        admitted >= per_second * seconds * 0.5,
        format!(
            "the limit admitted at its rate, not less (at least half of {:.0})",
            per_second * seconds
        ),
    );
    checks.passed()
}
