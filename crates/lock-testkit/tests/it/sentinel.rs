//! `RedisSentinel` against real redis-server processes: one deployment, one scenario.
//!
//! A deployment is five processes and a Sentinel failover takes seconds, so the whole life cycle
//! is one test on one deployment: start, manual failover, pause, a replica cut off before its
//! master is killed, drop. Every wait is on an event with a generous deadline (the testkit's
//! settle timeout); nothing sleeps for a fixed time.

use std::time::Instant;

use lock_testkit::{RedisSentinel, TestkitError};

use crate::common::wait_until_all_gone;

/// What every Sentinel answers to `SENTINEL GET-MASTER-ADDR-BY-NAME`.
async fn addresses(sentinel: &RedisSentinel) -> Vec<String> {
    let mut all = Vec::new();
    for s in sentinel.sentinels() {
        let reply = s
            .cmd(&[
                "SENTINEL",
                "GET-MASTER-ADDR-BY-NAME",
                sentinel.service_name(),
            ])
            .await
            .unwrap();
        all.push(reply);
    }
    all
}

#[tokio::test]
async fn a_sentinel_deployment_fails_over_loses_cut_off_writes_and_stops_on_drop() {
    // --- start ---------------------------------------------------------------------------------
    let started = Instant::now();
    let mut sentinel = RedisSentinel::start().await.expect("the deployment starts");
    eprintln!("sentinel start: {:?}", started.elapsed());

    assert_eq!(sentinel.service_name(), "mymaster");
    let s: Vec<u16> = sentinel.sentinels().iter().map(|s| s.port()).collect();
    assert_eq!(s.len(), 3);
    assert_eq!(
        sentinel.url(),
        format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName=mymaster&node=127.0.0.1:{}&node=127.0.0.1:{}",
            s[0], s[1], s[2]
        )
    );
    let first = sentinel.nodes()[0].port();
    let second = sentinel.nodes()[1].port();
    assert_eq!(sentinel.master().port(), first);
    assert_eq!(sentinel.replica().port(), second);
    assert_eq!(sentinel.current_master_port().await.unwrap(), first);
    assert_eq!(
        addresses(&sentinel).await,
        vec![format!("127.0.0.1\n{first}"); 3]
    );
    for s in sentinel.sentinels() {
        let info = s.cmd(&["INFO", "sentinel"]).await.unwrap();
        assert!(
            info.contains(&format!(
                "status=ok,address=127.0.0.1:{first},slaves=1,sentinels=3"
            )),
            "{info}"
        );
        let config = sentinel.dir().join(format!("sentinel-{}.conf", s.port()));
        assert!(config.is_file(), "{} exists", config.display());
    }
    let role = sentinel.replica().cmd(&["ROLE"]).await.unwrap();
    assert!(
        role.starts_with(&format!("slave\n127.0.0.1\n{first}\nconnected")),
        "{role}"
    );
    sentinel.master().cmd(&["SET", "kept", "1"]).await.unwrap();
    assert_eq!(
        sentinel
            .master()
            .cmd(&["WAIT", "1", "10000"])
            .await
            .unwrap(),
        "1"
    );
    assert_eq!(sentinel.replica().cmd(&["GET", "kept"]).await.unwrap(), "1");

    // --- manual failover swaps the roles -------------------------------------------------------
    let started = Instant::now();
    let promoted = sentinel.failover().await.expect("failover");
    eprintln!("sentinel failover: {:?}", started.elapsed());
    assert_eq!(promoted, second);
    assert_eq!(sentinel.master().port(), second);
    assert_eq!(sentinel.replica().port(), first);
    assert_eq!(sentinel.current_master_port().await.unwrap(), second);
    assert_eq!(
        addresses(&sentinel).await,
        vec![format!("127.0.0.1\n{second}"); 3]
    );
    let role = sentinel.master().cmd(&["ROLE"]).await.unwrap();
    assert!(role.starts_with("master"), "{role}");
    // As with a real Sentinel, the old master is not demoted yet: it still says it is master.
    let role = sentinel.replica().cmd(&["ROLE"]).await.unwrap();
    assert!(
        role.starts_with("master"),
        "old master right after failover: {role}"
    );
    // The Sentinels demote it themselves, 10 to 20 s later.
    let settling = Instant::now();
    sentinel
        .wait_settled()
        .await
        .expect("the Sentinels demote the old master");
    eprintln!(
        "sentinel old master demoted by the Sentinels after {:?}",
        settling.elapsed()
    );
    let role = sentinel.replica().cmd(&["ROLE"]).await.unwrap();
    assert!(
        role.starts_with(&format!("slave\n127.0.0.1\n{second}\nconnected")),
        "{role}"
    );
    assert_eq!(sentinel.master().cmd(&["GET", "kept"]).await.unwrap(), "1");

    // --- pause / resume ------------------------------------------------------------------------
    sentinel.pause_replica().unwrap();
    assert!(matches!(
        sentinel.replica().cmd(&["PING"]).await,
        Err(TestkitError::Paused { .. })
    ));
    let refused = sentinel.failover().await.unwrap_err();
    assert!(refused.to_string().contains("paused"), "{refused}");
    sentinel.resume_replica().unwrap();
    assert_eq!(sentinel.replica().cmd(&["PING"]).await.unwrap(), "PONG");

    // --- a replica cut off before its master dies is promoted without the later writes ----------
    sentinel.cut_off_replica().await.expect("cut_off_replica");
    sentinel.master().cmd(&["SET", "lost", "1"]).await.unwrap();
    assert_eq!(
        sentinel.master().cmd(&["WAIT", "1", "200"]).await.unwrap(),
        "0"
    );
    assert_eq!(sentinel.replica().cmd(&["GET", "lost"]).await.unwrap(), "");
    let started = Instant::now();
    let promoted = sentinel.kill_master().await.expect("kill_master");
    eprintln!("sentinel kill_master: {:?}", started.elapsed());
    assert_eq!(promoted, first);
    assert_eq!(sentinel.master().port(), first);
    assert_eq!(sentinel.replica().port(), second);
    assert_eq!(sentinel.replica().pid(), None, "the old master was killed");
    assert_eq!(sentinel.current_master_port().await.unwrap(), first);
    assert_eq!(
        addresses(&sentinel).await,
        vec![format!("127.0.0.1\n{first}"); 3]
    );
    let role = sentinel.master().cmd(&["ROLE"]).await.unwrap();
    assert!(role.starts_with("master"), "{role}");
    assert_eq!(sentinel.master().cmd(&["GET", "kept"]).await.unwrap(), "1");
    assert_eq!(
        sentinel.master().cmd(&["GET", "lost"]).await.unwrap(),
        "",
        "the write after the cut-off is lost"
    );
    assert_eq!(
        sentinel
            .master()
            .cmd(&["CONFIG", "GET", "masterauth"])
            .await
            .unwrap(),
        "masterauth\n",
        "the promoted node's masterauth is cleared"
    );
    assert_eq!(
        sentinel.master().cmd(&["SET", "after", "1"]).await.unwrap(),
        "OK"
    );
    let refused = sentinel.kill_master().await.unwrap_err();
    assert!(refused.to_string().contains("killed"), "{refused}");

    // --- the killed node comes back as a replica, and can be failed over to again --------------
    sentinel.restart_replica().await.expect("restart_replica");
    assert_eq!(sentinel.replica().port(), second);
    assert_eq!(
        sentinel.replica().cmd(&["GET", "after"]).await.unwrap(),
        "1"
    );
    let promoted = sentinel
        .kill_master()
        .await
        .expect("kill_master after the restart");
    assert_eq!(promoted, second);
    sentinel.restart_replica().await.expect("restart_replica");

    // --- drop stops every process ----------------------------------------------------------------
    let pids: Vec<u32> = sentinel
        .nodes()
        .iter()
        .chain(sentinel.sentinels())
        .filter_map(|n| n.pid())
        .collect();
    assert_eq!(pids.len(), 5, "three Sentinels and both nodes");
    let dir = sentinel.dir().to_owned();
    drop(sentinel);
    wait_until_all_gone(&pids);
    assert!(!dir.exists(), "{} removed", dir.display());
}
