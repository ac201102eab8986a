//! Master/sub locks on the in-memory backends: the conformance suite, the wait bounds on the
//! Tokio clock (paused), fail open for producers (a disabled backend, a registration that is
//! not confirmed), fail closed for masters, cancellation, and the metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::branches::conformance::{self, BranchesFactory};
use lock_core::branches::telemetry::{
    MASTER_WAIT_SECONDS, MASTER_WAITS_TOTAL, REGISTRATIONS_TOTAL, RELEASES_TOTAL,
};
use lock_core::branches::{
    BranchError, BranchRelease, BranchToken, Branches, BranchesOutcome, DisabledBranches,
    InMemoryBranches, MasterLocks, MasterOptions, Registration, SubKey,
};
use lock_core::lock::{DistributedLock, DistributedLockExt, InMemoryLock, Lease, LostReason};
use lock_testkit::logs::CapturedLogs;
use lock_testkit::metrics::CapturedMetrics;
use tokio::time::Instant;
use tracing::instrument::WithSubscriber;

struct Memory(InMemoryLock, InMemoryBranches);

impl Memory {
    fn new() -> Self {
        Memory(InMemoryLock::new(), InMemoryBranches::new())
    }
}

#[async_trait]
impl BranchesFactory for Memory {
    async fn client(&self) -> MasterLocks {
        MasterLocks::new(Arc::new(self.0.clone()), Arc::new(self.1.clone()))
    }

    async fn record_ttls(&self, master_key: &str) -> Vec<Option<Duration>> {
        self.1
            .records()
            .into_iter()
            .filter(|(sub_key, _)| sub_key.master_key() == master_key)
            .map(|(_, ttl)| Some(ttl))
            .collect()
    }

    async fn expire_lock(&self, key: &str) -> bool {
        self.0.expire(key)
    }
}

mod conformance_suite {
    use super::Memory;

    lock_core::conformance_tests!(branches, async { Memory::new() });
}

/// A backend that cannot even make a client: every check must fail.
struct Broken;

#[async_trait]
impl BranchesFactory for Broken {
    async fn client(&self) -> MasterLocks {
        panic!("no backend (expected by run_all_names_each_failed_check)")
    }

    async fn record_ttls(&self, _master_key: &str) -> Vec<Option<Duration>> {
        Vec::new()
    }
}

macro_rules! check_names {
    ($($check:ident),+ $(,)?) => {
        const CHECKS: &[&str] = &[$(stringify!($check)),+];
    };
}
conformance::checks! {check_names}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_passes_on_the_memory_backend_and_names_each_failed_check() {
    let failed = conformance::run_all(Arc::new(Memory::new())).await;
    assert_eq!(failed, Vec::<&str>::new());
    assert_eq!(conformance::run_all(Arc::new(Broken)).await, CHECKS);
}

fn masters() -> (MasterLocks, InMemoryLock, InMemoryBranches) {
    let (lock, branches) = (InMemoryLock::new(), InMemoryBranches::new());
    let masters = MasterLocks::new(Arc::new(lock.clone()), Arc::new(branches.clone()));
    (masters, lock, branches)
}

#[tokio::test(start_paused = true)]
async fn a_fixed_lease_bounds_the_wait_and_ends_it_as_a_timeout() {
    let (masters, _, branches) = masters();
    let lease = Duration::from_secs(2);
    let started = Instant::now();
    let outcome = masters
        .with_master_lock("fixed", Lease::Fixed(lease), |master| async move {
            master.register_branch("search").await.unwrap();
        })
        .await
        .unwrap();
    assert_eq!(
        outcome.branches,
        BranchesOutcome::TimedOut {
            missing: vec!["search".into()]
        }
    );
    // The rest of the lease (paused clock: the block took no time) but a tenth of it, kept for
    // the last read, the clean-up and the release.
    assert_eq!(outcome.waited, Duration::from_millis(1800));
    assert_eq!(started.elapsed(), Duration::from_millis(1800));
    assert_eq!(branches.record_count(), 0);

    // A longer branch wait is cut the same way.
    let options = MasterOptions::new(Lease::Fixed(lease))
        .branch_wait(Duration::from_secs(600))
        .unwrap();
    let outcome = masters
        .with_master_lock("fixed", options, |master| async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            master.register_branch("search").await.unwrap();
        })
        .await
        .unwrap();
    assert_eq!(outcome.waited, Duration::from_millis(1300));
    assert_eq!(outcome.branches.as_str(), "timed_out");

    // A block that outlasts its fixed lease: lost, not waited for.
    let outcome = masters
        .with_master_lock("fixed", Lease::Fixed(lease), |master| async move {
            master.register_branch("search").await.unwrap();
            tokio::time::sleep(lease * 2).await;
        })
        .await
        .unwrap();
    assert_eq!(
        outcome.branches,
        BranchesOutcome::LeaseLost {
            missing: vec!["search".into()],
            reason: LostReason::Expired
        }
    );
    assert_eq!(outcome.waited, Duration::ZERO);
}

