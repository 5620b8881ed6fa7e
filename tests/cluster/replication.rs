//! Replication on three in-process brokers: elections, redirects, committed reads on followers, a
//! follower catching up by snapshot or from further than a frame behind, oversized batches refused
//! before Raft, and a leader handing its partitions over at shutdown.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_elect_redirect_replicate_and_survive_a_leader_failure() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let mut nodes = start_all(|id| config(id, &addrs, dir.path())).await;

    // Every partition elects a leader; initialization spreads them over the brokers.
    let mut leaders = Vec::new();
    for p in 0..PARTITIONS {
        leaders.push(leader_of(&nodes, p).await);
    }
    let distinct: std::collections::BTreeSet<_> = leaders.iter().collect();
    assert!(
        distinct.len() >= 2,
        "leaders spread over brokers: {leaders:?}"
    );

    // Write on the leader of partition 0; a follower refuses with a hint naming the leader.
    let leader = leaders[0];
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let info = node_ref(&nodes, leader)
        .append(
            TOPIC,
            0,
            &[Record::new("follower-message-1"), Record::new("m2")],
        )
        .await
        .unwrap();
    assert_eq!(info.base_offset, Offset(0));
    match node_ref(&nodes, follower)
        .append(TOPIC, 0, &[Record::new("x")])
        .await
    {
        Err(Error::NotLeader {
            partition,
            leader: Some(hint),
        }) => {
            assert_eq!(partition.partition, 0);
            assert_eq!(hint.node_id, leader);
            assert_eq!(hint.addr, addrs[leader as usize - 1]);
        }
        other => panic!("expected NotLeader with a hint, got {other:?}"),
    }

    // Committed data is readable on every replica.
    for id in 1..=3 {
        let node = node_ref(&nodes, id);
        wait_until(Duration::from_secs(5), "replication", async || {
            (values(node, 0).len() == 2).then_some(())
        })
        .await;
        assert_eq!(values(node, 0)[0].1, b"follower-message-1");
    }
    let status = node_ref(&nodes, leader).status(TOPIC, 0).unwrap();
    assert_eq!(status.high_watermark, Offset(2));
    assert_eq!(status.follower_lag.len(), 2);

    // Acknowledged writes before the failure.
    let mut acked: Vec<Vec<u8>> = vec![b"follower-message-1".to_vec(), b"m2".to_vec()];
    for i in 0..20 {
        let v = format!("before-{i}").into_bytes();
        append_to_leader(&nodes, &[Record::new(v.clone())]).await;
        acked.push(v);
    }

    // Kill the leader: a new one is elected within two election timeouts.
    let killed = leader;
    let t = Instant::now();
    nodes[killed as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    let new_leader = leader_of(&nodes, 0).await;
    let elapsed = t.elapsed();
    assert_ne!(new_leader, killed);
    assert!(
        elapsed < Duration::from_millis(2 * 2 * ELECTION_TIMEOUT_MS + 1000),
        "new leader after {elapsed:?}"
    );
    for i in 0..20 {
        let v = format!("after-{i}").into_bytes();
        append_to_leader(&nodes, &[Record::new(v.clone())]).await;
        acked.push(v);
    }

    // Restart the killed broker from its directory: it catches up, and its committed log
    // equals the leader's record for record.
    nodes[killed as usize - 1] = Some(
        start_node(config(killed, &addrs, dir.path()))
            .await
            .unwrap(),
    );
    let expected: Vec<(u64, Vec<u8>)> = acked
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u64, v.clone()))
        .collect();
    for id in 1..=3 {
        let node = node_ref(&nodes, id);
        wait_until(Duration::from_secs(10), "catch-up", async || {
            (values(node, 0) == expected).then_some(())
        })
        .await;
    }
    // Frame for frame: the same log index, term, offsets, leader timestamp and record bytes.
    let frames = |node: &Node| -> Vec<Frame> {
        node.read(TOPIC, 0, Offset(0), usize::MAX)
            .unwrap()
            .iter()
            .map(|b| {
                let records = b
                    .records()
                    .map(|(_, r)| (r.key.map(|k| k.to_vec()), r.value.to_vec()))
                    .collect();
                (
                    b.log_index().get(),
                    b.term().get(),
                    b.base_offset().get(),
                    b.record_count(),
                    b.timestamp_ms(),
                    records,
                )
            })
            .collect()
    };
    let reference = frames(node_ref(&nodes, 1));
    let records: usize = reference.iter().map(|f| f.5.len()).sum();
    assert_eq!(records, expected.len());
    for id in 2..=3 {
        assert_eq!(
            frames(node_ref(&nodes, id)),
            reference,
            "broker {id} holds different frames"
        );
    }

    shutdown_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_missed_purged_segments_catches_up_by_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let small = |id| {
        let mut c = config(id, &addrs, dir.path());
        c.topics = vec![(TOPIC.to_string(), 1)];
        c.log.segment_bytes = 32 << 10;
        c.log.record_bytes_max = 4 << 10;
        c.log.batch_bytes_max = 16 << 10;
        c.log.retention_bytes = Some(64 << 10);
        // Retention runs by itself on every broker.
        c.retention_check_interval = Duration::from_millis(200);
        c
    };
    let mut nodes = start_all(small).await;
    let leader = leader_of(&nodes, 0).await;
    let down = (1..=3).find(|id| *id != leader).unwrap();
    nodes[down as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();

    // While it is down, the others write far past retention and purge.
    let value = vec![7u8; 1000];
    let mut count = 0u64;
    for _ in 0..100 {
        let batch: Vec<Record> = (0..4).map(|_| Record::new(value.clone())).collect();
        append_to_leader(&nodes, &batch).await;
        count += 4;
    }
    let leader_node = node_ref(&nodes, leader);
    let start = wait_until(Duration::from_secs(10), "the leader to purge", async || {
        let s = leader_node.status(TOPIC, 0).unwrap().log_start;
        (s > Offset(0)).then_some(s)
    })
    .await;

    // Back up: the entries it needs are gone, so it installs a snapshot and continues.
    nodes[down as usize - 1] = Some(start_node(small(down)).await.unwrap());
    let back = node_ref(&nodes, down);
    wait_until(
        Duration::from_secs(15),
        "the follower to catch up",
        async || {
            let st = back.status(TOPIC, 0).unwrap();
            (st.high_watermark == Offset(count)).then_some(())
        },
    )
    .await;
    let st = back.status(TOPIC, 0).unwrap();
    assert!(
        st.log_start >= start,
        "it starts after the purged data: {:?}",
        st.log_start
    );
    // New writes reach it, and everything it holds matches the leader offset for offset.
    append_to_leader(&nodes, &[Record::new("after")]).await;
    wait_until(Duration::from_secs(10), "the new write", async || {
        (back.status(TOPIC, 0).unwrap().high_watermark == Offset(count + 1)).then_some(())
    })
    .await;
    let mine = values(back, 0);
    let theirs = values(node_ref(&nodes, leader), 0);
    assert!(!mine.is_empty());
    // Retention keeps running on both, so compare where both still hold records.
    let from = mine[0].0.max(theirs[0].0);
    let overlap = |v: &[(u64, Vec<u8>)]| {
        v.iter()
            .filter(|(o, _)| *o >= from)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        overlap(&mine),
        overlap(&theirs),
        "the replicas agree offset for offset"
    );
    assert!(!overlap(&mine).is_empty());
    assert_eq!(mine.last().unwrap().1, b"after");
    shutdown_all(nodes).await;
}

