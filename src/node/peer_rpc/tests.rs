//! Unit tests of `node/peer_rpc.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::raft::storage::{RAFT_META, read_meta, write_meta};
use crate::raft::types::Vote;
use crate::types::{NodeId, PartitionId};
use crate::{Client, ClientConfig, Env, LocalCluster, NetFaults, Node, Record};

use crate::node::replica_dir::partition_dir;

/// Polls `condition` every 20 ms until it returns `Some`, for at most `limit`; panics naming
/// `what` after that.
async fn until<T>(limit: Duration, what: &str, mut condition: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    // Bounded by the deadline.
    loop {
        if let Some(value) = condition().await {
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

/// The leader and term every running broker hosting `id` agrees on.
fn settled_leader(nodes: &[&Node], id: &PartitionId) -> Option<(NodeId, u64)> {
    let seen: Vec<(Option<NodeId>, u64)> = nodes
        .iter()
        .map(|n| n.status(&id.topic, id.partition).ok())
        .map(|s| s.map(|s| (s.leader, s.term)))
        .collect::<Option<_>>()?;
    let (leader, term) = *seen.first()?;
    let leader = leader.filter(|l| nodes.iter().any(|n| n.id() == *l))?;
    seen.iter()
        .all(|s| *s == (Some(leader), term))
        .then_some((leader, term))
}

/// The values of the records a broker's replica of `id` holds.
fn values(node: &Node, id: &PartitionId) -> Option<Vec<Vec<u8>>> {
    let batches = node
        .read(&id.topic, id.partition, crate::Offset(0), 1 << 20)
        .ok()?;
    Some(
        batches
            .iter()
            .flat_map(|b| b.records())
            .map(|(_, r)| r.value.to_vec())
            .collect(),
    )
}

/// A broker that slept through its topic's deletion and re-creation comes back with the old
/// topic's replica, and runs it until it learns of the deletion. The new topic's partition is
/// another Raft group under the same name, and the old replica must not answer it.
///
/// Here the old replica's vote is of the new leader's term and names the other live broker,
/// as the old Raft group's leader may well have been (`T3-N2` against the new leader's `T3-N1`
/// when a topic's creation and deletion failed so, one run in three). When Raft requests
/// did not name their topic, the old replica answered the new leader's probe with that vote,
/// which openraft cannot order against the leader's own: the leader dropped the answer, and
/// with it the probe, which it then awaited forever, so that the broker's replica of the new
/// topic never got an entry. Now the old replica refuses the probe, the leader probes again,
/// and the broker's new replica, once it replaced the old one, catches up.
///
/// Broker 3 is kept from the metadata leader (so from learning of the deletion) until the new
/// leader has had ample time to probe it: until broker 3's metadata member, hearing from no
/// leader, ran for leader twice. The old replica runs no election meanwhile: a term of its
/// own above the new leader's would depose that leader, whose successor probes afresh (in the
/// failures, the old replica was gone before its first election timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_of_a_deleted_topic_never_answers_for_the_topic_created_again() {
    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let listeners = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let mut cluster = LocalCluster::start_in(
        listeners,
        dir.path(),
        |c| {
            c.heartbeat_interval = Duration::from_millis(100);
            c.election_timeout = Duration::from_millis(1000);
            c.auto_leader_rebalance = false;
        },
        |_| Env::default().with_net_faults(Arc::clone(&net)),
    )
    .await
    .unwrap();
    let client = Client::connect(&cluster.addrs()[..2], ClientConfig::default())
        .await
        .unwrap();
    let id = PartitionId::new("t", 0);
    client.create_topic("t", 1, 3).await.unwrap();
    client.send("t", 0, &[Record::new("old")]).await.unwrap();
    let node3 = cluster.node(3).unwrap();
    until(
        Duration::from_secs(10),
        "broker 3 to hold the old record",
        async || (values(node3, &id)? == [b"old".to_vec()]).then_some(()),
    )
    .await;
    cluster.stop(3).await.unwrap();

    client.delete_topic("t").await.unwrap();
    // A broker refuses to create a topic its own copy of the catalog still has.
    until(
        Duration::from_secs(10),
        "brokers 1 and 2 to drop the topic",
        async || {
            let gone = |n: u64| {
                let replica = cluster.node(n).map(|n| n.broker.replica(&id));
                matches!(replica, Some(Err(crate::Error::UnknownTopic(_))))
            };
            (gone(1) && gone(2)).then_some(())
        },
    )
    .await;
    client.create_topic("t", 1, 3).await.unwrap();
    client.send("t", 0, &[Record::new("new")]).await.unwrap();
    let (leader, term, other, meta_leader, topic_id) = {
        let live = [cluster.node(1).unwrap(), cluster.node(2).unwrap()];
        let (mut leader, mut term) = until(
            Duration::from_secs(10),
            "the new topic's leader",
            async || settled_leader(&live, &id),
        )
        .await;
        let meta_leader = until(Duration::from_secs(10), "a metadata leader", async || {
            live[0].broker.meta.raft.leader()
        })
        .await;
        let other = |l: NodeId| if l == 1 { 2 } else { 1 };
        // The new leader must not lead the metadata Raft group: broker 3 is to hear from the one
        // and not from the other.
        if leader == meta_leader {
            let (from, to) = (leader, other(leader));
            let replica = live[from as usize - 1].broker.replica(&id).unwrap();
            // Refused until `to` holds every entry the leader has.
            until(
                Duration::from_secs(10),
                "the leadership handed over",
                async || {
                    let moved = replica
                        .raft
                        .transfer_to(from, to, Duration::from_secs(1))
                        .await;
                    moved.ok()
                },
            )
            .await;
            (leader, term) = until(
                Duration::from_secs(10),
                "the new leader settled",
                async || settled_leader(&live, &id).filter(|(l, _)| *l == to),
            )
            .await;
        }
        let topic_id = live[0].broker.replica(&id).unwrap().topic_id;
        (leader, term, other(leader), meta_leader, topic_id)
    };

    // The old replica's vote: the new leader's term, the other live broker's leadership.
    let meta_path = partition_dir(&cluster.data_dir(3).unwrap(), &id).join(RAFT_META);
    let mut meta = read_meta(&meta_path).unwrap();
    meta.vote = Some(Vote::new_committed(term, other));
    write_meta(&meta_path, &meta).unwrap();

    net.partition(&[3], &[meta_leader]);
    cluster.restart(3).await.unwrap();
    let nodes = [
        cluster.node(1).unwrap(),
        cluster.node(2).unwrap(),
        cluster.node(3).unwrap(),
    ];
    let node3 = nodes[2];
    // Started once broker 3 replayed its copy of the metadata log.
    let old = until(
        Duration::from_secs(10),
        "broker 3's old replica",
        async || node3.broker.replica(&id).ok(),
    )
    .await;
    assert_ne!(
        old.topic_id, topic_id,
        "broker 3 runs the old topic's replica"
    );
    old.raft.allow_elections(false);
    drop(old);
    // Its campaigns raise its term, which shows how long it went without a leader (a
    // pre-vote, refused by the broker that still hears the leader, would not).
    node3.broker.meta.raft.pre_vote(false);
    let meta_term = node3.broker.meta.raft.state().term;
    until(
        Duration::from_secs(20),
        "broker 3's metadata member to run for leader twice",
        async || (node3.broker.meta.raft.state().term >= meta_term + 2).then_some(()),
    )
    .await;
    net.heal();

    until(
        Duration::from_secs(20),
        "broker 3's replica of the new topic to catch up",
        async || {
            let replica = node3.broker.replica(&id).ok()?;
            (replica.topic_id == topic_id && values(node3, &id)? == [b"new".to_vec()]).then_some(())
        },
    )
    .await;
    assert_eq!(
        settled_leader(&nodes, &id),
        Some((leader, term)),
        "the new topic's leader kept its term throughout"
    );
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A pre-vote asks a voter whether it would vote for a candidate at the next term, and
/// changes nothing on it: refused while the voter hears its leader, granted once it has not
/// for a lease, and the voter's term is the same after both. On a connection that said no
/// Hello (protocol version 1) the operation is unknown: the connection is closed unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_vote_is_refused_while_the_leader_lives_and_changes_nothing() {
    use openraft::raft::{VoteRequest, VoteResponse};

    use crate::raft::types::{C, LogId};
    use crate::transport::frame::Op;
    use crate::transport::{CallError, Peer};

    let dir = tempfile::tempdir().unwrap();
    let net = NetFaults::new();
    let listeners = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let cluster = LocalCluster::start_in(
        listeners,
        dir.path(),
        |c| {
            c.topics = vec![("pre".into(), 1)];
            c.heartbeat_interval = Duration::from_millis(100);
            c.election_timeout = Duration::from_millis(1000);
        },
        |_| Env::default().with_net_faults(Arc::clone(&net)),
    )
    .await
    .unwrap();
    let id = PartitionId::new("pre", 0);
    let nodes: Vec<&Node> = cluster.nodes().collect();
    let (leader, term) = until(Duration::from_secs(20), "a settled leader", async || {
        settled_leader(&nodes, &id)
    })
    .await;
    let followers: Vec<NodeId> = (1..=3).filter(|n| *n != leader).collect();
    let (voter, candidate) = (cluster.node(followers[0]).unwrap(), followers[1]);
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let peer = Peer::new(voter.addr().into(), 1 << 20, stopping.clone(), None);
    let rpc = VoteRequest::<C>::new(
        Vote::new(term + 1, candidate),
        Some(LogId::new_term_index(term, 1 << 40)),
    );
    let topic_id = crate::catalog::CONFIGURED_TOPIC_ID;
    let body = crate::transport::body::encode(&(&id, topic_id, &rpc)).unwrap();
    let pre_vote = async |peer: &Peer| -> VoteResponse<C> {
        let answer = peer
            .call(Op::PreVote, body.clone(), Duration::from_secs(5))
            .await
            .unwrap();
        let answer: Result<VoteResponse<C>, String> = postcard::from_bytes(&answer).unwrap();
        answer.unwrap()
    };
    assert_eq!(
        peer.version(Duration::from_secs(5)).await.unwrap(),
        crate::PROTOCOL_VERSION
    );
    assert!(
        !pre_vote(&peer).await.vote_granted,
        "the voter hears its leader"
    );
    assert_eq!(voter.status("pre", 0).unwrap().term, term);

    // The leader cut off from both followers, which run no election of their own meanwhile.
    for n in &followers {
        let replica = cluster.node(*n).unwrap().broker.replica(&id).unwrap();
        replica.raft.allow_elections(false);
    }
    net.partition(&[leader], &followers);
    until(
        Duration::from_secs(10),
        "the voter to grant a pre-vote once its leader's lease is over",
        async || pre_vote(&peer).await.vote_granted.then_some(()),
    )
    .await;
    assert_eq!(
        voter.status("pre", 0).unwrap().term,
        term,
        "a pre-vote changes no term"
    );

    // Protocol version 1 knows no pre-vote: a caller that speaks it does not send one, and a
    // broker closes a connection of version 1 that does.
    let old = Peer::new(voter.addr().into(), 1 << 20, stopping, None).speaking(1);
    assert_eq!(old.version(Duration::from_secs(5)).await.unwrap(), 1);
    let refused = old
        .call(Op::PreVote, body.clone(), Duration::from_secs(5))
        .await;
    assert!(
        matches!(
            refused,
            Err(CallError::TooNew {
                needs: 2,
                speaks: 1,
                ..
            })
        ),
        "{refused:?}"
    );
    let mut raw = tokio::net::TcpStream::connect(voter.addr()).await.unwrap();
    let frame = crate::transport::frame::OutFrame::new(
        crate::transport::frame::Kind::Request,
        Op::PreVote,
        1,
        body.clone(),
    );
    frame.write_to(&mut raw).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(&mut raw, &mut rest),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "closed unanswered: {read:?}, {} bytes",
        rest.len()
    );
    net.heal();
    drop(nodes);
    cluster.shutdown().await.unwrap();
}
