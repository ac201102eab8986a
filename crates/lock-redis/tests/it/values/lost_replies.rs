//! A write whose reply is lost on the wire. A [`FaultProxy`] forwards the write to Redis,
//! swallows the reply and closes the connection. fred would re-send it after the reconnect, so
//! a push would be appended twice and a compare-and-set would answer for its second run; the
//! store sends these once, and the caller learns that the outcome is unknown.

use crate::common;

use std::time::Duration;

use common::{GENEROUS, command_calls, delta, eventually, server};
use lock_core::values::{Expiry, SharedValues, ValuesError};
use lock_testkit::{FaultProxy, RedisServer, TrapAction};

async fn setup() -> (RedisServer, FaultProxy, SharedValues) {
    let redis = server().await;
    let (proxy, lock) = common::behind_proxy(&redis, |c| {
        c.command_timeout(Duration::from_secs(2))
            .instance_id("lost-reply-pod")
    })
    .await;
    lock.client().ping().await.unwrap();
    let (values, _) = super::values(&lock).await;
    (redis, proxy, values)
}

/// The next command carrying `marker` reaches Redis; its reply never comes back.
fn arm(proxy: &FaultProxy, marker: &str) {
    proxy.arm_trap(
        marker.as_bytes(),
        TrapAction::SwallowReplyThenClose(Duration::from_millis(150)),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_reply_was_lost_is_appended_once_and_reported_unknown() {
    let (redis, proxy, values) = setup().await;
    let queue = values.queue::<String>("lost-push");
    let before = command_calls(&redis).await;
    arm(&proxy, "lost-push-item");
    let pushed = queue.push(&"lost-push-item".to_owned()).await;
    assert!(!proxy.trap_armed(), "the trap never fired");
    assert!(
        matches!(pushed, Err(ValuesError::Unavailable { .. })),
        "{pushed:?}"
    );
    // Once the client has reconnected: nothing re-sent, one item.
    let reconnected = eventually(GENEROUS, || async { queue.len().await.is_ok() }).await;
    assert!(reconnected, "the client never reconnected");
    let after = command_calls(&redis).await;
    assert_eq!(delta(&before, &after, "evalsha"), 1, "the push was re-sent");
    assert_eq!(queue.len().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compare_and_set_whose_reply_was_lost_is_not_reported_refused() {
    let (_redis, proxy, values) = setup().await;
    let ttl = Expiry::After(Duration::from_secs(60));
    let version = values.set("lost-cas", &1u32, ttl).await.unwrap();
    arm(&proxy, "lost-cas");
    let written = values
        .compare_and_set("lost-cas", Some(version), &2u32, ttl)
        .await;
    assert!(!proxy.trap_armed(), "the trap never fired");
    assert!(
        matches!(written, Err(ValuesError::Unavailable { .. })),
        "a write that happened must not be answered {written:?}"
    );
    let reconnected = eventually(GENEROUS, || async {
        values.get::<u32>("lost-cas").await.is_ok()
    })
    .await;
    assert!(reconnected, "the client never reconnected");
    let stored = values.get::<u32>("lost-cas").await.unwrap().unwrap();
    assert_eq!(stored.value, 2, "the compare-and-set did run");
}
