//! The Kafka port spoken to byte by byte, as a client encodes with the `kafka-protocol` crate:
//! hostile bytes and length claims refused, fetch answers within `max_bytes`, Kafka batches served
//! as stored and both doors reading one log, the admin, epoch and refusal APIs, hostile batches
//! refused with nothing written.

// Kafka's wire is big-endian; the crate's own formats are little-endian, which the lint guards.
#![allow(clippy::big_endian_bytes)]

use std::time::Duration;

use crate::kafka::*;
use crate::support::wait_until;

/// Bytes no Kafka client sends: a length prefix of 4 GiB, a too-new ApiVersions (answered as
/// Kafka does: version 0, UNSUPPORTED_VERSION, the ranges), an unknown API; the broker closes
/// only that connection and serves the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_port_refuses_hostile_bytes_and_answers_a_newer_api_versions() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let _client = connect(&addrs).await;
    let at = kafka[0];
    // Broker 1 may still be starting.
    kafka_connect(at).await;
    let closed = |mut s: tokio::net::TcpStream| async move {
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("closed in time")
            .unwrap_or(0);
        assert_eq!(n, 0, "the connection is closed without an answer");
    };
    // A length prefix of 4 GiB.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
    closed(s).await;
    // An unknown API key.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(&[0, 0, 0, 8, 0x7f, 0x7f, 0, 0, 0, 0, 0, 1])
        .await
        .unwrap();
    closed(s).await;
    // ApiVersions v99: a v0 answer with error 35 and the served ranges.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let mut request = vec![0, 18, 0, 99, 0, 0, 0, 7, 0, 0];
    let mut framed = (request.len() as u32).to_be_bytes().to_vec();
    framed.append(&mut request);
    s.write_all(&framed).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(&body[..4], &7i32.to_be_bytes(), "the correlation id");
    assert_eq!(&body[4..6], &35i16.to_be_bytes(), "UNSUPPORTED_VERSION");
    let ranges = i32::from_be_bytes([body[6], body[7], body[8], body[9]]);
    assert!(ranges >= 5, "{ranges} ranges");
    // The broker still serves.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let mut request = vec![0, 18, 0, 0, 0, 0, 0, 9, 0, 0];
    let mut framed = (request.len() as u32).to_be_bytes().to_vec();
    framed.append(&mut request);
    s.write_all(&framed).await.unwrap();
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(&body[4..6], &0i16.to_be_bytes());
    drop(brokers);
}

/// A Kafka Fetch's answer stays within the request's `max_bytes` (Kafka's fetch.max.bytes):
/// the first partition with records is answered whole, the others with their high watermark
/// and no records; the client asks again for those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_fetch_answer_stays_within_the_requests_max_bytes() {
    use kafka_protocol::messages::{ApiKey, FetchResponse};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("wide", 4, 3).await.unwrap();
    for p in 0..4 {
        let batch: Vec<replog::Record> = (0..256)
            .map(|_| replog::Record::new(vec![7u8; 1024]))
            .collect();
        client.send("wide", p, &batch).await.unwrap();
    }
    let leader = client.describe("wide").await.unwrap()[0].leader.unwrap();
    // Every partition's leader answers for its own; ask the leader of partition 0 for all
    // four (those it does not lead it answers from its replica: committed records either way).
    let at = kafka[leader as usize - 1];
    let request = fetch_request("wide", 4, 300 << 10);
    // A broker may not host a replica yet (a majority acknowledged the writes): it answers
    // NOT_LEADER_OR_FOLLOWER for it until it does; asked again until every partition answers.
    let (len, response) = wait_until(Duration::from_secs(20), "every mark given", async || {
        let (len, response): (usize, FetchResponse) =
            kafka_call(at, ApiKey::Fetch, 11, &request).await;
        let marks: Vec<(i64, i16)> = response.responses[0]
            .partitions
            .iter()
            .map(|p| (p.high_watermark, p.error_code))
            .collect();
        if marks.iter().all(|m| *m == (256, 0)) {
            Ok((len, response))
        } else {
            Err(format!("marks {marks:?}"))
        }
    })
    .await;
    assert!(
        len < 400 << 10,
        "an answer of {len} bytes for a max_bytes of 300 KiB"
    );
    let partitions = &response.responses[0].partitions;
    let with_records = partitions
        .iter()
        .filter(|p| p.records.as_ref().is_some_and(|r| !r.is_empty()))
        .count();
    assert_eq!(with_records, 1, "one partition's records fit");
    drop(client);
    drop(brokers);
}

