//! Topics and brokers through the metadata Raft group: topics created and deleted at run time,
//! stale leader hints, a broker restarted alone or back on another address, brokers joining and
//! partitions moving onto them, readiness, and the disk of quiet partitions.

use super::*;

/// Topics created and deleted at run time through the metadata Raft group: Kafka's replica
/// spread, metadata from a broker that hosts no replica names the real leader, a write
/// through such a broker reaches the leader, a deleted topic's data is gone on every broker
/// (one that was down at the time included), and a topic created again under the same name
/// starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_and_deleted_through_the_metadata_raft_group() {
    use replog::{Client, ClientConfig};
    const ORDERS: &str = "orders";
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let mut nodes = start_all(|id| bare(id, &addrs, dir.path())).await;
    let client = Client::connect(&[addrs[2]], ClientConfig::default())
        .await
        .unwrap();

    // Four partitions, two replicas each, spread as Kafka spreads them: every broker leads
    // at least one partition first and hosts some.
    client.create_topic(ORDERS, 4, 2).await.unwrap();
    let described = client.describe(ORDERS).await.unwrap();
    assert_eq!(described.len(), 4);
    let mut firsts = Vec::new();
    for d in &described {
        assert_eq!(d.replicas.len(), 2, "{d}");
        assert!(d.replicas.contains(&d.leader.unwrap()), "{d}");
        let p = d.partition.partition;
        let mut hosted = hosts(&nodes, ORDERS, p);
        hosted.sort_unstable();
        let mut replicas = d.replicas.clone();
        replicas.sort_unstable();
        assert_eq!(
            hosted, replicas,
            "partition {p} runs exactly on its replicas"
        );
        firsts.push(d.replicas[0]);
    }
    firsts.sort_unstable();
    firsts.dedup();
    assert_eq!(
        firsts,
        vec![1, 2, 3],
        "preferred leaders spread over the brokers"
    );

    // A broker hosting no replica of a partition names its real leader, and a client that
    // knows only that broker writes to the partition through it.
    let d = &described[0];
    let outsider = (1..=3).find(|id| !d.replicas.contains(id)).unwrap();
    let via_outsider = Client::connect(&[addrs[outsider as usize - 1]], ClientConfig::default())
        .await
        .unwrap();
    let seen = via_outsider.describe(ORDERS).await.unwrap();
    assert_eq!(seen[0].leader, d.leader, "the outsider names the leader");
    let delivery = via_outsider
        .send(ORDERS, 0, &[Record::new("first")])
        .await
        .unwrap();
    assert_eq!(delivery.base_offset, Offset(0));
    let read = via_outsider
        .fetch(ORDERS, 0, Offset(0), 1 << 20, None)
        .await
        .unwrap();
    assert_eq!(read[0].records().next().unwrap().1.value, "first");
    client.send(ORDERS, 1, &[Record::new("old")]).await.unwrap();
    // Straight to the outsider's node: not hosted here, no leader to name locally.
    let outsider_node = node_ref(&nodes, outsider);
    assert!(matches!(
        outsider_node.append(ORDERS, 0, &[Record::new("x")]).await,
        Err(Error::NotLeader { leader: None, .. })
    ));
    // A partition past the topic's count, and a topic no one has: told apart, on a broker
    // and through the client.
    assert!(matches!(
        outsider_node.append(ORDERS, 9, &[Record::new("x")]).await,
        Err(Error::UnknownPartition(p)) if p.partition == 9
    ));
    assert!(matches!(
        outsider_node.append("no.such.topic", 0, &[Record::new("x")]).await,
        Err(Error::UnknownTopic(t)) if t == "no.such.topic"
    ));
    assert!(matches!(
        client.send(ORDERS, 9, &[Record::new("x")]).await,
        Err(Error::UnknownPartition(p)) if p.partition == 9
    ));

    // Refusals: the same name again, bad names, too many replicas.
    assert!(matches!(
        client.create_topic(ORDERS, 1, 1).await,
        Err(Error::TopicExists(t)) if t == ORDERS
    ));
    for (name, partitions, factor) in [("bad name", 1, 1), ("__x", 1, 1)] {
        assert!(
            matches!(
                client.create_topic(name, partitions, factor).await,
                Err(Error::InvalidTopic { .. })
            ),
            "{name} {partitions} {factor}"
        );
    }
    assert!(matches!(
        client.create_topic("ok", 0, 1).await,
        Err(Error::InvalidPartitionCount { requested: 0, .. })
    ));
    assert!(matches!(
        client.create_topic("ok", 1, 4).await,
        Err(Error::InvalidReplicationFactor {
            requested: 4,
            brokers: 3
        })
    ));
    assert!(matches!(
        client.delete_topic("missing").await,
        Err(Error::UnknownTopic(_))
    ));
    let mut listed = client.list_topics().await.unwrap();
    listed.sort();
    assert_eq!(listed, vec![(ORDERS.to_string(), 4)]);

    // Broker 3 goes down; the topic is deleted and created again with one partition on
    // every broker while it is down.
    let stopped_dir = dir.path().join("node-3");
    nodes[2].take().unwrap().shutdown().await.unwrap();
    client.delete_topic(ORDERS).await.unwrap();
    // Every replica stops and its directory goes (broker 3's stays: it is down).
    let leftovers = |id: u64| -> Vec<String> {
        std::fs::read_dir(dir.path().join(format!("node-{id}")))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(ORDERS))
            .collect()
    };
    wait_until(
        Duration::from_secs(10),
        "the deleted topic's replicas to go",
        async || {
            let stopped = (0..4).all(|p| hosts(&nodes, ORDERS, p).is_empty());
            (stopped && leftovers(1).is_empty() && leftovers(2).is_empty()).then_some(())
        },
    )
    .await;
    assert!(matches!(
        client.send(ORDERS, 0, &[Record::new("late")]).await,
        Err(Error::UnknownTopic(_))
    ));
    // Brokers 1 and 2 are a quorum of the metadata Raft group and of every partition of the new
    // topic, which has a replica on each broker, broker 3 included.
    client.create_topic(ORDERS, 2, 3).await.unwrap();
    let fresh = client
        .send(ORDERS, 1, &[Record::new("second life")])
        .await
        .unwrap();
    assert_eq!(
        fresh.base_offset,
        Offset(0),
        "a new topic starts at offset 0"
    );

    // Broker 3 comes back. Its `orders-1` held the old topic's partition 1 (with "old" in
    // it): it is replaced by the new topic's, and its other old replicas are removed.
    assert!(stopped_dir.join(format!("{ORDERS}-1")).exists());
    nodes[2] = Some(start_node(bare(3, &addrs, dir.path())).await.unwrap());
    let node = node_ref(&nodes, 3);
    wait_until(
        Duration::from_secs(10),
        "broker 3 to hold the new topic only",
        async || {
            let stale = (2..4).any(|p| stopped_dir.join(format!("{ORDERS}-{p}")).exists());
            let batches = node.read(ORDERS, 1, Offset(0), 1 << 20).ok()?;
            let values: Vec<_> = batches
                .iter()
                .flat_map(|b| b.records())
                .map(|(_, r)| r.value)
                .collect();
            (!stale && values == vec![bytes_of("second life")] && node.partitions().len() == 2)
                .then_some(())
        },
    )
    .await;
    drop((client, via_outsider));
    shutdown_all(nodes).await;
}

