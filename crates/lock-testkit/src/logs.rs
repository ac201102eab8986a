//! What a test logged through `tracing` (and through the `log` crate, which
//! tracing-subscriber bridges when it is installed globally), kept in memory so the test can
//! check what is — and is not — in its logs: a warning that must appear, a password that must
//! not.
//!
//! ```
//! use lock_testkit::logs::CapturedLogs;
//!
//! let (logs, subscriber) = CapturedLogs::scoped(tracing::Level::WARN);
//! tracing::subscriber::with_default(subscriber, || tracing::warn!("replica missing"));
//! assert!(logs.text().contains("replica missing"));
//! ```

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use tracing::Subscriber;
use tracing_subscriber::util::SubscriberInitExt;

/// Log lines written so far, in tracing-subscriber's plain `fmt` format (no colours).
#[derive(Clone, Debug, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Installs, once per test binary, a global subscriber at `level` (with the `log` bridge)
    /// writing into one capture, and returns it; later calls return the same capture and
    /// ignore their `level`. Global, so it sees every thread and task of the binary — the only
    /// reliable way when tests run in parallel.
    ///
    /// # Panics
    /// If another global subscriber was installed first.
    pub fn global(level: tracing::Level) -> &'static CapturedLogs {
        static GLOBAL: OnceLock<CapturedLogs> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let logs = CapturedLogs::default();
            logs.subscriber(level)
                .try_init()
                .expect("no other global subscriber in this test binary");
            logs
        })
    }

    /// A new capture and a subscriber at `level` writing into it, for
    /// `tracing::subscriber::with_default` or `set_default`: it sees only what the current
    /// thread logs while it is the default. `tracing` caches per call site whether anything is
    /// interested, so prefer [`global`](Self::global) when other tests of the binary log the
    /// same call sites at the same time.
    pub fn scoped(level: tracing::Level) -> (CapturedLogs, impl Subscriber + Send + Sync) {
        let logs = CapturedLogs::default();
        let subscriber = logs.subscriber(level);
        (logs, subscriber)
    }

    /// Everything captured so far (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock()).into_owned()
    }

    fn subscriber(&self, level: tracing::Level) -> impl Subscriber + Send + Sync + use<> {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(level)
            .finish()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // Appends only: a panic while holding it cannot leave the bytes inconsistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
