//! Shared values: small typed values with a TTL and a version, shared by every replica, that a
//! caller can wait on instead of polling.
//!
//! [`SharedValues`] is the typed API over the [`ValueStore`] port:
//!
//! - **Versioned writes.** Every write (set, conditional set, delete) gets a version above every
//!   earlier write of its key, deletions and expiries included. [`SharedValues::get`] returns
//!   the value with its version, and [`SharedValues::compare_and_set`] compares by version.
//! - **No silent TTL loss.** Each write says what happens to the TTL: an [`Expiry`] of
//!   `After(ttl)`, `Keep` or `Never`.
//! - **Waiting.** [`SharedValues::wait_for`] returns as soon as the value satisfies a
//!   predicate. It watches before it reads and sees every published write, so a value that was
//!   written and overwritten at once is still seen; a change it cannot see (its watch was down)
//!   makes it re-read. It is bounded by its timeout.
//! - **TTL maps.** [`SharedValues::map`] gives a [`TtlMap`] of small values with a TTL per
//!   field, cleared in one call.
//! - **Queues.** [`SharedValues::queue`] gives a [`Queue`] of JSON items handed between
//!   replicas, at least once: an item a consumer took and did not acknowledge comes back.
//! - **Single flight.** [`SharedValues::single_flight`] runs an action on one caller at a time
//!   across replicas, under a guard that is renewed while its runner lives and expires after a
//!   crash; the others report it running with its progress, or wait for its outcome.
//!
//! docs/values.md has the guarantees, the keys on Redis and the ACL.

#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod flight;
mod map;
mod memory;
mod port;
mod queue;
mod shared;
pub mod telemetry;

pub use error::ValuesError;
pub use flight::{Flight, MIN_FLIGHT_TTL, Progress, WhenBusy};
pub use map::TtlMap;
pub use memory::InMemoryValues;
pub use port::{
    Condition, Delivery, Expiry, Observed, Pushed, ValueStore, ValueWatch, Versioned, Waited,
    Written,
};
pub use queue::{
    DEFAULT_QUEUE_TTL, MAX_PUSH, MAX_PUSH_BYTES, MAX_QUEUE_LEN, MAX_TAKE, Queue, Taken,
};
pub use shared::{MAX_TTL, MAX_VALUE_BYTES, MAX_WAIT, SharedValues};
