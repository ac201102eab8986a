//! Shared values as the starter wires them.

mod wiring;
