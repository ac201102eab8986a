//! Idempotent execution on real redis-server processes: the conformance suite, duplicates in
//! eight OS processes, an owner SIGKILLed or paused mid-action, Redis down, and the keys left.

use crate::common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::{SLACK, WATCHDOG, eventually, server};
use lock_core::idempotency::{
    Claim, Idempotency, IdempotencyError, IdempotencyOptions, IdempotencySettings,
    IdempotencyStore, Idempotent,
};
use lock_redis::lock::RedisLock;
use lock_testkit::{ClosedPort, RedisServer, command_at, test_child};

mod conformance {
    use super::server;
    use crate::suites::Suite;

    lock_core::conformance_tests!(idempotency, async { Suite(server().await) });
}

fn settings() -> IdempotencySettings {
    IdempotencySettings {
        watchdog_timeout: WATCHDOG,
        ..IdempotencySettings::default()
    }
}

async fn idempotency(url: &str, instance: &str) -> (RedisLock, Idempotency) {
    let config = common::default_config(url)
        .watchdog_timeout(WATCHDOG)
        .command_timeout(common::COMMAND_TIMEOUT)
        .instance_id(instance);
    let lock = common::connect(config).await;
    let idempotency = common::idempotency(&lock, settings()).await;
    (lock, idempotency)
}

async fn redis_cmd(url: &str, args: &[&str]) -> String {
    let port = url.rsplit(':').next().unwrap().parse().unwrap();
    command_at("127.0.0.1", port, None, args).await.unwrap()
}

const URL: &str = "IDEMPOTENCY_CHILD_URL";
const KEY: &str = "ticket-create:req-4711";
const RESULT_LINE: &str = "IDEMPOTENCY_RESULT ";

/// Starts `count` processes running the ignored test `body` against `redis`.
fn spawn_children(redis: &RedisServer, body: &str, count: usize) -> Vec<std::process::Child> {
    (0..count)
        .map(|_| common::spawn_child(module_path!(), body, URL, redis))
        .collect()
}

/// Waits for `children` and returns the result line each printed after [`RESULT_LINE`].
async fn result_lines(children: Vec<std::process::Child>) -> Vec<String> {
    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    outputs
        .iter()
        .map(|output| {
            let stdout = String::from_utf8_lossy(&output.stdout);
            // libtest prints the test name first, on the same line.
            let line = stdout
                .lines()
                .find_map(|l| l.split_once(RESULT_LINE).map(|(_, r)| r.to_owned()));
            line.unwrap_or_else(|| panic!("a child printed no result: {stdout}"))
        })
        .collect()
}

