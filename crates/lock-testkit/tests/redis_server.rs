//! `RedisServer` against a real redis-server binary.
//!
//! Everything waits on events with generous deadlines (the machine may be a loaded 2-core box
//! running other test processes); the only short bound is in the pause test, where "no reply
//! within 300 ms" is the assertion itself.

use std::io::{BufRead, BufReader};
use std::net::TcpStream as StdTcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::{Backend, RedisServer, TestkitError};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Deadline for things that normally take milliseconds.
const GENEROUS: Duration = Duration::from_secs(20);

async fn local_server() -> RedisServer {
    RedisServer::builder()
        .backend(Backend::Local)
        .start()
        .await
        .expect("redis-server starts")
}

/// Polls `done` every few milliseconds until it holds or [`GENEROUS`] passes.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < GENEROUS,
            "{what}: not within {GENEROUS:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `pid` is gone: no such process, or only a zombie left for a parent that is not us.
fn process_is_gone(pid: u32) -> bool {
    match kill(Pid::from_raw(pid as i32), None) {
        Err(Errno::ESRCH) => true,
        _ => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat
                    .rfind(')')
                    .map(|i| stat[i + 1..].trim_start().to_owned());
                state.map(|s| s.starts_with('Z') || s.starts_with('X'))
            })
            .unwrap_or(true),
    }
}

/// Sends an inline `PING` on `conn` and reads the reply, giving up after `within`.
async fn ping_on(conn: &mut TcpStream, within: Duration) -> Option<String> {
    conn.write_all(b"PING\r\n").await.expect("write PING");
    read_reply(conn, within).await
}

async fn read_reply(conn: &mut TcpStream, within: Duration) -> Option<String> {
    let mut buf = vec![0u8; 64];
    match timeout(within, conn.read(&mut buf)).await {
        Ok(Ok(n)) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(Err(e)) => panic!("reading the reply failed: {e}"),
        Err(_) => None,
    }
}

#[tokio::test]
async fn a_started_server_answers_ping_on_its_url() {
    let redis = local_server().await;
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    assert!(redis.pid().is_some());
    let log = redis.dir().unwrap().join("redis-server.log");
    assert!(
        log.exists(),
        "the server's output is captured in {}",
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
async fn drop_stops_the_process_and_removes_the_temp_dir() {
    let redis = local_server().await;
    let pid = redis.pid().unwrap();
    let dir = redis.dir().unwrap().to_path_buf();
    redis.pause().unwrap(); // a stopped process must die too
    drop(redis);

    wait_until("the redis-server pid is gone", || {
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
    wait_until("the starting thread is reaped", || {
        !Path::new(&task).exists()
    });
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), "PONG");
}

/// Environment variable that turns the ignored helper tests below into real work; they run only
/// inside a child process started by the test next to them.
const CHILD_ENV: &str = "LOCK_TESTKIT_TEST_CHILD";

/// Runs one of this binary's ignored helper tests in a child process.
fn child_test(name: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null());
    command
}

#[test]
fn a_server_dies_with_a_test_process_that_never_dropped_it() {
    let mut child = child_test("helper_start_then_exit_without_drop")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let pid: u32 = stdout
        .lines()
        .map_while(Result::ok)
        // libtest prints the test name on the same line: `test helper_... ... REDIS_PID=123`.
        .find_map(|line| {
            line.split_once("REDIS_PID=")
                .map(|(_, pid)| pid.trim().to_owned())
        })
        .expect("the helper printed the server's pid")
        .parse()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "helper exited with {status}");
    wait_until("the orphaned redis-server is killed", || {
        process_is_gone(pid)
    });
}

#[test]
#[ignore = "helper: runs only in the child process of a_server_dies_with_a_test_process_that_never_dropped_it"]
fn helper_start_then_exit_without_drop() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = runtime.block_on(local_server());
    println!("REDIS_PID={}", redis.pid().unwrap());
    // Exit without running any destructor, as a crashed or killed test process would.
    std::process::exit(0);
}

#[test]
fn a_missing_redis_server_on_path_says_how_to_install_it() {
    let output = child_test("helper_start_with_empty_path")
        .env("PATH", "/nonexistent")
        .env_remove(lock_testkit::BINARY_ENV)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helper failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("CHECKED_NOT_ON_PATH"),
        "the helper ran:\n{stdout}"
    );
}

#[test]
#[ignore = "helper: runs only in the child process of a_missing_redis_server_on_path_says_how_to_install_it"]
fn helper_start_with_empty_path() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime
        .block_on(RedisServer::builder().backend(Backend::Local).start())
        .unwrap_err();
    assert!(matches!(err, TestkitError::RedisServerNotOnPath), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("redis-server is not on PATH"), "{message}");
    assert!(
        message.contains("apt-get install -y redis-server"),
        "{message}"
    );
    assert!(message.contains("scripts/test.sh"), "{message}");
    println!("CHECKED_NOT_ON_PATH");
}
