//! The causes lock-redis attaches to fail-closed errors.

use std::fmt;
use std::time::Duration;

/// What went wrong talking to Redis; carried as the `source` of a
/// [`LockError`](lock_core::LockError) — of `AcquisitionFailed` (reason `backend_unavailable`)
/// and of `ReleaseFailed`.
///
/// # Examples
///
/// [`RedisFailure::find`] gets it from a `LockError`:
///
/// ```
/// use lock_redis::RedisFailure;
///
/// /// The refusal's stable name (`read_only`, `out_of_memory`, …) if Redis refused the call.
/// fn refusal(error: &lock_core::LockError) -> Option<&'static str> {
///     RedisFailure::find(error)?.refusal().map(|refusal| refusal.as_str())
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisFailure {
    /// Redis answered the command with an error reply: it refused it. `refusal` says why and
    /// what on-call can do; `message` is Redis' own text. A refused acquisition wrote nothing
    /// (Redis refuses before the acquire script's only write); after a refused release the lease
    /// ends at its TTL.
    #[error("Redis refused the {operation}: {} ({message}); {}", .refusal.meaning(), .refusal.remedy_for(operation))]
    Refused {
        /// What was being done, e.g. `acquire script`, `release script`.
        operation: &'static str,
        /// Why Redis refused, from the error code at the start of its reply (`WRONGTYPE`,
        /// `READONLY`, `OOM`, …).
        refusal: Refusal,
        /// Redis' error reply as received, e.g. `READONLY You can't write against a read only
        /// replica.` (errors raised inside a script end with `script: <sha>, on
        /// @user_script:<line>.`).
        message: String,
    },
    /// A command failed on the client side: the connection was lost, the command timed out or
    /// was cancelled, or the reply could not be read. Redis' error replies are
    /// [`RedisFailure::Refused`] instead.
    #[error("{operation} failed: {source}")]
    Command {
        /// What was being done, e.g. `acquire script`.
        operation: &'static str,
        /// fred's error (kind and message).
        #[source]
        source: fred::error::Error,
    },
    /// The client is disconnected and its last connection attempt failed (refused, no route,
    /// authentication failed, …); the command was never answered.
    #[error("Redis is unreachable: {last_error} ({operation} was not answered)")]
    Unreachable {
        /// What was being done.
        operation: &'static str,
        /// The last connection error, e.g. `Connection refused (os error 111)` or `WRONGPASS …`.
        last_error: String,
    },
    /// Redis did not answer one command within its timeout while the connection was up: Redis
    /// is slow, paused, or the network drops its replies. An acquire script that timed out may
    /// still have granted; that grant is released (owner-checked) in the background.
    #[error("Redis at {address} did not answer the {operation} within {timeout:?} ({setting})")]
    CommandTimeout {
        /// What was being done, e.g. `acquire script`.
        operation: &'static str,
        /// The Redis address, password redacted.
        address: String,
        /// The timeout that ran out.
        timeout: Duration,
        /// The setting it comes from:
        /// `command_timeout`, or `replica_sync_timeout + command_timeout` for `WAIT`.
        setting: &'static str,
    },
    /// Redis answered something the protocol does not expect.
    #[error("{operation} returned an unexpected reply: {problem}")]
    Protocol {
        /// What was being done.
        operation: &'static str,
        /// What was wrong with the reply.
        problem: &'static str,
    },
    /// The whole acquisition ran past its wait time plus one command timeout.
    #[error(
        "Redis at {address} did not answer within the acquisition's budget of {budget:?} (its wait time plus command_timeout)"
    )]
    Timeout {
        /// The budget that ran out.
        budget: Duration,
        /// The Redis address, password redacted.
        address: String,
    },
}

