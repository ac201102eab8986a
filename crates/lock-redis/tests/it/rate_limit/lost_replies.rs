//! A decision whose reply is lost on the wire. A [`FaultProxy`] forwards the script to Redis,
//! swallows the reply and closes the connection. fred would re-send it after the reconnect, so
//! the request would be charged twice and could be answered denied by its second run; the
//! store sends it once, and the decision is the failure policy's.

use crate::common;

use std::time::Duration;

use common::{GENEROUS, eventually, server};
use lock_core::rate_limit::{Basis, FailurePolicy};
use lock_testkit::TrapAction;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_whose_reply_was_lost_is_charged_once() {
    let redis = server().await;
    let (proxy, lock) = common::behind_proxy(&redis, |c| {
        c.command_timeout(Duration::from_secs(2))
            .instance_id("lost-reply-pod")
    })
    .await;
    let store = super::store(&lock).await;
    let limit = super::limiter(&store, "lost", "10/1h", FailurePolicy::FailClosed);
    limit.try_acquire("warm-up", 1).await.unwrap(); // the script is loaded
    proxy.arm_trap(
        b"lost-client",
        TrapAction::SwallowReplyThenClose(Duration::from_millis(150)),
    );
    let decision = limit.try_acquire("lost-client", 3).await.unwrap();
    assert!(!proxy.trap_armed(), "the trap never fired");
    assert_eq!(decision.basis, Basis::FailedClosed, "{decision:?}");
    // A fail-closed check answers `Ok(FailedClosed)` while Redis is unreachable: only a counted
    // answer shows the client is back, and that answer is the one checked.
    let standing = std::cell::RefCell::new(None);
    let reconnected = eventually(GENEROUS, || async {
        let read = limit.try_acquire("lost-client", 0).await.ok();
        let counted = read.filter(|d| d.basis == Basis::Counted);
        let found = counted.is_some();
        *standing.borrow_mut() = counted;
        found
    })
    .await;
    assert!(reconnected, "the client never reconnected");
    let standing = standing.into_inner().unwrap();
    assert_eq!(standing.remaining, 7, "charged once: {standing:?}");
}
