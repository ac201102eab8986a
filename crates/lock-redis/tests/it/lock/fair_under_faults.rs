//! Fair (FIFO) locks under faults: a slow Redis, a slow
//! link, a short outage, a stalled Redis, dead and dropped waiters, hundreds of waiters, and a
//! randomized stress test (many fair waiters, random cancellation, random wait times, killed
//! connections) that checks exclusion, order, wait bounds and clean-up. Each targeted test pins
//! down a rule of the fair queue or a documented limit.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{SLACK, config, eventually, server};
use lock_core::LockError;
use lock_core::lock::{AcquireOptions, DistributedLock, Lease};
use lock_redis::lock::RedisLock;
use lock_redis::scripts::FAIR_LEAVE_SCRIPT;
use lock_testkit::{RedisServer, Rng, test_child};
use tokio::time::Instant;

const KEY: &str = "cdc:review";
const LONG: Duration = Duration::from_secs(300);

fn fair(wait: Duration) -> AcquireOptions {
    common::fixed_waiting(LONG, wait).fair()
}

async fn server_ms(redis: &RedisServer) -> i64 {
    let time = redis.cmd(&["TIME"]).await.unwrap();
    let mut lines = time.lines();
    let s: i64 = lines.next().unwrap().trim().parse().unwrap();
    let us: i64 = lines.next().unwrap().trim().parse().unwrap();
    s * 1000 + us / 1000
}

// ------------------------------------------------------------------------------------------
// 1. A fair waiter whose call comes back after its deadline makes no further round trip: with a
//    slow (but answering) Redis, contention is reported as contention within the budget, not
//    as `backend_unavailable`, and no 'last' call outruns the budget.
// ------------------------------------------------------------------------------------------

/// A wait for a lock another client holds, through a link where every command answers within
/// 2.6 s, well inside the 3 s command timeout: the error and how long it took.
async fn contended_wait_on_a_slow_redis(options: AcquireOptions) -> (LockError, Duration) {
    let redis = server().await;
    let holder = common::connect(config(&redis)).await;
    let _held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    // Load the fair script now, so the waiter's calls are one round trip each.
    let _ = holder
        .acquire_with("other-key", fair(Duration::ZERO))
        .await
        .unwrap();
    let (proxy, waiter) = common::behind_proxy(&redis, |c| {
        c.command_timeout(SLOW_COMMAND_TIMEOUT)
            .instance_id("slow-pod")
    })
    .await;
    // 1.3 s each way: a round trip of 2.6 s, still inside the 3 s command timeout.
    proxy.set_latency(Duration::from_millis(1300));
    let started = Instant::now();
    let error = waiter.acquire_with(KEY, options).await.unwrap_err();
    (error, started.elapsed())
}

const SLOW_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);
/// Calls: 0 → 2.6 s (held), then at once 2.6 → 5.2 s (straddles the 3.9 s deadline), then a
/// 'last' call would take 5.2 → 7.8 s, past the 6.9 s budget.
const SLOW_WAIT: Duration = Duration::from_millis(3900);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_fair_wait_on_a_slow_redis_reports_contention_within_its_budget() {
    let (error, took) = contended_wait_on_a_slow_redis(fair(SLOW_WAIT)).await;
    eprintln!("fair: after {took:?}: {error}");
    assert!(
        took <= SLOW_WAIT + SLOW_COMMAND_TIMEOUT + Duration::from_millis(500),
        "took {took:?}"
    );
    assert_eq!(
        error.details()["reason"],
        "held_by_another_owner",
        "contention reported as {error}"
    );
}

/// The same set-up without `.fair()`: reported as contention, as it should be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_the_same_slow_redis_with_a_non_fair_wait_reports_contention() {
    let options = common::fixed_waiting(LONG, SLOW_WAIT);
    let (error, took) = contended_wait_on_a_slow_redis(options).await;
    eprintln!("non-fair: after {took:?}: {error}");
    assert_eq!(
        error.details()["reason"],
        "held_by_another_owner",
        "{error}"
    );
}