/// What a master logs about its lease after a fixed lease bounded its wait.
const OVERRAN: &str = "another owner may have run concurrently";

/// A fixed-lease master whose branch never comes back: the wait ends before the lease does, the
/// release finds the lease held, and nothing claims the block overran it. A block that does
/// overrun it still says so.
#[tokio::test(start_paused = true)]
async fn a_fixed_lease_timeout_releases_inside_the_lease_without_an_overrun_warning() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::DEBUG);
    let (masters, lock, _) = masters();
    let lease = Duration::from_secs(2);
    search_never_comes_back(&masters, "fixed-timeout", lease, subscriber).await;
    let text = logs.text();
    assert!(!text.contains(OVERRAN), "{text}");
    assert!(
        !text.contains("the lease ended"),
        "released while held: {text}"
    );
    assert!(
        text.contains("branch wait ended with branches not released"),
        "{text}"
    );
    // Released, not expired: the key is free before the lease would have ended.
    assert!(
        lock.try_acquire("fixed-timeout", Lease::Watchdog)
            .await
            .is_ok()
    );

    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    let outcome = masters
        .with_master_lock("fixed-overrun", Lease::Fixed(lease), |_master| async move {
            tokio::time::sleep(lease * 2).await;
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    assert_eq!(outcome.branches.as_str(), "lease_lost");
    assert_eq!(logs.text().matches(OVERRAN).count(), 1, "{}", logs.text());
}

/// A block can stop when its master's lease is lost: `Master::lost` fires at the fixed lease's
/// end, while the block still runs.
#[tokio::test(start_paused = true)]
async fn a_block_hears_its_lease_lost() {
    let (masters, _, _) = masters();
    let lease = Duration::from_secs(2);
    let started = Instant::now();
    let outcome = masters
        .with_master_lock("lost-in-block", Lease::Fixed(lease), |master| async move {
            tokio::select! {
                reason = master.lost() => Some((reason, started.elapsed())),
                () = tokio::time::sleep(lease * 10) => None,
            }
        })
        .await
        .unwrap();
    assert_eq!(outcome.value, Some((LostReason::Expired, lease)));
    assert_eq!(outcome.branches.as_str(), "lease_lost");
}

/// The in-memory backend with a fault a test switches on: a clean-up that takes `close_delay`
/// (a slow Redis at the end of a master), registrations that are never confirmed (Redis down
/// mid-block), one read (seal or pending, counted from 1) that fails at once (a connection not
/// back yet), or reads that each fail after `read_delay` (Redis not answering).
#[derive(Debug, Clone, Default)]
struct Faulty {
    inner: InMemoryBranches,
    close_delay: Duration,
    unconfirmed: bool,
    failing_read: Option<usize>,
    read_delay: Duration,
    no_watch: bool,
    reads: Arc<AtomicUsize>,
}

impl Faulty {
    fn slow_close(delay: Duration) -> Self {
        Faulty {
            close_delay: delay,
            ..Faulty::default()
        }
    }

    fn unconfirmed() -> Self {
        Faulty {
            unconfirmed: true,
            ..Faulty::default()
        }
    }

    fn failing_read(n: usize) -> Self {
        Faulty {
            failing_read: Some(n),
            ..Faulty::default()
        }
    }

    fn no_watch() -> Self {
        Faulty {
            no_watch: true,
            ..Faulty::default()
        }
    }

    fn hung_reads(delay: Duration) -> Self {
        Faulty {
            read_delay: delay,
            ..Faulty::default()
        }
    }

    async fn read_fault(&self, operation: &'static str, key: &SubKey) -> Result<(), E> {
        let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.read_delay.is_zero() {
            tokio::time::sleep(self.read_delay).await;
            return Err(BranchError::unavailable(operation, key, "timed out"));
        }
        if self.failing_read == Some(n) {
            return Err(BranchError::unavailable(operation, key, "connection lost"));
        }
        Ok(())
    }
}

#[async_trait]
impl Branches for Faulty {
    fn namespace(&self) -> &str {
        self.inner.namespace()
    }
    async fn open(&self, key: &SubKey, ttl: Duration) -> Result<(), BranchError> {
        self.inner.open(key, ttl).await
    }
    async fn register(&self, key: &SubKey, b: &str, ttl: Duration) -> Result<Registration, E> {
        if self.unconfirmed {
            return Err(BranchError::unavailable("register", key, "timed out"));
        }
        self.inner.register(key, b, ttl).await
    }
    async fn refresh(&self, key: &SubKey, ttl: Duration) -> Result<(), BranchError> {
        self.inner.refresh(key, ttl).await
    }
    async fn seal(&self, key: &SubKey, ttl: Duration) -> Result<Option<Vec<String>>, E> {
        self.read_fault("seal", key).await?;
        self.inner.seal(key, ttl).await
    }
    async fn pending(&self, key: &SubKey) -> Result<Option<Vec<String>>, BranchError> {
        self.read_fault("read", key).await?;
        self.inner.pending(key).await
    }
    async fn watch(&self, key: &SubKey) -> Result<Box<dyn lock_core::ChangeWatch>, E> {
        if self.no_watch {
            return Err(BranchError::unavailable(
                "watch",
                key,
                "subscription refused",
            ));
        }
        self.inner.watch(key).await
    }
    async fn release(&self, key: &SubKey, branch: &str) -> Result<BranchRelease, BranchError> {
        self.inner.release(key, branch).await
    }
    async fn close(&self, key: &SubKey) -> Result<(), BranchError> {
        if !self.close_delay.is_zero() {
            tokio::time::sleep(self.close_delay).await;
        }
        self.inner.close(key).await
    }
}

type E = BranchError;

/// Runs a master on `key` with a fixed `lease` whose branch `search` never comes back, logging
/// to `subscriber`: the wait times out with `search` missing.
async fn search_never_comes_back(
    masters: &MasterLocks,
    key: &str,
    lease: Duration,
    subscriber: impl tracing::Subscriber + Send + Sync + 'static,
) {
    let outcome = masters
        .with_master_lock(key, Lease::Fixed(lease), |master| async move {
            master.register_branch("search").await.unwrap();
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    assert_eq!(
        outcome.branches,
        BranchesOutcome::TimedOut {
            missing: vec!["search".into()]
        }
    );
}

/// The clean-up after the wait outlasts the fixed lease: the release finds the lease ended, but
/// the block had finished inside it, so the lease's end is a `DEBUG` line, not an overrun.
#[tokio::test(start_paused = true)]
async fn a_lease_ending_after_the_block_finished_is_not_an_overrun() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::DEBUG);
    let lease = Duration::from_secs(2);
    let masters = MasterLocks::new(
        Arc::new(InMemoryLock::new()),
        Arc::new(Faulty::slow_close(lease)),
    );
    search_never_comes_back(&masters, "slow-close", lease, subscriber).await;
    let text = logs.text();
    assert!(!text.contains(OVERRAN), "{text}");
    let ended: Vec<_> = text
        .lines()
        .filter(|l| l.contains("the lease ended after the critical section had finished"))
        .collect();
    assert_eq!(ended.len(), 1, "{text}");
    assert!(ended[0].contains("DEBUG"), "{}", ended[0]);
}

#[tokio::test(start_paused = true)]
async fn a_watchdog_master_waits_the_default_branch_wait_and_keeps_its_record_alive() {
    let (masters, _, branches) = masters();
    let outcome = masters
        .with_master_lock("watchdog", Lease::Watchdog, |master| {
            let branches = branches.clone();
            async move {
                master.register_branch("search").await.unwrap();
                // Ten record TTLs (30 s: the branch wait) without a registration.
                tokio::time::sleep(Duration::from_secs(300)).await;
                branches.ttl(master.sub_key())
            }
        })
        .await
        .unwrap();
    let ttl = outcome.value.expect("the record outlived a long block");
    assert!(ttl > Duration::from_secs(15), "{ttl:?}");
    assert_eq!(outcome.waited, lock_core::branches::DEFAULT_BRANCH_WAIT);
    assert_eq!(outcome.branches.missing(), ["search"]);
}

/// A release wakes the master, but its read fails (after a reconnect, the command connection is
/// not back yet): the read is retried, so the master returns soon after, not at its bound.
#[tokio::test(start_paused = true)]
async fn a_read_failing_after_a_wake_up_is_retried() {
    // Read 1 is the seal, 2 the read behind the watch, 3 the one the release wakes.
    let masters = MasterLocks::new(
        Arc::new(InMemoryLock::new()),
        Arc::new(Faulty::failing_read(3)),
    );
    let releaser = masters.clone();
    let outcome = masters
        .with_master_lock("retried", Lease::Watchdog, |master| async move {
            let token = master.register_branch("search").await.unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                releaser.release_branch(&token).await.unwrap()
            });
        })
        .await
        .unwrap();
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert!(
        outcome.waited < Duration::from_secs(2),
        "waited {:?} of a 30 s branch wait",
        outcome.waited
    );
}

