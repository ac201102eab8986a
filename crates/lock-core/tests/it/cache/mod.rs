//! The cache on the in-memory backend, switched off, and on a failing store.

mod across_pods;
mod memory;
mod outage;
