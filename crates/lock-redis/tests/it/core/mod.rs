//! What every capability stands on: connections, TLS and ACL, subscriptions, Sentinel and
//! Cluster, replication, Redis' error replies and key encoding.

mod acl;
mod cluster;
mod cluster_coverage;
mod cluster_failover;
mod cluster_replication;
mod first_connection;
mod key_encoding;
mod lost_connection;
mod out_of_memory;
mod pubsub_blackhole;
mod redis_errors;
mod replication;
mod resubscribe;
mod sentinel;
mod sentinel_deployments;
mod sentinel_key_loss;
mod subscriptions;
mod tls;