/// A partition's preferred replica on a broker that was down when its topic was created: the
/// other two form the Raft group and take writes; when the broker comes back its replica (a
/// founder that runs for leader at once on a fresh Raft group) follows the leader and copies the
/// log, and the leader keeps its leadership and its term (the newcomer's campaign is refused
/// while the leader's lease holds and ends at the leader's term).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_replica_that_comes_up_late_follows_without_deposing_the_leader() {
    use replog::{Client, ClientConfig};
    const LATE: &str = "late";
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let config = |id| {
        let mut c = bare(id, &addrs, dir.path());
        c.auto_leader_rebalance = false;
        c
    };
    let mut nodes = start_all(config).await;
    nodes[2].take().unwrap().shutdown().await.unwrap();
    let client = Client::connect(&addrs[..2], ClientConfig::default())
        .await
        .unwrap();
    // Three partitions of three replicas: Kafka's spread makes broker 3 the first replica of
    // one of them.
    client.create_topic(LATE, 3, 3).await.unwrap();
    let described = client.describe(LATE).await.unwrap();
    let d = described.iter().find(|d| d.replicas[0] == 3).unwrap();
    let p = d.partition.partition;
    for n in 0..100 {
        client
            .send(LATE, p, &[Record::new(format!("r{n}"))])
            .await
            .unwrap();
    }
    let leader = d.leader.unwrap();
    let before = node_ref(&nodes, leader).status(LATE, p).unwrap();

    nodes[2] = Some(start_node(config(3)).await.unwrap());
    let late = node_ref(&nodes, 3);
    wait_until(
        Duration::from_secs(10),
        "broker 3's replica to copy the log",
        async || (late.status(LATE, p).ok()?.high_watermark == before.high_watermark).then_some(()),
    )
    .await;
    let after = node_ref(&nodes, leader).status(LATE, p).unwrap();
    assert_eq!(
        (after.leader, after.term),
        (Some(leader), before.term),
        "the leader kept its leadership and term"
    );
    assert_eq!(late.status(LATE, p).unwrap().leader, Some(leader));
    let values = committed_values(late, LATE, p).unwrap();
    assert_eq!(values.len(), 100);
    drop(client);
    shutdown_all(nodes).await;
}

