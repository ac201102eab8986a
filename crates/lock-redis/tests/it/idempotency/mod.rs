//! Idempotent execution on the Redis store.

mod edges;
mod store;
