//! The minimum hold (`AcquireOptions::hold_at_least`) on a real redis-server: what the scripts
//! leave at the key, how re-sent scripts, fair waiters and an operator's forced release treat
//! it, and the scheduled job it exists for — two reaper pods in separate processes, ticking on
//! Redis' clock, sweep each tick exactly once.

use crate::common;

use std::time::Duration;

use common::{SLACK, client, config, eventually, server};
use lock_core::lock::{AcquireOptions, DistributedLock, DistributedLockExt, Lease, ReleaseOutcome};
use lock_redis::limits::TOMBSTONE_TTL;
use lock_redis::lock::{ForceReleased, LockState, RedisLock};
use lock_testkit::{RedisServer, test_child};
use tokio::time::Instant;

async fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.cmd(&["PTTL", key]).await.unwrap().parse().unwrap()
}

/// Re-sends a script exactly as the client sends it, as a retry after a reconnect would.
async fn resend(redis: &RedisServer, script: &str, keys: &[&str], args: &[&str]) -> String {
    let sha = redis.cmd(&["SCRIPT", "LOAD", script]).await.unwrap();
    let numkeys = keys.len().to_string();
    let mut command = vec!["EVALSHA", &sha, &numkeys];
    command.extend(keys);
    command.extend(args);
    redis.cmd(&command).await.unwrap()
}

/// Re-sends `owner`'s release of `name` exactly as `lock` sends it.
async fn resend_release(redis: &RedisServer, lock: &RedisLock, name: &str, owner: &str) -> String {
    let release_args = [
        owner,
        &lock.release_channel(name),
        &TOMBSTONE_TTL.as_millis().to_string(),
    ];
    let key = lock.redis_key(name);
    resend(
        redis,
        lock_redis::scripts::RELEASE_SCRIPT,
        &[&key],
        &release_args,
    )
    .await
}

/// A watchdog holder with a 30 s minimum hold releases at once: the release reports
/// `Released`, but the key stays held by that owner with the rest of the hold as its TTL — far
/// past the 1 s watchdog timeout and never renewed — and re-sent copies of the release and of
/// the acquisition change nothing. An operator's forced release ignores the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_within_the_minimum_hold_keeps_the_key_for_its_owner_until_forced() {
    const NAME: &str = "hold:watchdog";
    let (redis, [lock, other]) = common::server_with().await;
    let key = lock.redis_key(NAME);
    let hold = Duration::from_secs(30);
    let options = AcquireOptions::new(Lease::Watchdog)
        .hold_at_least(hold)
        .unwrap();
    let held = lock.acquire_with(NAME, options).await.unwrap();
    let (owner, token) = (held.owner().to_owned(), held.fencing_token());
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);

    let value = redis.cmd(&["GET", &key]).await.unwrap();
    assert!(value.starts_with(&format!("M|{token}|{owner}|")), "{value}");
    // Well past the watchdog timeout (1 s): only the hold sets this TTL, and renewal, had it
    // continued, would have cut it to 1 s.
    tokio::time::sleep(common::WATCHDOG * 2).await;
    let left = pttl(&redis, &key).await;
    let tombstone = TOMBSTONE_TTL.as_millis() as i64;
    assert!(
        left > 20_000 + tombstone && left <= 30_000 + tombstone,
        "PTTL {left}: the rest of the hold and a tombstone's TTL"
    );

    let error = other.try_acquire(NAME, Lease::Watchdog).await.unwrap_err();
    assert_eq!(error.details()["reason"], "held_by_another_owner");
    assert_eq!(error.details()["holder"], owner);
    let status = other.status(NAME).await.unwrap();
    assert!(
        matches!(&status.state, LockState::Held { holder, fencing_token, ttl: Some(ttl),
                                                  kept_for_minimum_hold: true, .. }
            if *holder == owner && *fencing_token == token && *ttl <= hold),
        "{status:?}"
    );

    let again = resend_release(&redis, &lock, NAME, &owner).await;
    assert_eq!(again, "1", "a re-sent release reports its first outcome");
    let acquire_args = [owner.as_str(), "1000", "30000"];
    let again = resend(
        &redis,
        lock_redis::scripts::ACQUIRE_SCRIPT,
        &[&key],
        &acquire_args,
    )
    .await;
    assert_eq!(again, "2", "a re-sent acquisition finds itself released");
    assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), value);
    assert!(pttl(&redis, &key).await > 20_000 + tombstone);

    match other.force_release(NAME).await.unwrap() {
        ForceReleased::Released {
            holder,
            fencing_token,
            ..
        } => assert_eq!((holder, fencing_token), (owner, token)),
        forced => panic!("the forced release did not free the held key: {forced:?}"),
    }
    let next = other.try_acquire(NAME, Lease::Watchdog).await.unwrap();
    assert!(next.fencing_token() > token);
}