/// Stale metadata: a client whose cached leader has since been deposed (it went down and came
/// back as a follower) sends there, gets `NotLeader` naming the new leader in a newer term,
/// and follows it at once, without a metadata refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_stale_leader_follows_the_newer_hint() {
    use replog::{Client, ClientConfig};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let mut nodes = start_all(|id| single_partition(id, &addrs, dir.path())).await;
    let old = leader_of(&nodes, 0).await;
    let stale = Client::connect(&addrs, ClientConfig::default())
        .await
        .unwrap();
    stale.send(TOPIC, 0, &[Record::new("one")]).await.unwrap();
    assert_eq!(stale.cached_leader(TOPIC, 0).unwrap().0, old);

    // The leader goes down; another is elected; the old one returns as a follower.
    nodes[old as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    let new = leader_of(&nodes, 0).await;
    assert_ne!(new, old);
    nodes[old as usize - 1] = Some(
        start_node(single_partition(old, &addrs, dir.path()))
            .await
            .unwrap(),
    );
    wait_until(
        Duration::from_secs(10),
        "the old leader to follow",
        async || (node_ref(&nodes, old).status(TOPIC, 0).ok()?.leader == Some(new)).then_some(()),
    )
    .await;

    let d = stale.send(TOPIC, 0, &[Record::new("two")]).await.unwrap();
    assert_eq!(d.base_offset, Offset(1));
    let route: Vec<replog::Address> = d.route.iter().map(|s| s.addr.clone()).collect();
    assert_eq!(
        route,
        vec![
            replog::Address::from(addrs[old as usize - 1]),
            addrs[new as usize - 1].into()
        ],
        "{:?}",
        d.route
    );
    assert!(
        d.route[0].outcome.contains("not leader; leader is"),
        "{:?}",
        d.route
    );
    assert_eq!(stale.cached_leader(TOPIC, 0).unwrap().0, new);
    drop(stale);
    assert_every_replica_holds(&nodes, &["one", "two"]).await;
    shutdown_all(nodes).await;
}