// ------------------------------------------------------------------------------------------
// 2. fair_leave.lua when every waiter left behind the leaving first one has already timed out
//    (but was not evicted yet) and the lock is free: the script still answers.
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_leave_succeeds_when_every_other_place_has_timed_out() {
    let redis = server().await;
    let lock = common::connect(config(&redis)).await;
    let (queue, timeout) = (lock.queue_key(KEY), lock.timeout_key(KEY));
    let now = server_ms(&redis).await;
    // The first waiter (alive, leaving) and a second one that died and whose place ran out
    // 500 ms ago; nobody has called since, so it is still queued. The lock is free.
    redis
        .cmd(&["ZADD", &queue, "1", "alive/1/1", "2", "dead/1/1"])
        .await
        .unwrap();
    redis
        .cmd(&[
            "ZADD",
            &timeout,
            &(now + 60_000).to_string(),
            "alive/1/1",
            &(now - 500).to_string(),
            "dead/1/1",
        ])
        .await
        .unwrap();
    redis
        .cmd(&["PEXPIREAT", &queue, &(now + 60_000).to_string()])
        .await
        .unwrap();
    redis
        .cmd(&["PEXPIREAT", &timeout, &(now + 60_000).to_string()])
        .await
        .unwrap();
    let channel = lock.release_channel(KEY);
    let left = redis
        .cmd(&[
            "EVAL",
            FAIR_LEAVE_SCRIPT,
            "3",
            &lock.redis_key(KEY),
            &queue,
            &timeout,
            "alive/1/1",
            &channel,
        ])
        .await;
    assert_eq!(
        left.as_ref().map(|s| s.trim().to_owned()).ok(),
        Some("1".to_owned()),
        "fair_leave.lua: {left:?}"
    );
}

