//! Master/sub locks: a master invocation waits for the asynchronous branches it started.
//!
//! Some operations fan out: a request updates a ticket, the change flows through Kafka, and
//! consumers write it to a search index and an audit store. When the next operation on the same
//! ticket must not start until every branch is done, run the request as a master invocation:
//!
//! 1. [`MasterLocks::with_master_lock`] acquires the lock on the master key and opens a
//!    [`SubKey`] for this invocation, whose id is the grant's fencing token.
//! 2. Inside the block, the producer registers each branch with [`Master::register_branch`]
//!    before starting it, and sends the [`BranchToken`] along, e.g. in a
//!    [`BRANCH_TOKEN_HEADER`].
//! 3. Each consumer, in any process, calls [`Branches::release_branch`] with the token once its
//!    work is done.
//! 4. When the block returns, the master waits, woken by each release, until every registered
//!    branch is released or its branch wait passes. Then it deletes its records, releases the
//!    lock, and returns a [`MasterOutcome`].
//!
//! Branches are counted by id, so a redelivered release counts once. Records live at least as
//! long as the lease, so a crash of any party leaves nothing behind for long.
//!
//! This is best effort, like the lock: a consumer that dies leaves its branch missing until the
//! wait bound, and the producer fails open, running a branch unregistered when the backend is
//! disabled or does not confirm ([`Master::register_branch`]). Use it for read-your-writes
//! convenience, not for correctness. docs/branches.md has the details.

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