/// A broker restarted alone (no quorum for any group) knows its created topics and serves
/// what was committed before it stopped: each replica records how far it was committed when
/// it shut down, and re-applies its own log up to there at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restarted_alone_rebuilds_its_topics_and_serves_committed_records() {
    use replog::{Client, ClientConfig, PartitionId};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let nodes = start_all(|id| bare(id, &addrs, dir.path())).await;
    let client = Client::connect(&addrs, ClientConfig::default())
        .await
        .unwrap();
    client.create_topic("audit", 2, 3).await.unwrap();
    for i in 0..10 {
        client
            .send("audit", i % 2, &[Record::new(format!("r{i}"))])
            .await
            .unwrap();
    }
    // Every replica has applied everything before the brokers stop.
    for node in &nodes {
        let node = node.as_ref().unwrap();
        wait_until(Duration::from_secs(10), "replicas to apply", async || {
            let hw = |p| node.status("audit", p).ok().map(|s| s.high_watermark);
            (hw(0)? == Offset(5) && hw(1)? == Offset(5)).then_some(())
        })
        .await;
    }
    drop(client);
    shutdown_all(nodes).await;

    let node = start_node(bare(2, &addrs, dir.path())).await.unwrap();
    wait_until(
        Duration::from_secs(5),
        "the catalog and the replicas",
        async || {
            let parts = node.partitions();
            let want = [PartitionId::new("audit", 0), PartitionId::new("audit", 1)];
            (parts == want).then_some(())
        },
    )
    .await;
    for p in 0..2 {
        let values: Vec<String> =
            wait_until(Duration::from_secs(5), "committed records", async || {
                let v = committed_values(&node, "audit", p)?;
                (v.len() == 5).then_some(v)
            })
            .await;
        let want: Vec<String> = (0..10)
            .filter(|i| i % 2 == p)
            .map(|i| format!("r{i}"))
            .collect();
        assert_eq!(values, want);
    }
    node.shutdown().await.unwrap();
}

/// A broker that comes back on another address registers it in the metadata log. The others,
/// still configured with its old address, reach it at the new one, even when a quorum needs it
/// to commit that very registration, and a broker that slept through it learns it from the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_back_on_another_address_is_found_through_the_metadata_log() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let mut nodes = start_all(|id| single_partition(id, &addrs, dir.path())).await;
    append_to_leader(&nodes, &[Record::new("before")]).await;
    let leader = leader_of(&nodes, 0).await;
    let moved = if leader == 3 { 2 } else { 3 };
    let other = 6 - leader - moved;
    let slot = |id: u64| id as usize - 1;
    // Both followers stop; one comes back elsewhere: nothing commits without it now.
    nodes[slot(other)].take().unwrap().shutdown().await.unwrap();
    nodes[slot(moved)].take().unwrap().shutdown().await.unwrap();
    let new_addr = free_addrs(1)[0];
    let mut config = single_partition(moved, &addrs, dir.path());
    config.listen = new_addr;
    nodes[slot(moved)] = Some(start_node(config).await.unwrap());
    append_to_leader(&nodes, &[Record::new("after")]).await;
    assert_every_replica_holds(&nodes, &["before", "after"]).await;

    // The broker that slept through it comes back at its old address and catches up.
    nodes[slot(other)] = Some(
        start_node(single_partition(other, &addrs, dir.path()))
            .await
            .unwrap(),
    );
    assert_every_replica_holds(&nodes, &["before", "after"]).await;
    wait_for_broker_everywhere(&nodes, moved, new_addr).await;
    for via in [addrs[slot(leader)], addrs[slot(other)], new_addr] {
        let brokers = wait_for_broker(via, moved, new_addr).await;
        assert_eq!(brokers.len(), 3, "{brokers:?}");
    }
    shutdown_all(nodes).await;
}

