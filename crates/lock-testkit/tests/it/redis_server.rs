//! `RedisServer` against a real redis-server binary.
//!
//! Everything waits on events with generous deadlines (the machine may be a loaded 2-core box
//! running other test processes); the only short bound is in the pause test, where "no reply
//! within 300 ms" is the assertion itself.

use std::io::{BufRead, BufReader};
use std::net::TcpStream as StdTcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lock_testkit::{Backend, RedisServer, TestkitError, test_child};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::common::{GENEROUS, process_is_gone, wait_until};

async fn local_server() -> RedisServer {
    RedisServer::builder()
        .backend(Backend::Local)
        .start()
        .await
        .expect("redis-server starts")
}

/// Sends an inline `PING` on `conn` and reads the reply, giving up after `within`.
async fn ping_on(conn: &mut TcpStream, within: Duration) -> Option<String> {
    conn.write_all(b"PING\r\n").await.expect("write PING");
    read_reply(conn, within).await
}

/// Reads one line-terminated reply, giving up (`None`) when nothing complete came within `within`.
async fn read_reply(conn: &mut TcpStream, within: Duration) -> Option<String> {
    let mut reply = Vec::new();
    let read_line = async {
        let mut buf = [0u8; 64];
        while !reply.ends_with(b"\r\n") {
            let n = conn.read(&mut buf).await.expect("reading the reply");
            assert!(n > 0, "the server closed the connection");
            reply.extend_from_slice(&buf[..n]);
        }
    };
    timeout(within, read_line).await.ok()?;
    Some(String::from_utf8_lossy(&reply).into_owned())
}

#[test]
fn servers_can_be_shared_across_tasks_and_threads() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<RedisServer>();
    assert_send_sync::<TestkitError>();
}

#[tokio::test]
async fn a_started_server_answers_ping_on_its_url() {
    // The default path: `Backend::Auto` (the local binary here; Docker only with the `docker`
    // feature and an engine that answers).
    let redis = RedisServer::start().await.expect("redis-server starts");
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
    assert!(redis.url().starts_with("redis://"), "{}", redis.url());
    assert!(
        redis.url().ends_with(&format!(":{}", redis.port())),
        "{}",
        redis.url()
    );
}

#[tokio::test]
async fn a_local_server_has_a_pid_a_loopback_url_and_a_log() {
    let redis = local_server().await;
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    let pid = redis.pid().expect("a local server has a pid");
    let info = redis.cmd(&["INFO", "server"]).await.unwrap();
    assert!(
        info.lines().any(|l| l == format!("process_id:{pid}")),
        "{info}"
    );
    let log = redis.dir().unwrap().join("redis-server.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("Ready to accept connections"),
        "{}:\n{text}",
        log.display()
    );
}

#[tokio::test]
async fn two_servers_at_once_get_different_ports_and_separate_data() {
    let (a, b) = tokio::join!(local_server(), local_server());
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    a.cmd(&["SET", "only-in-a", "1"]).await.unwrap();
    assert_eq!(a.cmd(&["DBSIZE"]).await.unwrap(), "1");
    assert_eq!(b.cmd(&["DBSIZE"]).await.unwrap(), "0");
}

#[tokio::test]
async fn cmd_renders_replies_as_text() {
    let redis = local_server().await;
    assert_eq!(redis.cmd(&["SET", "k", "hello world"]).await.unwrap(), "OK");
    assert_eq!(redis.cmd(&["GET", "k"]).await.unwrap(), "hello world");
    assert_eq!(redis.cmd(&["GET", "missing"]).await.unwrap(), "");
    assert_eq!(redis.cmd(&["INCR", "n"]).await.unwrap(), "1");
    assert_eq!(
        redis.cmd(&["PUBSUB", "NUMSUB", "ch"]).await.unwrap(),
        "ch\n0"
    );
    // cmd() connections are gone when it returns: none left to kill, only the caller counted.
    assert_eq!(
        redis
            .cmd(&["CLIENT", "KILL", "TYPE", "normal"])
            .await
            .unwrap(),
        "0"
    );
    let clients = redis.cmd(&["INFO", "clients"]).await.unwrap();
    assert!(
        clients.lines().any(|l| l == "connected_clients:1"),
        "{clients}"
    );
    let stats = redis.cmd(&["INFO", "commandstats"]).await.unwrap();
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("cmdstat_incr:calls=1,")),
        "{stats}"
    );
    // Only what the test sent is counted (the testkit sends no QUIT or other extra command).
    let counted: Vec<&str> = stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split(':').next())
        .collect();
    for name in &counted {
        assert!(
            ["set", "get", "incr", "pubsub|numsub", "client|kill", "info"].contains(name),
            "unexpected command {name} in {stats}"
        );
    }

    let err = redis.cmd(&["NO-SUCH-COMMAND"]).await.unwrap_err();
    assert!(matches!(err, TestkitError::Redis { .. }), "{err:?}");
    assert!(err.to_string().contains("unknown command"), "{err}");
    assert!(matches!(
        redis.cmd(&[]).await,
        Err(TestkitError::EmptyCommand)
    ));
}

