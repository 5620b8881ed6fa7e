//! Writes that are never lost or doubled: idempotent batches across leader changes and restarts,
//! producer epochs that fence, a client that follows failover from a follower, resends after an
//! unknown outcome, and the batching `Producer`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_batch_is_written_once_even_across_a_leader_change() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let one_partition = |id| single_partition(id, &addrs, dir.path());
    let mut nodes = start_all(one_partition).await;
    const P: u64 = 0xfeed;
    let ab = [Record::new("a"), Record::new("b")];
    let first = append_idempotent_to_leader(&nodes, P, 0, &ab)
        .await
        .unwrap();
    assert_eq!((first.base_offset, first.record_count), (Offset(0), 2));
    // The same batch again: the original offsets, nothing written.
    let again = append_idempotent_to_leader(&nodes, P, 0, &ab)
        .await
        .unwrap();
    assert_eq!(again, first);
    let c = append_idempotent_to_leader(&nodes, P, 2, &[Record::new("c")])
        .await
        .unwrap();
    assert_eq!(c.base_offset, Offset(2));
    // A gap, or a batch that overlaps a remembered one: refused, nothing written.
    for (sequence, records) in [(9, &ab[..1]), (0, &ab[..1])] {
        match append_idempotent_to_leader(&nodes, P, sequence, records).await {
            Err(Error::OutOfOrderSequence {
                producer_id: P,
                expected: 3,
                got,
                ..
            }) => assert_eq!(got, sequence),
            other => panic!("expected an out-of-order refusal, got {other:?}"),
        }
    }
    // Another producer is independent of this one.
    let other = append_idempotent_to_leader(&nodes, P + 1, 0, &[Record::new("x")])
        .await
        .unwrap();
    assert_eq!(other.base_offset, Offset(3));

    // The leader goes away; the new one learned the producer's batches by applying the log.
    let leader = leader_of(&nodes, 0).await;
    nodes[leader as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    let retried = append_idempotent_to_leader(&nodes, P, 2, &[Record::new("c")])
        .await
        .unwrap();
    assert_eq!(
        retried, c,
        "a retry at the new leader gets the original offsets"
    );
    let d = append_idempotent_to_leader(&nodes, P, 3, &[Record::new("d")])
        .await
        .unwrap();
    assert_eq!(d.base_offset, Offset(4));

    // The old leader comes back and learns the same from its log.
    nodes[leader as usize - 1] = Some(start_node(one_partition(leader)).await.unwrap());
    assert_every_replica_holds(&nodes, &["a", "b", "c", "x", "d"]).await;
    shutdown_all(nodes).await;
}

/// Regression: once a partition has taken a batch of a producer's later epoch, it refuses
/// the earlier epochs, on every leader after it too, so that a batch a client gave up on can
/// never land after the batches it sent in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_producer_epoch_fences_the_earlier_ones_across_a_leader_change() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let one_partition = |id| single_partition(id, &addrs, dir.path());
    let mut nodes = start_all(one_partition).await;
    const P: u64 = 0xe90c;
    let epoch = |e: u16, sequence: u32| ProducerSeq::new(P, sequence).with_epoch(e);
    let a = append_numbered_to_leader(&nodes, epoch(0, 0), &[Record::new("a")])
        .await
        .unwrap();
    // The client gives up on its batch at sequence 1 and moves to epoch 1, from 0.
    match append_numbered_to_leader(&nodes, epoch(1, 5), &[Record::new("x")]).await {
        Err(Error::OutOfOrderSequence { expected: 0, .. }) => {}
        other => panic!("a new epoch starts at 0, got {other:?}"),
    }
    let b = append_numbered_to_leader(&nodes, epoch(1, 0), &[Record::new("b")])
        .await
        .unwrap();
    assert_eq!(b.base_offset, Offset(1));
    let fenced = |got: replog::Result<replog::AppendInfo>| match got {
        Err(Error::ProducerFenced {
            producer_id: P,
            epoch: 0,
            current: 1,
            ..
        }) => {}
        other => panic!("expected epoch 0 to be fenced, got {other:?}"),
    };
    // The batch given up on arrives after all: refused, nothing written.
    fenced(append_numbered_to_leader(&nodes, epoch(0, 1), &[Record::new("late")]).await);
    // A batch of the old epoch the partition holds is still answered with its offsets.
    let again = append_numbered_to_leader(&nodes, epoch(0, 0), &[Record::new("a")])
        .await
        .unwrap();
    assert_eq!(again, a);

    // A new leader learned the epoch from the log.
    let leader = leader_of(&nodes, 0).await;
    nodes[leader as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    fenced(append_numbered_to_leader(&nodes, epoch(0, 1), &[Record::new("late")]).await);
    let c = append_numbered_to_leader(&nodes, epoch(1, 1), &[Record::new("c")])
        .await
        .unwrap();
    assert_eq!(c.base_offset, Offset(2));
    nodes[leader as usize - 1] = Some(start_node(one_partition(leader)).await.unwrap());
    assert_every_replica_holds(&nodes, &["a", "b", "c"]).await;
    shutdown_all(nodes).await;
}

