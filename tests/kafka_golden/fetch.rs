//! Fetch (4 to 12): a Kafka producer's batch served back byte for byte (its base offset and
//! leader epoch set), an empty partition answered with its marks, an offset past the log
//! (OFFSET_OUT_OF_RANGE), a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION); a version
//! newer than served answered UNSUPPORTED_VERSION in the Fetch answer's own error code.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};

use crate::produce::{BATCH_RECORDS, kafka_batch, produce_one};
use crate::{Broker, Golden, TOPIC, topic, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::Fetch, &[4, 12])];

/// A batch as a fetch serves it: as the producer sent it, but for its base offset (bytes 0 to
/// 8) and its partition leader epoch (bytes 12 to 16, outside the CRC), set by the broker.
pub(crate) fn served(batch: &Bytes, base_offset: i64, leader_epoch: i32) -> Bytes {
    let mut out = BytesMut::from(&batch[..]);
    (&mut out[0..8]).put_i64(base_offset);
    (&mut out[12..16]).put_i32(leader_epoch);
    out.freeze()
}

/// A Fetch answered at once (no wait), of partitions `(topic, partition, offset)`.
pub(crate) fn fetch_request(partitions: &[(&str, i32, i64)]) -> FetchRequest {
    let topics = partitions
        .iter()
        .map(|(name, p, offset)| {
            FetchTopic::default()
                .with_topic(topic(name))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(*p)
                        .with_fetch_offset(*offset)
                        .with_partition_max_bytes(1 << 20),
                ])
        })
        .collect();
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(topics)
}

/// A partition's answer with records `records` up to `high_watermark`, from a log that starts
/// at 0: Kafka's fields for a consumer reading uncommitted (no aborted transactions listed,
/// a null list), no preferred replica.
fn marks(index: i32, high_watermark: i64, records: Bytes) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_high_watermark(high_watermark)
        .with_last_stable_offset(high_watermark)
        .with_log_start_offset(0)
        .with_aborted_transactions(None)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(records))
}

/// A partition refused with `error_code`: Kafka's marks for none (−1), no records.
fn refused(index: i32, error_code: i16) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(error_code)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_aborted_transactions(None)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(Bytes::new()))
}

fn answered(name: &str, p: PartitionData) -> FetchableTopicResponse {
    FetchableTopicResponse::default()
        .with_topic(topic(name))
        .with_partitions(vec![p])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_serves_a_producers_batch_as_sent_and_refuses_what_is_not_there() {
    let mut broker = Broker::start().await;
    produce_one(&mut broker, 0).await;
    // The batch's leader epoch is the term of the partition's leader that wrote it.
    let epoch = broker.term(TOPIC, 0);
    for &v in versions(GOLDEN, ApiKey::Fetch) {
        let request = fetch_request(&[
            (TOPIC, 0, 0),
            (TOPIC, 1, 0),
            (TOPIC, 1, 100),
            ("no.such.topic", 0, 0),
        ]);
        let answer = broker.exchange(ApiKey::Fetch, v, &request).await;
        // No session (session id 0), no throttle, no top-level error.
        let expected = FetchResponse::default().with_responses(vec![
            answered(
                TOPIC,
                marks(0, BATCH_RECORDS, served(&kafka_batch(), 0, epoch)),
            ),
            answered(TOPIC, marks(1, 0, Bytes::new())),
            answered(TOPIC, refused(1, 1)),
            answered("no.such.topic", refused(0, 3)),
        ]);
        broker.assert_answer(ApiKey::Fetch, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// A Fetch newer than served (13, which names topics by id) is answered at its version with
/// UNSUPPORTED_VERSION in the answer's own error code, and the connection stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_newer_than_served_is_answered_unsupported_version() {
    let mut broker = Broker::start().await;
    let answer = broker
        .exchange(ApiKey::Fetch, 13, &FetchRequest::default())
        .await;
    let expected = FetchResponse::default().with_error_code(35);
    broker.assert_answer(ApiKey::Fetch, 13, &answer, &expected);
    let request = fetch_request(&[(TOPIC, 0, 0)]);
    let answer = broker.exchange(ApiKey::Fetch, 12, &request).await;
    let expected =
        FetchResponse::default().with_responses(vec![answered(TOPIC, marks(0, 0, Bytes::new()))]);
    broker.assert_answer(ApiKey::Fetch, 12, &answer, &expected);
    broker.shutdown().await;
}

/// A consumer reading committed records only (isolation level 1) is answered an empty list
/// of aborted transactions for a partition served (replog has no transactions), and none (a
/// null list) for a partition refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_committed_fetch_lists_no_aborted_transactions() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::Fetch) {
        let request = fetch_request(&[(TOPIC, 0, 0), (TOPIC, 1, 5)]).with_isolation_level(1);
        let answer = broker.exchange(ApiKey::Fetch, v, &request).await;
        let expected = FetchResponse::default().with_responses(vec![
            answered(
                TOPIC,
                marks(0, 0, Bytes::new()).with_aborted_transactions(Some(Vec::new())),
            ),
            answered(TOPIC, refused(1, 1)),
        ]);
        broker.assert_answer(ApiKey::Fetch, v, &answer, &expected);
    }
    broker.shutdown().await;
}
