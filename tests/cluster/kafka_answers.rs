//! The Kafka door's Fetch, ListOffsets, Metadata and InitProducerId answered as Kafka's brokers
//! answer them, on three in-process brokers with Kafka listeners: a long poll that any of its
//! partitions wakes, an answer within `max_bytes` but for its first batch, offsets out of range,
//! leader epochs checked (KIP-320), the latest time (KIP-734), names no topic can have,
//! producer ids from the cluster.

// Kafka's wire is big-endian; the crate's own formats are little-endian, which the lint guards.
#![allow(clippy::big_endian_bytes)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use replog::{Client, ClientConfig, LocalCluster, Record};

use crate::kafka::{fetch_request, kafka_call, kafka_frame};
use crate::support::wait_until;

const TOPIC: &str = "kafka.fetch";

/// Three brokers with Kafka listeners and `TOPIC` of `partitions`; their Kafka addresses and a
/// native client.
async fn kafka_cluster(
    dir: &std::path::Path,
    partitions: u32,
) -> (LocalCluster, Vec<SocketAddr>, Client) {
    let cluster = crate::local_cluster(3, dir, TOPIC, partitions, |c| {
        c.kafka_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    })
    .await;
    let kafka = cluster
        .nodes()
        .map(|n| n.kafka_addr().expect("a Kafka listener"))
        .collect();
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    (cluster, kafka, client)
}

/// `count` records of `size` bytes, one batch.
fn records(count: usize, size: usize) -> Vec<Record> {
    (0..count).map(|_| Record::new(vec![7u8; size])).collect()
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Reads one Kafka answer from `s` (correlation id 5, as `kafka_frame` sends).
async fn read_answer<Resp: kafka_protocol::protocol::Decodable>(
    s: &mut tokio::net::TcpStream,
    api: ApiKey,
    version: i16,
) -> Resp {
    use bytes::Buf;
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::protocol::Decodable;
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut answer = vec![0u8; (&len[..]).get_i32() as usize];
    s.read_exact(&mut answer).await.unwrap();
    let mut answer = bytes::Bytes::from(answer);
    let h = ResponseHeader::decode(&mut answer, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 5);
    Resp::decode(&mut answer, version).unwrap()
}

/// Fetches (Fetch v11, at once) until every partition of the answer has no error, as a
/// client does while a leadership settles; the answer.
async fn fetch_settled(at: SocketAddr, request: &FetchRequest) -> FetchResponse {
    wait_until(
        Duration::from_secs(20),
        "a fetch without errors",
        async || {
            let (_, r): (usize, FetchResponse) = kafka_call(at, ApiKey::Fetch, 11, request).await;
            let errors: Vec<i16> = r.responses[0]
                .partitions
                .iter()
                .map(|p| p.error_code)
                .collect();
            if errors.iter().all(|e| *e == 0) {
                Ok(r)
            } else {
                Err(format!("fetch errors: {errors:?}"))
            }
        },
    )
    .await
}

/// A consumer assigned several partitions long-polls them all in one Fetch: a record produced
/// to its last partition answers it at once, not after `max_wait` (the long poll used to wait
/// on the first partition only, so records elsewhere waited up to `fetch.max.wait.ms`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_long_poll_wakes_when_any_of_its_partitions_gets_records() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let (cluster, kafka, client) = kafka_cluster(dir.path(), 3).await;
    // Every replica of the broker asked answers (empty partitions, no error) first.
    let mut request = fetch_request(TOPIC, 3, 1 << 20);
    fetch_settled(kafka[0], &request).await;
    request.max_wait_ms = 60_000;
    let mut s = tokio::net::TcpStream::connect(kafka[0]).await.unwrap();
    s.write_all(&kafka_frame(ApiKey::Fetch, 11, &request))
        .await
        .unwrap();
    // Held: nothing to answer with yet.
    let early = tokio::time::timeout(
        Duration::from_millis(300),
        read_answer::<FetchResponse>(&mut s, ApiKey::Fetch, 11),
    )
    .await;
    assert!(early.is_err(), "an empty long poll is held");
    let sent = Instant::now();
    client.send(TOPIC, 2, &records(1, 10)).await.unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        read_answer::<FetchResponse>(&mut s, ApiKey::Fetch, 11),
    )
    .await
    .expect("the long poll answered within 20 s of a record, not its 60 s max_wait");
    let p2 = &answer.responses[0].partitions[2];
    assert_eq!((p2.error_code, p2.high_watermark), (0, 1));
    assert!(p2.records.as_ref().is_some_and(|r| !r.is_empty()));
    eprintln!("answered {:?} after the produce", sent.elapsed());
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// An answer goes past the request's `max_bytes` by its first batch at most, whatever the
/// partitions allow (a first partition read up to its own 16 MiB limit gave librdkafka an
/// answer sixteen times what it asked for, which it drops and asks again forever); a later
/// partition's first batch larger than what is left is not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_fetch_goes_past_max_bytes_by_its_first_batch_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, kafka, client) = kafka_cluster(dir.path(), 2).await;
    // Three batches of about 256 KiB on partition 0, one on partition 1.
    for _ in 0..3 {
        client.send(TOPIC, 0, &records(256, 1024)).await.unwrap();
    }
    client.send(TOPIC, 1, &records(256, 1024)).await.unwrap();
    let mut request = fetch_request(TOPIC, 2, 300 << 10);
    for p in &mut request.topics[0].partitions {
        p.partition_max_bytes = 16 << 20;
    }
    // Every broker hosts every replica; wait until the one asked has them committed.
    let answer = wait_until(Duration::from_secs(20), "marks [768, 256]", async || {
        let r = fetch_settled(kafka[1], &request).await;
        let marks: Vec<i64> = r.responses[0]
            .partitions
            .iter()
            .map(|p| p.high_watermark)
            .collect();
        if marks == [768, 256] {
            Ok(r)
        } else {
            Err(format!("marks {marks:?}"))
        }
    })
    .await;
    let sizes: Vec<usize> = answer.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, bytes::Bytes::len))
        .collect();
    assert!(
        (256 << 10..300 << 10).contains(&sizes[0]),
        "partition 0: one batch, the one over max_bytes: {sizes:?}"
    );
    assert_eq!(sizes[1], 0, "partition 1's batch does not fit what is left");
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A negative fetch offset is out of range (Kafka's OFFSET_OUT_OF_RANGE, which sends a
/// consumer to its reset policy), not offset 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_kafka_fetch_offset_is_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, kafka, client) = kafka_cluster(dir.path(), 1).await;
    client.send(TOPIC, 0, &records(3, 10)).await.unwrap();
    let mut request = fetch_request(TOPIC, 1, 1 << 20);
    fetch_settled(kafka[0], &request).await;
    for offset in [-1, -2, i64::MIN] {
        request.topics[0].partitions[0].fetch_offset = offset;
        let (_, r): (usize, FetchResponse) =
            kafka_call(kafka[0], ApiKey::Fetch, 11, &request).await;
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 1, "offset {offset}");
        assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// The partition's leader epoch as Kafka's Metadata gives it.
async fn leader_epoch(at: SocketAddr) -> i32 {
    let mut request = MetadataRequest::default();
    let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(TOPIC));
    request.topics = Some(vec![t]);
    let (_, r): (usize, MetadataResponse) = kafka_call(at, ApiKey::Metadata, 12, &request).await;
    r.topics[0].partitions[0].leader_epoch
}

