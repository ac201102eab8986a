//! Master/sub locks as the starter wires them.

mod disabled;
