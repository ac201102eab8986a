//! [`RedisSentinel`]: a Sentinel deployment of real `redis-server` processes on loopback ports — a
//! master, its replica and three Sentinels (quorum 2) — with manual failover, master crashes and
//! a replica cut off from its master.
//!
//! ```no_run
//! use lock_testkit::RedisSentinel;
//!
//! # async fn demo() -> Result<(), lock_testkit::TestkitError> {
//! let mut sentinel = RedisSentinel::start().await?;
//! // "redis-sentinel://127.0.0.1:<s1>?sentinelServiceName=mymaster&node=127.0.0.1:<s2>&…"
//! let url = sentinel.url();
//!
//! sentinel.master().cmd(&["SET", "lock:{bill-run}", "owner-1"]).await?;
//! let promoted = sentinel.kill_master().await?; // SIGKILL; the Sentinels promote the replica
//! assert_eq!(sentinel.current_master_port().await?, promoted);
//! # let _ = url;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::time::sleep;

use crate::cluster::{check_replication, free_port, info_field, log_tail, millis, usage_error};
use crate::resp::Reply;
use crate::{Backend, RedisServer, TestkitError};

/// Default name of the monitored master (`mymaster`).
pub const DEFAULT_SERVICE_NAME: &str = "mymaster";

/// Default `down-after-milliseconds`: how long the master may not answer before a Sentinel
/// considers it down (1000 ms).
pub const DEFAULT_DOWN_AFTER: Duration = Duration::from_millis(1000);

/// Default `failover-timeout` (5 s): a Sentinel whose failover has not completed within it gives
/// up, and tries the same master again only after twice this.
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Default deadline for [`RedisSentinel::start`] (once the processes answer) and for each
/// topology change to settle (90 s). Generous: a Sentinel that notices its timer ran late on a
/// loaded machine enters TILT mode and does nothing for 30 s.
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Sentinels of a deployment.
const SENTINELS: usize = 3;
/// Sentinels that must agree the master is down before a failover.
const QUORUM: usize = 2;
/// Tries to find a free port for one Sentinel.
const PORT_ATTEMPTS: u32 = 8;
/// The `masterauth` a cut-off replica presents: the master has no password, so it refuses it.
const CUT_OFF_PASSWORD: &str = "lock-testkit-cut-off";
/// Lines of each process's log quoted when the deployment does not come up.
const LOG_LINES: usize = 5;

/// Configures a [`RedisSentinel`] before starting it; get one from [`RedisSentinel::builder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_testkit::TestkitError> {
/// use std::time::Duration;
///
/// // A master that refuses writes unless its replica acknowledged within 2 s.
/// let sentinel = lock_testkit::RedisSentinel::builder()
///     .down_after(Duration::from_millis(2000))
///     .node_args(["--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"])
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .start().await"]
pub struct RedisSentinelBuilder {
    service_name: String,
    down_after: Duration,
    failover_timeout: Duration,
    node_args: Vec<String>,
    replica_args: Vec<String>,
    sentinel_config: Vec<String>,
    settle_timeout: Duration,
    binary: Option<PathBuf>,
}

impl RedisSentinelBuilder {
    fn new() -> Self {
        Self {
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            down_after: DEFAULT_DOWN_AFTER,
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            node_args: Vec::new(),
            replica_args: Vec::new(),
            sentinel_config: Vec::new(),
            settle_timeout: DEFAULT_SETTLE_TIMEOUT,
            binary: None,
        }
    }

