//! The master/sub locks' conformance suite: the behaviour every
//! [`Branches`](crate::branches::Branches) backend shows with the lock it is deployed with
//! (feature `conformance`).
//!
//! Implement [`BranchesFactory`] for a backend, then expand
//! `lock_core::conformance_tests!(branches, …)` or call [`run_all`], as the
//! [harness](crate::conformance) describes. Checks wait on events with generous deadlines. The
//! only lower bound they assert is the contract's: a master never stops waiting before its
//! branch wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::branches::{
    BranchError, BranchRelease, BranchToken, BranchesOutcome, Master, MasterLocks, MasterOptions,
    Registration, SubKey,
};
use crate::conformance::{SLACK, unique_key};
use crate::lock::{Lease, LostReason};
use crate::{AcquireFailure, LockError};

/// A branch wait long enough that only a broken implementation runs out of it.
const LONG: Duration = Duration::from_secs(30);

/// Builds clients of one shared backend for the suite.
#[async_trait]
pub trait BranchesFactory: Send + Sync + 'static {
    /// A new client of the shared backend, lock and branches on connections of their own, as
    /// another process would have. The lock's default wait time is at least 1 s.
    async fn client(&self) -> MasterLocks;

    /// The records the backend holds now for `master_key`, each with its remaining TTL if it has
    /// one.
    async fn record_ttls(&self, master_key: &str) -> Vec<Option<Duration>>;

    /// Ends the lease held on lock `key` from outside its holder, as
    /// [`LockFactory::expire`](crate::lock::conformance::LockFactory::expire) does, and returns
    /// `true`. Default: `false`, when the factory cannot, and [`lost_lease_ends_the_wait`] is
    /// skipped.
    async fn expire_lock(&self, key: &str) -> bool {
        let _ = key;
        false
    }

    /// The longest a watchdog holder takes to learn of a lease ended by
    /// [`expire_lock`](BranchesFactory::expire_lock), its watchdog timeout. Default: 1 s.
    fn lease_loss_bound(&self) -> Duration {
        Duration::from_secs(1)
    }
}

fn waiting(wait: Duration) -> MasterOptions {
    MasterOptions::new(Lease::Watchdog)
        .branch_wait(wait)
        .expect("a branch wait within 0 to 1 h")
}

async fn release(client: &MasterLocks, token: &str) -> BranchRelease {
    let token: BranchToken = token.parse().expect("a token the producer wrote parses");
    client
        .release_branch(&token)
        .await
        .expect("the release is confirmed")
}

async fn assert_no_records(factory: &dyn BranchesFactory, key: &str, after: &str) {
    let left = factory.record_ttls(key).await;
    assert!(
        left.is_empty(),
        "{} record(s) of master `{key}` left after {after}",
        left.len()
    );
}

/// The master returns only once every registered branch is released by a consumer on another
/// client, holds the lock while it waits, and leaves no record behind.
pub async fn master_waits_for_every_registered_branch(factory: &dyn BranchesFactory) {
    let key = unique_key("waits");
    let (producer, consumer) = (factory.client().await, factory.client().await);
    let (queue, mut messages) = mpsc::unbounded_channel::<String>();
    let releasing_last = Arc::new(AtomicBool::new(false));
    let consumer_task = tokio::spawn({
        let (key, releasing_last) = (key.clone(), Arc::clone(&releasing_last));
        async move {
            let first = messages.recv().await.unwrap();
            assert_eq!(release(&consumer, &first).await, BranchRelease::Released);
            let second = messages.recv().await.unwrap();
            assert_eq!(messages.recv().await.as_deref(), Some("block returned"));
            let error = consumer
                .lock()
                .try_acquire(&key, Lease::Watchdog)
                .await
                .expect_err("the master holds its lock while it waits");
            assert_eq!(
                error.acquire_failure().map(AcquireFailure::reason),
                Some("held_by_another_owner"),
                "{error}"
            );
            releasing_last.store(true, Ordering::SeqCst);
            assert_eq!(release(&consumer, &second).await, BranchRelease::Released);
        }
    });
    let outcome = producer
        .with_master_lock(&key, waiting(LONG), |master| async move {
            for branch in ["search", "audit"] {
                let token = master.register_branch(branch).await.unwrap();
                assert!(token.is_registered(), "{token}");
                queue.send(token.to_string()).unwrap();
            }
            queue.send("block returned".into()).unwrap();
            7
        })
        .await
        .expect("the master ran");
    assert!(
        releasing_last.load(Ordering::SeqCst),
        "the master returned before its last branch was released"
    );
    consumer_task.await.expect("the consumer's checks passed");
    assert_eq!(outcome.value, 7);
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert!(outcome.is_complete(), "{outcome:?}");
    assert!(outcome.waited < LONG, "{outcome:?}");
    assert_no_records(factory, &key, "all branches were released").await;
    let next = producer.lock().try_acquire(&key, Lease::Watchdog).await;
    assert!(
        next.is_ok(),
        "the master did not release its lock: {next:?}"
    );
}