/// Regression (fault schedules, seed 8): a leader restarted in its old term took a resent
/// batch as new although its log already held it, uncommitted, from before the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_leader_does_not_append_a_resent_batch_twice() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let one_partition = |id| single_partition(id, &addrs, dir.path());
    let mut nodes = start_all(one_partition).await;
    const P: u64 = 0xbeef;
    append_idempotent_to_leader(&nodes, P, 0, &[Record::new("w")])
        .await
        .unwrap();
    let leader = leader_of(&nodes, 0).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &followers {
        let node = nodes[*id as usize - 1].take().unwrap();
        node.shutdown().await.unwrap();
    }
    // The leader appends the batch but cannot commit it; then it stops too.
    let stuck = tokio::time::timeout(
        Duration::from_millis(500),
        node_ref(&nodes, leader).append_idempotent(
            TOPIC,
            0,
            ProducerSeq::new(P, 1),
            &[Record::new("x")],
        ),
    )
    .await;
    assert!(stuck.is_err(), "nothing commits without a quorum");
    let node = nodes[leader as usize - 1].take().unwrap();
    node.shutdown().await.unwrap();
    for id in 1..=3 {
        nodes[id as usize - 1] = Some(start_node(one_partition(id)).await.unwrap());
    }
    // The producer resends; the batch ends up in the log once.
    append_idempotent_to_leader(&nodes, P, 1, &[Record::new("x")])
        .await
        .unwrap();
    assert_every_replica_holds(&nodes, &["w", "x"]).await;
    shutdown_all(nodes).await;
}