/// One log, two doors: a Kafka producer's batches (every codec, null values, headers,
/// CreateTime stamps) come back to a Kafka fetch byte for byte as sent, with only the base
/// offset and leader epoch set, and a valid CRC-32C; native batches written between them are
/// Kafka batches too, as the native producer sent them (its clock as CreateTime), except one
/// whose header name is not UTF-8, which is kept in replog's layout and served converted
/// (LogAppendTime, the name empty); a native fetch reads every batch, the name intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_batches_are_served_as_sent_and_both_doors_read_one_log() {
    use kafka_protocol::messages::{ApiKey, FetchResponse};
    use kafka_protocol::records::{Compression, RecordBatchDecoder, TimestampType};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("doors", 1, 3).await.unwrap();
    client
        .wait_ready("doors", Duration::from_secs(20))
        .await
        .unwrap();
    let leader = client.describe("doors").await.unwrap()[0].leader.unwrap();
    let at = kafka[leader as usize - 1];
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut sent = Vec::new();
    let mut expected: Vec<(Option<String>, String)> = Vec::new();
    let now_ms = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        i64::try_from(since.unwrap().as_millis()).unwrap()
    };
    let mut native_sent = Vec::new();
    for (c, codec) in codecs.iter().enumerate() {
        let values = [Some("first"), None, Some("third")];
        let batch = kafka_batch(&values, *codec);
        let request = produce_request("doors", batch.clone());
        let p = kafka_produce_at_leader(&client, &kafka, "doors", &request).await;
        assert_eq!(p.error_code, 0, "{codec:?}");
        assert_eq!(p.base_offset, (c * 4) as i64, "{codec:?}");
        sent.push(batch);
        for (i, v) in values.iter().enumerate() {
            expected.push((
                (i % 2 == 0).then(|| format!("k{i}")),
                v.unwrap_or("").to_string(),
            ));
        }
        // A native batch between the Kafka ones; the third with a header name Kafka's
        // layout cannot carry.
        let mut record = replog::Record::new(format!("native-{c}"));
        if c == 2 {
            record = record.with_header(bytes::Bytes::from_static(&[0xff, 0xfe]), "x");
        }
        let before = now_ms();
        client.send("doors", 0, &[record]).await.unwrap();
        native_sent.push((before, now_ms()));
        expected.push((None, format!("native-{c}")));
    }

    // The Kafka door: every batch as stored, the one of replog's layout converted.
    let request = fetch_request("doors", 1, 1 << 20);
    let (_, answer): (usize, FetchResponse) = kafka_call(at, ApiKey::Fetch, 12, &request).await;
    let partition = &answer.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 20);
    let mut records = partition.records.clone().unwrap();
    let mut batches = Vec::new();
    // Bounded by the answer: each turn consumes one batch.
    while records.len() >= 12 {
        let len = 12 + u32::from_be_bytes(records[8..12].try_into().unwrap()) as usize;
        batches.push(records.split_to(len));
    }
    assert_eq!(batches.len(), 10, "five Kafka batches and five native ones");
    let term = client.describe("doors").await.unwrap()[0].term;
    for (c, codec) in codecs.iter().enumerate() {
        let served = &batches[2 * c];
        assert_eq!(
            served[16..],
            sent[c][16..],
            "{codec:?}: the batch as sent after the base offset and epoch"
        );
        assert_eq!(
            i64::from_be_bytes(served[0..8].try_into().unwrap()),
            (c * 4) as i64
        );
        assert_eq!(
            i32::from_be_bytes(served[12..16].try_into().unwrap()) as u64,
            term,
            "the leader epoch is the Raft term that appended it"
        );
    }
    // Every batch decodes (CRC-32C checked by the decoder) to the records sent, in order.
    let mut got: Vec<(Option<String>, Option<String>, i64)> = Vec::new();
    let mut all = partition.records.clone().unwrap();
    for (b, set) in RecordBatchDecoder::decode_all(&mut all)
        .unwrap()
        .into_iter()
        .enumerate()
    {
        if b % 2 == 1 {
            // A native producer's batch: its clock, unless it went in replog's layout.
            let r = &set.records[0];
            let (before, after) = native_sent[b / 2];
            if b / 2 == 2 {
                assert_eq!(r.timestamp_type, TimestampType::LogAppend);
                assert_eq!(r.headers.keys().next().map(|k| k.as_str()), Some(""));
            } else {
                assert_eq!(r.timestamp_type, TimestampType::Creation, "batch {b}");
                assert!(r.headers.is_empty());
            }
            assert!(
                (before..=after + 5_000).contains(&r.timestamp),
                "batch {b}: {} not in {before}..={after}",
                r.timestamp
            );
        }
        for r in set.records {
            got.push((
                r.key.map(|k| String::from_utf8(k.to_vec()).unwrap()),
                r.value.map(|v| String::from_utf8(v.to_vec()).unwrap()),
                r.offset,
            ));
        }
    }
    assert_eq!(got.len(), 20);
    for (i, (key, value, offset)) in got.iter().enumerate() {
        assert_eq!(*offset, i as i64);
        assert_eq!(*key, expected[i].0);
        if i % 4 == 1 {
            assert_eq!(
                *value, None,
                "a null value stays null through the Kafka door"
            );
        } else {
            assert_eq!(value.as_deref(), Some(expected[i].1.as_str()));
        }
    }

    // The native door: every batch as replog records (a null value reads as empty).
    let mut native = Vec::new();
    let mut next = replog::Offset(0);
    wait_until(
        Duration::from_secs(10),
        "a native read of 20 records",
        async || {
            if next.get() >= 20 {
                return Ok(());
            }
            for b in client.fetch("doors", 0, next, 1 << 20, None).await.unwrap() {
                for (o, r) in b.records() {
                    if o >= next {
                        native.push((
                            r.key.map(|k| String::from_utf8(k.to_vec()).unwrap()),
                            String::from_utf8(r.value.to_vec()).unwrap(),
                            r.headers
                                .iter()
                                .map(|h| h.name.to_vec())
                                .collect::<Vec<_>>(),
                        ));
                        next = replog::Offset(o.get() + 1);
                    }
                }
            }
            if next.get() >= 20 {
                Ok(())
            } else {
                Err(format!("native read stalled at {next}"))
            }
        },
    )
    .await;
    for (i, (key, value, headers)) in native.iter().enumerate() {
        assert_eq!((key, value), (&expected[i].0, &expected[i].1), "offset {i}");
        let want = match i {
            11 => 1,
            i => usize::from(i % 4 != 3),
        };
        assert_eq!(headers.len(), want, "offset {i}");
    }
    assert_eq!(
        native[11].2[0],
        [0xff, 0xfe],
        "the name as the producer sent it"
    );
    drop(client);
    drop(brokers);
}

