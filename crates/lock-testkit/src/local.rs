//! A redis-server child process of the test process.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout};

use crate::TestkitError;
use crate::error::BINARY_ENV;
use crate::resp::{self, Reply};

/// Ports tried by `start` before giving up; each failure means another process bound the port
/// between our probe and redis-server's bind.
const PORT_ATTEMPTS: u32 = 8;
/// Budget for one readiness probe (`INFO server`); the overall deadline is the start-up timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `kill` waits for the process to be gone after SIGKILL.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `pause`/`resume` wait for the kernel to report the new process state.
const STATE_TIMEOUT: Duration = Duration::from_secs(10);
/// Log lines quoted in start-up errors.
const LOG_TAIL_LINES: usize = 20;
const LOG_FILE: &str = "redis-server.log";
const DEFAULT_BINARY: &str = "redis-server";

/// A redis-server child process, its temp dir and its log. Killed (and the dir removed) on drop.
pub(crate) struct LocalServer {
    // Field order matters: the process must be gone before its directory is removed.
    process: Option<Process>,
    binary: OsString,
    args: Vec<String>,
    /// From `--requirepass` in `args`: readiness probes authenticate with it.
    password: Option<String>,
    /// Passed as redis-server's first argument (a Sentinel needs one it can rewrite).
    config_file: Option<PathBuf>,
    startup_timeout: Duration,
    log_path: PathBuf,
    dir: TempDir,
}

/// The outcome of one attempt to launch redis-server on a given port.
enum Launch {
    Ready(Process),
    /// redis-server could not bind the port: someone else has it.
    PortInUse,
}

impl LocalServer {
    /// Starts redis-server on a free loopback port (or on `fixed_port`, one attempt) and waits
    /// until it answers.
    pub(crate) async fn start(
        binary: Option<OsString>,
        args: Vec<String>,
        startup_timeout: Duration,
        fixed_port: Option<u16>,
        config_file: Option<PathBuf>,
    ) -> Result<(LocalServer, u16), TestkitError> {
        let binary = binary
            .or_else(|| std::env::var_os(BINARY_ENV).filter(|b| !b.is_empty()))
            .unwrap_or_else(|| DEFAULT_BINARY.into());
        let dir = tempfile::Builder::new()
            .prefix("lock-testkit-redis-")
            .tempdir()
            .map_err(|e| TestkitError::io("create a temp dir for redis-server", e))?;
        let log_path = dir.path().join(LOG_FILE);
        let mut server = LocalServer {
            process: None,
            binary,
            password: password_in(&args),
            config_file,
            args,
            startup_timeout,
            log_path,
            dir,
        };
        let attempts = if fixed_port.is_some() {
            1
        } else {
            PORT_ATTEMPTS
        };
        for _ in 0..attempts {
            let port = match fixed_port {
                Some(port) => port,
                None => free_port()?,
            };
            if let Launch::Ready(process) = server.launch(port).await? {
                server.process = Some(process);
                return Ok((server, port));
            }
        }
        Err(TestkitError::NoFreePort {
            attempts,
            log_tail: log_tail(&server.log_path, 0),
        })
    }

