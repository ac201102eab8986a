//! A reply lost on the wire. A TCP proxy forwards a command to Redis, swallows the
//! reply and then closes the connection; fred reconnects and re-sends the in-flight command, so
//! Redis runs the script twice. The scripts claim to be idempotent per owner token.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{SLACK, command_calls, delta, server};
use lock_core::{AcquireOptions, DistributedLock, Lease, ReleaseOutcome};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testkit::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One-shot trap: the next client→server chunk containing `marker` is forwarded, its reply is
/// swallowed, and the connection is closed 150 ms later.
#[derive(Clone, Default)]
struct Trap(Arc<Mutex<Option<Vec<u8>>>>);

impl Trap {
    fn arm(&self, marker: &str) {
        *self.0.lock().unwrap() = Some(marker.as_bytes().to_vec());
    }
    fn is_armed(&self) -> bool {
        self.0.lock().unwrap().is_some()
    }
    fn hit(&self, chunk: &[u8]) -> bool {
        let mut armed = self.0.lock().unwrap();
        let hit = armed
            .as_ref()
            .is_some_and(|m| chunk.windows(m.len()).any(|w| w == m.as_slice()));
        if hit {
            *armed = None;
        }
        hit
    }
}

async fn proxy(upstream: u16, trap: Trap) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let trap = trap.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let (cut_tx, mut cut_rx) = tokio::sync::watch::channel(false);
                let up = tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let trapped = trap.hit(&buf[..n]);
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        if trapped {
                            let _ = cut_tx.send(true);
                            // Let Redis run it, then drop both sides.
                            tokio::time::sleep(Duration::from_millis(150)).await;
                            return;
                        }
                    }
                });
                let down = tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        tokio::select! {
                            read = sr.read(&mut buf) => {
                                let n = match read { Ok(0) | Err(_) => return, Ok(n) => n };
                                if *cut_rx.borrow() { continue; }
                                if cw.write_all(&buf[..n]).await.is_err() { return; }
                            }
                            changed = cut_rx.changed() => {
                                if changed.is_err() { return; }
                            }
                        }
                    }
                });
                // When the upstream half ends after a trap, abort the other half: both sockets
                // close and fred sees the connection drop.
                let _ = up.await;
                down.abort();
            });
        }
    });
    port
}

async fn setup() -> (RedisServer, Trap, RedisLock) {
    let redis = server().await;
    let trap = Trap::default();
    let port = proxy(redis.port(), trap.clone()).await;
    let lock = RedisLock::connect(
        RedisLockConfig::new(format!("redis://127.0.0.1:{port}"))
            .watchdog_timeout(Duration::from_secs(3))
            .command_timeout(Duration::from_secs(2))
            .wait_time(Duration::from_secs(2))
            .instance_id("retry-pod"),
    )
    .await
    .unwrap();
    lock.ping().await.unwrap();
    (redis, trap, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_is_granted_once_with_the_stored_token() {
    let (redis, trap, lock) = setup().await;
    let before = command_calls(&redis).await;
    trap.arm("retry-acquire");
    let handle = lock
        .acquire("retry-acquire", Lease::Fixed(Duration::from_secs(60)))
        .await
        .expect("the re-sent acquire must find its own grant");
    assert!(!trap.is_armed(), "the trap never fired");
    let after = command_calls(&redis).await;
    assert!(
        delta(&before, &after, "evalsha") >= 2,
        "the acquire was not re-sent"
    );
    let value = redis
        .cmd(&["GET", &lock.redis_key("retry-acquire")])
        .await
        .unwrap();
    assert_eq!(
        value,
        format!("H|{}|{}", handle.fencing_token(), handle.owner())
    );
    assert!(handle.is_held());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_reports_released() {
    let (redis, trap, lock) = setup().await;
    let handle = lock
        .acquire("retry-release", Lease::Fixed(Duration::from_secs(60)))
        .await
        .unwrap();
    let before = command_calls(&redis).await;
    trap.arm(&lock.release_channel("retry-release"));
    let outcome = handle.release().await.unwrap();
    assert!(!trap.is_armed(), "the trap never fired");
    let after = command_calls(&redis).await;
    assert!(
        delta(&before, &after, "evalsha") >= 2,
        "the release was not re-sent"
    );
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert_eq!(delta(&before, &after, "spublish"), 1, "published twice");
}

/// The release ran, its reply was lost, and a waiter of another client took the key (woken by
/// the release) before fred re-sent the release. The re-sent release finds the new holder and
/// reports `NotHeld` — "the lease had already ended; the critical section may have overlapped
/// another holder" — although this holder released the key itself, in time, and nothing
/// overlapped. `with_lock` logs a false "another owner may have run concurrently" warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_does_not_report_not_held_when_a_waiter_took_over() {
    let (redis, trap, lock) = setup().await;
    let handle = lock
        .acquire("retry-takeover", Lease::Fixed(Duration::from_secs(60)))
        .await
        .unwrap();
    let other = common::client(&redis).await;
    let waiter = tokio::spawn(async move {
        let options = AcquireOptions::new(Lease::Fixed(Duration::from_secs(60)))
            .wait(Duration::from_secs(20));
        other.acquire_with("retry-takeover", options).await
    });
    let channel = lock.release_channel("retry-takeover");
    assert!(
        common::eventually(SLACK, || async {
            redis
                .cmd(&["PUBSUB", "SHARDNUMSUB", &channel])
                .await
                .unwrap()
                == format!("{channel}\n1")
        })
        .await
    );
    trap.arm(&channel);
    assert!(handle.is_held());
    let outcome = handle.release().await.unwrap();
    assert!(!trap.is_armed(), "the trap never fired");
    let taken = waiter
        .await
        .unwrap()
        .expect("the waiter got the released key");
    assert_eq!(
        outcome,
        ReleaseOutcome::Released,
        "this holder released the key itself (the waiter got it only because of that release, \
         token {}), yet the release reports that the lease had already ended",
        taken.fencing_token()
    );
}

/// A watchdog renewal whose reply was lost is re-sent; the lease stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_whose_reply_was_lost_keeps_the_lease() {
    let (redis, trap, lock) = setup().await;
    let handle = lock.acquire("retry-renew", Lease::Watchdog).await.unwrap();
    let before = command_calls(&redis).await;
    trap.arm("retry-renew");
    assert!(
        common::eventually(Duration::from_secs(10), || async { !trap.is_armed() }).await,
        "no renewal passed the proxy"
    );
    // Two more ticks (1 s each).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = command_calls(&redis).await;
    assert!(delta(&before, &after, "evalsha") >= 2);
    assert!(handle.is_held(), "{:?}", handle.status());
    assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
}