/// Regression: a batch over the partition's `batch_bytes_max` (each record
/// under `record_bytes_max`) reached openraft's log write, whose storage error stopped the
/// leader's replica for good, and a client retried it into the next leader. It is refused now,
/// typed, before Raft, and the partition goes on taking writes; a client with larger limits
/// than the brokers gets the same refusal once, never a resend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_batch_is_refused_before_raft_and_the_partition_keeps_working() {
    use replog::{Client, ClientConfig};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let one_partition = |id| single_partition(id, &addrs, dir.path());
    let nodes = start_all(one_partition).await;
    let leader = leader_of(&nodes, 0).await;
    // Five records of 60 KiB: each under the 64 KiB record limit, 300 KiB in all, over the
    // 256 KiB batch limit.
    let big: Vec<Record> = (0..5).map(|_| Record::new(vec![7u8; 60 << 10])).collect();
    match node_ref(&nodes, leader).append(TOPIC, 0, &big).await {
        Err(Error::BatchTooLarge { len, max }) => {
            assert!(len > max, "{len} > {max}");
            assert_eq!(max, 256 << 10);
        }
        other => panic!("expected BatchTooLarge, got {other:?}"),
    }
    // A record over the record limit is named as such.
    match node_ref(&nodes, leader)
        .append(TOPIC, 0, &[Record::new(vec![1u8; 65 << 10])])
        .await
    {
        Err(Error::RecordTooLarge { max, .. }) => assert_eq!(max, 64 << 10),
        other => panic!("expected RecordTooLarge, got {other:?}"),
    }
    // The Raft group still runs: its leader (the same one, unless an election ran meanwhile) takes
    // the next write; before, no replica of it ever led again.
    append_to_leader(&nodes, &[Record::new("after")]).await;

    // A client configured with larger limits than the brokers: it learned theirs from
    // metadata and refuses the batch itself, typed, naming the brokers' limit, at once (far
    // below the delivery timeout); nothing was written.
    let mut config = ClientConfig::default();
    config.record_bytes_max = 1 << 20;
    config.batch_bytes_max = 4 << 20;
    config.delivery_timeout = Duration::from_millis(60_000);
    let client = Client::connect(&addrs, config).await.unwrap();
    let started = Instant::now();
    match client.send(TOPIC, 0, &big).await {
        Err(Error::BatchTooLarge { max, .. }) => assert_eq!(max, 256 << 10),
        other => panic!("expected BatchTooLarge at the brokers' limit, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refused, not retried until the delivery deadline"
    );
    match client
        .send(TOPIC, 0, &[Record::new(vec![1u8; 65 << 10])])
        .await
    {
        Err(Error::RecordTooLarge { max, .. }) => assert_eq!(max, 64 << 10),
        other => panic!("expected RecordTooLarge at the brokers' limit, got {other:?}"),
    }
    drop(client);
    // A record over the brokers' frame limit (16 MiB), from a client whose own limits would
    // let it through: it made the broker drop the connection, and the client resent it until
    // its delivery timeout and reported an unknown outcome. Now it is refused at once.
    let mut config = ClientConfig::default();
    config.record_bytes_max = 128 << 20;
    config.batch_bytes_max = 128 << 20;
    config.frame_bytes_max = 256 << 20;
    config.delivery_timeout = Duration::from_millis(60_000);
    let client = Client::connect(&addrs, config).await.unwrap();
    let started = Instant::now();
    match client
        .send(TOPIC, 0, &[Record::new(vec![3u8; 64 << 20])])
        .await
    {
        Err(Error::RecordTooLarge { max, .. }) => assert_eq!(max, 64 << 10),
        other => panic!("expected RecordTooLarge at the brokers' limit, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refused, not retried until the delivery deadline"
    );
    client.send(TOPIC, 0, &[Record::new("last")]).await.unwrap();
    drop(client);
    assert_every_replica_holds(&nodes, &["after", "last"]).await;
    shutdown_all(nodes).await;
}

/// Regression: openraft packs up to 300 entries into one replication request,
/// and the log store read them with no byte limit, so a follower further behind than its frame
/// limit got a request it had to refuse, again and again, and never caught up. Each request now
/// carries at most the receiver's frame limit of entries: here a follower 9 MiB behind a 1 MiB
/// frame limit catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_further_behind_than_a_frame_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let small_frames = |id| {
        let mut c = single_partition(id, &addrs, dir.path());
        c.frame_bytes_max = (1 << 20) + (8 << 10);
        c.log.segment_bytes = 4 << 20;
        c
    };
    let mut nodes = start_all(small_frames).await;
    let leader = leader_of(&nodes, 0).await;
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    nodes[behind as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    // 40 batches of 4 records of 60 KiB: 9.6 MiB the stopped follower lacks.
    let batch: Vec<Record> = (0..4).map(|_| Record::new(vec![3u8; 60 << 10])).collect();
    for _ in 0..40 {
        node_ref(&nodes, leader)
            .append(TOPIC, 0, &batch)
            .await
            .unwrap();
    }
    nodes[behind as usize - 1] = Some(start_node(small_frames(behind)).await.unwrap());
    let follower = node_ref(&nodes, behind);
    wait_until(
        Duration::from_secs(60),
        "the follower to catch up",
        async || {
            let s = follower.status(TOPIC, 0).ok()?;
            (s.high_watermark == Offset(160)).then_some(())
        },
    )
    .await;
    let read = follower
        .read(TOPIC, 0, Offset(0), usize::MAX)
        .unwrap()
        .iter()
        .map(|b| b.record_count())
        .sum::<u32>();
    assert_eq!(read, 160, "the follower holds every record");

    // Regression: a fetch that allows any size got an answer over the frame
    // limit, which the asker then refused. Answers now stay within both ends' frame limits.
    use replog::{Client, ClientConfig};
    let mut config = ClientConfig::default();
    config.frame_bytes_max = (1 << 20) + (8 << 10);
    let client = Client::connect(&addrs, config).await.unwrap();
    let batches = client
        .fetch(TOPIC, 0, Offset(0), u32::MAX, None)
        .await
        .unwrap();
    let bytes: usize = batches
        .iter()
        .map(|b| b.records().map(|(_, r)| r.value.len()).sum::<usize>())
        .sum();
    assert!(
        !batches.is_empty() && bytes < 1 << 20,
        "{} batches, {bytes} bytes",
        batches.len()
    );
    drop(client);
    shutdown_all(nodes).await;
}

