//! Kafka's DeleteRecords over the broker service: each partition's records before an offset
//! deleted on every replica (the new log start committed through its Raft group). Codec only.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::kafka::{code, error_code};
use crate::node::service::BrokerService;
use crate::types::PartitionId;

/// The versions served.
pub(crate) const APIS: &[super::Served] =
    &[(kafka_protocol::messages::ApiKey::DeleteRecords, 0, 2)];

/// Kafka's offset for "every record committed": the high watermark.
const HIGH_WATERMARK: i64 = -1;

/// DeleteRecords: per partition, on its leader, the records before `offset` (−1: the high
/// watermark) deleted; answered with the partition's new low watermark, or its error
/// (OFFSET_OUT_OF_RANGE past the high watermark or for another negative offset,
/// NOT_LEADER_OR_FOLLOWER elsewhere than the leader, TOPIC_AUTHORIZATION_FAILED without
/// DELETE on the topic).
pub(crate) async fn delete_records(
    request: DeleteRecordsRequest,
    service: &BrokerService,
) -> DeleteRecordsResponse {
    let mut r = DeleteRecordsResponse::default();
    for topic in request.topics {
        let mut t = DeleteRecordsTopicResult::default();
        t.name = topic.name.clone();
        for p in topic.partitions {
            let mut res = DeleteRecordsPartitionResult::default();
            res.partition_index = p.partition_index;
            res.low_watermark = -1;
            let id = PartitionId::new(
                topic.name.0.as_str(),
                u32::try_from(p.partition_index).unwrap_or(u32::MAX),
            );
            let before = match p.offset {
                HIGH_WATERMARK => Ok(None),
                offset => u64::try_from(offset).map(Some),
            };
            match before {
                Err(_) => res.error_code = code::OFFSET_OUT_OF_RANGE,
                Ok(before) => match service.delete_records(&id, before).await {
                    Ok(start) => res.low_watermark = i64::try_from(start.get()).unwrap_or(-1),
                    Err(e) => res.error_code = error_code(&e),
                },
            }
            t.partitions.push(res);
        }
        r.topics.push(t);
    }
    r
}