    /// The name the Sentinels monitor the master under (`sentinel monitor <name> …`, the
    /// `sentinelServiceName` of [`RedisSentinel::url`]); ASCII letters, digits, `-`, `_` and `.`
    /// only; default [`DEFAULT_SERVICE_NAME`].
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// `down-after-milliseconds`, in whole milliseconds (rounded up); default
    /// [`DEFAULT_DOWN_AFTER`] (1000 ms). A killed master is failed over roughly one to three of
    /// these after its death.
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// `failover-timeout`, in whole milliseconds (rounded up); default
    /// [`DEFAULT_FAILOVER_TIMEOUT`] (5 s).
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Appends redis-server arguments for both data nodes (roles swap on failover, so settings
    /// such as `--min-replicas-to-write` belong here), after the testkit's own (see
    /// [`RedisServerBuilder::arg`](crate::RedisServerBuilder::arg), then
    /// `--repl-diskless-sync-delay 0`). Do not set `--requirepass` or `--replicaof`.
    pub fn node_args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.node_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Appends redis-server arguments for the node that starts as the replica only (after
    /// `--replicaof`), e.g. `--replica-priority`.
    pub fn replica_args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.replica_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Appends one line to every Sentinel's config file, after the testkit's (`port`,
    /// `sentinel resolve-hostnames no`, `sentinel monitor <name> 127.0.0.1 <master port> 2`,
    /// `sentinel down-after-milliseconds`, `sentinel failover-timeout`,
    /// `sentinel parallel-syncs 1`), e.g. `"sentinel auth-pass mymaster secret"`.
    pub fn sentinel_config(mut self, line: impl Into<String>) -> Self {
        self.sentinel_config.push(line.into());
        self
    }

    /// How long [`start`](Self::start) waits for the deployment to settle, and how long each of
    /// [`RedisSentinel::failover`], [`kill_master`](RedisSentinel::kill_master),
    /// [`cut_off_replica`](RedisSentinel::cut_off_replica) and
    /// [`reconnect_replica`](RedisSentinel::reconnect_replica) waits; default
    /// [`DEFAULT_SETTLE_TIMEOUT`] (90 s).
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.settle_timeout = timeout;
        self
    }

    /// The redis-server binary for the data nodes and the Sentinels (`--sentinel`); default
    /// `$LOCK_TESTKIT_REDIS_SERVER`, else `redis-server` from `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Starts the master, then its replica (`--replicaof`) and waits until it has synced, then
    /// three Sentinels (`redis-server <dir>/sentinel-<port>.conf --sentinel`, local processes on
    /// free loopback ports), and waits until every Sentinel names the master, knows the synced
    /// replica and both other Sentinels (`SENTINEL MASTER`/`REPLICAS`/`SENTINELS`).
    ///
    /// # Errors
    /// [`TestkitError::Connection`] for a service name with other characters than ASCII letters,
    /// digits, `-`, `_`, `.`; the start-up errors of
    /// [`RedisServerBuilder::start`](crate::RedisServerBuilder::start);
    /// [`TestkitError::StartupTimeout`] (with the last state seen and the log tails) when the
    /// deployment does not settle within the settle timeout.
    pub async fn start(self) -> Result<RedisSentinel, TestkitError> {
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if self.service_name.is_empty() || !self.service_name.chars().all(valid) {
            return Err(usage_error(
                0,
                "sentinel monitor",
                format!(
                    "service name `{}`: use ASCII letters, digits, `-`, `_` and `.` only",
                    self.service_name
                ),
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("lock-testkit-sentinel-")
            .tempdir()
            .map_err(|e| TestkitError::io("create a temp dir for the Sentinels", e))?;
        let master = self.node_builder().start().await?;
        let replica = self
            .node_builder()
            .args(["--replicaof", "127.0.0.1"])
            .arg(master.port().to_string())
            .args(self.replica_args.iter().cloned())
            .start()
            .await?;
        let mut deployment = RedisSentinel {
            sentinels: Vec::with_capacity(SENTINELS),
            nodes: [master, replica],
            master: AtomicUsize::new(0),
            cut_off: AtomicBool::new(false),
            service_name: self.service_name.clone(),
            settle_timeout: self.settle_timeout,
            dir,
        };
        // The Sentinels learn of the replica from the master's INFO, which they ask for at once
        // and then only every 10 s: let the replica be attached before they start.
        deployment
            .wait_for("the replica to sync", || deployment.replica_synced(0))
            .await
            .map_err(|e| deployment.startup_error(e))?;
        for _ in 0..SENTINELS {
            let sentinel = self
                .start_sentinel(deployment.dir.path(), deployment.nodes[0].port())
                .await?;
            deployment.sentinels.push(sentinel);
        }
        deployment
            .wait_for("the Sentinels to know each other and both nodes", || {
                deployment.settled(0)
            })
            .await
            .map_err(|e| deployment.startup_error(e))?;
        Ok(deployment)
    }

    fn node_builder(&self) -> crate::RedisServerBuilder {
        // A replica's full sync would otherwise wait 5 s for more replicas to share it.
        let mut builder = RedisServer::builder()
            .backend(Backend::Local)
            .args(["--repl-diskless-sync-delay", "0"])
            .args(self.node_args.iter().cloned());
        if let Some(binary) = &self.binary {
            builder = builder.binary(binary);
        }
        builder
    }

    /// One Sentinel on a free port, with its own config file named after the port (a Sentinel
    /// rewrites its file); retried with another port if that one was taken meanwhile.
    async fn start_sentinel(
        &self,
        dir: &Path,
        master_port: u16,
    ) -> Result<RedisServer, TestkitError> {
        let name = &self.service_name;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let config = dir.join(format!("sentinel-{port}.conf"));
            let mut text = format!(
                "port {port}\n\
                 sentinel resolve-hostnames no\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} {QUORUM}\n\
                 sentinel down-after-milliseconds {name} {}\n\
                 sentinel failover-timeout {name} {}\n\
                 sentinel parallel-syncs {name} 1\n",
                millis(self.down_after),
                millis(self.failover_timeout),
            );
            for line in &self.sentinel_config {
                text.push_str(line);
                text.push('\n');
            }
            fs::write(&config, text)
                .map_err(|e| TestkitError::io(format!("write {}", config.display()), e))?;
            let mut builder = RedisServer::builder()
                .backend(Backend::Local)
                .port(port)
                .config_file(&config)
                .arg("--sentinel");
            if let Some(binary) = &self.binary {
                builder = builder.binary(binary);
            }
            match builder.start().await {
                Ok(sentinel) => return Ok(sentinel),
                Err(e @ TestkitError::NoFreePort { .. }) => {
                    let _ = fs::remove_file(&config);
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("PORT_ATTEMPTS > 0"))
    }
}

/// A Sentinel deployment for one test: a master, one replica of it, and three Sentinels
/// monitoring it with quorum 2, `down-after-milliseconds` 1000 and `failover-timeout` 5000 by
/// default. Every process is a local `redis-server` child on its own free `127.0.0.1` port with
/// no persistence; each Sentinel's config file is `<dir>/sentinel-<port>.conf`
/// (`sentinel resolve-hostnames no`).
///
/// The two data nodes swap roles on [`failover`](Self::failover) and
/// [`kill_master`](Self::kill_master); [`master`](Self::master) and [`replica`](Self::replica)
/// follow them (they reflect the roles as of the last of those calls; a failover the Sentinels
/// start on their own, e.g. after a [`pause`](RedisServer::pause) of the master, is seen only by
/// [`current_master_port`](Self::current_master_port)).
///
/// Dropping it SIGKILLs every process and removes the temp dirs; if the test process dies first,
/// the kernel kills them (Linux), as for [`RedisServer`].
#[derive(Debug)]
pub struct RedisSentinel {
    // Field order matters: the Sentinels go first (so none reacts to the others' deaths), and
    // every process before `dir` (the Sentinels' config files).
    sentinels: Vec<RedisServer>,
    /// `[first master, first replica]`.
    nodes: [RedisServer; 2],
    /// Index into `nodes` of the current master.
    master: AtomicUsize,
    /// Whether the replica was cut off by `cut_off_replica` (its `masterauth` is wrong).
    cut_off: AtomicBool,
    service_name: String,
    settle_timeout: Duration,
    dir: TempDir,
}

impl RedisSentinel {
    /// Starts a deployment with default settings; see [`RedisSentinelBuilder::start`].
    ///
    /// # Errors
    /// See [`RedisSentinelBuilder::start`].
    pub async fn start() -> Result<RedisSentinel, TestkitError> {
        Self::builder().start().await
    }

    /// A builder for the service name, `down-after-milliseconds`, `failover-timeout`, extra
    /// arguments and config lines, the settle timeout and the binary.
    pub fn builder() -> RedisSentinelBuilder {
        RedisSentinelBuilder::new()
    }

    /// The URL of the three Sentinels in the form fred's `Config::from_url` accepts:
    /// `redis-sentinel://127.0.0.1:<s1>?sentinelServiceName=<name>&node=127.0.0.1:<s2>&node=127.0.0.1:<s3>`.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={}",
            self.sentinels[0].port(),
            self.service_name
        );
        for sentinel in &self.sentinels[1..] {
            url.push_str(&format!("&node=127.0.0.1:{}", sentinel.port()));
        }
        url
    }

    /// The name the Sentinels monitor the master under.
    pub fn service_name(&self) -> &str {
        &self.service_name
    }

    /// The node that is master as of the last [`start`](RedisSentinelBuilder::start),
    /// [`failover`](Self::failover) or [`kill_master`](Self::kill_master).
    pub fn master(&self) -> &RedisServer {
        &self.nodes[self.master.load(Ordering::SeqCst)]
    }

    /// The other data node: the replica, as of the same calls as [`master`](Self::master). After
    /// [`kill_master`](Self::kill_master) this is the killed node (`pid() == None`).
    pub fn replica(&self) -> &RedisServer {
        &self.nodes[1 - self.master.load(Ordering::SeqCst)]
    }

    /// Both data nodes in start order: the first master, the first replica.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The three Sentinels; [`RedisServer::cmd`] sends them `SENTINEL …` commands.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The deployment's temp dir, holding each Sentinel's `sentinel-<port>.conf` (rewritten by
    /// the Sentinel). Each process's log is in its [`RedisServer::dir`]. Removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The master's port according to the first Sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    ///
    /// # Errors
    /// The last Sentinel's error if none answers; [`TestkitError::Redis`] if a Sentinel does not
    /// know the service.
    pub async fn current_master_port(&self) -> Result<u16, TestkitError> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match self.master_addr(sentinel).await {
                Ok(port) => return Ok(port),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("a deployment has Sentinels"))
    }

    /// Manual failover, as a real Sentinel does it: `SENTINEL FAILOVER <name>` (asked again
    /// while a Sentinel answers `INPROG` or `NOGOODSLAVE`), then waits until every Sentinel names
    /// the replica as master and it answers `role:master`. Returns the new master's port;
    /// [`master`](Self::master) and [`replica`](Self::replica) swap. A replica
    /// [cut off](Self::cut_off_replica) before is reconnected once promoted. Unlike a Cluster
    /// manual failover, writes the replica had not received yet are lost.
    ///
    /// The old master is **not** demoted yet when this returns: the Sentinels send it `REPLICAOF`
    /// only once it has reported `role:master` for about 8 s past the switch and they notice at
    /// their next `INFO` of it (every 10 s), 10 to 20 s later. Until then it still answers
    /// `role:master` and accepts writes from the clients still connected to it — the window in
    /// which a client that does not follow the Sentinels' `+switch-master` events keeps using
    /// it. [`wait_settled`](Self::wait_settled) waits for the Sentinels to demote it;
    /// [`demote_old_master`](Self::demote_old_master) does it at once.
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if the replica is killed or paused;
    /// [`TestkitError::CommandTimeout`] (with the last state seen) if the Sentinels have not
    /// promoted it within the settle timeout; the errors of [`RedisServer::cmd`].
    pub async fn failover(&self) -> Result<u16, TestkitError> {
        let old = self.master.load(Ordering::SeqCst);
        let new = 1 - old;
        let command = format!("SENTINEL FAILOVER {}", self.service_name);
        self.require_replica_up(&command).await?;
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        'asked: loop {
            let mut refusals = Vec::new();
            for sentinel in &self.sentinels {
                match sentinel
                    .cmd(&["SENTINEL", "FAILOVER", &self.service_name])
                    .await
                {
                    Ok(_) => break 'asked,
                    Err(e) => refusals.push(format!("{}: {e}", sentinel.port())),
                }
            }
            if started.elapsed() >= self.settle_timeout {
                return Err(self.timeout_error(
                    &command,
                    started.elapsed(),
                    &format!("no Sentinel accepted it: {}", refusals.join("; ")),
                ));
            }
            sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
        self.wait_for("the Sentinels to promote the replica", || async {
            self.require_master_on_all_sentinels(new).await?;
            self.repair_promoted(new).await
        })
        .await
        .map_err(|(waited, status)| self.timeout_error(&command, waited, &status))?;
        self.master.store(new, Ordering::SeqCst);
        Ok(self.nodes[new].port())
    }

    /// Demotes the old master after a [`failover`](Self::failover) at once, instead of waiting
    /// 10 to 20 s for the Sentinels to: `REPLICAOF 127.0.0.1 <master>` on the
    /// [`replica`](Self::replica), then waits as [`wait_settled`](Self::wait_settled) does.
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if the replica is killed or paused;
    /// [`TestkitError::CommandTimeout`] if the deployment has not settled within the settle
    /// timeout; the errors of [`RedisServer::cmd`].
    pub async fn demote_old_master(&self) -> Result<(), TestkitError> {
        let master = self.master.load(Ordering::SeqCst);
        let command = format!("REPLICAOF 127.0.0.1 {}", self.nodes[master].port());
        self.require_replica_up(&command).await?;
        let port = self.nodes[master].port().to_string();
        self.replica()
            .cmd(&["REPLICAOF", "127.0.0.1", &port])
            .await?;
        self.wait_for("the old master to follow the new one", || {
            self.settled(master)
        })
        .await
        .map_err(|(waited, status)| self.timeout_error(&command, waited, &status))
    }

    /// Waits until the deployment has settled around [`master`](Self::master): every Sentinel
    /// names it and lists the other node, if it runs, as a healthy replica, which has synced
    /// with it. After a [`failover`](Self::failover) this is when the Sentinels have demoted the
    /// old master themselves (10 to 20 s).
    ///
    /// # Errors
    /// [`TestkitError::CommandTimeout`] (with the last state seen) if it has not settled within
    /// the settle timeout.
    pub async fn wait_settled(&self) -> Result<(), TestkitError> {
        let master = self.master.load(Ordering::SeqCst);
        self.wait_for("the deployment to settle", || self.settled(master))
            .await
            .map_err(|(waited, status)| self.timeout_error("wait_settled", waited, &status))
    }

    /// Crash of the master: SIGKILLs it and waits until the Sentinels have failed over on their
    /// own — every Sentinel names the replica as master and it answers `role:master` (typically
    /// two to four down-after periods). Writes the replica had not received are lost, as in
    /// production. Returns the new master's port; [`master`](Self::master) is then the promoted
    /// node and [`replica`](Self::replica) the killed one. A replica
    /// [cut off](Self::cut_off_replica) before is reconnected once promoted (its data stays as it
    /// was when it was cut off).
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if the replica is killed or paused (nobody could take over);
    /// [`TestkitError::CommandTimeout`] (with the last state seen) if the Sentinels have not
    /// promoted it within the settle timeout; the errors of [`RedisServer::kill`].
    pub async fn kill_master(&mut self) -> Result<u16, TestkitError> {
        let old = self.master.load(Ordering::SeqCst);
        let new = 1 - old;
        self.require_replica_up("SIGKILL the master").await?;
        self.nodes[old].kill().await?;
        let this = &*self;
        this.wait_for("the Sentinels to promote the replica", || async {
            this.require_master_on_all_sentinels(new).await?;
            this.repair_promoted(new).await?;
            this.settled(new).await
        })
        .await
        .map_err(|(waited, status)| this.timeout_error("automatic failover", waited, &status))?;
        self.master.store(new, Ordering::SeqCst);
        Ok(self.nodes[new].port())
    }

    /// Brings the node [`kill_master`](Self::kill_master) killed back as a replica of the new
    /// master: started again on its port, empty (nothing is persisted), told `REPLICAOF` the
    /// master, and waited for as [`wait_settled`](Self::wait_settled) does. A later
    /// `kill_master` can then fail over to it.
    ///
    /// # Errors
    /// The errors of [`RedisServer::restart`] and [`RedisServer::cmd`];
    /// [`TestkitError::CommandTimeout`] if the deployment has not settled within the settle
    /// timeout.
    pub async fn restart_replica(&mut self) -> Result<(), TestkitError> {
        let master = self.master.load(Ordering::SeqCst);
        let port = self.nodes[master].port().to_string();
        let replica = &mut self.nodes[1 - master];
        replica.restart().await?;
        replica.cmd(&["REPLICAOF", "127.0.0.1", &port]).await?;
        self.wait_settled().await
    }

    /// Freezes the replica (SIGSTOP; see [`RedisServer::pause`]). The Sentinels flag it down
    /// after the down-after period. Note that this does **not** cut it off from the master's
    /// writes: the kernel keeps receiving the replication stream into its socket buffer, and
    /// the replica applies it when resumed, even if the master died meanwhile. Use
    /// [`cut_off_replica`](Self::cut_off_replica) for that.
    ///
    /// # Errors
    /// As for [`RedisServer::pause`].
    pub fn pause_replica(&self) -> Result<(), TestkitError> {
        self.replica().pause()
    }

    /// Thaws a [`pause_replica`](Self::pause_replica)d replica (SIGCONT).
    ///
    /// # Errors
    /// As for [`RedisServer::resume`].
    pub fn resume_replica(&self) -> Result<(), TestkitError> {
        self.replica().resume()
    }

    /// Cuts the replica off from its master, so that no later write reaches it: sets a
    /// `masterauth` the master refuses on the replica, drops the replication link
    /// (`CLIENT KILL TYPE replica` on the master) and waits until the replica reports
    /// `master_link_status:down`. It keeps serving reads of the data it had, keeps trying to
    /// reconnect (refused), and stays eligible for promotion for ten down-after periods: a
    /// [`kill_master`](Self::kill_master) within that time promotes a replica without the writes
    /// made after the cut — the way a lock key is lost in a failover.
    ///
    /// # Errors
    /// [`TestkitError::Connection`] if the replica is killed or paused;
    /// [`TestkitError::CommandTimeout`] if the link is still up after the settle timeout; the
    /// errors of [`RedisServer::cmd`].
    pub async fn cut_off_replica(&self) -> Result<(), TestkitError> {
        let command = "CLIENT KILL TYPE replica";
        self.require_replica_up(command).await?;
        let replica = self.replica();
        replica
            .cmd(&["CONFIG", "SET", "masterauth", CUT_OFF_PASSWORD])
            .await?;
        self.cut_off.store(true, Ordering::SeqCst);
        self.master()
            .cmd(&["CLIENT", "KILL", "TYPE", "replica"])
            .await?;
        self.wait_for("the replica's link to go down", || async {
            let info = replica
                .cmd(&["INFO", "replication"])
                .await
                .map_err(|e| e.to_string())?;
            match info_field(&info, "master_link_status") {
                Some("down") => Ok(()),
                status => Err(format!("master_link_status:{}", status.unwrap_or("?"))),
            }
        })
        .await
        .map_err(|(waited, status)| self.timeout_error(command, waited, &status))
    }

    /// Undoes [`cut_off_replica`](Self::cut_off_replica): clears the replica's `masterauth` and
    /// waits until it has resynced with the master (`master_link_status:up`). A no-op for a
    /// replica that was not cut off.
    ///
    /// # Errors
    /// As for [`cut_off_replica`](Self::cut_off_replica).
    pub async fn reconnect_replica(&self) -> Result<(), TestkitError> {
        if !self.cut_off.load(Ordering::SeqCst) {
            return Ok(());
        }
        let command = "CONFIG SET masterauth \"\"";
        self.require_replica_up(command).await?;
        self.replica()
            .cmd(&["CONFIG", "SET", "masterauth", ""])
            .await?;
        self.cut_off.store(false, Ordering::SeqCst);
        let master = self.master.load(Ordering::SeqCst);
        self.wait_for("the replica to resync", || self.replica_synced(master))
            .await
            .map_err(|(waited, status)| self.timeout_error(command, waited, &status))
    }

    // ---- internals ----------------------------------------------------------------------------

    /// The master port one Sentinel names.
    async fn master_addr(&self, sentinel: &RedisServer) -> Result<u16, TestkitError> {
        let reply = sentinel
            .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.service_name])
            .await?;
        reply
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
            .ok_or_else(|| TestkitError::Redis {
                port: sentinel.port(),
                command: format!("SENTINEL GET-MASTER-ADDR-BY-NAME {}", self.service_name),
                message: format!("expected an address, got `{reply}`"),
            })
    }

    /// Errors unless the replica runs and is not paused.
    async fn require_replica_up(&self, command: &str) -> Result<(), TestkitError> {
        let replica = self.replica();
        if replica.pid().is_none() {
            return Err(usage_error(
                replica.port(),
                command,
                "the replica was killed, so no node could take over".to_owned(),
            ));
        }
        match replica.cmd(&["PING"]).await {
            Err(TestkitError::Paused { .. }) => Err(usage_error(
                replica.port(),
                command,
                "the replica is paused: resume_replica() first (cut_off_replica() keeps it from \
                 the master's writes without pausing it)"
                    .to_owned(),
            )),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    /// Every Sentinel names `nodes[master]` as the master, and that node says `role:master`.
    async fn require_master_on_all_sentinels(&self, master: usize) -> Result<(), String> {
        let port = self.nodes[master].port();
        for sentinel in &self.sentinels {
            let named = self
                .master_addr(sentinel)
                .await
                .map_err(|e| e.to_string())?;
            if named != port {
                return Err(format!(
                    "Sentinel {} names {named} as master, not yet {port}",
                    sentinel.port()
                ));
            }
        }
        let info = self.nodes[master]
            .cmd(&["INFO", "replication"])
            .await
            .map_err(|e| e.to_string())?;
        check_replication(&info, port, None)
    }

    /// Clears the wrong `masterauth` of a cut-off replica once it has been promoted.
    async fn repair_promoted(&self, promoted: usize) -> Result<(), String> {
        if self.cut_off.load(Ordering::SeqCst) {
            self.nodes[promoted]
                .cmd(&["CONFIG", "SET", "masterauth", ""])
                .await
                .map_err(|e| e.to_string())?;
            self.cut_off.store(false, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The replica of `nodes[master]` reports a synced link to it.
    async fn replica_synced(&self, master: usize) -> Result<(), String> {
        let replica = &self.nodes[1 - master];
        let info = replica
            .cmd(&["INFO", "replication"])
            .await
            .map_err(|e| e.to_string())?;
        check_replication(&info, replica.port(), Some(self.nodes[master].port()))
    }

    /// Whether the deployment has settled with `nodes[master]` as master: every Sentinel names
    /// it, flags it `master` only, sees both other Sentinels reachable and, if the other node runs, lists
    /// it as a replica with no other flag; the master reports `role:master` and the running
    /// replica a synced link to it (`INFO replication`).
    async fn settled(&self, master: usize) -> Result<(), String> {
        let master_port = self.nodes[master].port();
        let replica = &self.nodes[1 - master];
        let replica_runs = replica.pid().is_some();
        let name = self.service_name.as_str();
        for sentinel in &self.sentinels {
            let at = sentinel.port();
            let ask = |args: &'static [&'static str]| async move {
                let mut full: Vec<&str> = args.to_vec();
                full.push(name);
                sentinel
                    .reply(&full)
                    .await
                    .map_err(|e| format!("Sentinel {at}: {e}"))
            };
            let named = self
                .master_addr(sentinel)
                .await
                .map_err(|e| format!("Sentinel {at}: {e}"))?;
            if named != master_port {
                return Err(format!(
                    "Sentinel {at} names {named} as master, not {master_port}"
                ));
            }
            let fields = pairs(&ask(&["SENTINEL", "MASTER"]).await?);
            let flags = fields.get("flags").map_or("?", String::as_str);
            if flags != "master" {
                return Err(format!("Sentinel {at} flags the master `{flags}`"));
            }
            let others = records(&ask(&["SENTINEL", "SENTINELS"]).await?);
            let healthy = others
                .iter()
                .filter(|s| s.get("flags").is_some_and(|f| healthy_sentinel(f)))
                .count();
            if healthy != SENTINELS - 1 {
                return Err(format!(
                    "Sentinel {at} sees {healthy} healthy other Sentinels, expected {}",
                    SENTINELS - 1
                ));
            }
            if replica_runs {
                let replicas = records(&ask(&["SENTINEL", "REPLICAS"]).await?);
                let port = replica.port().to_string();
                // Only the flags: the rest of a Sentinel's view of a replica comes from its INFO
                // of it, which can be 10 s old; the replica's own INFO is checked below.
                let flags = replicas
                    .iter()
                    .find(|r| r.get("port") == Some(&port))
                    .and_then(|r| r.get("flags"))
                    .map_or("(not listed)", String::as_str);
                if flags != "slave" {
                    return Err(format!(
                        "Sentinel {at} knows replica {port} with flags `{flags}`"
                    ));
                }
            }
        }
        let info = self.nodes[master]
            .cmd(&["INFO", "replication"])
            .await
            .map_err(|e| e.to_string())?;
        check_replication(&info, master_port, None)?;
        if replica_runs {
            self.replica_synced(master).await?;
        }
        Ok(())
    }

    /// Polls `check` until it passes or the settle timeout ends; on timeout returns how long it
    /// waited and the last reason it gave.
    async fn wait_for<F, Fut>(&self, what: &str, mut check: F) -> Result<(), (Duration, String)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let started = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            let status = match check().await {
                Ok(()) => return Ok(()),
                Err(why) => why,
            };
            if started.elapsed() >= self.settle_timeout {
                return Err((started.elapsed(), format!("waiting for {what}: {status}")));
            }
            sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    fn timeout_error(&self, what: &str, waited: Duration, status: &str) -> TestkitError {
        TestkitError::CommandTimeout {
            port: self
                .sentinels
                .first()
                .map_or(self.master().port(), RedisServer::port),
            command: format!("{what}; the deployment did not settle, last seen: {status}"),
            timeout: waited,
        }
    }

    fn startup_error(&self, (waited, status): (Duration, String)) -> TestkitError {
        let tails = self
            .nodes
            .iter()
            .chain(&self.sentinels)
            .map(|server| {
                let log = server
                    .dir()
                    .map(|dir| log_tail(&dir.join("redis-server.log"), LOG_LINES))
                    .unwrap_or_default();
                format!("-- port {} --\n{log}", server.port())
            })
            .collect::<Vec<_>>()
            .join("\n");
        TestkitError::StartupTimeout {
            port: self.nodes[0].port(),
            waited,
            log_tail: format!("{status}\n{tails}"),
        }
    }
}

/// Whether a Sentinel's flags for another Sentinel say it is reachable: `sentinel`, possibly
/// with `master_down` (its vote in the last failover, kept for a while), never `s_down`,
/// `o_down` or `disconnected`.
fn healthy_sentinel(flags: &str) -> bool {
    let flags: Vec<&str> = flags.split(',').collect();
    flags.contains(&"sentinel")
        && !flags
            .iter()
            .any(|f| matches!(*f, "s_down" | "o_down" | "disconnected"))
}

/// A flat array of alternating field names and values (RESP2 `SENTINEL MASTER`) as a map.
fn pairs(reply: &Reply) -> BTreeMap<String, String> {
    let Reply::Array(Some(items)) = reply else {
        return BTreeMap::new();
    };
    let text = |item: &Reply| match item {
        Reply::Bulk(Some(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        other => other.to_text(),
    };
    items
        .chunks_exact(2)
        .map(|pair| (text(&pair[0]), text(&pair[1])))
        .collect()
}

/// An array of such flat arrays (`SENTINEL REPLICAS`, `SENTINEL SENTINELS`).
fn records(reply: &Reply) -> Vec<BTreeMap<String, String>> {
    match reply {
        Reply::Array(Some(items)) => items.iter().map(pairs).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn reads_sentinel_replies_as_maps() {
        let master = Reply::Array(Some(vec![
            bulk("name"),
            bulk("mymaster"),
            bulk("flags"),
            bulk("master"),
        ]));
        let map = pairs(&master);
        assert_eq!(map["name"], "mymaster");
        assert_eq!(map["flags"], "master");
        let list = Reply::Array(Some(vec![master.clone(), master]));
        assert_eq!(records(&list).len(), 2);
        assert!(records(&Reply::Array(None)).is_empty());
    }

    #[test]
    fn a_vote_flag_does_not_make_a_sentinel_unhealthy() {
        assert!(healthy_sentinel("sentinel"));
        assert!(healthy_sentinel("sentinel,master_down"));
        assert!(!healthy_sentinel("sentinel,s_down"));
        assert!(!healthy_sentinel("sentinel,disconnected"));
        assert!(!healthy_sentinel("slave"));
    }
}