/// The release channel cannot be watched: the master reads again every second, so a release
/// ends its wait within about a second, not at its bound.
#[tokio::test(start_paused = true)]
async fn a_master_that_cannot_watch_reads_again_every_second() {
    let masters = MasterLocks::new(Arc::new(InMemoryLock::new()), Arc::new(Faulty::no_watch()));
    let releaser = masters.clone();
    let outcome = masters
        .with_master_lock("unwatched", Lease::Watchdog, |master| async move {
            let token = master.register_branch("search").await.unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                releaser.release_branch(&token).await.unwrap()
            });
        })
        .await
        .unwrap();
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert!(
        outcome.waited < Duration::from_secs(7),
        "waited {:?} of a 30 s branch wait",
        outcome.waited
    );
}

/// Redis stops answering once the block has returned: each read fails after a command timeout
/// (2 s here). The master waits its branch wait plus one read, not a read per step.
#[tokio::test(start_paused = true)]
async fn reads_that_hang_end_with_the_branch_wait_plus_one_read() {
    let read = Duration::from_secs(2);
    for wait in [
        Duration::ZERO,
        Duration::from_secs(1),
        Duration::from_secs(5),
    ] {
        let masters = MasterLocks::new(
            Arc::new(InMemoryLock::new()),
            Arc::new(Faulty::hung_reads(read)),
        );
        let options = MasterOptions::new(Lease::Watchdog)
            .branch_wait(wait)
            .unwrap();
        let outcome = masters
            .with_master_lock("hung", options, |master| async move {
                master.register_branch("search").await.unwrap();
            })
            .await
            .unwrap();
        assert_eq!(
            outcome.branches,
            BranchesOutcome::Unconfirmed {
                missing: vec!["search".into()]
            }
        );
        assert!(
            outcome.waited <= wait + read,
            "branch wait {wait:?}: waited {:?}",
            outcome.waited
        );
    }
}