/// Kafka's admin APIs through a follower: CreateTopics (and its refusals), Metadata with the
/// same Isr from every broker, DescribeConfigs, DescribeCluster, DeleteTopics; a produce to a
/// follower refused with KIP-951's leader and endpoint; OffsetForLeaderEpoch across a leader
/// change; APIs not served answered with their own error on a connection that stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkas_admin_epoch_and_refusal_apis_answer_as_kafka_does() {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    // No --kafka-peer: every broker learns the others' Kafka addresses from the metadata log.
    let (mut brokers, addrs, kafka) = cluster_with(dir.path(), false);
    let client = connect(&addrs).await;
    let name = |n: &str| TopicName(StrBytes::from_string(n.to_string()));
    for at in &kafka {
        let what = format!("{at} to know every broker");
        wait_until(Duration::from_secs(20), &what, async || {
            let (_, info): (usize, DescribeClusterResponse) = kafka_call(
                *at,
                ApiKey::DescribeCluster,
                1,
                &DescribeClusterRequest::default(),
            )
            .await;
            let mut ports: Vec<u16> = info.brokers.iter().map(|b| b.port as u16).collect();
            ports.sort();
            let mut want: Vec<u16> = kafka.iter().map(|k| k.port()).collect();
            want.sort();
            if ports == want {
                Ok(())
            } else {
                Err(format!("{at} knows {ports:?}"))
            }
        })
        .await;
    }
    let create = |topic: &str, partitions: i32, factor: i16| {
        let mut t = CreatableTopic::default();
        t.name = name(topic);
        t.num_partitions = partitions;
        t.replication_factor = factor;
        let mut r = CreateTopicsRequest::default();
        r.timeout_ms = 10_000;
        r.topics.push(t);
        r
    };
    // Created through broker 2 (whichever leads the metadata Raft group).
    let (_, answer): (usize, CreateTopicsResponse) =
        kafka_call(kafka[1], ApiKey::CreateTopics, 5, &create("made", 3, 3)).await;
    assert_eq!(answer.topics[0].error_code, 0, "{:?}", answer.topics[0]);
    assert_eq!(answer.topics[0].num_partitions, 3);
    let mut with_config = create("configured", 1, 1);
    let mut c = CreatableTopicConfig::default();
    c.name = StrBytes::from_static_str("retention.ms");
    c.value = Some(StrBytes::from_static_str("1000"));
    with_config.topics[0].configs.push(c.clone());
    let mut misconfigured = create("misconfigured", 1, 1);
    c.value = Some(StrBytes::from_static_str("a week"));
    misconfigured.topics[0].configs.push(c);
    let mut validate = create("checked", 2, 3);
    validate.validate_only = true;
    for (request, code, what) in [
        (create("made", 3, 3), 36, "exists"),
        (create("wide", 3, 5), 38, "factor above the brokers"),
        (create("none", 0, 1), 37, "no partitions"),
        (create("bad/name", 1, 1), 17, "bad name"),
        (with_config, 0, "a topic config"),
        (misconfigured, 40, "a config value out of range"),
        (validate, 0, "validate only"),
    ] {
        let (_, answer): (usize, CreateTopicsResponse) =
            kafka_call(kafka[0], ApiKey::CreateTopics, 7, &request).await;
        assert_eq!(answer.topics[0].error_code, code, "{what}");
    }
    assert!(
        client.describe("checked").await.is_err(),
        "validate_only creates nothing"
    );
    client
        .wait_ready("made", Duration::from_secs(20))
        .await
        .unwrap();

    // Every broker answers Metadata with the leader and all three replicas in sync.
    let mut metadata = MetadataRequest::default();
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name("made"));
    metadata.topics = Some(vec![t]);
    for at in &kafka {
        let what = format!("every replica in sync through {at}");
        wait_until(Duration::from_secs(20), &what, async || {
            let (_, m): (usize, MetadataResponse) =
                kafka_call(*at, ApiKey::Metadata, 9, &metadata).await;
            let ps = &m.topics[0].partitions;
            if ps.len() == 3
                && ps
                    .iter()
                    .all(|p| p.isr_nodes.len() == 3 && p.leader_id.0 > 0)
            {
                Ok(())
            } else {
                Err(format!("through {at}: {ps:?}"))
            }
        })
        .await;
    }

    // DescribeConfigs of the topic, a key filter, an unknown topic.
    let mut describe = DescribeConfigsRequest::default();
    for (topic, keys) in [
        ("made", None),
        ("made", Some(vec!["retention.ms"])),
        ("gone", None),
    ] {
        let mut res = DescribeConfigsResource::default();
        res.resource_type = 2;
        res.resource_name = StrBytes::from_string(topic.to_string());
        res.configuration_keys =
            keys.map(|k| k.into_iter().map(StrBytes::from_static_str).collect());
        describe.resources.push(res);
    }
    let (_, configs): (usize, DescribeConfigsResponse) =
        kafka_call(kafka[2], ApiKey::DescribeConfigs, 4, &describe).await;
    let names: Vec<&str> = configs.results[0]
        .configs
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert!(names.contains(&"retention.ms") && names.contains(&"max.message.bytes"));
    assert_eq!(configs.results[1].configs.len(), 1);
    assert_eq!(configs.results[2].error_code, 3);
    // The config set at creation through broker 1, described by broker 3 once it applied it.
    let mut describe = DescribeConfigsRequest::default();
    let mut res = DescribeConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = StrBytes::from_static_str("configured");
    res.configuration_keys = Some(vec![StrBytes::from_static_str("retention.ms")]);
    describe.resources.push(res);
    wait_until(
        Duration::from_secs(20),
        "broker 3 applies the topic's config",
        async || {
            let (_, configs): (usize, DescribeConfigsResponse) =
                kafka_call(kafka[2], ApiKey::DescribeConfigs, 4, &describe).await;
            match configs.results[0].configs.first() {
                Some(c) if c.value.as_deref() == Some("1000") && c.config_source == 1 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    let (_, cluster_info): (usize, DescribeClusterResponse) = kafka_call(
        kafka[0],
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default(),
    )
    .await;
    assert_eq!(cluster_info.error_code, 0);
    assert_eq!(cluster_info.brokers.len(), 3);

    // A produce to a follower: NOT_LEADER_OR_FOLLOWER with the leader, its term and address.
    let status = client.describe("made").await.unwrap();
    let (leader, term) = (status[0].leader.unwrap(), status[0].term);
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let produce = produce_request(
        "made",
        kafka_batch(&[Some("x")], kafka_protocol::records::Compression::None),
    );
    let (_, refused): (usize, ProduceResponse) =
        kafka_call(kafka[follower as usize - 1], ApiKey::Produce, 10, &produce).await;
    let p = &refused.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 6);
    assert_eq!(p.current_leader.leader_id.0 as u64, leader);
    assert_eq!(p.current_leader.leader_epoch as u64, term);
    let endpoint = &refused.node_endpoints[0];
    assert_eq!(endpoint.node_id.0 as u64, leader);
    assert_eq!(endpoint.port, i32::from(kafka[leader as usize - 1].port()));
    // At the leader it is written.
    let (_, written): (usize, ProduceResponse) =
        kafka_call(kafka[leader as usize - 1], ApiKey::Produce, 10, &produce).await;
    assert_eq!(written.responses[0].partition_responses[0].error_code, 0);

    // OffsetForLeaderEpoch: the current term ends at the high watermark.
    let epoch_request = |epoch: i32, current: i32| {
        let mut p = OffsetForLeaderPartition::default();
        p.partition = 0;
        p.leader_epoch = epoch;
        p.current_leader_epoch = current;
        let mut t = OffsetForLeaderTopic::default();
        t.topic = name("made");
        t.partitions.push(p);
        let mut r = OffsetForLeaderEpochRequest::default();
        r.replica_id = BrokerId(-1);
        r.topics.push(t);
        r
    };
    let epoch_of = |r: &OffsetForLeaderEpochResponse| {
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.leader_epoch, p.end_offset)
    };
    let (_, now): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        kafka[leader as usize - 1],
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, term as i32),
    )
    .await;
    assert_eq!(epoch_of(&now), (0, term as i32, 1));
    let (_, at_follower): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        kafka[follower as usize - 1],
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, -1),
    )
    .await;
    assert_eq!(epoch_of(&at_follower).0, 6, "only the leader answers");
    // The leader is killed; the new one writes in a later term; the old term ends where
    // its records did.
    drop(brokers[leader as usize - 1].take());
    let (new_leader, new_term) = wait_until(Duration::from_secs(30), "a new leader", async || {
        let s = client.describe("made").await.ok()?;
        s[0].leader.filter(|l| *l != leader).map(|l| (l, s[0].term))
    })
    .await;
    assert!(new_term > term);
    client
        .send("made", 0, &[replog::Record::new("later")])
        .await
        .unwrap();
    let at = kafka[new_leader as usize - 1];
    let (_, old): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        at,
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, new_term as i32),
    )
    .await;
    assert_eq!(
        epoch_of(&old),
        (0, term as i32, 1),
        "term {term} ends after its record"
    );
    let (_, current): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        at,
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(new_term as i32, new_term as i32),
    )
    .await;
    assert_eq!(epoch_of(&current), (0, new_term as i32, 2));
    // Kafka's answers at the edges: an epoch older than the log is answered with itself and
    // the log start; one above the current term, and the undefined epoch, are undefined.
    for (asked, want) in [
        (0, (0, 0, 0)),
        (new_term as i32 + 5, (0, -1, -1)),
        (-1, (0, -1, -1)),
    ] {
        let (_, edge): (usize, OffsetForLeaderEpochResponse) = kafka_call(
            at,
            ApiKey::OffsetForLeaderEpoch,
            3,
            &epoch_request(asked, -1),
        )
        .await;
        assert_eq!(epoch_of(&edge), want, "epoch {asked}");
    }
    let (_, fenced): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        at,
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, term as i32),
    )
    .await;
    assert_eq!(epoch_of(&fenced).0, 74, "a stale current epoch is fenced");

    // APIs not served, or not on this listener: their own error, and the connection stays
    // open.
    let mut s = kafka_connect(at).await;
    let mut sasl = SaslHandshakeRequest::default();
    sasl.mechanism = StrBytes::from_static_str("PLAIN");
    let (_, answer): (usize, SaslHandshakeResponse) =
        kafka_call_on(&mut s, ApiKey::SaslHandshake, 1, &sasl).await;
    // On a listener without SASL, Kafka answers ILLEGAL_SASL_STATE.
    assert_eq!(answer.error_code, 34);
    let (_, answer): (usize, DescribeAclsResponse) = kafka_call_on(
        &mut s,
        ApiKey::DescribeAcls,
        1,
        &DescribeAclsRequest::default(),
    )
    .await;
    // A broker that enforces no ACLs answers SECURITY_DISABLED.
    assert_eq!(answer.error_code, 54);
    let (_, versions): (usize, ApiVersionsResponse) = kafka_call_on(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    assert_eq!(versions.error_code, 0, "the same connection still answers");
    // DeleteRecords at the leader: the records before offset 1 go, the low watermark moves.
    let mut trim = DeleteRecordsRequest::default();
    let mut topic = kafka_protocol::messages::delete_records_request::DeleteRecordsTopic::default();
    topic.name = name("made");
    let mut partition =
        kafka_protocol::messages::delete_records_request::DeleteRecordsPartition::default();
    partition.offset = 1;
    topic.partitions.push(partition);
    trim.topics.push(topic);
    trim.timeout_ms = 10_000;
    let (_, answer): (usize, DeleteRecordsResponse) =
        kafka_call_on(&mut s, ApiKey::DeleteRecords, 2, &trim).await;
    let trimmed = &answer.topics[0].partitions[0];
    assert_eq!((trimmed.error_code, trimmed.low_watermark), (0, 1));
    assert_eq!(answer.topics[0].name, name("made"));
    // An admin API not served whose answer names its items: each item refused.
    let mut producers = DescribeProducersRequest::default();
    let mut topic = kafka_protocol::messages::describe_producers_request::TopicRequest::default();
    topic.name = name("made");
    topic.partition_indexes = vec![0];
    producers.topics.push(topic);
    let (_, answer): (usize, DescribeProducersResponse) =
        kafka_call_on(&mut s, ApiKey::DescribeProducers, 0, &producers).await;
    assert_eq!(answer.topics[0].partitions[0].error_code, 35);
    let (_, answer): (usize, EndTxnResponse) =
        kafka_call_on(&mut s, ApiKey::EndTxn, 3, &EndTxnRequest::default()).await;
    assert_eq!(answer.error_code, 53, "transactions are refused");

    // DeleteTopics: gone from the metadata; an unknown name is UNKNOWN_TOPIC_OR_PARTITION.
    let mut delete = DeleteTopicsRequest::default();
    delete.timeout_ms = 10_000;
    delete.topic_names = vec![name("made"), name("never")];
    // NOT_CONTROLLER while the metadata Raft group elects a leader (its leader may have been the
    // broker killed above): asked again, as admin clients do.
    let deleted = wait_until(Duration::from_secs(30), "a controller", async || {
        let (_, deleted): (usize, DeleteTopicsResponse) =
            kafka_call(at, ApiKey::DeleteTopics, 4, &delete).await;
        if deleted.responses[0].error_code != 41 {
            Ok(deleted)
        } else {
            Err(format!("{deleted:?}"))
        }
    })
    .await;
    assert_eq!(
        deleted.responses[0].error_code, 0,
        "{:?}",
        deleted.responses[0].error_message
    );
    assert_eq!(deleted.responses[1].error_code, 3);
    // The client's broker applies the deletion a moment after the one that took it.
    wait_until(
        Duration::from_secs(10),
        "the deleted topic gone",
        async || match client.describe("made").await {
            Err(_) => Ok(()),
            Ok(d) => Err(format!("{d:?}")),
        },
    )
    .await;
    drop(client);
    drop(brokers);
}

