//! [`RedisCluster`]: a Redis Cluster of real `redis-server` processes on loopback ports — three
//! masters, one replica each — with manual failover, master crashes and slot migration.
//!
//! ```no_run
//! use lock_testkit::RedisCluster;
//!
//! # async fn demo() -> Result<(), lock_testkit::TestkitError> {
//! let mut cluster = RedisCluster::start().await?;
//! let url = cluster.url(); // "redis-cluster://127.0.0.1:<p1>?node=127.0.0.1:<p2>&…"
//!
//! let master = cluster.node_for_key("lock:{bill-run}").await?;
//! cluster.cmd_on(master, &["SET", "lock:{bill-run}", "owner-1"]).await?;
//! let promoted = cluster.kill_master(master).await?; // SIGKILL; its replica takes over
//! assert_eq!(cluster.node_for_key("lock:{bill-run}").await?, promoted);
//! # let _ = url;
//! # Ok(()) }
//! ```

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::time::sleep;

use crate::error::BINARY_ENV;
use crate::resp::Reply;
use crate::{Backend, RedisServer, TestkitError};

/// Default `cluster-node-timeout`: how long a node may be unreachable before the others flag it
/// as failing and its replica may take over (1000 ms).
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// Default deadline for [`RedisCluster::start`] (once the processes answer) and for each
/// topology change to settle (90 s). Generous: a small, loaded machine can delay gossip by
/// seconds.
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The number of hash slots of a Redis Cluster (16384); slots are `0..SLOTS`.
pub const SLOTS: u16 = 16384;

/// Masters of a cluster (each has one replica).
const MASTERS: usize = 3;
/// Processes of a cluster.
const NODES: usize = 2 * MASTERS;
/// Tries to find a free port pair (client port, cluster bus port) for one node.
const PORT_ATTEMPTS: u32 = 8;
/// Keys moved by one `MIGRATE` call.
const MIGRATE_BATCH: &str = "100";
/// `MIGRATE`'s own I/O timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "5000";
/// A manual failover the replica has not completed after this long is requested again (Redis
/// aborts one after 5 s).
const FAILOVER_RETRY: Duration = Duration::from_secs(10);
/// Lines of each node's log quoted when the cluster does not come up.
const LOG_LINES: usize = 5;

/// Configures a [`RedisCluster`] before starting it; get one from [`RedisCluster::builder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_testkit::TestkitError> {
/// use std::time::Duration;
///
/// let cluster = lock_testkit::RedisCluster::builder()
///     .node_timeout(Duration::from_millis(2000))
///     .arg("--maxmemory-policy")
///     .arg("noeviction")
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .start().await"]
pub struct RedisClusterBuilder {
    node_timeout: Duration,
    args: Vec<String>,
    settle_timeout: Duration,
    binary: Option<PathBuf>,
    redis_cli: Option<PathBuf>,
}

impl RedisClusterBuilder {
    fn new() -> Self {
        Self {
            node_timeout: DEFAULT_NODE_TIMEOUT,
            args: Vec::new(),
            settle_timeout: DEFAULT_SETTLE_TIMEOUT,
            binary: None,
            redis_cli: None,
        }
    }

    /// `cluster-node-timeout` of every node, in whole milliseconds (rounded up, at least 1 ms);
    /// default [`DEFAULT_NODE_TIMEOUT`] (1000 ms). A killed master is failed over roughly one to
    /// three node timeouts after its death.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Appends one redis-server argument for every node, after the testkit's own (those of
    /// [`RedisServerBuilder::arg`](crate::RedisServerBuilder::arg), then `--cluster-enabled yes`,
    /// `--cluster-config-file`, `--cluster-node-timeout`, `--cluster-port`, `--save ""`,
    /// `--appendonly no`, `--repl-diskless-sync-delay 0` — a replica's first sync would otherwise
    /// wait 5 s). Do not override the cluster settings, and do not set `--requirepass`:
    /// `redis-cli` creates the cluster without a password.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several redis-server arguments for every node; see [`arg`](Self::arg).
    pub fn args(self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        args.into_iter().fold(self, |builder, arg| builder.arg(arg))
    }