/// A branch released before its master starts waiting (even inside the block) counts: the
/// master does not wait for it.
pub async fn a_release_before_the_wait_counts(factory: &dyn BranchesFactory) {
    let key = unique_key("early");
    let (producer, consumer) = (factory.client().await, factory.client().await);
    let outcome = producer
        .with_master_lock(&key, waiting(LONG), |master| async move {
            let token = master.register_branch("search").await.unwrap();
            assert_eq!(
                release(&consumer, &token.to_string()).await,
                BranchRelease::Released
            );
        })
        .await
        .unwrap();
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert!(outcome.waited < SLACK, "waited {:?}", outcome.waited);
    assert_no_records(factory, &key, "the master finished").await;
}

/// A redelivered release answers `AlreadyReleased` and counts once: it does not stand in for
/// another branch.
pub async fn redelivered_release_counts_once(factory: &dyn BranchesFactory) {
    let key = unique_key("redelivered");
    let (producer, consumer) = (factory.client().await, factory.client().await);
    let outcome = producer
        .with_master_lock(
            &key,
            waiting(Duration::from_millis(500)),
            |master| async move {
                let search = master.register_branch("search").await.unwrap().to_string();
                master.register_branch("audit").await.unwrap();
                assert_eq!(release(&consumer, &search).await, BranchRelease::Released);
                assert_eq!(
                    release(&consumer, &search).await,
                    BranchRelease::AlreadyReleased
                );
                assert_eq!(
                    release(&consumer, &search).await,
                    BranchRelease::AlreadyReleased
                );
            },
        )
        .await
        .unwrap();
    assert_eq!(
        outcome.branches,
        BranchesOutcome::TimedOut {
            missing: vec!["audit".to_owned()]
        }
    );
}

