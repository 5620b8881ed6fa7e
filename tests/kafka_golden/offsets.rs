//! ListOffsets (1 to 7) and OffsetForLeaderEpoch (2 to 4): a partition's start and end, where
//! a time falls and where the latest time is; where the current leader epoch's records end;
//! a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION), a leader epoch newer than the
//! broker's (UNKNOWN_LEADER_EPOCH).

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use crate::produce::{BATCH_RECORDS, FIRST_TIMESTAMP_MS, produce_one};
use crate::{Broker, Golden, TOPIC, topic, versions};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::ListOffsets, &[1, 7]),
    (ApiKey::OffsetForLeaderEpoch, &[2, 4]),
];

fn list(name: &str, p: i32, timestamp: i64) -> ListOffsetsTopic {
    ListOffsetsTopic::default()
        .with_name(topic(name))
        .with_partitions(vec![
            ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_timestamp(timestamp),
        ])
}

fn listed(name: &str, p: i32, offset: i64, timestamp: i64) -> ListOffsetsTopicResponse {
    ListOffsetsTopicResponse::default()
        .with_name(topic(name))
        .with_partitions(vec![
            ListOffsetsPartitionResponse::default()
                .with_partition_index(p)
                .with_offset(offset)
                .with_timestamp(timestamp),
        ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_names_the_start_end_and_times_of_a_partition() {
    let mut broker = Broker::start().await;
    produce_one(&mut broker, 0).await;
    let (term0, term1) = (broker.term(TOPIC, 0), broker.term(TOPIC, 1));
    // A time is answered with the first record whose timestamp (the producer's CreateTime) is
    // that time or later, inside its batch: the batch's second record here.
    let middle = FIRST_TIMESTAMP_MS + 1;
    for &v in versions(GOLDEN, ApiKey::ListOffsets) {
        let mut topics = vec![
            list(TOPIC, 0, -2),
            list(TOPIC, 0, -1),
            list(TOPIC, 0, middle),
            list(TOPIC, 1, -1),
            list("no.such.topic", 0, -1),
        ];
        // The latest time (−3) from version 7.
        if v >= 7 {
            topics.push(list(TOPIC, 0, -3));
        }
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(topics);
        let answer = broker.exchange(ApiKey::ListOffsets, v, &request).await;
        // The start and the end have no time (−1); from version 4 each offset found has its
        // leader epoch: the batch's term, or the current term for the end (a partition
        // refused has none).
        let (term0, term1) = if v >= 4 { (term0, term1) } else { (-1, -1) };
        let mut expected = vec![
            listed(TOPIC, 0, 0, -1).epoch(term0),
            listed(TOPIC, 0, BATCH_RECORDS, -1).epoch(term0),
            listed(TOPIC, 0, 1, middle).epoch(term0),
            listed(TOPIC, 1, 0, -1).epoch(term1),
            listed("no.such.topic", 0, -1, -1),
        ];
        expected[4].partitions[0].error_code = 3;
        // The latest time is the batch's last record's.
        let last = BATCH_RECORDS - 1;
        if v >= 7 {
            expected.push(listed(TOPIC, 0, last, FIRST_TIMESTAMP_MS + last).epoch(term0));
        }
        let expected = ListOffsetsResponse::default().with_topics(expected);
        broker.assert_answer(ApiKey::ListOffsets, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// A topic's answer with its one partition's leader epoch set.
trait WithEpoch {
    fn epoch(self, leader_epoch: i32) -> Self;
}

impl WithEpoch for ListOffsetsTopicResponse {
    fn epoch(mut self, leader_epoch: i32) -> Self {
        self.partitions[0].leader_epoch = leader_epoch;
        self
    }
}

fn epoch_of(name: &str, p: i32, current: i32, leader_epoch: i32) -> OffsetForLeaderTopic {
    OffsetForLeaderTopic::default()
        .with_topic(topic(name))
        .with_partitions(vec![
            OffsetForLeaderPartition::default()
                .with_partition(p)
                .with_current_leader_epoch(current)
                .with_leader_epoch(leader_epoch),
        ])
}

fn epoch_end(name: &str, e: EpochEndOffset) -> OffsetForLeaderTopicResult {
    OffsetForLeaderTopicResult::default()
        .with_topic(topic(name))
        .with_partitions(vec![e])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_for_leader_epoch_names_where_an_epoch_ends() {
    let mut broker = Broker::start().await;
    produce_one(&mut broker, 0).await;
    let term = broker.term(TOPIC, 0);
    for &v in versions(GOLDEN, ApiKey::OffsetForLeaderEpoch) {
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                epoch_of(TOPIC, 0, term, term),
                epoch_of(TOPIC, 0, term + 5, term),
                epoch_of("no.such.topic", 0, -1, 1),
            ]);
        let answer = broker
            .exchange(ApiKey::OffsetForLeaderEpoch, v, &request)
            .await;
        // The current epoch ends at the log's committed end; an epoch the asker thinks
        // current and the broker has not reached is UNKNOWN_LEADER_EPOCH; no epoch, no end
        // offset (−1) for a partition refused.
        let refused = |p: i32, code: i16| {
            EpochEndOffset::default()
                .with_partition(p)
                .with_error_code(code)
                .with_leader_epoch(-1)
                .with_end_offset(-1)
        };
        let ends = EpochEndOffset::default()
            .with_partition(0)
            .with_leader_epoch(term)
            .with_end_offset(BATCH_RECORDS);
        let expected = OffsetForLeaderEpochResponse::default().with_topics(vec![
            epoch_end(TOPIC, ends),
            epoch_end(TOPIC, refused(0, 75)),
            epoch_end("no.such.topic", refused(0, 3)),
        ]);
        broker.assert_answer(ApiKey::OffsetForLeaderEpoch, v, &answer, &expected);
    }
    broker.shutdown().await;
}
