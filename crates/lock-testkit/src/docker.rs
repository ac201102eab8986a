//! The Docker backend (feature `docker`): redis-server in a container, via testcontainers.
//!
//! Not exercised by this crate's tests: neither the developers' machines nor CI run a Docker
//! engine. `cargo check --features docker` keeps it compiling.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use testcontainers_modules::redis::{REDIS_PORT, Redis};
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::{ContainerAsync, ImageExt};
use tokio::sync::OnceCell;
use tokio::time::{sleep, timeout};

use crate::TestkitError;
use crate::resp::{self, Reply};

/// The image tag: the same Redis major/minor as the Debian package the local backend runs.
const REDIS_TAG: &str = "7.0";
/// Budget for the cheap "does a Docker engine answer?" probe and for pause/unpause calls.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// A redis-server container; testcontainers removes it when this is dropped (which needs a tokio
/// runtime to be current).
pub(crate) struct DockerServer {
    container: ContainerAsync<Redis>,
    running: bool,
}

impl DockerServer {
    /// Starts a container running `redis-server --save "" --appendonly no <args>` and waits until
    /// it answers PING through its published port.
    pub(crate) async fn start(
        args: Vec<String>,
        startup_timeout: Duration,
    ) -> Result<(DockerServer, String, u16), TestkitError> {
        let password = crate::local::password_in(&args);
        let docker_error = |action: &str, e: &dyn std::fmt::Display| TestkitError::Docker {
            action: action.to_owned(),
            message: e.to_string(),
        };
        let mut cmd = vec!["redis-server", "--save", "", "--appendonly", "no"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        cmd.extend(args);
        let container = timeout(
            startup_timeout,
            Redis::default().with_tag(REDIS_TAG).with_cmd(cmd).start(),
        )
        .await
        .map_err(|e| docker_error("start a redis container in time", &e))?
        .map_err(|e| docker_error("start a redis container", &e))?;
        let host = container
            .get_host()
            .await
            .map_err(|e| docker_error("tell the container's host", &e))?
            .to_string()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = container
            .get_host_port_ipv4(REDIS_PORT)
            .await
            .map_err(|e| docker_error("tell the container's published port", &e))?;

        // The image's own readiness check watched the log; also make sure the published port
        // answers (the port forwarder may lag behind).
        let started = Instant::now();
        loop {
            let probe = timeout(
                Duration::from_secs(2),
                resp::request(&host, port, password.as_deref(), &["PING"]),
            )
            .await;
            if let Ok(Ok(Reply::Simple(pong))) = probe {
                if pong == "PONG" {
                    break;
                }
            }
            if started.elapsed() >= startup_timeout {
                return Err(TestkitError::StartupTimeout {
                    port,
                    waited: started.elapsed(),
                    log_tail: "(see `docker logs` of the container)".to_owned(),
                });
            }
            sleep(Duration::from_millis(50)).await;
        }
        let server = DockerServer {
            container,
            running: true,
        };
        Ok((server, host, port))
    }

    pub(crate) fn id(&self) -> &str {
        self.container.id()
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running
    }

    /// `docker pause` / `docker unpause`, synchronously over the engine's HTTP API (the
    /// testcontainers client is async and bound to the runtime that created it).
    pub(crate) fn set_paused(&self, paused: bool, port: u16) -> Result<(), TestkitError> {
        if !self.running {
            return Err(TestkitError::NotRunning { port });
        }
        let verb = if paused { "pause" } else { "unpause" };
        let endpoint = Endpoint::from_env().ok_or(TestkitError::Unsupported {
            operation: if paused { "pause" } else { "resume" },
            reason: "the Docker host is reached over TLS, which this testkit's pause/unpause call does not speak",
        })?;
        let path = format!("/containers/{}/{verb}", self.id());
        match endpoint.call("POST", &path) {
            Ok(status) if (200..300).contains(&status) => Ok(()),
            Ok(status) => Err(TestkitError::Docker {
                action: format!("{verb} container {}", self.id()),
                message: format!("HTTP status {status}"),
            }),
            Err(e) => Err(TestkitError::Docker {
                action: format!("{verb} container {}", self.id()),
                message: e.to_string(),
            }),
        }
    }

    /// Stops the container at once (SIGKILL, no grace period); its published port closes.
    pub(crate) async fn kill(&mut self) -> Result<(), TestkitError> {
        if !self.running {
            return Ok(());
        }
        self.container
            .stop_with_timeout(Some(0))
            .await
            .map_err(|e| TestkitError::Docker {
                action: format!("stop container {}", self.id()),
                message: e.to_string(),
            })?;
        self.running = false;
        Ok(())
    }
}

/// Whether a Docker engine answers, probed once per process: a `GET /_ping` over the socket
/// (`DOCKER_HOST`, else `/var/run/docker.sock`) with a short timeout; for a TLS host, a TCP
/// connect.
pub(crate) async fn engine_answers() -> bool {
    static ANSWERS: OnceCell<bool> = OnceCell::const_new();
    *ANSWERS
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| match Endpoint::from_env() {
                Some(endpoint) => endpoint.call("GET", "/_ping").is_ok_and(|s| s == 200),
                None => tls_host_accepts(),
            })
            .await
            .unwrap_or(false)
        })
        .await
}

