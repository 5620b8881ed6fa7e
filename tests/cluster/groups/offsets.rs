//! Committed offsets: fenced by generation, reset and described, read back by the next
//! coordinator, kept small by the offsets topic's compaction, and used by the CLI.

use super::*;

/// A commit from a member of an older generation is refused; committed offsets survive the
/// coordinator's broker going away; a consumer that starts again resumes at them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_are_fenced_survive_the_coordinators_failover_and_resume_a_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = crate::local_cluster(3, dir.path(), TOPIC, 2, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    for p in 0..2 {
        let batch: Vec<Record> = (0..50).map(|i| Record::new(format!("{p}-{i}"))).collect();
        client.send(TOPIC, p, &batch).await.unwrap();
    }
    let group = "resumers";
    // The first member gives a rebalance only 2 s to see it again.
    let mut config = group_config(group);
    config.rebalance_timeout = Duration::from_secs(2);
    let mut first = Consumer::new(Arc::clone(&client), config);
    first.subscribe(&[TOPIC]).unwrap();
    let mut got = 0;
    wait_until(
        Duration::from_secs(30),
        "the first member to get 100 records",
        async || {
            got += first.poll(Duration::from_millis(500)).await.unwrap().len();
            got >= 100
        },
    )
    .await;
    let generation = first.generation().unwrap();
    first
        .commit_offsets(&[(TOPIC, 0, Offset(30)), (TOPIC, 1, Offset(40))])
        .await
        .unwrap();
    assert_eq!(first.committed(TOPIC, 0).await.unwrap(), Some(Offset(30)));

    // A second member makes the group rebalance. The first does not poll, so it does not
    // rejoin: the new generation goes on without it, and its commits are refused.
    let mut second = Consumer::new(Arc::clone(&client), group_config(group));
    second.subscribe(&[TOPIC]).unwrap();
    poll_until(&mut second, "both partitions on the second member", |c| {
        c.assignment().len() >= 2
    })
    .await;
    assert!(second.generation().unwrap() > generation);
    let fenced = first.commit_offsets(&[(TOPIC, 0, Offset(45))]).await;
    assert!(
        matches!(
            fenced,
            Err(Error::Group {
                error: GroupError::UnknownMemberId | GroupError::IllegalGeneration,
                ..
            })
        ),
        "{fenced:?}"
    );
    assert_eq!(first.committed(TOPIC, 0).await.unwrap(), Some(Offset(30)));
    // Once it polls, it joins again and the two share the partitions.
    let owns_one = |c: &Consumer| c.assignment().len() == 1;
    let second = tokio::spawn(poll_until_owned(second, "one partition each", owns_one));
    poll_until(&mut first, "one partition each", owns_one).await;
    let second = second.await.unwrap();
    assert_eq!(first.generation(), second.generation());
    let info = client.describe_group(group).await.unwrap();
    assert_eq!(info.state, "Stable");
    assert_eq!(info.members.len(), 2);
    let parts: BTreeSet<(String, u32)> = info
        .members
        .iter()
        .flat_map(|m| {
            m.assignment
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
        })
        .collect();
    assert_eq!(parts.len(), 2, "{info:?}");
    // An offset reset needs a group with no members.
    let reset = client
        .reset_group_offsets(group, &[(TOPIC.to_string(), 0, Some(Offset(1)))])
        .await;
    assert!(
        matches!(
            reset,
            Err(Error::Group {
                error: GroupError::NonEmptyGroup,
                ..
            })
        ),
        "{reset:?}"
    );
    // Auto-commit is off: closing commits nothing, and the offsets stay 30 and 40.
    first.close().await.unwrap();
    second.close().await.unwrap();
    let committed = client.committed_offsets(group).await.unwrap();
    assert_eq!(
        committed.values().copied().collect::<Vec<_>>(),
        vec![Offset(30), Offset(40)]
    );

    // Stop the coordinator's broker: the offsets are read back by the next coordinator.
    let coordinator = client.group_coordinator(group).await.unwrap();
    let id = broker_at(&cluster, &coordinator);
    cluster.stop(id).await.unwrap();
    let survivors: Vec<SocketAddr> = cluster
        .addrs()
        .into_iter()
        .filter(|a| coordinator != *a)
        .collect();
    let client = Arc::new(
        Client::connect(&survivors, ClientConfig::default())
            .await
            .unwrap(),
    );
    let after = client.committed_offsets(group).await.unwrap();
    assert_eq!(after, committed, "committed offsets after the failover");
    assert_ne!(client.group_coordinator(group).await.unwrap(), coordinator);

    // A consumer of the group starts at the committed offsets.
    let mut again = Consumer::new(Arc::clone(&client), group_config(group));
    again.subscribe(&[TOPIC]).unwrap();
    let mut first_offsets = BTreeMap::new();
    wait_until(
        Duration::from_secs(30),
        "records of both partitions",
        async || {
            for r in again.poll(Duration::from_millis(500)).await.unwrap() {
                first_offsets.entry(r.partition).or_insert(r.offset);
            }
            first_offsets.len() >= 2
        },
    )
    .await;
    let resumed: BTreeMap<u32, Offset> = committed.iter().map(|((_, p), o)| (*p, *o)).collect();
    assert_eq!(first_offsets, resumed);
    again.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A round-robin group, and a consumer that commits for partitions it assigned itself (no
/// membership) while the group has no members; groups are listed and described.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_listed_described_and_reset_and_round_robin_assigns() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(1, dir.path(), TOPIC, 3, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    let mut manual = Consumer::new(Arc::clone(&client), group_config("manual"));
    manual
        .assign(TOPIC, Some(&[1]), StartAt::Beginning)
        .await
        .unwrap();
    assert!(
        manual.subscribe(&[TOPIC]).is_err(),
        "assign or subscribe, not both"
    );
    manual
        .commit_offsets(&[(TOPIC, 1, Offset(0))])
        .await
        .unwrap();
    assert_eq!(manual.committed(TOPIC, 1).await.unwrap(), Some(Offset(0)));
    assert_eq!(manual.committed(TOPIC, 2).await.unwrap(), None);
    client
        .reset_group_offsets("manual", &[(TOPIC.to_string(), 1, None)])
        .await
        .unwrap();
    assert_eq!(manual.committed(TOPIC, 1).await.unwrap(), None);
    let unknown = client
        .reset_group_offsets(
            "manual",
            &[("no-such-topic".to_string(), 0, Some(Offset(3)))],
        )
        .await;
    assert!(
        matches!(
            unknown,
            Err(Error::Group {
                error: GroupError::UnknownTopicOrPartition,
                ..
            })
        ),
        "{unknown:?}"
    );
    manual
        .commit_offsets(&[(TOPIC, 1, Offset(0))])
        .await
        .unwrap();

    let mut config = group_config("rr");
    config.assignors = vec![Assignor::RoundRobin];
    let mut rr = Consumer::new(Arc::clone(&client), config);
    rr.subscribe(&[TOPIC]).unwrap();
    joined(&mut rr).await;
    assert_eq!(rr.assignment().len(), 3);
    let info = client.describe_group("rr").await.unwrap();
    assert_eq!(info.protocol, "roundrobin");
    assert_eq!(info.members[0].client_id, "replog");
    assert_eq!(info.members[0].host, "/127.0.0.1");
    let listed = client.list_groups().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|g| g.group.as_str()).collect();
    assert!(
        names.contains(&"rr") && names.contains(&"manual"),
        "{listed:?}"
    );
    assert_eq!(
        listed.iter().find(|g| g.group == "rr").unwrap().state,
        "Stable"
    );
    rr.close().await.unwrap();
    let info = client.describe_group("rr").await.unwrap();
    assert_eq!(info.state, "Empty");
    manual.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// The CLI as Kafka's tools: `replog consume --group` reads a 4-partition topic in full and
