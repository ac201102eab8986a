//! The fault suite, short form: for every fault (the `-synced` failovers and the kills of a
//! primary run in the soak only),
//! 8 worker processes on one key for a few seconds while the fault is injected over and over; the
//! recorded history must show no duplicate token, no accepted stale write, no lost acknowledged
//! write, only explained overlaps, only typed fail-closed errors, no key left without a TTL, and
//! a killed holder's lock free within its lease + 1 s. `lock-stress` runs the same scenarios for
//! longer.

use platform_lock_tests::stress::{Fault, Scenario, Workload, run};

/// One scenario at a time: each runs 8 processes, and the machine may have 2 cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn check(fault: Fault) {
    let _one_at_a_time = SERIAL.lock().await;
    let scenario = Scenario::short(Workload::Lock, fault, env!("CARGO_BIN_EXE_lock-worker"));
    let result = run(&scenario)
        .await
        .unwrap_or_else(|e| panic!("{fault}: {e}"));
    println!("{}", result.table_row());
    println!("{}", result.report);
    let problems = result.problems();
    assert!(problems.is_empty(), "{fault}:\n{}", problems.join("\n"));
}

macro_rules! faults {
    ($($name:ident => $fault:expr),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                check($fault).await;
            }
        )+
    };
}

faults! {
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