/// The body of one of the eight processes: ten concurrent duplicates of [`KEY`] once the
/// parent says go; prints how many it got and what.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_ten_duplicates() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let (_lock, idempotency) = idempotency(&url, &format!("pod-{}", std::process::id())).await;
    redis_cmd(&url, &["RPUSH", "ready", "1"]).await;
    let go = eventually(common::GENEROUS, || async {
        redis_cmd(&url, &["GET", "go"]).await == "1"
    });
    assert!(go.await, "no go from the parent");
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let (idempotency, url) = (idempotency.clone(), url.clone());
            tokio::spawn(async move {
                idempotency
                    .execute(KEY, &IdempotencyOptions::new(), || async {
                        redis_cmd(&url, &["INCR", "executions"]).await;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        Ok::<_, IdempotencyError>(format!("TT-{}", std::process::id()))
                    })
                    .await
            })
        })
        .collect();
    let mut lines = Vec::new();
    for call in calls {
        match call.await.unwrap() {
            Ok(result) => lines.push(format!("{} {}", result.is_replay(), result.get())),
            Err(error) => lines.push(format!("error {error}")),
        }
    }
    println!("{RESULT_LINE}{}", lines.join(";"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_of_ten_duplicates_run_the_action_once_and_all_get_its_result() {
    let redis = server().await;
    let children = spawn_children(&redis, "child_ten_duplicates", 8);
    let ready = eventually(common::GENEROUS, || async {
        redis.cmd(&["LLEN", "ready"]).await.unwrap() == "8"
    });
    assert!(ready.await, "the children did not all start");
    redis.cmd(&["SET", "go", "1"]).await.unwrap();
    let results: Vec<String> = result_lines(children)
        .await
        .iter()
        .flat_map(|line| line.split(';').map(str::to_owned))
        .collect();
    assert_eq!(results.len(), 80);
    let executed: Vec<_> = results.iter().filter(|r| r.starts_with("false ")).collect();
    assert_eq!(
        executed.len(),
        1,
        "exactly one call ran the action: {results:?}"
    );
    let value = executed[0].trim_start_matches("false ");
    for result in &results {
        assert!(
            result.ends_with(value) && !result.starts_with("error"),
            "{result} (the first result is {value})"
        );
    }
    assert_eq!(redis.cmd(&["GET", "executions"]).await.unwrap(), "1");
}

/// The body of one of the eight processes of failing duplicates: a duplicate of [`FAILING`],
/// which the parent's owner runs; prints its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_failing_duplicates() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let (_lock, idempotency) = idempotency(&url, &format!("pod-{}", std::process::id())).await;
    let outcome = idempotency
        .execute(FAILING, &IdempotencyOptions::new(), || async {
            redis_cmd(&url, &["INCR", "duplicate-runs"]).await;
            Ok::<_, IdempotencyError>(0_u32)
        })
        .await;
    let line = match outcome {
        Ok(result) => format!("ran {}", result.get()),
        Err(error) => error.code().to_owned(),
    };
    println!("{RESULT_LINE}{line}");
}

const FAILING: &str = "ticket-create:fails";

/// Eight duplicates in eight processes wait on an owner whose action fails: none runs the
/// action after it (each gets the owner's failure at once), and the next call runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_in_eight_processes_get_a_failed_owners_failure_and_do_not_run() {
    let redis = server().await;
    let (lock, idempotency) = idempotency(&redis.url(), "owner-pod").await;
    let (fail, failing) = tokio::sync::oneshot::channel::<()>();
    let owner = {
        let idempotency = idempotency.clone();
        tokio::spawn(async move {
            idempotency
                .execute(FAILING, &IdempotencyOptions::new(), || async move {
                    failing.await.unwrap();
                    Err::<u32, _>(IdempotencyError::unavailable(FAILING, "the action failed"))
                })
                .await
        })
    };
    let store = common::idempotency_store(&lock).await;
    let channel = format!("{}:changed", store.record_key(FAILING));
    let children = spawn_children(&redis, "child_failing_duplicates", 8);
    // A duplicate subscribes once it has seen the owner in progress: then it waits on it.
    let waiting = eventually(common::GENEROUS, || async {
        redis
            .cmd(&["PUBSUB", "SHARDNUMSUB", &channel])
            .await
            .unwrap()
            == format!("{channel}\n8")
    });
    assert!(waiting.await, "the duplicates never all waited");
    fail.send(()).unwrap();
    assert!(owner.await.unwrap().is_err());
    for line in result_lines(children).await {
        assert_eq!(line, "IDEMPOTENCY_OWNER_FAILED");
    }
    assert_eq!(redis.cmd(&["GET", "duplicate-runs"]).await.unwrap(), "");
    let next = idempotency
        .execute(FAILING, &IdempotencyOptions::new(), || async {
            Ok::<_, IdempotencyError>(9_u32)
        })
        .await
        .unwrap();
    assert_eq!(
        next,
        Idempotent::Executed(9),
        "the next call runs the action"
    );
}

/// The body of an owner that is killed or paused mid-action: claims [`KEY`], says so, and
/// waits for the parent's `finish` before returning "from-the-zombie"; prints what it got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the body of a child process a test starts"]
async fn child_owner() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let (_lock, idempotency) = idempotency(&url, "zombie-pod").await;
    let result = idempotency
        .execute(KEY, &IdempotencyOptions::new(), || async {
            redis_cmd(&url, &["SET", "started", "1"]).await;
            let finish = eventually(Duration::from_secs(120), || async {
                redis_cmd(&url, &["GET", "finish"]).await == "1"
            });
            assert!(finish.await);
            Ok::<_, IdempotencyError>(String::from("from-the-zombie"))
        })
        .await
        .unwrap();
    let outcome = match &result {
        Idempotent::Executed(_) => "executed".to_owned(),
        Idempotent::Replayed(_) => "replayed".to_owned(),
        Idempotent::Unstored(_, reason) => format!("unstored:{}", reason.as_str()),
    };
    println!("{RESULT_LINE}{outcome} {}", result.get());
}

fn start_owner(redis: &RedisServer) -> std::process::Child {
    test_child(module_path!(), "child_owner")
        .env(URL, redis.url())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the owner")
}