/// commits what it printed; a second run resumes after it; `replog groups` lists the group,
/// describes it with kafka-consumer-groups' columns, and resets its offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_consumes_as_a_group_resumes_and_describes_and_resets_it() {
    const CLI_TOPIC: &str = "cli-grouped";
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(3, dir.path(), CLI_TOPIC, 4, |_| {}).await;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    for p in 0..4 {
        let batch: Vec<Record> = (0..100).map(|i| Record::new(format!("{p}-{i}"))).collect();
        client.send(CLI_TOPIC, p, &batch).await.unwrap();
    }
    let server = cluster.addrs()[2].to_string();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            crate::cli(&args, "")
        })
    };
    let consume = || -> Vec<String> {
        [
            "consume",
            "--bootstrap-server",
            &server,
            "--topic",
            CLI_TOPIC,
            "--group",
            "cli",
            "--from-beginning",
            "--timeout-ms",
            "3000",
        ]
        .map(String::from)
        .to_vec()
    };
    let groups = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            "groups".to_string(),
            "--bootstrap-server".into(),
            server.clone(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let (ok, out, err) = run(consume()).await.unwrap();
    assert!(ok, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    let mut want: Vec<String> = (0..4)
        .flat_map(|p| (0..100).map(move |i| format!("{p}-{i}")))
        .collect();
    want.sort_unstable();
    assert_eq!(lines, want, "every record of every partition, once");
    assert!(err.contains("Processed a total of 400 messages"), "{err}");

    let (ok, out, err) = run(groups(&["--describe", "--group", "cli"]))
        .await
        .unwrap();
    assert!(ok, "{err}");
    println!("{out}");
    assert!(
        out.contains("Consumer group 'cli' has no active members."),
        "{out}"
    );
    let header: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("GROUP"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID"
        ]
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("cli "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    for r in &rows {
        assert_eq!(&r[3..6], ["100", "100", "0"], "{out}");
    }

    // New records only, on the next run.
    client
        .send(
            CLI_TOPIC,
            2,
            &[Record::new("late-1"), Record::new("late-2")],
        )
        .await
        .unwrap();
    let (ok, out, err) = run(consume()).await.unwrap();
    assert!(ok, "{err}");
    assert_eq!(out, "late-1\nlate-2\n");
    let (ok, out, _) = run(groups(&["--list"])).await.unwrap();
    assert!(ok);
    assert!(out.lines().any(|l| l == "cli"), "{out}");

    // A dry run changes nothing; --execute resets to the beginning.
    let reset = |execute: bool| {
        let mut a = groups(&[
            "--reset-offsets",
            "--group",
            "cli",
            "--topic",
            CLI_TOPIC,
            "--to-earliest",
        ]);
        if execute {
            a.push("--execute".into());
        }
        a
    };
    let (ok, out, err) = run(reset(false)).await.unwrap();
    assert!(ok, "{err}");
    assert!(err.contains("dry run"), "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("cli ")).count(),
        4,
        "{out}"
    );
    assert_eq!(
        client.committed_offsets("cli").await.unwrap()[&(CLI_TOPIC.to_string(), 2)],
        Offset(102)
    );
    let (ok, _, err) = run(reset(true)).await.unwrap();
    assert!(ok, "{err}");
    let committed = client.committed_offsets("cli").await.unwrap();
    assert!(committed.values().all(|o| *o == Offset(0)), "{committed:?}");
    let (ok, out, _) = run(consume()).await.unwrap();
    assert!(ok);
    assert_eq!(out.lines().count(), 402);
    // A group with a live member cannot be reset.
    let mut live = Consumer::new(
        Arc::new(
            Client::connect(&cluster.addrs(), ClientConfig::default())
                .await
                .unwrap(),
        ),
        group_config("cli"),
    );
    live.subscribe(&[CLI_TOPIC]).unwrap();
    joined(&mut live).await;
    let (ok, _, err) = run(reset(true)).await.unwrap();
    assert!(!ok);
    assert!(err.contains("has live members"), "{err}");
    live.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// The bytes of the frames of `node`'s replica of offsets partition 0, from its log start to
/// its high watermark, as stored (gap frames included).
fn offsets_partition_bytes(node: &replog::Node) -> u64 {
    let status = node.status(replog::OFFSETS_TOPIC, 0).unwrap();
    let mut next = status.log_start;
    let mut bytes = 0u64;
    // Bounded by the high watermark: each read moves `next` past at least one batch.
    for _ in 0..1_000_000 {
        if next >= status.high_watermark {
            break;
        }
        let batches = node.read(replog::OFFSETS_TOPIC, 0, next, 1 << 20).unwrap();
        let Some(last) = batches.last() else { break };
        next = last.next_offset();
        bytes += batches.iter().map(|b| b.size_bytes() as u64).sum::<u64>();
    }
    bytes
}

/// The offsets topic is compacted as Kafka's: after thousands of commits every replica of its
/// partition holds each key's latest record and the segment being written (which compaction
/// leaves whole), and the committed offsets read back the same, after the coordinator's
/// failover too. A deleted group whose name a new group takes keeps none of its old offsets
/// once compaction has dropped the deletion's group record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offsets_topic_is_compacted_on_every_replica_and_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 80u64 << 10;
    let mut cluster = crate::local_cluster(3, dir.path(), TOPIC, 20, |c| {
        c.log.record_bytes_max = 16 << 10;
        c.log.batch_bytes_max = 64 << 10;
        c.offsets_segment_bytes = segment_bytes;
        c.durability = replog::Durability::Replicated;
        c.offsets_topic_partitions = 1;
        c.retention_check_interval = Duration::from_millis(0); // applied below, by hand
    })
    .await;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    // A group with offsets on every partition, deleted, and its name taken by a new group
    // (a consumer's join writes its group record) that commits one offset.
    let doomed = "doomed";
    let all: Vec<(String, u32, Option<Offset>)> = (0..20)
        .map(|p| (TOPIC.to_string(), p, Some(Offset(7))))
        .collect();
    client.reset_group_offsets(doomed, &all).await.unwrap();
    client.delete_group(doomed).await.unwrap();
    let member_client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    let mut member = Consumer::new(Arc::new(member_client), group_config(doomed));
    member.subscribe(&[TOPIC]).unwrap();
    joined(&mut member).await;
    member.close().await.unwrap();
    let reborn = vec![(TOPIC.to_string(), 0, Some(Offset(9)))];
    client.reset_group_offsets(doomed, &reborn).await.unwrap();
    let doomed_want: BTreeMap<(String, u32), Offset> =
        BTreeMap::from([((TOPIC.to_string(), 0), Offset(9))]);

    let group = "compacted";
    let rounds = 500u64;
    for round in 1..=rounds {
        let offsets: Vec<(String, u32, Option<Offset>)> = (0..20)
            .map(|p| {
                (
                    TOPIC.to_string(),
                    p,
                    Some(Offset(round * 100 + u64::from(p))),
                )
            })
            .collect();
        client.reset_group_offsets(group, &offsets).await.unwrap();
    }
    let want: BTreeMap<(String, u32), Offset> = (0..20)
        .map(|p| ((TOPIC.to_string(), p), Offset(rounds * 100 + u64::from(p))))
        .collect();
    let written: u64 = cluster.nodes().map(offsets_partition_bytes).max().unwrap();
    // Every replica compacts its copy: what stays is about one round's records, the segment
    // being written, and a few bytes for each emptied batch.
    let sizes = wait_until(
        Duration::from_secs(60),
        "every replica to compact the offsets partition",
        async || {
            let mut sizes = Vec::new();
            for node in cluster.nodes() {
                node.enforce_retention().await.unwrap();
                sizes.push(offsets_partition_bytes(node));
            }
            if sizes.iter().all(|s| *s <= segment_bytes + (16 << 10)) {
                Ok(sizes)
            } else {
                Err(format!("not compacted: {sizes:?} bytes"))
            }
        },
    )
    .await;
    println!("offsets partition: {written} bytes written, {sizes:?} bytes after compaction");
    assert_eq!(client.committed_offsets(group).await.unwrap(), want);
    assert_eq!(client.committed_offsets(doomed).await.unwrap(), doomed_want);
    // The next coordinator loads the compacted partition.
    let coordinator = client.group_coordinator(group).await.unwrap();
    let id = broker_at(&cluster, &coordinator);
    cluster.stop(id).await.unwrap();
    let survivors: Vec<SocketAddr> = cluster
        .addrs()
        .into_iter()
        .filter(|a| coordinator != *a)
        .collect();
    let client = Client::connect(&survivors, ClientConfig::default())
        .await
        .unwrap();
    assert_eq!(client.committed_offsets(group).await.unwrap(), want);
    assert_eq!(client.committed_offsets(doomed).await.unwrap(), doomed_want);
    drop(client);
    cluster.shutdown().await.unwrap();
}