#[tokio::test]
async fn builder_arguments_reach_the_server() {
    let redis = RedisServer::builder()
        .backend(Backend::Local)
        .arg("--maxmemory")
        .arg("1mb")
        .args(["--maxmemory-policy", "noeviction"])
        .start()
        .await
        .unwrap();
    assert_eq!(
        redis.cmd(&["CONFIG", "GET", "maxmemory"]).await.unwrap(),
        "maxmemory\n1048576"
    );
    // The testkit's own defaults are in force too.
    assert_eq!(
        redis.cmd(&["CONFIG", "GET", "save"]).await.unwrap(),
        "save\n"
    );
    assert_eq!(
        redis.cmd(&["CONFIG", "GET", "appendonly"]).await.unwrap(),
        "appendonly\nno"
    );
}

#[tokio::test]
async fn a_password_protected_server_starts_and_cmd_authenticates() {
    let redis = RedisServer::builder()
        .backend(Backend::Local)
        .args(["--requirepass", "s3cret"])
        .start()
        .await
        .unwrap();
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
    // Clients without the password are refused, as the test wanted.
    let mut conn = TcpStream::connect(("127.0.0.1", redis.port()))
        .await
        .unwrap();
    let reply = ping_on(&mut conn, GENEROUS).await.unwrap();
    assert!(reply.starts_with("-NOAUTH"), "{reply}");
}

#[tokio::test]
async fn a_server_whose_info_is_refused_still_starts() {
    // INFO renamed away: the readiness probe's INFO gets an error reply, and the testkit falls
    // back to the server's own log to know that the answer came from its process.
    let redis = RedisServer::builder()
        .backend(Backend::Local)
        .args(["--rename-command", "INFO", ""])
        .start()
        .await
        .unwrap();
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
}

#[tokio::test]
async fn a_paused_server_keeps_connections_but_answers_only_after_resume() {
    let redis = local_server().await;
    let mut conn = TcpStream::connect(("127.0.0.1", redis.port()))
        .await
        .unwrap();
    assert_eq!(
        ping_on(&mut conn, GENEROUS).await.as_deref(),
        Some("+PONG\r\n")
    );

    redis.pause().unwrap();
    // The point of the test: a paused server does not answer, here within 300 ms.
    assert_eq!(ping_on(&mut conn, Duration::from_millis(300)).await, None);
    // A new connection is accepted by the kernel, but not answered either.
    let mut fresh = TcpStream::connect(("127.0.0.1", redis.port()))
        .await
        .unwrap();
    assert_eq!(ping_on(&mut fresh, Duration::from_millis(300)).await, None);
    let err = redis.cmd(&["PING"]).await.unwrap_err();
    assert!(matches!(err, TestkitError::Paused { .. }), "{err:?}");

    redis.resume().unwrap();
    // The PING sent while paused is answered now, on the connection that stayed open.
    assert_eq!(
        read_reply(&mut conn, GENEROUS).await.as_deref(),
        Some("+PONG\r\n")
    );
    assert_eq!(
        read_reply(&mut fresh, GENEROUS).await.as_deref(),
        Some("+PONG\r\n")
    );
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
}

#[tokio::test]
async fn a_killed_server_refuses_connections() {
    let mut redis = local_server().await;
    let pid = redis.pid().unwrap();
    redis.kill().await.unwrap();

    let err = StdTcpStream::connect(("127.0.0.1", redis.port())).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(redis.pid(), None);
    assert!(process_is_gone(pid));
    assert!(matches!(
        redis.cmd(&["PING"]).await,
        Err(TestkitError::NotRunning { .. })
    ));
    assert!(matches!(
        redis.pause(),
        Err(TestkitError::NotRunning { .. })
    ));
    redis.kill().await.expect("killing twice is a no-op");
}

