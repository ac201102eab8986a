//! Idempotent execution: [`Idempotency`](crate::Idempotency) runs an action once per key and
//! replays its result to duplicates, over the [`IdempotencyStore`](crate::IdempotencyStore) port.

#[cfg(feature = "conformance")]
pub mod conformance;
pub(crate) mod disabled;
pub(crate) mod error;
pub(crate) mod execute;
pub(crate) mod memory;
pub(crate) mod options;
pub(crate) mod port;
pub(crate) mod scope;
pub mod telemetry;
