//! Topic configs over the native door, on a three-broker cluster: set at creation and changed
//! at run time through any broker, applied by every replica without a restart (a compacted
//! topic refuses keyless records, `max.message.bytes` bounds a produce, `retention.ms` with
//! `segment.ms` removes old records), refused with the key named when out of range; a topic
//! grown to more partitions; and the CLI's `replog configs`, `replog topics --create
//! --config` and `replog topics --alter --partitions`.

use std::time::Duration;

use replog::{ClientConfig, ConfigChange, ConfigSource, Error, Offset, Record, TopicConfigs};

use crate::support::{cli, connect, local_cluster, wait_until};

const TOPIC: &str = "configured";

fn set(key: &str, value: &str) -> ConfigChange {
    ConfigChange::Set {
        key: key.into(),
        value: value.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_configs_apply_on_every_replica_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(3, dir.path(), "other", 1, |c| {
        c.retention_check_interval = Duration::from_millis(100);
    })
    .await;
    let addrs = cluster.addrs();
    let client = connect(&addrs, ClientConfig::default(), Duration::from_secs(20)).await;

    // Created compacted: a record without a key is refused, with a key it is written.
    let configs = TopicConfigs::from_pairs([("cleanup.policy", "compact")]).unwrap();
    client
        .create_topic_with_configs(TOPIC, 1, 3, &configs)
        .await
        .unwrap();
    let keyless = client.send(TOPIC, 0, &[Record::new("v")]).await;
    assert!(
        matches!(keyless, Err(Error::InvalidRecord(_))),
        "{keyless:?}"
    );
    client
        .send(TOPIC, 0, &[Record::new("v").with_key("k")])
        .await
        .unwrap();

    // Described through every broker with its source.
    for addr in &addrs {
        let one = connect(&[*addr], ClientConfig::default(), Duration::from_secs(20)).await;
        let entries = one.describe_topic_configs(TOPIC).await.unwrap();
        let policy = entries.iter().find(|e| e.name == "cleanup.policy").unwrap();
        assert_eq!(
            (policy.value.as_str(), policy.source),
            ("compact", ConfigSource::Topic)
        );
        let segment_ms = entries.iter().find(|e| e.name == "segment.ms").unwrap();
        assert_eq!(segment_ms.source, ConfigSource::Default);
    }

    // Bad changes name their key and change nothing.
    for bad in [
        set("retention.ms", "-5"),
        set("no.such.key", "1"),
        set("max.message.bytes", "999999999"),
    ] {
        match client
            .alter_topic_configs(TOPIC, std::slice::from_ref(&bad))
            .await
        {
            Err(Error::InvalidTopicConfig { key, .. }) => {
                let ConfigChange::Set { key: asked, .. } = &bad else {
                    unreachable!()
                };
                assert_eq!(&key, asked);
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(matches!(
        client
            .alter_topic_configs("no.such.topic", &[set("retention.ms", "1")])
            .await,
        Err(Error::UnknownTopic(_))
    ));

    // Back to delete, and a small max.message.bytes: a larger batch is refused.
    client
        .alter_topic_configs(
            TOPIC,
            &[
                ConfigChange::Delete {
                    key: "cleanup.policy".into(),
                },
                set("max.message.bytes", "2048"),
            ],
        )
        .await
        .unwrap();
    let big = client.send(TOPIC, 0, &[Record::new(vec![1u8; 4096])]).await;
    assert!(matches!(big, Err(Error::BatchTooLarge { .. })), "{big:?}");
    let keyless = client
        .send(TOPIC, 0, &[Record::new("now a keyless one")])
        .await;
    assert!(keyless.is_ok(), "{keyless:?}");

    // Records older than retention.ms go once segment.ms rolls their segment: on every
    // replica, without a restart.
    client
        .alter_topic_configs(
            TOPIC,
            &[set("retention.ms", "200"), set("segment.ms", "100")],
        )
        .await
        .unwrap();
    for id in 1..=3 {
        let node = cluster.node(id).unwrap();
        wait_until(
            Duration::from_secs(20),
            &format!("broker {id} to remove the old records"),
            async || {
                let st = node.status(TOPIC, 0).unwrap();
                (st.log_start == Offset(2))
                    .then_some(())
                    .ok_or(format!("{st:?}"))
            },
        )
        .await;
    }
    cluster.shutdown().await.unwrap();
}

/// Configs set before brokers restart hold after: each broker, restarted in turn, applies
/// them from the metadata log before it serves (the restarted leader still refuses a record
/// without a key on a compacted topic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_configs_hold_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(3, dir.path(), "other", 1, |_| {}).await;
    let addrs = cluster.addrs();
    let client = connect(&addrs, ClientConfig::default(), Duration::from_secs(20)).await;
    let configs = TopicConfigs::from_pairs([("cleanup.policy", "compact")]).unwrap();
    client
        .create_topic_with_configs(TOPIC, 1, 3, &configs)
        .await
        .unwrap();
    for id in 1..=3 {
        cluster.restart(id).await.unwrap();
        cluster
            .wait_for_leaders(TOPIC, 1, Duration::from_secs(20))
            .await
            .unwrap();
    }
    let keyless = wait_until(
        Duration::from_secs(20),
        "a restarted leader to answer",
        async || match client.send(TOPIC, 0, &[Record::new("v")]).await {
            Err(Error::InvalidRecord(reason)) => Ok(reason),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert!(keyless.contains("compacted"), "{keyless}");
    cluster.shutdown().await.unwrap();
}

/// A created topic grows: its new partitions have all their replicas and a leader on every
/// broker's view, take records, and keep the old ones' data; it never shrinks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_grows_and_never_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(3, dir.path(), "other", 1, |_| {}).await;
    let addrs = cluster.addrs();
    let client = connect(&addrs, ClientConfig::default(), Duration::from_secs(20)).await;
    client.create_topic("grows", 1, 2).await.unwrap();
    client
        .send("grows", 0, &[Record::new("before").with_key("k")])
        .await
        .unwrap();
    client.create_partitions("grows", 4).await.unwrap();
    for addr in &addrs {
        let one = connect(&[*addr], ClientConfig::default(), Duration::from_secs(20)).await;
        let described = wait_until(
            Duration::from_secs(20),
            &format!("{addr} to describe four partitions with leaders"),
            async || {
                let d = one.describe("grows").await.map_err(|e| e.to_string())?;
                if d.len() == 4
                    && d.iter()
                        .all(|p| p.leader.is_some() && p.replicas.len() == 2)
                {
                    Ok(d)
                } else {
                    Err(format!("{d:?}"))
                }
            },
        )
        .await;
        assert_eq!(described.len(), 4);
    }
    for p in 1..4 {
        client
            .send("grows", p, &[Record::new(format!("new-{p}"))])
            .await
            .unwrap();
    }
    let old = client
        .fetch("grows", 0, Offset(0), 1 << 20, None)
        .await
        .unwrap();
    assert_eq!(old.len(), 1);
    for fewer in [4, 2] {
        match client.create_partitions("grows", fewer).await {
            Err(Error::PartitionsNotAdded {
                current, requested, ..
            }) => assert_eq!((current, requested), (4, fewer)),
            other => panic!("{fewer}: {other:?}"),
        }
    }
    assert!(matches!(
        client.create_partitions("no.such.topic", 2).await,
        Err(Error::UnknownTopic(_))
    ));
    cluster.shutdown().await.unwrap();
}

/// Partitions added on the brokers the client names (Kafka's CreatePartitions assignments):
/// through the native client, then through the CLI with kafka-topics' `--replica-assignment`
/// (every partition listed, the ones the topic has left as they are); each new partition's
/// replicas are exactly those asked for, in order, and run on those brokers; assignments
/// that cannot be taken are refused and add nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_partitions_go_to_the_brokers_asked_for() {
    const PLACED: &str = "placed";
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(3, dir.path(), "other", 1, |_| {}).await;
    let addrs = cluster.addrs();
    let client = connect(&addrs, ClientConfig::default(), Duration::from_secs(20)).await;
    client.create_topic(PLACED, 1, 2).await.unwrap();
    for (count, assignment) in [
        (3, vec![vec![3, 1]]),
        (2, vec![vec![1]]),
        (2, vec![vec![2, 2]]),
        (2, vec![vec![1, 9]]),
        (2, vec![vec![1, 2, 3]]),
    ] {
        let refused = client
            .create_partitions_assigned(PLACED, count, &assignment)
            .await;
        assert!(
            matches!(refused, Err(Error::InvalidReplicaAssignment(_))),
            "{assignment:?}: {refused:?}"
        );
    }
    assert_eq!(client.describe(PLACED).await.unwrap().len(), 1);

    client
        .create_partitions_assigned(PLACED, 3, &[vec![3, 1], vec![2, 3]])
        .await
        .unwrap();
    let bootstrap = addrs[1].to_string();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        cli(
            &[
                "topics",
                "--bootstrap-server",
                &bootstrap,
                "--alter",
                "--topic",
                PLACED,
                "--partitions",
                "4",
                "--replica-assignment",
                "1:2,3:1,2:3,1:3",
            ],
            "",
        )
    })
    .await
    .unwrap();
    assert!(ok, "{out}{err}");
    let want: [&[u64]; 3] = [&[3, 1], &[2, 3], &[1, 3]];
    let described = wait_until(
        Duration::from_secs(20),
        "four partitions with leaders",
        async || {
            let d = client.describe(PLACED).await.map_err(|e| e.to_string())?;
            if d.len() == 4 && d.iter().all(|p| p.leader.is_some()) {
                Ok(d)
            } else {
                Err(format!("{d:?}"))
            }
        },
    )
    .await;
    for (p, replicas) in (1..4).zip(want) {
        assert_eq!(described[p].replicas, replicas, "{}", described[p]);
        let id = replog::PartitionId::new(PLACED, p as u32);
        let mut hosts: Vec<u64> = (1..=3)
            .filter(|b| cluster.node(*b).unwrap().partitions().contains(&id))
            .collect();
        hosts.sort_unstable();
        let mut expected = replicas.to_vec();
        expected.sort_unstable();
        assert_eq!(hosts, expected, "partition {p} runs on its replicas");
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// `replog topics --create --config`, `replog configs --alter` and `--describe` against
/// broker processes.
#[test]
fn the_cli_creates_describes_and_changes_topic_configs() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = crate::support::process_addrs(1);
    let _broker = crate::support::Broker::spawn(1, &addrs, dir.path(), &[]);
    let server = addrs[0].to_string();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--bootstrap-server", server.as_str()]);
        let (ok, out, err) = cli(&all, "");
        assert!(ok, "{args:?}: {err}");
        out
    };
    crate::support::wait_until_blocking(Duration::from_secs(20), "the broker to start", || {
        let (ok, _, err) = cli(&["topics", "--list", "--bootstrap-server", &server], "");
        if ok { Ok(()) } else { Err(err) }
    });
    run(&[
        "topics",
        "--create",
        "--topic",
        "t",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "retention.ms=1000",
    ]);
    // `replog configs --entity-type topics --entity-name t` with `more`.
    let configs = |more: &[&'static str]| {
        let mut args = vec!["configs", "--entity-type", "topics", "--entity-name", "t"];
        args.extend(more);
        args
    };
    let described = run(&configs(&["--describe"]));
    assert!(
        described.contains("cleanup.policy=compact ")
            && described.contains("retention.ms=1000 ")
            && !described.contains("segment.ms"),
        "{described}"
    );
    run(&configs(&[
        "--alter",
        "--add-config",
        "cleanup.policy=[compact,delete],segment.ms=60000",
        "--delete-config",
        "retention.ms",
    ]));
    let all = run(&configs(&["--describe", "--all"]));
    assert!(
        all.contains("cleanup.policy=compact,delete ")
            && all.contains("segment.ms=60000 ")
            && all.contains("retention.ms=-1 ")
            && all.contains("STATIC_BROKER_CONFIG:log.retention.ms=-1"),
        "{all}"
    );
    run(&["topics", "--alter", "--topic", "t", "--partitions", "3"]);
    let described = run(&["topics", "--describe", "--topic", "t"]);
    assert_eq!(described.lines().count(), 3, "{described}");
    let mut bad: Vec<&str> = configs(&["--alter", "--add-config", "retention.ms=soon"])
        .into_iter()
        .collect();
    bad.extend(["--bootstrap-server", &server]);
    let (ok, _, err) = cli(&bad, "");
    assert!(!ok && err.contains("retention.ms"), "{err}");
}

/// DeleteRecords through the Kafka door at a partition's leader: every replica's records
/// start at the offset asked for (reads below it are out of range on each), the segments
/// wholly below it are removed, and the leader keeps the start across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_records_are_gone_from_every_replica() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, TopicName,
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(3, dir.path(), "other", 1, |c| {
        c.kafka_listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        c.retention_check_interval = Duration::from_millis(100);
        c.log.record_bytes_max = 4 << 10;
        c.log.batch_bytes_max = 16 << 10;
        c.log.segment_bytes = 64 << 10;
    })
    .await;
    let addrs = cluster.addrs();
    let client = connect(&addrs, ClientConfig::default(), Duration::from_secs(20)).await;
    client.create_topic("trimmed", 1, 3).await.unwrap();
    for batch in 0..20 {
        let records: Vec<Record> = (0..10)
            .map(|i| Record::new(format!("{batch}-{i}-{}", "x".repeat(1000))))
            .collect();
        client.send("trimmed", 0, &records).await.unwrap();
    }
    let segments = |id: u64| {
        let dir = cluster.data_dir(id).unwrap().join("trimmed-0");
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
            })
            .count()
    };
    let before: Vec<usize> = (1..=3).map(segments).collect();
    assert!(before.iter().all(|n| *n > 3), "{before:?}");

    let leader = client.describe("trimmed").await.unwrap()[0].leader.unwrap();
    let at = cluster.node(leader).unwrap().kafka_addr().unwrap();
    let mut request = DeleteRecordsRequest::default();
    let mut topic = DeleteRecordsTopic::default();
    topic.name = TopicName(kafka_protocol::protocol::StrBytes::from_static_str(
        "trimmed",
    ));
    let mut partition = DeleteRecordsPartition::default();
    partition.offset = 150;
    topic.partitions.push(partition);
    request.topics.push(topic);
    request.timeout_ms = 10_000;
    let (_, answer): (usize, DeleteRecordsResponse) =
        crate::kafka::kafka_call(at, ApiKey::DeleteRecords, 2, &request).await;
    let p = &answer.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 150));

    for id in 1..=3 {
        let node = cluster.node(id).unwrap();
        wait_until(
            Duration::from_secs(20),
            &format!("broker {id}'s records to start at 150, its old segments gone"),
            async || {
                let st = node.status("trimmed", 0).unwrap();
                let n = segments(id);
                if st.log_start == Offset(150) && n < before[id as usize - 1] {
                    Ok(())
                } else {
                    Err(format!("{st:?}, {n} segments"))
                }
            },
        )
        .await;
        let below = client
            .fetch(
                "trimmed",
                0,
                Offset(149),
                1 << 20,
                Some(addrs[id as usize - 1].into()),
            )
            .await;
        assert!(
            matches!(below, Err(Error::OffsetOutOfRange { .. })),
            "{below:?}"
        );
        let from = client
            .fetch(
                "trimmed",
                0,
                Offset(150),
                1 << 20,
                Some(addrs[id as usize - 1].into()),
            )
            .await
            .unwrap();
        assert!(!from.is_empty());
    }
    cluster.restart(leader).await.unwrap();
    let node = cluster.node(leader).unwrap();
    wait_until(
        Duration::from_secs(20),
        "the restarted leader's start",
        async || {
            node.status("trimmed", 0)
                .ok()
                .filter(|st| st.log_start == Offset(150))
        },
    )
    .await;
    cluster.shutdown().await.unwrap();
}

