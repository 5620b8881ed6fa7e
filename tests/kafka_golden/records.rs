//! DeleteRecords (0 to 2): a partition's records before an offset deleted, answered with its
//! new low watermark; −1 deletes all it has committed; an offset past the high watermark, a
//! negative one, an unknown partition or topic refused.

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{ApiKey, DeleteRecordsRequest, DeleteRecordsResponse};

use crate::{Broker, Golden, TOPIC, topic, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::DeleteRecords, &[0, 2])];

fn partition(index: i32, offset: i64) -> DeleteRecordsPartition {
    DeleteRecordsPartition::default()
        .with_partition_index(index)
        .with_offset(offset)
}

fn result(index: i32, low_watermark: i64, error_code: i16) -> DeleteRecordsPartitionResult {
    DeleteRecordsPartitionResult::default()
        .with_partition_index(index)
        .with_low_watermark(low_watermark)
        .with_error_code(error_code)
}

/// Five records in a partition (one per version asked), the records before 3 deleted, then
/// before 2 (nothing moves back), then all; refusals: past the high watermark, negative, a
/// partition and a topic that do not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_low_watermark() {
    let mut broker = Broker::start().await;
    for (p, &v) in (0..).zip(versions(GOLDEN, ApiKey::DeleteRecords)) {
        let node = broker.cluster().node(1).unwrap();
        let records: Vec<replog::Record> = (0..5).map(|i| replog::Record::new(vec![i])).collect();
        node.append(TOPIC, u32::try_from(p).unwrap(), &records)
            .await
            .unwrap();
        let ask = |partitions: Vec<DeleteRecordsPartition>| {
            DeleteRecordsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(vec![
                    DeleteRecordsTopic::default()
                        .with_name(topic(TOPIC))
                        .with_partitions(partitions),
                ])
        };
        let answered = |results: Vec<DeleteRecordsPartitionResult>| {
            DeleteRecordsResponse::default().with_topics(vec![
                DeleteRecordsTopicResult::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(results),
            ])
        };
        for (offset, expected) in [
            (3, result(p, 3, 0)),
            (2, result(p, 3, 0)),
            (9, result(p, -1, 1)),
            (-2, result(p, -1, 1)),
            (-1, result(p, 5, 0)),
            (0, result(p, 5, 0)),
        ] {
            let answer = broker
                .exchange(ApiKey::DeleteRecords, v, &ask(vec![partition(p, offset)]))
                .await;
            broker.assert_answer(ApiKey::DeleteRecords, v, &answer, &answered(vec![expected]));
        }
        let answer = broker
            .exchange(ApiKey::DeleteRecords, v, &ask(vec![partition(7, 0)]))
            .await;
        broker.assert_answer(
            ApiKey::DeleteRecords,
            v,
            &answer,
            &answered(vec![result(7, -1, 3)]),
        );
        let unknown = DeleteRecordsRequest::default().with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(topic("no.such.topic"))
                .with_partitions(vec![partition(0, 0)]),
        ]);
        let answer = broker.exchange(ApiKey::DeleteRecords, v, &unknown).await;
        let expected = DeleteRecordsResponse::default().with_topics(vec![
            DeleteRecordsTopicResult::default()
                .with_name(topic("no.such.topic"))
                .with_partitions(vec![result(0, -1, 3)]),
        ]);
        broker.assert_answer(ApiKey::DeleteRecords, v, &answer, &expected);
    }
    broker.shutdown().await;
}
