//! Quiet partitions over real loopback TCP: they go quiet, wake on a write, elect anew when
//! their leader's broker dies, is cut off or its disk stalls, are not disturbed by a one-way
//! cut, and go quiet without a broker that is down and wake for its return (`unhappy.rs`:
//! what goes wrong with dormant ones).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::types::NodeId;
use crate::{
    Client, ClientConfig, Env, FaultInjector, FaultPoint, LocalCluster, NetFaults, Node, Offset,
    Record,
};

const TOPIC: &str = "quiet";
const PARTITIONS: u32 = 6;

/// Polls `condition` every 20 ms until it returns `Some`, for at most `limit`; panics naming
/// `what` after that.
async fn until<T>(limit: Duration, what: &str, mut condition: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    // Bounded by the deadline.
    loop {
        if let Some(value) = condition() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        // The pause between two polls, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Three brokers whose partitions go quiet after 300 ms unwritten and dormant 300 ms later, a
/// topic of six partitions each written once, and a client. Their liveness session is the
/// default's 2 s (twice the election timeout), not 1 s: a broker judged silent has its
/// partitions elect, and a machine busy with other tests can hold a broker's heartbeats or its
/// disk probe back for a second, which would be an election no test here asked for.
async fn quiet_cluster(
    dir: &std::path::Path,
    net: &Arc<NetFaults>,
) -> (LocalCluster, Client, Vec<Record>) {
    let net = Arc::clone(net);
    quiet_cluster_in(dir, |_| Env::default().with_net_faults(Arc::clone(&net))).await
}

/// [`quiet_cluster`], each broker in the environment `env` gives it.
async fn quiet_cluster_in(
    dir: &std::path::Path,
    env: impl FnMut(NodeId) -> Env,
) -> (LocalCluster, Client, Vec<Record>) {
    let listeners = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let cluster = LocalCluster::start_in(
        listeners,
        dir,
        |c| {
            c.heartbeat_interval = Duration::from_millis(100);
            c.election_timeout = Duration::from_millis(1000);
            c.quiesce_after = Some(Duration::from_millis(300));
            c.dormant_after = Some(Duration::from_millis(300));
            c.auto_leader_rebalance = false;
        },
        env,
    )
    .await
    .unwrap();
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    client.create_topic(TOPIC, PARTITIONS, 3).await.unwrap();
    let mut written = Vec::new();
    for p in 0..PARTITIONS {
        let record = Record::new(format!("first {p}"));
        client
            .send(TOPIC, p, std::slice::from_ref(&record))
            .await
            .unwrap();
        written.push(record);
    }
    (cluster, client, written)
}

/// Waits until every running broker has all its replicas of the topic quiet, and dormant
/// (their Raft members dropped): every scenario here starts from there.
async fn all_quiet(nodes: &[&Node]) {
    until(
        Duration::from_secs(30),
        "every replica to go dormant",
        || {
            nodes
                .iter()
                .all(|n| {
                    n.quiet_replicas() == PARTITIONS as usize
                        && n.dormant_replicas() == PARTITIONS as usize
                })
                .then_some(())
        },
    )
    .await;
}

/// Waits until every replica in `nodes` is quiet, then for each partition's (leader, term)
/// as all of them name it.
async fn quiet_leaders(nodes: &[&Node]) -> BTreeMap<u32, (NodeId, u64)> {
    all_quiet(nodes).await;
    until(Duration::from_secs(10), "leaders", || settled(nodes)).await
}

/// Waits until every replica is quiet, then stops broker `down`.
async fn stop_once_quiet(cluster: &mut LocalCluster, down: NodeId) {
    {
        let nodes: Vec<&Node> = cluster.nodes().collect();
        quiet_leaders(&nodes).await;
    }
    cluster.node(down).unwrap().stopping_with_its_cluster();
    cluster.stop(down).await.unwrap();
}

/// Waits until every broker of `nodes` holds exactly `records` in partition 0, committed.
async fn all_hold(nodes: &[&Node], records: &[&Record]) {
    let expected: Vec<Vec<u8>> = records.iter().map(|r| r.value.to_vec()).collect();
    for n in nodes {
        until(
            Duration::from_secs(30),
            "every replica to hold the records",
            || {
                (n.read(TOPIC, 0, Offset(0), 1 << 20).is_ok() && values(n, 0) == expected)
                    .then_some(())
            },
        )
        .await;
    }
}

/// Each partition's (leader, term) as every broker in `nodes` names them alike, if they do.
fn settled(nodes: &[&Node]) -> Option<BTreeMap<u32, (NodeId, u64)>> {
    (0..PARTITIONS)
        .map(|p| {
            let seen: Vec<(Option<NodeId>, u64)> = nodes
                .iter()
                .map(|n| n.status(TOPIC, p).ok().map(|s| (s.leader, s.term)))
                .collect::<Option<_>>()?;
            let (leader, term) = *seen.first()?;
            let leader = leader.filter(|l| nodes.iter().any(|n| n.id() == *l))?;
            seen.iter()
                .all(|s| *s == (Some(leader), term))
                .then_some((p, (leader, term)))
        })
        .collect()
}

/// The values of partition `p` as broker `node` holds them, committed.
fn values(node: &Node, p: u32) -> Vec<Vec<u8>> {
    node.read(TOPIC, p, Offset(0), 1 << 20)
        .unwrap()
        .iter()
        .flat_map(|b| b.records())
        .map(|(_, r)| r.value.to_vec())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partitions_go_quiet_and_a_write_wakes_them_without_an_election() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let before = quiet_leaders(&nodes).await;
    // A quiet Raft group is still described as whole: its followers hold its whole log.
    let described = client.describe(TOPIC).await.unwrap();
    assert!(described.iter().all(|p| p.isr.len() == 3), "{described:?}");

    for p in 0..PARTITIONS {
        client
            .send(TOPIC, p, &[Record::new(format!("second {p}"))])
            .await
            .unwrap();
    }
    let after = quiet_leaders(&nodes).await;
    assert_eq!(
        before, after,
        "a write to a quiet partition wakes it in its term"
    );
    for p in 0..PARTITIONS {
        for n in &nodes {
            until(Duration::from_secs(10), "both records everywhere", || {
                (values(n, p).len() == 2).then_some(())
            })
            .await;
        }
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A broker that dies while it leads quiet partitions: the survivors hear it fall silent,
/// wake those partitions and elect among themselves; every acknowledged record is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quiet_partitions_of_a_dead_broker_elect_new_leaders_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (mut cluster, client, written) = quiet_cluster(dir.path(), &net).await;
    let leaders = {
        let nodes: Vec<&Node> = cluster.nodes().collect();
        quiet_leaders(&nodes).await
    };
    let dead = leaders[&0].0;
    // No hand-off: as if the process died.
    cluster.node(dead).unwrap().stopping_with_its_cluster();
    cluster.stop(dead).await.unwrap();
    let survivors: Vec<&Node> = cluster.nodes().collect();
    let now = until(Duration::from_secs(30), "new leaders", || {
        settled(&survivors)
    })
    .await;
    for p in 0..PARTITIONS {
        assert_ne!(now[&p].0, dead);
        client
            .send(TOPIC, p, &[Record::new("after")])
            .await
            .unwrap();
        let expected = vec![written[p as usize].value.to_vec(), b"after".to_vec()];
        for n in &survivors {
            until(
                Duration::from_secs(10),
                "the records on every survivor",
                || (values(n, p) == expected).then_some(()),
            )
            .await;
        }
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A quiet leader cut off from both followers: they elect a new leader; the old one
/// acknowledges none of the 1,000 writes it is asked for; after the cut heals, one leader remains and
/// every replica holds the same records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_leader_cut_off_acknowledges_nothing_and_one_leader_remains() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let leaders = quiet_leaders(&nodes).await;
    let (old, _) = leaders[&0];
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();
    net.partition(&[old], &others);
    let rest: Vec<&Node> = nodes.iter().copied().filter(|n| n.id() != old).collect();
    until(
        Duration::from_secs(30),
        "a new leader of partition 0",
        || {
            let s = settled(&rest)?;
            (s[&0].0 != old).then_some(())
        },
    )
    .await;
    let old_node = cluster.node(old).unwrap();
    // A thousand writes at once on the old leader, each given two seconds.
    let attempts = (0..1000).map(|i| async move {
        let record = [Record::new(format!("cut off {i}"))];
        let append = old_node.append(TOPIC, 0, &record);
        matches!(
            tokio::time::timeout(Duration::from_secs(2), append).await,
            Ok(Ok(_))
        )
    });
    let acknowledged = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .filter(|acked| *acked)
        .count();
    assert_eq!(acknowledged, 0, "a deposed leader acknowledged writes");
    // Written through the new leader (a client may still be told of the old one by the old
    // one, which leads in its own eyes until it hears the new term).
    let new_leader = until(Duration::from_secs(10), "the new leader", || {
        settled(&rest).map(|s| s[&0].0)
    })
    .await;
    cluster
        .node(new_leader)
        .unwrap()
        .append(TOPIC, 0, &[Record::new("new leader")])
        .await
        .unwrap();
    net.heal();
    until(Duration::from_secs(30), "one leader everywhere", || {
        settled(&nodes)
    })
    .await;
    let expected = values(rest[0], 0);
    assert!(expected.iter().any(|v| v == b"new leader"));
    assert!(!expected.iter().any(|v| v.starts_with(b"cut off")));
    for n in &nodes {
        until(
            Duration::from_secs(30),
            "the same records everywhere",
            || (values(n, 0) == expected).then_some(()),
        )
        .await;
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A broker that stops hearing one other broker (one way) wakes the quiet partitions that
/// broker leads and runs pre-votes, but the third broker still hears the leader and refuses
/// them: no partition changes leader or term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_cut_disturbs_no_quiet_partition() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let before = quiet_leaders(&nodes).await;
    let leader = before[&0].0;
    let deaf = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    net.cut(leader, deaf);
    // Watched for six session timeouts (the brokers' 2 s): long enough for the deaf broker to
    // count the leader silent and campaign several times over.
    let watched = Instant::now();
    // Bounded by the time: a property watched over a window, not a wait.
    while watched.elapsed() < Duration::from_secs(12) {
        for p in 0..PARTITIONS {
            for n in &nodes {
                let s = n.status(TOPIC, p).unwrap();
                assert!(
                    s.term == before[&p].1,
                    "partition {p}'s term moved on broker {}: {s:?}",
                    n.id()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    net.heal();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A leader asked to hand a quiet partition to a broker that stopped a moment ago (its last
/// acknowledgement is recent) refuses: it hands over only to a member that answers a heartbeat
/// sent for the transfer. Otherwise it would be left handing over to no one, sending no
/// heartbeats and refusing writes until another member's election timer ran out, and in a
/// Raft group that went quiet again, no timer would ever run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_to_a_broker_just_stopped_is_refused_and_the_leader_keeps_writing() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (mut cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let leaders = {
        let nodes: Vec<&Node> = cluster.nodes().collect();
        quiet_leaders(&nodes).await
    };
    let (leader, term) = leaders[&0];
    // A write wakes the partition: every follower has just acknowledged the leader.
    client
        .send(TOPIC, 0, &[Record::new("woken")])
        .await
        .unwrap();
    let gone = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    cluster.node(gone).unwrap().stopping_with_its_cluster();
    cluster.stop(gone).await.unwrap();
    let node = cluster.node(leader).unwrap();
    let replica = node
        .broker
        .replica(&crate::types::PartitionId::new(TOPIC, 0))
        .unwrap();
    let refused = replica
        .raft
        .transfer_to(leader, gone, Duration::from_secs(5))
        .await;
    assert_eq!(
        refused,
        Err(crate::raft::replica::TransferRefused::NotHeardFrom)
    );
    // Written through the same leader, in the same term.
    let record = [Record::new("after")];
    tokio::time::timeout(Duration::from_secs(5), node.append(TOPIC, 0, &record))
        .await
        .expect("the write is acknowledged in time")
        .unwrap();
    let status = node.status(TOPIC, 0).unwrap();
    assert_eq!((status.leader, status.term), (Some(leader), term));
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A broker that is down does not keep the partitions it follows heartbeating: they go quiet
/// on the other two, written or not, and its return wakes them, so that it catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_go_quiet_without_a_broker_that_is_down_and_wake_for_its_return() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (mut cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let down = 3;
    stop_once_quiet(&mut cluster, down).await;
    for p in 0..PARTITIONS {
        client
            .send(TOPIC, p, &[Record::new(format!("while down {p}"))])
            .await
            .unwrap();
    }
    let up: Vec<&Node> = cluster.nodes().collect();
    quiet_leaders(&up).await;
    // The quiet Raft groups' in-sync replicas leave the broker that is down out.
    let described = client.describe(TOPIC).await.unwrap();
    assert!(
        described.iter().all(|p| !p.isr.contains(&down)),
        "{described:?}"
    );

    cluster.restart(down).await.unwrap();
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let back = cluster.node(down).unwrap();
    for p in 0..PARTITIONS {
        let expected = values(nodes[0], p);
        until(
            Duration::from_secs(30),
            "the returning broker to catch up",
            || {
                (back.read(TOPIC, p, Offset(0), 1 << 20).is_ok() && values(back, p) == expected)
                    .then_some(())
            },
        )
        .await;
    }
    quiet_leaders(&nodes).await;
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A broker whose disk stalls stops telling the others it is alive (its disk probe does not
/// finish): they wake the quiet partitions it led and elect new leaders, which take writes;
/// once its disk answers again, one leader remains and every replica holds the same records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_whose_disk_stalls_loses_its_quiet_partitions_to_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let disks: Vec<Arc<FaultInjector>> = (0..3).map(|_| FaultInjector::new()).collect();
    let env = |id: NodeId| Env::default().with_disk_faults(Arc::clone(&disks[id as usize - 1]));
    let (cluster, client, _) = quiet_cluster_in(dir.path(), env).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let leaders = quiet_leaders(&nodes).await;
    let stalled = leaders[&0].0;
    disks[stalled as usize - 1].stall(FaultPoint::Sync);
    let rest: Vec<&Node> = nodes
        .iter()
        .copied()
        .filter(|n| n.id() != stalled)
        .collect();
    let now = until(Duration::from_secs(60), "new leaders", || {
        settled(&rest).filter(|s| s.values().all(|(l, _)| *l != stalled))
    })
    .await;
    // Through whichever of the two leads when the write is made: a loaded machine can delay a
    // new leader's heartbeats past an election timeout, and the other then takes over.
    for p in 0..PARTITIONS {
        let record = [Record::new(format!("while stalled {p}"))];
        let mut leader = now[&p].0;
        let deadline = Instant::now() + Duration::from_secs(30);
        // Bounded by the deadline.
        loop {
            let node = cluster.node(leader).unwrap();
            match tokio::time::timeout(Duration::from_secs(10), node.append(TOPIC, p, &record))
                .await
                .expect("a write through the new leader in time")
            {
                Ok(_) => break,
                Err(crate::Error::NotLeader { .. }) if Instant::now() < deadline => {
                    leader = until(Duration::from_secs(30), "a leader again", || {
                        let s = settled(&rest)?;
                        s.get(&p).map(|(l, _)| *l).filter(|l| *l != stalled)
                    })
                    .await;
                }
                Err(e) => panic!("the write through broker {leader} failed: {e}"),
            }
        }
    }
    disks[stalled as usize - 1].clear();
    until(Duration::from_secs(60), "one leader everywhere", || {
        settled(&nodes)
    })
    .await;
    for p in 0..PARTITIONS {
        // A follower learns that a record is committed from its leader's next message.
        let expected = until(
            Duration::from_secs(60),
            "the write made while stalled, committed",
            || {
                let held = values(rest[0], p);
                held.iter()
                    .any(|v| v.starts_with(b"while stalled"))
                    .then_some(held)
            },
        )
        .await;
        for n in &nodes {
            until(
                Duration::from_secs(60),
                "the same records everywhere",
                || (values(n, p) == expected).then_some(()),
            )
            .await;
        }
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

mod unhappy;