    /// How long [`start`](Self::start) waits for the created cluster to settle, and how long each
    /// of [`RedisCluster::failover`], [`kill_master`](RedisCluster::kill_master),
    /// [`migrate_slot`](RedisCluster::migrate_slot) and
    /// [`wait_until_ok`](RedisCluster::wait_until_ok) waits; default [`DEFAULT_SETTLE_TIMEOUT`]
    /// (90 s).
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.settle_timeout = timeout;
        self
    }

    /// The redis-server binary; default `$LOCK_TESTKIT_REDIS_SERVER`, else `redis-server` from
    /// `PATH` (see [`RedisServerBuilder::binary`](crate::RedisServerBuilder::binary)).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// The redis-cli binary that creates the cluster; default: `redis-cli` next to an explicitly
    /// configured redis-server binary if there is one, else `redis-cli` from `PATH`.
    pub fn redis_cli(mut self, path: impl Into<PathBuf>) -> Self {
        self.redis_cli = Some(path.into());
        self
    }

    /// Starts six nodes on free loopback ports (local processes, whatever
    /// `LOCK_TESTKIT_BACKEND` says), creates the cluster with
    /// `redis-cli --cluster create … --cluster-replicas 1 --cluster-yes` (the first three nodes
    /// become the masters), and waits until it has settled (see
    /// [`wait_until_ok`](RedisCluster::wait_until_ok)).
    ///
    /// # Errors
    /// The start-up errors of [`RedisServerBuilder::start`](crate::RedisServerBuilder::start);
    /// [`TestkitError::ServerExited`] (with redis-cli's output) when `redis-cli --cluster create`
    /// fails; [`TestkitError::StartupTimeout`] (with the last state seen and the nodes' log
    /// tails) when the cluster does not settle within the settle timeout.
    pub async fn start(self) -> Result<RedisCluster, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("lock-testkit-cluster-")
            .tempdir()
            .map_err(|e| TestkitError::io("create a temp dir for the cluster", e))?;
        let mut nodes = Vec::with_capacity(NODES);
        for _ in 0..NODES {
            nodes.push(self.start_node(dir.path()).await?);
        }
        let cli = self.redis_cli.clone().unwrap_or_else(|| {
            default_redis_cli(self.binary.clone().or_else(|| {
                std::env::var_os(BINARY_ENV)
                    .filter(|b| !b.is_empty())
                    .map(PathBuf::from)
            }))
        });
        let cluster = RedisCluster {
            nodes,
            node_timeout: self.node_timeout,
            settle_timeout: self.settle_timeout,
            dir,
        };
        cluster.create(&cli).await?;
        cluster
            .wait_settled("the new cluster to settle", |_| Ok(()))
            .await
            .map_err(|(waited, status)| TestkitError::StartupTimeout {
                port: cluster.nodes[0].port(),
                waited,
                log_tail: format!("{status}\n{}", cluster.log_tails()),
            })?;
        Ok(cluster)
    }

    /// One node: a client port and a cluster bus port picked here (the bus port would otherwise
    /// be client port + 10000, which may be taken or beyond 65535), its cluster config file
    /// named after the client port. Retries with new ports if either was taken meanwhile.
    async fn start_node(&self, dir: &Path) -> Result<RedisServer, TestkitError> {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let bus_port = free_port()?;
            if bus_port == port {
                continue;
            }
            let config = dir.join(format!("nodes-{port}.conf"));
            // A leftover of an attempt whose bus port was taken would carry the wrong bus port.
            let _ = fs::remove_file(&config);
            let mut builder = RedisServer::builder()
                .backend(Backend::Local)
                .port(port)
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(config.to_string_lossy())
                .arg("--cluster-node-timeout")
                .arg(millis(self.node_timeout).to_string())
                .arg("--cluster-port")
                .arg(bus_port.to_string())
                .args(["--save", "", "--appendonly", "no"])
                .args(["--repl-diskless-sync-delay", "0"])
                .args(self.args.iter().cloned());
            if let Some(binary) = &self.binary {
                builder = builder.binary(binary);
            }
            match builder.start().await {
                Ok(server) => return Ok(server),
                Err(e @ TestkitError::NoFreePort { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(TestkitError::NoFreePort {
            attempts: PORT_ATTEMPTS,
            log_tail: "(no attempt got two distinct free ports)".to_owned(),
        }))
    }
}

/// A Redis Cluster for one test: three masters and three replicas (one per master), each a
/// `redis-server` child process on its own free `127.0.0.1` port with `--cluster-enabled yes`,
/// `--cluster-config-file <dir>/nodes-<port>.conf`, `--cluster-node-timeout` (default 1000 ms)
/// and no persistence. Created with `redis-cli --cluster create`.
///
/// The nodes are [`RedisServer`]s in start order ([`nodes`](Self::nodes)); the first three start
/// as masters. Roles change with [`failover`](Self::failover) and
/// [`kill_master`](Self::kill_master): ask [`masters`](Self::masters),
/// [`replicas`](Self::replicas) and [`node_for_key`](Self::node_for_key) for the current ones.
///
/// Dropping it SIGKILLs every node and removes the temp dirs; if the test process dies first, the
/// kernel kills the nodes (Linux), as for [`RedisServer`].
#[derive(Debug)]
pub struct RedisCluster {
    // Field order matters: the processes must be gone before `dir` (their config files) goes.
    nodes: Vec<RedisServer>,
    node_timeout: Duration,
    settle_timeout: Duration,
    dir: TempDir,
}

impl RedisCluster {
    /// Starts a cluster with default settings; see [`RedisClusterBuilder::start`].
    ///
    /// # Errors
    /// See [`RedisClusterBuilder::start`].
    pub async fn start() -> Result<RedisCluster, TestkitError> {
        Self::builder().start().await
    }

    /// A builder for the node timeout, extra redis-server arguments, the settle timeout and the
    /// binaries.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::new()
    }

    /// The URL of all six nodes in the form fred's `Config::from_url` accepts:
    /// `redis-cluster://127.0.0.1:<port 1>?node=127.0.0.1:<port 2>&node=…&node=127.0.0.1:<port 6>`.
    /// Lists every node, killed ones included, in [`nodes`](Self::nodes) order.
    pub fn url(&self) -> String {
        let mut ports = self.nodes.iter().map(RedisServer::port);
        let first = ports.next().expect("a cluster has nodes");
        let mut url = format!("redis-cluster://127.0.0.1:{first}");
        for (i, port) in ports.enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{port}"));
        }
        url
    }

    /// The six nodes in start order (the first three started as masters). A node killed by
    /// [`kill_master`](Self::kill_master) stays in the list with `pid() == None`.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node listening on `port`, if it is one of this cluster's.
    pub fn node(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|node| node.port() == port)
    }

    /// The `cluster-node-timeout` the nodes run with.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// The cluster's temp dir: `nodes-<port>.conf` of every node and `redis-cli-create.log`.
    /// Each node's own log is in its [`RedisServer::dir`]. Removed when the cluster is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Ports of the running masters that serve slots, ordered by their lowest slot (so the first
    /// serves slot 0), as one running node's `CLUSTER NODES` sees them; nodes flagged as failing
    /// are left out. While the topology changes, nodes may disagree; call
    /// [`wait_until_ok`](Self::wait_until_ok) first for an agreed answer.
    ///
    /// # Errors
    /// [`TestkitError::NotRunning`] if no node runs; the errors of [`RedisServer::cmd`].
    pub async fn masters(&self) -> Result<Vec<u16>, TestkitError> {
        Ok(self.masters_in(&self.view().await?))
    }

    /// Ports of the replicas that run, ordered like their masters in [`masters`](Self::masters),
    /// from one view (see there).
    ///
    /// # Errors
    /// As for [`masters`](Self::masters).
    pub async fn replicas(&self) -> Result<Vec<u16>, TestkitError> {
        let view = self.view().await?;
        let masters = self.masters_in(&view);
        let mut replicas: Vec<(usize, u16)> = view
            .iter()
            .filter(|n| !n.is_master() && n.healthy() && self.is_running(n.port))
            .map(|n| {
                let master = n.master_id.as_deref().and_then(|id| port_of(&view, id));
                let rank = masters
                    .iter()
                    .position(|m| Some(*m) == master)
                    .unwrap_or(usize::MAX);
                (rank, n.port)
            })
            .collect();
        replicas.sort_unstable();
        Ok(replicas.into_iter().map(|(_, port)| port).collect())
    }

    /// The port of the running replica of the master on `master_port`, if it has one.
    ///
    /// # Errors
    /// As for [`masters`](Self::masters).
    pub async fn replica_of(&self, master_port: u16) -> Result<Option<u16>, TestkitError> {
        let view = self.view().await?;
        Ok(replica_in(&view, master_port).filter(|port| self.is_running(*port)))
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`), `0..16384`.
    ///
    /// # Errors
    /// As for [`masters`](Self::masters).
    pub async fn slot_for_key(&self, key: &str) -> Result<u16, TestkitError> {
        let node = self.any_running()?;
        let reply = node.cmd(&["CLUSTER", "KEYSLOT", key]).await?;
        reply.parse().map_err(|_| TestkitError::Redis {
            port: node.port(),
            command: format!("CLUSTER KEYSLOT {key}"),
            message: format!("expected a slot number, got `{reply}`"),
        })
    }

    /// The port of the master serving `key`'s slot (`CLUSTER KEYSLOT`, then the slot ranges in
    /// one running node's `CLUSTER NODES`). Send the key's commands there with
    /// [`cmd_on`](Self::cmd_on); any other node answers `MOVED`.
    ///
    /// # Errors
    /// As for [`masters`](Self::masters); [`TestkitError::Redis`] if no master serves the slot.
    pub async fn node_for_key(&self, key: &str) -> Result<u16, TestkitError> {
        let slot = self.slot_for_key(key).await?;
        let view = self.view().await?;
        owner_of(&view, slot).ok_or_else(|| TestkitError::Redis {
            port: self.nodes[0].port(),
            command: "CLUSTER NODES".to_owned(),
            message: format!("no master serves slot {slot} (of key `{key}`)"),
        })
    }

    /// Sends one command to the node on `port` (see [`RedisServer::cmd`]). No redirection is
    /// followed: a `MOVED` or `ASK` reply is returned as [`TestkitError::Redis`].
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if `port` is not a node of this cluster; otherwise those of
    /// [`RedisServer::cmd`].
    pub async fn cmd_on(&self, port: u16, args: &[&str]) -> Result<String, TestkitError> {
        self.node_or_err(port, &args.join(" "))?.cmd(args).await
    }

    /// `INFO commandstats` of the node on `port` (see [`RedisServer::command_calls`]).
    ///
    /// # Errors
    /// Those of [`cmd_on`](Self::cmd_on).
    pub async fn command_calls_on(&self, port: u16) -> Result<HashMap<String, u64>, TestkitError> {
        Ok(crate::command_calls(
            &self.cmd_on(port, &["INFO", "commandstats"]).await?,
        ))
    }

    /// Manual failover of the master on `master_port`: sends `CLUSTER FAILOVER` to its replica
    /// (again every 10 s if it has not taken over yet) and waits until that replica reports
    /// `role:master`, serves the slots, the old master has become its synced replica, and every
    /// running node agrees and says `cluster_state:ok`. No write is lost: the old master stops
    /// accepting writes until the replica has caught up. Returns the new master's port.
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if `master_port` is not a running master with a running
    /// replica; [`TestkitError::CommandTimeout`] (with the last state seen) if the cluster has not
    /// settled within the settle timeout; the errors of [`RedisServer::cmd`].
    pub async fn failover(&self, master_port: u16) -> Result<u16, TestkitError> {
        let replica = self
            .replica_for_failover(master_port, "CLUSTER FAILOVER")
            .await?;
        let node = self.node_or_err(replica, "CLUSTER FAILOVER")?;
        let started = Instant::now();
        let mut asked = None::<Instant>;
        let mut pause = Duration::from_millis(20);
        loop {
            if asked.is_none_or(|at| at.elapsed() >= FAILOVER_RETRY) {
                node.cmd(&["CLUSTER", "FAILOVER"]).await?;
                asked = Some(Instant::now());
            }
            let status = match self.settled().await {
                Ok(topology) => match topology.require_master_with_replica(replica, master_port) {
                    Ok(()) => return Ok(replica),
                    Err(why) => why,
                },
                Err(why) => why,
            };
            if started.elapsed() >= self.settle_timeout {
                return Err(self.timeout_error(
                    replica,
                    &format!("CLUSTER FAILOVER (master {master_port} → replica {replica})"),
                    started.elapsed(),
                    &status,
                ));
            }
            sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Crash of the master on `master_port`: SIGKILLs it and waits until the cluster has failed
    /// over on its own — its replica was elected and reports `role:master`, serves the dead
    /// master's slots, and every running node agrees and says `cluster_state:ok` (typically one
    /// to three node timeouts). Writes the replica had not received are lost, as in production.
    /// Returns the new master's port. The killed node stays in [`nodes`](Self::nodes), not
    /// running; the promoted master then has no replica.
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if `master_port` is not a running master with a running
    /// replica (the cluster would stay down); [`TestkitError::CommandTimeout`] (with the last
    /// state seen) if it has not settled within the settle timeout; the errors of
    /// [`RedisServer::kill`].
    pub async fn kill_master(&mut self, master_port: u16) -> Result<u16, TestkitError> {
        let replica = self.replica_for_failover(master_port, "SIGKILL").await?;
        let index = self
            .nodes
            .iter()
            .position(|n| n.port() == master_port)
            .expect("replica_for_failover checked the port");
        self.nodes[index].kill().await?;
        self.wait_settled(
            &format!("the automatic failover of killed master {master_port} to {replica}"),
            |topology| topology.require_master(replica),
        )
        .await
        .map_err(|(waited, status)| {
            self.timeout_error(replica, "automatic failover", waited, &status)
        })?;
        Ok(replica)
    }

    /// Brings back the node on `port` that [`kill_master`](Self::kill_master) killed: started
    /// again with its cluster config (its identity), it rejoins as the replica of the master
    /// that took its slots over, and is waited for until it has synced and every running node
    /// agrees. A later `kill_master` can then fail over to it.
    ///
    /// # Errors
    /// A usage error if `port` is not a node of this cluster; the errors of
    /// [`RedisServer::restart`]; [`TestkitError::CommandTimeout`] if it has not rejoined within
    /// the settle timeout.
    pub async fn restart_node(&mut self, port: u16, master: u16) -> Result<(), TestkitError> {
        self.node_or_err(port, "restart")?;
        let index = self.nodes.iter().position(|n| n.port() == port);
        self.nodes[index.expect("node_or_err found it")]
            .restart()
            .await?;
        self.wait_settled(
            &format!("killed node {port} to rejoin as the replica of {master}"),
            |topology| topology.require_master_with_replica(master, port),
        )
        .await
        .map_err(|(waited, status)| self.timeout_error(port, "restart", waited, &status))?;
        Ok(())
    }

    /// Moves hash slot `slot` — with its keys — to the master on `to_master`, as
    /// `redis-cli --cluster reshard` does: `CLUSTER SETSLOT <slot> IMPORTING` on the target,
    /// `MIGRATING` on the source, `MIGRATE` of the keys in batches (`CLUSTER GETKEYSINSLOT`)
    /// until none is left, then `CLUSTER SETSLOT <slot> NODE <target>` on the target, the source
    /// and the other masters. Waits until every running node agrees that the target owns the slot
    /// and says `cluster_state:ok`. While keys move, a client sees `ASK` redirections for them.
    /// A no-op if the target already owns the slot.
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if `slot` is not below [`SLOTS`] or `to_master` is not a
    /// running master; [`TestkitError::Redis`] if a step is refused (e.g. `BUSYKEY`: the target
    /// already holds one of the keys); [`TestkitError::CommandTimeout`] if the nodes do not agree
    /// within the settle timeout.
    pub async fn migrate_slot(&self, slot: u16, to_master: u16) -> Result<(), TestkitError> {
        let what = format!("CLUSTER SETSLOT {slot} NODE (to {to_master})");
        if slot >= SLOTS {
            return Err(usage_error(
                to_master,
                &what,
                format!("slot {slot} does not exist: slots are 0..{SLOTS}"),
            ));
        }
        let view = self.view().await?;
        let target = view
            .iter()
            .find(|n| n.port == to_master && n.is_master() && n.healthy())
            .filter(|n| self.is_running(n.port))
            .ok_or_else(|| {
                usage_error(
                    to_master,
                    &what,
                    format!("{to_master} is not a running master of this cluster"),
                )
            })?
            .clone();
        let source_port = owner_of(&view, slot).ok_or_else(|| TestkitError::Redis {
            port: to_master,
            command: "CLUSTER NODES".to_owned(),
            message: format!("no master serves slot {slot}"),
        })?;
        if source_port == to_master {
            return Ok(());
        }
        let source_id = view
            .iter()
            .find(|n| n.port == source_port)
            .map(|n| n.id.clone())
            .expect("owner_of returns a node of the view");
        let source = self.node_or_err(source_port, &what)?;
        let target_node = self.node_or_err(to_master, &what)?;
        let slot_arg = slot.to_string();
        let target_port_arg = to_master.to_string();

        target_node
            .cmd(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source_id])
            .await?;
        source
            .cmd(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target.id])
            .await?;
        loop {
            let keys = match source
                .reply(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, MIGRATE_BATCH])
                .await?
            {
                Reply::Array(Some(items)) => items
                    .into_iter()
                    .filter_map(|item| match item {
                        Reply::Bulk(Some(key)) => Some(String::from_utf8_lossy(&key).into_owned()),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
                _ => Vec::new(),
            };
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec![
                "MIGRATE",
                "127.0.0.1",
                &target_port_arg,
                "",
                "0",
                MIGRATE_TIMEOUT_MS,
                "KEYS",
            ];
            migrate.extend(keys.iter().map(String::as_str));
            source.cmd(&migrate).await?;
        }
        // Target first (it bumps its config epoch, which makes the change win everywhere), then
        // the source, then the other masters.
        let mut order = vec![to_master, source_port];
        order.extend(
            view.iter()
                .filter(|n| n.is_master() && n.healthy() && self.is_running(n.port))
                .map(|n| n.port)
                .filter(|port| *port != to_master && *port != source_port),
        );
        for port in order {
            self.node_or_err(port, &what)?
                .cmd(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &target.id])
                .await?;
        }
        self.wait_settled(&what, |topology| match topology.owner_of(slot) {
            Some(owner) if owner == to_master => Ok(()),
            owner => Err(format!(
                "slot {slot} is served by {owner:?}, not yet by {to_master}"
            )),
        })
        .await
        .map_err(|(waited, status)| self.timeout_error(to_master, &what, waited, &status))?;
        Ok(())
    }

    /// Waits until the cluster has settled: every running node says `cluster_state:ok`; all of
    /// them report the same roles, master–replica pairs and slot ranges in `CLUSTER NODES`, with
    /// no node flagged failing or in handshake and no slot open for migration; three masters
    /// cover all 16384 slots and no killed node owns any; every master reports `role:master`;
    /// and every replica reports `role:slave` of its master with `master_link_status:up` and no
    /// sync in progress. Killed nodes are left out. A paused node is left out too, but the others
    /// will flag it as failing, so this times out while one is paused.
    ///
    /// # Errors
    /// [`TestkitError::CommandTimeout`] (with the last state seen) after the settle timeout.
    pub async fn wait_until_ok(&self) -> Result<(), TestkitError> {
        self.wait_settled("the cluster to settle", |_| Ok(()))
            .await
            .map(|_| ())
            .map_err(|(waited, status)| {
                self.timeout_error(self.nodes[0].port(), "CLUSTER INFO", waited, &status)
            })
    }

    // ---- internals ----------------------------------------------------------------------------

    /// Runs `redis-cli --cluster create` over all nodes.
    async fn create(&self, cli: &Path) -> Result<(), TestkitError> {
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(str::to_owned));
        let output = self.dir.path().join("redis-cli-create.log");
        run_to_completion(
            cli,
            &args,
            &output,
            self.settle_timeout,
            self.nodes[0].port(),
        )
        .await
    }

    /// The running masters serving slots in `view`, ordered by their lowest slot.
    fn masters_in(&self, view: &[NodeLine]) -> Vec<u16> {
        let mut masters: Vec<&NodeLine> = view
            .iter()
            .filter(|n| {
                n.is_master() && n.healthy() && !n.slots.is_empty() && self.is_running(n.port)
            })
            .collect();
        masters.sort_by_key(|n| n.slots.iter().map(|r| r.0).min());
        masters.iter().map(|n| n.port).collect()
    }

    fn is_running(&self, port: u16) -> bool {
        self.node(port).is_some_and(|n| n.pid().is_some())
    }

    fn any_running(&self) -> Result<&RedisServer, TestkitError> {
        self.nodes
            .iter()
            .find(|n| n.pid().is_some())
            .ok_or(TestkitError::NotRunning {
                port: self.nodes[0].port(),
            })
    }

    fn node_or_err(&self, port: u16, command: &str) -> Result<&RedisServer, TestkitError> {
        self.node(port).ok_or_else(|| {
            usage_error(
                port,
                command,
                format!(
                    "127.0.0.1:{port} is not a node of this cluster (its nodes: {:?})",
                    self.nodes.iter().map(RedisServer::port).collect::<Vec<_>>()
                ),
            )
        })
    }

    /// One running node's `CLUSTER NODES`, parsed.
    async fn view(&self) -> Result<Vec<NodeLine>, TestkitError> {
        let mut last = None;
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            match node.cmd(&["CLUSTER", "NODES"]).await {
                Ok(text) => {
                    return parse_nodes(&text).map_err(|message| TestkitError::Redis {
                        port: node.port(),
                        command: "CLUSTER NODES".to_owned(),
                        message,
                    });
                }
                // A paused node cannot answer; ask the next one.
                Err(e @ TestkitError::Paused { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(TestkitError::NotRunning {
            port: self.nodes[0].port(),
        }))
    }

    /// Checks that `master_port` is a running master with a running replica, and returns the
    /// replica's port.
    async fn replica_for_failover(
        &self,
        master_port: u16,
        command: &str,
    ) -> Result<u16, TestkitError> {
        self.node_or_err(master_port, command)?;
        let view = self.view().await?;
        let is_master = view
            .iter()
            .any(|n| n.port == master_port && n.is_master() && n.healthy());
        if !is_master || !self.is_running(master_port) {
            return Err(usage_error(
                master_port,
                command,
                format!("{master_port} is not a running master of this cluster"),
            ));
        }
        replica_in(&view, master_port)
            .filter(|port| self.is_running(*port))
            .ok_or_else(|| {
                usage_error(
                    master_port,
                    command,
                    format!("master {master_port} has no running replica to take over"),
                )
            })
    }

    /// Polls [`settled`](Self::settled) plus `also` until both pass or the settle timeout ends;
    /// on timeout returns how long it waited and the last reason it was not settled.
    async fn wait_settled(
        &self,
        what: &str,
        mut also: impl FnMut(&Topology) -> Result<(), String>,
    ) -> Result<Topology, (Duration, String)> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            let status = match self.settled().await {
                Ok(topology) => match also(&topology) {
                    Ok(()) => return Ok(topology),
                    Err(why) => why,
                },
                Err(why) => why,
            };
            if started.elapsed() >= self.settle_timeout {
                return Err((started.elapsed(), format!("waiting for {what}: {status}")));
            }
            sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// The agreed topology of the running nodes, or why there is none yet (see
    /// [`wait_until_ok`](Self::wait_until_ok) for what "settled" means).
    async fn settled(&self) -> Result<Topology, String> {
        let mut live = Vec::new();
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            match node.cmd(&["CLUSTER", "INFO"]).await {
                Err(TestkitError::Paused { .. }) => continue,
                Err(e) => return Err(format!("node {}: {e}", node.port())),
                Ok(info) => match info_field(&info, "cluster_state") {
                    Some("ok") => live.push(node),
                    state => {
                        return Err(format!(
                            "node {} says cluster_state:{}",
                            node.port(),
                            state.unwrap_or("?")
                        ));
                    }
                },
            }
        }
        let live_ports: BTreeSet<u16> = live.iter().map(|n| n.port()).collect();
        let mut agreed: Option<(u16, Topology)> = None;
        for node in &live {
            let port = node.port();
            let text = node
                .cmd(&["CLUSTER", "NODES"])
                .await
                .map_err(|e| format!("node {port}: {e}"))?;
            let view = parse_nodes(&text).map_err(|e| format!("node {port}: {e}"))?;
            if view.iter().any(|n| n.myself && n.open_slots) {
                return Err(format!("node {port} has a slot open for migration"));
            }
            let topology =
                Topology::from_view(&view, &live_ports).map_err(|e| format!("node {port}: {e}"))?;
            match &agreed {
                None => agreed = Some((port, topology)),
                Some((first, seen)) if *seen != topology => {
                    return Err(format!(
                        "nodes {first} and {port} disagree: {seen:?} versus {topology:?}"
                    ));
                }
                Some(_) => {}
            }
        }
        let (_, topology) = agreed.ok_or("no node is running")?;
        topology.check_shape()?;
        for entry in &topology.nodes {
            let node = self.node(entry.port).expect("the entry is a live node");
            let info = node
                .cmd(&["INFO", "replication"])
                .await
                .map_err(|e| format!("node {}: {e}", entry.port))?;
            check_replication(&info, entry.port, entry.master_port)?;
        }
        Ok(topology)
    }

    fn timeout_error(&self, port: u16, what: &str, waited: Duration, status: &str) -> TestkitError {
        TestkitError::CommandTimeout {
            port,
            command: format!("{what}; the cluster did not settle, last seen: {status}"),
            timeout: waited,
        }
    }

    /// The last lines of every node's log, for start-up errors.
    fn log_tails(&self) -> String {
        self.nodes
            .iter()
            .map(|node| {
                let log = node
                    .dir()
                    .map(|dir| log_tail(&dir.join("redis-server.log"), LOG_LINES))
                    .unwrap_or_default();
                format!("-- node {} --\n{log}", node.port())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Checks one node's `INFO replication` against its role in the agreed topology.
pub(crate) fn check_replication(
    info: &str,
    port: u16,
    master_port: Option<u16>,
) -> Result<(), String> {
    let field = |name| info_field(info, name).unwrap_or("?");
    match master_port {
        None if field("role") == "master" => Ok(()),
        None => Err(format!("node {port} reports role:{}", field("role"))),
        Some(master) => {
            let expected_master = master.to_string();
            if field("role") != "slave" || field("master_port") != expected_master {
                Err(format!(
                    "node {port} reports role:{} of master_port:{}, not of {master}",
                    field("role"),
                    field("master_port")
                ))
            } else if field("master_link_status") != "up" || field("master_sync_in_progress") != "0"
            {
                Err(format!(
                    "replica {port}: master_link_status:{}, master_sync_in_progress:{}",
                    field("master_link_status"),
                    field("master_sync_in_progress")
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// What the running nodes must agree on: each running node's role, master and slot ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Topology {
    /// Sorted by port.
    nodes: Vec<TopologyEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct TopologyEntry {
    port: u16,
    /// `None` for a master.
    master_port: Option<u16>,
    slots: Vec<(u16, u16)>,
}

impl Topology {
    /// The part of one node's view that concerns running nodes; errors for a view that is not
    /// settled (a running node missing or flagged, a dead node owning slots).
    fn from_view(view: &[NodeLine], live: &BTreeSet<u16>) -> Result<Topology, String> {
        let mut nodes = Vec::new();
        for line in view {
            if !live.contains(&line.port) {
                if !line.slots.is_empty() {
                    return Err(format!(
                        "node {} is not running but still owns slots",
                        line.port
                    ));
                }
                continue;
            }
            if let Some(flag) = line.trouble() {
                return Err(format!("node {} is flagged {flag}", line.port));
            }
            let master_port = match (&line.master_id, line.is_master()) {
                (_, true) => None,
                (Some(id), false) => {
                    let port = port_of(view, id)
                        .ok_or_else(|| format!("replica {} has an unknown master", line.port))?;
                    if !live.contains(&port) {
                        return Err(format!(
                            "replica {} still follows {port}, which is not running",
                            line.port
                        ));
                    }
                    Some(port)
                }
                (None, false) => return Err(format!("replica {} has no master", line.port)),
            };
            let mut slots = line.slots.clone();
            slots.sort_unstable();
            nodes.push(TopologyEntry {
                port: line.port,
                master_port,
                slots,
            });
        }
        nodes.sort_by_key(|n| n.port);
        let seen: BTreeSet<u16> = nodes.iter().map(|n| n.port).collect();
        if let Some(missing) = live.difference(&seen).next() {
            return Err(format!("node {missing} is not known yet"));
        }
        Ok(Topology { nodes })
    }

    /// Three masters covering every slot; every replica follows a master.
    fn check_shape(&self) -> Result<(), String> {
        let masters: Vec<&TopologyEntry> = self
            .nodes
            .iter()
            .filter(|n| n.master_port.is_none())
            .collect();
        let serving = masters.iter().filter(|m| !m.slots.is_empty()).count();
        if serving != MASTERS {
            return Err(format!("{serving} masters serve slots, expected {MASTERS}"));
        }
        let covered: u32 = masters
            .iter()
            .flat_map(|m| m.slots.iter())
            .map(|(start, end)| u32::from(end - start) + 1)
            .sum();
        if covered != u32::from(SLOTS) {
            return Err(format!("{covered} of {SLOTS} slots are assigned"));
        }
        Ok(())
    }

    fn owner_of(&self, slot: u16) -> Option<u16> {
        self.nodes
            .iter()
            .find(|n| n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|n| n.port)
    }

    fn require_master(&self, port: u16) -> Result<(), String> {
        match self.nodes.iter().find(|n| n.port == port) {
            Some(n) if n.master_port.is_none() && !n.slots.is_empty() => Ok(()),
            _ => Err(format!("{port} is not a master serving slots yet")),
        }
    }

    fn require_master_with_replica(&self, master: u16, replica: u16) -> Result<(), String> {
        self.require_master(master)?;
        match self.nodes.iter().find(|n| n.port == replica) {
            Some(n) if n.master_port == Some(master) => Ok(()),
            _ => Err(format!("{replica} is not a replica of {master} yet")),
        }
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The master's node id, for a replica.
    master_id: Option<String>,
    /// Inclusive slot ranges.
    slots: Vec<(u16, u16)>,
    /// Whether the line lists a slot being migrated (`[slot->-id]`) or imported (`[slot-<-id]`);
    /// only the node's own line does.
    open_slots: bool,
    myself: bool,
}

impl NodeLine {
    fn is_master(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// A flag that says the node is failing or not yet part of the cluster.
    fn trouble(&self) -> Option<&str> {
        self.flags
            .iter()
            .map(String::as_str)
            .find(|f| matches!(*f, "fail" | "fail?" | "handshake" | "noaddr"))
    }

    fn healthy(&self) -> bool {
        self.trouble().is_none()
    }
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>…`.
fn parse_nodes(text: &str) -> Result<Vec<NodeLine>, String> {
    let mut nodes = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return Err(format!("unexpected CLUSTER NODES line `{line}`"));
        }
        let address = fields[1].split(['@', ',']).next().unwrap_or_default();
        let port = address
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .ok_or_else(|| format!("no port in CLUSTER NODES line `{line}`"))?;
        let flags: Vec<String> = fields[2].split(',').map(str::to_owned).collect();
        let mut slots = Vec::new();
        let mut open_slots = false;
        for slot in &fields[8..] {
            if slot.starts_with('[') {
                open_slots = true;
                continue;
            }
            let (start, end) = slot.split_once('-').unwrap_or((slot, slot));
            match (start.parse(), end.parse()) {
                (Ok(start), Ok(end)) => slots.push((start, end)),
                _ => return Err(format!("bad slot range `{slot}` in `{line}`")),
            }
        }
        nodes.push(NodeLine {
            id: fields[0].to_owned(),
            port,
            myself: flags.iter().any(|f| f == "myself"),
            flags,
            master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
            slots,
            open_slots,
        });
    }
    Ok(nodes)
}

