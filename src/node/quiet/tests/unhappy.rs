//! The unhappy paths of quiet and dormant partitions: a leader that cannot be built again or
//! is found damaged, a withdrawal of quiet lost on its way, a vote from the parked leader
//! itself, a hand-over to a member that does not answer, the leader balancer while a preferred
//! broker is down.

use super::*;

/// A dormant leader whose Raft member cannot be built again (its store cannot be read) stops
/// as a member stopped by a storage error does: it names no leader, supervision brings it back,
/// its quiet followers wake when it campaigns and elect, and the write that found it is
/// acknowledged once they have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dormant_leader_that_cannot_be_built_again_is_brought_back_and_its_partition_elects() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, written) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let leaders = quiet_leaders(&nodes).await;
    let (leader, term) = leaders[&0];
    let node = cluster.node(leader).unwrap();
    let id = crate::types::PartitionId::new(TOPIC, 0);
    let replica = node.broker.replica(&id).unwrap();
    replica
        .raft
        .failing_builds
        .store(u32::MAX, std::sync::atomic::Ordering::Release);
    let record = Record::new("after a failed build");
    let client = Arc::new(client);
    let send = {
        let client = Arc::clone(&client);
        let record = record.clone();
        tokio::spawn(async move { client.send(TOPIC, 0, &[record]).await })
    };
    until(Duration::from_secs(10), "the build to fail", || {
        replica.raft.stopped().map(|_| ())
    })
    .await;
    assert_eq!(
        replica.raft.leader(),
        None,
        "a stopped member leads nothing"
    );
    // Its files stay locked while any handle to it is held.
    let gone = Arc::downgrade(&replica);
    drop(replica);
    tokio::time::timeout(Duration::from_secs(30), send)
        .await
        .expect("the write is acknowledged in time")
        .unwrap()
        .unwrap();
    until(
        Duration::from_secs(30),
        "the replica to be brought back",
        || {
            let now = node.broker.replica(&id).ok()?;
            (gone.upgrade().is_none() && !now.raft.is_dormant()).then_some(())
        },
    )
    .await;
    elected_anew(&nodes, &[&written[0], &record], term).await;
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A leader built again from dormancy, whose lease no write renewed since, checks that the
/// target of a transfer answers a heartbeat sent for the transfer: an acknowledgement from
/// before, as old as the rebuild, does not count, so a target cut off since is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_leader_hands_over_only_to_a_member_that_answers_now() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let leaders = quiet_leaders(&nodes).await;
    let (leader, _) = leaders[&0];
    let target = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let node = cluster.node(leader).unwrap();
    let replica = node
        .broker
        .replica(&crate::types::PartitionId::new(TOPIC, 0))
        .unwrap();
    // Built again by something other than a write; then an acknowledgement of a heartbeat
    // sent after the rebuild, not only of the probe openraft sends as it restores.
    drop(replica.raft.awake().await.unwrap());
    let woke = Instant::now();
    until(
        Duration::from_secs(10),
        "the target to acknowledge the woken leader",
        || {
            let members = replica.raft.state().members?;
            let age = members.get(&target)?.ack_age?;
            (age < woke.elapsed()).then_some(())
        },
    )
    .await;
    net.cut(leader, target);
    net.cut(target, leader);
    let refused = replica
        .raft
        .transfer_to(leader, target, Duration::from_secs(2))
        .await;
    assert_eq!(
        refused,
        Err(crate::raft::replica::TransferRefused::NotHeardFrom)
    );
    net.heal();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// The leader balancer does not build a dormant partition again to hand it to a preferred