impl RedisFailure {
    /// The `RedisFailure` behind `error` — itself, or the first one met following
    /// [`std::error::Error::source`] — e.g. the cause of a `LockError` with reason
    /// `backend_unavailable`. `None` when no Redis call failed (contention, invalid arguments,
    /// another backend).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::LockError;
    /// use lock_redis::RedisFailure;
    ///
    /// // What an acquisition returns while Redis is down:
    /// let error = LockError::backend_unavailable(
    ///     "bill-run:2026-11",
    ///     RedisFailure::Unreachable {
    ///         operation: "acquire script",
    ///         last_error: "Connection refused (os error 111)".into(),
    ///     },
    /// );
    /// assert!(matches!(RedisFailure::find(&error), Some(RedisFailure::Unreachable { .. })));
    ///
    /// let contention = LockError::invalid_argument("wait", "2h", "accepted: 0s to 1h");
    /// assert!(RedisFailure::find(&contention).is_none());
    /// ```
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a RedisFailure> {
        let mut cause = Some(error);
        while let Some(e) = cause {
            if let Some(failure) = e.downcast_ref::<RedisFailure>() {
                return Some(failure);
            }
            cause = e.source();
        }
        None
    }

    /// Why Redis refused the command, for [`RedisFailure::Refused`]; `None` for every other
    /// failure (unreachable, timed out, …).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::{RedisFailure, Refusal};
    ///
    /// let refused = RedisFailure::Refused {
    ///     operation: "acquire script",
    ///     refusal: Refusal::ReadOnly,
    ///     message: "READONLY You can't write against a read only replica.".into(),
    /// };
    /// assert_eq!(refused.refusal(), Some(Refusal::ReadOnly));
    /// assert!(refused.to_string().starts_with(
    ///     "Redis refused the acquire script: the server is a read-only replica (READONLY"
    /// ));
    ///
    /// let timeout = RedisFailure::Timeout {
    ///     budget: std::time::Duration::from_secs(7),
    ///     address: "redis://redis.internal:6379".into(),
    /// };
    /// assert_eq!(timeout.refusal(), None);
    /// assert_eq!(
    ///     timeout.to_string(),
    ///     "Redis at redis://redis.internal:6379 did not answer within the acquisition's budget \
    ///      of 7s (its wait time plus command_timeout)"
    /// );
    /// ```
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            RedisFailure::Refused { refusal, .. } => Some(*refusal),
            _ => None,
        }
    }

    /// [`RedisFailure::Refused`] when `error` is an error reply from Redis, else
    /// [`RedisFailure::Command`].
    pub(crate) fn command(operation: &'static str, source: fred::error::Error) -> Self {
        match Refusal::of_reply(&source) {
            Some(refusal) => RedisFailure::Refused {
                operation,
                refusal,
                message: source.details().trim().to_owned(),
            },
            None => RedisFailure::Command { operation, source },
        }
    }

    pub(crate) fn protocol(operation: &'static str, problem: &'static str) -> Self {
        RedisFailure::Protocol { operation, problem }
    }
}

