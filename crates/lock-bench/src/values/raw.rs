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

use crate::idempotency::raw::owned;
use crate::values::Scenario;

const VALUE: &str = "1764500000123456:42";

/// The commands of one call of `scenario`, in redis-benchmark's `__rand_int__` form; `None`
/// for the waits.
pub(crate) fn commands(scenario: Scenario) -> Option<Vec<Vec<String>>> {
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
