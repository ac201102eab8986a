//! The cache workload: every worker reads four keys of one cache with an in-process tier, and
//! now and then puts a new version of one (with a short TTL) or invalidates it.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use lock_starter::cache::{Cache, CacheOptions, NearCache};
use lock_testkit::history::{Event, Op};
use tokio::time::{Instant, sleep};

use super::{Call, Context, Faults, KEY, Verdict, completions};

/// What the checker holds the history to.
pub(super) const CHECKED: &str = "a read returns only a version put for its own key, never one past its TTL, never one another write replaced more than the push bound before the read began";

/// The keys of the cache, `c0` to `c3`; a version's last digit names its key.
const KEYS: u64 = 4;
/// The TTL of every put.
const TTL: Duration = Duration::from_millis(400);
/// How long after a write's call returned a reader's in-process tier may still serve what it
/// replaced: the time the pushed change takes to arrive (about one round trip; docs/cache.md
/// measures it) with room for the latency fault's 80 ms each way and a busy machine.
const PUSH_BOUND: u64 = 250_000_000;
/// What a TTL may be off by between the history's clock and Redis'.
const CLOCK_SLACK: u64 = 20_000_000;

pub(super) async fn work(ctx: &Context) -> io::Result<()> {
    let options = CacheOptions::new()
        .near_cache(NearCache::entries(100))
        .map_err(|e| io::Error::other(e.to_string()))?;
    // A cached value is its version, whose last digit is the key's number.
    let cache: Cache<i64> = Cache::new(ctx.starter.cache_store(), KEY, options)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut seq = 0;
    while Instant::now() < ctx.stop_at {
        seq += 1;
        let index = (seq + ctx.ordinal) % KEYS;
        let key = format!("c{index}");
        match seq % 10 {
            0 => {
                let version = ctx.unique(seq) * 10 + index as i64;
                ctx.invoke(Op::Set, &key, Some(version), None)?;
                match cache.put_with_ttl(&key, &version, TTL).await {
                    Ok(()) => ctx.complete(Op::Set, &key, Ok((Some(version), None)), None)?,
                    Err(e) => ctx.complete(Op::Set, &key, Err((e.code(), &e.to_string())), None)?,
                }
            }
            5 => {
                ctx.invoke(Op::Set, &key, None, None)?;
                match cache.invalidate(&key).await {
                    Ok(_) => ctx.complete(Op::Set, &key, Ok((None, None)), None)?,
                    Err(e) => ctx.complete(Op::Set, &key, Err((e.code(), &e.to_string())), None)?,
                }
            }
            _ => {
                ctx.invoke(Op::Get, &key, None, None)?;
                match cache.get(&key).await {
                    Ok(version) => ctx.complete(Op::Get, &key, Ok((version, None)), None)?,
                    Err(e) => ctx.complete(Op::Get, &key, Err((e.code(), &e.to_string())), None)?,
                }
            }
        }
        sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

pub(super) fn check(events: &[Event], faults: &Faults) -> Verdict {
    let mut verdict = Verdict::default();
    let (writes, unfinished) = completions(events, Op::Set);
    // version → its put (invoked, completed; u64::MAX when it never completed)
    let mut puts: HashMap<i64, (u64, u64)> = HashMap::new();
    for write in &writes {
        if let Some(version) = write.value {
            let done = if write.ok() {
                write.done.t_ns
            } else {
                u64::MAX
            };
            puts.insert(version, (write.invoked, done));
        }
    }
    for write in &unfinished {
        if let Some(version) = write.value {
            puts.insert(version, (write.t_ns, u64::MAX));
        }
    }
    // key → writes confirmed (invoked, completed), puts and invalidations alike
    let mut confirmed: HashMap<&str, Vec<&Call<'_>>> = HashMap::new();
    for write in writes.iter().filter(|w| w.ok()) {
        confirmed.entry(&write.done.key).or_default().push(write);
    }
    let (reads, _) = completions(events, Op::Get);
    let mut hits = 0;
    for read in reads.iter().filter(|r| r.ok()) {
        let Some(version) = read.value else { continue };
        hits += 1;
        let key = read.done.key.as_str();
        let what = format!("{} read {version} at {key}", read.done.process);
        if key.strip_prefix('c') != Some(&(version.rem_euclid(10)).to_string()) {
            verdict
                .violations
                .push(format!("{what}: a version of another key"));
            continue;
        }
        let Some(&(put_invoked, put_done)) = puts.get(&version) else {
            verdict.violations.push(format!("{what}: never put"));
            continue;
        };
        let ttl = TTL.as_nanos() as u64;
        if put_done != u64::MAX && read.invoked > put_done + ttl + CLOCK_SLACK {
            verdict.violations.push(format!(
                "{what}: {} ms after its put returned, past its TTL",
                (read.invoked - put_done) / 1_000_000
            ));
            continue;
        }
        // A write of the key that began after this version's put returned, and returned itself
        // a push bound before the read began, replaced it for every reader.
        let replaced = confirmed.get(key).and_then(|list| {
            list.iter().find(|w| {
                put_done != u64::MAX
                    && w.invoked > put_done
                    && w.done.t_ns + PUSH_BOUND < read.invoked
            })
        });
        if let Some(newer) = replaced {
            let what = format!(
                "{what}: {} ms after {}'s {} returned",
                (read.invoked - newer.done.t_ns) / 1_000_000,
                newer.done.process,
                newer
                    .value
                    .map_or("invalidation".to_owned(), |v| format!("put of {v}"))
            );
            let why = faults.explain(&read.done.process, newer.invoked, read.done.t_ns);
            let why = why.or_else(|| {
                faults
                    .lost_between(put_invoked, read.done.t_ns)
                    .then_some("Redis lost data")
            });
            verdict.judge(what, why);
        }
    }
    verdict.operations = reads.len() as u64 + writes.len() as u64;
    verdict.counted = format!(
        "{} reads ({hits} hits), {} writes",
        reads.len(),
        writes.len()
    );
    verdict
}