/// Asks broker `at` over the native wire, by hand, to delete partition 0 of `topic`'s
/// records before `before` (`Op::DeleteRecords`, the body as `protocol.rs` pins it); the
/// answer's body.
async fn delete_records_by_hand(at: std::net::SocketAddr, topic: &str, before: u8) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut body = vec![topic.len() as u8];
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&[0x00, 0x01, before]);
    let mut frame = crate::hostile::header(body.len() as u32, 20, 1).to_vec();
    frame.extend_from_slice(&body);
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(&frame).await.unwrap();
    let mut head = [0u8; 16];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!((head[4], head[5]), (2, 20), "a response to DeleteRecords");
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let mut answer = vec![0u8; len];
    s.read_exact(&mut answer).await.unwrap();
    answer
}

/// DeleteRecords over the native door and the CLI: a follower refuses it naming the leader,
/// the leader commits the new start so every replica's records start there (a read below it
/// is out of range on each, a read from it answers from it), the start never moves back, and
/// an offset past the high watermark or an unknown topic is refused as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_deleted_through_the_native_door_and_the_cli() {
    const CUT: &str = "cut";
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(3, dir.path(), "other", 1, |_| {}).await;
    let addrs = cluster.addrs();
    let client = connect(&addrs, ClientConfig::default(), Duration::from_secs(20)).await;
    client.create_topic(CUT, 1, 3).await.unwrap();
    for batch in 0..5 {
        let records: Vec<Record> = (0..10)
            .map(|i| Record::new(format!("{batch}-{i}")))
            .collect();
        client.send(CUT, 0, &records).await.unwrap();
    }

    // A follower, asked by hand, refuses it with the leader's hint (Err, NotLeader, Some,
    // the leader's id).
    let leader = client.describe(CUT).await.unwrap()[0].leader.unwrap();
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    wait_until(
        Duration::from_secs(20),
        "the follower to refuse naming the leader",
        async || {
            let answer = delete_records_by_hand(addrs[follower as usize - 1], CUT, 5).await;
            if answer.get(..4) == Some(&[0x01, 0x00, 0x01, leader as u8][..]) {
                Ok(())
            } else {
                Err(format!("{answer:02x?}"))
            }
        },
    )
    .await;
    assert_eq!(
        cluster
            .node(leader)
            .unwrap()
            .status(CUT, 0)
            .unwrap()
            .log_start,
        Offset(0)
    );

    assert_eq!(
        client.delete_records(CUT, 0, Offset(20)).await.unwrap(),
        Offset(20)
    );
    for id in 1..=3u64 {
        let node = cluster.node(id).unwrap();
        wait_until(
            Duration::from_secs(20),
            &format!("broker {id}'s records to start at 20"),
            async || {
                let st = node.status(CUT, 0).unwrap();
                (st.log_start == Offset(20))
                    .then_some(())
                    .ok_or(format!("{st:?}"))
            },
        )
        .await;
        let replica = Some(addrs[id as usize - 1].into());
        let below = client
            .fetch(CUT, 0, Offset(19), 1 << 20, replica.clone())
            .await;
        assert!(
            matches!(below, Err(Error::OffsetOutOfRange { start, .. }) if start == Offset(20)),
            "{below:?}"
        );
        let from = client
            .fetch(CUT, 0, Offset(20), 1 << 20, replica)
            .await
            .unwrap();
        let first = from
            .iter()
            .flat_map(|b| b.records())
            .find(|(o, _)| *o >= Offset(20))
            .unwrap();
        assert_eq!(first.0, Offset(20));
        assert_eq!(first.1.value, "2-0");
    }
    // Never back; past the high watermark and unknown topics refused.
    assert_eq!(
        client.delete_records(CUT, 0, Offset(10)).await.unwrap(),
        Offset(20)
    );
    assert!(matches!(
        client.delete_records(CUT, 0, Offset(51)).await,
        Err(Error::OffsetOutOfRange { requested, end, .. })
            if requested == Offset(51) && end == Offset(50)
    ));
    assert!(matches!(
        client.delete_records("no.such.topic", 0, Offset(1)).await,
        Err(Error::UnknownTopic(t)) if t == "no.such.topic"
    ));

    // The CLI, as kafka-delete-records.
    let bootstrap = addrs[follower as usize - 1].to_string();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&args, "")
        })
    };
    let args = |topic: &str, offset: &str| {
        [
            "delete-records",
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            topic,
        ]
        .into_iter()
        .chain(["--partition", "0", "--offset", offset])
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    let (ok, out, err) = run(args(CUT, "30")).await.unwrap();
    assert!(ok, "{out}{err}");
    assert!(out.contains("partition: cut-0\tlow_watermark: 30"), "{out}");
    let (ok, _, err) = run(args(CUT, "99")).await.unwrap();
    assert!(!ok && err.contains("outside the log"), "{err}");
    let (ok, _, err) = run(args("no.such.topic", "1")).await.unwrap();
    assert!(!ok && err.contains("unknown topic"), "{err}");
    wait_until(
        Duration::from_secs(20),
        "every replica to start at 30",
        async || {
            (1..=3)
                .all(|id| cluster.node(id).unwrap().status(CUT, 0).unwrap().log_start == Offset(30))
                .then_some(())
        },
    )
    .await;
    drop(client);
    cluster.shutdown().await.unwrap();
}
