//! Dropping handles and clients — outside a runtime, after the runtime is gone, and
//! while Redis is down — must neither panic nor leave connections or leases behind.

use crate::common;

use std::time::Duration;

use common::{SLACK, client, config, eventually, server};
use lock_core::lock::{DistributedLock, Lease};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Connections to `redis` other than the one `cmd` itself opens.
async fn other_clients(redis: &lock_testkit::RedisServer) -> usize {
    let list = redis.cmd(&["CLIENT", "LIST"]).await.unwrap();
    list.lines().count().saturating_sub(1)
}

/// A handle dropped on a plain thread while the client's runtime still runs is released (the
/// release is spawned on the client's runtime).
#[test]
fn a_handle_dropped_on_a_plain_thread_is_released() {
    let rt = runtime();
    let redis = rt.block_on(server());
    let lock = rt.block_on(client(&redis));
    let handle = rt
        .block_on(lock.acquire("plain-thread", Lease::Fixed(Duration::from_secs(60))))
        .unwrap();
    std::thread::spawn(move || drop(handle)).join().unwrap();
    let key = lock.redis_key("plain-thread");
    let released = rt.block_on(eventually(SLACK, || async {
        redis.cmd(&["GET", &key]).await.unwrap().starts_with("R|")
    }));
    assert!(
        released,
        "the drop on a plain thread did not release the key"
    );
}

/// The contract of `LeaseRelease::release_in_background`: it "must not block and must not panic,
/// also when no async runtime is running". Here the client's runtime has been shut down; the
/// handle and then the client are dropped on a plain thread.
#[test]
fn dropping_a_handle_and_the_client_after_the_runtime_is_gone_does_not_panic() {
    let rt = runtime();
    let redis = rt.block_on(server());
    let (lock, fixed, watchdog) = rt.block_on(async {
        let lock = client(&redis).await;
        let fixed = common::hold(&lock, "after-rt-fixed", Duration::from_secs(60)).await;
        let watchdog = lock.acquire("after-rt-wd", Lease::Watchdog).await.unwrap();
        (lock, fixed, watchdog)
    });
    drop(rt);
    let outcome = std::thread::spawn(move || {
        assert!(!watchdog.is_held() || watchdog.is_held()); // reading status needs no runtime
        drop(fixed);
        drop(watchdog);
        drop(lock);
    })
    .join();
    assert!(
        outcome.is_ok(),
        "dropping after the runtime shut down panicked"
    );
    // The server is dropped last (it needs no runtime for the local backend).
    drop(redis);
}

/// A client dropped while Redis is down must stop reconnecting: once Redis is back, no
/// connection of the dropped client may show up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dropped_while_redis_is_down_does_not_reconnect_later() {
    let mut redis = server().await;
    redis.kill().await.unwrap();
    let lock = common::connect(config(&redis)).await;
    drop(lock);
    // Let the drop's clean-up run, then bring Redis back on the same port.
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart().await.unwrap();
    // The reconnect policy retries every <= 2 s; give a leaked client time to come back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let lingering = other_clients(&redis).await;
    assert_eq!(
        lingering,
        0,
        "a dropped client still (re)connected: {}",
        redis.cmd(&["CLIENT", "LIST"]).await.unwrap()
    );
}

/// A client dropped while Redis is up closes both of its connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_closes_its_connections() {
    let (redis, [lock]) = common::server_with().await;
    let handle = lock.acquire("closes", Lease::Watchdog).await.unwrap();
    assert!(other_clients(&redis).await >= 1);
    drop(handle);
    drop(lock);
    let closed = eventually(Duration::from_secs(15), || async {
        other_clients(&redis).await == 0
    })
    .await;
    assert!(
        closed,
        "connections left after dropping the client: {}",
        redis.cmd(&["CLIENT", "LIST"]).await.unwrap()
    );
}
