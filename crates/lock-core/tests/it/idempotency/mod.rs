//! Idempotent execution on the in-memory store.

mod memory;
