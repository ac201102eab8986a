//! Shared values on the in-memory backend.

mod memory;