/// A leader whose partition went quiet and then dormant (its Raft member dropped) comes back,
/// for a producer's resent batch, as the leader of the same term, with the producer's batches
/// it had: the resend gets the original offsets and nothing is written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dormant_leader_woken_by_a_resent_batch_answers_it_in_its_term_without_writing_it_again()
{
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let dormant_soon = |id| {
        let mut c = single_partition(id, &addrs, dir.path());
        c.quiesce_after = Some(Duration::from_millis(200));
        c.dormant_after = Some(Duration::ZERO);
        c
    };
    let nodes = start_all(dormant_soon).await;
    const P: u64 = 0xd0d0;
    let ab = [Record::new("a"), Record::new("b")];
    let first = append_idempotent_to_leader(&nodes, P, 0, &ab)
        .await
        .unwrap();
    let leader = leader_of(&nodes, 0).await;
    let term = node_ref(&nodes, leader).status(TOPIC, 0).unwrap().term;
    for node in nodes.iter().flatten() {
        wait_until(
            Duration::from_secs(20),
            "the partition's replica to go dormant",
            async || node.dormant_replicas() == 1,
        )
        .await;
    }
    let again = append_idempotent_to_leader(&nodes, P, 0, &ab)
        .await
        .unwrap();
    assert_eq!(again, first, "the resend gets the original offsets");
    let status = node_ref(&nodes, leader).status(TOPIC, 0).unwrap();
    assert_eq!(
        (status.leader, status.term),
        (Some(leader), term),
        "woken in its term, without an election"
    );
    let c = append_idempotent_to_leader(&nodes, P, 2, &[Record::new("c")])
        .await
        .unwrap();
    assert_eq!(c.base_offset, Offset(2));
    assert_every_replica_holds(&nodes, &["a", "b", "c"]).await;
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_bootstrapped_on_a_follower_writes_to_the_leader_and_follows_failover() {
    use replog::{Client, ClientConfig};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let mut nodes = start_all(|id| single_partition(id, &addrs, dir.path())).await;
    let leader = leader_of(&nodes, 0).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let follower_addr = addrs[follower as usize - 1];

    // Bootstrap through a follower only: metadata names the leader, the write goes there.
    let client = Client::connect(&[follower_addr], ClientConfig::default())
        .await
        .unwrap();
    let d = client
        .send(TOPIC, 0, &[Record::new("follower-message-1")])
        .await
        .unwrap();
    assert_eq!(d.base_offset, Offset(0));
    assert_eq!(d.route.last().unwrap().addr, addrs[leader as usize - 1]);
    let described = client.describe(TOPIC).await.unwrap();
    assert_eq!(described[0].leader, Some(leader));
    assert_eq!(described[0].replicas, vec![1, 2, 3]);
    let line = described[0].to_string();
    assert!(
        line.starts_with(&format!("Topic: {TOPIC}\tPartition: 0\tLeader: {leader}")),
        "{line}"
    );

    // Consumers on every broker see the record.
    for addr in &addrs {
        let batches = wait_for_fetch(&client, *addr).await;
        assert_eq!(
            &batches[0].records().next().unwrap().1.value[..],
            b"follower-message-1"
        );
    }

    // The leader dies: the same client finds the new one and keeps writing.
    let killed = Instant::now();
    nodes[leader as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    // The idempotent client resends whatever had an unknown outcome with the same sequence, so
    // one call delivers exactly once.
    let d = client
        .send(TOPIC, 0, &[Record::new("after-failover")])
        .await
        .unwrap();
    // Reported, not asserted (the target is two election timeouts plus one request timeout).
    eprintln!(
        "failover: acknowledged writes resumed {:?} after the leader stopped (election timeout {ELECTION_TIMEOUT_MS} ms)",
        killed.elapsed()
    );
    assert_eq!(d.base_offset, Offset(1));
    assert_ne!(d.route.last().unwrap().addr, addrs[leader as usize - 1]);

    // A bootstrap list whose first address is dead still gets the client in.
    let dead_first = [addrs[leader as usize - 1], addrs[follower as usize - 1]];
    let late = Client::connect(&dead_first, ClientConfig::default())
        .await
        .unwrap();
    assert_eq!(
        late.send(TOPIC, 0, &[Record::new("dead-first")])
            .await
            .unwrap()
            .base_offset,
        Offset(2)
    );
    drop(late);
    let all = client
        .fetch(TOPIC, 0, Offset(0), 1 << 20, None)
        .await
        .unwrap();
    let got: Vec<Vec<u8>> = all
        .iter()
        .flat_map(|b| b.records())
        .map(|(_, r)| r.value.to_vec())
        .collect();
    assert_eq!(
        got,
        vec![
            b"follower-message-1".to_vec(),
            b"after-failover".to_vec(),
            b"dead-first".to_vec()
        ]
    );

    // Unknown topics are a typed error.
    assert!(matches!(
        client.send("nope", 0, &[Record::new("x")]).await,
        Err(Error::UnknownTopic(_))
    ));
    drop(client);
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_resent_after_an_unknown_outcome_is_written_once() {
    use replog::{Client, ClientConfig};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    // The leader must take the batch with no follower: a leader whose partition went quiet
    // while a follower was still up, and that then lost both, refuses writes once its lease
    // runs out (rightly: it cannot know it still leads), so that the scenario below needs a
    // partition that never goes quiet.
    let one_partition = |id| {
        let mut c = single_partition(id, &addrs, dir.path());
        c.quiesce_after = None;
        c
    };
    let mut nodes = start_all(one_partition).await;
    let leader = leader_of(&nodes, 0).await;
    let mut config = ClientConfig::default();
    config.request_timeout = Duration::from_millis(300);
    config.delivery_timeout = Duration::from_millis(20_000);
    let client = std::sync::Arc::new(
        Client::connect(&[addrs[leader as usize - 1]], config)
            .await
            .unwrap(),
    );
    client
        .send(TOPIC, 0, &[Record::new("first")])
        .await
        .unwrap();

    // Both followers go away: the leader appends the next batch but cannot commit it, so the
    // client's request times out with the outcome unknown, and it resends. (On a loaded
    // machine a follower can win an election just before it stops and hand the leadership on
    // as it does; then the survivor leads nothing and the scenario is started again.)
    let mut leader = leader;
    // Bounded: three attempts.
    for attempt in 1.. {
        let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
        for id in &followers {
            nodes[*id as usize - 1]
                .take()
                .unwrap()
                .shutdown()
                .await
                .unwrap();
        }
        let still = node_ref(&nodes, leader).status(TOPIC, 0).unwrap().leader == Some(leader);
        if still {
            break;
        }
        assert!(attempt < 3, "the leadership moved away at every attempt");
        for id in &followers {
            nodes[*id as usize - 1] = Some(start_node(one_partition(*id)).await.unwrap());
        }
        leader = leader_of(&nodes, 0).await;
    }
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let sender = std::sync::Arc::clone(&client);
    let send = tokio::spawn(async move { sender.send(TOPIC, 0, &[Record::new("second")]).await });
    // The leader holds the batch, uncommitted; then the client's request (300 ms) times out at
    // least twice while the followers are away.
    let holder = node_ref(&nodes, leader);
    wait_until(
        Duration::from_secs(10),
        "the leader to append the batch",
        async || {
            let s = holder.status(TOPIC, 0).ok()?;
            (s.log_end > s.high_watermark).then_some(())
        },
    )
    .await;
    // Time for the request to time out at least twice: the timeouts are the subject.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let status = holder.status(TOPIC, 0).unwrap();
    assert_eq!(
        status.high_watermark,
        Offset(1),
        "nothing can commit without a quorum"
    );
    assert!(!send.is_finished(), "nothing can commit without a quorum");
    for id in &followers {
        nodes[*id as usize - 1] = Some(start_node(one_partition(*id)).await.unwrap());
    }
    let d = tokio::time::timeout(Duration::from_secs(25), send)
        .await
        .expect("the send finishes within its delivery deadline")
        .unwrap()
        .unwrap();
    assert_eq!(d.base_offset, Offset(1));
    let outcomes: Vec<&str> = d.route.iter().map(|r| r.outcome.as_str()).collect();
    assert!(
        outcomes.len() >= 2 && outcomes[0] == "timed out after sending",
        "the first attempt's outcome was unknown: {outcomes:?}"
    );
    client
        .send(TOPIC, 0, &[Record::new("third")])
        .await
        .unwrap();
    assert_every_replica_holds(&nodes, &["first", "second", "third"]).await;
    drop(client);
    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_partitions_by_key_batches_and_keeps_each_keys_order() {
    use replog::partitioner::partition_for_key;
    use replog::{Client, ClientConfig, Producer, ProducerConfig};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let nodes = start_all(|id| config(id, &addrs, dir.path())).await;
    for p in 0..PARTITIONS {
        leader_of(&nodes, p).await;
    }
    let client = std::sync::Arc::new(
        Client::connect(&addrs[..1], ClientConfig::default())
            .await
            .unwrap(),
    );
    let mut config = ProducerConfig::default();
    config.linger = Duration::from_millis(20);
    let producer = std::sync::Arc::new(Producer::new(std::sync::Arc::clone(&client), config));

    // 8 keys × 25 records, all in flight at once.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let producer = std::sync::Arc::clone(&producer);
        tasks.spawn(async move {
            let key = format!("key-{}", i % 8);
            let record = Record::new(format!("{key}/{i}")).with_key(key.clone());
            (key, i, producer.send(TOPIC, record).await.unwrap())
        });
    }
    let mut landed = Vec::new();
    while let Some(r) = tasks.join_next().await {
        landed.push(r.unwrap());
    }
    for (key, _, meta) in &landed {
        assert_eq!(
            meta.partition,
            partition_for_key(key.as_bytes(), PARTITIONS),
            "Kafka's partition for {key}"
        );
    }
    // Every record is where it was acknowledged, once; a batch holds many records.
    let mut batches = 0;
    let mut records = 0;
    for p in 0..PARTITIONS {
        let all = client
            .fetch(TOPIC, p, Offset(0), 1 << 20, None)
            .await
            .unwrap();
        batches += all.len();
        for b in &all {
            for (offset, r) in b.records() {
                records += 1;
                let value = String::from_utf8(r.value.to_vec()).unwrap();
                let (key, i, meta) = landed
                    .iter()
                    .find(|(k, i, _)| format!("{k}/{i}") == value)
                    .unwrap();
                assert_eq!((meta.partition, meta.offset), (p, offset), "{key}/{i}");
            }
        }
    }
    assert_eq!(records, 200);
    assert!(
        batches < 100,
        "records travel in batches: {batches} batches"
    );

    // Regression (fault schedules): a new topic's first records waited for its metadata
    // outside the order, so later ones overtook them. Sent in order to a topic this producer
    // has not seen, and awaited in reverse, they land in order.
    let fresh = Producer::new(std::sync::Arc::clone(&client), ProducerConfig::default());
    let first: Vec<_> = (0..20)
        .map(|i| fresh.send(TOPIC, Record::new(format!("f{i}")).with_key("fresh")))
        .collect();
    let mut offsets = Vec::new();
    for sent in first.into_iter().rev() {
        offsets.push(sent.await.unwrap().offset);
    }
    offsets.reverse();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");

    // Records of one key, sent in order and all in flight at once, land in that order.
    let in_order: Vec<_> = (0..20)
        .map(|i| producer.send(TOPIC, Record::new(format!("o{i}")).with_key("ordered")))
        .collect();
    let mut previous = None;
    for meta in futures_util::future::join_all(in_order).await {
        let meta = meta.unwrap();
        assert!(previous.is_none_or(|p: Offset| meta.offset > p), "in order");
        previous = Some(meta.offset);
    }

    // Unkeyed records stick to one partition per batch; too large a record fails alone.
    let too_big = Record::new(vec![0u8; 2 << 20]);
    assert!(matches!(
        producer.send(TOPIC, too_big).await,
        Err(Error::RecordTooLarge { .. })
    ));
    let (a, b) = tokio::join!(
        producer.send(TOPIC, Record::new("u1")),
        producer.send(TOPIC, Record::new("u2"))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.partition, b.partition, "one sticky batch");
    assert_eq!(b.offset.get(), a.offset.get() + 1);
    assert!(matches!(
        producer.send("no.such.topic", Record::new("x")).await,
        Err(Error::UnknownTopic(_))
    ));
    drop(producer);
    drop(client);
    shutdown_all(nodes).await;
}

/// `Producer::flush` sends the open batches and waits until every record sent is
/// settled (it used to return at once); `close` does the same and ends the producer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_flush_waits_until_every_record_is_settled() {
    use replog::{Client, ClientConfig, Producer, ProducerConfig};
    const FLUSHED: &str = "flushed";
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(1, dir.path(), FLUSHED, 2, |_| {}).await;
    let client = std::sync::Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    // A linger far longer than the test: only a flush sends these batches.
    let mut config = ProducerConfig::default();
    config.linger = Duration::from_millis(600_000);
    let producer = Producer::new(client, config);
    let sent: Vec<_> = (0..10)
        .map(|i| producer.send(FLUSHED, Record::new(format!("r{i}"))))
        .collect();
    producer.flush().await;
    for (i, s) in sent.into_iter().enumerate() {
        // Polled once: settled already, or not.
        let meta = tokio::time::timeout(Duration::ZERO, s)
            .await
            .unwrap_or_else(|_| panic!("record {i} still unsettled after flush"))
            .unwrap();
        assert!(meta.partition < 2);
    }
    let last = producer.send_to(FLUSHED, 1, Record::new("last"));
    producer.close().await;
    let meta = tokio::time::timeout(Duration::ZERO, last)
        .await
        .expect("settled by close")
        .unwrap();
    assert_eq!(meta.partition, 1);
    cluster.shutdown().await.unwrap();
}

/// A send its caller drops (a timeout around it) before any broker answered counts as failed:
/// the client's later sends to the partition go through, instead of waiting behind its
/// sequence numbers or being refused as out of order for the gap it left. Dropped while it
/// waits for an answer, and dropped while it waits for the partition's one in-flight slot
/// behind a send that then fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_dropped_by_its_caller_does_not_hold_up_the_partitions_later_sends() {
    use replog::ClientConfig;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(3, dir.path(), TOPIC, 1, |_| {}).await;
    let addrs = cluster.addrs();
    let mut config = ClientConfig::default();
    config.in_flight_per_partition = 1;
    config.delivery_timeout = Duration::from_secs(2);
    let client = support::connect(&addrs, config, Duration::from_secs(20)).await;
    let mut expected = Vec::new();
    for round in 0..2 {
        let first = format!("first {round}");
        client
            .send(TOPIC, 0, &[Record::new(first.clone())])
            .await
            .unwrap();
        expected.push(first.into_bytes());
        for id in 1..=3 {
            cluster.stop(id).await.unwrap();
        }
        // No broker runs: nothing sent now can land.
        let fails = [Record::new("fails")];
        let dropped = [Record::new("dropped")];
        let dropped =
            tokio::time::timeout(Duration::from_millis(300), client.send(TOPIC, 0, &dropped));
        if round == 0 {
            let dropped = dropped.await;
            assert!(dropped.is_err(), "{dropped:?}");
        } else {
            // The first send, polled first, takes the partition's one in-flight slot and holds it
            // until its two-second deadline; the second is dropped while it waits for the slot.
            let (failed, dropped) =
                futures_util::future::join(client.send(TOPIC, 0, &fails), dropped).await;
            assert!(failed.is_err(), "{failed:?}");
            assert!(dropped.is_err(), "{dropped:?}");
        }
        for id in 1..=3 {
            cluster.restart(id).await.unwrap();
        }
        let next = format!("next {round}");
        let record = [Record::new(next.clone())];
        tokio::time::timeout(Duration::from_secs(30), client.send(TOPIC, 0, &record))
            .await
            .expect("the next send ends in time")
            .unwrap();
        expected.push(next.into_bytes());
    }
    let values: Vec<Vec<u8>> = client
        .fetch(TOPIC, 0, Offset(0), 1 << 20, None)
        .await
        .unwrap()
        .iter()
        .flat_map(|b| b.records())
        .map(|(_, r)| r.value.to_vec())
        .collect();
    assert_eq!(values, expected);
}
