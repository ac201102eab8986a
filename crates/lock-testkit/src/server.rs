//! [`RedisServer`], its builder and the backend choice.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::timeout;

use crate::TestkitError;
use crate::error::BACKEND_ENV;
use crate::local::{LocalServer, password_in};
use crate::resp::{self, Reply};
use crate::tls::TestCertificates;

/// Default deadline for a server to answer after it was started; generous because parallel tests
/// on a small, loaded machine can delay a fresh process by seconds.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Deadline for one [`RedisServer::cmd`] round trip.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a [`RedisServer`] runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// `LOCK_TESTKIT_BACKEND` (`auto`, `local`, `docker`) decides; unset or `auto` means: a Docker
    /// container when the `docker` feature is on and a Docker engine answers, otherwise the local
    /// `redis-server` binary.
    #[default]
    Auto,
    /// A `redis-server` child process of the test process. Supports every operation.
    Local,
    /// A Docker container (needs the `docker` feature and a running engine; image `redis:7.0`).
    /// `pid()` and `dir()` are `None`, `restart()` is not supported, and the server must be
    /// dropped inside a tokio runtime (testcontainers removes the container from its `Drop`).
    Docker,
}

impl Backend {
    /// Resolves `Auto` against the environment; `Auto` is returned only when Docker may be tried.
    fn resolve(self) -> Result<Backend, TestkitError> {
        if self != Backend::Auto {
            return Ok(self);
        }
        match std::env::var(BACKEND_ENV) {
            Err(_) => Ok(Backend::Auto),
            Ok(value) => match value.trim().to_ascii_lowercase().as_str() {
                "" | "auto" => Ok(Backend::Auto),
                "local" => Ok(Backend::Local),
                "docker" => Ok(Backend::Docker),
                _ => Err(TestkitError::InvalidBackend { value }),
            },
        }
    }
}

/// Configures a [`RedisServer`] before starting it; get one from [`RedisServer::builder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_testkit::TestkitError> {
/// let server = lock_testkit::RedisServer::builder()
///     .arg("--maxmemory")
///     .arg("1mb")
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .start().await"]
pub struct RedisServerBuilder {
    args: Vec<String>,
    binary: Option<PathBuf>,
    backend: Backend,
    startup_timeout: Duration,
    port: Option<u16>,
    config_file: Option<PathBuf>,
    tls: Option<TestCertificates>,
}

impl RedisServerBuilder {
    fn new() -> Self {
        Self {
            args: Vec::new(),
            binary: None,
            backend: Backend::Auto,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            port: None,
            config_file: None,
            tls: None,
        }
    }

    /// Appends one command-line argument for redis-server, after the testkit's own
    /// (`--port`, `--bind 127.0.0.1`, `--save ""`, `--appendonly no`, `--dir`, `--daemonize no`).
    /// Later arguments win, so do not override `--port`, `--bind`, `--dir` or `--daemonize`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several command-line arguments; see [`arg`](Self::arg).
    pub fn args(self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        args.into_iter().fold(self, |builder, arg| builder.arg(arg))
    }

