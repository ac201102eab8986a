//! The shared-values scene: four replicas start at once and all need the catalog. One loads it
//! under a single-flight guard while the others wait; the loader is killed mid-load, its guard
//! expires, and one waiter takes the load over while the rest wait for it.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{Checks, Event, Timeline, next_event, now_us, pod_command, sibling_binary, spawn};

const REPLICAS: u32 = 4;
const STEPS: u32 = 5;
const STEP_TIME: &str = "400ms";
const GUARD_TTL: &str = "2s";
/// The loader is killed after this many steps.
const KILL_AFTER_STEPS: u64 = 2;
/// How late after the kill the takeover may come: the guard expires at most one TTL after its
/// last renewal, and a waiter looks again every third of the TTL; plus slack.
const TAKEOVER_BOUND: Duration = Duration::from_millis(2_000 * 4 / 3 + 2_000);

/// Runs the scene on the Redis at `address`; returns whether its checks passed.
pub(super) async fn run(address: &str) -> Result<bool, String> {
    let binary = sibling_binary("catalog_warmup")?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut timeline = Timeline {
        start_us: now_us(),
        events: Vec::new(),
    };
    println!();
    println!("Shared values: {REPLICAS} replicas start at once and all need the catalog");
    println!(
        "  one loads it ({STEPS} steps of {STEP_TIME}) under a single-flight guard (TTL {GUARD_TTL}, renewed every third); the others wait"
    );
    let start_at = now_us() / 1000 + super::START_DELAY.as_millis() as u64;
    let mut replicas = Vec::new();
    for n in 1..=REPLICAS {
        let name = format!("app-{n}");
        let mut command = pod_command(&binary, &name, address);
        command
            .args(["--steps", &STEPS.to_string(), "--step-time", STEP_TIME])
            .args(["--guard-ttl", GUARD_TTL, "--wait", "30s"])
            .arg(format!("--start-at-unix-ms={start_at}"));
        replicas.push((name.clone(), spawn(command, &name, &tx)?));
    }
    drop(tx);
    let loader = loop {
        let event = next_event(&mut rx).await?;
        timeline.show(&event);
        let kill = event.event == "step" && event.fields["step"].as_u64() == Some(KILL_AFTER_STEPS);
        let pod = event.pod.clone();
        timeline.events.push(event);
        if kill {
            break pod;
        }
    };
    let (_, child) = replicas
        .iter_mut()
        .find(|(name, _)| *name == loader)
        .expect("the loader is a replica");
    timeline.kill(&loader, child).await?;
    while let Some(event) = tokio::time::timeout(super::DEADLINE, rx.recv())
        .await
        .map_err(|_| "a replica hangs: no event for 90 s".to_owned())?
    {
        if event.event != "exited" {
            timeline.record(event);
        }
    }
    for (_, mut child) in replicas {
        let _ = child.wait().await;
    }
    Ok(check(&timeline, &loader))
}

/// Checks the scene's timeline; prints one line per check.
fn check(timeline: &Timeline, loader: &str) -> bool {
    let events = &timeline.events;
    println!();
    let mut checks = Checks::new();
    let killed_at = events
        .iter()
        .find(|e| e.event == "killed")
        .map_or(0, |e| e.t_us);
    let loading: Vec<&Event> = events.iter().filter(|e| e.event == "loading").collect();
    let before = loading.iter().filter(|e| e.t_us < killed_at).count();
    checks.report(
        before == 1,
        format!("one replica loaded the catalog, the others waited ({before} loading)"),
    );
    let takeover: Vec<&&Event> = loading.iter().filter(|e| e.t_us > killed_at).collect();
    match takeover[..] {
        [next] => {
            let lapse = Duration::from_micros(next.t_us - killed_at);
            checks.report(
                lapse <= TAKEOVER_BOUND,
                format!(
                    "{} took the load over {:.2}s after {loader} was killed (bound: 4/3 of the guard TTL + 2 s)",
                    next.pod,
                    lapse.as_secs_f64()
                ),
            );
            let new_loader = next.pod.as_str();
            let joined: Vec<&Event> = events.iter().filter(|e| e.event == "joined").collect();
            let all_joined = joined
                .iter()
                .all(|e| e.fields["loaded_by"].as_str() == Some(new_loader));
            let loaded = events.iter().filter(|e| e.event == "loaded").count();
            checks.report(
                loaded == 1 && joined.len() == REPLICAS as usize - 2 && all_joined,
                format!(
                    "the other {} replicas got {new_loader}'s catalog without loading it ({} joined, {loaded} loaded)",
                    REPLICAS - 2,
                    joined.len()
                ),
            );
        }
        _ => checks.report(
            false,
            format!(
                "exactly one replica took the load over ({})",
                takeover.len()
            ),
        ),
    }
    let failed: Vec<&Event> = events
        .iter()
        .filter(|e| {
            matches!(
                e.event.as_str(),
                "failed" | "still_loading" | "config_error"
            )
        })
        .collect();
    checks.report(
        failed.is_empty(),
        format!("no replica failed or gave up ({})", failed.len()),
    );
    checks.passed()
}
