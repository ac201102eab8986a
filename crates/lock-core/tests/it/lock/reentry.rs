//! Re-entry edge cases beyond the conformance check: nested handles that outlive their section,
//! tasks polled inside a section (`LocalSet`), siblings, cancellation and panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::lock::{DistributedLock, DistributedLockExt, InMemoryLock, Lease, LostReason};

// ---------------------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------------------

/// A nested handle handed to a worker the section spawns (the README pattern: `select!` on
/// `lost()` against the work). The section returns; `with_lock` releases the lease although a
/// nested hold is still live, and another owner is granted the key. The worker is never told:
/// the nested handle shares the outer lease's status, which is now `Released`, and `lost()` never
/// fires after a release — so the worker runs to completion while another owner holds the key.
#[tokio::test(start_paused = true)]
#[allow(clippy::async_yields_async)] // the section hands the worker's JoinHandle out on purpose
async fn a_nested_handle_that_outlives_its_scope_learns_that_the_lease_passed_on() {
    let lock = InMemoryLock::new();
    let inner = lock.clone();
    let worker = lock
        .with_lock("bill-run:2026-11", Lease::Watchdog, || async move {
            let nested = inner
                .acquire("bill-run:2026-11", Lease::Watchdog)
                .await
                .unwrap();
            assert!(nested.is_reentrant());
            tokio::spawn(async move {
                tokio::select! {
                    reason = nested.lost() => Err(reason),
                    () = tokio::time::sleep(Duration::from_secs(10)) => Ok(nested),
                }
            })
        })
        .await
        .unwrap();

    // The scope is over and the lease released: another owner gets the key.
    let other = lock
        .try_acquire("bill-run:2026-11", Lease::Watchdog)
        .await
        .expect("the key is free once the outer scope ended");

    match worker.await.unwrap() {
        Err(_reason) => {}
        Ok(nested) => panic!(
            "the worker holding a nested handle ran its whole 10 s section while another owner \
             ({}) held the key since t=0: lost() never fired; the nested handle says is_held={} \
             hold_count={} status={:?}",
            other.owner(),
            nested.is_held(),
            nested.hold_count(),
            nested.status()
        ),
    }
}

/// The same gap seen through the handle alone: after the outer scope ended and the key went to
/// someone else, the nested handle still reports two holds and its `lost()` stays pending.
#[tokio::test(start_paused = true)]
async fn a_nested_handle_kept_past_its_scope_does_not_claim_holds_on_a_released_lease() {
    let lock = InMemoryLock::new();
    let inner = lock.clone();
    let nested = lock
        .with_lock("k", Lease::Watchdog, || async move {
            inner.acquire("k", Lease::Watchdog).await.unwrap()
        })
        .await
        .unwrap();
    let _other = lock.try_acquire("k", Lease::Watchdog).await.unwrap();
    assert!(!nested.is_held());
    let lost = tokio::time::timeout(Duration::from_secs(60), nested.lost()).await;
    assert!(
        nested.hold_count() <= 1 && lost.is_ok(),
        "nested handle on a lease that another owner holds now: hold_count()={} (documented: \
         how many times the current task holds this lease), lost() fired: {:?}",
        nested.hold_count(),
        lost
    );
}

/// Re-entry is decided by a task-local, which is a thread-local swapped in while the section's
/// future is polled. Anything polled synchronously inside that poll sees it — including *other
/// tasks*: here two `spawn_local` tasks of a `LocalSet` driven from the section (via
/// `block_in_place` + `block_on`). Both "re-enter" the section's lease and run their critical
/// sections at the same time, though the contract says any other task contends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_tasks_polled_inside_a_section_do_not_re_enter_its_lease() {
    let lock = InMemoryLock::new();
    let inner = lock.clone();
    let (granted, max_inside) = lock
        .with_lock("k", Lease::Watchdog, || async move {
            tokio::task::block_in_place(|| {
                let local = tokio::task::LocalSet::new();
                tokio::runtime::Handle::current().block_on(local.run_until(async move {
                    let inside = Arc::new(AtomicUsize::new(0));
                    let max_inside = Arc::new(AtomicUsize::new(0));
                    let mut tasks = Vec::new();
                    for _ in 0..2 {
                        let (lock, inside, max_inside) =
                            (inner.clone(), Arc::clone(&inside), Arc::clone(&max_inside));
                        tasks.push(tokio::task::spawn_local(async move {
                            let Ok(handle) = lock.try_acquire("k", Lease::Watchdog).await else {
                                return false;
                            };
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            max_inside.fetch_max(now, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            inside.fetch_sub(1, Ordering::SeqCst);
                            drop(handle);
                            true
                        }));
                    }
                    let mut granted = 0;
                    for task in tasks {
                        granted += usize::from(task.await.unwrap());
                    }
                    (granted, max_inside.load(Ordering::SeqCst))
                }))
            })
        })
        .await
        .unwrap();
    assert_eq!(
        granted, 0,
        "{granted} spawn_local task(s) — other tasks than the section's — were granted the key \
         the section holds (at most {max_inside} inside their critical sections at once)"
    );
}