/// Brokers named by host names (`--listen`, `--peer` and the client's bootstrap list as
/// names): a broker that comes back under the same name at another IP (127.0.0.2, as a
/// restarted pod would) is found again by the others and by clients, through their next
/// connection's lookup; nothing in the metadata log changes, since the name does not. (The
/// names point where the test says through `NetFaults::set_host`: the `failpoints` feature.)
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_back_at_another_ip_under_its_name_is_found_again() {
    use replog::{Address, Client, ClientConfig, NetFaults};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let host = |id: u64| format!("broker-{id}.names.replog.test");
    let named = |id: u64| Address::new(&host(id), addrs[id as usize - 1].port()).unwrap();
    for id in 1..=3 {
        NetFaults::set_host(&host(id), Some([127, 0, 0, 1].into()));
    }
    let config = |id: u64| {
        let mut c = single_partition(id, &addrs, dir.path());
        c.advertised = Some(named(id));
        c.peers = (1..=3)
            .filter(|p| *p != id)
            .map(|p| (p, named(p)))
            .collect();
        c
    };
    let mut nodes = start_all(config).await;
    let client = Client::connect(&[named(1), named(2), named(3)], ClientConfig::default())
        .await
        .unwrap();
    client
        .send(TOPIC, 0, &[Record::new("before")])
        .await
        .unwrap();
    // Every broker and the client name the brokers by their names.
    for n in nodes.iter().flatten() {
        let brokers: Vec<String> = n.brokers().iter().map(|(_, a)| a.to_string()).collect();
        assert_eq!(
            brokers,
            (1..=3).map(|id| named(id).to_string()).collect::<Vec<_>>()
        );
    }
    assert_eq!(client.broker_addr(3), Some(named(3)));

    // Broker 3 comes back at 127.0.0.2 under its name, while the others write on.
    nodes[2].take().unwrap().shutdown().await.unwrap();
    client
        .send(TOPIC, 0, &[Record::new("while down")])
        .await
        .unwrap();
    NetFaults::set_host(&host(3), Some([127, 0, 0, 2].into()));
    let mut moved = config(3);
    moved.listen = std::net::SocketAddr::from(([127, 0, 0, 2], addrs[2].port()));
    nodes[2] = Some(start_node(moved).await.unwrap());
    client
        .send(TOPIC, 0, &[Record::new("after")])
        .await
        .unwrap();
    assert_every_replica_holds(&nodes, &["before", "while down", "after"]).await;
    // A client reaches it there by name: it reads broker 3's own replica.
    let third = Client::connect(&[named(3)], ClientConfig::default())
        .await
        .unwrap();
    let read = third
        .fetch(TOPIC, 0, Offset(0), 1 << 20, Some(named(3)))
        .await
        .unwrap();
    assert_eq!(read.iter().map(|b| b.records().count()).sum::<usize>(), 3);
    assert_eq!(node_ref(&nodes, 3).advertised(), named(3));
    drop((client, third));
    shutdown_all(nodes).await;
    for id in 1..=3 {
        NetFaults::set_host(&host(id), None);
    }
}

/// A broker that joins a running cluster registers through the founding brokers; the
/// metadata Raft group makes it a learner; every broker names it; topics created afterwards are
/// spread over it as Kafka spreads them over four brokers; it answers metadata for a topic it
/// does not host with the real leader; and it keeps all of that across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_joins_a_running_cluster_and_takes_partitions_of_new_topics() {
    use replog::{Client, ClientConfig};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(4);
    let founders = &addrs[..3];
    let mut nodes = start_all(|id| bare(id, founders, dir.path())).await;
    let client = Client::connect(&founders[..1], ClientConfig::default())
        .await
        .unwrap();
    client.create_topic("before", 1, 3).await.unwrap();
    client
        .send("before", 0, &[Record::new("b0")])
        .await
        .unwrap();

    let joiner = || {
        let mut c = bare(4, &addrs, dir.path());
        c.join = true;
        c
    };
    nodes.push(Some(start_node(joiner()).await.unwrap()));
    wait_for_broker_everywhere(&nodes, 4, addrs[3]).await;
    for via in addrs.iter().copied() {
        let brokers = wait_for_broker(via, 4, addrs[3]).await;
        assert_eq!(brokers.len(), 4, "{brokers:?}");
    }
    // A topic it does not host: it still names the real leader.
    let at_4 = Client::connect(&addrs[3..], ClientConfig::default())
        .await
        .unwrap();
    let before = at_4.describe("before").await.unwrap();
    assert!(matches!(before[0].leader, Some(1..=3)), "{before:?}");
    assert_eq!(before[0].replicas.len(), 3);

    // Four partitions of two replicas over four brokers: each broker leads one (Kafka's
    // spread), so the joiner hosts some of them and leads one.
    client.create_topic("after", 4, 2).await.unwrap();
    let described = at_4.describe("after").await.unwrap();
    let on_4: Vec<u32> = described
        .iter()
        .filter(|p| p.replicas.contains(&4))
        .map(|p| p.partition.partition)
        .collect();
    assert!(on_4.len() >= 2, "{described:?}");
    let mut preferred: Vec<u64> = described.iter().map(|p| p.replicas[0]).collect();
    preferred.sort_unstable();
    assert_eq!(preferred, vec![1, 2, 3, 4], "{described:?}");
    for p in 0..4 {
        at_4.send("after", p, &[Record::new(format!("a{p}"))])
            .await
            .unwrap();
    }

    // Restarted, it still belongs: it serves its replicas and takes writes through them.
    nodes[3].take().unwrap().shutdown().await.unwrap();
    nodes[3] = Some(start_node(joiner()).await.unwrap());
    let node4 = nodes[3].as_ref().unwrap();
    for &p in &on_4 {
        let values: Vec<String> = wait_until(
            Duration::from_secs(10),
            "the joiner's replicas",
            async || committed_values(node4, "after", p).filter(|v| !v.is_empty()),
        )
        .await;
        assert_eq!(values, vec![format!("a{p}")]);
    }
    for p in 0..4 {
        at_4.send("after", p, &[Record::new(format!("a{p}-again"))])
            .await
            .unwrap();
    }
    drop((client, at_4));
    shutdown_all(nodes).await;
}

