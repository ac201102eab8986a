//! Dropping things at the wrong moment against a real redis-server: acquisitions whose futures
//! are dropped mid-script or mid-wait must leave no subscription, no watchdog registration and no
//! grant held by nobody; a released (or dropped) handle's `lost()` must never fire.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{SLACK, WATCHDOG, client, command_calls, delta, eventually};
use lock_core::lock::{AcquireOptions, DistributedLock, Lease, LostReason, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::{RedisServer, Rng};

/// The key a watchdog holder holds part of the time, and two keys the cancelling clients only
/// contend for among themselves.
const KEYS: [&str; 3] = ["drop:held", "drop:b", "drop:c"];
const CLIENTS: usize = 4;
const ACQUISITIONS: usize = 1000;
/// Far longer than the checks below wait: a grant left behind by a cancelled acquisition would
/// still be held (by nobody) when they look.
const LONG_LEASE: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Counts {
    granted: AtomicUsize,
    cancelled: AtomicUsize,
    /// Cancelled with a zero budget: dropped right after the first poll sent the script.
    cancelled_in_flight: AtomicUsize,
    /// Cancelled while the key was held by the watchdog holder (waiting on pub/sub or its TTL).
    cancelled_while_held: AtomicUsize,
}

/// The lock keys still in state `H|` (granted), with their PTTL, over the whole keyspace.
const HELD_KEYS: &str = "local held = {} \
    for _, k in ipairs(redis.call('KEYS', '*')) do \
      local v = redis.call('GET', k) \
      if string.sub(v, 1, 2) == 'H|' then \
        held[#held + 1] = k .. ' = ' .. v .. ' (PTTL ' .. redis.call('PTTL', k) .. ')' \
      end \
    end \
    return held";

/// Keys without a TTL, over the whole keyspace.
const KEYS_WITHOUT_TTL: &str = "local bad = {} \
    for _, k in ipairs(redis.call('KEYS', '*')) do \
      if redis.call('PTTL', k) == -1 then bad[#bad + 1] = k end \
    end \
    return bad";

async fn eval(redis: &RedisServer, script: &str) -> String {
    redis.cmd(&["EVAL", script, "0"]).await.unwrap()
}

/// Holds `KEYS[0]` with a watchdog lease part of the time (long enough for renewals to happen
/// under the waiters), releasing or dropping it, until `stop`.
async fn holder(lock: RedisLock, seed: u64, stop: Arc<AtomicBool>, holding: Arc<AtomicBool>) {
    let mut rng = Rng(seed);
    let options = common::watchdog_waiting(Duration::from_secs(30));
    while !stop.load(Ordering::SeqCst) {
        let handle = lock
            .acquire_with(KEYS[0], options)
            .await
            .expect("the holder did not get its key back");
        holding.store(true, Ordering::SeqCst);
        tokio::time::sleep(rng.ms(20, 700)).await;
        holding.store(false, Ordering::SeqCst);
        if rng.below(2) == 0 {
            // Released, or NotHeld if a stalled machine let the lease lapse: not this test's point.
            let _ = handle.release().await.expect("release not confirmed");
        } else {
            drop(handle);
        }
        tokio::time::sleep(rng.ms(0, 60)).await;
    }
}

/// `count` acquisitions, each cancelled by a random 0–20 ms budget unless granted within it.
async fn canceller(
    lock: RedisLock,
    seed: u64,
    count: usize,
    counts: Arc<Counts>,
    holding: Arc<AtomicBool>,
) {
    let mut rng = Rng(seed);
    for _ in 0..count {
        let key = if rng.below(2) == 0 {
            KEYS[0]
        } else {
            KEYS[1 + rng.below(2) as usize]
        };
        let lease = if rng.below(2) == 0 {
            Lease::Watchdog
        } else {
            Lease::Fixed(LONG_LEASE)
        };
        // The wait far exceeds every budget: only our timeout ends an acquisition early.
        let options = AcquireOptions::new(lease)
            .wait_time(Duration::from_secs(30))
            .unwrap();
        let budget = rng.ms(0, 20);
        let held_by_holder = key == KEYS[0] && holding.load(Ordering::SeqCst);
        match tokio::time::timeout(budget, lock.acquire_with(key, options)).await {
            Ok(Ok(handle)) => {
                counts.granted.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(rng.ms(0, 5)).await;
                if rng.below(2) == 0 {
                    let _ = handle.release().await.expect("release not confirmed");
                } else {
                    drop(handle);
                }
            }
            Ok(Err(err)) => panic!("an acquisition with a 30 s wait failed within 20 ms: {err}"),
            Err(_) => {
                counts.cancelled.fetch_add(1, Ordering::Relaxed);
                if budget.is_zero() {
                    counts.cancelled_in_flight.fetch_add(1, Ordering::Relaxed);
                }
                if held_by_holder {
                    counts.cancelled_while_held.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// 1,000 acquisitions by 4 clients, dropped at random points — with the script in flight, while
/// subscribing, while waiting for a release — some on a key a watchdog holder holds part of the
/// time. Afterwards: no subscription on either side, no watchdog registration, no key granted
/// to nobody (every lease here is 60 s or a watchdog lease, so an orphan grant would still be
/// there), no key without a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_dropped_at_random_points_leave_nothing_behind() {
    let seed = lock_testkit::seed("DROP_SAFETY_SEED");
    let (redis, [holder_lock]) = common::server_with().await;
    let mut locks = Vec::new();
    for _ in 0..CLIENTS {
        locks.push(client(&redis).await);
    }
    let before = command_calls(&redis).await;
    let (stop, holding) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let counts = Arc::new(Counts::default());
    let holder_task = tokio::spawn(holder(
        holder_lock.clone(),
        seed ^ 0x5555,
        Arc::clone(&stop),
        Arc::clone(&holding),
    ));
    let mut tasks = Vec::new();
    for (n, lock) in locks.iter().enumerate() {
        tasks.push(tokio::spawn(canceller(
            lock.clone(),
            seed.wrapping_add(n as u64 + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                | 1,
            ACQUISITIONS / CLIENTS,
            Arc::clone(&counts),
            Arc::clone(&holding),
        )));
    }
    for task in tasks {
        task.await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    holder_task.await.unwrap();
    let after = command_calls(&redis).await;

    let (granted, cancelled) = (
        counts.granted.load(Ordering::Relaxed),
        counts.cancelled.load(Ordering::Relaxed),
    );
    let (in_flight, while_held) = (
        counts.cancelled_in_flight.load(Ordering::Relaxed),
        counts.cancelled_while_held.load(Ordering::Relaxed),
    );
    let ssubscribes = delta(&before, &after, "ssubscribe");
    eprintln!(
        "{granted} granted, {cancelled} cancelled ({in_flight} with the script in flight, \
         {while_held} while the holder held the key); {ssubscribes} SSUBSCRIBEs"
    );
    assert_eq!(granted + cancelled, ACQUISITIONS);
    // Every kind of cancellation point was reached.
    assert!(in_flight > 0, "no acquisition was cancelled mid-script");
    assert!(
        while_held > 0 && ssubscribes > 0,
        "no acquisition was cancelled while waiting"
    );

    let all = || locks.iter().chain([&holder_lock]);
    let clean = eventually(SLACK * 4, || async {
        all().all(|l| l.client().subscribed_channels().is_empty() && l.watchdog_lease_count() == 0)
            && common::shard_channels(&redis).await.is_empty()
    })
    .await;
    assert!(
        clean,
        "left behind: client subscriptions {:?}, watchdog leases {:?}, server subscriptions {:?}",
        all()
            .map(|l| l.client().subscribed_channels())
            .collect::<Vec<_>>(),
        all()
            .map(RedisLock::watchdog_lease_count)
            .collect::<Vec<_>>(),
        redis.cmd(&["PUBSUB", "SHARDCHANNELS"]).await.unwrap()
    );

    // Every handle is gone, so a key still granted (H|) is held by nobody. Dropped handles and
    // cancelled acquisitions release in the background within a round trip or so; allow a
    // loaded machine plenty, but far less than the 60 s fixed leases.
    let no_ttl = eval(&redis, KEYS_WITHOUT_TTL).await;
    assert!(no_ttl.is_empty(), "keys without a TTL: {no_ttl}");
    let freed = eventually(WATCHDOG + SLACK * 2, || async {
        eval(&redis, HELD_KEYS).await.is_empty()
    })
    .await;
    assert!(
        freed,
        "granted to nobody: {}",
        eval(&redis, HELD_KEYS).await
    );
    // What is left are tombstones (each with its TTL) or nothing.
    for key in KEYS {
        let redis_key = locks[0].redis_key(key);
        let value = redis.cmd(&["GET", &redis_key]).await.unwrap();
        assert!(
            value.is_empty() || value.starts_with("R|"),
            "{key}: {value}"
        );
    }
    let no_ttl = eval(&redis, KEYS_WITHOUT_TTL).await;
    assert!(no_ttl.is_empty(), "keys without a TTL: {no_ttl}");
}

/// After an explicit release — or a drop — `lost()` never fires: not at the lease's local
/// deadline (a fixed lease whose deadline passes during the watch), not when the watchdog stops
/// renewing and the key is gone. A handle kept without release shows the watch can see a firing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_never_fires_after_a_release_or_a_drop() {
    let (_redis, [lock]) = common::server_with().await;
    // Its local deadline passes well inside the watch window below.
    let short = Lease::Fixed(Duration::from_millis(1500));
    let mut watched = Vec::new();
    for (name, lease, drop_it) in [
        ("lost:wd-released", Lease::Watchdog, false),
        ("lost:fixed-released", short, false),
        ("lost:wd-dropped", Lease::Watchdog, true),
        ("lost:fixed-dropped", short, true),
    ] {
        let handle = lock.acquire(name, lease).await.unwrap();
        let lost = tokio::spawn(handle.lost());
        if drop_it {
            drop(handle);
        } else {
            assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
        }
        watched.push((name, lost));
    }
    // The control: kept, never released; its lease must be reported lost in the window.
    let kept = lock.acquire("lost:kept", short).await.unwrap();
    let control = tokio::spawn(kept.lost());

    let window = WATCHDOG * 3;
    tokio::time::sleep(window).await;
    assert!(
        control.is_finished(),
        "the control's lost() did not fire in {window:?}"
    );
    assert_eq!(control.await.unwrap(), LostReason::Expired);
    for (name, lost) in watched {
        assert!(
            !lost.is_finished(),
            "{name}: lost() fired after the lease was given back: {:?}",
            lost.await
        );
        lost.abort();
    }
    assert_eq!(lock.watchdog_lease_count(), 0);
    drop(kept);
}
