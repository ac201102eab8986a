//! The faults a stress run can inject.

use std::fmt;

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
}

impl Fault {
    /// Every fault, baseline first.
    pub const ALL: [Fault; 10] = [
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
        }
    }

    /// Whether the workers talk to Redis through the fault proxy.
    pub(crate) fn needs_proxy(self) -> bool {
        matches!(self, Fault::Latency | Fault::DropConnections)
    }

    /// Whether the fault makes Redis lose lock keys (so overlapping holders are expected and
    /// explained by the loss, not by a lock bug).
    pub(crate) fn loses_keys(self) -> bool {
        matches!(self, Fault::RestartRedis | Fault::Evict)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
