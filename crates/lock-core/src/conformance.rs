//! The harness of every capability's conformance suite (feature `conformance`).
//!
//! A capability's suite, `lock_core::<capability>::conformance`, has a factory trait with which a
//! test builds clients of one backend, and one public async function per check. The harness
//! gives every suite the same three things:
//!
//! - [`conformance_tests!`](crate::conformance_tests) turns each check into its own
//!   `#[tokio::test]`, with a fresh factory per check.
//! - The suite's `run_all` runs every check against one factory, for a backend too costly to
//!   start per check such as a Redis Cluster, and returns the names of the checks that failed.
//! - [`SLACK`] is added to every upper bound a check asserts.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_core::lock::conformance::LockFactory;
//! use lock_core::lock::{DistributedLock, InMemoryLock};
//!
//! /// Clients of one in-process lock table.
//! struct Memory(InMemoryLock);
//!
//! #[async_trait::async_trait]
//! impl LockFactory for Memory {
//!     async fn client(&self) -> Arc<dyn DistributedLock> {
//!         Arc::new(self.0.clone())
//!     }
//!     fn watchdog_timeout(&self) -> Duration {
//!         Duration::from_secs(1)
//!     }
//! }
//!
//! // One `#[tokio::test]` per check of the lock's suite, each with a fresh table.
//! lock_core::conformance_tests!(lock, async { Memory(InMemoryLock::new()) });
//! # fn main() {}
//! ```

use std::time::Duration;

/// Added to every upper bound a check asserts, for a loaded 2-core machine: 5 s.
pub const SLACK: Duration = Duration::from_secs(5);

/// A key no other check or concurrent run uses.
///
/// # Examples
///
/// ```
/// use lock_core::conformance::unique_key;
///
/// assert!(unique_key("fencing").starts_with("conformance:fencing:"));
/// assert_ne!(unique_key("fencing"), unique_key("fencing"));
/// ```
pub fn unique_key(check: &str) -> String {
    format!("conformance:{check}:{:016x}", rand::random::<u64>())
}

/// Runs checks in turn against `$factory`, an `Arc` of a suite's factory, each in a task of its
/// own so that a failing check does not stop the others, and pushes the names of the failed
/// ones to `$failed`. A suite's `run_all` expands it over its list of checks.
macro_rules! run_checks {
    ($factory:ident, $failed:ident; $($check:ident),+ $(,)?) => {$(
        let started = tokio::time::Instant::now();
        let factory = std::sync::Arc::clone(&$factory);
        let outcome = tokio::spawn(async move { $check(&*factory).await }).await;
        tracing::info!(
            check = stringify!($check),
            passed = outcome.is_ok(),
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "conformance check"
        );
        if outcome.is_err() {
            $failed.push(stringify!($check));
        }
    )+};
}
pub(crate) use run_checks;

/// Defines a suite's `run_all` over the checks that its list macro `$checks` names.
macro_rules! run_all {
    ($factory:ident, $checks:ident) => {
        /// Runs every check against one `factory`, for a backend too costly to start per check,
        /// and returns the names of those that failed. Needs a multi-threaded Tokio runtime.
        pub async fn run_all(factory: std::sync::Arc<dyn $factory>) -> Vec<&'static str> {
            let mut failed = Vec::new();
            crate::$checks!(crate::conformance::run_checks; factory, failed;);
            failed
        }
    };
}
pub(crate) use run_all;

/// Expands to one `#[tokio::test]` per check of a capability's conformance suite, each with a
/// fresh factory.
///
/// The first argument names the capability: `lock`, `idempotency`, `branches`, `values`,
/// `rate_limit` or `cache`. The second is an expression evaluating to a future of that suite's
/// factory. The calling crate needs `tokio` with `macros` and `rt-multi-thread` as a
/// dev-dependency.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use lock_core::idempotency::InMemoryIdempotencyStore;
///
/// // A store shared in one process is its own factory; a backend with connections implements
/// // `IdempotencyFactory` so that each client has connections of its own.
/// lock_core::conformance_tests!(idempotency, async { Arc::new(InMemoryIdempotencyStore::new()) });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (@tests $capability:ident $factory:expr; $($check:ident),+ $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let factory = $factory.await;
                $crate::$capability::conformance::$check(&factory).await;
            }
        )+
    };
    ($capability:ident, $factory:expr) => {
        $crate::$capability::conformance::checks! {
            $crate::conformance_tests; @tests $capability $factory;
        }
    };
}
