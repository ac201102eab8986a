//! `status` and `list`: read-only looks at the locks.

use std::io::Write;

use crate::Redis;
use crate::output::{self, Failure};

/// `platform-lock status KEY [--json]`.
pub(crate) async fn status(redis: &Redis, key: &str, json: bool) -> Result<(), Failure> {
    let status = redis
        .lock
        .status(key)
        .await
        .map_err(|error| redis.failure(&format!("reading lock `{key}`"), &error))?;
    output::to_stdout(|out| {
        if json {
            writeln!(out, "{}", output::status_json(&status))
        } else {
            output::write_status(out, &status)
        }
    })
}

/// `platform-lock list [PATTERN] [--limit N] [--json]`.
pub(crate) async fn list(
    redis: &Redis,
    pattern: Option<&str>,
    limit: usize,
    json: bool,
) -> Result<(), Failure> {
    let held = redis
        .lock
        .list(pattern, limit)
        .await
        .map_err(|error| redis.failure("listing locks", &error))?;
    output::to_stdout(|out| {
        if json {
            held.iter()
                .try_for_each(|status| writeln!(out, "{}", output::status_json(status)))
        } else {
            output::write_list(out, &held, pattern)
        }
    })
}
