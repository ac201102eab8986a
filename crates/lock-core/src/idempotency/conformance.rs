//! Idempotent execution's conformance suite: the `# Contract` of every [`IdempotencyStore`],
//! and the guarantees [`Idempotency`] builds on it (feature `conformance`).
//!
//! Implement [`IdempotencyFactory`] for a backend, then expand
//! `lock_core::conformance_tests!(idempotency, …)` or call [`run_all`], as the
//! [harness](crate::conformance) describes. Checks use real time with 300 ms leases and wait on
//! events with generous deadlines.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::conformance::{SLACK, unique_key};
use crate::idempotency::{
    Claim, Idempotency, IdempotencyError, IdempotencyOptions, IdempotencySettings, IdempotencyStore,
};
use crate::lock::Lease;

/// The short in-progress lease of the expiry checks.
const LEASE: Duration = Duration::from_millis(300);
const RESULT_TTL: Duration = Duration::from_secs(60);

/// Builds clients of one shared backend for the suite.
#[async_trait]
pub trait IdempotencyFactory: Send + Sync + 'static {
    /// A client of the shared backend, a new one per call where the backend has connections,
    /// so that concurrency is checked across clients.
    async fn client(&self) -> Arc<dyn IdempotencyStore>;
}

/// A store shared in one process is its own factory: every client is that store.
#[async_trait]
impl<S: IdempotencyStore + 'static> IdempotencyFactory for Arc<S> {
    async fn client(&self) -> Arc<dyn IdempotencyStore> {
        Arc::clone(self) as Arc<dyn IdempotencyStore>
    }
}

/// `owner` claims `key` and becomes its owner.
async fn assert_claim_owns(
    store: &dyn IdempotencyStore,
    key: &str,
    owner: &str,
    fingerprint: &str,
    ttl: Duration,
) {
    let claim = store
        .claim(key, owner, fingerprint, ttl, None)
        .await
        .unwrap();
    assert_eq!(
        claim,
        Claim::Owner,
        "{owner} did not become the owner of {key}"
    );
}