/// When the branch wait passes, the outcome names the branches still missing, sorted; the
/// master waited at least the branch wait and not much longer, and cleaned up.
pub async fn timeout_names_the_missing_branches(factory: &dyn BranchesFactory) {
    let key = unique_key("timeout");
    let (producer, consumer) = (factory.client().await, factory.client().await);
    let wait = Duration::from_secs(1);
    let outcome = producer
        .with_master_lock(&key, waiting(wait), |master| async move {
            for branch in ["zeta", "alpha", "mid"] {
                let token = master.register_branch(branch).await.unwrap().to_string();
                if branch == "mid" {
                    assert_eq!(release(&consumer, &token).await, BranchRelease::Released);
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(
        outcome.branches,
        BranchesOutcome::TimedOut {
            missing: vec!["alpha".to_owned(), "zeta".to_owned()]
        }
    );
    assert!(
        outcome.waited >= wait,
        "gave up early: {:?}",
        outcome.waited
    );
    assert!(outcome.waited < wait + SLACK, "{:?}", outcome.waited);
    assert!(outcome.unregistered.is_empty(), "{outcome:?}");
    assert_no_records(factory, &key, "the master timed out").await;
}

/// Releases for an invocation that does not exist — never opened, or finished — are
/// `Unknown` no-ops that create nothing.
pub async fn unknown_invocations_are_no_ops(factory: &dyn BranchesFactory) {
    let key = unique_key("unknown");
    let client = factory.client().await;
    let never = format!("br1|{}|r|{key}|search", u64::MAX - 1);
    assert_eq!(release(&client, &never).await, BranchRelease::Unknown);
    assert_no_records(
        factory,
        &key,
        "a release for an invocation that never existed",
    )
    .await;

    let token = client
        .with_master_lock(&key, waiting(Duration::ZERO), |master| async move {
            master.register_branch("search").await.unwrap()
        })
        .await
        .unwrap()
        .value;
    assert_eq!(
        release(&client, &token.to_string()).await,
        BranchRelease::Unknown
    );
    assert_no_records(factory, &key, "a release for a finished invocation").await;
}

/// A release of a branch the invocation never registered is `NotRegistered`, and a
/// registration of it arriving later counts it as released: the master does not wait for it.
pub async fn a_release_before_its_registration_is_remembered(factory: &dyn BranchesFactory) {
    let key = unique_key("before-registration");
    let (producer, consumer) = (factory.client().await, factory.client().await);
    let outcome = producer
        .with_master_lock(&key, waiting(LONG), |master| async move {
            let key = master.sub_key().master_key().to_owned();
            let early = format!("br1|{}|u|{key}|early", master.invocation());
            assert_eq!(
                release(&consumer, &early).await,
                BranchRelease::NotRegistered
            );
            let token = master.register_branch("early").await.unwrap();
            assert!(token.is_registered(), "{token}");
            assert_eq!(token.sub_key(), &SubKey::new(key, master.invocation()));
        })
        .await
        .unwrap();
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    assert!(outcome.waited < SLACK, "waited {:?}", outcome.waited);
}

/// Registration is sealed when the block returns: a clone of the [`Master`] kept beyond it
/// gets `BRANCHES_SEALED`, and the master did not wait for that branch.
pub async fn registration_is_sealed_when_the_block_returns(factory: &dyn BranchesFactory) {
    let key = unique_key("sealed");
    let client = factory.client().await;
    let kept: Arc<Mutex<Option<Master>>> = Arc::default();
    let outcome = client
        .with_master_lock(&key, waiting(LONG), {
            let kept = Arc::clone(&kept);
            move |master| async move {
                assert!(!master.is_sealed());
                *kept.lock().unwrap() = Some(master);
            }
        })
        .await
        .unwrap();
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
    let master = kept.lock().unwrap().take().unwrap();
    assert!(master.is_sealed());
    match master.register_branch("late").await {
        Err(error @ BranchError::Sealed { .. }) => {
            assert_eq!(error.code(), "BRANCHES_SEALED");
            assert_eq!(error.details()["branch"], "late");
        }
        other => panic!("a late registration must be refused as sealed: {other:?}"),
    }
    assert_no_records(factory, &key, "a late registration").await;
}

/// A master whose lease is lost while it waits stops waiting and says so, naming the branches
/// still missing. Skipped when the factory cannot end a lease from outside.
pub async fn lost_lease_ends_the_wait(factory: &dyn BranchesFactory) {
    let key = unique_key("lost");
    let client = factory.client().await;
    let (returned, mut block_returned) = mpsc::unbounded_channel::<()>();
    let master = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move {
            client
                .with_master_lock(&key, waiting(LONG), |master| async move {
                    master.register_branch("never-released").await.unwrap();
                    returned.send(()).unwrap();
                })
                .await
        }
    });
    block_returned.recv().await.unwrap();
    if !factory.expire_lock(&key).await {
        master.abort();
        return;
    }
    let started = Instant::now();
    let outcome = tokio::time::timeout(factory.lease_loss_bound() + SLACK, master)
        .await
        .expect("the master kept waiting after losing its lease")
        .unwrap()
        .unwrap();
    match outcome.branches {
        BranchesOutcome::LeaseLost { missing, reason } => {
            assert_eq!(missing, ["never-released"]);
            assert!(
                matches!(reason, LostReason::NotOwner | LostReason::Expired),
                "{reason:?}"
            );
        }
        other => panic!(
            "expected lease_lost after {:?}, got {other:?}",
            started.elapsed()
        ),
    }
    assert_no_records(factory, &key, "a lost lease").await;
}

/// The invocation's record has a TTL of at least the master's (fixed) lease, so a crashed
/// master leaves nothing behind for longer.
pub async fn records_live_at_least_the_lease(factory: &dyn BranchesFactory) {
    let key = unique_key("ttl");
    let lease = Duration::from_secs(5);
    let client = factory.client().await;
    let started = Instant::now();
    let ttls = client
        .with_master_lock(
            &key,
            MasterOptions::new(Lease::Fixed(lease))
                .branch_wait(Duration::ZERO)
                .expect("a branch wait within 0 to 1 h"),
            |master| async move {
                master.register_branch("search").await.unwrap();
                let ttls = factory.record_ttls(master.sub_key().master_key()).await;
                (ttls, started.elapsed())
            },
        )
        .await
        .unwrap()
        .value;
    let (ttls, elapsed) = ttls;
    assert!(!ttls.is_empty(), "the master has no record");
    for ttl in ttls {
        let ttl = ttl.expect("every record has a TTL");
        assert!(
            ttl + elapsed + Duration::from_millis(250) >= lease,
            "a record's TTL {ttl:?} ends before the {lease:?} lease (granted {elapsed:?} ago)"
        );
        assert!(
            ttl <= lease + 2 * SLACK,
            "TTL {ttl:?} for a {lease:?} lease"
        );
    }
}

/// A block that runs for several record TTLs keeps its record alive: a consumer's release at
/// its end still counts (a 1 s watchdog lease and no branch wait give the record a TTL of 2 s).
pub async fn a_long_block_keeps_its_record(factory: &dyn BranchesFactory) {
    let key = unique_key("long-block");
    let (producer, consumer) = (factory.client().await, factory.client().await);
    let outcome = producer
        .with_master_lock(&key, waiting(Duration::ZERO), |master| async move {
            let token = master.register_branch("slow").await.unwrap().to_string();
            tokio::time::sleep(Duration::from_millis(3500)).await;
            release(&consumer, &token).await
        })
        .await
        .unwrap();
    assert_eq!(outcome.value, BranchRelease::Released);
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
}

/// Each invocation has its own sub-key: invocation ids increase per key, and a late release of
/// the previous invocation's branch does not count for the next one's branch of the same id.
pub async fn invocations_are_separate(factory: &dyn BranchesFactory) {
    let key = unique_key("separate");
    let (producer, consumer) = (factory.client().await, factory.client().await);
    let first = producer
        .with_master_lock(&key, waiting(Duration::ZERO), |master| async move {
            master.register_branch("search").await.unwrap()
        })
        .await
        .unwrap();
    assert_eq!(first.value.invocation(), first.invocation);
    let second = producer
        .with_master_lock(
            &key,
            waiting(Duration::from_millis(500)),
            |master| async move {
                master.register_branch("search").await.unwrap();
                release(&consumer, &first.value.to_string()).await
            },
        )
        .await
        .unwrap();
    assert!(
        second.invocation > first.invocation,
        "{} then {}",
        first.invocation,
        second.invocation
    );
    assert_eq!(second.value, BranchRelease::Unknown);
    assert_eq!(
        second.branches,
        BranchesOutcome::TimedOut {
            missing: vec!["search".to_owned()]
        }
    );
}

/// The port's operations, called directly: counted by id, idempotent when repeated, sealed,
/// and no-ops (creating nothing) on an invocation that does not exist.
pub async fn port_operations_are_idempotent_and_counted_by_id(factory: &dyn BranchesFactory) {
    let key = unique_key("port");
    let client = factory.client().await;
    let branches = client.branches();
    let sub_key = SubKey::new(key.as_str(), 1);
    let ttl = Duration::from_secs(30);
    let register = |branch: &'static str| {
        let sub_key = sub_key.clone();
        async move { branches.register(&sub_key, branch, ttl).await.unwrap() }
    };
    let release = |branch: &'static str| {
        let sub_key = sub_key.clone();
        async move { branches.release(&sub_key, branch).await.unwrap() }
    };
    let pending = || async { branches.pending(&sub_key).await.unwrap() };
    let names = |names: &[&str]| Some(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>());

    assert_eq!(register("a").await, Registration::Unknown, "before open");
    assert_eq!(pending().await, None);
    branches.open(&sub_key, ttl).await.unwrap();
    branches.open(&sub_key, ttl).await.unwrap();
    assert_eq!(register("a").await, Registration::Registered);
    assert_eq!(register("a").await, Registration::AlreadyRegistered);
    assert_eq!(register("b").await, Registration::Registered);
    assert_eq!(release("a").await, BranchRelease::Released);
    assert_eq!(release("a").await, BranchRelease::AlreadyReleased);
    assert_eq!(register("a").await, Registration::AlreadyReleased);
    assert_eq!(release("c").await, BranchRelease::NotRegistered);
    assert_eq!(register("c").await, Registration::AlreadyReleased);
    assert_eq!(pending().await, names(&["b"]));

    assert_eq!(branches.seal(&sub_key, ttl).await.unwrap(), names(&["b"]));
    assert_eq!(branches.seal(&sub_key, ttl).await.unwrap(), names(&["b"]));
    assert_eq!(register("d").await, Registration::Sealed);
    assert_eq!(register("b").await, Registration::AlreadyRegistered);
    assert_eq!(pending().await, names(&["b"]));
    assert_eq!(release("b").await, BranchRelease::Released);
    assert_eq!(pending().await, names(&[]));

    branches.close(&sub_key).await.unwrap();
    branches.close(&sub_key).await.unwrap();
    assert_eq!(pending().await, None);
    assert_eq!(branches.seal(&sub_key, ttl).await.unwrap(), None);
    branches.refresh(&sub_key, ttl).await.unwrap();
    assert_eq!(register("e").await, Registration::Unknown);
    assert_eq!(release("e").await, BranchRelease::Unknown);
    assert_no_records(factory, &key, "operations on a closed invocation").await;
}

