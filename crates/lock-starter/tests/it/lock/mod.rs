//! The lock as the starter wires it: the line a start logs, the release a shutdown flushes,
//! and the HTTP layer running a handler under a request's key.

mod http;
mod shutdown;

use lock_starter::figment::Figment;
use lock_starter::figment::providers::{Format, Toml};
use lock_starter::prelude::*;
use tracing::instrument::WithSubscriber;

/// A start says at INFO which Redis it uses, under which prefix and instance id, with the
/// address' password hidden, even while that Redis does not answer yet.
#[tokio::test]
async fn a_start_logs_the_redis_prefix_and_instance_it_uses() {
    let config = "[telco.platform.lock]\nkey-prefix = \"billing:\"\ninstance-id = \"pod-7\"\n\
                  [telco.platform.lock.redis]\naddress = \"redis://app:s3cret@127.0.0.1:1\"\n";
    let (logs, subscriber) = lock_testkit::logs::CapturedLogs::scoped(tracing::Level::INFO);
    LockStarter::builder()
        .figment(Figment::from(Toml::string(config)))
        .build()
        .with_subscriber(subscriber)
        .await
        .unwrap();
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("lock starter ready"))
        .unwrap_or_else(|| panic!("no start line in {text}"));
    for part in [
        " INFO ",
        "redis=redis://app:***@127.0.0.1:1",
        "key_prefix=billing:",
        "instance_id=pod-7",
    ] {
        assert!(line.contains(part), "no {part:?} in {line}");
    }
    assert!(!text.contains("s3cret"), "{text}");
}