/// A partition moves to other brokers (Kafka's reassignment), here away from its own leader
/// and onto a broker that joined: the new replica copies the log, the Raft group's voters change,
/// the broker it left removes its replica, and writes go on with nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_off_its_leader_onto_a_joined_broker() {
    use replog::{Client, ClientConfig, PartitionId};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(4);
    let mut nodes = start_all(|id| bare(id, &addrs[..3], dir.path())).await;
    let client = Client::connect(&addrs[..3], ClientConfig::default())
        .await
        .unwrap();
    client.create_topic("moving", 1, 3).await.unwrap();
    for i in 0..10 {
        client
            .send("moving", 0, &[Record::new(format!("m{i}"))])
            .await
            .unwrap();
    }
    let mut joiner = bare(4, &addrs, dir.path());
    joiner.join = true;
    nodes.push(Some(start_node(joiner).await.unwrap()));
    wait_for_broker_everywhere(&nodes, 4, addrs[3]).await;

    let leader = client.describe("moving").await.unwrap()[0].leader.unwrap();
    let mut target: Vec<u64> = vec![4];
    target.extend((1..=3).filter(|b| *b != leader));
    client
        .reassign_partition("moving", 0, &target)
        .await
        .unwrap();
    // The same move again (a retried request) is no error.
    client
        .reassign_partition("moving", 0, &target)
        .await
        .unwrap();

    let id = PartitionId::new("moving", 0);
    let described = wait_until(Duration::from_secs(20), "the move to finish", async || {
        let d = client.describe("moving").await.unwrap().remove(0);
        let mut isr = d.isr.clone();
        isr.sort_unstable();
        let mut want = target.clone();
        want.sort_unstable();
        // Out of the broker's map, then its directory removed once it stopped.
        let gone = !node_ref(&nodes, leader).partitions().contains(&id)
            && !dir
                .path()
                .join(format!("node-{leader}"))
                .join("moving-0")
                .exists();
        // The replicas it moved to may name the broker it left as leader for an election
        // timeout after the move (until they notice it stepped down).
        let led_by_target = d.leader.is_some_and(|l| target.contains(&l));
        if d.replicas == target && isr == want && gone && led_by_target {
            Ok(d)
        } else {
            Err(format!("{d:?}, left: {gone}"))
        }
    })
    .await;
    assert!(target.contains(&described.leader.unwrap()), "{described:?}");
    for i in 10..15 {
        client
            .send("moving", 0, &[Record::new(format!("m{i}"))])
            .await
            .unwrap();
    }
    let want: Vec<String> = (0..15).map(|i| format!("m{i}")).collect();
    for b in &target {
        let node = node_ref(&nodes, *b);
        let got = wait_until(
            Duration::from_secs(10),
            "every record on the new replicas",
            async || committed_values(node, "moving", 0).filter(|v| v.len() == want.len()),
        )
        .await;
        assert_eq!(got, want, "broker {b}");
    }
    drop(client);
    shutdown_all(nodes).await;
}