/// When the minimum hold ends the key is free, and reads as its owner's tombstone for a
/// tombstone TTL: a re-sent release still reports "released", status shows who released it, and
/// the next grant's fencing token counts up from the held one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_minimum_hold_ends_the_key_is_its_owners_tombstone() {
    const NAME: &str = "hold:ended";
    let (redis, [lock, other]) = common::server_with().await;
    let options = AcquireOptions::new(Lease::Watchdog)
        .hold_at_least(Duration::from_millis(300))
        .unwrap();
    let held = lock.acquire_with(NAME, options).await.unwrap();
    let (owner, token) = (held.owner().to_owned(), held.fencing_token());
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);

    let ended = eventually(SLACK, || async {
        matches!(other.status(NAME).await, Ok(s) if matches!(s.state, LockState::Released { .. }))
    })
    .await;
    assert!(ended, "the hold never ended");
    match other.status(NAME).await.unwrap().state {
        LockState::Released {
            released_by,
            fencing_token,
            ttl: Some(ttl),
        } => {
            assert_eq!(
                (released_by.as_str(), fencing_token),
                (owner.as_str(), token)
            );
            assert!(ttl <= TOMBSTONE_TTL, "{ttl:?}");
        }
        state => panic!("not a tombstone: {state:?}"),
    }
    let again = resend_release(&redis, &lock, NAME, &owner).await;
    assert_eq!(
        again, "1",
        "a release re-sent after the hold reports its first outcome"
    );
    let next = other.try_acquire(NAME, Lease::Watchdog).await.unwrap();
    assert!(next.fencing_token() > token);
}

/// A fair waiter queued behind a holder that releases within its minimum hold is granted when
/// the hold ends — not before, and not at the end of its own wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_is_granted_when_the_minimum_hold_ends() {
    const NAME: &str = "hold:fair";
    let (redis, [lock, other]) = common::server_with().await;
    let hold = Duration::from_secs(2);
    let granted = Instant::now();
    let held = lock
        .acquire_with(
            NAME,
            AcquireOptions::new(Lease::Watchdog)
                .hold_at_least(hold)
                .unwrap(),
        )
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let fair = common::watchdog_waiting(Duration::from_secs(30)).fair();
        other
            .acquire_with(NAME, fair)
            .await
            .map(|h| h.fencing_token())
    });
    let queued = eventually(SLACK, || async {
        let queue = format!("{}:queue", lock.redis_key(NAME));
        redis.cmd(&["ZCARD", &queue]).await.is_ok_and(|n| n == "1")
    })
    .await;
    assert!(queued, "the fair waiter never queued");
    let token = held.fencing_token();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let next = waiter.await.unwrap().unwrap();
    let after = granted.elapsed();
    assert!(
        after >= hold,
        "granted after {after:?}, within the {hold:?} hold"
    );
    assert!(after < hold + SLACK, "granted only after {after:?}");
    assert!(next > token);
}

/// A grant whose acquisition failed after the script ran — here `min-replicas = 1` on a
/// server without replicas — never reached its caller, who did no work under it: the clean-up
/// frees the key at once, whatever its minimum hold, so another pod may run the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_never_reached_its_caller_is_freed_despite_its_minimum_hold() {
    const NAME: &str = "hold:unconfirmed";
    let redis = server().await;
    let strict = common::connect(
        config(&redis)
            .min_replicas(1)
            .replica_sync_timeout(Duration::from_millis(100)),
    )
    .await;
    let other = client(&redis).await;
    let options = common::watchdog_waiting(Duration::ZERO)
        .hold_at_least(Duration::from_secs(60))
        .unwrap();
    let error = strict.acquire_with(NAME, options).await.unwrap_err();
    assert_eq!(
        error.details()["reason"],
        "replication_unconfirmed",
        "{error}"
    );
    let freed = eventually(SLACK, || async {
        other.try_acquire(NAME, Lease::Watchdog).await.is_ok()
    })
    .await;
    assert!(
        freed,
        "the unconfirmed grant kept the key for its minimum hold"
    );
}