#[tokio::test]
async fn a_paused_server_can_be_killed() {
    let mut redis = local_server().await;
    redis.pause().unwrap();
    redis.kill().await.unwrap();
    assert!(StdTcpStream::connect(("127.0.0.1", redis.port())).is_err());
}

#[tokio::test]
async fn restart_comes_back_on_the_same_port_with_no_data() {
    let mut redis = local_server().await;
    let (port, url, first_pid) = (redis.port(), redis.url(), redis.pid());
    redis.cmd(&["SET", "survivor", "1"]).await.unwrap();
    assert_eq!(redis.cmd(&["DBSIZE"]).await.unwrap(), "1");

    redis.kill().await.unwrap();
    redis.restart().await.unwrap();

    assert_eq!(redis.port(), port);
    assert_eq!(redis.url(), url);
    assert_ne!(redis.pid(), first_pid);
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
    assert_eq!(redis.cmd(&["DBSIZE"]).await.unwrap(), "0");
}

#[tokio::test]
async fn restart_of_a_running_server_kills_it_first() {
    let mut redis = local_server().await;
    let first_pid = redis.pid().unwrap();
    redis.cmd(&["SET", "k", "v"]).await.unwrap();
    redis.restart().await.unwrap();
    assert!(process_is_gone(first_pid));
    assert_eq!(redis.cmd(&["DBSIZE"]).await.unwrap(), "0");
}

#[tokio::test]
async fn restart_waits_for_a_port_that_someone_else_holds_briefly() {
    let mut redis = local_server().await;
    redis.kill().await.unwrap();
    // Another process grabs the port while the server is down, and lets go a little later.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", redis.port())).unwrap();
    let release = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(squatter);
    };
    let (restarted, ()) = tokio::join!(redis.restart(), release);
    restarted.unwrap();
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
}

#[tokio::test]
async fn restart_gives_up_on_a_port_held_for_the_whole_startup_timeout() {
    let startup_timeout = Duration::from_secs(5);
    let mut redis = RedisServer::builder()
        .backend(Backend::Local)
        .startup_timeout(startup_timeout)
        .start()
        .await
        .unwrap();
    redis.kill().await.unwrap();
    let _squatter = std::net::TcpListener::bind(("127.0.0.1", redis.port())).unwrap();
    match redis.restart().await {
        Err(TestkitError::PortTaken { port, waited }) => {
            assert_eq!(port, redis.port());
            assert!(waited >= startup_timeout, "{waited:?}");
        }
        other => panic!("expected PortTaken, got {other:?}"),
    }
    assert_eq!(redis.pid(), None);
}

#[tokio::test]
async fn drop_stops_the_process_and_removes_the_temp_dir() {
    let redis = local_server().await;
    let pid = redis.pid().unwrap();
    let dir = redis.dir().unwrap().to_path_buf();
    redis.pause().unwrap(); // a stopped process must die too
    drop(redis);

    wait_until("the redis-server pid is gone", GENEROUS, || {
        kill(Pid::from_raw(pid as i32), None) == Err(Errno::ESRCH)
    });
    assert!(!dir.exists(), "{} was removed", dir.display());
}

#[tokio::test]
async fn a_missing_binary_is_reported_with_the_fix() {
    let err = RedisServer::builder()
        .backend(Backend::Local)
        .binary("/nonexistent/redis-server")
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(err, TestkitError::RedisServerBinaryMissing { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("/nonexistent/redis-server"), "{message}");
    assert!(
        message.contains("apt-get install -y redis-server"),
        "{message}"
    );
}

#[tokio::test]
async fn bad_server_arguments_fail_fast_with_the_log_tail() {
    let err = RedisServer::builder()
        .backend(Backend::Local)
        .arg("--no-such-option")
        .arg("1")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, TestkitError::ServerExited { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-option"), "{err}");
}

/// PR_SET_PDEATHSIG fires when the *thread* that spawned a child exits. The testkit spawns from a
/// process-lifetime thread, so a server started on a short-lived thread (here: a thread with its
/// own runtime, as `spawn_blocking` or a per-test runtime would be) must outlive that thread.
#[tokio::test]
async fn a_server_outlives_the_thread_that_started_it() {
    let (redis, tid) = std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let redis = runtime.block_on(local_server());
        (redis, nix::unistd::gettid())
    })
    .join()
    .unwrap();
    // The thread is fully gone (and any death signal sent) once its /proc entry disappears.
    let task = format!("/proc/self/task/{tid}");
    wait_until("the starting thread is reaped", GENEROUS, || {
        !Path::new(&task).exists()
    });
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
}