fn port_of(view: &[NodeLine], id: &str) -> Option<u16> {
    view.iter().find(|n| n.id == id).map(|n| n.port)
}

/// The master serving `slot` in `view` (nodes flagged failing do not serve).
fn owner_of(view: &[NodeLine], slot: u16) -> Option<u16> {
    view.iter()
        .filter(|n| n.is_master() && n.healthy())
        .find(|n| n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
        .map(|n| n.port)
}

/// The healthy replica of the master on `master_port` in `view`.
fn replica_in(view: &[NodeLine], master_port: u16) -> Option<u16> {
    let master = view.iter().find(|n| n.port == master_port)?;
    view.iter()
        .filter(|n| !n.is_master() && n.healthy())
        .find(|n| n.master_id.as_deref() == Some(master.id.as_str()))
        .map(|n| n.port)
}

/// An argument the caller got wrong (a port that is not a node, a master with no replica):
/// reported as a [`TestkitError::Connection`] carrying the explanation.
pub(crate) fn usage_error(port: u16, command: &str, why: String) -> TestkitError {
    TestkitError::Connection {
        port,
        command: command.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidInput, why),
    }
}

/// The value of `name:` in an `INFO`-style text (`CLUSTER INFO`, `INFO replication`).
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Whole milliseconds of `duration`, rounded up, at least 1.
pub(crate) fn millis(duration: Duration) -> u128 {
    duration.as_nanos().div_ceil(1_000_000).max(1)
}

