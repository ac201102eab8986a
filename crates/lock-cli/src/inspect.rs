//! `status` and `list`: read-only looks at the locks.

use std::io::Write;

use crate::Redis;
use crate::output::{self, Failure, Searched};

/// `platform-lock status KEY [--json]`.
pub(crate) async fn status(redis: &Redis, key: &str, json: bool) -> Result<(), Failure> {
    let status = redis
        .lock
        .status(key)
        .await
        .map_err(|error| redis.failure(&format!("reading lock `{key}`"), &error))?;
    let searched = searched(redis);
    output::to_stdout(|out| {
        if json {
            writeln!(out, "{}", output::status_json(&status, Some(&searched)))
        } else {
            output::write_status(out, &status, &searched)
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
    // One more than shown: whether the list was cut off.
    let mut held = redis
        .lock
        .list(pattern, limit.saturating_add(1))
        .await
        .map_err(|error| redis.failure("listing locks", &error))?;
    let more = held.len() > limit;
    held.truncate(limit);
    let searched = searched(redis);
    let pattern = pattern.unwrap_or("*");
    output::to_stdout(|out| {
        if json {
            writeln!(
                out,
                "{}",
                output::list_json(&held, more, pattern, &searched)
            )
        } else {
            output::write_list(out, &held, more, pattern, &searched)
        }
    })
}

/// Where `status` and `list` looked, which they always say: nothing found under the wrong key
/// prefix or at the wrong Redis must not read like "no held locks".
fn searched(redis: &Redis) -> Searched<'_> {
    Searched {
        address: &redis.address,
        key_prefix: &redis.key_prefix,
    }
}
