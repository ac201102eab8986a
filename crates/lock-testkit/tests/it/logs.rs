//! A scoped capture sees its own thread's events of a call site that another thread hit first
//! while the capture was live.

use std::sync::mpsc;

use lock_testkit::logs::CapturedLogs;

/// A call site no other test hits, so its first hit is the one in the test below.
fn log_here() {
    tracing::warn!("the call site under test");
}

#[test]
fn a_call_site_first_hit_by_another_thread_still_reaches_a_scoped_capture() {
    let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
    tracing::subscriber::with_default(subscriber, || {
        let (hit, was_hit) = mpsc::channel();
        // The other thread has no subscriber: were the call site's interest worked out from it
        // alone and cached, this thread's event below would be dropped.
        std::thread::spawn(move || {
            log_here();
            hit.send(()).unwrap();
        });
        was_hit.recv().unwrap();
        log_here();
    });
    let text = logs.text();
    assert_eq!(
        text.matches("the call site under test").count(),
        1,
        "{text}"
    );
}
