//! Rate limiting on the in-memory backend, and the failure policy on a failing one.

mod batch;
mod memory;
mod policy;
