//! The Redis lock through Sentinel (`redis-sentinel://…`): the conformance suite on one
//! deployment, and failovers — a manual `SENTINEL FAILOVER` and a killed master — with a watchdog
//! lock held, a fixed-lease lock held and a waiter on each during the failover.
//!
//! Afterwards the clients follow the new master (acquisitions succeed within down-after plus a
//! few seconds; the times are printed) — also after `SENTINEL FAILOVER`, where the old master
//! stays a master for 10 to 20 s more and the clients move on the Sentinels' `+switch-master`
//! event — the holder keeps its lease or learns through `lost()`, the waiters' subscriptions
//! follow to the new master (each gets its lock on the release, not at the 60 s TTL), and no two
//! holders ever overlap (checked at every grant, and with the fencing tokens).
//!
//! The split window of a manual failover — a client still on the old master, which accepts
//! writes until the Sentinels demote it, while new clients use the new one — is checked on its
//! own: the client must move before the old master is demoted.
//!
//! Key losses (a replica promoted without a grant) are in `sentinel_key_loss.rs`.

use crate::common;
use crate::sentinel_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::lock::conformance::{self, LockFactory};
use lock_core::lock::{DistributedLock, Lease, LockHandle, ReleaseOutcome};
use lock_redis::lock::RedisLock;
use lock_testkit::RedisSentinel;
use sentinel_common::{
    COMMAND_TIMEOUT, FAILOVER, GENEROUS, Ledger, LostWatch, WATCHDOG, config, connect, describe,
    eventually, value,
};
use tokio::time::Instant;

// ---- 1. conformance ---------------------------------------------------------------------------

/// Clients of one Sentinel deployment, with the short watchdog the suite wants.
struct ThroughSentinel {
    url: String,
}

/// Watchdog timeout for the conformance suite (it waits past it).
const SUITE_WATCHDOG: Duration = Duration::from_secs(1);

#[async_trait::async_trait]
impl LockFactory for ThroughSentinel {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        let config = common::config_at(self.url.clone())
            .watchdog_timeout(SUITE_WATCHDOG)
            .instance_id("sentinel-pod");
        Arc::new(common::connect(config).await)
    }

    fn watchdog_timeout(&self) -> Duration {
        SUITE_WATCHDOG
    }

    fn command_timeout(&self) -> Duration {
        COMMAND_TIMEOUT
    }
}

/// Every check of the suite, in turn, on one deployment (each `#[tokio::test]` has its own
/// runtime, and a deployment is five processes: one test runs them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_through_sentinel() {
    let sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let started = Instant::now();
    let failed = conformance::run_all(Arc::new(ThroughSentinel {
        url: sentinel.url(),
    }))
    .await;
    assert!(
        failed.is_empty(),
        "conformance checks failed through Sentinel: {failed:?}"
    );
    eprintln!("sentinel conformance total: {:?}", started.elapsed());
    // The suite ran against the deployment's master, not some other Redis.
    let keys = sentinel.master().cmd(&["DBSIZE"]).await.unwrap();
    assert_ne!(
        keys.trim(),
        "0",
        "no lock key was ever written to the master"
    );
}

// ---- 2./3. failovers with locks held and waiters waiting ---------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failover {
    /// `SENTINEL FAILOVER`: the replica is promoted, the old master turned into its replica.
    Manual,
    /// SIGKILL of the master: the Sentinels notice after down-after and promote the replica.
    KillMaster,
}

/// A holder's handle, shared with the waiters so that each can check, at the moment it is
/// granted, that the holder no longer believes it holds the lock. `None` once the holder has
/// started releasing it.
type Shared = Arc<Mutex<Option<LockHandle>>>;