// ------------------------------------------------------------------------------------------
// 3. A fair waiter whose round trip is longer than the fair waiter timeout keeps its place: a
//    place lasts the timeout plus one command timeout, and a call never evicts its own caller
//    (it is never re-queued at the end and overtaken by every later waiter).
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_slow_link_keeps_its_place() {
    let redis = server().await;
    let place = Duration::from_millis(300);
    let holder = common::connect(config(&redis).fair_waiter_timeout(place)).await;
    let _ = holder
        .acquire_with("other-key", fair(Duration::ZERO))
        .await
        .unwrap();
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();

    let (proxy, slow) = common::behind_proxy(&redis, |c| {
        c.command_timeout(Duration::from_secs(2))
            .fair_waiter_timeout(place)
            .instance_id("slow-pod")
    })
    .await;
    // A 400 ms round trip: valid settings (command timeout 2 s), but longer than the place.
    proxy.set_latency(Duration::from_millis(200));
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = tokio::spawn({
        let (slow, order) = (slow.clone(), Arc::clone(&order));
        async move {
            let h = slow.acquire_with(KEY, fair(Duration::from_secs(20))).await;
            order.lock().unwrap().push("slow-first");
            if let Ok(h) = h {
                let _ = h.release().await.unwrap();
            }
        }
    });
    assert!(common::queue_reaches(&redis, &holder, KEY, 1).await);
    // A later waiter on a fast link.
    let fast = common::connect(config(&redis).fair_waiter_timeout(place)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = tokio::spawn({
        let (fast, order) = (fast.clone(), Arc::clone(&order));
        async move {
            let h = fast.acquire_with(KEY, fair(Duration::from_secs(20))).await;
            order.lock().unwrap().push("fast-second");
            if let Ok(h) = h {
                let _ = h.release().await.unwrap();
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = held.release().await.unwrap();
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["slow-first", "fast-second"]);
}

// ------------------------------------------------------------------------------------------
// 4. Randomized stress.
// ------------------------------------------------------------------------------------------

const STRESS_KEYS: [&str; 3] = ["stress:a", "stress:b", "stress:c"];
const STRESS_PLACE: Duration = Duration::from_secs(1);
const STRESS_CMD: Duration = Duration::from_secs(1);

/// Returns "key|token=score,token=score;key|...".
const SNAPSHOT: &str = "local out = {} \
  for i, k in ipairs(KEYS) do \
    local r = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES') \
    local parts = {} \
    for j = 1, #r, 2 do parts[#parts + 1] = r[j] .. '=' .. r[j + 1] end \
    out[#out + 1] = k .. '|' .. table.concat(parts, ',') \
  end \
  return table.concat(out, ';')";

#[derive(Default)]
struct Observed {
    /// token → first score seen.
    first_score: HashMap<String, String>,
    /// tokens whose score changed: lost their place and queued again.
    requeued: Vec<(String, String, String)>,
    /// token → when it was last seen queued.
    last_seen: HashMap<String, Instant>,
}

#[derive(Debug)]
struct Outcome {
    key: usize,
    wait: Duration,
    took: Duration,
    aborted: bool,
    result: Result<(String, u64), String>,
    reason: Option<String>,
    granted_at: Option<Instant>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_fair_stress() {
    let seed: u64 = std::env::var("FAIR_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f00d);
    let total: usize = std::env::var("FAIR_STRESS_WAITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    eprintln!("seed {seed}, {total} waiters");
    let redis = Arc::new(server().await);
    let mut clients = Vec::new();
    for i in 0..6 {
        clients.push(
            common::connect(
                common::default_config(redis.url())
                    .command_timeout(STRESS_CMD)
                    .fair_waiter_timeout(STRESS_PLACE)
                    .instance_id(format!("c{i}")),
            )
            .await,
        );
    }
    let queue_keys: Vec<String> = STRESS_KEYS
        .iter()
        .map(|k| clients[0].queue_key(k))
        .collect();
    let timeout_keys: Vec<String> = STRESS_KEYS
        .iter()
        .map(|k| clients[0].timeout_key(k))
        .collect();

    // Monitor: snapshots of the queues.
    let observed = Arc::new(Mutex::new(Observed::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = tokio::spawn({
        let (redis, observed, stop, queue_keys) = (
            Arc::clone(&redis),
            Arc::clone(&observed),
            Arc::clone(&stop),
            queue_keys.clone(),
        );
        async move {
            while !stop.load(Ordering::SeqCst) {
                let mut args = vec!["EVAL", SNAPSHOT, "3"];
                args.extend(queue_keys.iter().map(String::as_str));
                if let Ok(reply) = redis.cmd(&args).await {
                    let now = Instant::now();
                    let mut o = observed.lock().unwrap();
                    for part in reply.trim().split(';') {
                        let Some((_, members)) = part.split_once('|') else {
                            continue;
                        };
                        for m in members.split(',').filter(|m| !m.is_empty()) {
                            let (tok, score) = m.rsplit_once('=').unwrap();
                            o.last_seen.insert(tok.to_owned(), now);
                            match o.first_score.get(tok) {
                                None => {
                                    o.first_score.insert(tok.to_owned(), score.to_owned());
                                }
                                Some(s) if s != score => {
                                    let first = s.clone();
                                    o.requeued.push((tok.to_owned(), first, score.to_owned()));
                                    o.first_score.insert(tok.to_owned(), score.to_owned());
                                }
                                _ => {}
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });

    // Chaos: kill pub/sub or command connections now and then.
    let chaos = tokio::spawn({
        let (redis, stop) = (Arc::clone(&redis), Arc::clone(&stop));
        async move {
            let mut rng = Rng(seed ^ 0xabcdef);
            let mut kills = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let (lo, hi) = std::env::var("FAIR_STRESS_CHAOS_MS")
                    .ok()
                    .and_then(|s| {
                        let (a, b) = s.split_once('-')?;
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .unwrap_or((150, 600));
                tokio::time::sleep(rng.ms(lo, hi)).await;
                let kinds = std::env::var("FAIR_STRESS_CHAOS_KINDS").unwrap_or("0123".into());
                let kind = kinds.as_bytes()[rng.below(kinds.len() as u64) as usize];
                let _ = match kind {
                    b'0' => redis.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await,
                    b'1' => redis.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).await,
                    b'2' => redis.cmd(&["SCRIPT", "FLUSH"]).await,
                    b'4' => {
                        let ms = rng.ms(1000, 2000).as_millis().to_string();
                        redis.cmd(&["CLIENT", "PAUSE", &ms, "ALL"]).await
                    }
                    _ => {
                        let ms = rng.ms(100, 600).as_millis().to_string();
                        redis.cmd(&["CLIENT", "PAUSE", &ms, "ALL"]).await
                    }
                };
                kills += 1;
            }
            kills
        }
    });

    let holding: Arc<Vec<AtomicBool>> =
        Arc::new(STRESS_KEYS.iter().map(|_| AtomicBool::new(false)).collect());
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let grants: Arc<Mutex<Vec<Vec<u64>>>> =
        Arc::new(Mutex::new(STRESS_KEYS.iter().map(|_| Vec::new()).collect()));
    let active = Arc::new(AtomicU64::new(0));
    let mut rng = Rng(seed);
    let mut tasks = Vec::new();
    for i in 0..total {
        // Keep ~40 waiters going.
        while active.load(Ordering::SeqCst) >= 40 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let key = rng.below(STRESS_KEYS.len() as u64) as usize;
        let client = clients[rng.below(clients.len() as u64) as usize].clone();
        let wait = match rng.below(10) {
            0 => Duration::ZERO,
            1..=3 => rng.ms(50, 600),
            _ => rng.ms(600, 4000),
        };
        let hold = rng.ms(0, 60);
        let abort_after = (rng.below(5) == 0).then(|| rng.ms(0, wait.as_millis() as u64 + 50));
        let (holding, violations, grants, active) = (
            Arc::clone(&holding),
            Arc::clone(&violations),
            Arc::clone(&grants),
            Arc::clone(&active),
        );
        active.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        let returned: Arc<Mutex<Option<Outcome>>> = Arc::new(Mutex::new(None));
        let task = tokio::spawn({
            let returned = Arc::clone(&returned);
            async move {
                let result = client.acquire_with(STRESS_KEYS[key], fair(wait)).await;
                let took = started.elapsed();
                let mut outcome = Outcome {
                    key,
                    wait,
                    took,
                    aborted: false,
                    result: Err(String::new()),
                    reason: None,
                    granted_at: None,
                };
                match result {
                    Ok(handle) => {
                        outcome.granted_at = Some(Instant::now());
                        if holding[key].swap(true, Ordering::SeqCst) {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("two holders of {}", STRESS_KEYS[key]));
                        }
                        // Cleared however this task ends (an abort while holding too).
                        struct Clear<'a>(&'a AtomicBool);
                        impl Drop for Clear<'_> {
                            fn drop(&mut self) {
                                self.0.store(false, Ordering::SeqCst);
                            }
                        }
                        let _clear = Clear(&holding[key]);
                        grants.lock().unwrap()[key].push(handle.fencing_token());
                        outcome.result = Ok((handle.owner().to_owned(), handle.fencing_token()));
                        *returned.lock().unwrap() = Some(outcome);
                        tokio::time::sleep(hold).await;
                        if !handle.is_held() {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("lease lost on {}", STRESS_KEYS[key]));
                        }
                        holding[key].store(false, Ordering::SeqCst);
                        let _ = handle.release().await;
                    }
                    Err(error) => {
                        outcome.reason = error.details().get("reason").cloned();
                        outcome.result = Err(error.to_string());
                        *returned.lock().unwrap() = Some(outcome);
                    }
                }
            }
        });
        let abort = abort_after.map(|after| {
            let handle = task.abort_handle();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                handle.abort();
            })
        });
        tasks.push((i, key, wait, started, task, abort, returned));
        // Stagger arrivals a little.
        tokio::time::sleep(rng.ms(0, 30)).await;
        let active = Arc::clone(&active);
        let handle = tasks.last().unwrap().4.abort_handle();
        tokio::spawn(async move {
            while !handle.is_finished() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            active.fetch_sub(1, Ordering::SeqCst);
        });
    }

    let mut outcomes = Vec::new();
    let mut failures = Vec::new();
    for (i, key, wait, started, task, _abort, returned) in tasks {
        let joined = task.await;
        let aborted = joined.as_ref().is_err_and(|e| e.is_cancelled());
        if let Err(e) = &joined {
            if !e.is_cancelled() {
                failures.push(format!("waiter {i} panicked: {e}"));
            }
        }
        let outcome = returned.lock().unwrap().take();
        match outcome {
            Some(mut o) => {
                o.aborted = aborted;
                outcomes.push((i, o));
            }
            None => {
                if !aborted {
                    failures.push(format!("waiter {i} returned nothing"));
                }
                let _ = (key, wait, started);
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    monitor.await.unwrap();
    let kills = chaos.await.unwrap();

    // Wait bounds.
    let mut early = Vec::new();
    let mut late = Vec::new();
    let mut backend = Vec::new();
    let mut granted = 0;
    for (i, o) in &outcomes {
        if o.result.is_ok() {
            granted += 1;
        }
        if o.took > o.wait + STRESS_CMD + Duration::from_millis(1500) {
            late.push(format!(
                "waiter {i}: wait {:?}, took {:?}: {:?}",
                o.wait, o.took, o.result
            ));
        }
        match o.reason.as_deref() {
            Some("held_by_another_owner" | "waiters_ahead") if o.took < o.wait => {
                early.push(format!(
                    "waiter {i}: wait {:?}, gave up after {:?}: {:?}",
                    o.wait, o.took, o.result
                ));
            }
            Some("backend_unavailable") => {
                backend.push(format!(
                    "waiter {i} (key {}): wait {:?}, took {:?}: {:?}",
                    o.key, o.wait, o.took, o.result
                ));
            }
            _ => {}
        }
    }
    // Ghost places: a granted owner seen queued well after its grant.
    let mut ghosts = Vec::new();
    {
        let o = observed.lock().unwrap();
        for (i, out) in &outcomes {
            if let (Ok((owner, _)), Some(at)) = (&out.result, out.granted_at) {
                if let Some(seen) = o.last_seen.get(owner) {
                    if *seen > at + Duration::from_millis(200) {
                        ghosts.push(format!(
                            "waiter {i}: {owner} queued {:?} after its grant",
                            *seen - at
                        ));
                    }
                }
            }
        }
    }
    // Fencing tokens of each key, in the order the (exclusive) grants were observed.
    let mut fencing = Vec::new();
    for (k, tokens) in grants.lock().unwrap().iter().enumerate() {
        if tokens.windows(2).any(|w| w[1] <= w[0]) {
            fencing.push(format!("{}: tokens not increasing", STRESS_KEYS[k]));
        }
    }

    // Clean-up: no queue state, no subscriptions.
    let mut all_keys: Vec<&str> = queue_keys.iter().map(String::as_str).collect();
    all_keys.extend(timeout_keys.iter().map(String::as_str));
    let gone = eventually(STRESS_PLACE + SLACK, || {
        let redis = Arc::clone(&redis);
        let all_keys = all_keys.clone();
        async move {
            let mut args = vec!["EXISTS"];
            args.extend(all_keys);
            common::integer(&redis, &args).await == 0
        }
    })
    .await;
    let unsubscribed = eventually(SLACK * 2, || {
        let clients = clients.clone();
        async move {
            clients
                .iter()
                .all(|c| c.client().subscribed_channels().is_empty())
        }
    })
    .await;
    let shard_channels = redis
        .cmd(&["PUBSUB", "SHARDCHANNELS"])
        .await
        .unwrap_or_default();

    let o = observed.lock().unwrap();
    eprintln!(
        "{} outcomes, {granted} granted, {} aborted, {kills} connection kills, {} backend errors, {} distinct queued tokens",
        outcomes.len(),
        outcomes.iter().filter(|(_, o)| o.aborted).count(),
        backend.len(),
        o.first_score.len()
    );
    for b in &backend {
        eprintln!("backend: {b}");
    }
    let v = violations.lock().unwrap();
    let report = format!(
        "violations {v:?}\nfailures {failures:?}\nearly {early:#?}\nlate {late:#?}\nrequeued {:#?}\nghosts {ghosts:#?}\nfencing {fencing:?}\nqueue state gone: {gone}\nunsubscribed: {unsubscribed} ({:?}) server shard channels: {shard_channels:?}",
        o.requeued,
        clients
            .iter()
            .map(|c| c.client().subscribed_channels())
            .collect::<Vec<_>>(),
    );
    eprintln!("{report}");
    assert!(
        v.is_empty()
            && failures.is_empty()
            && early.is_empty()
            && late.is_empty()
            && o.requeued.is_empty()
            && ghosts.is_empty()
            && fencing.is_empty()
            && gone
            && unsubscribed,
        "{report}"
    );
}

// ------------------------------------------------------------------------------------------
// 5. A Redis stall longer than a place lasts (SIGSTOP here; a long fork, a slow disk, a VM
//    pause) evicts the waiters that have not called again yet: they queue again in the order
//    their calls reach Redis — a documented limit; nobody fails and exclusion holds.
// ------------------------------------------------------------------------------------------

/// A documented limit (docs/design.md, "What costs a waiter its place"): the order may change,
/// but every waiter is still granted, one at a time, and none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_longer_than_the_place_may_reorder_the_queue_but_fails_no_waiter() {
    let redis = server().await;
    let place = Duration::from_secs(1);
    let mk = || async { common::connect(config(&redis).fair_waiter_timeout(place)).await };
    let holder = mk().await;
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(mk().await);
    }
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..10usize {
        let (lock, order) = (clients[i % 5].clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let h = lock
                .acquire_with(KEY, fair(Duration::from_secs(60)))
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            let _ = h.release().await.unwrap();
        }));
        assert!(common::queue_reaches(&redis, &holder, KEY, i + 1).await);
    }
    redis.pause().unwrap();
    tokio::time::sleep(place * 3).await;
    redis.resume().unwrap();
    // Let the waiters re-queue, then release.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = held.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let mut granted = order.lock().unwrap().clone();
    eprintln!("granted after the stall in the order {granted:?}");
    granted.sort_unstable();
    assert_eq!(granted, (0..10).collect::<Vec<_>>());
}

// ------------------------------------------------------------------------------------------
// 6. The documented bound for a dead first waiter: it holds up the queue for at most the fair
//    waiter timeout plus one command timeout, and the waiter behind it notices within a third
//    of the timeout more.
// ------------------------------------------------------------------------------------------

const CHILD_URL: &str = "FAIR_REVIEW_CHILD_REDIS_URL";

#[tokio::test]
#[ignore = "the body of a child process these tests start and kill"]
async fn child_fair_waiter() {
    common::run_fair_child_waiter(CHILD_URL, KEY, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_first_waiter_holds_up_a_free_lock_for_at_most_the_documented_time() {
    let redis = server().await;
    let place = Duration::from_secs(1);
    let holder = common::connect(config(&redis).fair_waiter_timeout(place)).await;
    let next = common::connect(config(&redis).fair_waiter_timeout(place)).await;
    let third = common::connect(config(&redis).fair_waiter_timeout(place)).await;
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let mut child = test_child(module_path!(), "child_fair_waiter")
        .env(CHILD_URL, redis.url())
        .spawn()
        .expect("start the child process");
    let queued = |n| common::queue_reaches(&redis, &holder, KEY, n);
    assert!(queued(1).await);
    let granted = common::spawn_grant(&next, KEY, fair(Duration::from_secs(60)));
    assert!(queued(2).await);
    let behind = common::spawn_grant(&third, KEY, fair(Duration::from_secs(60)));
    assert!(queued(3).await);
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let _ = held.release().await.unwrap();
    let (_, at) = granted.await.unwrap();
    behind.await.unwrap();
    let took = at - killed;
    eprintln!("granted {took:?} after the first waiter was killed");
    // The child's command timeout is 1 s; 2 s of slack for a loaded machine.
    let bound = place + Duration::from_secs(1) + place / 3;
    assert!(
        took <= bound + Duration::from_secs(2),
        "held up for {took:?}, documented bound {bound:?}"
    );
}

// ------------------------------------------------------------------------------------------
// 7. Hundreds of fair waiters on one key, across clients, queued one after the other: granted
//    in queue order, nobody loses a place.
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_waiters_on_one_key_are_granted_in_order() {
    let n: usize = std::env::var("FAIR_MANY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let place_ms: u64 = std::env::var("FAIR_MANY_PLACE_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let place = Duration::from_millis(place_ms);
    let redis = server().await;
    let holder = common::connect(config(&redis).fair_waiter_timeout(place)).await;
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(common::connect(config(&redis).fair_waiter_timeout(place)).await);
    }
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let started = Instant::now();
    for i in 0..n {
        let (lock, order) = (clients[i % 6].clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let h = lock
                .acquire_with(KEY, fair(Duration::from_secs(600)))
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            let _ = h.release().await.unwrap();
        }));
        let want = i + 1;
        let ok = eventually(SLACK, || async {
            common::queued(&redis, &holder, KEY).await >= want
        })
        .await;
        assert!(ok, "waiter {i} did not queue");
    }
    eprintln!("{n} queued in {:?}", started.elapsed());
    let hold_ms: u64 = std::env::var("FAIR_MANY_HOLD_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    let released = Instant::now();
    let _ = held.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!("all granted in {:?}", released.elapsed());
    let order = order.lock().unwrap().clone();
    let misplaced: Vec<_> = order
        .iter()
        .enumerate()
        .filter(|(p, i)| *p != **i)
        .take(20)
        .collect();
    assert!(
        misplaced.is_empty(),
        "out of order (position, waiter): {misplaced:?}"
    );
    assert!(
        eventually(SLACK, || async {
            common::integer(
                &redis,
                &["EXISTS", &holder.queue_key(KEY), &holder.timeout_key(KEY)],
            )
            .await
                == 0
        })
        .await
    );
}

// ------------------------------------------------------------------------------------------
// 8. A fair call whose reply is lost (the connection then closes) and whose waiter is dropped
//    meanwhile: fred re-sends the call after reconnecting; the background leave must still win,
//    leaving no ghost place.
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiter_whose_refresh_is_resent_leaves_no_ghost_place() {
    let redis = server().await;
    let holder = common::connect(config(&redis)).await;
    let _held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    let (proxy, waiter) = common::behind_proxy(&redis, |c| {
        c.command_timeout(Duration::from_secs(3))
            .fair_waiter_timeout(Duration::from_secs(6))
            .instance_id("resend-pod")
    })
    .await;
    let task = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .acquire_with(KEY, fair(Duration::from_secs(60)))
                .await
        }
    });
    let queue = holder.queue_key(KEY);
    assert!(common::queue_reaches(&redis, &holder, KEY, 1).await);
    proxy.arm_trap(
        queue.as_bytes(),
        lock_testkit::TrapAction::SwallowReplyThenClose(Duration::from_millis(800)),
    );
    assert!(
        eventually(SLACK, || async { !proxy.trap_armed() }).await,
        "no refresh came"
    );
    task.abort();
    let _ = task.await;
    let aborted = Instant::now();
    // The leave must take the place out; the place itself would last 6 s.
    let gone = eventually(Duration::from_secs(4), || async {
        common::queued(&redis, &holder, KEY).await == 0
    })
    .await;
    eprintln!("gone: {gone} after {:?}", aborted.elapsed());
    assert!(gone, "a ghost place stayed queued");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        common::queued(&redis, &holder, KEY).await,
        0,
        "a ghost place came back"
    );
    assert!(
        eventually(SLACK, || async {
            waiter.client().subscribed_channels().is_empty()
        })
        .await
    );
}

// ------------------------------------------------------------------------------------------
// 9. A waiter keeps its place through an outage well inside what a place lasts (about two
//    thirds of the fair waiter timeout plus one command timeout, the client's reconnect
//    back-off included; docs/design.md), and shorter than its command timeout (after which
//    the wait ends). A 2 s outage brings the client back about 3 s after the drop.
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_outage_keeps_the_waiters_place() {
    let redis = server().await;
    let holder = common::connect(config(&redis)).await;
    let held = holder.acquire(KEY, Lease::Fixed(LONG)).await.unwrap();
    // Fair waiter timeout 5 s (the default); a command timeout past the outage and the
    // reconnect after it, since a wait ends once the connection is lost for that long.
    let (proxy, cut_off) = common::behind_proxy(&redis, |c| {
        c.instance_id("cut-off")
            .command_timeout(Duration::from_secs(10))
    })
    .await;
    let other = common::connect(common::default_config(redis.url()).instance_id("other")).await;
    let queue = holder.queue_key(KEY);
    let order = Arc::new(Mutex::new(Vec::new()));
    let spawn = |lock: RedisLock, name: &'static str| {
        let order = Arc::clone(&order);
        tokio::spawn(async move {
            let h = lock.acquire_with(KEY, fair(Duration::from_secs(60))).await;
            order.lock().unwrap().push(name);
            if let Ok(h) = h {
                let _ = h.release().await;
            }
        })
    };
    let first = spawn(cut_off.clone(), "cut-off (queued first)");
    assert!(common::queue_reaches(&redis, &holder, KEY, 1).await);
    let second = spawn(other.clone(), "other (queued second)");
    assert!(common::queue_reaches(&redis, &holder, KEY, 2).await);

    proxy.refuse_new(true);
    proxy.drop_connections();
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.refuse_new(false);
    let back_at = server_ms(&redis).await;
    // The cut-off client is back once it has refreshed its place after the outage.
    let timeouts = holder.timeout_key(KEY);
    let refreshed = eventually(Duration::from_secs(20), || async {
        let reply = redis
            .cmd(&["ZRANGE", &timeouts, "0", "-1", "WITHSCORES"])
            .await
            .unwrap();
        let mut lines = reply.lines();
        std::iter::from_fn(|| Some((lines.next()?, lines.next()?))).any(|(owner, score)| {
            owner.starts_with("cut-off/")
                && score
                    .trim()
                    .parse::<i64>()
                    .is_ok_and(|s| s > back_at + 6_000)
        })
    })
    .await;
    assert!(refreshed, "the cut-off waiter never refreshed its place");
    let scores = redis
        .cmd(&["ZRANGE", &queue, "0", "-1", "WITHSCORES"])
        .await
        .unwrap();
    eprintln!("queue after the outage: {scores:?}");
    let _ = held.release().await.unwrap();
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["cut-off (queued first)", "other (queued second)"]
    );
}