    /// The redis-server binary to run (local backend). Default: `$LOCK_TESTKIT_REDIS_SERVER`,
    /// else `redis-server` from `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Where the server runs; default [`Backend::Auto`].
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// How long to wait for a started (or restarted) server to answer; default
    /// [`DEFAULT_STARTUP_TIMEOUT`].
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Listens on exactly this TCP port instead of a free one the testkit picks (local backend
    /// only; with [`Backend::Auto`] it means local). For callers that must know the port before
    /// the server starts, e.g. to name a file after it. Only one attempt is made: if another
    /// process holds the port, start fails with [`TestkitError::NoFreePort`] (`attempts: 1`) and
    /// the caller picks another.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Passes this config file as redis-server's first argument (local backend only; with
    /// [`Backend::Auto`] it means local). The testkit's and the builder's command-line arguments
    /// still follow it and win over it. Needed by a Sentinel (`--sentinel`), which rewrites its
    /// config file; the caller owns the file and must keep it while the server runs.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// Also listens for TLS on a second free port, with `certs`' server certificate and no
    /// client certificates required (`--tls-port`, `--tls-cert-file`, `--tls-key-file`,
    /// `--tls-ca-cert-file`, `--tls-auth-clients no`); the plain port stays open, so
    /// [`RedisServer::cmd`] works as before. Connect with [`RedisServer::tls_url`], trusting
    /// `certs.ca`. Local backend only (with [`Backend::Auto`] it means local); redis-server must
    /// be built with TLS. Keep `certs`' directory while the server runs.
    pub fn tls(mut self, certs: &TestCertificates) -> Self {
        self.tls = Some(certs.clone());
        self
    }

    /// Starts the server and waits until it answers.
    ///
    /// # Errors
    /// [`TestkitError::RedisServerNotOnPath`] when the binary is missing, and the other start-up
    /// variants (with the server's log tail) when it does not come up.
    pub async fn start(self) -> Result<RedisServer, TestkitError> {
        let local_only = self.port.is_some() || self.config_file.is_some() || self.tls.is_some();
        match self.backend.resolve()? {
            Backend::Auto if local_only => self.start_local().await,
            Backend::Local => self.start_local().await,
            Backend::Docker => self.start_docker().await,
            Backend::Auto => {
                #[cfg(feature = "docker")]
                if crate::docker::engine_answers().await {
                    return self.start_docker().await;
                }
                self.start_local().await
            }
        }
    }

    async fn start_local(self) -> Result<RedisServer, TestkitError> {
        let binary = self.binary.map(OsString::from);
        let password = password_in(&self.args);
        let mut tls_attempts = 0;
        let (local, port, tls_port) = loop {
            let (mut args, mut tls_port) = (self.args.clone(), None);
            if let Some(certs) = &self.tls {
                let free = crate::tls::free_tls_port()
                    .map_err(|e| TestkitError::io("bind 127.0.0.1:0 to find a free TLS port", e))?;
                args.extend(certs.server_args(free));
                tls_port = Some(free);
            }
            let started = LocalServer::start(
                binary.clone(),
                args,
                self.startup_timeout,
                self.port,
                self.config_file.clone(),
            )
            .await;
            match started {
                Ok((local, port)) => break (local, port, tls_port),
                // Every attempt failed to bind: the TLS port may be the one someone else took.
                Err(TestkitError::NoFreePort { .. })
                    if tls_port.is_some() && tls_attempts + 1 < crate::tls::TLS_PORT_ATTEMPTS =>
                {
                    tls_attempts += 1;
                }
                Err(e) => return Err(e),
            }
        };
        Ok(RedisServer {
            password,
            host: "127.0.0.1".to_owned(),
            port,
            tls_port,
            paused: AtomicBool::new(false),
            inner: Inner::Local(local),
        })
    }

    #[cfg(feature = "docker")]
    async fn start_docker(self) -> Result<RedisServer, TestkitError> {
        if self.tls.is_some() {
            return Err(TestkitError::Unsupported {
                operation: "tls",
                reason: "the Docker backend does not mount the test certificates",
            });
        }
        if self.port.is_some() || self.config_file.is_some() {
            return Err(TestkitError::Unsupported {
                operation: "port/config_file",
                reason: "Docker publishes a container on a host port of its own choosing and \
                         cannot see the host's files",
            });
        }
        let password = password_in(&self.args);
        let (container, host, port) =
            crate::docker::DockerServer::start(self.args, self.startup_timeout).await?;
        Ok(RedisServer {
            password,
            host,
            port,
            tls_port: None,
            paused: AtomicBool::new(false),
            inner: Inner::Docker(Box::new(container)),
        })
    }

    #[cfg(not(feature = "docker"))]
    async fn start_docker(self) -> Result<RedisServer, TestkitError> {
        Err(TestkitError::DockerFeatureDisabled)
    }
}

/// A private Redis server for one test: its own port, its own empty dataset, no persistence.
///
/// By default a `redis-server` child process on a free `127.0.0.1` port with its own temp dir
/// (see [`Backend`] for Docker). Dropping it SIGKILLs the server, waits for it to exit and removes
/// the temp dir; if the test process dies without dropping it, the kernel kills the server too
/// (Linux, `PR_SET_PDEATHSIG`).
///
/// Many servers may run at once, from parallel test threads and parallel test processes.
pub struct RedisServer {
    /// Host to connect to: `127.0.0.1`, or the Docker host.
    host: String,
    port: u16,
    /// The `--tls-port`, when started with [`RedisServerBuilder::tls`].
    tls_port: Option<u16>,
    /// From `--requirepass` among the builder's arguments; `cmd` authenticates with it.
    password: Option<String>,
    paused: AtomicBool,
    inner: Inner,
}

enum Inner {
    Local(LocalServer),
    #[cfg(feature = "docker")]
    Docker(Box<crate::docker::DockerServer>),
}

impl RedisServer {
    /// Starts a local-or-Docker server with default settings (see [`Backend::Auto`]) and waits
    /// until it answers `PING`.
    ///
    /// # Errors
    /// See [`RedisServerBuilder::start`].
    pub async fn start() -> Result<RedisServer, TestkitError> {
        Self::builder().start().await
    }