/// Kafka batches the listener must refuse, each answered `CORRUPT_MESSAGE` with nothing
/// written and the partition still taking writes: a zstd batch that inflates to 64 MiB (past
/// the 1 MiB batch limit; decompression stops there), a flipped byte under the CRC-32C, two
/// batches in one produce, a transactional batch, and bytes that are no batch at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_kafka_batches_are_refused_and_nothing_is_written() {
    use kafka_protocol::records::{
        Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("guarded", 1, 3).await.unwrap();
    client
        .wait_ready("guarded", Duration::from_secs(20))
        .await
        .unwrap();
    let produce = |records: bytes::Bytes| produce_request("guarded", records);
    // 32 records of 1 MiB of zeros, zstd: a few KiB on the wire.
    let zeros: Vec<KafkaRecord> = (0..32)
        .map(|i| KafkaRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32 - 1,
            timestamp: 0,
            key: None,
            value: Some(bytes::Bytes::from(vec![0u8; 1 << 20])),
            headers: Default::default(),
        })
        .collect();
    let mut bomb = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::Zstd,
    };
    RecordBatchEncoder::encode(&mut bomb, zeros.iter(), &options).unwrap();
    assert!(bomb.len() < 64 << 10, "the bomb is small: {}", bomb.len());
    let good = kafka_batch(&[Some("fine")], Compression::None);
    let mut flipped = good.to_vec();
    *flipped.last_mut().unwrap() ^= 1;
    let mut two = good.to_vec();
    two.extend_from_slice(&good);
    let mut transactional = good.to_vec();
    transactional[22] |= 0x10;
    let crc = crc32c::crc32c(&transactional[21..]);
    transactional[17..21].copy_from_slice(&crc.to_be_bytes());
    for (bytes, code, what) in [
        (bomb.freeze(), 10, "a zstd bomb is MESSAGE_TOO_LARGE"),
        (
            bytes::Bytes::from(flipped),
            2,
            "a flipped byte is CORRUPT_MESSAGE",
        ),
        (
            bytes::Bytes::from(two),
            2,
            "two batches are CORRUPT_MESSAGE",
        ),
        (
            bytes::Bytes::from(transactional),
            2,
            "a transactional batch is CORRUPT_MESSAGE",
        ),
        (
            bytes::Bytes::from_static(b"not a batch at all"),
            2,
            "garbage is CORRUPT_MESSAGE",
        ),
    ] {
        let p = kafka_produce_at_leader(&client, &kafka, "guarded", &produce(bytes)).await;
        assert_eq!(p.error_code, code, "{what}");
    }
    assert_eq!(
        client.describe("guarded").await.unwrap()[0].high_watermark,
        replog::Offset(0),
        "nothing written"
    );
    let p = kafka_produce_at_leader(&client, &kafka, "guarded", &produce(good)).await;
    assert_eq!(
        (p.error_code, p.base_offset),
        (0, 0),
        "the partition still takes writes"
    );
    drop(client);
    drop(brokers);
}