/// Five calls of `key` on `idempotency`, each an action that counts its runs in `runs` and
/// returns 7.
fn spawn_duplicates(
    idempotency: &Idempotency,
    key: &str,
    runs: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Result<crate::idempotency::Idempotent<u32>, IdempotencyError>>> {
    (0..5)
        .map(|_| {
            let (idempotency, key, runs) = (idempotency.clone(), key.to_owned(), Arc::clone(runs));
            tokio::spawn(async move {
                idempotency
                    .execute(&key, &IdempotencyOptions::new(), || async {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, IdempotencyError>(7_u32)
                    })
                    .await
            })
        })
        .collect()
}

/// Polls `claim` until it reports `want` (by variant) or [`SLACK`] passes.
async fn claim_until(
    store: &dyn IdempotencyStore,
    key: &str,
    owner: &str,
    want: fn(&Claim) -> bool,
) -> Claim {
    let deadline = Instant::now() + SLACK;
    loop {
        let claim = store
            .claim(key, owner, "", LEASE, None)
            .await
            .expect("claim");
        if want(&claim) || Instant::now() > deadline {
            return claim;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn idempotency(store: Arc<dyn IdempotencyStore>, max_result_bytes: usize) -> Idempotency {
    let settings = IdempotencySettings {
        wait_time: SLACK,
        result_ttl: RESULT_TTL,
        max_result_bytes,
        watchdog_timeout: Duration::from_secs(1),
    };
    Idempotency::new(store, settings).expect("valid settings")
}

/// Contract 1: of concurrent claims across clients exactly one owns; the others see it; the
/// owner's repeated claim owns again.
pub async fn claim_is_exclusive_and_idempotent_for_the_owner(factory: &dyn IdempotencyFactory) {
    let key = unique_key("claim");
    let mut claims = Vec::new();
    for _ in 0..4 {
        let store = factory.client().await;
        for _ in 0..4 {
            let (store, key) = (Arc::clone(&store), key.clone());
            claims.push(tokio::spawn(async move {
                let owner = store.new_owner();
                let claim = store
                    .claim(&key, &owner, "fp-1", SLACK, None)
                    .await
                    .expect("claim");
                (owner, claim)
            }));
        }
    }
    let mut owners = Vec::new();
    let mut holders = Vec::new();
    for claim in claims {
        match claim.await.unwrap() {
            (owner, Claim::Owner) => owners.push(owner),
            (
                _,
                Claim::InProgress {
                    holder,
                    fingerprint,
                    ttl,
                },
            ) => {
                assert_eq!(fingerprint, "fp-1");
                assert!(ttl.is_none_or(|t| t <= SLACK), "ttl {ttl:?}");
                holders.push(holder);
            }
            (_, other) => panic!("a fresh key claimed concurrently: {other:?}"),
        }
    }
    assert_eq!(
        owners.len(),
        1,
        "exactly one claim owns the key: {owners:?}"
    );
    assert!(
        holders.iter().all(|h| *h == owners[0]),
        "every other claim names the owner"
    );
    let store = factory.client().await;
    assert_claim_owns(&*store, &key, &owners[0], "fp-1", SLACK).await;
}

/// Contract 3: renewals keep a record past its lease; without them it ends and is granted
/// anew; a renewal never re-creates it.
pub async fn an_unrenewed_lease_ends_and_renew_never_recreates(factory: &dyn IdempotencyFactory) {
    let (a, b) = (factory.client().await, factory.client().await);
    let key = unique_key("lease");
    let (owner_a, owner_b) = (a.new_owner(), b.new_owner());
    assert_claim_owns(&*a, &key, &owner_a, "", LEASE).await;
    let renewed_until = Instant::now() + LEASE * 3;
    while Instant::now() < renewed_until {
        assert!(
            a.renew(&key, &owner_a, LEASE).await.unwrap(),
            "the owner renews its record"
        );
        let seen = b.claim(&key, &owner_b, "", LEASE, None).await.unwrap();
        assert!(
            matches!(seen, Claim::InProgress { .. }),
            "renewed, still in progress: {seen:?}"
        );
        tokio::time::sleep(LEASE / 4).await;
    }
    let claim = claim_until(&*b, &key, &owner_b, |c| *c == Claim::Owner).await;
    assert_eq!(claim, Claim::Owner, "an unrenewed record ends at its lease");
    assert!(
        !a.renew(&key, &owner_a, LEASE).await.unwrap(),
        "not the owner any more"
    );
    let other = unique_key("lease-absent");
    assert!(!a.renew(&other, &owner_a, LEASE).await.unwrap());
    let claim = b.claim(&other, &owner_b, "", LEASE, None).await.unwrap();
    assert_eq!(claim, Claim::Owner, "renew must not create a record");
}

/// Contract 4: a zombie (lease ended, key claimed anew) can neither complete nor abandon the
/// new owner's record; the owner's own completion is idempotent.
pub async fn terminal_writes_are_fenced_by_the_owner(factory: &dyn IdempotencyFactory) {
    let (a, b) = (factory.client().await, factory.client().await);
    let key = unique_key("fenced");
    let (zombie, owner) = (a.new_owner(), b.new_owner());
    assert_claim_owns(&*a, &key, &zombie, "", LEASE).await;
    assert_eq!(
        claim_until(&*b, &key, &owner, |c| *c == Claim::Owner).await,
        Claim::Owner
    );
    assert!(
        !a.complete(&key, &zombie, b"zombie", RESULT_TTL)
            .await
            .unwrap()
    );
    assert!(!a.abandon(&key, &zombie).await.unwrap());
    match a
        .claim(&key, &a.new_owner(), "", LEASE, None)
        .await
        .unwrap()
    {
        Claim::InProgress { holder, .. } => {
            assert_eq!(holder, owner, "the new owner's record is intact")
        }
        other => panic!("the zombie changed the record: {other:?}"),
    }
    assert!(
        b.complete(&key, &owner, b"first", RESULT_TTL)
            .await
            .unwrap()
    );
    assert!(
        b.complete(&key, &owner, b"first", RESULT_TTL)
            .await
            .unwrap(),
        "a repeated completion"
    );
    assert!(
        !a.complete(&key, &zombie, b"zombie", RESULT_TTL)
            .await
            .unwrap()
    );
    let claim = a.claim(&key, &zombie, "", LEASE, None).await.unwrap();
    assert_eq!(
        claim,
        Claim::Completed {
            result: b"first".to_vec(),
            fingerprint: String::new()
        }
    );
}

/// Contract 5: the exact bytes and fingerprint for the result TTL, then nothing.
pub async fn a_completed_record_replays_its_bytes_then_expires(factory: &dyn IdempotencyFactory) {
    let store = factory.client().await;
    let key = unique_key("replay");
    let owner = store.new_owner();
    let bytes: Vec<u8> = (0..=255).collect();
    assert_claim_owns(&*store, &key, &owner, "fp-7", LEASE).await;
    assert!(
        store
            .complete(&key, &owner, &bytes, Duration::from_secs(1))
            .await
            .unwrap()
    );
    let other = factory.client().await;
    let claim = other
        .claim(&key, &other.new_owner(), "fp-other", LEASE, None)
        .await
        .unwrap();
    assert_eq!(
        claim,
        Claim::Completed {
            result: bytes,
            fingerprint: "fp-7".into()
        }
    );
    let claim = claim_until(&*other, &key, &other.new_owner(), |c| *c == Claim::Owner).await;
    assert_eq!(claim, Claim::Owner, "the result ends at its TTL");
}

/// Contract 6: `forget` spares a record in progress and removes a completed one.
pub async fn forget_spares_a_record_in_progress(factory: &dyn IdempotencyFactory) {
    let store = factory.client().await;
    let key = unique_key("forget");
    let owner = store.new_owner();
    assert_claim_owns(&*store, &key, &owner, "", SLACK).await;
    assert!(
        !store.forget(&key).await.unwrap(),
        "an in-progress record is not forgotten"
    );
    assert!(
        store.renew(&key, &owner, SLACK).await.unwrap(),
        "and stays the owner's"
    );
    assert!(
        store
            .complete(&key, &owner, b"r", RESULT_TTL)
            .await
            .unwrap()
    );
    assert!(store.forget(&key).await.unwrap());
    assert!(!store.forget(&key).await.unwrap());
    assert_claim_owns(&*store, &key, &store.new_owner(), "", LEASE).await;
}

/// Contract 7: a watch made before a completion, an abandonment, a failure or a forget returns.
pub async fn watches_wake_on_every_terminal_write(factory: &dyn IdempotencyFactory) {
    let (writer, watcher) = (factory.client().await, factory.client().await);
    for write in ["complete", "abandon", "fail", "forget"] {
        let key = unique_key(write);
        let owner = writer.new_owner();
        assert_claim_owns(&*writer, &key, &owner, "", SLACK).await;
        if write == "forget" {
            assert!(
                writer
                    .complete(&key, &owner, b"r", RESULT_TTL)
                    .await
                    .unwrap()
            );
        }
        let mut watch = watcher.watch(&key).await.expect("watch");
        match write {
            "complete" => assert!(
                writer
                    .complete(&key, &owner, b"r", RESULT_TTL)
                    .await
                    .unwrap()
            ),
            "abandon" => assert!(writer.abandon(&key, &owner).await.unwrap()),
            "fail" => assert!(writer.fail(&key, &owner, SLACK).await.unwrap()),
            _ => assert!(writer.forget(&key).await.unwrap()),
        }
        tokio::time::timeout(SLACK, watch.changed())
            .await
            .unwrap_or_else(|_| panic!("a watch missed `{write}`"))
            .unwrap_or_else(|e| panic!("the watch failed: {e}"));
    }
}

/// [`Idempotency`]: 4 clients × 5 concurrent duplicates → one execution, every caller gets its
/// result, exactly one of them marked executed.
pub async fn concurrent_duplicates_get_the_first_result(factory: &dyn IdempotencyFactory) {
    let key = unique_key("duplicates");
    let runs = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for _ in 0..4 {
        let idempotency = idempotency(factory.client().await, 1 << 20);
        for _ in 0..5 {
            let (idempotency, key, runs) = (idempotency.clone(), key.clone(), Arc::clone(&runs));
            calls.push(tokio::spawn(async move {
                idempotency
                    .execute(&key, &IdempotencyOptions::new(), || async {
                        let run = runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Ok::<_, IdempotencyError>(format!("ticket-{run}"))
                    })
                    .await
            }));
        }
    }
    let mut executed = 0;
    for call in calls {
        let result = call
            .await
            .unwrap()
            .expect("every duplicate gets the result");
        executed += usize::from(!result.is_replay());
        assert_eq!(result.into_inner(), "ticket-0");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the action ran once");
    assert_eq!(executed, 1, "exactly one call is marked executed");
}

/// [`Idempotency`]: the first action fails → nothing stored, and of the waiting duplicates
/// exactly one runs it; the others get that run's result.
pub async fn a_failed_action_lets_exactly_one_waiter_run(factory: &dyn IdempotencyFactory) {
    let key = unique_key("failed");
    let idempotency = idempotency(factory.client().await, 1 << 20);
    let owner = idempotency.store().new_owner();
    // Hold the key as a first caller would, so the duplicates queue up behind it.
    let store = factory.client().await;
    assert_claim_owns(&*store, &key, &owner, "", SLACK).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let waiters = spawn_duplicates(&idempotency, &key, &runs);
    // The first caller's action fails: it abandons the record.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(store.abandon(&key, &owner).await.unwrap());
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().expect("a result").into_inner(), 7);
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "exactly one waiter re-ran the action"
    );
}

/// Contract 2: a failed record answers `Failed` to a claim that waited on its owner, is taken
/// over by any other claim, and is fenced like the other terminal writes.
pub async fn a_failed_owner_is_answered_to_those_who_waited_on_it(
    factory: &dyn IdempotencyFactory,
) {
    let (a, b) = (factory.client().await, factory.client().await);
    let key = unique_key("fail");
    let owner = a.new_owner();
    assert_claim_owns(&*a, &key, &owner, "", SLACK).await;
    let duplicate = b.new_owner();
    let seen = b.claim(&key, &duplicate, "", SLACK, None).await.unwrap();
    assert!(
        matches!(seen, Claim::InProgress { ref holder, .. } if *holder == owner),
        "{seen:?}"
    );
    assert!(
        !b.fail(&key, &duplicate, SLACK).await.unwrap(),
        "not its record"
    );
    assert!(a.fail(&key, &owner, SLACK).await.unwrap());
    assert!(
        a.fail(&key, &owner, SLACK).await.unwrap(),
        "repeated: still true"
    );
    assert!(
        !a.renew(&key, &owner, SLACK).await.unwrap(),
        "a failed record is not renewed"
    );
    assert!(
        !a.complete(&key, &owner, b"late", RESULT_TTL).await.unwrap(),
        "a failed record is not completed"
    );
    for _ in 0..2 {
        assert_eq!(
            b.claim(&key, &duplicate, "", SLACK, Some(&owner))
                .await
                .unwrap(),
            Claim::Failed {
                holder: owner.clone()
            },
            "every duplicate that waited on the owner hears of its failure"
        );
    }
    let newcomer = b.new_owner();
    assert_eq!(
        b.claim(&key, &newcomer, "", SLACK, Some("someone-else"))
            .await
            .unwrap(),
        Claim::Owner,
        "a claim that did not wait on the failed owner takes the record over"
    );
    let seen = b
        .claim(&key, &duplicate, "", SLACK, Some(&owner))
        .await
        .unwrap();
    assert!(
        matches!(seen, Claim::InProgress { ref holder, .. } if *holder == newcomer),
        "{seen:?}"
    );
    assert!(!a.fail(&key, &owner, SLACK).await.unwrap(), "fenced");
}

/// [`Idempotency`]: duplicates waiting on an owner whose action fails, or panics, get
/// `OwnerFailed` at once and do not run the action one after another; the next call runs it.
pub async fn waiting_duplicates_get_a_failed_actions_failure(factory: &dyn IdempotencyFactory) {
    for panics in [false, true] {
        duplicates_of_a_failing_owner(factory, panics).await;
    }
}

/// Duplicates wait on an owner whose action then returns an error, or panics.
async fn duplicates_of_a_failing_owner(factory: &dyn IdempotencyFactory, panics: bool) {
    let key = unique_key("fanout");
    let watched = Arc::new(Watched::new(factory.client().await));
    let idempotency = idempotency(Arc::clone(&watched) as Arc<dyn IdempotencyStore>, 1 << 20);
    let (started, mut running) = tokio::sync::oneshot::channel();
    let (fail, failing) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let (idempotency, key) = (idempotency.clone(), key.clone());
        tokio::spawn(async move {
            idempotency
                .execute(&key, &IdempotencyOptions::new(), || async move {
                    started.send(()).unwrap();
                    failing.await.unwrap();
                    assert!(!panics, "the action panicked");
                    Err::<u32, _>(IdempotencyError::unavailable("owner", "the action failed"))
                })
                .await
        })
    };
    (&mut running).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let duplicates = spawn_duplicates(&idempotency, &key, &runs);
    // Every duplicate has seen the owner and watches the key.
    watched.watches_reach(5).await;
    fail.send(()).unwrap();
    match first.await {
        Ok(outcome) => assert!(!panics && outcome.is_err(), "the owner gets its own error"),
        Err(joined) => assert!(panics && joined.is_panic(), "the owner's panic goes on"),
    }
    for duplicate in duplicates {
        let error = tokio::time::timeout(SLACK, duplicate)
            .await
            .expect("a duplicate kept waiting")
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(error, IdempotencyError::OwnerFailed { .. }),
            "{error}"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a duplicate re-ran the action"
    );
    let next = idempotency
        .execute(&key, &IdempotencyOptions::new(), || async {
            Ok::<_, IdempotencyError>(8_u32)
        })
        .await
        .unwrap();
    assert_eq!(
        next,
        crate::idempotency::Idempotent::Executed(8),
        "the next call runs it"
    );
}

/// A store that counts the watches made on it, so a check can wait until its duplicates wait.
#[derive(Debug)]
struct Watched {
    inner: Arc<dyn IdempotencyStore>,
    watches: tokio::sync::watch::Sender<usize>,
}

impl Watched {
    fn new(inner: Arc<dyn IdempotencyStore>) -> Self {
        Watched {
            inner,
            watches: tokio::sync::watch::Sender::new(0),
        }
    }

    async fn watches_reach(&self, n: usize) {
        let mut watches = self.watches.subscribe();
        tokio::time::timeout(SLACK, watches.wait_for(|made| *made >= n))
            .await
            .expect("the duplicates never waited")
            .unwrap();
    }
}

#[async_trait]
impl IdempotencyStore for Watched {
    async fn claim(
        &self,
        key: &str,
        owner: &str,
        fingerprint: &str,
        ttl: Duration,
        waited_on: Option<&str>,
    ) -> Result<Claim, IdempotencyError> {
        self.inner
            .claim(key, owner, fingerprint, ttl, waited_on)
            .await
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError> {
        self.inner.renew(key, owner, ttl).await
    }

    async fn complete(
        &self,
        key: &str,
        owner: &str,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        self.inner.complete(key, owner, result, ttl).await
    }

    async fn abandon(&self, key: &str, owner: &str) -> Result<bool, IdempotencyError> {
        self.inner.abandon(key, owner).await
    }

    async fn fail(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError> {
        self.inner.fail(key, owner, ttl).await
    }

    async fn forget(&self, key: &str) -> Result<bool, IdempotencyError> {
        self.inner.forget(key).await
    }

    async fn watch(&self, key: &str) -> Result<Box<dyn crate::ChangeWatch>, IdempotencyError> {
        let watch = self.inner.watch(key).await?;
        self.watches.send_modify(|made| *made += 1);
        Ok(watch)
    }

    fn new_owner(&self) -> String {
        self.inner.new_owner()
    }
}

/// [`Idempotency`]: the same key with another fingerprint, running or completed.
pub async fn another_fingerprint_is_key_reused(factory: &dyn IdempotencyFactory) {
    let idempotency = idempotency(factory.client().await, 1 << 20);
    let key = unique_key("fingerprint");
    let store = factory.client().await;
    let owner = store.new_owner();
    assert_claim_owns(&*store, &key, &owner, "body-a", SLACK).await;
    let other = IdempotencyOptions::new().fingerprint("body-b").unwrap();
    let run = || async { Ok::<_, IdempotencyError>(()) };
    let error = idempotency.execute(&key, &other, run).await.unwrap_err();
    assert!(
        matches!(error, IdempotencyError::KeyReused { .. }),
        "in progress: {error}"
    );
    assert!(
        store
            .complete(&key, &owner, b"1", RESULT_TTL)
            .await
            .unwrap()
    );
    let error = idempotency.execute(&key, &other, run).await.unwrap_err();
    assert!(
        matches!(error, IdempotencyError::KeyReused { .. }),
        "completed: {error}"
    );
    assert_eq!(error.http_status(), 422);
    let same = IdempotencyOptions::new().fingerprint("body-a").unwrap();
    let replay = idempotency.execute(&key, &same, || async { Ok::<u32, IdempotencyError>(2) });
    assert_eq!(
        replay.await.unwrap(),
        crate::idempotency::Idempotent::Replayed(1)
    );
}

/// [`Idempotency`]: a result over the cap reaches its caller, is not stored, and leaves no
/// record behind.
pub async fn an_oversize_result_is_returned_and_not_stored(factory: &dyn IdempotencyFactory) {
    let idempotency = idempotency(factory.client().await, 16);
    let key = unique_key("oversize");
    let big = "x".repeat(100);
    for _ in 0..2 {
        let result = idempotency
            .execute(&key, &IdempotencyOptions::new(), || async {
                Ok::<_, IdempotencyError>(big.clone())
            })
            .await
            .unwrap();
        assert_eq!(
            result,
            crate::idempotency::Idempotent::Unstored(
                big.clone(),
                crate::idempotency::Unstored::TooLarge
            ),
            "not stored, so run again"
        );
    }
    let store = factory.client().await;
    assert_claim_owns(&*store, &key, &store.new_owner(), "", LEASE).await;
}

/// [`Idempotency`]: a duplicate whose wait runs out gets `InProgress` naming the holder, and
/// its action does not run.
pub async fn a_spent_wait_is_in_progress_and_does_not_run(factory: &dyn IdempotencyFactory) {
    let idempotency = idempotency(factory.client().await, 1 << 20);
    let key = unique_key("wait");
    let store = factory.client().await;
    let owner = store.new_owner();
    assert_claim_owns(&*store, &key, &owner, "", SLACK).await;
    let wait = Duration::from_millis(300);
    let options = IdempotencyOptions::new()
        .wait_time(wait)
        .unwrap()
        .lease(Lease::Fixed(SLACK))
        .unwrap();
    let started = Instant::now();
    let error = idempotency
        .execute(&key, &options, || async {
            panic!("the action must not run") as Result<(), IdempotencyError>
        })
        .await
        .unwrap_err();
    assert!(started.elapsed() >= wait, "gave up before its wait time");
    match &error {
        IdempotencyError::InProgress { holder, .. } => assert_eq!(*holder, owner),
        other => panic!("expected in progress: {other}"),
    }
    assert_eq!(error.http_status(), 409);
}

crate::conformance::run_all!(IdempotencyFactory, idempotency_conformance_checks);

/// Idempotent execution's checks, declared once: expands to
/// `$callback! { $($prefix)* <every check>, }`.
#[doc(hidden)]
#[macro_export]
macro_rules! idempotency_conformance_checks {
    ($callback:path; $($prefix:tt)*) => {
        $callback! { $($prefix)*
            claim_is_exclusive_and_idempotent_for_the_owner,
            an_unrenewed_lease_ends_and_renew_never_recreates,
            terminal_writes_are_fenced_by_the_owner,
            a_completed_record_replays_its_bytes_then_expires,
            forget_spares_a_record_in_progress,
            watches_wake_on_every_terminal_write,
            concurrent_duplicates_get_the_first_result,
            a_failed_owner_is_answered_to_those_who_waited_on_it,
            a_failed_action_lets_exactly_one_waiter_run,
            waiting_duplicates_get_a_failed_actions_failure,
            another_fingerprint_is_key_reused,
            an_oversize_result_is_returned_and_not_stored,
            a_spent_wait_is_in_progress_and_does_not_run,
        }
    };
    ($callback:ident) => {
        $crate::idempotency_conformance_checks! { $callback; }
    };
}
#[doc(hidden)]
pub use crate::idempotency_conformance_checks as checks;
