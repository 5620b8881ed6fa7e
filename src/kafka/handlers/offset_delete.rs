//! Kafka's OffsetDelete (version 0) over the broker's coordinator: a group's committed offsets
//! of the partitions asked deleted, each partition answered with its own error
//! (GROUP_SUBSCRIBED_TO_TOPIC while the group's members consume its topic,
//! UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED without READ on it), in the order
//! asked; or the whole request refused (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR,
//! GROUP_AUTHORIZATION_FAILED without DELETE on the group) with no partition listed, as
//! Kafka answers.

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use super::groups::partition_error;
use crate::node::service::BrokerService;

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[(kafka_protocol::messages::ApiKey::OffsetDelete, 0, 0)];

pub(crate) async fn offset_delete(
    request: OffsetDeleteRequest,
    service: &BrokerService,
) -> OffsetDeleteResponse {
    let partitions: Vec<(String, u32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let index = u32::try_from(p.partition_index).unwrap_or(u32::MAX);
                (t.name.0.to_string(), index)
            })
        })
        .collect();
    let mut r = OffsetDeleteResponse::default();
    let results = match service
        .delete_offsets(&request.group_id.0, partitions)
        .await
    {
        Ok(results) => results,
        Err(e) => {
            r.error_code = e.code();
            return r;
        }
    };
    for t in &request.topics {
        let mut tr = OffsetDeleteResponseTopic::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = OffsetDeleteResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = partition_error(&results, &t.name.0, p.partition_index);
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}