/// `Node::wait_ready` says when a broker serves: once the metadata Raft group and every
/// partition it hosts know a leader, and not while a quorum is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_says_when_it_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    // One broker of three: no quorum, no leader, not ready.
    let alone = start_node(config(1, &addrs, dir.path())).await.unwrap();
    match alone.wait_ready(Duration::from_millis(500)).await {
        Err(Error::Timeout { last, .. }) => {
            assert!(
                last.contains("email.send/0") && last.contains("the metadata Raft group"),
                "{last}"
            )
        }
        other => panic!("ready without a quorum: {other:?}"),
    }
    // The others start: every broker is ready, each hosting the three partitions.
    let mut nodes = vec![Some(alone)];
    for id in 2..=3 {
        nodes.push(Some(
            start_node(config(id, &addrs, dir.path())).await.unwrap(),
        ));
    }
    for node in nodes.iter().flatten() {
        let hosted = node.wait_ready(Duration::from_secs(20)).await.unwrap();
        assert_eq!(hosted, PARTITIONS as usize);
    }
    shutdown_all(nodes).await;
}

/// A restarted broker is ready only once it has opened the replicas of the topics created
/// through the metadata log (it opens them as it replays the log, after `Node::start`
/// returned), not as soon as the few it opens at start know their leaders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_is_ready_once_its_created_topics_replicas_are_open() {
    const MADE: u32 = 8;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = replog::LocalCluster::start(3, dir.path(), |c| {
        c.heartbeat_interval = support::HEARTBEAT_INTERVAL;
        c.election_timeout = support::ELECTION_TIMEOUT;
    })
    .await
    .unwrap();
    let client = replog::Client::connect(&cluster.addrs(), replog::ClientConfig::default())
        .await
        .unwrap();
    client.create_topic("made", MADE, 3).await.unwrap();
    cluster.stop(3).await.unwrap();
    cluster.restart(3).await.unwrap();
    let hosted = cluster
        .node(3)
        .unwrap()
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(hosted, MADE as usize, "ready before its replicas were open");
    for p in 0..MADE {
        assert!(
            cluster
                .node(3)
                .unwrap()
                .status("made", p)
                .unwrap()
                .leader
                .is_some()
        );
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A broker's disk grows with the data it holds, not with its partition count: each quiet
/// partition holds at most 64 KiB (its segment's first preallocation step, 32 KiB, and its
/// small files), not a whole 64 MiB segment, a whole 1 MiB step or a spare file, so hundreds
/// of partitions fit a small disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_with_hundreds_of_quiet_partitions_holds_disk_for_its_data_only() {
    const TOPIC_PARTITIONS: u32 = 300;
    const STEP: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(1, dir.path(), TOPIC, TOPIC_PARTITIONS, |c| {
        assert_eq!(c.log.segment_bytes, 64 << 20, "the default segment size");
        assert_eq!(c.log.preallocate_step_bytes, STEP, "the default step");
    })
    .await;
    let config = cluster.config(1).unwrap().clone();
    let logs = u64::from(TOPIC_PARTITIONS) + u64::from(config.offsets_topic_partitions) + 1;
    let held = disk_bytes_under(dir.path());
    println!("{} bytes of disk per quiet log ({logs} logs)", held / logs);
    assert!(
        held <= logs * (64 << 10),
        "{held} bytes of disk for {logs} quiet logs: more than 64 KiB each"
    );
    // 8 MiB into one partition: its disk grows by about that, and only by that.
    let leader = cluster.node(1).unwrap();
    let batch: Vec<Record> = (0..64).map(|_| Record::new(vec![5u8; 1 << 10])).collect();
    for _ in 0..128 {
        leader.append(TOPIC, 0, &batch).await.unwrap();
    }
    let grown = disk_bytes_under(dir.path()) - held;
    assert!(
        (8 << 20..=(8 << 20) + 3 * STEP + (1 << 20)).contains(&grown),
        "{grown} bytes more for 8 MiB of records"
    );
    cluster.shutdown().await.unwrap();
}

