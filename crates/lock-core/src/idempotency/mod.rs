//! Idempotent execution: [`Idempotency`](crate::Idempotency) runs an action once per
//! idempotency key and replays its result to duplicates, over the
//! [`IdempotencyStore`](crate::IdempotencyStore) port; the in-memory and disabled stores, the
//! errors, telemetry, and the conformance suite every store runs.

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
