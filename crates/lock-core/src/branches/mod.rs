//! # Master/sub locks: waiting for the asynchronous branches of an operation
//!
//! Some operations fan out: a request updates a ticket, the change flows through Kafka, and
//! consumers write it to a search index and an audit store. When the caller must not return —
//! or the next operation on the same ticket must not start — until every branch is done, run it
//! as a **master invocation**:
//!
//! 1. [`MasterLocks::with_master_lock`] acquires the distributed lock on the master key and
//!    opens a per-invocation [`SubKey`] (its invocation id is the lock grant's fencing token);
//! 2. inside the block, the producer registers each branch with
//!    [`Master::register_branch`] *before* starting it, and sends the [`BranchToken`] along (as
//!    text, e.g. in the [`BRANCH_TOKEN_HEADER`] of the message);
//! 3. each consumer, in any process, calls [`Branches::release_branch`] with the token once its
//!    work is done (e.g. the index write is confirmed);
//! 4. when the block returns, the master waits — woken by each release, no polling — until
//!    every registered branch is released, bounded by its branch wait (and, shortly before
//!    it, a fixed lease's end), then deletes its records and releases the lock.
//!    [`MasterOutcome`] carries the block's value and how the wait ended
//!    ([`BranchesOutcome`]: all released, timed out naming the missing branches, or lease
//!    lost).
//!
//! What you get: branches counted by id (a redelivered release counts once, an unknown one is
//! a no-op, nothing goes negative); registration sealed when the block returns; a bounded wait
//! that names what is missing; records with a TTL of at least the lease, so a crash of any
//! party leaves nothing behind for long.
//!
//! What you do not get: a guarantee. This is best effort, like the lock: a consumer that dies
//! leaves its branch missing until the wait bound; a lease that ends lets the next master start;
//! and the producer **fails open** — when the backend is disabled or a registration is not
//! confirmed, the branch runs unregistered and the master does not wait for it (see
//! [`Master::register_branch`]). Use it for read-your-writes convenience, not for correctness.
//!
//! Laid out as the lock is: the port [`Branches`] (`port`), its tokens and outcomes, the error
//! [`BranchError`], the generic orchestration [`MasterLocks`] (`run`, over any
//! [`DistributedLock`](crate::DistributedLock) and any [`Branches`]), the in-memory
//! ([`InMemoryBranches`]) and disabled ([`DisabledBranches`]) backends, [`telemetry`], and the
//! conformance suite (`conformance`, feature `conformance`). The Redis backend is
//! `lock_redis::RedisBranches`.

#[cfg(feature = "conformance")]
pub mod conformance;
mod disabled;
mod error;
mod master;
mod memory;
mod options;
mod outcome;
mod port;
mod run;
mod sub_key;
pub mod telemetry;
mod token;

pub use disabled::DisabledBranches;
pub use error::{BranchError, InvalidBranchToken};
pub use master::Master;
pub use memory::InMemoryBranches;
pub use options::{DEFAULT_BRANCH_WAIT, MAX_BRANCH_WAIT, MasterOptions};
pub use outcome::{BranchRelease, BranchesOutcome, MasterOutcome, Registration};
pub use port::Branches;
pub use run::MasterLocks;
pub use sub_key::SubKey;
pub use token::{BRANCH_TOKEN_HEADER, BranchToken, MAX_BRANCH_ID_BYTES, validate_branch_id};