async fn started(redis: &RedisServer) {
    let started = eventually(common::GENEROUS, || async {
        redis.cmd(&["GET", "started"]).await.unwrap() == "1"
    });
    assert!(started.await, "the owner never started its action");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_owner_is_taken_over_within_the_watchdog_timeout() {
    let redis = server().await;
    let mut owner = start_owner(&redis);
    started(&redis).await;
    let (_lock, idempotency) = idempotency(&redis.url(), "survivor-pod").await;
    let duplicate = {
        let idempotency = idempotency.clone();
        tokio::spawn(async move {
            idempotency
                .execute(KEY, &IdempotencyOptions::new(), || async {
                    Ok::<_, IdempotencyError>(String::from("from-the-survivor"))
                })
                .await
        })
    };
    // The duplicate is waiting on the owner's record (it has not run yet).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!duplicate.is_finished());
    owner.kill().unwrap();
    owner.wait().unwrap();
    let killed = tokio::time::Instant::now();
    let result = tokio::time::timeout(WATCHDOG + SLACK, duplicate).await;
    let result = result
        .expect("no takeover within the watchdog timeout")
        .unwrap()
        .unwrap();
    assert!(!result.is_replay(), "the duplicate ran the action itself");
    assert_eq!(result.into_inner(), "from-the-survivor");
    assert!(killed.elapsed() <= WATCHDOG + SLACK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_whose_lease_ended_cannot_overwrite_the_next_owners_result() {
    let redis = server().await;
    let owner = start_owner(&redis);
    started(&redis).await;
    let pid = nix::unistd::Pid::from_raw(owner.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGSTOP).unwrap();
    // Its watchdog stops with it: a duplicate takes over once the lease ends.
    let (_lock, idempotency) = idempotency(&redis.url(), "survivor-pod").await;
    let result = idempotency
        .execute(KEY, &IdempotencyOptions::new(), || async {
            Ok::<_, IdempotencyError>(String::from("from-the-survivor"))
        })
        .await
        .unwrap();
    assert!(!result.is_replay());
    // The zombie wakes up and completes late: rejected, it keeps its own result, told that the
    // retries get another one.
    redis.cmd(&["SET", "finish", "1"]).await.unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::SIGCONT).unwrap();
    let output = tokio::task::spawn_blocking(move || owner.wait_with_output().unwrap());
    let stdout = String::from_utf8_lossy(&output.await.unwrap().stdout).into_owned();
    assert!(
        stdout.contains(&format!("{RESULT_LINE}unstored:lease_lost from-the-zombie")),
        "{stdout}"
    );
    let replay = idempotency
        .execute(KEY, &IdempotencyOptions::new(), || async {
            Ok::<_, IdempotencyError>(String::from("a third run"))
        })
        .await
        .unwrap();
    assert_eq!(
        replay,
        lock_core::idempotency::Idempotent::Replayed("from-the-survivor".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_action_does_not_run_and_the_call_fails_closed() {
    let closed = ClosedPort::new().unwrap();
    let (_lock, idempotency) =
        idempotency(&format!("redis://127.0.0.1:{}", closed.port()), "pod").await;
    let error = idempotency
        .execute(KEY, &IdempotencyOptions::new(), || async {
            panic!("the action must not run without Redis") as Result<(), IdempotencyError>
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "IDEMPOTENCY_BACKEND_UNAVAILABLE", "{error}");
    assert_eq!(error.http_status(), 503);
    assert!(error.to_string().contains("unreachable"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_is_one_hash_under_the_prefix_with_the_key_as_hash_tag_and_a_ttl() {
    let (redis, [lock]) = common::server_with().await;
    let store = Arc::new(common::idempotency_store(&lock).await);
    let idempotency = Idempotency::new(store.clone(), settings()).unwrap();
    let key = "ticket-create:{tenant-7}";
    let options = IdempotencyOptions::new().fingerprint("sha256:ab").unwrap();
    idempotency
        .execute(key, &options, || async {
            Ok::<_, IdempotencyError>(vec![1, 2, 3])
        })
        .await
        .unwrap();
    let record = store.record_key(key);
    assert_eq!(record, "lock:idempotency:{ticket-create:%7Btenant-7%7D}");
    assert_eq!(
        redis.cmd(&["KEYS", "*"]).await.unwrap(),
        record,
        "nothing else is left"
    );
    let ttl: u64 = redis
        .cmd(&["PTTL", &record])
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(ttl > 80_000 && ttl <= 90_000, "the result TTL: {ttl} ms");
    assert_eq!(redis.cmd(&["HGET", &record, "r"]).await.unwrap(), "[1,2,3]");
    assert_eq!(
        redis.cmd(&["HGET", &record, "f"]).await.unwrap(),
        "sha256:ab"
    );
    // No subscription outlives its waiters.
    assert!(lock.client().subscribed_channels().is_empty());
    let claim = store
        .claim(key, &store.new_owner(), "sha256:ab", WATCHDOG, None)
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Completed { .. }));
}
