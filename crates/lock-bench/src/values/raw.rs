//! The `raw` lines of the shared-values scenarios: the plain Redis commands each stands on, run
//! by `redis-benchmark` with one connection and one request in flight (`-c 1 -P 1`), as the
//! idempotency `raw` lines are.
//!
//! - `values-get`: `GET`.
//! - `values-set`: `SET … PX` then `SPUBLISH` of the value.
//! - `values-cas`: `GET`, `SET … PX`, `SPUBLISH`.
//! - `values-queue`: `XADD` (a take and acknowledgement need a consumer group redis-benchmark
//!   cannot set up per key).
//!
//! No line for the waits: plain commands do not wait.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::idempotency::raw::measure_commands;
use crate::redis::Target;
use crate::values::Scenario;

const VALUE: &str = "1764500000123456:42";

fn commands(scenario: Scenario) -> Option<Vec<Vec<String>>> {
    let owned = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    let key = "bench:v:raw:{__rand_int__}";
    let channel = "bench:v:raw:{__rand_int__}:written";
    let get = owned(&["GET", key]);
    let set = owned(&["SET", key, VALUE, "PX", "60000"]);
    let publish = owned(&["SPUBLISH", channel, VALUE]);
    match scenario {
        Scenario::Get => Some(vec![get]),
        Scenario::Set => Some(vec![set, publish]),
        Scenario::Cas => Some(vec![get, set, publish]),
        Scenario::Queue => Some(vec![owned(&[
            "XADD",
            "bench:v:raw:queue",
            "MAXLEN",
            "~",
            "10000",
            "*",
            "i",
            "42",
        ])]),
        Scenario::Wake | Scenario::Fanout => None,
    }
}

/// The `raw` line of `scenario`, run for about `duration`; `None` for the waits.
///
/// # Errors
/// When redis-benchmark is missing or fails.
pub(crate) async fn run(
    scenario: Scenario,
    target: &Target,
    duration: Duration,
) -> Option<Result<Map<String, Value>, String>> {
    let commands = commands(scenario)?;
    let name = scenario.name();
    Some(measure_commands(name, name, target, duration, commands).await)
}
