//! The in-memory implementation against the conformance suite.

use std::sync::Arc;
use std::time::Duration;

use lock_core::lock::conformance::LockFactory;
use lock_core::lock::{DistributedLock, InMemoryLock};

struct Memory(InMemoryLock);

#[async_trait::async_trait]
impl LockFactory for Memory {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.0.clone())
    }

    fn watchdog_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn expire(&self, key: &str) -> bool {
        self.0.expire(key)
    }
}

lock_core::conformance_tests!(lock, async { Memory(InMemoryLock::new()) });

/// A backend that cannot even make a client: every check must fail.
struct Broken;

#[async_trait::async_trait]
impl LockFactory for Broken {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        panic!("no backend (expected by run_all_reports_each_failed_check)")
    }

    fn watchdog_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// The checks' names, from the one list `conformance_tests!` and `run_all` expand.
macro_rules! check_names {
    ($($check:ident),+ $(,)?) => {
        const CHECKS: &[&str] = &[$(stringify!($check)),+];
    };
}
lock_core::lock::conformance::checks! {check_names}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_passes_on_a_correct_lock_and_names_each_failed_check() {
    let passed = lock_core::lock::conformance::run_all(Arc::new(Memory(InMemoryLock::new()))).await;
    assert_eq!(passed, Vec::<&str>::new());
    let failed = lock_core::lock::conformance::run_all(Arc::new(Broken)).await;
    // One name per check, the same list the per-check macro expands to.
    assert_eq!(failed, CHECKS);
    assert!(
        CHECKS.contains(&"shutdown_releases_and_refuses"),
        "{CHECKS:?}"
    );
}