/// A watch taken before a read is woken by every later release — one from another client
/// included — and keeps a wake-up that arrives while nobody waits on it.
pub async fn a_watch_is_woken_by_every_release(factory: &dyn BranchesFactory) {
    let key = unique_key("watch");
    let (master, consumer) = (factory.client().await, factory.client().await);
    let sub_key = SubKey::new(key.as_str(), 1);
    let ttl = Duration::from_secs(30);
    let branches = master.branches();
    branches.open(&sub_key, ttl).await.unwrap();
    for branch in ["a", "b"] {
        branches.register(&sub_key, branch, ttl).await.unwrap();
    }
    let mut watch = branches.watch(&sub_key).await.unwrap();
    for (branch, left) in [("a", vec!["b".to_owned()]), ("b", vec![])] {
        assert_eq!(
            consumer.branches().release(&sub_key, branch).await.unwrap(),
            BranchRelease::Released
        );
        // Woken (possibly first by a spurious wake-up, then by the release): re-read each time.
        let deadline = Instant::now() + SLACK;
        loop {
            tokio::time::timeout_at(deadline, watch.changed())
                .await
                .unwrap_or_else(|_| panic!("the release of {branch} woke nobody"))
                .unwrap_or_else(|e| panic!("the watch failed: {e}"));
            if branches.pending(&sub_key).await.unwrap() == Some(left.clone()) {
                break;
            }
        }
    }
    branches.close(&sub_key).await.unwrap();
}

