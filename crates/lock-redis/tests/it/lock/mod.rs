//! The lock: conformance, fencing, leases, fair queues, the minimum hold, operations and
//! metrics.

mod conformance;
mod drop_safety;
mod exclusion_under_faults;
mod fair;
mod fair_under_faults;
mod fencing;
mod handle_drop;
mod held_by_this_process;
mod hold_at_least;
mod lost_lease;
mod lost_replies;
mod ops;
mod ops_names_and_prefixes;
mod outcome_unknown;
mod owners;
mod queue_stress;
mod queue_wakeups;
mod shutdown;
mod telemetry;
mod telemetry_counts;