/// How to reach the Docker engine's HTTP API without TLS.
enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

impl Endpoint {
    /// `None` when the engine is configured behind TLS.
    fn from_env() -> Option<Endpoint> {
        let host = std::env::var("DOCKER_HOST").unwrap_or_default();
        if host.is_empty() {
            return Some(Endpoint::Unix(DEFAULT_SOCKET.into()));
        }
        if let Some(path) = host.strip_prefix("unix://") {
            return Some(Endpoint::Unix(path.into()));
        }
        let tls = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0");
        let addr = host
            .strip_prefix("tcp://")
            .or_else(|| host.strip_prefix("http://"))?;
        (!tls).then(|| Endpoint::Tcp(addr.trim_end_matches('/').to_owned()))
    }

    /// One HTTP/1.0 request with an empty body; returns the status code.
    fn call(&self, method: &str, path: &str) -> io::Result<u16> {
        let request =
            format!("{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n");
        let mut response = Vec::new();
        match self {
            Endpoint::Unix(socket) => {
                let mut stream = UnixStream::connect(socket)?;
                stream.set_read_timeout(Some(ENGINE_TIMEOUT))?;
                stream.set_write_timeout(Some(ENGINE_TIMEOUT))?;
                stream.write_all(request.as_bytes())?;
                stream.read_to_end(&mut response)?;
            }
            Endpoint::Tcp(addr) => {
                let mut stream = connect_tcp(addr)?;
                stream.write_all(request.as_bytes())?;
                stream.read_to_end(&mut response)?;
            }
        }
        parse_status(&response)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP status line"))
    }
}

fn connect_tcp(addr: &str) -> io::Result<TcpStream> {
    let addr = addr.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "DOCKER_HOST resolves to nothing")
    })?;
    let stream = TcpStream::connect_timeout(&addr, ENGINE_TIMEOUT)?;
    stream.set_read_timeout(Some(ENGINE_TIMEOUT))?;
    stream.set_write_timeout(Some(ENGINE_TIMEOUT))?;
    Ok(stream)
}

/// For a TLS-protected `tcp://` `DOCKER_HOST`: does anything accept connections there?
fn tls_host_accepts() -> bool {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("tcp://").map(str::to_owned))
        .is_some_and(|addr| connect_tcp(addr.trim_end_matches('/')).is_ok())
}

/// The status code of an HTTP response, e.g. 204 from `HTTP/1.1 204 No Content`.
fn parse_status(response: &[u8]) -> Option<u16> {
    let line = response.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/"))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_http_status_lines() {
        assert_eq!(parse_status(b"HTTP/1.1 204 No Content\r\n\r\n"), Some(204));
        assert_eq!(parse_status(b"HTTP/1.0 200 OK\r\n\r\nOK"), Some(200));
        assert_eq!(parse_status(b"garbage"), None);
        assert_eq!(parse_status(b""), None);
    }
}