    /// Kills the server if it runs, then starts it again on `port` with an empty dataset.
    pub(crate) async fn restart(&mut self, port: u16) -> Result<(), TestkitError> {
        self.kill(port).await?;
        let started = Instant::now();
        loop {
            if let Launch::Ready(process) = self.launch(port).await? {
                self.process = Some(process);
                return Ok(());
            }
            // Something else holds the port (typically the local end of a short-lived client
            // connection of a parallel test); it usually lets go within milliseconds.
            if started.elapsed() >= self.startup_timeout {
                return Err(TestkitError::PortTaken {
                    port,
                    waited: started.elapsed(),
                });
            }
            sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILLs the server and waits until the process is gone (a no-op when it is not running).
    pub(crate) async fn kill(&mut self, port: u16) -> Result<(), TestkitError> {
        let Some(process) = self.process.as_mut() else {
            return Ok(());
        };
        process.kill()?;
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        while !process.has_exited()? {
            if started.elapsed() >= EXIT_TIMEOUT {
                return Err(TestkitError::io(
                    format!(
                        "see redis-server (port {port}) exit within {EXIT_TIMEOUT:?} of SIGKILL"
                    ),
                    io::ErrorKind::TimedOut.into(),
                ));
            }
            sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        self.process = None;
        Ok(())
    }

    /// Stops (`true`) or continues (`false`) the process and waits until the kernel reports it.
    pub(crate) fn set_stopped(&self, stopped: bool, port: u16) -> Result<(), TestkitError> {
        let process = self
            .process
            .as_ref()
            .ok_or(TestkitError::NotRunning { port })?;
        let (sig, name) = if stopped {
            (Signal::SIGSTOP, "SIGSTOP")
        } else {
            (Signal::SIGCONT, "SIGCONT")
        };
        process.signal(sig, name)?;
        wait_for_stopped_state(process.pid(), stopped);
        Ok(())
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }

    pub(crate) fn is_running(&self) -> bool {
        self.process.is_some()
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn binary(&self) -> &OsString {
        &self.binary
    }

    /// One attempt: spawn redis-server on `port`, then poll until it answers as itself.
    async fn launch(&self, port: u16) -> Result<Launch, TestkitError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| TestkitError::io(format!("open {}", self.log_path.display()), e))?;
        // Only this attempt's part of the log decides whether the bind failed.
        let log_offset = log.metadata().map(|m| m.len()).unwrap_or(0);
        let log_err = log
            .try_clone()
            .map_err(|e| TestkitError::io("duplicate the log file handle", e))?;

        let mut command = Command::new(&self.binary);
        if let Some(config_file) = &self.config_file {
            command.arg(config_file);
        }
        command
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let mut process = spawn(command).await.map_err(|e| self.spawn_error(e))?;
        let pid = process.pid();

        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            if let Some(status) = process.try_wait()? {
                let own_log = read_from(&self.log_path, log_offset);
                if own_log.contains("Address already in use") {
                    return Ok(Launch::PortInUse);
                }
                return Err(TestkitError::ServerExited {
                    port,
                    status,
                    log_tail: tail(&own_log),
                });
            }
            let probe = timeout(
                PROBE_TIMEOUT,
                resp::request(
                    "127.0.0.1",
                    port,
                    self.password.as_deref(),
                    &["INFO", "server"],
                ),
            )
            .await;
            // Whoever answers must be *our* process: if another test's server won the race for
            // this port, ours fails to bind and exits, which the next round notices.
            let ours = match probe {
                Ok(Ok(Reply::Bulk(Some(info)))) => info_process_id(&info) == Some(pid),
                // INFO refused (an ACL, a renamed command, a password we could not guess): our
                // own log saying it listens proves the answer came from our process, as no two
                // servers can listen on one port.
                Ok(Ok(Reply::Error(_))) => {
                    read_from(&self.log_path, log_offset).contains("Ready to accept connections")
                }
                _ => false,
            };
            if ours {
                return Ok(Launch::Ready(process));
            }
            if started.elapsed() >= self.startup_timeout {
                drop(process); // SIGKILL + reap before we quote the log
                return Err(TestkitError::StartupTimeout {
                    port,
                    waited: started.elapsed(),
                    log_tail: log_tail(&self.log_path, log_offset),
                });
            }
            sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    fn spawn_error(&self, e: io::Error) -> TestkitError {
        if e.kind() != io::ErrorKind::NotFound {
            return TestkitError::io(format!("start {}", Path::new(&self.binary).display()), e);
        }
        if self.binary == DEFAULT_BINARY {
            TestkitError::RedisServerNotOnPath
        } else {
            TestkitError::RedisServerBinaryMissing {
                binary: Path::new(&self.binary).display().to_string(),
            }
        }
    }
}

/// A spawned child that is SIGKILLed and reaped when dropped, so that no error path, panic or
/// cancelled future leaves a server running.
struct Process {
    child: Child,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) -> Result<(), TestkitError> {
        // `Child::kill` is SIGKILL and is a no-op once the child has been reaped; SIGKILL also
        // ends a SIGSTOPped process.
        self.child
            .kill()
            .map_err(|e| TestkitError::io(format!("SIGKILL redis-server (pid {})", self.pid()), e))
    }

    fn try_wait(&mut self) -> Result<Option<String>, TestkitError> {
        self.child
            .try_wait()
            .map(|status| status.map(|s| s.to_string()))
            .map_err(|e| TestkitError::io(format!("wait for redis-server (pid {})", self.pid()), e))
    }

    fn has_exited(&mut self) -> Result<bool, TestkitError> {
        self.try_wait().map(|status| status.is_some())
    }

    fn signal(&self, sig: Signal, name: &'static str) -> Result<(), TestkitError> {
        // Safe against pid reuse: we have not reaped the child, so the pid is still ours.
        let pid = self.pid();
        signal::kill(Pid::from_raw(pid as i32), sig).map_err(|source| TestkitError::Signal {
            signal: name,
            pid,
            source,
        })
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        // Blocking, but only for as long as the kernel needs to tear down a SIGKILLed process.
        let _ = self.child.wait();
    }
}

/// A port that was free a moment ago. Someone else may bind it before redis-server does; callers
/// detect that from the server's log and try another.
fn free_port() -> Result<u16, TestkitError> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| TestkitError::io("bind 127.0.0.1:0 to find a free port", e))
}

