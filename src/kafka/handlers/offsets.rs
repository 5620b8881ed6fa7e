//! Kafka's ListOffsets (versions 1 to 7) and OffsetForLeaderEpoch (2 to 4) over the broker
//! service: where a partition starts and ends, where a time or the latest time falls (with
//! the leader epoch of the offset found, from ListOffsets v4), and where a leader epoch's
//! records end (KIP-320: a consumer that saw a leader change checks its
//! position against the new leader's log). A leader epoch is a Raft term.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use super::fetch::{epoch, partition};
use crate::kafka::{code, error_code};
use crate::node::service::{BrokerService, OffsetSpec};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (kafka_protocol::messages::ApiKey::ListOffsets, 1, 7),
    (kafka_protocol::messages::ApiKey::OffsetForLeaderEpoch, 2, 4),
];

/// Kafka's ListOffsets timestamp as the service's point: −1 the high watermark, −2 the log
/// start, −3 the latest time (KIP-734); `None` for the other negative ones, which name points
/// of versions not served (−4 and −5: tiered storage).
fn offset_at(timestamp: i64) -> Option<OffsetSpec> {
    match timestamp {
        -1 => Some(OffsetSpec::Latest),
        -2 => Some(OffsetSpec::Earliest),
        -3 => Some(OffsetSpec::MaxTimestamp),
        ms => u64::try_from(ms).ok().map(OffsetSpec::Timestamp),
    }
}

/// ListOffsets, each partition answered by this broker's replica.
pub(crate) fn list_offsets(
    request: ListOffsetsRequest,
    version: i16,
    service: &BrokerService,
) -> ListOffsetsResponse {
    let mut r = ListOffsetsResponse::default();
    for topic in request.topics {
        let mut t = ListOffsetsTopicResponse::default();
        for p in topic.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            let id = partition(&topic.name, p.partition_index);
            let Some(at) = offset_at(p.timestamp) else {
                pr.error_code = code::INVALID_REQUEST;
                t.partitions.push(pr);
                continue;
            };
            match service.list_offset(&id, at, epoch(p.current_leader_epoch)) {
                Ok(Some(listed)) => {
                    pr.offset = i64::try_from(listed.offset.get()).unwrap_or(i64::MAX);
                    if let Some(ms) = listed.timestamp_ms {
                        pr.timestamp = i64::try_from(ms).unwrap_or(i64::MAX);
                    }
                    let epoch = (version >= 4)
                        .then(|| service.listed_epoch(&id, at, listed.offset))
                        .flatten();
                    if let Some(e) = epoch {
                        pr.leader_epoch = i32::try_from(e).unwrap_or(i32::MAX);
                    }
                }
                Ok(None) => {}
                Err(e) => pr.error_code = error_code(&e),
            }
            t.partitions.push(pr);
        }
        t.name = topic.name;
        r.topics.push(t);
    }
    r
}

/// OffsetForLeaderEpoch, on the partitions' leader.
pub(crate) fn offset_for_leader_epoch(
    request: OffsetForLeaderEpochRequest,
    service: &BrokerService,
) -> OffsetForLeaderEpochResponse {
    let mut r = OffsetForLeaderEpochResponse::default();
    for topic in request.topics {
        let mut t = OffsetForLeaderTopicResult::default();
        for p in topic.partitions {
            let mut e = EpochEndOffset::default();
            e.partition = p.partition;
            e.leader_epoch = -1;
            e.end_offset = -1;
            let id = partition(&topic.topic, p.partition);
            // Kafka's undefined epoch: an undefined answer, not an error.
            if let Some(asked) = epoch(p.leader_epoch) {
                match service.epoch_end(&id, asked, epoch(p.current_leader_epoch)) {
                    Ok(Some((term, end))) => {
                        e.leader_epoch = i32::try_from(term).unwrap_or(i32::MAX);
                        e.end_offset = i64::try_from(end.get()).unwrap_or(i64::MAX);
                    }
                    Ok(None) => {}
                    Err(err) => e.error_code = error_code(&err),
                }
            }
            t.partitions.push(e);
        }
        t.topic = topic.topic;
        r.topics.push(t);
    }
    r
}