/// Kafka's longest topic name, 249 bytes, created through the Kafka door: written to,
/// read back after its broker restarts (the replica's directory name shortened to fit the
/// file system, mapped back through the metadata log); a 250-byte name is refused as Kafka
/// refuses it (INVALID_TOPIC_EXCEPTION).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_of_kafkas_longest_name_survives_a_restart() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
    use replog::{Client, ClientConfig};
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(1, dir.path(), "other", 1, |c| {
        c.kafka_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    })
    .await;
    let create = |topic: &str| {
        let mut t = CreatableTopic::default();
        t.name = TopicName(kafka_protocol::protocol::StrBytes::from_string(
            topic.to_string(),
        ));
        t.num_partitions = 2;
        t.replication_factor = 1;
        let mut r = CreateTopicsRequest::default();
        r.timeout_ms = 10_000;
        r.topics.push(t);
        r
    };
    let longest = format!("long.{}", "n".repeat(244));
    let over = format!("{longest}x");
    assert_eq!((longest.len(), over.len()), (249, 250));
    let kafka = cluster.node(1).unwrap().kafka_addr().unwrap();
    for (name, code) in [(&over, 17), (&longest, 0)] {
        let (_, answer): (usize, CreateTopicsResponse) =
            crate::kafka::kafka_call(kafka, ApiKey::CreateTopics, 7, &create(name)).await;
        assert_eq!(answer.topics[0].error_code, code, "{:?}", answer.topics[0]);
    }
    // A client of the cluster as it is now, once the topic is ready, having written
    // `{tag}-{p}` to each partition `p`.
    let write_each = async |cluster: &replog::LocalCluster, tag: &str| {
        let client = Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap();
        client
            .wait_ready(&longest, Duration::from_secs(20))
            .await
            .unwrap();
        for p in 0..2 {
            let record = Record::new(format!("{tag}-{p}"));
            client.send(&longest, p, &[record]).await.unwrap();
        }
        client
    };
    let client = write_each(&cluster, "before").await;
    // Its replicas' directories: the name shortened to 222 bytes, then `-{partition}`.
    let data = cluster.data_dir(1).unwrap();
    let names: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("long."))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.iter().all(|n| n.len() == 224 && n.contains('~')),
        "{names:?}"
    );
    drop(client);

    cluster.restart(1).await.unwrap();
    let client = write_each(&cluster, "after").await;
    for p in 0..2 {
        let read = client
            .fetch(&longest, p, Offset(0), 1 << 20, None)
            .await
            .unwrap();
        let values: Vec<_> = read
            .iter()
            .flat_map(|b| b.records())
            .map(|(_, r)| r.value)
            .collect();
        assert_eq!(
            values,
            vec![
                bytes_of(&format!("before-{p}")),
                bytes_of(&format!("after-{p}"))
            ]
        );
    }
    let listed = client.list_topics().await.unwrap();
    assert!(listed.contains(&(longest.clone(), 2)), "{listed:?}");
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A broker whose start fails part way, on a replica's directory something else holds, lets go
/// of all it opened before (the metadata replica, the other partitions) before it returns: once
/// the directory is free, it starts at once. Before, the Raft members it had started let go of
/// their logs only when their tasks ended, a moment after the start returned: a start tried
/// again at once failed on the metadata log's lock, and on a loaded machine each failed try
/// left the next the same obstacle (a fault schedule's broker never came back within 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_part_way_lets_go_of_what_it_opened() {
    const TOPIC: &str = "restarted";
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = crate::local_cluster(1, dir.path(), TOPIC, 3, |_| {}).await;
    let data = cluster.data_dir(1).unwrap();
    cluster.stop(1).await.unwrap();
    // Partitions open in order: 0 and 1 are open when 2 is found locked.
    let held =
        replog::PartitionLog::open(data.join(format!("{TOPIC}-2")), LogConfig::default()).unwrap();
    let refused = cluster.restart(1).await;
    assert!(
        matches!(refused, Err(Error::Locked { .. })),
        "a start on a held directory fails: {refused:?}"
    );
    drop(held);
    cluster.restart(1).await.unwrap();
    cluster
        .wait_for_leaders(TOPIC, 3, Duration::from_secs(20))
        .await
        .unwrap();
    cluster.shutdown().await.unwrap();
}