/// A held value without a TTL, or one outside the grammar, was not made by this library. Every
/// script takes it for what it is — not a lock — and leaves it alone: the acquisition is
/// refused as `not_a_lock`, not "held forever by x", a forced release finds nothing held, and
/// status says the key holds no lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_value_without_a_ttl_is_not_a_lock_for_any_script() {
    let (redis, [lock]) = common::server_with().await;

    // A value the acquire script took for a holder, one with fields past the grammar, and
    // fencing tokens no grant writes: past 2^53 (Lua's doubles would stop counting up: the
    // next grant repeated the token, or the client could not read it back and the key stayed
    // unacquirable) and with a leading zero (a forced release could not confirm it).
    for (name, value) in [
        ("no-ttl", "H|12|x|y|5"),
        ("five-fields", "H|12|x|y|z"),
        ("token-past-2^53", "R|9007199254740993|x"),
        ("token-past-u64", "R|18446744073709551616|x"),
        ("held-huge-token", "H|99999999999999999999999|x"),
        ("leading-zero", "H|0005|x"),
    ] {
        let key = lock.redis_key(name);
        redis.cmd(&["SET", &key, value]).await.unwrap();
        if name != "no-ttl" {
            redis.cmd(&["PEXPIRE", &key, "60000"]).await.unwrap();
        }
        let error = lock.try_acquire(name, Lease::Watchdog).await.unwrap_err();
        let failure = common::redis_failure(&error);
        assert_eq!(
            failure.refusal().map(|r| r.as_str()),
            Some("not_a_lock"),
            "{name}: {error}"
        );
        assert_eq!(
            lock.force_release(name).await.unwrap(),
            ForceReleased::NotHeld
        );
        assert!(
            lock.status(name).await.is_err(),
            "{name}: status read a lock"
        );
        assert_eq!(redis.cmd(&["GET", &key]).await.unwrap(), value, "{name}");
    }
}

/// Only what carries its own owner token, or a tombstone, is read without its TTL, and the
/// write that follows sets one: the owner's release frees its grant whose TTL was taken away
/// (left alone, it would be held for ever), and a tombstone without a TTL is granted over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_or_tombstone_without_a_ttl_is_freed_or_granted_with_one() {
    let (redis, [lock]) = common::server_with().await;
    let held = lock.acquire("persisted", Lease::Watchdog).await.unwrap();
    let key = lock.redis_key("persisted");
    redis.cmd(&["PERSIST", &key]).await.unwrap();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(redis.cmd(&["GET", &key]).await.unwrap().starts_with("R|"));
    assert!(pttl(&redis, &key).await > 0, "the tombstone has no TTL");

    let key = lock.redis_key("bare-tombstone");
    redis.cmd(&["SET", &key, "R|12|x"]).await.unwrap();
    let granted = lock
        .try_acquire("bare-tombstone", Lease::Watchdog)
        .await
        .unwrap();
    assert!(granted.fencing_token() > 12);
    assert!(pttl(&redis, &key).await > 0, "the grant has no TTL");
}

/// The renewal agrees with the other scripts too: the holder's own grant followed by fields the
/// grammar does not have is not a lock, so the watchdog does not renew it and the holder is told
/// its lease is lost (it renewed any tail after the grant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_does_not_renew_a_grant_with_fields_past_the_grammar() {
    let (redis, [lock]) = common::server_with().await;
    let held = lock.acquire("tail", Lease::Watchdog).await.unwrap();
    let key = lock.redis_key("tail");
    let value = redis.cmd(&["GET", &key]).await.unwrap();
    let tampered = format!("{value}||5|x");
    redis
        .cmd(&["SET", &key, &tampered, "KEEPTTL"])
        .await
        .unwrap();
    assert!(lock.status("tail").await.is_err(), "status read a lock");
    let lost = tokio::time::timeout(SLACK, held.lost()).await;
    assert!(lost.is_ok(), "the watchdog kept renewing {tampered}");
}

/// An instance id containing `/` comes back whole in `LockState::Held`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_id_with_a_slash_is_reported_whole() {
    let redis = server().await;
    let lock = common::connect(config(&redis).instance_id("eu-west-1/billing-7f9c")).await;
    let _held = lock.acquire("slash", Lease::Watchdog).await.unwrap();
    match lock.status("slash").await.unwrap().state {
        LockState::Held { instance_id, .. } => assert_eq!(instance_id, "eu-west-1/billing-7f9c"),
        state => panic!("not held: {state:?}"),
    }
}

/// The reaper pods' environment: `<redis url>|<pod name>|<skew in ms>`.
const POD: &str = "HOLD_AT_LEAST_REAPER_POD";
const TICKS: u64 = 4;
/// Tick period, the second pod's lateness and the minimum hold: the hold covers the late pod's
/// tick with 1.5 s to spare, and ends 1 s before the next tick; a double or a missed sweep
/// needs a process to stall for over 1 s.
const PERIOD_MS: u64 = 3_000;
const SKEW_MS: u64 = 500;
const HOLD: Duration = Duration::from_secs(2);