/// A master key or argument that is not accepted fails before anything runs: the key by the
/// lock's rules (`BRANCHES_INVALID_ARGUMENT` wrapping `LOCK_INVALID_ARGUMENT`), a branch id by
/// [`validate_branch_id`](crate::branches::validate_branch_id), a branch wait over 1 h by its
/// setter.
pub async fn invalid_arguments_are_rejected(factory: &dyn BranchesFactory) {
    let client = factory.client().await;
    let ran = AtomicBool::new(false);
    let error = client
        .with_master_lock("", Lease::Watchdog, |_| async {
            ran.store(true, Ordering::SeqCst)
        })
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        BranchError::MasterLock {
            source: LockError::InvalidKey { .. }
        }
    ));
    assert_eq!(error.code(), "BRANCHES_INVALID_ARGUMENT");
    // A branch wait out of range is refused by its setter, before any master exists.
    let error = MasterOptions::new(Lease::Watchdog)
        .branch_wait(Duration::from_secs(7200))
        .unwrap_err();
    assert_eq!(error.details()["argument"], "branch_wait");
    assert!(
        !ran.load(Ordering::SeqCst),
        "a block ran with a rejected argument"
    );

    let key = unique_key("invalid-branch");
    let outcome = client
        .with_master_lock(&key, waiting(LONG), |master| async move {
            master.register_branch("bad\nid").await
        })
        .await
        .unwrap();
    let error = outcome.value.unwrap_err();
    assert_eq!(error.code(), "BRANCHES_INVALID_ARGUMENT");
    assert_eq!(outcome.branches, BranchesOutcome::AllReleased);
}

crate::conformance::run_all!(BranchesFactory, branches_conformance_checks);

/// The master/sub locks' checks, declared once: expands to
/// `$callback! { $($prefix)* <every check>, }`.
#[doc(hidden)]
#[macro_export]
macro_rules! branches_conformance_checks {
    ($callback:path; $($prefix:tt)*) => {
        $callback! { $($prefix)*
            master_waits_for_every_registered_branch,
            a_release_before_the_wait_counts,
            redelivered_release_counts_once,
            timeout_names_the_missing_branches,
            unknown_invocations_are_no_ops,
            a_release_before_its_registration_is_remembered,
            registration_is_sealed_when_the_block_returns,
            lost_lease_ends_the_wait,
            records_live_at_least_the_lease,
            a_long_block_keeps_its_record,
            invocations_are_separate,
            port_operations_are_idempotent_and_counted_by_id,
            a_watch_is_woken_by_every_release,
            invalid_arguments_are_rejected,
        }
    };
    ($callback:ident) => {
        $crate::branches_conformance_checks! { $callback; }
    };
}
#[doc(hidden)]
pub use crate::branches_conformance_checks as checks;
