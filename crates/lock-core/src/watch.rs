//! [`ChangeWatch`]: how a waiter learns that what it waits on may have changed in the backend.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::error::BoxError;

/// Wakes a waiter when the state it watches in a backend may have changed.
///
/// A capability that waits on shared state takes one from its port's `watch` and re-reads after
/// each return.
///
/// # Contract
/// - `Ok(())` when the state may have changed since the watch was made or last returned.
///   Spurious returns are allowed, and no change is missed once the port's `watch` returned.
/// - `Err(cause)` when the backend has been unreachable for longer than its command timeout. The
///   waiter then fails with its capability's "unavailable" error.
/// - Dropping the watch ends it.
#[async_trait]
pub trait ChangeWatch: Send + Debug {
    /// Returns when the watched state may have changed.
    ///
    /// # Errors
    /// The connection error, once the backend has been unreachable for one command timeout.
    async fn changed(&mut self) -> Result<(), BoxError>;
}

/// A watch that never fires, for backends in which nothing changes (switched off).
#[derive(Debug)]
pub(crate) struct Unchanging;

#[async_trait]
impl ChangeWatch for Unchanging {
    async fn changed(&mut self) -> Result<(), BoxError> {
        std::future::pending().await
    }
}