/// One reaper pod (a child process of `two_reaper_pods_sweep_each_tick_exactly_once`; does
/// nothing on its own): waits for the start time the parent sets in Redis, then each tick —
/// aligned to Redis' clock, this pod `skew` late — tries the lock once, as the README's reaper
/// does, and sweeps for 50 ms, counting its sweep of that tick in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of two_reaper_pods_sweep_each_tick_exactly_once"]
async fn reaper_pod() {
    let Ok(spec) = std::env::var(POD) else {
        return;
    };
    let [url, pod, skew]: [&str; 3] = spec.split('|').collect::<Vec<_>>().try_into().unwrap();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let redis = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        lock_testkit::command_at("127.0.0.1", port, None, &args)
            .await
            .unwrap()
    };
    let lock = common::connect(
        common::default_config(url)
            .command_timeout(common::COMMAND_TIMEOUT)
            .instance_id(pod),
    )
    .await;
    redis(vec!["INCR".into(), "reaper:ready".into()]).await;
    let start_ms: u64 = loop {
        if let Ok(start) = redis(vec!["GET".into(), "reaper:start".into()])
            .await
            .parse()
        {
            break start;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Redis' clock now, against this process' monotonic clock: the ticks' local instants.
    let time = redis(vec!["TIME".into()]).await;
    let (secs, micros) = time.split_once('\n').unwrap();
    let server_ms = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
    let now = Instant::now();
    let origin = match start_ms.checked_sub(server_ms) {
        Some(ahead) => now + Duration::from_millis(ahead),
        None => now - Duration::from_millis(server_ms - start_ms),
    };
    let skew = Duration::from_millis(skew.parse().unwrap());

    let tick_options = common::fixed_waiting(Duration::from_millis(PERIOD_MS), Duration::ZERO)
        .hold_at_least(HOLD)
        .unwrap();
    for tick in 0..TICKS {
        tokio::time::sleep_until(origin + Duration::from_millis(tick * PERIOD_MS) + skew).await;
        let swept = lock
            .with_lock("msisdn-reaper", tick_options, || async {
                redis(vec!["INCR".into(), format!("reaper:sweeps:{tick}")]).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            })
            .await;
        match swept {
            Ok(()) => eprintln!("{pod}: swept tick {tick}"),
            Err(e) if e.details()["reason"] == "held_by_another_owner" => {
                eprintln!("{pod}: tick {tick} swept by another pod")
            }
            Err(e) => panic!("{pod}: tick {tick}: {e}"),
        }
    }
}

/// Two reaper pods in separate processes, ticking half a second apart, each
/// tick one attempt with a fixed lease — the README's reaper. The sweep takes 50 ms; without a
/// minimum hold the late pod finds the key free again and sweeps the same tick a second time.
/// With `hold_at_least(2 s)` every tick is swept exactly once across the pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reaper_pods_sweep_each_tick_exactly_once() {
    let redis = server().await;
    let test = "reaper_pod";
    let mut pods = [("pod-a", 0), ("pod-b", SKEW_MS)].map(|(pod, skew)| {
        test_child(module_path!(), test)
            .env(POD, format!("{}|{pod}|{skew}", redis.url()))
            .spawn()
            .expect("start the child process")
    });
    let ready = eventually(Duration::from_secs(30), || async {
        redis
            .cmd(&["GET", "reaper:ready"])
            .await
            .is_ok_and(|n| n == "2")
    })
    .await;
    assert!(ready, "the reaper pods did not connect");
    // The first tick a second from now, on Redis' clock.
    let time = redis.cmd(&["TIME"]).await.unwrap();
    let (secs, micros) = time.split_once('\n').unwrap();
    let start = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000 + 1000;
    redis
        .cmd(&["SET", "reaper:start", &start.to_string()])
        .await
        .unwrap();

    let deadline =
        Instant::now() + Duration::from_millis(PERIOD_MS * TICKS) + Duration::from_secs(30);
    for pod in &mut pods {
        let status = loop {
            if let Some(status) = pod.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "a reaper pod did not finish");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(status.success(), "a reaper pod failed: {status}");
    }
    for tick in 0..TICKS {
        let sweeps = common::value(&redis, &format!("reaper:sweeps:{tick}")).await;
        assert_eq!(
            sweeps, "1",
            "tick {tick} was swept {sweeps:?} times across the pods"
        );
    }
}
