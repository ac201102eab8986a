//! What platform-lock prints: a lock's status as text or JSON, the list table, and the one-line
//! error every failure ends with.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use lock_starter::lock::{AcquireFailure, LockError};
use lock_starter::redis::{LockState, LockStatus, RedisFailure};
use serde_json::json;

use crate::exit::{EXIT_OUTPUT, EXIT_REDIS, EXIT_USAGE};

/// A failed command: one line on stderr (what failed, why, what to do) and its exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    exit: u8,
    line: String,
}

impl Failure {
    /// `line` with exit code `exit`.
    pub(crate) fn new(exit: u8, line: impl Into<String>) -> Self {
        Failure {
            exit,
            line: line.into(),
        }
    }

    /// A failed Redis operation (`what`, e.g. "reading lock `k`") at `address` (its password
    /// already redacted); an argument the lock refused is a usage error instead.
    /// `replica_sync_timeout` is the configured one, named when replicas did not confirm.
    pub(crate) fn redis(
        what: &str,
        address: &str,
        replica_sync_timeout: Duration,
        error: &LockError,
    ) -> Self {
        if error.code() == "LOCK_INVALID_ARGUMENT" {
            return Failure::new(EXIT_USAGE, error.to_string());
        }
        const CHECK_ADDRESS: &str =
            "check that Redis is up and telco.platform.lock.redis.address is right";
        let line = match RedisFailure::find(error) {
            // Redis answered: the refusal already says why and what to do (e.g. which ACL
            // grant is missing); "check that Redis is up" would send on-call the wrong way.
            Some(failure @ RedisFailure::Refused { .. }) => format!("{failure}"),
            Some(failure @ RedisFailure::Unreachable { last_error, .. })
                if is_authentication(last_error) =>
            {
                format!(
                    "{failure}; put the right user and password in \
                     telco.platform.lock.redis.address (redis://user:password@host:port)"
                )
            }
            // Redis answered, with something that is not this lock's: most often another
            // application's key under the same prefix.
            Some(failure @ RedisFailure::Protocol { .. }) => format!(
                "{failure}; the Redis key is not one of this lock's: check \
                 telco.platform.lock.key-prefix and what else writes keys under it"
            ),
            Some(failure) => format!("{failure}; {CHECK_ADDRESS}"),
            // Redis answered and granted; its replicas did not confirm the grant in time.
            None if matches!(
                error.acquire_failure(),
                Some(AcquireFailure::ReplicationUnconfirmed { .. })
            ) =>
            {
                format!(
                    "{error}; check the replicas of the Redis primary (redis-cli INFO \
                     replication: connected_slaves and their lag), or lower \
                     telco.platform.lock.min-replicas or raise \
                     telco.platform.lock.replica-sync-timeout (now {})",
                    lock_starter::config::format_duration(replica_sync_timeout)
                )
            }
            None => format!("{error}; {CHECK_ADDRESS}"),
        };
        Failure::new(
            EXIT_REDIS,
            format!("{what} failed at Redis {address}: {line}"),
        )
    }

    /// Prints the line to stderr and gives the exit code.
    pub(crate) fn report(&self) -> ExitCode {
        say(format_args!("{self}"));
        ExitCode::from(self.exit)
    }
}

/// Writes a line to stderr, if it can: a closed terminal or pipe (a hangup) must not end
/// platform-lock mid-run, as `eprintln!` would, with its command unsignalled.
pub(crate) fn say(line: fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "platform-lock: {}", self.line)
    }
}

/// Whether a connection error is Redis turning the credentials down (its error codes, which
/// the client's connection error quotes).
fn is_authentication(connection_error: &str) -> bool {
    ["WRONGPASS", "NOAUTH"]
        .iter()
        .any(|code| connection_error.contains(code))
}

/// Writes to stdout with `write`. A reader that went away (`platform-lock list | head -1`) is
/// not a failure: what it wanted it read; any other write error is.
pub(crate) fn to_stdout(
    write: impl FnOnce(&mut io::StdoutLock<'_>) -> io::Result<()>,
) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    match write(&mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(Failure::new(
            EXIT_OUTPUT,
            format!("cannot write the output to stdout: {error}; check where it is redirected"),
        )),
    }
}

/// A TTL for people: `1.5s`, or `none` for a key without one.
pub(crate) fn fmt_ttl(ttl: Option<Duration>) -> String {
    match ttl {
        Some(ttl) => format!("{:.1}s", ttl.as_secs_f64()),
        None => "none".into(),
    }
}

/// The Redis and the key prefix a `status` or `list` searched.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Searched<'a> {
    /// The Redis address with its password as `***`.
    pub(crate) address: &'a str,
    /// `telco.platform.lock.key-prefix`.
    pub(crate) key_prefix: &'a str,
}

impl fmt::Display for Searched<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at Redis {} under key prefix `{}`",
            self.address, self.key_prefix
        )
    }
}

impl Searched<'_> {
    /// The JSON fields naming them, at the top level of `status --json` and `list --json`.
    fn json_fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut fields = serde_json::Map::new();
        fields.insert("redis".into(), self.address.into());
        fields.insert("keyPrefix".into(), self.key_prefix.into());
        fields
    }
}

