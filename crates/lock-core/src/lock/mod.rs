//! The distributed lock: the [`DistributedLock`](crate::DistributedLock) port, its handles,
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