/// Why Redis refused a command: the error code its reply starts with. Stable names for
/// dashboards and alerts via [`Refusal::as_str`] (`wrong_type`, `read_only`, …); `Display` prints
/// the same name.
///
/// Every refusal fails closed: an acquisition fails with `LOCK_ACQUISITION_FAILED` (reason
/// `backend_unavailable`, never `held_by_another_owner`) and its critical section does not run;
/// a release fails with `LOCK_RELEASE_FAILED` and the lease ends at its TTL. Retrying helps only
/// for the transient ones ([`Busy`](Refusal::Busy), [`Loading`](Refusal::Loading), often
/// [`OutOfMemory`](Refusal::OutOfMemory) and [`ReadOnly`](Refusal::ReadOnly) during a failover);
/// the others need on-call.
///
/// # Examples
///
/// ```
/// use lock_core::LockError;
/// use lock_redis::{RedisFailure, Refusal};
///
/// /// Whether retrying later may help, for a failed acquisition.
/// fn transient(error: &LockError) -> bool {
///     match RedisFailure::find(error).and_then(RedisFailure::refusal) {
///         Some(Refusal::Busy | Refusal::Loading | Refusal::OutOfMemory | Refusal::ReadOnly) => true,
///         Some(_) => false, // needs on-call: see the variant's docs
///         None => true,     // unreachable or timed out: Redis may come back
///     }
/// }
///
/// let error = LockError::backend_unavailable(
///     "bill-run:2026-11",
///     RedisFailure::Refused {
///         operation: "acquire script",
///         refusal: Refusal::WrongType,
///         message: "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
///     },
/// );
/// assert!(!transient(&error));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// `WRONGTYPE`: the lock's key holds a Redis value of another type (a hash, a list, …), so
    /// another program uses the key. The key is left alone. On-call: change
    /// the key prefix (`key_prefix`; a service's `telco.platform.lock.key-prefix`), or remove
    /// the key if nothing needs it.
    WrongType,
    /// `LOCKVALUE` (raised by the lock's acquire script): the lock's key holds a string that is
    /// not a lock value (`H|…` or `R|…`), so another program writes the key. The key is left
    /// alone. On-call: as for [`WrongType`](Refusal::WrongType).
    NotALock,
    /// `READONLY`: the server is a read-only replica — the address points at a replica, or the
    /// primary was demoted (a failover) while the client stayed connected. On-call: point
    /// the address at the primary.
    ReadOnly,
    /// `OOM`: Redis is at `maxmemory` with `maxmemory-policy noeviction` and refuses commands
    /// that may use more memory. New grants are refused; releases and watchdog renewals still
    /// work. On-call: free memory or raise `maxmemory`.
    OutOfMemory,
    /// `BUSY`: Redis is running a script or function longer than `busy-reply-threshold` and
    /// answers nothing else until it ends. On-call: find it and end it with `SCRIPT KILL` or
    /// `FUNCTION KILL`.
    Busy,
    /// `NOAUTH` or `WRONGPASS`: Redis requires authentication and did not accept this client's
    /// credentials. On-call: put the right user and password in
    /// the address.
    NoAuth,
    /// `NOPERM` (or an ACL error raised inside a script): the Redis user lacks an ACL permission
    /// the lock needs — a command, the lock's keys or its channels. On-call: grant them (see
    /// docs/design.md, "Fail closed").
    NoPermission,
    /// `LOADING`: Redis is still loading its dataset into memory (after a restart or a full
    /// resynchronisation). Transient; acquisitions succeed once loading completes.
    Loading,
    /// `MASTERDOWN`: the server is a replica that lost its link to the primary and is configured
    /// not to serve stale data (`replica-serve-stale-data no`). On-call: point the address at the
    /// primary, or repair replication.
    MasterDown,
    /// `NOREPLICAS`: Redis refuses writes because fewer replicas than `min-replicas-to-write` are
    /// connected. On-call: restore the replicas, or lower `min-replicas-to-write`.
    NoReplicas,
    /// `MISCONF`: Redis stopped accepting writes because its last RDB save failed
    /// (`stop-writes-on-bgsave-error`). On-call: fix the disk Redis saves to (see its log).
    PersistenceFailed,
    /// `MOVED` or `ASK` reaching the lock: the address is a single-server one
    /// (`redis://`, `redis-sentinel://`) but the server is a Redis Cluster node, which sends the
    /// key to another node. On-call: use a `redis-cluster://` address.
    ClusterRedirect,
    /// Any other error reply (`ERR …`, `NOSCRIPT` after a reload, …). On-call: read the message
    /// and the Redis server log.
    Other,
}

