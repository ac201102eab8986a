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

/// The message of the `WARN` line a fail-open section logs before it runs unguarded.
pub const FAIL_OPEN_MESSAGE: &str =
    "lock not held; running the critical section unguarded (fail open)";

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
    /// thread logs while it is the default, also when other threads of the binary log the same
    /// call sites at the same time. One narrow gap is left: a call site another thread hits for
    /// the first time during the process's very first call of `scoped` can be missed, because
    /// `tracing` caches each call site's interest.
    pub fn scoped(level: tracing::Level) -> (CapturedLogs, impl Subscriber + Send + Sync) {
        // While only one dispatcher exists, `tracing` works out a call site's interest, when
        // the site is first hit, from the hitting thread's subscriber alone and caches it: a
        // site first hit by another thread while a scoped capture is the only dispatcher would
        // stay "never" for that capture too. A second dispatcher that lives for the rest of the
        // process makes every later computation ask all live ones.
        static WITNESS: OnceLock<tracing::Dispatch> = OnceLock::new();
        WITNESS
            .get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        let logs = CapturedLogs::default();
        let subscriber = logs.subscriber(level);
        (logs, subscriber)
    }

    /// Everything captured so far (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock()).into_owned()
    }

    /// The fail-open `WARN` lines (`with_lock_fail_open` running a section unguarded) logged
    /// so far for lock `key`.
    pub fn fail_open_warnings(&self, key: &str) -> Vec<String> {
        let key_field = format!("lock_key=\"{key}\"");
        self.text()
            .lines()
            .filter(|line| line.contains(FAIL_OPEN_MESSAGE) && line.contains(&key_field))
            .map(str::to_owned)
            .collect()
    }

    /// Asserts exactly one fail-open `WARN` line for `key`, at level `WARN`, with `reason`
    /// (`lock_disabled`, `wait_time_elapsed`, `backend_unavailable`) and containing
    /// `error_contains`.
    ///
    /// # Panics
    /// Naming the lines found when the assertion fails.
    #[track_caller]
    pub fn assert_one_fail_open_warning(&self, key: &str, reason: &str, error_contains: &str) {
        let lines = self.fail_open_warnings(key);
        assert_eq!(lines.len(), 1, "one fail-open WARN for {key}: {lines:#?}");
        let line = &lines[0];
        assert!(line.contains(" WARN "), "{line}");
        assert!(line.contains(&format!("reason=\"{reason}\"")), "{line}");
        assert!(line.contains(error_contains), "{line}");
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