/// replica whose broker is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_balance_leaves_dormant_partitions_alone_while_their_preferred_broker_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (mut cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let down = 3;
    stop_once_quiet(&mut cluster, down).await;
    let up: Vec<&Node> = cluster.nodes().collect();
    let leaders = until(
        Duration::from_secs(30),
        "every partition led by a broker that is up",
        || {
            let leaders = settled(&up)?;
            leaders.values().all(|(l, _)| *l != down).then_some(leaders)
        },
    )
    .await;
    let moved = (0..PARTITIONS)
        .filter(|p| {
            let replicas = assignment(&up, *p);
            replicas.first() == Some(&down) && leaders[p].0 != down
        })
        .count();
    assert!(moved > 0, "broker {down} was preferred for some partition");
    all_quiet(&up).await;
    for n in &up {
        assert_eq!(n.broker.rebalance_leaders().await, 0);
        assert_eq!(
            n.dormant_replicas(),
            PARTITIONS as usize,
            "broker {}",
            n.id()
        );
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// Partition `p`'s replicas, preferred first, as the catalog of `nodes[0]` has them.
fn assignment(nodes: &[&Node], p: u32) -> Vec<NodeId> {
    nodes[0]
        .broker
        .catalog
        .read()
        .topic(TOPIC)
        .and_then(|t| t.assignment.get(p as usize).cloned())
        .unwrap_or_default()
}

/// A read that finds a dormant leader's files damaged has its replica rebuilt from the others.
/// Its parked followers are woken before it goes (they would otherwise wait for ever for a
/// leader whose broker stays live), elect a leader and take writes, and the rebuilt replica
/// copies the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dormant_leader_found_damaged_is_rebuilt_and_its_partition_elects() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, written) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let leaders = quiet_leaders(&nodes).await;
    let (leader, term) = leaders[&0];
    damage_and_read(dir.path(), cluster.node(leader).unwrap(), &written[0]);
    let record = Record::new("after the damage");
    tokio::time::timeout(
        Duration::from_secs(30),
        client.send(TOPIC, 0, std::slice::from_ref(&record)),
    )
    .await
    .expect("the write is acknowledged in time")
    .unwrap();
    elected_anew(&nodes, &[&written[0], &record], term).await;
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// Flips a byte of `record` in broker `node`'s first segment of partition 0 (under `dir`), and
/// reads the partition there, which finds the damage.
fn damage_and_read(dir: &std::path::Path, node: &Node, record: &Record) {
    use std::os::unix::fs::FileExt;
    let replica_dir = dir.join(node.id().to_string()).join("quiet-0");
    let mut segments: Vec<std::path::PathBuf> = std::fs::read_dir(&replica_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    // Through the page cache the mapping shares, as a failing disk or a stray write would.
    let bytes = std::fs::read(&segments[0]).unwrap();
    let at = bytes
        .windows(record.value.len())
        .position(|w| w == record.value.as_ref())
        .expect("the record is in the first segment");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segments[0])
        .unwrap();
    file.write_all_at(&[bytes[at] ^ 0x10], at as u64).unwrap();
    drop(file);
    match node.read(TOPIC, 0, Offset(0), 1 << 20) {
        Err(crate::Error::Corrupt { .. }) => {}
        other => panic!("a damaged segment was read: {:?}", other.map(|b| b.len())),
    }
}

/// A withdrawal of quiet that does not reach a member's broker is sent again until it does:
/// the followers of a dormant leader found damaged, which its withdrawal is the only thing
/// to wake (its broker stays live, and its replica, rebuilt empty, never campaigns), elect,
/// and the write that finds the partition leaderless is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_of_quiet_lost_on_its_way_is_sent_again_and_the_partition_elects() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, written) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let leaders = quiet_leaders(&nodes).await;
    let (leader, term) = leaders[&0];
    let node = cluster.node(leader).unwrap();
    // The first sending to each of the two followers.
    node.broker.lost_withdrawals.store(2, Ordering::Release);
    damage_and_read(dir.path(), node, &written[0]);
    let record = Record::new("after a lost withdrawal");
    tokio::time::timeout(
        Duration::from_secs(30),
        client.send(TOPIC, 0, std::slice::from_ref(&record)),
    )
    .await
    .expect("the write is acknowledged in time")
    .unwrap();
    assert_eq!(node.broker.lost_withdrawals.load(Ordering::Acquire), 0);
    elected_anew(&nodes, &[&written[0], &record], term).await;
    assert!(node.broker.withdrawals.lock().is_empty());
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A parked follower refuses a pre-vote from another member while its leader's broker is
/// live, and stays parked; a pre-vote from the parked leader itself (a leader that campaigns
/// lost what it led with) is not refused for quiet, and wakes the follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_follower_serves_a_vote_from_its_own_leader_and_wakes() {
    use openraft::raft::{VoteRequest, VoteResponse};

    use crate::raft::types::{C, LogId, Vote};
    use crate::transport::Peer;
    use crate::transport::frame::Op;

    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let (cluster, client, _) = quiet_cluster(dir.path(), &net).await;
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let leaders = quiet_leaders(&nodes).await;
    let (leader, term) = leaders[&0];
    let followers: Vec<NodeId> = (1..=3).filter(|n| *n != leader).collect();
    let (voter, other) = (cluster.node(followers[0]).unwrap(), followers[1]);
    let id = crate::types::PartitionId::new(TOPIC, 0);
    let replica = voter.broker.replica(&id).unwrap();
    let topic_id = replica.topic_id;
    assert_eq!(replica.raft.parked_under(), Some(leader));
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let peer = Peer::new(voter.addr().into(), 1 << 20, stopping, None);
    let pre_vote = async |candidate: NodeId| -> VoteResponse<C> {
        let rpc = VoteRequest::<C>::new(
            Vote::new(term + 1, candidate),
            Some(LogId::new_term_index(term, 1 << 40)),
        );
        let body = crate::transport::body::encode(&(&id, topic_id, &rpc)).unwrap();
        let answer = peer
            .call(Op::PreVote, body, Duration::from_secs(5))
            .await
            .unwrap();
        let answer: Result<VoteResponse<C>, String> = postcard::from_bytes(&answer).unwrap();
        answer.unwrap()
    };
    assert!(!pre_vote(other).await.vote_granted, "its leader is live");
    assert_eq!(replica.raft.parked_under(), Some(leader), "still parked");
    assert_eq!(voter.status(TOPIC, 0).unwrap().term, term);
    pre_vote(leader).await;
    assert!(
        !replica.raft.is_parked(),
        "woken by its own leader's pre-vote"
    );
    drop(replica);
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// Waits until every broker of `nodes` holds exactly `records` in partition 0, and checks
/// that the partition's term moved past `term` (it elected).
async fn elected_anew(nodes: &[&Node], records: &[&Record], term: u64) {
    all_hold(nodes, records).await;
    let status = nodes[0].status(TOPIC, 0).unwrap();
    assert!(status.term > term, "{status:?}");
}

/// An offer of quiet that reaches a member's broker after the withdrawal of its leadership
/// (the two crossed on their way) is refused there: a member parked under a leadership its
/// leader's broker withdrew would wait for a leader that is gone. The same offer is taken
/// where no withdrawal came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offer_of_quiet_that_arrives_after_its_withdrawal_is_refused() {
    use crate::node::Broker;
    use crate::node::quiet::{QuiesceRequest, QuietGroup};
    let dir = tempfile::tempdir().unwrap();
    let listeners = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    // No quiet on its own during the test: the offers are made by hand.
    let cluster = LocalCluster::start_in(
        listeners,
        dir.path(),
        |c| {
            c.topics = vec![(TOPIC.into(), 1)];
            c.quiesce_after = Some(Duration::from_secs(600));
            c.auto_leader_rebalance = false;
        },
        |_| Env::default(),
    )
    .await
    .unwrap();
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let id = crate::types::PartitionId::new(TOPIC, 0);
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    client.send(TOPIC, 0, &[Record::new("one")]).await.unwrap();
    let (leader, _) = until(Duration::from_secs(20), "a settled leader", || {
        let s: Vec<_> = nodes.iter().map(|n| n.status(TOPIC, 0).ok()).collect();
        let first = s.first()?.clone()?;
        let same = s.iter().all(|x| {
            x.as_ref().is_some_and(|x| {
                (x.leader, x.term, x.high_watermark)
                    == (first.leader, first.term, first.high_watermark)
            })
        });
        (same && first.high_watermark == Offset(1)).then_some((first.leader?, first.term))
    })
    .await;
    let replica = cluster.node(leader).unwrap().broker.replica(&id).unwrap();
    let offer = until(Duration::from_secs(10), "an offer of quiet", || {
        replica.raft.quiet_offer(leader, Duration::ZERO, |_| true)
    })
    .await;
    let group = QuietGroup {
        partition: id.clone(),
        topic_id: replica.topic_id,
        vote: offer.vote,
        last: offer.last,
    };
    let mut withdrawal = group.clone();
    withdrawal.vote.committed = false;
    let ask = |to: &Node, g: &QuietGroup| {
        to.broker.serve_quiesce(QuiesceRequest {
            from: leader,
            groups: vec![g.clone()],
        })
    };
    let followers: Vec<&Node> = nodes.iter().copied().filter(|n| n.id() != leader).collect();
    until(
        Duration::from_secs(10),
        "a follower to take the offer",
        || (ask(followers[0], &group) == [true]).then_some(()),
    )
    .await;
    assert_eq!(ask(followers[1], &withdrawal), [true], "acknowledged");
    let withdrawn = |n: &Node| Broker::was_withdrawn(&n.broker.withdrawn.lock(), &group);
    assert!(withdrawn(followers[1]) && !withdrawn(followers[0]));
    assert_eq!(
        ask(followers[1], &group),
        [false],
        "the leadership was withdrawn"
    );
    let other = followers[1].broker.replica(&id).unwrap();
    assert!(!other.raft.is_parked());
    drop((replica, other));
    drop(client);
    cluster.shutdown().await.unwrap();
}
