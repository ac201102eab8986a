//! Rate limiting as the starter configures and wires it, and its HTTP layer.

mod config;
mod http;
mod wiring;
