//! Idempotent execution: [`Idempotency`] runs an action once per key and
//! replays its result to duplicates, over the [`IdempotencyStore`] port.

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

pub use disabled::DisabledIdempotencyStore;
pub use error::{IdempotencyError, NotStored, Unstored};
pub use execute::{Begun, Idempotency, Idempotent};
pub use memory::InMemoryIdempotencyStore;
pub use options::{
    DEFAULT_DUPLICATE_WAIT, DEFAULT_MAX_RESULT_BYTES, DEFAULT_RESULT_TTL, IdempotencyOptions,
    IdempotencySettings, MAX_RESULT_BYTES, MIN_RESULT_TTL,
};
pub use port::{Claim, IdempotencyStore};
pub use scope::IdempotencyScope;