/// The warning at a wait's end names at most ten missing branches, quoted (an id may hold a
/// comma), counts them all, and gives the read's error when the branches could not be read.
#[tokio::test(start_paused = true)]
async fn the_warning_at_a_wait_end_is_bounded_and_gives_the_cause() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    let (masters, _, _) = masters();
    let options = MasterOptions::new(Lease::Watchdog)
        .branch_wait(Duration::from_secs(1))
        .unwrap();
    let outcome = masters
        .with_master_lock("many", options, |master| async move {
            for i in 0..12 {
                master.register_branch(&format!("b{i:02},x")).await.unwrap();
            }
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    assert_eq!(outcome.branches.missing().len(), 12);
    let text = logs.text();
    let warning = text.lines().find(|l| l.contains(" WARN ")).expect(&text);
    assert!(
        warning.contains("branch wait ended with branches not released")
            && warning.contains(r#"missing=["b00,x", "b01,x""#)
            && warning.contains(r#""b09,x", … and 2 more]"#)
            && !warning.contains("b10,x")
            && warning.contains("missing_count=12"),
        "{warning}"
    );

    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    let masters = MasterLocks::new(
        Arc::new(InMemoryLock::new()),
        Arc::new(Faulty::hung_reads(Duration::from_secs(2))),
    );
    masters
        .with_master_lock("hung", options, |master| async move {
            master.register_branch("search").await.unwrap();
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    let text = logs.text();
    let warnings: Vec<_> = text.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("its branches cannot be confirmed")
            && warnings[0].contains("error=")
            && warnings[0].contains("timed out"),
        "{}",
        warnings[0]
    );
}

/// With a fixed lease, the last read ends by the lease's end even when Redis does not answer.
#[tokio::test(start_paused = true)]
async fn the_last_read_of_a_fixed_lease_ends_with_the_lease() {
    let lease = Duration::from_secs(5);
    let masters = MasterLocks::new(
        Arc::new(InMemoryLock::new()),
        Arc::new(Faulty::hung_reads(Duration::from_secs(2))),
    );
    let started = Instant::now();
    let outcome = masters
        .with_master_lock("hung-fixed", Lease::Fixed(lease), |master| async move {
            master.register_branch("search").await.unwrap();
        })
        .await
        .unwrap();
    assert_eq!(outcome.branches.missing(), ["search"]);
    assert!(
        started.elapsed() <= lease,
        "the wait ended {:?} after the grant, past the {lease:?} lease",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn an_unconfirmed_registration_fails_open_with_one_warning() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    let branches = Arc::new(Faulty::unconfirmed());
    let masters = MasterLocks::new(Arc::new(InMemoryLock::new()), branches.clone());
    let ran = AtomicBool::new(false);
    let ran_ref = &ran;
    let outcome = masters
        .with_master_lock("fail-open", Lease::Watchdog, |master| async move {
            let token = master.register_branch("search").await.unwrap();
            ran_ref.store(true, Ordering::SeqCst); // the branch runs
            token
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    assert!(ran.load(Ordering::SeqCst));
    assert!(!outcome.value.is_registered());
    assert!(
        outcome.value.to_string().contains("|u|"),
        "{}",
        outcome.value
    );
    assert_eq!(outcome.unregistered, ["search"]);
    // Not waited for: nothing was registered.
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert_eq!(outcome.waited, Duration::ZERO);
    assert!(!outcome.is_complete());
    let text = logs.text();
    let warnings: Vec<_> = text.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("the registration was not confirmed")
            && warnings[0].contains("fail open")
            && warnings[0].contains("branch=\"search\"")
            && warnings[0].contains("timed out"),
        "{}",
        warnings[0]
    );
    // Its consumer releases it all the same: the record is gone, a no-op.
    assert_eq!(
        branches.release_branch(&outcome.value).await.unwrap(),
        BranchRelease::Unknown
    );
}

#[tokio::test(start_paused = true)]
async fn a_disabled_backend_runs_the_master_untracked() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::INFO);
    let lock = InMemoryLock::new();
    let masters = MasterLocks::new(
        Arc::new(lock.clone()),
        Arc::new(DisabledBranches::new("switched off in the test")),
    );
    let outcome = masters
        .with_master_lock("disabled", Lease::Watchdog, |master| async move {
            assert!(!master.is_tracked());
            // The lock is held all the same (another task: this one would re-enter).
            let other =
                tokio::spawn(async move { lock.try_acquire("disabled", Lease::Watchdog).await });
            assert!(other.await.unwrap().is_err());
            let a = master.register_branch("search").await.unwrap();
            let b = master.register_branch("audit").await.unwrap();
            (a, b)
        })
        .with_subscriber(subscriber)
        .await
        .unwrap();
    let (a, b) = outcome.value;
    assert!(!a.is_registered() && !b.is_registered());
    assert_eq!(outcome.unregistered, ["audit", "search"]);
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    // Switched off on purpose: one INFO per branch saying where, no WARN, no empty error.
    let text = logs.text();
    assert!(!text.contains(" WARN "), "{text}");
    assert!(!text.contains("error="), "{text}");
    let lines: Vec<_> = text
        .lines()
        .filter(|l| l.contains("master/sub locks are disabled"))
        .collect();
    assert_eq!(lines.len(), 2, "one per branch: {text}");
    for line in lines {
        assert!(line.contains(" INFO "), "{line}");
        assert!(
            line.contains("detail=\"switched off in the test\""),
            "{line}"
        );
    }
    assert_eq!(
        masters.release_branch(&a).await.unwrap(),
        BranchRelease::Unknown
    );
    let error = masters
        .branches()
        .pending(&SubKey::new("x", 1))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "BRANCHES_DISABLED");
    assert_eq!(error.http_status(), 503);
}

/// A backend that cannot open records (Redis down when the master starts).
#[derive(Debug)]
struct Down;

#[async_trait]
impl Branches for Down {
    fn namespace(&self) -> &str {
        "down"
    }
    async fn open(&self, sub_key: &SubKey, _ttl: Duration) -> Result<(), BranchError> {
        Err(BranchError::unavailable(
            "open",
            sub_key,
            "connection refused",
        ))
    }
    async fn register(
        &self,
        s: &SubKey,
        _: &str,
        _: Duration,
    ) -> Result<Registration, BranchError> {
        Err(BranchError::unavailable(
            "register",
            s,
            "connection refused",
        ))
    }
    async fn refresh(&self, s: &SubKey, _: Duration) -> Result<(), BranchError> {
        Err(BranchError::unavailable("refresh", s, "connection refused"))
    }
    async fn seal(&self, s: &SubKey, _: Duration) -> Result<Option<Vec<String>>, BranchError> {
        Err(BranchError::unavailable("seal", s, "connection refused"))
    }
    async fn pending(&self, s: &SubKey) -> Result<Option<Vec<String>>, BranchError> {
        Err(BranchError::unavailable("read", s, "connection refused"))
    }
    async fn watch(&self, s: &SubKey) -> Result<Box<dyn lock_core::ChangeWatch>, BranchError> {
        Err(BranchError::unavailable("watch", s, "connection refused"))
    }
    async fn release(&self, s: &SubKey, _: &str) -> Result<BranchRelease, BranchError> {
        Err(BranchError::unavailable("release", s, "connection refused"))
    }
    async fn close(&self, s: &SubKey) -> Result<(), BranchError> {
        Err(BranchError::unavailable("close", s, "connection refused"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_master_fails_closed_when_its_lock_or_its_record_is_not_granted() {
    let lock = InMemoryLock::new();
    let down = MasterLocks::new(Arc::new(lock.clone()), Arc::new(Down));
    let ran = AtomicBool::new(false);
    let error = down
        .with_master_lock("closed", Lease::Watchdog, |_| async {
            ran.store(true, Ordering::SeqCst)
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "BRANCHES_UNAVAILABLE");
    assert_eq!(error.details()["operation"], "open");
    assert!(!ran.load(Ordering::SeqCst));
    // The lock was given back.
    assert!(lock.try_acquire("closed", Lease::Watchdog).await.is_ok());

    let (masters, lock, _) = masters();
    let _held = lock.try_acquire("closed", Lease::Watchdog).await.unwrap();
    let options = MasterOptions::new(Lease::Watchdog)
        .wait_time(Duration::from_millis(100))
        .unwrap();
    let error = masters
        .with_master_lock("closed", options, |_| async {
            ran.store(true, Ordering::SeqCst)
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), "BRANCHES_MASTER_LOCK_FAILED");
    assert_eq!(error.details()["reason"], "held_by_another_owner");
    assert_eq!(error.http_status(), 503);
    assert!(!ran.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn inside_a_master_block_with_lock_re_enters_and_a_nested_master_is_refused() {
    let (masters, lock, _) = masters();
    let inner = masters.clone();
    let outcome = masters
        .with_master_lock("nested", Lease::Watchdog, |master| async move {
            let reentered = lock
                .with_lock("nested", Lease::Watchdog, || async { 1 })
                .await
                .unwrap();
            let nested = inner
                .with_master_lock("nested", Lease::Watchdog, |_| async {})
                .await
                .unwrap_err();
            (reentered, nested, master.invocation())
        })
        .await
        .unwrap();
    let (reentered, nested, _) = outcome.value;
    assert_eq!(reentered, 1);
    assert_eq!(nested.code(), "BRANCHES_INVALID_ARGUMENT");
    assert!(nested.to_string().contains("already holds it"), "{nested}");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_master_releases_its_lock_and_deletes_its_record() {
    let (masters, lock, branches) = masters();
    let (registered, mut waiting) = tokio::sync::mpsc::unbounded_channel();
    let master = tokio::spawn({
        let masters = masters.clone();
        async move {
            masters
                .with_master_lock("dropped", Lease::Watchdog, |master| async move {
                    master.register_branch("search").await.unwrap();
                    registered.send(()).unwrap();
                })
                .await
        }
    });
    waiting.recv().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await; // waiting for its branch now
    assert_eq!(branches.record_count(), 1);
    master.abort();
    let _ = master.await;
    tokio::time::sleep(Duration::from_millis(10)).await; // the background clean-up
    assert_eq!(branches.record_count(), 0);
    assert!(lock.try_acquire("dropped", Lease::Watchdog).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_during_the_block_is_reported_even_with_every_branch_released() {
    let (masters, lock, _) = masters();
    let outcome = masters
        .with_master_lock("lost-in-block", Lease::Watchdog, |master| async move {
            let token = master.register_branch("search").await.unwrap();
            assert!(lock.expire("lost-in-block"));
            token
        })
        .await
        .unwrap();
    // In memory, an expired lease is lost at once (`Expired`); Redis finds it at renewal.
    assert_eq!(
        outcome.branches,
        BranchesOutcome::LeaseLost {
            missing: vec!["search".into()],
            reason: LostReason::Expired
        }
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn registrations_releases_and_waits_are_counted() {
    let metrics = CapturedMetrics::new();
    let _local = metrics::set_default_local_recorder(metrics.recorder());
    let (masters, _, _) = masters();
    let consumer = masters.clone();
    let options = MasterOptions::new(Lease::Watchdog)
        .branch_wait(Duration::from_secs(1))
        .unwrap();
    let outcome = masters
        .with_master_lock("metrics", options, |master| async move {
            let token = master.register_branch("search").await.unwrap();
            master.register_branch("search").await.unwrap();
            master.register_branch("audit").await.unwrap();
            consumer.release_branch(&token).await.unwrap();
            consumer.release_branch(&token).await.unwrap();
            master.clone()
        })
        .await
        .unwrap();
    assert!(outcome.value.register_branch("late").await.is_err());
    let unknown: BranchToken = "br1|1|r|metrics|x".parse().unwrap();
    assert_eq!(
        masters.release_branch(&unknown).await.unwrap(),
        BranchRelease::Unknown
    );
    let m = metrics.take();
    m.assert_counter(REGISTRATIONS_TOTAL, "outcome", "registered", 3);
    m.assert_counter(REGISTRATIONS_TOTAL, "outcome", "sealed", 1);
    m.assert_counter(RELEASES_TOTAL, "outcome", "released", 1);
    m.assert_counter(RELEASES_TOTAL, "outcome", "already_released", 1);
    m.assert_counter(RELEASES_TOTAL, "outcome", "unknown", 1);
    m.assert_counter(MASTER_WAITS_TOTAL, "outcome", "timed_out", 1);
    assert_eq!(
        m.histogram(MASTER_WAIT_SECONDS, "outcome", "timed_out"),
        [1.0]
    );
}

#[test]
fn master_options_check_their_durations_when_set() {
    let options = MasterOptions::new(Lease::Watchdog);
    let hour = Duration::from_secs(3600);
    for accepted in [Duration::ZERO, hour] {
        assert_eq!(
            options.branch_wait(accepted).unwrap().branch_wait_time(),
            Some(accepted)
        );
        let waiting = options.wait_time(accepted).unwrap();
        assert_eq!(waiting.acquire_options().wait_override(), Some(accepted));
    }
    let too_long = hour + Duration::from_millis(1);
    for (error, name) in [
        (options.branch_wait(too_long).unwrap_err(), "branch_wait"),
        (options.wait_time(too_long).unwrap_err(), "wait_time"),
    ] {
        assert!(
            matches!(&error, BranchError::InvalidArgument { name: n, .. } if *n == name),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!("invalid {name} 3600001 ms: accepted: 0 to 1 h")
        );
        assert_eq!(error.details()["argument"], name);
    }
    let error = masters().0.with_branch_wait(too_long).unwrap_err();
    assert_eq!(error.code(), "BRANCHES_INVALID_ARGUMENT");
}
