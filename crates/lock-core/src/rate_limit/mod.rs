//! Rate limiting: the generic cell rate algorithm (GCRA) on a clock shared by every replica.
//!
//! A [`RateLimiter`] is a named limit with a [`Quota`] (a rate and a burst), checked per key
//! on a [`RateLimitStore`]:
//!
//! - **Shared and exact.** The store decides on its own clock with O(1) state per key, so
//!   replicas whose clocks differ make the same decisions, and no window boundary admits twice
//!   the limit.
//! - **Decisions, not guesses.** A [`Decision`] says allowed or denied, how many remain, when
//!   to retry and when the key is at rest; [`RateLimiter::acquire`] sleeps until that
//!   retry-after instead of polling.
//! - **Several limits at once.** [`check_all`] charges every limit or none.
//! - **Live quotas.** [`RateLimiter::set_quota`] changes a limit without resetting its keys.
//! - **Local batches, opt-in.** [`RateLimiter::local_batch`] takes a hot key's permits several
//!   at a time and spends them in this process, for a bounded over-admission across replicas.
//! - **An explicit failure policy.** Each limiter fails open or closed, by its
//!   [`FailurePolicy`], and each decision's [`Basis`] says which happened.
//!
//! docs/rate-limiting.md has the algorithm, the guarantees, the keys on Redis and the ACL.

mod batch;
#[cfg(feature = "conformance")]
pub mod conformance;
mod decision;
mod error;
mod gcra;
mod limiter;
mod memory;
mod port;
mod quota;
pub mod telemetry;

pub use batch::{MAX_BATCH_LIFETIME, MAX_LOCAL_BATCH, MIN_BATCH_LIFETIME};
pub use decision::{Basis, Decision, FailurePolicy};
pub use error::RateLimitError;
pub use limiter::{MAX_ACQUIRE_WAIT, Part, RateLimiter, check_all};
pub use memory::{DisabledRateLimits, InMemoryRateLimits};
pub use port::{Charge, RateLimitStore, Verdict};
pub use quota::{MAX_BURST, MAX_PERIOD, MIN_EMISSION_INTERVAL, Quota};
