//! `LeaseState::lost()` never misses a status change (a mutex and a `Notify`: the waiter registers
//! before it reads the status).

use std::time::Duration;

use lock_core::lock::{LeaseState, LostReason};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_sees_every_loss_racing_with_its_first_poll() {
    for i in 0..20_000u32 {
        let state = LeaseState::new(Some(Instant::now() + Duration::from_secs(30)));
        let lost = tokio::spawn(state.lost());
        let other = state.clone();
        let marker = std::thread::spawn(move || {
            for _ in 0..(i % 50) {
                std::hint::spin_loop();
            }
            if i % 3 == 0 {
                other.confirm(Instant::now() + Duration::from_secs(40));
            }
            other.mark_lost(LostReason::NotOwner);
        });
        let reason = tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .unwrap_or_else(|_| panic!("iteration {i}: lost() missed the loss"))
            .unwrap();
        assert_eq!(reason, LostReason::NotOwner);
        marker.join().unwrap();
    }
}

/// Time is paused (`LeaseState` measures its deadline on tokio's clock): the runtime jumps to
/// the next timer once every task waits, so the deadlines below are exact, not lower bounds.
#[tokio::test(start_paused = true)]
async fn lost_fires_at_a_deadline_pushed_out_while_it_sleeps() {
    let state = LeaseState::new(Some(Instant::now() + Duration::from_millis(200)));
    let lost = tokio::spawn(state.lost());
    // `lost` is asleep until the first deadline when this sleep ends: it ran while this waited.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!lost.is_finished());
    assert!(state.confirm(Instant::now() + Duration::from_millis(400)));
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, LostReason::Expired);
    // The pushed-out deadline, not the first one (100 ms from here).
    assert_eq!(started.elapsed(), Duration::from_millis(400));
}
