//! The lock as the starter wires it: the release a shutdown flushes.

mod shutdown;