/// A loopback port that was free a moment ago (someone may take it before we bind it; callers
/// retry with another).
pub(crate) fn free_port() -> Result<u16, TestkitError> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| TestkitError::io("bind 127.0.0.1:0 to find a free port", e))
}

/// The last `lines` lines of a file, without ANSI colour codes (redis-cli writes them even to a
/// file).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    crate::local::last_lines(&strip_ansi(&text), lines, "(empty)")
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters… final byte in @..~
            for next in chars.by_ref() {
                if ('@'..='~').contains(&next) && next != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `redis-cli` next to the configured redis-server binary, if that has a directory and one is
/// there; else `redis-cli` from `PATH`.
fn default_redis_cli(server_binary: Option<PathBuf>) -> PathBuf {
    server_binary
        .as_deref()
        .and_then(Path::parent)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join("redis-cli"))
        .filter(|cli| cli.is_file())
        .unwrap_or_else(|| PathBuf::from("redis-cli"))
}

/// A child process killed and reaped when dropped (a cancelled future must not leave it).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `program args…` with its output in `output`, polling for its exit (without blocking the
/// runtime) until `deadline`.
async fn run_to_completion(
    program: &Path,
    args: &[String],
    output: &Path,
    deadline: Duration,
    port: u16,
) -> Result<(), TestkitError> {
    let shown = format!("{} {}", program.display(), args.join(" "));
    let out = File::create(output)
        .map_err(|e| TestkitError::io(format!("create {}", output.display()), e))?;
    let err = out
        .try_clone()
        .map_err(|e| TestkitError::io("duplicate the output file handle", e))?;
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| {
            let action = if e.kind() == io::ErrorKind::NotFound {
                format!(
                    "start `{}`: it is not installed (apt-get install -y redis-tools, or \
                     RedisClusterBuilder::redis_cli)",
                    program.display()
                )
            } else {
                format!("start `{shown}`")
            };
            TestkitError::io(action, e)
        })?;
    let mut child = KillOnDrop(child);
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let status = child
            .0
            .try_wait()
            .map_err(|e| TestkitError::io(format!("wait for `{shown}`"), e))?;
        if let Some(status) = status {
            if status.success() {
                return Ok(());
            }
            return Err(TestkitError::ServerExited {
                port,
                status: format!("`{shown}` failed with {status}"),
                log_tail: log_tail(output, 30),
            });
        }
        if started.elapsed() >= deadline {
            drop(child);
            return Err(TestkitError::StartupTimeout {
                port,
                waited: started.elapsed(),
                log_tail: format!(
                    "`{shown}` did not finish; its output ends with:\n{}",
                    log_tail(output, 30)
                ),
            });
        }
        sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES_TEXT: &str = "\
b0184515 127.0.0.1:17004@18004 slave 9773f233 0 1796047329697 1 connected
6ef6170c 127.0.0.1:17003@18003,host master,fail - 0 1796047329697 4 disconnected
5de3cc99 127.0.0.1:17002@18002 master - 0 1796047329897 3 connected 10923-16383
739954c6 127.0.0.1:17001@18001 master - 0 1796047329697 2 connected 5461-10921 10922
9773f233 127.0.0.1:17000@18000 myself,master - 0 1796047329000 1 connected 0-5460 [5460->-739954c6]
";

    #[test]
    fn parses_cluster_nodes() {
        let view = parse_nodes(NODES_TEXT).unwrap();
        assert_eq!(view.len(), 5);
        assert_eq!(view[0].port, 17004);
        assert_eq!(view[0].master_id.as_deref(), Some("9773f233"));
        assert!(!view[0].is_master());
        assert_eq!(view[1].port, 17003);
        assert_eq!(view[1].trouble(), Some("fail"));
        assert_eq!(view[3].slots, vec![(5461, 10921), (10922, 10922)]);
        assert!(view[4].myself && view[4].open_slots);
        assert_eq!(owner_of(&view, 0), Some(17000));
        assert_eq!(owner_of(&view, 10922), Some(17001));
        assert_eq!(replica_in(&view, 17000), Some(17004));
        assert_eq!(replica_in(&view, 17001), None);
    }

    #[test]
    fn a_dead_node_owning_slots_is_not_settled() {
        let view = parse_nodes(NODES_TEXT).unwrap();
        let live: BTreeSet<u16> = [17000, 17001, 17004].into();
        let err = Topology::from_view(&view, &live).unwrap_err();
        assert!(err.contains("17002"), "{err}");
    }

    #[test]
    fn reads_info_fields_and_strips_colours() {
        let info = "# Replication\r\nrole:slave\r\nmaster_port:7000\r\n";
        assert_eq!(info_field(info, "role"), Some("slave"));
        assert_eq!(info_field(info, "master_port"), Some("7000"));
        assert_eq!(info_field(info, "master"), None);
        assert_eq!(strip_ansi("\u{1b}[32;1m[OK] done\u{1b}[0m"), "[OK] done");
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::ZERO), 1);
    }
}