/// Requests whose arrays claim more elements than their bytes could hold (2^31 topics in a
/// 14-byte Metadata request killed a broker: the decoder reserved room for them first, 154 GB)
/// are refused, and the broker keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_port_survives_length_claims_it_cannot_hold() {
    use bytes::BufMut;
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, _addrs, kafka) = cluster(dir.path());
    let at = kafka[0];
    // A request header: api key, version, correlation id, a null client id; `flexible` adds
    // the empty tagged fields of header v2.
    let header = |key: i16, version: i16, flexible: bool| {
        let mut h = bytes::BytesMut::new();
        h.put_i16(key);
        h.put_i16(version);
        h.put_i32(9);
        h.put_i16(-1);
        if flexible {
            h.put_u8(0);
        }
        h
    };
    let huge_varint = [0xff, 0xff, 0xff, 0xff, 0x0f];
    let mut cases: Vec<(&str, bytes::BytesMut)> = Vec::new();
    let mut metadata = header(3, 1, false);
    metadata.put_i32(i32::MAX);
    cases.push(("Metadata v1, 2^31 topics", metadata));
    let mut fetch = header(1, 11, false);
    for v in [-1, 500, 1, 1 << 20] {
        fetch.put_i32(v);
    }
    fetch.put_i8(0);
    fetch.put_i32(0);
    fetch.put_i32(-1);
    fetch.put_i32(i32::MAX);
    cases.push(("Fetch v11, 2^31 topics", fetch));
    let mut produce = header(0, 9, true);
    produce.put_u8(0); // a null transactional id
    produce.put_i16(-1);
    produce.put_i32(1000);
    produce.extend_from_slice(&huge_varint);
    cases.push(("Produce v9, 2^32 topics", produce));
    let mut create = header(19, 5, true);
    create.extend_from_slice(&huge_varint);
    cases.push(("CreateTopics v5, 2^32 topics", create));
    for (what, body) in cases {
        let mut s = kafka_connect(at).await;
        let mut framed = bytes::BytesMut::new();
        framed.put_i32(body.len() as i32);
        framed.extend_from_slice(&body);
        s.write_all(&framed).await.unwrap();
        // Refused: the connection is closed (the request cannot be parsed), promptly.
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer and no close"));
        assert!(matches!(read, Ok(0) | Err(_)), "{what}: {read:?}");
        // The broker is alive and answers the next connection.
        let (_, versions): (usize, ApiVersionsResponse) =
            kafka_call(at, ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
        assert_eq!(versions.error_code, 0, "after {what}");
    }
    drop(brokers);
}
