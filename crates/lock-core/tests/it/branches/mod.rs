//! Master/sub locks on the in-memory backends.

mod memory;
