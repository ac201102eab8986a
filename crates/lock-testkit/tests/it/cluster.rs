//! `RedisCluster` against real redis-server processes: one cluster, one scenario.
//!
//! A cluster is six processes and its topology changes take seconds, so the whole life cycle is
//! one test on one cluster: start, serve keys from every master, manual failover, slot
//! migration, master crash, drop. Every wait is on an event with a generous deadline (the
//! testkit's settle timeout); nothing sleeps for a fixed time.

use std::collections::BTreeMap;
use std::time::Instant;

use lock_testkit::{RedisCluster, TestkitError};

use crate::common::wait_until_all_gone;

/// The error message of a `cmd_on` that Redis refused, e.g. `MOVED 1234 127.0.0.1:7001`.
fn refusal(result: Result<String, TestkitError>) -> String {
    match result {
        Err(TestkitError::Redis { message, .. }) => message,
        other => panic!("expected a Redis error reply, got {other:?}"),
    }
}

/// `CLUSTER COUNTKEYSINSLOT` on one node.
async fn keys_in_slot(cluster: &RedisCluster, port: u16, slot: u16) -> String {
    cluster
        .cmd_on(port, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
        .await
        .unwrap()
}

#[tokio::test]
async fn a_cluster_serves_every_master_fails_over_migrates_and_stops_on_drop() {
    // --- start ---------------------------------------------------------------------------------
    let started = Instant::now();
    let mut cluster = RedisCluster::start().await.expect("the cluster starts");
    eprintln!("cluster start: {:?}", started.elapsed());

    let ports: Vec<u16> = cluster.nodes().iter().map(|n| n.port()).collect();
    assert_eq!(ports.len(), 6);
    let url = cluster.url();
    let expected_url = format!(
        "redis-cluster://127.0.0.1:{}?{}",
        ports[0],
        ports[1..]
            .iter()
            .map(|p| format!("node=127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join("&")
    );
    assert_eq!(url, expected_url);
    let masters = cluster.masters().await.unwrap();
    let replicas = cluster.replicas().await.unwrap();
    assert_eq!(masters.len(), 3, "three masters: {masters:?}");
    assert_eq!(replicas.len(), 3, "three replicas: {replicas:?}");
    let mut all: Vec<u16> = masters.iter().chain(&replicas).copied().collect();
    all.sort_unstable();
    let mut sorted_ports = ports.clone();
    sorted_ports.sort_unstable();
    assert_eq!(all, sorted_ports, "every node is a master or a replica");
    for (master, replica) in masters.iter().zip(&replicas) {
        assert_eq!(cluster.replica_of(*master).await.unwrap(), Some(*replica));
        let info = cluster.cmd_on(*master, &["CLUSTER", "INFO"]).await.unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        let config = cluster.dir().join(format!("nodes-{master}.conf"));
        assert!(config.is_file(), "{} exists", config.display());
    }

    // --- every master serves its keys ----------------------------------------------------------
    let mut key_on: BTreeMap<u16, String> = BTreeMap::new();
    for i in 0.. {
        let key = format!("key-{i}");
        let port = cluster.node_for_key(&key).await.unwrap();
        key_on.entry(port).or_insert(key);
        if key_on.len() == 3 {
            break;
        }
    }
    assert_eq!(key_on.keys().copied().collect::<Vec<_>>(), {
        let mut m = masters.clone();
        m.sort_unstable();
        m
    });
    for (&port, key) in &key_on {
        let value = format!("value-of-{key}");
        assert_eq!(
            cluster.cmd_on(port, &["SET", key, &value]).await.unwrap(),
            "OK"
        );
        assert_eq!(cluster.cmd_on(port, &["GET", key]).await.unwrap(), value);
        // Replicated before anything below kills or demotes its master.
        assert_eq!(
            cluster.cmd_on(port, &["WAIT", "1", "10000"]).await.unwrap(),
            "1"
        );
        let other = masters.iter().find(|m| **m != port).unwrap();
        let moved = refusal(cluster.cmd_on(*other, &["GET", key]).await);
        assert!(moved.starts_with("MOVED "), "{moved}");
        assert!(moved.ends_with(&format!("127.0.0.1:{port}")), "{moved}");
    }

    // --- manual failover swaps master and replica ------------------------------------------------
    let old_master = masters[0];
    let its_replica = replicas[0];
    let started = Instant::now();
    let promoted = cluster.failover(old_master).await.expect("failover");
    eprintln!("cluster failover: {:?}", started.elapsed());
    assert_eq!(promoted, its_replica);
    let masters_now = cluster.masters().await.unwrap();
    assert!(masters_now.contains(&promoted) && !masters_now.contains(&old_master));
    assert_eq!(
        cluster.replica_of(promoted).await.unwrap(),
        Some(old_master)
    );
    let role = cluster.cmd_on(promoted, &["ROLE"]).await.unwrap();
    assert!(role.starts_with("master"), "{role}");
    let role = cluster.cmd_on(old_master, &["ROLE"]).await.unwrap();
    assert!(
        role.starts_with(&format!("slave\n127.0.0.1\n{promoted}")),
        "{role}"
    );
    let key = &key_on[&old_master];
    assert_eq!(cluster.node_for_key(key).await.unwrap(), promoted);
    assert_eq!(
        cluster.cmd_on(promoted, &["GET", key]).await.unwrap(),
        format!("value-of-{key}"),
        "a manual failover loses no write"
    );

    // --- slot migration moves the slot and its keys ---------------------------------------------
    let (from, to) = (masters[1], masters[2]);
    let key = key_on[&from].clone();
    let slot = cluster.slot_for_key(&key).await.unwrap();
    // More keys than one MIGRATE batch, all in the key's slot (same hash tag).
    for n in 0..250 {
        let tagged = format!("{{{key}}}:{n}");
        cluster.cmd_on(from, &["SET", &tagged, "x"]).await.unwrap();
    }
    assert_eq!(keys_in_slot(&cluster, from, slot).await, "251");
    let started = Instant::now();
    cluster.migrate_slot(slot, to).await.expect("migrate_slot");
    eprintln!("cluster migrate_slot (251 keys): {:?}", started.elapsed());
    assert_eq!(cluster.node_for_key(&key).await.unwrap(), to);
    assert_eq!(keys_in_slot(&cluster, from, slot).await, "0");
    assert_eq!(keys_in_slot(&cluster, to, slot).await, "251");
    assert_eq!(
        cluster.cmd_on(to, &["GET", &key]).await.unwrap(),
        format!("value-of-{key}")
    );
    let moved = refusal(cluster.cmd_on(from, &["GET", &key]).await);
    assert_eq!(moved, format!("MOVED {slot} 127.0.0.1:{to}"));
    for node in cluster.nodes() {
        let nodes = node.cmd(&["CLUSTER", "NODES"]).await.unwrap();
        assert!(
            !nodes.contains("->-") && !nodes.contains("-<-"),
            "no open slot: {nodes}"
        );
    }
    // Migrating to the owner is a no-op.
    cluster.migrate_slot(slot, to).await.unwrap();

    // --- a killed master is replaced by its replica ---------------------------------------------
    let victim = to;
    let heir = cluster
        .replica_of(victim)
        .await
        .unwrap()
        .expect("a replica");
    assert_eq!(
        cluster
            .cmd_on(victim, &["WAIT", "1", "10000"])
            .await
            .unwrap(),
        "1"
    );
    let started = Instant::now();
    let promoted = cluster.kill_master(victim).await.expect("kill_master");
    eprintln!("cluster kill_master: {:?}", started.elapsed());
    assert_eq!(promoted, heir);
    assert_eq!(cluster.node(victim).unwrap().pid(), None);
    assert!(matches!(
        cluster.cmd_on(victim, &["PING"]).await,
        Err(TestkitError::NotRunning { .. })
    ));
    let masters_now = cluster.masters().await.unwrap();
    assert_eq!(masters_now.len(), 3);
    assert!(masters_now.contains(&heir) && !masters_now.contains(&victim));
    assert_eq!(cluster.replica_of(heir).await.unwrap(), None);
    assert_eq!(cluster.node_for_key(&key).await.unwrap(), heir);
    assert_eq!(
        cluster.cmd_on(heir, &["GET", &key]).await.unwrap(),
        format!("value-of-{key}")
    );
    assert_eq!(keys_in_slot(&cluster, heir, slot).await, "251");
    for node in cluster.nodes().iter().filter(|n| n.pid().is_some()) {
        let info = node.cmd(&["CLUSTER", "INFO"]).await.unwrap();
        assert!(info.contains("cluster_state:ok"), "{}: {info}", node.port());
    }
    // Its replica is gone too: a second crash could not be survived, so it is refused.
    let refused = cluster.kill_master(heir).await.unwrap_err();
    assert!(
        refused.to_string().contains("no running replica"),
        "{refused}"
    );
    cluster.wait_until_ok().await.unwrap();

    // --- the killed master comes back as its heir's replica, and can take over again ------------
    cluster
        .restart_node(victim, heir)
        .await
        .expect("restart_node");
    assert_eq!(cluster.replica_of(heir).await.unwrap(), Some(victim));
    assert_eq!(
        cluster.kill_master(heir).await.expect("kill_master again"),
        victim
    );
    cluster
        .restart_node(heir, victim)
        .await
        .expect("restart_node");

    // --- drop stops every process ----------------------------------------------------------------
    let pids: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
    assert_eq!(pids.len(), 6);
    let dir = cluster.dir().to_owned();
    drop(cluster);
    wait_until_all_gone(&pids);
    assert!(!dir.exists(), "{} removed", dir.display());
}