/// The `process_id:` field of an `INFO server` reply.
fn info_process_id(info: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(info)
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Waits (briefly, blocking) until `/proc` shows the process stopped or no longer stopped, so that
/// `pause()` returning means the server can no longer answer. Gives up silently after
/// [`STATE_TIMEOUT`]: the signal was delivered, only the confirmation is missing.
fn wait_for_stopped_state(pid: u32, stopped: bool) {
    let stat_path = format!("/proc/{pid}/stat");
    let started = Instant::now();
    while started.elapsed() < STATE_TIMEOUT {
        let Ok(stat) = fs::read_to_string(&stat_path) else {
            return; // no procfs (or the process is gone): nothing to confirm
        };
        // Format: `pid (comm) state ...`; comm may itself contain ')'.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        let is_stopped = matches!(state, Some('T' | 't'));
        if is_stopped == stopped || state.is_none() {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_to_end(&mut text));
    }
    String::from_utf8_lossy(&text).into_owned()
}

fn log_tail(path: &Path, offset: u64) -> String {
    tail(&read_from(path, offset))
}

fn tail(log: &str) -> String {
    last_lines(log, LOG_TAIL_LINES, "(the log is empty)")
}

/// The last `lines` lines of `text`, or `empty` when it has none.
pub(crate) fn last_lines(text: &str, lines: usize, empty: &str) -> String {
    let all: Vec<&str> = text.lines().collect();
    let tail = all[all.len().saturating_sub(lines)..].join("\n");
    if tail.is_empty() {
        empty.to_owned()
    } else {
        tail
    }
}

// ---------------------------------------------------------------------------------------------
// Spawning, and why a redis-server cannot outlive the test process
//
// Drop kills the server, but Drop does not run when the test process itself dies (a panic with
// `panic = "abort"`, `std::process::exit`, SIGKILL from a test runner's timeout, Ctrl-C). To keep
// such servers from living forever, each child asks the kernel to SIGKILL it when its parent dies:
// `prctl(PR_SET_PDEATHSIG, SIGKILL)`, set between fork and exec. It costs nothing at run time and
// needs no helper process. Linux only; elsewhere an orphan lives until killed by hand.
//
// The catch: the kernel's "parent" here is the *thread* that forked the child, not the process.
// Spawned from a tokio worker or a `spawn_blocking` thread, the server would be SIGKILLed as soon
// as that thread exits (runtime shutdown at the end of a test, or a blocking thread's idle
// timeout), even though the test process and the `RedisServer` value live on. So every spawn
// happens on one dedicated thread that lives as long as the process.
// ---------------------------------------------------------------------------------------------

struct SpawnRequest {
    command: Command,
    reply: oneshot::Sender<io::Result<Child>>,
}

static SPAWNER: OnceLock<Result<mpsc::Sender<SpawnRequest>, String>> = OnceLock::new();

/// Spawns `command` on the process-lifetime spawner thread, with the parent-death signal set.
async fn spawn(command: Command) -> io::Result<Process> {
    let spawner = SPAWNER
        .get_or_init(start_spawner)
        .as_ref()
        .map_err(|e| io::Error::other(e.clone()))?;
    let (reply, answer) = oneshot::channel();
    spawner
        .send(SpawnRequest { command, reply })
        .map_err(|_| io::Error::other("the lock-testkit spawner thread has stopped"))?;
    let child = answer
        .await
        .map_err(|_| io::Error::other("the lock-testkit spawner thread dropped a request"))??;
    Ok(Process { child })
}

fn start_spawner() -> Result<mpsc::Sender<SpawnRequest>, String> {
    let (requests, incoming) = mpsc::channel::<SpawnRequest>();
    thread::Builder::new()
        .name("lock-testkit-spawner".to_owned())
        .spawn(move || {
            // Runs until the process exits: the sender lives in a static and is never dropped.
            for SpawnRequest { mut command, reply } in incoming {
                die_with_parent(&mut command);
                if let Err(Ok(child)) = reply.send(command.spawn()) {
                    // The caller went away (its future was dropped): do not leak the server.
                    drop(Process { child });
                }
            }
        })
        .map(|_| requests)
        .map_err(|e| format!("could not start the lock-testkit spawner thread: {e}"))
}

#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;

    let parent = nix::unistd::getpid();
    let hook = move || -> io::Result<()> {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
        // If the parent died before prctl took effect, no signal will come: bail out instead.
        if nix::unistd::getppid() != parent {
            return Err(nix::errno::Errno::ESRCH.into());
        }
        Ok(())
    };
    // `pre_exec` is unsafe because the hook runs in the forked child of a multi-threaded process,
    // where only async-signal-safe operations are allowed. The hook makes two raw syscalls
    // (prctl, getppid) and builds an `io::Error` from an errno, none of which allocates or
    // takes a lock, so it upholds that contract.
    #[allow(unsafe_code)]
    // SAFETY: see above; the hook only makes async-signal-safe syscalls and does not allocate.
    unsafe {
        command.pre_exec(hook);
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {
    // No PR_SET_PDEATHSIG outside Linux: Drop still stops the server, an aborted test process
    // leaves it running.
}

/// The value of the last `--requirepass` among redis-server arguments, if any.
pub(crate) fn password_in(args: &[String]) -> Option<String> {
    args.windows(2)
        .rev()
        .find(|pair| pair[0] == "--requirepass")
        .map(|pair| pair[1].clone())
        .filter(|password| !password.is_empty())
}