/// `status` as text, one field a line.
pub(crate) fn write_status(
    out: &mut impl Write,
    status: &LockStatus,
    searched: &Searched<'_>,
) -> io::Result<()> {
    writeln!(out, "lock:           {}", status.name)?;
    writeln!(out, "redis:          {}", searched.address)?;
    writeln!(out, "key prefix:     {}", searched.key_prefix)?;
    writeln!(out, "redis key:      {}", status.redis_key)?;
    match &status.state {
        LockState::Held {
            holder,
            instance_id,
            fencing_token,
            ttl,
            kept_for_minimum_hold,
        } => {
            if *kept_for_minimum_hold {
                writeln!(
                    out,
                    "state:          held (released by its holder, kept until its minimum hold ends)"
                )?;
            } else {
                writeln!(out, "state:          held")?;
            }
            writeln!(out, "holder:         {instance_id} (owner token {holder})")?;
            writeln!(out, "ttl:            {}", fmt_ttl(*ttl))?;
            writeln!(
                out,
                "hold count:     {} (holds nested inside the holder's process are counted there, not in Redis)",
                status.hold_count()
            )?;
            writeln!(out, "fencing token:  {fencing_token}")?;
        }
        LockState::Released {
            released_by,
            fencing_token,
            ttl,
        } => {
            writeln!(out, "state:          released (by {released_by})")?;
            writeln!(out, "fencing token:  {fencing_token} (last grant)")?;
            writeln!(out, "tombstone ttl:  {}", fmt_ttl(*ttl))?;
        }
        _ => writeln!(out, "state:          free")?,
    }
    writeln!(out, "fair waiters:   {}", status.fair_waiters)?;
    writeln!(out, "waiting:        {} clients", status.subscribed_clients)
}

/// `list` as a line saying where it searched and a table of the held locks, with a last line
/// when `more` matched than it shows, or a line saying none matched `pattern` there.
pub(crate) fn write_list(
    out: &mut impl Write,
    held: &[LockStatus],
    more: bool,
    pattern: &str,
    searched: &Searched<'_>,
) -> io::Result<()> {
    if held.is_empty() {
        return writeln!(out, "no held locks match {pattern} {searched}");
    }
    writeln!(out, "held locks matching {pattern} {searched}:")?;
    writeln!(
        out,
        "{:<40} {:<24} {:>10} FENCING TOKEN",
        "LOCK", "HOLDER", "TTL"
    )?;
    for status in held {
        if let LockState::Held {
            instance_id,
            fencing_token,
            ttl,
            kept_for_minimum_hold,
            ..
        } = &status.state
        {
            let kept = if *kept_for_minimum_hold {
                " (released, kept for its minimum hold)"
            } else {
                ""
            };
            writeln!(
                out,
                "{:<40} {:<24} {:>10} {fencing_token}{kept}",
                status.name,
                instance_id,
                fmt_ttl(*ttl)
            )?;
        }
    }
    if more {
        writeln!(
            out,
            "… and more: the first {} shown (raise --limit, or narrow the pattern)",
            held.len()
        )?;
    }
    Ok(())
}

/// `list --json`: one object naming where it searched (`redis`, `keyPrefix`, `pattern`) with the
/// held locks in `locks`, each as [`status_json`] without the first two, and `more`: whether
/// more matched than `--limit` let it show.
pub(crate) fn list_json(
    held: &[LockStatus],
    more: bool,
    pattern: &str,
    searched: &Searched<'_>,
) -> serde_json::Value {
    let mut value = searched.json_fields();
    value.insert("pattern".into(), pattern.into());
    let locks = held
        .iter()
        .map(|status| status_json(status, None))
        .collect();
    value.insert("locks".into(), serde_json::Value::Array(locks));
    value.insert("more".into(), more.into());
    value.into()
}

/// One lock as a JSON object (camelCase, TTLs in milliseconds), with `redis` and `keyPrefix`
/// when `searched` is given: `status --json`, and each of `list --json`'s locks.
pub(crate) fn status_json(
    status: &LockStatus,
    searched: Option<&Searched<'_>>,
) -> serde_json::Value {
    let ttl_ms = |ttl: &Option<Duration>| ttl.map(|t| t.as_millis() as u64);
    let mut value = json!({
        "lock": status.name,
        "redisKey": status.redis_key,
        "holdCount": status.hold_count(),
        "fairWaiters": status.fair_waiters,
        "subscribedClients": status.subscribed_clients,
    });
    let state = match &status.state {
        LockState::Held {
            holder,
            instance_id,
            fencing_token,
            ttl,
            kept_for_minimum_hold,
        } => json!({"state": "held", "holder": holder, "instanceId": instance_id,
                    "fencingToken": fencing_token, "ttlMs": ttl_ms(ttl),
                    "keptForMinimumHold": kept_for_minimum_hold}),
        LockState::Released {
            released_by,
            fencing_token,
            ttl,
        } => json!({"state": "released", "releasedBy": released_by,
                    "fencingToken": fencing_token, "ttlMs": ttl_ms(ttl)}),
        _ => json!({"state": "free"}),
    };
    if let (Some(value), serde_json::Value::Object(state)) = (value.as_object_mut(), state) {
        value.extend(state);
        value.extend(searched.map(Searched::json_fields).unwrap_or_default());
    }
    value
}