/// Environment variable that turns the ignored helper tests below into real work; they run only
/// inside a child process started by the test next to them.
const CHILD_ENV: &str = "LOCK_TESTKIT_TEST_CHILD";

/// Runs one of this module's ignored helper tests in a child process.
fn child_test(name: &str) -> Command {
    let mut command = test_child(module_path!(), name);
    command.env(CHILD_ENV, "1");
    command
}

/// The runtime of a helper test in its child process; `None` outside one (the helper then does
/// nothing).
fn child_runtime() -> Option<tokio::runtime::Runtime> {
    std::env::var_os(CHILD_ENV)?;
    Some(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    )
}

#[test]
fn a_server_dies_with_a_test_process_that_never_dropped_it() {
    let mut child = child_test("helper_start_then_exit_without_drop")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // libtest prints the test name on the same line: `test helper_... ... REDIS_PID=123 ...`.
    let report = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            line.split_once("REDIS_PID=")
                .map(|(_, rest)| rest.to_owned())
        })
        .expect("the helper printed the server's pid");
    let (pid, dir) = report.split_once(" REDIS_DIR=").expect("pid and dir");
    let pid: u32 = pid.parse().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "helper exited with {status}");
    wait_until("the orphaned redis-server is killed", GENEROUS, || {
        process_is_gone(pid)
    });
    // Nothing removed the dead helper's temp dir: do not litter /tmp on every run.
    std::fs::remove_dir_all(dir.trim()).unwrap();
}

#[test]
#[ignore = "helper: runs only in the child process of a_server_dies_with_a_test_process_that_never_dropped_it"]
fn helper_start_then_exit_without_drop() {
    let Some(runtime) = child_runtime() else {
        return;
    };
    let redis = runtime.block_on(local_server());
    println!(
        "REDIS_PID={} REDIS_DIR={}",
        redis.pid().unwrap(),
        redis.dir().unwrap().display()
    );
    // Exit without running any destructor, as a crashed or killed test process would.
    std::process::exit(0);
}

/// Runs `RedisServer::start()` (default builder) in a child process with `env` changes applied
/// and returns what it reported: `STARTED`, or the error's message.
fn start_in_child(configure: impl FnOnce(&mut Command)) -> String {
    let mut command = child_test("helper_report_start_outcome");
    command
        .env_remove(lock_testkit::BINARY_ENV)
        .env_remove(lock_testkit::BACKEND_ENV);
    configure(&mut command);
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helper failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (_, outcome) = stdout
        .split_once("OUTCOME=")
        .unwrap_or_else(|| panic!("the helper reported an outcome:\n{stdout}"));
    outcome.split("=END").next().unwrap().to_owned()
}

#[test]
fn a_missing_redis_server_on_path_says_how_to_install_it() {
    let outcome = start_in_child(|c| {
        c.env("PATH", "/nonexistent");
    });
    assert_eq!(
        outcome,
        "redis-server is not on PATH: install it with `apt-get install -y redis-server` \
         (or run scripts/test.sh, which installs it)"
    );
}

#[test]
fn an_unknown_backend_variable_is_reported() {
    let outcome = start_in_child(|c| {
        c.env(lock_testkit::BACKEND_ENV, "podman");
    });
    assert!(
        outcome.starts_with("LOCK_TESTKIT_BACKEND is `podman`"),
        "{outcome}"
    );
}

#[test]
fn the_local_backend_can_be_forced_from_the_environment() {
    let outcome = start_in_child(|c| {
        c.env(lock_testkit::BACKEND_ENV, "local");
    });
    assert_eq!(outcome, "STARTED");
}

#[test]
#[ignore = "helper: runs only in child processes started by start_in_child"]
fn helper_report_start_outcome() {
    let Some(runtime) = child_runtime() else {
        return;
    };
    let outcome = match runtime.block_on(RedisServer::start()) {
        Ok(_server) => "STARTED".to_owned(),
        Err(e) => e.to_string(),
    };
    println!("OUTCOME={outcome}=END");
}