/// Regression: a clean shutdown was as bad as a crash: the partitions a
/// leader led had no leader until an election timeout passed. `Node::shutdown` now hands each
/// of them to a live follower first, so the moment it returns another broker leads them, in a
/// later term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_shuts_down_hands_its_partitions_over_first() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(3);
    let mut nodes = start_all(|id| config(id, &addrs, dir.path())).await;
    let mut led: Vec<(u32, u64, u64)> = Vec::new();
    let mut leader = 0;
    for p in 0..PARTITIONS {
        let l = leader_of(&nodes, p).await;
        if leader == 0 {
            leader = l;
        }
        if l == leader {
            led.push((p, l, node_ref(&nodes, l).status(TOPIC, p).unwrap().term));
        }
    }
    // Written just before: the hand-off keeps it.
    node_ref(&nodes, leader)
        .append(TOPIC, led[0].0, &[Record::new("before")])
        .await
        .unwrap();
    nodes[leader as usize - 1]
        .take()
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    for (p, old, term) in led {
        let successor = nodes.iter().flatten().find(|n| {
            n.status(TOPIC, p)
                .is_ok_and(|s| s.leader == Some(n.id()) && s.term > term)
        });
        assert!(
            successor.is_some(),
            "partition {p} (led by {old} in term {term}) has a new leader as soon as it shut down"
        );
    }
    shutdown_all(nodes).await;
}
