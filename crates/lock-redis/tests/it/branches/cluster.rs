//! Master/sub locks on a real Redis Cluster (three masters, one replica each): every key and
//! channel of a master invocation is in its lock's slot, and the whole conformance suite passes.
//! One cluster of its own, started once (a few seconds).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use lock_core::branches::conformance::{self, BranchesFactory};
use lock_core::branches::{MasterLocks, MasterOptions};
use lock_core::lock::Lease;
use lock_redis::lock::RedisLock;
use lock_testkit::{RedisCluster, command_at};

struct ClusterBranches {
    url: String,
    /// The masters' ports: each key lives on exactly one of them.
    masters: Vec<u16>,
}

impl ClusterBranches {
    async fn lock(&self) -> RedisLock {
        common::connect(common::config_at(self.url.as_str()).instance_id("cluster-pod")).await
    }

    /// `args` on every master; the replies of those that answered (the others redirect).
    async fn on_masters(&self, args: &[&str]) -> Vec<(u16, String)> {
        let mut replies = Vec::new();
        for port in &self.masters {
            if let Ok(reply) = command_at("127.0.0.1", *port, None, args).await {
                replies.push((*port, reply));
            }
        }
        replies
    }
}

#[async_trait::async_trait]
impl BranchesFactory for ClusterBranches {
    async fn client(&self) -> MasterLocks {
        common::master_locks(self.lock().await).0
    }

    async fn record_ttls(&self, master_key: &str) -> Vec<Option<Duration>> {
        let pattern = format!("lock:branches:{{{master_key}}}:*");
        let mut ttls = Vec::new();
        for (port, keys) in self.on_masters(&["KEYS", &pattern]).await {
            for key in keys.lines() {
                let ttl = command_at("127.0.0.1", port, None, &["PTTL", key])
                    .await
                    .unwrap();
                let ttl: i64 = ttl.parse().unwrap();
                ttls.push(u64::try_from(ttl).ok().map(Duration::from_millis));
            }
        }
        ttls
    }

    async fn expire_lock(&self, key: &str) -> bool {
        let key = self.lock().await.redis_key(key);
        let set = [
            "SET",
            key.as_str(),
            "H|1|conformance-expire|pod/x/1",
            "XX",
            "KEEPTTL",
        ];
        self.on_masters(&set)
            .await
            .iter()
            .any(|(_, reply)| reply == "OK")
    }

    fn lease_loss_bound(&self) -> Duration {
        common::WATCHDOG
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_sub_locks_keep_one_slot_per_master_and_pass_the_suite_on_a_cluster() {
    let cluster = RedisCluster::start()
        .await
        .expect("the Redis Cluster did not start");
    let factory = Arc::new(ClusterBranches {
        url: cluster.url(),
        masters: cluster.masters().await.unwrap(),
    });
    assert_eq!(factory.masters.len(), 3);

    let lock = factory.lock().await;
    let (masters, branches) = common::master_locks(lock.clone());
    for name in ["ticket:4711", "tenant-{7}:order 9", "ünï"] {
        let options = MasterOptions::new(Lease::Watchdog)
            .branch_wait(Duration::ZERO)
            .unwrap();
        let keys = masters
            .with_master_lock(name, options, |master| {
                let branches = branches.clone();
                async move {
                    master.register_branch("search").await.unwrap();
                    let sub_key = master.sub_key().clone();
                    [
                        branches.record_key(&sub_key),
                        branches.release_channel(&sub_key),
                    ]
                }
            })
            .await
            .unwrap()
            .value;
        let lock_slot = cluster.slot_for_key(&lock.redis_key(name)).await.unwrap();
        for key in keys {
            assert_eq!(
                cluster.slot_for_key(&key).await.unwrap(),
                lock_slot,
                "{name}: {key}"
            );
        }
    }

    let failed = conformance::run_all(factory).await;
    assert!(failed.is_empty(), "failed on the cluster: {failed:?}");
}
