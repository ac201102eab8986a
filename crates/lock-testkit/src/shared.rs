//! One costly fixture — a [`RedisCluster`](crate::RedisCluster), a
//! [`RedisSentinel`](crate::RedisSentinel) — shared by the `#[tokio::test]`s of one test binary.
//!
//! Each `#[tokio::test]` has a runtime of its own, so the fixture lives in a `static`; tests take
//! it one at a time (a test may fail over or migrate what the next one uses), the first starts
//! it, and the last to finish drops it — a `static` is never dropped, and the processes' temp
//! dirs would stay behind.
//!
//! ```no_run
//! use lock_testkit::RedisCluster;
//! use lock_testkit::shared::Shared;
//!
//! /// Two tests below use it.
//! static CLUSTER: Shared<RedisCluster> = Shared::new(2);
//!
//! # async fn example() {
//! let cluster = CLUSTER.take(|| async { RedisCluster::start().await.unwrap() }).await;
//! let url = cluster.url();
//! # }
//! ```

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, MutexGuard};

/// A fixture shared by `users` tests of one binary; see the [module](self).
#[derive(Debug)]
pub struct Shared<T: 'static> {
    slot: Mutex<Option<T>>,
    users: usize,
    finished: AtomicUsize,
}

impl<T: 'static> Shared<T> {
    /// An empty slot for a fixture that `users` tests take once each. Keep `users` in step with
    /// the tests: too low costs a second start, too high leaves the last fixture behind.
    pub const fn new(users: usize) -> Self {
        Shared {
            slot: Mutex::const_new(None),
            users,
            finished: AtomicUsize::new(0),
        }
    }

    /// Waits for the other tests to be done with the fixture, starting it with `start` if no
    /// test has yet (or a failed start left none).
    pub async fn take<F, Fut>(&'static self, start: F) -> Taken<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let mut slot = self.slot.lock().await;
        if slot.is_none() {
            *slot = Some(start().await);
        }
        Taken { slot, shared: self }
    }
}

/// The fixture, taken by one test; given back when dropped (also when the test panicked), and
/// dropped itself by the last of its users.
#[derive(Debug)]
pub struct Taken<T: 'static> {
    slot: MutexGuard<'static, Option<T>>,
    shared: &'static Shared<T>,
}

impl<T> Deref for Taken<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.slot.as_ref().expect("filled by Shared::take")
    }
}

impl<T> DerefMut for Taken<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.slot.as_mut().expect("filled by Shared::take")
    }
}

impl<T> Drop for Taken<T> {
    fn drop(&mut self) {
        if self.shared.finished.fetch_add(1, Ordering::SeqCst) + 1 == self.shared.users {
            self.slot.take();
        }
    }
}