    /// [`start`](Self::start) with `--requirepass password`: every client must authenticate.
    ///
    /// # Errors
    /// See [`RedisServerBuilder::start`].
    pub async fn start_with_password(password: &str) -> Result<RedisServer, TestkitError> {
        Self::builder()
            .args(["--requirepass", password])
            .start()
            .await
    }

    /// A builder for extra redis-server arguments, the binary, the backend or the start-up
    /// deadline.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::new()
    }

    /// The URL clients connect to, `redis://127.0.0.1:<port>`. Stays the same across
    /// [`kill`](Self::kill) and [`restart`](Self::restart).
    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("redis://[{}]:{}", self.host, self.port)
        } else {
            format!("redis://{}:{}", self.host, self.port)
        }
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port, when started with [`RedisServerBuilder::tls`]; stays the same across
    /// [`kill`](Self::kill) and [`restart`](Self::restart).
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The TLS URL, `rediss://127.0.0.1:<tls port>`, for a server started with
    /// [`RedisServerBuilder::tls`]. The certificate is valid for `127.0.0.1` and `localhost`.
    ///
    /// # Panics
    /// If the server was started without [`RedisServerBuilder::tls`].
    pub fn tls_url(&self) -> String {
        let port = self
            .tls_port
            .expect("tls_url: start the server with RedisServer::builder().tls(&certs)");
        format!("rediss://{}:{port}", self.host)
    }

    /// The server's process id; `None` after [`kill`](Self::kill) and for Docker containers.
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Local(local) => local.pid(),
            #[cfg(feature = "docker")]
            Inner::Docker(_) => None,
        }
    }

    /// The server's working directory (its log is `redis-server.log` there); `None` for Docker.
    /// Removed when the server is dropped.
    pub fn dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Local(local) => Some(local.dir()),
            #[cfg(feature = "docker")]
            Inner::Docker(_) => None,
        }
    }

    /// Freezes the server (SIGSTOP; `docker pause` for containers). It keeps its socket and its
    /// clients' connections, which connect and send but get no reply, like a server stuck in a
    /// long GC pause or a stalled VM. Returns once the kernel reports the process stopped.
    /// While paused, [`cmd`](Self::cmd) fails fast with [`TestkitError::Paused`].
    ///
    /// # Errors
    /// [`TestkitError::NotRunning`] after [`kill`](Self::kill); [`TestkitError::Signal`] if the
    /// signal could not be sent.
    pub fn pause(&self) -> Result<(), TestkitError> {
        match &self.inner {
            Inner::Local(local) => local.set_stopped(true, self.port)?,
            #[cfg(feature = "docker")]
            Inner::Docker(docker) => docker.set_paused(true, self.port)?,
        }
        self.paused.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Thaws a [`pause`](Self::pause)d server (SIGCONT; `docker unpause`); it then answers what
    /// its clients sent meanwhile. Harmless on a server that is not paused.
    ///
    /// # Errors
    /// As for [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), TestkitError> {
        match &self.inner {
            Inner::Local(local) => local.set_stopped(false, self.port)?,
            #[cfg(feature = "docker")]
            Inner::Docker(docker) => docker.set_paused(false, self.port)?,
        }
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Kills the server (SIGKILL, no shutdown, no save) and waits until the process is gone, so
    /// that new connections to [`port`](Self::port) are refused when this returns. For Docker,
    /// stops the container with no grace period. A no-op on a server already killed.
    ///
    /// # Errors
    /// [`TestkitError::Io`] if the process could not be signalled or did not exit in time;
    /// [`TestkitError::Docker`] if the engine refused to stop the container.
    pub async fn kill(&mut self) -> Result<(), TestkitError> {
        match &mut self.inner {
            Inner::Local(local) => local.kill(self.port).await?,
            #[cfg(feature = "docker")]
            Inner::Docker(docker) => docker.kill().await?,
        }
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Starts the server again on the same port with an empty dataset (nothing is persisted),
    /// killing it first if it still runs, and waits until it answers `PING`. The temp dir and the
    /// log are kept. Local backend only.
    ///
    /// # Errors
    /// [`TestkitError::PortTaken`] if another process holds the port for the whole start-up
    /// deadline; [`TestkitError::Unsupported`] for Docker; the start-up variants otherwise.
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        match &mut self.inner {
            Inner::Local(local) => local.restart(self.port).await?,
            #[cfg(feature = "docker")]
            Inner::Docker(_) => {
                return Err(TestkitError::Unsupported {
                    operation: "restart",
                    reason: "Docker may publish a restarted container on a different host port",
                });
            }
        }
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Sends one command on a fresh connection and returns the reply as text, rendered like
    /// `redis-cli --raw`: simple and bulk strings as their content, integers as digits
    /// (`"0"`), nil as `""`, arrays one element per line with nested arrays flattened
    /// (`PUBSUB NUMSUB ch` → `"ch\n0"`). `INFO` text keeps its `\r\n` line ends
    /// ([`str::lines`] handles them). Arguments are sent as binary-safe bulk strings, so no
    /// quoting is needed.
    ///
    /// When the builder was given `--requirepass <password>`, each call authenticates first
    /// (a refused `AUTH` is returned as the error).
    ///
    /// Each call uses its own connection (a normal client), which `CLIENT KILL TYPE normal` skips
    /// (Redis spares the caller by default) and which the server has closed and forgotten when
    /// `cmd` returns: earlier calls never linger in `CLIENT LIST`, `INFO clients` or a later
    /// `CLIENT KILL` count. `INFO commandstats` counts the commands sent with `cmd` (and `INFO`
    /// itself, and `AUTH` with a password), nothing else.
    ///
    /// # Errors
    /// [`TestkitError::Redis`] for an error reply; [`TestkitError::Paused`] /
    /// [`TestkitError::NotRunning`] without trying; [`TestkitError::CommandTimeout`] after
    /// [`COMMAND_TIMEOUT`]; [`TestkitError::Connection`] if the connection fails.
    pub async fn cmd(&self, args: &[&str]) -> Result<String, TestkitError> {
        self.reply(args).await.map(|reply| reply.to_text())
    }

    /// The clients connected now as `INFO clients` counts them, [`cmd`](Self::cmd)'s own
    /// connection included.
    ///
    /// # Errors
    /// Those of [`cmd`](Self::cmd).
    ///
    /// # Panics
    /// If the reply has no `connected_clients` count.
    pub async fn connected_clients(&self) -> Result<u64, TestkitError> {
        let info = self.cmd(&["INFO", "clients"]).await?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("connected_clients in INFO clients"))
    }

    /// `ACL SETUSER user reset on >password ~* &* +@all`, then `extra` rules: a user with
    /// `password` allowed every key, channel and command but those `extra` takes away.
    ///
    /// # Errors
    /// Those of [`cmd`](Self::cmd).
    pub async fn add_user(
        &self,
        user: &str,
        password: &str,
        extra: &[&str],
    ) -> Result<(), TestkitError> {
        let password = format!(">{password}");
        let mut args = vec![
            "ACL", "SETUSER", user, "reset", "on", &password, "~*", "&*", "+@all",
        ];
        args.extend_from_slice(extra);
        self.cmd(&args).await.map(drop)
    }

    /// `INFO commandstats` as command name → calls (see [`command_calls`](crate::command_calls)).
    ///
    /// # Errors
    /// Those of [`cmd`](Self::cmd).
    pub async fn command_calls(&self) -> Result<HashMap<String, u64>, TestkitError> {
        Ok(crate::command_calls(
            &self.cmd(&["INFO", "commandstats"]).await?,
        ))
    }

    /// [`cmd`](Self::cmd) without the text rendering: the reply as parsed (never
    /// [`Reply::Error`], which becomes [`TestkitError::Redis`]), for callers in this crate that
    /// need the structure of nested arrays.
    pub(crate) async fn reply(&self, args: &[&str]) -> Result<Reply, TestkitError> {
        if args.is_empty() {
            return Err(TestkitError::EmptyCommand);
        }
        if !self.is_running() {
            return Err(TestkitError::NotRunning { port: self.port });
        }
        if self.paused.load(Ordering::SeqCst) {
            return Err(TestkitError::Paused { port: self.port });
        }
        reply_at(&self.host, self.port, self.password.as_deref(), args).await
    }

    fn is_running(&self) -> bool {
        match &self.inner {
            Inner::Local(local) => local.is_running(),
            #[cfg(feature = "docker")]
            Inner::Docker(docker) => docker.is_running(),
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("RedisServer");
        out.field("url", &self.url())
            .field("tls_port", &self.tls_port)
            .field("running", &self.is_running())
            .field("paused", &self.paused.load(Ordering::SeqCst));
        match &self.inner {
            Inner::Local(local) => out
                .field("backend", &Backend::Local)
                .field("pid", &local.pid())
                .field("binary", local.binary())
                .field("dir", &local.dir()),
            #[cfg(feature = "docker")]
            Inner::Docker(docker) => out
                .field("backend", &Backend::Docker)
                .field("container", &docker.id()),
        };
        out.finish()
    }
}

/// Sends one command to any Redis at `host:port` (with `AUTH password` pipelined in front when
/// given) on a fresh connection, and returns the reply as text — for tools such as the benchmark
/// that read `INFO` from a server this crate did not start.
///
/// # Errors
/// [`TestkitError::EmptyCommand`] for no arguments; [`TestkitError::Redis`] for an error reply;
/// [`TestkitError::CommandTimeout`] after [`COMMAND_TIMEOUT`]; [`TestkitError::Connection`] if
/// the connection fails.
pub async fn command_at(
    host: &str,
    port: u16,
    password: Option<&str>,
    args: &[&str],
) -> Result<String, TestkitError> {
    if args.is_empty() {
        return Err(TestkitError::EmptyCommand);
    }
    reply_at(host, port, password, args)
        .await
        .map(|reply| reply.to_text())
}

async fn reply_at(
    host: &str,
    port: u16,
    password: Option<&str>,
    args: &[&str],
) -> Result<Reply, TestkitError> {
    let command = || args.join(" ");
    let reply = timeout(COMMAND_TIMEOUT, resp::request(host, port, password, args))
        .await
        .map_err(|_| TestkitError::CommandTimeout {
            port,
            command: command(),
            timeout: COMMAND_TIMEOUT,
        })?
        .map_err(|source| TestkitError::Connection {
            port,
            command: command(),
            source,
        })?;
    match reply {
        Reply::Error(message) => Err(TestkitError::Redis {
            port,
            command: command(),
            message,
        }),
        reply => Ok(reply),
    }
}