/// Waits for `name` (long waits, retried after fail-closed errors during the failover) until
/// granted; at the grant, asserts the other holder is not holding, and records the grant.
/// Returns the handle, the instant of the grant, and the failures seen.
async fn wait_for(
    lock: RedisLock,
    name: &'static str,
    holder: Shared,
    ledger: Ledger,
) -> (LockHandle, Instant, Vec<String>) {
    let started = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    loop {
        match lock
            .acquire_with(name, common::watchdog_waiting(GENEROUS))
            .await
        {
            Ok(handle) => {
                let at = Instant::now();
                if let Some(other) = holder.lock().unwrap().as_ref() {
                    assert!(
                        !other.is_held(),
                        "`{name}` granted to the waiter (token {}) while the holder (token {}) still holds it",
                        handle.fencing_token(),
                        other.fencing_token()
                    );
                }
                ledger.record(&handle);
                return (handle, at, failures);
            }
            Err(error) => {
                let failure = describe(&error);
                if !failures.contains(&failure) {
                    failures.push(failure);
                }
            }
        }
        assert!(
            started.elapsed() < 2 * GENEROUS,
            "the waiter on `{name}` never got it; failures: {failures:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How the probe client saw the failover.
#[derive(Debug)]
struct Probe {
    /// The lock name of the grant that counts as "recovered".
    name: String,
    /// That grant, still held (60 s lease).
    handle: LockHandle,
    /// From the start of the failover to that grant.
    recovered_after: Duration,
    /// From the start of the first failed attempt to that grant (zero if none failed).
    unavailable_for: Duration,
    failures: Vec<String>,
}

/// One-attempt acquisitions, every 50 ms from `started` on, until one succeeds after the
/// failover has been observed: after a failed attempt, or once `done` is set (the testkit's
/// failover call returned) — a client that follows without a visible error still counts. Each
/// attempt uses a fresh name (`<prefix>:<n>`), so a release lost in the failover cannot make a
/// later attempt wait for an earlier grant.
async fn probe(lock: &RedisLock, prefix: &str, started: Instant, done: &Mutex<bool>) -> Probe {
    let mut first_failure: Option<Instant> = None;
    let mut failures: Vec<String> = Vec::new();
    for attempt in 0.. {
        let name = format!("{prefix}:{attempt}");
        let name = name.as_str();
        let done_before = *done.lock().unwrap();
        let attempt_started = Instant::now();
        let attempt = lock
            .acquire_with(
                name,
                common::fixed_waiting(Duration::from_secs(60), Duration::ZERO),
            )
            .await;
        match attempt {
            Ok(handle) if first_failure.is_some() || done_before => {
                let now = Instant::now();
                return Probe {
                    name: name.to_owned(),
                    handle,
                    recovered_after: now - started,
                    unavailable_for: first_failure.map_or(Duration::ZERO, |at| now - at),
                    failures,
                };
            }
            Ok(handle) => {
                let _ = handle.release().await;
            }
            Err(error) => {
                first_failure.get_or_insert(attempt_started);
                let failure = describe(&error);
                if !failures.contains(&failure) {
                    failures.push(failure);
                }
            }
        }
        assert!(
            started.elapsed() < GENEROUS + FAILOVER,
            "no acquisition succeeded {:?} after the failover started; failures: {failures:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!("the attempts are counted without end")
}

/// The scenario of both failover tests.
async fn locks_survive(kind: Failover) {
    const WATCHED: &str = "sentinel:watchdog";
    const FIXED: &str = "sentinel:fixed";
    const PROBE: &str = "sentinel:probe";
    let label = match kind {
        Failover::Manual => "SENTINEL FAILOVER",
        Failover::KillMaster => "killed master",
    };
    let mut sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let ledger = Ledger::default();
    let holder = connect(config(&sentinel)).await;
    // One client waits for both locks: its subscriptions must all move to the new master.
    let waiter = connect(config(&sentinel)).await;
    let prober = connect(config(&sentinel)).await;

    // A watchdog lock and a 60 s fixed lock, both on the replica before the failover starts.
    let watched = holder.acquire(WATCHED, Lease::Watchdog).await.unwrap();
    let fixed = common::hold(&holder, FIXED, Duration::from_secs(60)).await;
    ledger.record(&watched);
    ledger.record(&fixed);
    let (watched_token, fixed_token) = (watched.fencing_token(), fixed.fencing_token());
    let watched_lost = LostWatch::start(&watched);
    for (name, owner) in [(WATCHED, watched.owner()), (FIXED, fixed.owner())] {
        let key = holder.redis_key(name);
        let replicated = eventually(FAILOVER, || async {
            value(sentinel.replica(), &key).await.contains(owner)
        })
        .await;
        assert!(replicated, "`{name}` never reached the replica");
    }
    let watched: Shared = Arc::new(Mutex::new(Some(watched)));
    let fixed: Shared = Arc::new(Mutex::new(Some(fixed)));

    // A waiter on each, subscribed to its release channel before the failover.
    let watch_waiting = tokio::spawn(wait_for(
        waiter.clone(),
        WATCHED,
        Arc::clone(&watched),
        ledger.clone(),
    ));
    let fixed_waiting = tokio::spawn(wait_for(
        waiter.clone(),
        FIXED,
        Arc::clone(&fixed),
        ledger.clone(),
    ));
    let subscribed = eventually(FAILOVER, || async {
        waiter.client().subscribed_channels().len() == 2
    })
    .await;
    assert!(subscribed, "the waiters never subscribed");

    // --- the failover, with a client probing all along ---------------------------------------
    let old_master = sentinel.master().port();
    let started = Instant::now();
    let done = Mutex::new(false);
    let failover = async {
        let promoted = match kind {
            Failover::Manual => sentinel.failover().await,
            Failover::KillMaster => sentinel.kill_master().await,
        }
        .expect("the failover completes");
        *done.lock().unwrap() = true;
        (promoted, started.elapsed())
    };
    let ((promoted, failover_took), probe) =
        tokio::join!(failover, probe(&prober, PROBE, started, &done));
    assert_ne!(promoted, old_master);
    assert_eq!(sentinel.master().port(), promoted);
    eprintln!(
        "sentinel {label}: failover settled after {failover_took:?}; first acquisition after \
         {:?} (unavailable for {:?}; failures meanwhile: {:?})",
        probe.recovered_after, probe.unavailable_for, probe.failures
    );
    assert!(
        probe.recovered_after <= failover_took + FAILOVER,
        "acquisitions recovered only {:?} after the failover started (it settled after \
         {failover_took:?})",
        probe.recovered_after
    );
    // The probe's grant is on the new master.
    let probe_value = value(sentinel.master(), &prober.redis_key(&probe.name)).await;
    assert!(
        probe_value.contains(probe.handle.owner()),
        "the probe was granted, but the new master holds `{probe_value}`"
    );
    ledger.record(&probe.handle);
    // Clients that were connected before the failover follow too.
    let (fresh, took, failures) = sentinel_common::acquire_until_granted(
        &holder,
        "sentinel:holder-probe",
        Lease::Fixed(Duration::from_secs(10)),
        FAILOVER,
    )
    .await;
    eprintln!(
        "sentinel {label}: the holder's client acquired after {:?} more (failures {failures:?})",
        took
    );
    ledger.record(&fresh);
    assert_eq!(fresh.release().await.unwrap(), ReleaseOutcome::Released);

    // --- the waiters' release subscriptions are on the new master ------------------------------
    // (After a crash both of the waiting client's connections broke with the old master. After
    // `SENTINEL FAILOVER` the old master stays up — a master for 10 to 20 s more — and the client
    // moves both connections on the Sentinels' `+switch-master`.)
    {
        let channels = [
            waiter.release_channel(WATCHED),
            waiter.release_channel(FIXED),
        ];
        let mut args = vec!["PUBSUB", "SHARDNUMSUB"];
        args.extend(channels.iter().map(String::as_str));
        let resubscribed = eventually(FAILOVER, || async {
            // "<channel>\n<count>\n<channel>\n<count>"
            let reply = sentinel.master().cmd(&args).await.unwrap_or_default();
            reply.lines().count() == 4
                && reply
                    .lines()
                    .skip(1)
                    .step_by(2)
                    .all(|count| count.trim().parse::<u64>().is_ok_and(|n| n >= 1))
        })
        .await;
        assert!(
            resubscribed,
            "the waiters' subscriptions did not move to the new master"
        );
    }

    // --- the watchdog holder: kept its lease (renewed on the new master) or told via lost() ---
    let redis_key = holder.redis_key(WATCHED);
    let mut last_pttl = sentinel_common::pttl(sentinel.master(), &redis_key).await;
    let mut renewed_on_new_master = false;
    let outcome_by = Instant::now() + WATCHDOG + FAILOVER;
    while Instant::now() < outcome_by && watched_lost.fired().is_none() {
        let pttl = sentinel_common::pttl(sentinel.master(), &redis_key).await;
        if pttl > last_pttl {
            renewed_on_new_master = true;
            break;
        }
        last_pttl = pttl;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kept = match watched_lost.fired() {
        Some((_, reason)) => {
            eprintln!("sentinel {label}: the watchdog holder lost its lease: {reason:?}");
            false
        }
        None => {
            assert!(
                renewed_on_new_master,
                "the watchdog holder neither renewed on the new master nor learned of a loss"
            );
            let stored = value(sentinel.master(), &redis_key).await;
            assert!(
                stored.contains(&format!("|{watched_token}|")),
                "renewed, but the new master holds `{stored}`"
            );
            eprintln!(
                "sentinel {label}: the watchdog holder kept its lease (renewed on the new master)"
            );
            true
        }
    };

    // --- release both; each waiter gets its lock, with a higher token --------------------------
    let released = Instant::now();
    let handle = watched.lock().unwrap().take().unwrap();
    let outcome = handle.release().await.unwrap();
    assert_eq!(
        outcome,
        if kept {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        }
    );
    let handle = fixed.lock().unwrap().take().unwrap();
    assert_eq!(
        handle.release().await.unwrap(),
        ReleaseOutcome::Released,
        "the 60 s lease did not survive the failover"
    );
    let (watch_handle, watch_at, watch_failures) = tokio::time::timeout(GENEROUS, watch_waiting)
        .await
        .expect("the watchdog waiter never got the lock")
        .expect("the watchdog waiter failed");
    let (fixed_handle, fixed_at, fixed_failures) = tokio::time::timeout(GENEROUS, fixed_waiting)
        .await
        .expect("the fixed-lease waiter never got the lock")
        .expect("the fixed-lease waiter failed");
    eprintln!(
        "sentinel {label}: waiters granted {:?} (watchdog lock) and {:?} (60 s lock) after the \
         releases; failures while waiting: {watch_failures:?} / {fixed_failures:?}",
        watch_at.saturating_duration_since(released),
        fixed_at.saturating_duration_since(released)
    );
    // The 60 s lease's waiter last saw a TTL of tens of seconds: only a release message from the
    // new master, or its client's re-subscription there (after which waiters re-check), can have
    // woken it this early.
    assert!(
        fixed_at.saturating_duration_since(released) < Duration::from_secs(20),
        "the waiter on the fixed lease did not wake on its release"
    );
    assert!(watch_handle.fencing_token() > watched_token);
    assert!(fixed_handle.fencing_token() > fixed_token);
    for (name, handle) in [(WATCHED, &watch_handle), (FIXED, &fixed_handle)] {
        let stored = value(sentinel.master(), &waiter.redis_key(name)).await;
        assert!(stored.contains(handle.owner()), "`{name}` holds `{stored}`");
    }
    ledger.assert_tokens_unique_and_increasing();
    assert_eq!(
        watch_handle.release().await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        fixed_handle.release().await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        probe.handle.release().await.unwrap(),
        ReleaseOutcome::Released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_waiters_survive_a_manual_sentinel_failover() {
    locks_survive(Failover::Manual).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_waiters_survive_a_killed_master() {
    locks_survive(Failover::KillMaster).await;
}

// ---- 4. the split window of a manual failover ---------------------------------------------------

/// Unnamed normal clients of `server` other than the `CLIENT LIST` caller itself: the lock
/// clients (the Sentinels name their connections, replication links are flagged `S`/`M`, and
/// the testkit opens one connection per command).
async fn lock_connections(server: &lock_testkit::RedisServer) -> Option<usize> {
    let list = server.cmd(&["CLIENT", "LIST"]).await.ok()?;
    Some(
        list.lines()
            .filter(|line| {
                let field = |name: &str| {
                    line.split(' ')
                        .find_map(|f| f.strip_prefix(name))
                        .unwrap_or("?")
                };
                field("name=").is_empty()
                    && field("flags=") == "N"
                    && field("cmd=") != "client|list"
            })
            .count(),
    )
}

/// `ROLE` of `server`: `master` or `slave`.
async fn role(server: &lock_testkit::RedisServer) -> String {
    let role = server.cmd(&["ROLE"]).await.unwrap_or_default();
    role.lines().next().unwrap_or_default().to_owned()
}

/// After `SENTINEL FAILOVER` the Sentinels promote the replica at once but demote the old master
/// only 10 to 20 s later; meanwhile it answers `role:master` and takes writes. A client connected
/// before the failover must move to the new master on the Sentinels' `+switch-master` event —
/// while the old master is still a master — so that it and a fresh client never both hold a lock.
/// Its watchdog lease is kept (renewed on the new master) or reported lost before anyone else
/// can be granted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_the_sentinels_before_the_old_master_is_demoted() {
    const HELD: &str = "split:held";
    const CONTENDED: &str = "split:contended";
    const SENTINEL_USER: &str = "switch-follower";
    const SENTINEL_PASSWORD: &str = "Sw1tch-Pa55";
    let sentinel = RedisSentinel::start().await.expect("the deployment starts");
    let ledger = Ledger::default();
    let old = &sentinel.nodes()[0];
    let new = &sentinel.nodes()[1];
    assert_eq!(sentinel.master().port(), old.port());

    // A reaches the Sentinels as a least-privilege Sentinel user (sentinelUsername and
    // sentinelPassword), and its address also names a Sentinel that is down: neither may keep it
    // from following.
    for node in sentinel.sentinels() {
        node.cmd(&[
            "ACL",
            "SETUSER",
            SENTINEL_USER,
            "reset",
            "on",
            &format!(">{SENTINEL_PASSWORD}"),
            "-@all",
            "+sentinel|get-master-addr-by-name",
            "+sentinel|sentinels",
            "+subscribe",
            "&+switch-master",
        ])
        .await
        .unwrap();
    }
    let dead_port_port = lock_testkit::ClosedPort::new().unwrap();
    let dead_port = dead_port_port.port();
    let address = format!(
        "{}&node=127.0.0.1:{dead_port}&sentinelUsername={SENTINEL_USER}&sentinelPassword={SENTINEL_PASSWORD}",
        sentinel.url()
    );
    let connecting = Instant::now();
    let a = connect(config(&sentinel).address(address)).await;
    eprintln!("sentinel split: A connected in {:?}", connecting.elapsed());
    let held = a.acquire(HELD, Lease::Watchdog).await.unwrap();
    ledger.record(&held);
    let held_token = held.fencing_token();
    let held_lost = LostWatch::start(&held);
    let held_key = a.redis_key(HELD);
    let replicated = eventually(FAILOVER, || async {
        value(new, &held_key).await.contains(held.owner())
    })
    .await;
    assert!(replicated, "the held lease never reached the replica");
    let on_old = eventually(FAILOVER, || async {
        lock_connections(old).await == Some(2)
    })
    .await;
    assert!(
        on_old,
        "A's two connections are not on the master before the failover"
    );

    // --- SENTINEL FAILOVER, with A acquiring fresh names all along -----------------------------
    let started = Instant::now();
    let done = Mutex::new(None::<Duration>);
    let failover = async {
        let promoted = sentinel.failover().await.expect("the failover completes");
        *done.lock().unwrap() = Some(started.elapsed());
        promoted
    };
    // A's first grant that lands on the new master.
    let first_grant_on_new = async {
        for attempt in 0.. {
            let name = format!("split:probe:{attempt}");
            if let Ok(handle) = a
                .acquire_with(
                    &name,
                    common::fixed_waiting(Duration::from_secs(60), Duration::ZERO),
                )
                .await
            {
                // On the promoted node, and not on the old master while it is one (its writes
                // reached the new node while that was its replica).
                let key = a.redis_key(&name);
                let owner = handle.owner();
                let on_new = role(new).await == "master"
                    && value(new, &key).await.contains(owner)
                    && (!value(old, &key).await.contains(owner) || role(old).await != "master");
                let _ = handle.release().await;
                if on_new {
                    return Some(started.elapsed());
                }
            }
            if started.elapsed() > GENEROUS {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        unreachable!()
    };
    let (promoted, first_grant) = tokio::join!(failover, first_grant_on_new);
    let first_grant = first_grant.expect("A was never granted a lock on the new master");
    let failover_took = done
        .lock()
        .unwrap()
        .expect("set when the failover returned");
    assert_eq!(promoted, new.port());

    // --- A's two connections move to the new master while the old one is still a master -----
    let moved = eventually(FAILOVER, || async {
        lock_connections(new).await == Some(2) && lock_connections(old).await == Some(0)
    })
    .await;
    let moved_after = started.elapsed();
    let old_role = role(old).await;
    eprintln!(
        "sentinel split: failover returned after {failover_took:?}; A's first grant on the new \
         master after {first_grant:?}; both of A's connections seen on it after {moved_after:?} \
         (old master then `{old_role}`)"
    );
    assert!(
        moved,
        "A's connections did not move to the new master within {FAILOVER:?} (new: {:?}, old: {:?})",
        lock_connections(new).await,
        lock_connections(old).await
    );
    assert_eq!(
        old_role, "master",
        "A moved only after the old master was demoted (READONLY), not on +switch-master"
    );

    // --- a fresh client B and A never both hold the same lock ----------------------------------
    let b = connect(config(&sentinel)).await;
    for round in 0..10 {
        let options = || common::fixed_waiting(Duration::from_secs(30), Duration::ZERO);
        let (from_a, from_b) = tokio::join!(
            a.acquire_with(CONTENDED, options()),
            b.acquire_with(CONTENDED, options())
        );
        let (winner, loser) = match (from_a, from_b) {
            (Ok(a_handle), Ok(b_handle)) => panic!(
                "round {round}: `{CONTENDED}` granted to A (token {}) and to B (token {})",
                a_handle.fencing_token(),
                b_handle.fencing_token()
            ),
            (Ok(handle), Err(error)) | (Err(error), Ok(handle)) => (handle, error),
            (Err(a_error), Err(b_error)) => panic!(
                "round {round}: neither was granted: A {}, B {}",
                describe(&a_error),
                describe(&b_error)
            ),
        };
        assert!(
            describe(&loser).starts_with("held_by_another_owner"),
            "round {round}: the other was refused with {}",
            describe(&loser)
        );
        ledger.record(&winner);
        assert_eq!(winner.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let old_role_after = role(old).await;
    eprintln!("sentinel split: contention rounds done; old master still `{old_role_after}`");

    // --- the watchdog lease A held across the failover: kept, or lost() before B gets it ------
    let outcome_by = Instant::now() + WATCHDOG + FAILOVER;
    let kept = loop {
        match b
            .acquire_with(
                HELD,
                common::fixed_waiting(Duration::from_secs(30), Duration::ZERO),
            )
            .await
        {
            Ok(handle) => {
                let granted = Instant::now();
                let (lost_at, reason) = held_lost
                    .fired()
                    .expect("B was granted the lock A holds, and A's lost() never fired");
                assert!(lost_at <= granted);
                assert!(!held.is_held());
                assert!(handle.fencing_token() > held_token);
                eprintln!(
                    "sentinel split: A's watchdog lease was lost ({reason:?}) before B got it"
                );
                ledger.record(&handle);
                assert_eq!(handle.release().await.unwrap(), ReleaseOutcome::Released);
                break false;
            }
            Err(error) => assert!(
                describe(&error).starts_with("held_by_another_owner"),
                "B's attempt on the held lock: {}",
                describe(&error)
            ),
        }
        // Held: once A renews it on the new master, it was kept.
        let stored = value(new, &held_key).await;
        if held_lost.fired().is_none()
            && stored.contains(&format!("|{held_token}|"))
            && sentinel_common::pttl(new, &held_key).await > (WATCHDOG * 2 / 3).as_millis() as i64
            && held.is_held()
        {
            break true;
        }
        assert!(
            Instant::now() < outcome_by,
            "A's watchdog lease neither stayed renewed on the new master nor was reported lost"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if kept {
        // Renewed on the new master: the PTTL goes back up at a renewal.
        let mut last = sentinel_common::pttl(new, &held_key).await;
        let renew_by = Instant::now() + WATCHDOG + FAILOVER;
        let mut renewed = false;
        while Instant::now() < renew_by && !renewed {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = sentinel_common::pttl(new, &held_key).await;
            renewed = now > last;
            last = now;
        }
        assert!(
            renewed,
            "A's watchdog lease is not renewed on the new master"
        );
        eprintln!("sentinel split: A's watchdog lease was kept (renewed on the new master)");
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    } else {
        drop(held);
    }
    ledger.assert_tokens_unique_and_increasing();

    // --- A followed the Sentinels as the Sentinel user; the subscriptions end with the clients -
    let followers = || async {
        let mut count = 0;
        for node in sentinel.sentinels() {
            let list = node.cmd(&["CLIENT", "LIST"]).await.unwrap_or_default();
            count += list.lines().filter(|line| line.contains(" sub=1 ")).count();
        }
        count
    };
    let users = || async {
        let mut count = 0;
        for node in sentinel.sentinels() {
            let list = node.cmd(&["CLIENT", "LIST"]).await.unwrap_or_default();
            count += list
                .lines()
                .filter(|line| {
                    line.contains(&format!(" user={SENTINEL_USER} ")) && line.contains(" sub=1 ")
                })
                .count();
        }
        count
    };
    assert_eq!(
        users().await,
        3,
        "A does not follow all three live Sentinels as its user"
    );
    // B's subscriptions start in the background when it connects.
    let following = eventually(FAILOVER, || async {
        users().await == 3 && followers().await == 6
    })
    .await;
    assert!(
        following,
        "A and B do not follow the three live Sentinels ({} as the Sentinel user, {} in all)",
        users().await,
        followers().await
    );
    drop((a, b));
    let ended = eventually(FAILOVER, || async { followers().await == 0 }).await;
    assert!(
        ended,
        "{} subscriptions to +switch-master outlived their clients",
        followers().await
    );
}
