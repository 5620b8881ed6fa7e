//! Produce (3 to 11): a Kafka producer's batch acknowledged with its base offset and the
//! partition's log start; a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION), the
//! internal offsets topic (INVALID_TOPIC_EXCEPTION) and a batch whose CRC does not hold
//! (CORRUPT_MESSAGE) refused per partition; a produce with acks 0 unanswered; a version not
//! served closes the connection unanswered, as a Kafka broker does.

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};

use crate::{Broker, Golden, TOPIC, topic, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::Produce, &[3, 11])];

/// Records in each batch [`kafka_batch`] makes.
pub(crate) const BATCH_RECORDS: i64 = 3;

/// The first record's timestamp (CreateTime) in a [`kafka_batch`]; record `i` has
/// `FIRST_TIMESTAMP_MS + i`.
pub(crate) const FIRST_TIMESTAMP_MS: i64 = 1_600_000_000_000;

/// A Kafka producer's batch of [`BATCH_RECORDS`] records, uncompressed, with fixed
/// timestamps, keys and a header, as a Kafka client encodes it (base offset 0, no producer
/// id).
pub(crate) fn kafka_batch() -> Bytes {
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = (0..BATCH_RECORDS)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            // The encoder keeps records in one batch while offset − sequence is constant;
            // the batch's base sequence is −1 (no producer id).
            sequence: i32::try_from(i).unwrap() - 1,
            timestamp: FIRST_TIMESTAMP_MS + i,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("golden-{i}"))),
            headers: IndexMap::from([(crate::s("h"), Some(Bytes::from_static(b"v")))]),
        })
        .collect();
    let mut out = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
    out.freeze()
}

/// A Produce (acks=all) of `batch` to partition `p` of each topic in `topics`.
pub(crate) fn produce_request(topics: &[(&str, i32)], batch: &Bytes) -> ProduceRequest {
    let topic_data = topics
        .iter()
        .map(|(name, p)| {
            TopicProduceData::default()
                .with_name(topic(name))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(*p)
                        .with_records(Some(batch.clone())),
                ])
        })
        .collect();
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(topic_data)
}

/// Produces one [`kafka_batch`] to partition `p` of [`TOPIC`] at Produce v9, and checks it
/// was taken.
pub(crate) async fn produce_one(broker: &mut Broker, p: i32) {
    let request = produce_request(&[(TOPIC, p)], &kafka_batch());
    let answer = broker.exchange(ApiKey::Produce, 9, &request).await;
    let r: ProduceResponse = broker.decode(ApiKey::Produce, 9, &answer);
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

fn answered(name: &str, p: PartitionProduceResponse) -> TopicProduceResponse {
    TopicProduceResponse::default()
        .with_name(topic(name))
        .with_partition_responses(vec![p])
}

/// A partition refused with `error_code`: no offsets (Kafka's −1s).
fn refused(index: i32, error_code: i16) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(error_code)
        .with_base_offset(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_acknowledges_a_batch_with_its_base_offset_and_refuses_missing_internal_and_corrupt()
 {
    let mut broker = Broker::start().await;
    let batch = kafka_batch();
    for (n, &v) in (0..).zip(versions(GOLDEN, ApiKey::Produce)) {
        let topics = [
            (TOPIC, 0),
            ("no.such.topic", 0),
            ("__consumer_offsets", 0),
            (TOPIC, 1),
        ];
        let mut request = produce_request(&topics, &batch);
        // A batch whose CRC-32C does not hold (a byte of its last record's value changed).
        let mut corrupt = batch.to_vec();
        *corrupt.last_mut().unwrap() ^= 0xff;
        request.topic_data[3].partition_data[0].records = Some(Bytes::from(corrupt));
        let answer = broker.exchange(ApiKey::Produce, v, &request).await;
        // The n-th batch of the partition lands after the ones before; no LogAppendTime
        // (CreateTime topics), the log starts at 0, no record errors, no leader hint.
        let taken = PartitionProduceResponse::default()
            .with_base_offset(n * BATCH_RECORDS)
            .with_log_start_offset(0);
        let expected = ProduceResponse::default().with_responses(vec![
            answered(TOPIC, taken),
            answered("no.such.topic", refused(0, 3)),
            answered("__consumer_offsets", refused(0, 17)),
            answered(TOPIC, refused(1, 2)),
        ]);
        broker.assert_answer(ApiKey::Produce, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// A Produce at a version not served (12, newer than 11) cannot be answered in a form the
/// client reads: the connection is closed, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_at_a_version_not_served_closes_the_connection_unanswered() {
    let mut broker = Broker::start().await;
    let request = produce_request(&[(TOPIC, 0)], &kafka_batch());
    assert_eq!(
        broker
            .exchange_unanswered(ApiKey::Produce, 12, &request)
            .await,
        None
    );
    let status = broker.cluster().node(1).unwrap().status(TOPIC, 0).unwrap();
    assert_eq!(status.log_end.get(), 0, "nothing written");
    broker.shutdown().await;
}

/// A Produce with acks 0 is written and not answered: the next request's answer is the next
/// on the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_with_acks_0_is_written_and_not_answered() {
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    let mut broker = Broker::start().await;
    let versions = versions(GOLDEN, ApiKey::Produce);
    for &v in versions {
        let request = produce_request(&[(TOPIC, 0)], &kafka_batch()).with_acks(0);
        broker.send(ApiKey::Produce, v, &request).await;
        let answer = broker
            .exchange(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
            .await;
        let r: ApiVersionsResponse = broker.decode(ApiKey::ApiVersions, 3, &answer);
        assert_eq!(r.error_code, 0);
    }
    let written = BATCH_RECORDS * i64::try_from(versions.len()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Bounded by the deadline: the writes commit soon after they are taken.
    loop {
        let status = broker.cluster().node(1).unwrap().status(TOPIC, 0).unwrap();
        if i64::try_from(status.high_watermark.get()).unwrap() == written {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "written: {status:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    broker.shutdown().await;
}
