//! The fault suite, short form: for every fault (the `-synced` failovers and the kills of a
//! primary run in the soak only),
//! 8 worker processes on one key for a few seconds while the fault is injected over and over; the
//! recorded history must show no duplicate token, no accepted stale write, no lost acknowledged
//! write, only explained overlaps, only typed fail-closed errors, no key left without a TTL, and
//! a killed holder's lock free within its lease + 1 s. Then each toolkit workload under the four
//! faults that test it most, its history held to its own checker. `lock-stress` runs every
//! workload under every fault, for longer.

use platform_lock_tests::stress::{Fault, Scenario, Workload, run};

/// One scenario at a time: each runs 8 processes, and the machine may have 2 cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn check(workload: Workload, fault: Fault) {
    let _one_at_a_time = SERIAL.lock().await;
    let scenario = Scenario::short(workload, fault, env!("CARGO_BIN_EXE_lock-worker"));
    let result = run(&scenario)
        .await
        .unwrap_or_else(|e| panic!("{workload} under {fault}: {e}"));
    println!("{}", result.row());
    match &result.verdict {
        Some(verdict) => println!("{verdict:#?}"),
        None => println!("{}", result.report),
    }
    let problems = result.problems();
    assert!(
        problems.is_empty(),
        "{workload} under {fault}:\n{}",
        problems.join("\n")
    );
}

macro_rules! faults {
    ($workload:expr => $($name:ident => $fault:expr),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                check($workload, $fault).await;
            }
        )+
    };
}

faults! {
    Workload::Lock =>
    no_fault => Fault::None,
    holder_killed => Fault::KillHolder,
    holder_paused_past_its_lease => Fault::PauseHolder,
    redis_paused => Fault::PauseRedis,
    redis_restarted_without_persistence => Fault::RestartRedis,
    connections_killed => Fault::ClientKill,
    scripts_flushed => Fault::ScriptFlush,
    keys_evicted => Fault::Evict,
    latency_added => Fault::Latency,
    connections_dropped => Fault::DropConnections,
    sentinel_failover => Fault::SentinelFailover,
    lagging_replica_promoted => Fault::SentinelLaggingFailover,
    cluster_failover => Fault::ClusterFailover,
    cluster_slot_migrated => Fault::ClusterMigrateSlot,
}

mod idempotency {
    use super::*;
    faults! {
        Workload::Idempotency =>
        owner_killed => Fault::KillHolder,
        redis_paused => Fault::PauseRedis,
        connections_killed => Fault::ClientKill,
        sentinel_failover => Fault::SentinelFailover,
    }
}

mod values {
    use super::*;
    faults! {
        Workload::Values =>
        connections_killed => Fault::ClientKill,
        connections_dropped => Fault::DropConnections,
        redis_restarted_without_persistence => Fault::RestartRedis,
        sentinel_failover => Fault::SentinelFailover,
    }
}

mod single_flight {
    use super::*;
    faults! {
        Workload::SingleFlight =>
        runner_killed => Fault::KillHolder,
        runner_paused => Fault::PauseHolder,
        redis_paused => Fault::PauseRedis,
        connections_killed => Fault::ClientKill,
    }
}

mod queue {
    use super::*;
    faults! {
        Workload::Queue =>
        consumer_killed => Fault::KillHolder,
        consumer_paused => Fault::PauseHolder,
        connections_killed => Fault::ClientKill,
        redis_restarted_without_persistence => Fault::RestartRedis,
    }
}

mod rate_limit {
    use super::*;
    faults! {
        Workload::RateLimit =>
        redis_restarted_without_persistence => Fault::RestartRedis,
        connections_killed => Fault::ClientKill,
        latency_added => Fault::Latency,
        sentinel_failover => Fault::SentinelFailover,
    }
}

mod cache {
    use super::*;
    faults! {
        Workload::Cache =>
        connections_killed => Fault::ClientKill,
        connections_dropped => Fault::DropConnections,
        reader_paused => Fault::PauseHolder,
        latency_added => Fault::Latency,
    }
}

mod branches {
    use super::*;
    faults! {
        Workload::Branches =>
        master_killed => Fault::KillHolder,
        redis_paused => Fault::PauseRedis,
        connections_killed => Fault::ClientKill,
        sentinel_failover => Fault::SentinelFailover,
    }
}
