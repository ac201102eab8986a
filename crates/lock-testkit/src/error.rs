//! The one error type of the testkit.

use std::io;
use std::time::Duration;

/// Why a [`RedisServer`](crate::RedisServer) operation failed.
///
/// Every message is one sentence that says what went wrong and what to do about it; start-up
/// failures end with the last lines of the server's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// `redis-server` could not be found on `PATH`.
    #[error(
        "redis-server is not on PATH: install it with `apt-get install -y redis-server` \
         (or run scripts/test.sh, which installs it)"
    )]
    RedisServerNotOnPath,

    /// An explicitly configured redis-server binary does not exist.
    #[error(
        "the redis-server binary `{binary}` does not exist: point {BINARY_ENV} (or \
         RedisServerBuilder::binary) at an installed redis-server, or unset it and install \
         one with `apt-get install -y redis-server`"
    )]
    RedisServerBinaryMissing {
        /// The binary that was configured.
        binary: String,
    },

    /// An I/O operation of the testkit itself failed (temp dir, log file, spawning, sockets).
    #[error(
        "lock-testkit could not {action} ({source}); check disk space, permissions and ulimits"
    )]
    Io {
        /// What the testkit was doing, e.g. "create a temp dir".
        action: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The server process exited before it answered.
    #[error(
        "redis-server on port {port} exited during start-up ({status}); fix the cause its log \
         shows:\n{log_tail}"
    )]
    ServerExited {
        /// The port it was started on.
        port: u16,
        /// Its exit status.
        status: String,
        /// The last lines of its log.
        log_tail: String,
    },

    /// The server did not answer `PING` before the start-up deadline.
    #[error(
        "redis-server on port {port} did not answer within {waited:?}; the machine may be \
         overloaded (raise RedisServerBuilder::startup_timeout) or its log shows why:\n{log_tail}"
    )]
    StartupTimeout {
        /// The port it was started on.
        port: u16,
        /// How long the testkit waited.
        waited: Duration,
        /// The last lines of its log.
        log_tail: String,
    },

    /// Every free port the testkit picked was taken by someone else before redis-server bound it.
    #[error(
        "redis-server could not bind a free loopback port in {attempts} attempts because other \
         processes kept taking them first; run fewer tests in parallel. Its log ends with:\n{log_tail}"
    )]
    NoFreePort {
        /// How many ports were tried.
        attempts: u32,
        /// The last lines of the log.
        log_tail: String,
    },

    /// `restart()` could not get the server's old port back.
    #[error(
        "redis-server could not be restarted on port {port} because another process held the \
         port for {waited:?}; run fewer tests in parallel or do not restart() in this test"
    )]
    PortTaken {
        /// The port the server had.
        port: u16,
        /// How long the testkit kept trying.
        waited: Duration,
    },

    /// The server was killed and has not been restarted.
    #[error(
        "the redis-server for port {port} is not running (it was killed); call restart() before using it"
    )]
    NotRunning {
        /// The port the server had.
        port: u16,
    },

    /// The server is paused, so a command would never be answered.
    #[error("the redis-server for port {port} is paused; call resume() before sending it commands")]
    Paused {
        /// The port of the server.
        port: u16,
    },

    /// Sending a signal to the server process failed.
    #[error(
        "could not send {signal} to redis-server (pid {pid}): {source}; it may have crashed, see its log"
    )]
    Signal {
        /// The signal, e.g. "SIGSTOP".
        signal: &'static str,
        /// The server's pid.
        pid: u32,
        /// The underlying error.
        #[source]
        source: nix::Error,
    },

    /// The server did not reply to a command in time.
    #[error(
        "redis-server on port {port} did not answer `{command}` within {timeout:?}; check whether it is overloaded or was paused elsewhere"
    )]
    CommandTimeout {
        /// The port of the server.
        port: u16,
        /// The command, arguments joined by spaces.
        command: String,
        /// The deadline that passed.
        timeout: Duration,
    },

    /// A command could not be sent or its reply could not be read.
    #[error(
        "sending `{command}` to redis-server on port {port} failed ({source}); check that the server is running"
    )]
    Connection {
        /// The port of the server.
        port: u16,
        /// The command, arguments joined by spaces.
        command: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// Redis answered a command with an error reply.
    #[error(
        "redis-server on port {port} answered `{command}` with the error `{message}`; check the command and its arguments"
    )]
    Redis {
        /// The port of the server.
        port: u16,
        /// The command, arguments joined by spaces.
        command: String,
        /// The error reply, e.g. "ERR unknown command 'FOO'...".
        message: String,
    },

    /// `cmd` was called with an empty argument list.
    #[error("cmd() needs at least the command name, e.g. [\"PING\"]")]
    EmptyCommand,

    /// `LOCK_TESTKIT_BACKEND` holds an unknown value.
    #[error("{BACKEND_ENV} is `{value}`; set it to `auto`, `local` or `docker`, or unset it")]
    InvalidBackend {
        /// The value found.
        value: String,
    },

    /// The Docker backend was asked for, but the crate was built without the `docker` feature.
    #[error(
        "a Docker-backed redis-server was requested but lock-testkit was built without its \
         `docker` feature; enable the feature or use Backend::Local"
    )]
    DockerFeatureDisabled,

    /// The operation cannot be honoured for a server running in a Docker container.
    #[error(
        "{operation}() is not supported for a Docker-backed redis-server because {reason}; use \
         the local binary (Backend::Local or {BACKEND_ENV}=local) in this test"
    )]
    Unsupported {
        /// The operation, e.g. "restart".
        operation: &'static str,
        /// Why it cannot be honoured.
        reason: &'static str,
    },

    /// The Docker engine refused or failed an operation.
    #[error(
        "the Docker engine could not {action} ({message}); check `docker info`, or use the \
         local binary with {BACKEND_ENV}=local"
    )]
    Docker {
        /// What was asked of the engine.
        action: String,
        /// What went wrong.
        message: String,
    },
}

/// Environment variable that picks the backend (`auto`, `local`, `docker`) when the builder says
/// [`Backend::Auto`](crate::Backend::Auto).
pub const BACKEND_ENV: &str = "LOCK_TESTKIT_BACKEND";

/// Environment variable naming the redis-server binary to run (default: `redis-server` on `PATH`).
pub const BINARY_ENV: &str = "LOCK_TESTKIT_REDIS_SERVER";

impl TestkitError {
    pub(crate) fn io(action: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            action: action.into(),
            source,
        }
    }
}
