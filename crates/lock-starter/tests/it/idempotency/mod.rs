//! The `Idempotency-Key` layer, in memory and on a real redis-server.

mod callers;
mod edges;
mod http;
