//! The distributed lock: the [`DistributedLock`] port, its handles,
//! leases and options, and its implementations.

#[cfg(feature = "conformance")]
pub mod conformance;
pub(crate) mod disabled;
pub(crate) mod ext;
pub(crate) mod fail_open;
pub(crate) mod handle;
pub(crate) mod lease;
pub(crate) mod memory;
pub(crate) mod options;
pub(crate) mod port;
pub(crate) mod reentrant;
pub(crate) mod shutdown;
pub(crate) mod status;
pub mod telemetry;

pub use disabled::DisabledLock;
pub use ext::DistributedLockExt;
pub use fail_open::{FailOpen, Unguarded};
pub use handle::{LeaseRelease, LeaseState, LockHandle};
pub use lease::{
    Lease, MAX_LEASE, MAX_WAIT, MAX_WATCHDOG_TIMEOUT, MIN_LEASE, MIN_WATCHDOG_TIMEOUT,
    validate_wait, validate_watchdog_timeout,
};
pub use memory::InMemoryLock;
pub use options::{AcquireOptions, DEFAULT_WAIT_TIME};
pub use port::DistributedLock;
pub use shutdown::{DEFAULT_SHUTDOWN_TIMEOUT, HeldLeases, ShutdownSummary};
pub use status::{LeaseStatus, LostReason, ReleaseOutcome, UnguardedReason};
