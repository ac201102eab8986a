//! lock-redis' integration tests against real redis-server processes (Sentinel and Cluster
//! included), one module per behaviour, in one test binary: one link instead of one per file.
//! Tests that install a process-wide log subscriber or capture have binaries of their own
//! (`behaviour`, `credentials`, `watchdog`, `debug_events`, `fred_logs`, `local_queue`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../sentinel_common/mod.rs"]
mod sentinel_common;

mod acl;
mod branches;
mod branches_cluster;
mod branches_processes;
mod cluster;
mod cluster_coverage;
mod cluster_failover;
mod cluster_replication;
mod conformance;
mod drop_safety;
mod exclusion_under_faults;
mod fair;
mod fair_under_faults;
mod fencing;
mod first_connection;
mod handle_drop;
mod held_by_this_process;
mod hold_at_least;
mod idempotency;
mod idempotency_edges;
mod key_encoding;
mod lost_connection;
mod lost_lease;
mod lost_replies;
mod ops;
mod ops_names_and_prefixes;
mod out_of_memory;
mod outcome_unknown;
mod owners;
mod pubsub_blackhole;
mod queue_stress;
mod queue_wakeups;
mod redis_errors;
mod replication;
mod resubscribe;
mod sentinel;
mod sentinel_deployments;
mod sentinel_key_loss;
mod shutdown;
mod subscriptions;
mod telemetry;
mod telemetry_counts;
mod tls;
