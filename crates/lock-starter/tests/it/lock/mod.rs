//! The lock as the starter wires it: the release a shutdown flushes, and the HTTP layer
//! running a handler under a request's key.

mod http;
mod shutdown;