fn list_offsets_request(timestamp: i64, epoch: i32) -> ListOffsetsRequest {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let mut p = ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = timestamp;
    p.current_leader_epoch = epoch;
    let mut t = ListOffsetsTopic::default();
    t.name = name(TOPIC);
    t.partitions.push(p);
    let mut r = ListOffsetsRequest::default();
    r.replica_id = kafka_protocol::messages::BrokerId(-1);
    r.topics.push(t);
    r
}

/// Fetch and ListOffsets check the asker's leader epoch against the replica's term
/// (KIP-320): an older one is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, the
/// current one (or −1) is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_fetch_and_list_offsets_check_the_askers_leader_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, kafka, client) = kafka_cluster(dir.path(), 1).await;
    client.send(TOPIC, 0, &records(3, 10)).await.unwrap();
    let at = kafka[2];
    let request = fetch_request(TOPIC, 1, 1 << 20);
    fetch_settled(at, &request).await;
    let codes = |epoch: i32| {
        let mut request = request.clone();
        request.topics[0].partitions[0].current_leader_epoch = epoch;
        async move {
            let (_, f): (usize, FetchResponse) = kafka_call(at, ApiKey::Fetch, 11, &request).await;
            let (_, l): (usize, ListOffsetsResponse) =
                kafka_call(at, ApiKey::ListOffsets, 7, &list_offsets_request(-1, epoch)).await;
            (
                f.responses[0].partitions[0].error_code,
                l.topics[0].partitions[0].error_code,
            )
        }
    };
    // The epoch metadata gives is the one the replica serves (asked again while a leadership
    // settles).
    let epoch = wait_until(
        Duration::from_secs(20),
        "the epoch to be served",
        async || {
            let epoch = leader_epoch(at).await;
            if codes(epoch).await == (0, 0) {
                Ok(epoch)
            } else {
                Err(format!("epoch {epoch} not served"))
            }
        },
    )
    .await;
    assert!(epoch >= 1);
    assert_eq!(codes(-1).await, (0, 0), "not checked");
    assert_eq!(codes(epoch - 1).await, (74, 74), "older: fenced");
    assert_eq!(codes(epoch + 1).await, (75, 75), "newer: unknown");
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// ListOffsets with timestamp −3 (KIP-734, Kafka's MAX_TIMESTAMP, legal from version 7)
/// answers the first batch of the latest time and that time, not offset 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_list_offsets_answers_the_latest_time() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, kafka, client) = kafka_cluster(dir.path(), 1).await;
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    let mut bases = Vec::new();
    for _ in 0..3 {
        // Each batch is stamped in a later millisecond than the one before.
        let before = now_ms();
        wait_until(Duration::from_secs(5), "the clock to move", async || {
            now_ms() > before + 1
        })
        .await;
        let delivery = client.send(TOPIC, 0, &records(2, 10)).await.unwrap();
        bases.push(delivery.base_offset.get() as i64);
    }
    let at = kafka[0];
    fetch_settled(at, &fetch_request(TOPIC, 1, 1 << 20)).await;
    let what = format!("-3 to answer the last batch; batches at {bases:?}");
    let latest = wait_until(Duration::from_secs(20), &what, async || {
        let (_, r): (usize, ListOffsetsResponse) =
            kafka_call(at, ApiKey::ListOffsets, 7, &list_offsets_request(-3, -1)).await;
        let p = r.topics[0].partitions[0].clone();
        if p.error_code == 0 && p.offset == bases[2] {
            Ok(p)
        } else {
            Err(format!("-3 answered {p:?}"))
        }
    })
    .await;
    assert!(latest.timestamp > 0);
    // The same time looked up answers the same batch.
    let (_, r): (usize, ListOffsetsResponse) = kafka_call(
        at,
        ApiKey::ListOffsets,
        7,
        &list_offsets_request(latest.timestamp, -1),
    )
    .await;
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.offset, p.timestamp), (bases[2], latest.timestamp));
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// Metadata for a name no topic can have answers INVALID_TOPIC_EXCEPTION; for a valid name no
/// topic has, UNKNOWN_TOPIC_OR_PARTITION.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_metadata_tells_an_invalid_topic_name_from_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, kafka, client) = kafka_cluster(dir.path(), 1).await;
    for (topic, code) in [("no such topic!", 17), ("no.such.topic", 3), ("a/b", 17)] {
        let mut request = MetadataRequest::default();
        let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
        t.name = Some(name(topic));
        request.topics = Some(vec![t]);
        request.allow_auto_topic_creation = false;
        let (_, r): (usize, MetadataResponse) =
            kafka_call(kafka[1], ApiKey::Metadata, 12, &request).await;
        assert_eq!(r.topics[0].error_code, code, "{topic}");
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// InitProducerId hands out ids from blocks each broker takes through the metadata log: no
/// two producers get the same id, on any broker, across a broker's restart, and a producer
/// that asks again (KIP-360) gets a new id at epoch 0, as Kafka's brokers answer a producer
/// without a transactional id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_producer_ids_come_from_the_cluster_and_never_repeat() {
    use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, kafka, client) = kafka_cluster(dir.path(), 1).await;
    let init = |at: SocketAddr, previous: Option<(i64, i16)>| async move {
        let mut request = InitProducerIdRequest::default();
        request.transaction_timeout_ms = 60_000;
        request.transactional_id = None;
        (request.producer_id, request.producer_epoch) = match previous {
            Some((id, epoch)) => (ProducerId(id), epoch),
            None => (ProducerId(-1), -1),
        };
        let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
        let mut answers = Vec::new();
        for _ in 0..400 {
            use tokio::io::AsyncWriteExt;
            s.write_all(&kafka_frame(ApiKey::InitProducerId, 4, &request))
                .await
                .unwrap();
            let r: InitProducerIdResponse = read_answer(&mut s, ApiKey::InitProducerId, 4).await;
            assert_eq!(r.error_code, 0);
            answers.push((r.producer_id.0, r.producer_epoch));
        }
        answers
    };
    let mut ids = Vec::new();
    for at in &kafka {
        ids.extend(init(*at, None).await);
    }
    // A producer that asks again with its id and epoch.
    let again = init(kafka[0], Some(ids[0])).await;
    ids.extend(again);
    cluster.stop(2).await.unwrap();
    cluster.restart(2).await.unwrap();
    let node = cluster.node(2).unwrap();
    node.wait_ready(Duration::from_secs(30)).await.unwrap();
    let restarted = node.kafka_addr().unwrap();
    ids.extend(init(restarted, None).await);
    assert!(
        ids.iter().all(|(id, epoch)| *id > 0 && *epoch == 0),
        "{:?}",
        &ids[..5]
    );
    let distinct: std::collections::BTreeSet<i64> = ids.iter().map(|(id, _)| *id).collect();
    assert_eq!(distinct.len(), ids.len(), "no id handed out twice");
    drop(client);
    cluster.shutdown().await.unwrap();
}