impl Refusal {
    /// The stable name: `wrong_type`, `not_a_lock`, `read_only`, `out_of_memory`, `busy`,
    /// `no_auth`, `no_permission`, `loading`, `master_down`, `no_replicas`,
    /// `persistence_failed`, `cluster_redirect` or `other`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::Refusal;
    ///
    /// assert_eq!(Refusal::OutOfMemory.as_str(), "out_of_memory");
    /// assert_eq!(Refusal::NoPermission.to_string(), "no_permission"); // `Display` is the same
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::WrongType => "wrong_type",
            Refusal::NotALock => "not_a_lock",
            Refusal::ReadOnly => "read_only",
            Refusal::OutOfMemory => "out_of_memory",
            Refusal::Busy => "busy",
            Refusal::NoAuth => "no_auth",
            Refusal::NoPermission => "no_permission",
            Refusal::Loading => "loading",
            Refusal::MasterDown => "master_down",
            Refusal::NoReplicas => "no_replicas",
            Refusal::PersistenceFailed => "persistence_failed",
            Refusal::ClusterRedirect => "cluster_redirect",
            Refusal::Other => "other",
        }
    }

    /// What Redis refused, for the `Display` of [`RedisFailure::Refused`].
    const fn meaning(self) -> &'static str {
        match self {
            Refusal::WrongType => "the key holds a value of another type",
            Refusal::NotALock => "the lock key holds a string that is not a lock value",
            Refusal::ReadOnly => "the server is a read-only replica",
            Refusal::OutOfMemory => {
                "Redis is at maxmemory (maxmemory-policy noeviction) and refuses writes"
            }
            Refusal::Busy => "Redis is busy running a long script or function",
            Refusal::NoAuth => "Redis did not accept this client's credentials",
            Refusal::NoPermission => "the Redis user lacks an ACL permission the operation needs",
            Refusal::Loading => "Redis is still loading its dataset",
            Refusal::MasterDown => "the replica has lost its link to the primary",
            Refusal::NoReplicas => "fewer replicas than min-replicas-to-write are connected",
            Refusal::PersistenceFailed => "Redis stopped accepting writes after a failed RDB save",
            Refusal::ClusterRedirect => {
                "the server is a Redis Cluster node and sent the key to another node"
            }
            Refusal::Other => "Redis answered with an error",
        }
    }

    /// What on-call can do about a refused `operation`, for the `Display` of
    /// [`RedisFailure::Refused`]. Only the operators' `SCAN` needs a grant beyond the lock's own
    /// ACL, so a missing permission there names it.
    fn remedy_for(self, operation: &str) -> &'static str {
        match (self, operation) {
            (Refusal::NoPermission, "SCAN") => {
                "grant the Redis user the operators' command as well: ACL SETUSER <user> +scan (see the lock's ACL in docs/design.md)"
            }
            // fred's set-up of a connection: `SELECT` for an address with a database number.
            (Refusal::NoPermission, "connection") => {
                "grant the Redis user the command Redis names (an address with a database number needs +select), with the minimal ACL of docs/design.md"
            }
            _ => self.remedy(),
        }
    }

    /// What on-call can do, for the `Display` of [`RedisFailure::Refused`].
    const fn remedy(self) -> &'static str {
        match self {
            Refusal::WrongType | Refusal::NotALock => {
                "another program uses this key: change the key prefix (key_prefix), or remove the key if nothing needs it"
            }
            Refusal::ReadOnly => {
                "point the address at the primary (after a failover, the new primary); through Sentinel, the client moves once the Sentinels announce the new one"
            }
            Refusal::OutOfMemory => {
                "free memory or raise maxmemory; held locks can still be released and renewed"
            }
            Refusal::Busy => {
                "end the script with SCRIPT KILL (or FUNCTION KILL), or wait for it; Redis answers nothing else meanwhile"
            }
            Refusal::NoAuth => {
                "put the right user and password in the address (redis://user:password@host:port)"
            }
            Refusal::NoPermission => {
                "grant the Redis user the command refused (ACL SETUSER), which `ACL LOG` names when Redis does not (inside a script): the lock's minimal ACL is in docs/design.md, and each capability's doc lists what it adds (values.md, cache.md, idempotency.md, branches.md, rate-limiting.md)"
            }
            Refusal::Loading => "wait: Redis answers once the dataset is loaded",
            Refusal::MasterDown => "point the address at the primary, or repair replication",
            Refusal::NoReplicas => "restore the replicas, or lower min-replicas-to-write",
            Refusal::PersistenceFailed => {
                "fix the disk Redis saves to (see the Redis log); writes resume after a successful save"
            }
            Refusal::ClusterRedirect => "use a redis-cluster:// (or rediss-cluster://) address",
            Refusal::Other => "see the message and the Redis server log",
        }
    }

    /// The refusal in `error` if it is an error reply from Redis (fred keeps Redis' text as the
    /// error's details), `None` for the client's own errors (I/O, timeout, cancelled, parse, …).
    pub(crate) fn of_reply(error: &fred::error::Error) -> Option<Refusal> {
        use fred::error::ErrorKind;
        // The kinds fred gives to error replies (see fred's `pretty_error`).
        let from_redis = matches!(
            error.kind(),
            ErrorKind::Unknown
                | ErrorKind::InvalidArgument
                | ErrorKind::InvalidCommand
                | ErrorKind::Auth
                | ErrorKind::Cluster
                | ErrorKind::Config
        );
        if from_redis {
            Refusal::of_message(error.details())
        } else {
            None
        }
    }

    /// Classifies a Redis error reply by the code it starts with; `None` if `message` does not
    /// look like one (no upper-case code first).
    ///
    /// Redis 7 sends an error raised inside a script with its own code and a suffix
    /// (`WRONGTYPE … script: <sha>, on @user_script:25.`); earlier versions wrap it (`ERR Error
    /// running script (call to f_<sha>): @user_script:25: WRONGTYPE …`), so inside an `ERR` the
    /// wrapped code is looked for too.
    pub(crate) fn of_message(message: &str) -> Option<Refusal> {
        let message = message.trim_start().trim_start_matches('-');
        let code = message.split_whitespace().next()?;
        if let Some(refusal) = Refusal::of_code(code) {
            return Some(refusal);
        }
        let is_code = code.len() >= 2
            && code
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !is_code {
            return None;
        }
        if code == "ERR" {
            // Pre-7 wrapping: the wrapped error follows one or more `@user_script:<line>: `.
            let wrapped = message
                .split(": ")
                .skip(1)
                .filter_map(|part| part.trim_start_matches('-').split_whitespace().next())
                .find_map(Refusal::of_code);
            if let Some(refusal) = wrapped {
                return Some(refusal);
            }
            // An ACL denial inside a script: Redis 7.0 and earlier say "The user executing the
            // script can't …", Valkey 8 "ACL failure in script: …" (commands and channels alike).
            if message.contains("The user executing the script can't")
                || message.starts_with("ERR ACL failure in script")
            {
                return Some(Refusal::NoPermission);
            }
        }
        Some(Refusal::Other)
    }

    fn of_code(code: &str) -> Option<Refusal> {
        Some(match code {
            "WRONGTYPE" => Refusal::WrongType,
            "LOCKVALUE" => Refusal::NotALock,
            "READONLY" => Refusal::ReadOnly,
            "OOM" => Refusal::OutOfMemory,
            "BUSY" => Refusal::Busy,
            "NOAUTH" | "WRONGPASS" => Refusal::NoAuth,
            "NOPERM" => Refusal::NoPermission,
            "LOADING" => Refusal::Loading,
            "MASTERDOWN" => Refusal::MasterDown,
            "NOREPLICAS" => Refusal::NoReplicas,
            "MISCONF" => Refusal::PersistenceFailed,
            "MOVED" | "ASK" => Refusal::ClusterRedirect,
            _ => return None,
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::{Error, ErrorKind};

    /// Replies as Redis 7.0.15 sends them (and, where noted, earlier versions).
    #[test]
    fn real_replies_are_classified_by_their_code() {
        let cases = [
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value script: 78d70b325955cd53240ad731ececbefc2ca57153, on @user_script:25.",
                Refusal::WrongType,
            ),
            (
                // Redis 6 and earlier wrap errors raised inside scripts.
                "ERR Error running script (call to f_78d70b325955cd53240ad731ececbefc2ca57153): @user_script:25: WRONGTYPE Operation against a key holding the wrong kind of value",
                Refusal::WrongType,
            ),
            (
                "ERR Error running script (call to f_78d7): @user_script:49: @user_script: 49: -OOM command not allowed when used memory > 'maxmemory'.",
                Refusal::OutOfMemory,
            ),
            (
                "LOCKVALUE the key lock:{nl} holds a value that is not a lock",
                Refusal::NotALock,
            ),
            (
                "READONLY You can't write against a read only replica. script: 78d7, on @user_script:49.",
                Refusal::ReadOnly,
            ),
            (
                "READONLY You can't write against a read only replica.",
                Refusal::ReadOnly,
            ),
            (
                "OOM command not allowed when used memory > 'maxmemory'. script: 78d7, on @user_script:49.",
                Refusal::OutOfMemory,
            ),
            (
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
                Refusal::Busy,
            ),
            ("NOAUTH Authentication required.", Refusal::NoAuth),
            (
                "WRONGPASS invalid username-password pair or user is disabled.",
                Refusal::NoAuth,
            ),
            (
                "NOPERM this user has no permissions to access one of the keys used as arguments",
                Refusal::NoPermission,
            ),
            (
                "ERR The user executing the script can't run this command or subcommand script: 78d7, on @user_script:49.",
                Refusal::NoPermission,
            ),
            // Valkey 8.0 inside a script: a command, then a channel.
            (
                "ERR ACL failure in script: User locker has no permissions to run the 'get' command script: c6bc, on @user_script:25.",
                Refusal::NoPermission,
            ),
            (
                "ERR ACL failure in script: No permissions to access a channel script: c8af, on @user_script:98.",
                Refusal::NoPermission,
            ),
            (
                "LOADING Redis is loading the dataset in memory",
                Refusal::Loading,
            ),
            (
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
                Refusal::MasterDown,
            ),
            (
                "NOREPLICAS Not enough good replicas to write.",
                Refusal::NoReplicas,
            ),
            (
                "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
                Refusal::PersistenceFailed,
            ),
            ("MOVED 14053 127.0.0.1:17204", Refusal::ClusterRedirect),
            ("ASK 3999 127.0.0.1:7001", Refusal::ClusterRedirect),
            (
                "NOSCRIPT No matching script. Please use EVAL.",
                Refusal::Other,
            ),
            (
                "ERR Error running script (call to f_78d7): @user_script:3: user_script:3: attempt to compare nil with number",
                Refusal::Other,
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(Refusal::of_message(message), Some(expected), "{message}");
        }
    }

    #[test]
    fn find_follows_the_source_chain() {
        /// An error with a cause, as `LockError` carries a `RedisFailure`.
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] RedisFailure);

        let outer = Outer(RedisFailure::Refused {
            operation: "acquire script",
            refusal: Refusal::ReadOnly,
            message: "READONLY You can't write against a read only replica.".to_owned(),
        });
        let found = RedisFailure::find(&outer).expect("the failure behind the outer error");
        assert_eq!(found.refusal(), Some(Refusal::ReadOnly));
        let unrelated = std::io::Error::other("no Redis here");
        assert!(RedisFailure::find(&unrelated).is_none());
    }

    #[test]
    fn client_side_errors_are_not_refusals() {
        for error in [
            Error::new(ErrorKind::Timeout, "Request timed out."),
            Error::new(ErrorKind::IO, "Connection reset by peer (os error 104)"),
            Error::new(ErrorKind::Canceled, "Canceled."),
            Error::new(ErrorKind::Parse, "Could not convert to array."),
            Error::new(ErrorKind::Unknown, "Missing lua script contents."),
        ] {
            assert_eq!(Refusal::of_reply(&error), None, "{error:?}");
            assert!(matches!(
                RedisFailure::command("acquire script", error),
                RedisFailure::Command { .. }
            ));
        }
    }

    #[test]
    fn a_refused_operators_call_names_the_operators_grants() {
        let noperm = || {
            Error::new(
                ErrorKind::Unknown,
                "NOPERM this user has no permissions to run the 'scan' command",
            )
        };
        let scan = RedisFailure::command("SCAN", noperm()).to_string();
        assert!(scan.contains("Redis refused the SCAN"), "{scan}");
        assert!(scan.contains("NOPERM"), "{scan}");
        assert!(scan.contains("ACL SETUSER <user> +scan ("), "{scan}");
        let acquire = RedisFailure::command("acquire script", noperm()).to_string();
        assert!(!acquire.contains("+scan"), "{acquire}");
        assert!(
            acquire.contains("docs/design.md") && acquire.contains("cache.md"),
            "{acquire}"
        );
    }

    #[test]
    fn a_refusal_names_what_was_refused_and_what_to_do() {
        let failure = RedisFailure::command(
            "acquire script",
            Error::new(
                ErrorKind::InvalidArgument,
                "WRONGTYPE Operation against a key holding the wrong kind of value script: 78d7, on @user_script:25.",
            ),
        );
        assert_eq!(failure.refusal(), Some(Refusal::WrongType));
        assert_eq!(
            failure.to_string(),
            "Redis refused the acquire script: the key holds a value of another type \
             (WRONGTYPE Operation against a key holding the wrong kind of value script: 78d7, \
             on @user_script:25.); another program uses this key: change the \
             key prefix (key_prefix), or remove the key if nothing needs it"
        );
        assert_eq!(Refusal::WrongType.to_string(), "wrong_type");
    }
}
