//! The cache as the starter configures and wires it.

mod config;
mod wiring;