// ---------------------------------------------------------------------------------------------
// Guards: risks tried that held up
// ---------------------------------------------------------------------------------------------

/// `with_lock` run as a `LocalSet` future: a task the section `spawn_local`s is polled by the
/// set outside the section's poll, so it contends (and a sibling of the `with_lock` future too).
#[tokio::test(flavor = "current_thread")]
async fn local_tasks_and_siblings_outside_the_section_contend() {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let lock = InMemoryLock::new();
            let inner = lock.clone();
            let spawned = lock
                .with_lock("k", Lease::Watchdog, || async move {
                    let lock = inner.clone();
                    tokio::task::spawn_local(async move {
                        lock.try_acquire("k", Lease::Watchdog).await.is_ok()
                    })
                    .await
                    .unwrap()
                })
                .await
                .unwrap();
            assert!(
                !spawned,
                "a spawn_local task re-entered the section's lease"
            );

            let sibling_lock = lock.clone();
            let (section, sibling) = tokio::join!(
                lock.with_lock("k", Lease::Watchdog, || tokio::time::sleep(
                    Duration::from_millis(100)
                )),
                async move {
                    tokio::task::yield_now().await;
                    sibling_lock.try_acquire("k", Lease::Watchdog).await.is_ok()
                }
            );
            section.unwrap();
            assert!(
                !sibling,
                "a join! sibling of with_lock re-entered its lease"
            );
        })
        .await;
}

/// A nested `with_lock` cancelled at its await points (a `select!` that drops it), a nested
/// section that panics, and nested handles dropped or released: the hold count comes back to 1,
/// the outer lease stays held until its scope ends, and a panic releases the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_counts_survive_cancellation_and_panics() {
    let lock = InMemoryLock::new();
    let inner = lock.clone();
    let outer =
        tokio::spawn(async move {
            let lock = inner.clone();
            inner
            .with_lock("k", Lease::Watchdog, || async move {
                for _ in 0..3 {
                    tokio::select! {
                        _ = lock.with_lock("k", Lease::Watchdog, std::future::pending::<()>) => {}
                        () = tokio::time::sleep(Duration::from_millis(10)) => {}
                    }
                }
                let probe = lock.acquire("k", Lease::Watchdog).await.unwrap();
                assert_eq!(probe.hold_count(), 2, "a cancelled nested section kept its hold");
                assert!(probe.release().await.is_ok());
                let probe = lock.acquire("k", Lease::Watchdog).await.unwrap();
                assert_eq!(probe.hold_count(), 2, "a released nested handle kept its hold");
                drop(probe);
                lock.with_lock("k", Lease::Watchdog, || async {
                    panic!("inside a nested section")
                })
                .await
                .unwrap();
            })
            .await
        });
    assert!(outer.await.unwrap_err().is_panic());
    let after = lock
        .try_acquire("k", Lease::Watchdog)
        .await
        .expect("a panic inside nested sections left the key held");
    assert!(!after.is_reentrant());
    assert_eq!(after.hold_count(), 1);
}

/// Re-entry after the outer lease was lost (a fixed lease that ran out mid-section): the nested
/// acquisition does not re-enter the dead lease; it contends and gets a lease of its own, with a
/// newer fencing token, which its own scope releases.
#[tokio::test(start_paused = true)]
async fn a_lost_outer_lease_is_not_re_entered() {
    let lock = InMemoryLock::new();
    let inner = lock.clone();
    let (outer_token, lost, fresh_token, reentrant) = lock
        .with_lock(
            "k",
            Lease::Fixed(Duration::from_millis(200)),
            || async move {
                let outer = inner.acquire("k", Lease::Watchdog).await.unwrap();
                let outer_token = outer.fencing_token();
                let lost = outer.lost().await;
                drop(outer);
                let fresh = inner.acquire("k", Lease::Watchdog).await.unwrap();
                (
                    outer_token,
                    lost,
                    fresh.fencing_token(),
                    fresh.is_reentrant(),
                )
            },
        )
        .await
        .unwrap();
    assert_eq!(lost, LostReason::Expired);
    assert!(!reentrant, "re-entered a lease that was already lost");
    assert!(fresh_token > outer_token);
    assert!(lock.try_acquire("k", Lease::Watchdog).await.is_ok());
}

/// A task spawned inside a section contends for the section's key (re-entry is per task); its
/// error says the holder is this process, not another owner.
#[tokio::test(start_paused = true)]
async fn a_task_spawned_inside_a_section_is_told_its_own_process_holds_the_key() {
    let lock = InMemoryLock::new();
    let inner = lock.clone();
    let message = lock
        .with_lock("bill-run:2026-11", Lease::Watchdog, || async move {
            let options = lock_core::lock::AcquireOptions::new(Lease::Watchdog)
                .wait_time(Duration::from_secs(1))
                .unwrap();
            tokio::spawn(async move { inner.acquire_with("bill-run:2026-11", options).await })
                .await
                .unwrap()
                .unwrap_err()
                .to_string()
        })
        .await
        .unwrap();
    assert!(
        message.contains("held by this process") && !message.contains("another owner"),
        "{message}"
    );
}
