//! The `raw` line of `branches-register-release`: the plain Redis commands one branch stands
//! on, `HSET <record> b:<branch> 0` (register) then `HSET <record> b:<branch> 1` (release), run
//! by `redis-benchmark` with one connection and one request in flight (`-c 1 -P 1`), on random
//! records, as the idempotency `raw` lines are: calls/s from the two commands' rates, `call_us`
//! the sum of their percentiles. What the scripts add on top (the record's state check, the
//! `PEXPIRE … GT`, the release's `SPUBLISH`) is the gap between the two lines.
//!
//! No `branches-master` line: plain commands have no master to acquire, seal or wait for.

use crate::branches::Scenario;
use crate::idempotency::raw::owned;

/// The commands of one register + release pair, in redis-benchmark's `__rand_int__` form;
/// `None` for `branches-master`.
pub(crate) fn commands(scenario: Scenario) -> Option<Vec<Vec<String>>> {
    let record = "bench:b:raw:{__rand_int__}:1";
    match scenario {
        Scenario::RegisterRelease => Some(vec![
            owned(&["HSET", record, "b:b1", "0"]),
            owned(&["HSET", record, "b:b1", "1"]),
        ]),
        Scenario::Master => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_is_two_hsets_of_one_field() {
        let pair = commands(Scenario::RegisterRelease).expect("register-release");
        assert_eq!(pair.len(), 2);
        assert!(pair.iter().all(|c| c[0] == "HSET" && c[2] == "b:b1"));
        assert_eq!((pair[0][3].as_str(), pair[1][3].as_str()), ("0", "1"));
        assert!(commands(Scenario::Master).is_none());
    }
}
