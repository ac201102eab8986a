//! The faults a stress run can inject.

use std::fmt;

use super::Workload;

/// One kind of fault, injected repeatedly through a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Fault {
    /// No fault: the baseline.
    None,
    /// SIGKILL the current holder (a replacement worker starts).
    KillHolder,
    /// SIGSTOP the current holder for longer than its lease, then SIGCONT.
    PauseHolder,
    /// SIGSTOP redis-server for longer than the watchdog timeout, then SIGCONT.
    PauseRedis,
    /// Kill redis-server and start it again on the same port, empty (no persistence).
    RestartRedis,
    /// `CLIENT KILL` every client connection (commands and pub/sub).
    ClientKill,
    /// `SCRIPT FLUSH`, over and over.
    ScriptFlush,
    /// Fill memory under `maxmemory` with `allkeys-lru`, so Redis evicts keys.
    Evict,
    /// Add random latency (5–80 ms each way) through a TCP proxy.
    Latency,
    /// Reset every connection through a TCP proxy.
    DropConnections,
    /// `SENTINEL FAILOVER` of a primary with one replica, the old primary demoted at once; the
    /// workers grant without waiting for the replica (`min-replicas = 0`).
    SentinelFailover,
    /// As [`Fault::SentinelFailover`], with every grant confirmed by the replica
    /// (`min-replicas = 1`).
    SentinelFailoverSynced,
    /// A lagging replica promoted: the replica stops receiving writes for a second while the
    /// workers go on, then `SENTINEL FAILOVER` promotes it (`min-replicas = 0`).
    SentinelLaggingFailover,
    /// As [`Fault::SentinelLaggingFailover`], with `min-replicas = 1`.
    SentinelLaggingFailoverSynced,
    /// SIGKILL of the Sentinel primary: the Sentinels fail over on their own, then the killed
    /// node comes back, empty, as the replica (`min-replicas = 0`).
    SentinelKillPrimary,
    /// As [`Fault::SentinelKillPrimary`], with `min-replicas = 1`.
    SentinelKillPrimarySynced,
    /// `CLUSTER FAILOVER` of the key's master to its replica, on three masters with a replica
    /// each (`min-replicas = 0`).
    ClusterFailover,
    /// The key's hash slot migrated to another master, with its keys (`min-replicas = 0`).
    ClusterMigrateSlot,
    /// SIGKILL of the key's master: the cluster fails over on its own, then the killed node
    /// rejoins as the replica (`min-replicas = 0`).
    ClusterKillMaster,
    /// As [`Fault::ClusterKillMaster`], with `min-replicas = 1`.
    ClusterKillMasterSynced,
}

impl Fault {
    /// Every fault, baseline first.
    pub const ALL: [Fault; 20] = [
        Fault::None,
        Fault::KillHolder,
        Fault::PauseHolder,
        Fault::PauseRedis,
        Fault::RestartRedis,
        Fault::ClientKill,
        Fault::ScriptFlush,
        Fault::Evict,
        Fault::Latency,
        Fault::DropConnections,
        Fault::SentinelFailover,
        Fault::SentinelFailoverSynced,
        Fault::SentinelLaggingFailover,
        Fault::SentinelLaggingFailoverSynced,
        Fault::SentinelKillPrimary,
        Fault::SentinelKillPrimarySynced,
        Fault::ClusterFailover,
        Fault::ClusterMigrateSlot,
        Fault::ClusterKillMaster,
        Fault::ClusterKillMasterSynced,
    ];

    /// The kebab-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::KillHolder => "kill-holder",
            Fault::PauseHolder => "pause-holder",
            Fault::PauseRedis => "pause-redis",
            Fault::RestartRedis => "restart-redis",
            Fault::ClientKill => "client-kill",
            Fault::ScriptFlush => "script-flush",
            Fault::Evict => "evict",
            Fault::Latency => "latency",
            Fault::DropConnections => "drop-connections",
            Fault::SentinelFailover => "sentinel-failover",
            Fault::SentinelFailoverSynced => "sentinel-failover-synced",
            Fault::SentinelLaggingFailover => "sentinel-lagging-failover",
            Fault::SentinelLaggingFailoverSynced => "sentinel-lagging-failover-synced",
            Fault::SentinelKillPrimary => "sentinel-kill-primary",
            Fault::SentinelKillPrimarySynced => "sentinel-kill-primary-synced",
            Fault::ClusterFailover => "cluster-failover",
            Fault::ClusterMigrateSlot => "cluster-migrate-slot",
            Fault::ClusterKillMaster => "cluster-kill-master",
            Fault::ClusterKillMasterSynced => "cluster-kill-master-synced",
        }
    }

    /// Whether a run of `workload` under this fault checks something another run does not:
    /// `min-replicas` is the lock's alone, so the toolkit skips the `-synced` failovers.
    pub fn applies_to(self, workload: Workload) -> bool {
        workload == Workload::Lock || self.min_replicas() == 0
    }

    /// Whether the workers reach Redis through Sentinels, a primary and one replica.
    pub(crate) fn needs_sentinel(self) -> bool {
        matches!(
            self,
            Fault::SentinelFailover
                | Fault::SentinelFailoverSynced
                | Fault::SentinelLaggingFailover
                | Fault::SentinelLaggingFailoverSynced
                | Fault::SentinelKillPrimary
                | Fault::SentinelKillPrimarySynced
        )
    }

    /// Whether the workers reach Redis as a Cluster of three masters with a replica each.
    pub(crate) fn needs_cluster(self) -> bool {
        matches!(
            self,
            Fault::ClusterFailover
                | Fault::ClusterMigrateSlot
                | Fault::ClusterKillMaster
                | Fault::ClusterKillMasterSynced
        )
    }

    /// Whether the replica lags behind when it is promoted.
    pub(crate) fn lags(self) -> bool {
        matches!(
            self,
            Fault::SentinelLaggingFailover | Fault::SentinelLaggingFailoverSynced
        )
    }

    /// The workers' `telco.platform.lock.min-replicas`.
    pub(crate) fn min_replicas(self) -> u32 {
        u32::from(matches!(
            self,
            Fault::SentinelFailoverSynced
                | Fault::SentinelLaggingFailoverSynced
                | Fault::SentinelKillPrimarySynced
                | Fault::ClusterKillMasterSynced
        ))
    }

    /// Whether the workers talk to Redis through the fault proxy.
    pub(crate) fn needs_proxy(self) -> bool {
        matches!(self, Fault::Latency | Fault::DropConnections)
    }

    /// Whether the fault makes Redis lose lock keys (so overlapping holders are expected and
    /// explained by the loss, not by a lock bug).
    /// A failover loses what the replica had not received when it was promoted: with
    /// `min-replicas = 1` no grant, but still renewals and releases.
    pub(crate) fn loses_keys(self) -> bool {
        matches!(
            self,
            Fault::RestartRedis
                | Fault::Evict
                | Fault::SentinelFailover
                | Fault::SentinelLaggingFailover
                | Fault::SentinelKillPrimary
                | Fault::ClusterKillMaster
        )
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
