//! Master/sub locks on the Redis store: one server, OS processes, a Cluster.

mod cluster;
mod processes;
mod store;
