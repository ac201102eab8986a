//! The one metric naming scheme: `platform_<capability>_<name>`, where the capability is its
//! module's name (`lock`, `idempotency`, `branches`, `values`, `rate_limit`, `cache`) and the name ends in its unit or `_total`.

/// The metric name `platform_<capability>_<name>`, as a `&'static str` constant.
macro_rules! metric_name {
    ($capability:literal, $name:literal) => {
        concat!("platform_", $capability, "_", $name)
    };
}
pub(crate) use metric_name;

#[cfg(test)]
mod tests {
    use crate::branches::telemetry as branches;
    use crate::cache::telemetry as cache;
    use crate::idempotency::telemetry as idempotency;
    use crate::lock::telemetry as lock;
    use crate::rate_limit::telemetry as rate_limit;
    use crate::values::telemetry as values;

    #[test]
    fn every_metric_is_named_by_the_scheme_once() {
        let names = [
            ("lock", lock::ACQUISITIONS_TOTAL),
            ("lock", lock::FAIL_CLOSED_TOTAL),
            ("lock", lock::WAIT_SECONDS),
            ("lock", lock::RELEASES_TOTAL),
            ("lock", lock::HOLD_SECONDS),
            ("lock", lock::LOST_LEASES_TOTAL),
            ("lock", lock::RENEWALS_TOTAL),
            ("idempotency", idempotency::CALLS_TOTAL),
            ("idempotency", idempotency::NOT_STORED_TOTAL),
            ("branches", branches::REGISTRATIONS_TOTAL),
            ("branches", branches::RELEASES_TOTAL),
            ("branches", branches::MASTER_WAITS_TOTAL),
            ("branches", branches::MASTER_WAIT_SECONDS),
            ("values", values::WRITES_TOTAL),
            ("values", values::WAITS_TOTAL),
            ("values", values::WAIT_SECONDS),
            ("rate_limit", rate_limit::DECISIONS_TOTAL),
            ("cache", cache::HITS_TOTAL),
            ("cache", cache::MISSES_TOTAL),
            ("cache", cache::LOADS_TOTAL),
            ("cache", cache::LOAD_SECONDS),
            ("cache", cache::UNDECODABLE_TOTAL),
            ("cache", cache::UNCACHED_TOTAL),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (capability, name) in names {
            assert!(
                name.starts_with(&format!("platform_{capability}_")),
                "{name}"
            );
            assert!(
                name.ends_with("_total") || name.ends_with("_seconds"),
                "{name}"
            );
            assert!(seen.insert(name), "{name} twice");
        }
    }
}
