//! Kafka's AlterPartitionReassignments and ListPartitionReassignments over the broker
//! service (what kafka-reassign-partitions and Cruise Control use): each partition's move
//! recorded in the metadata log and carried out by its leader, a move under way taken back
//! by null replicas, and the moves under way listed. Codec only.

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use crate::acl::AclOperation;
use crate::kafka::{broker_id, code, error_code, message, topic_name};
use crate::node::service::{BrokerService, ReassignPartition};
use crate::types::NodeId;

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
];

/// AlterPartitionReassignments: per partition, its move to the replicas named (or, null,
/// its move under way taken back), answered once recorded. Without ALTER on the cluster the
/// whole request is refused (CLUSTER_AUTHORIZATION_FAILED, as Kafka's). From v1, unless the
/// request allows it, a move that changes a partition's replica count is refused
/// (INVALID_REPLICATION_FACTOR, KIP-860).
pub(crate) async fn alter_partition_reassignments(
    request: AlterPartitionReassignmentsRequest,
    version: i16,
    service: &BrokerService,
) -> AlterPartitionReassignmentsResponse {
    let mut r = AlterPartitionReassignmentsResponse::default();
    r.error_message = None;
    r.allow_replication_factor_change = request.allow_replication_factor_change;
    if !service.may_on_cluster(AclOperation::Alter) {
        r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        r.error_message = message("ALTER on the cluster is needed to move partitions");
        return r;
    }
    // v0 always allowed a change of replica count.
    let allow_change = version == 0 || request.allow_replication_factor_change;
    for topic in request.topics {
        let mut t = ReassignableTopicResponse::default();
        t.name = topic.name.clone();
        let factor = service.topic_shape(topic.name.0.as_str()).map(|(_, f)| f);
        for p in topic.partitions {
            let mut res = ReassignablePartitionResponse::default();
            res.partition_index = p.partition_index;
            res.error_message = None;
            if let Err((c, why)) = reassign_one(
                service,
                topic.name.0.as_str(),
                p.partition_index,
                p.replicas.as_deref(),
                factor.filter(|_| !allow_change),
            )
            .await
            {
                res.error_code = c;
                res.error_message = message(why);
            }
            t.partitions.push(res);
        }
        r.responses.push(t);
    }
    r
}

/// One partition's move (`replicas` null: its move taken back); `factor`: the replica count
/// it must keep, if it must.
async fn reassign_one(
    service: &BrokerService,
    topic: &str,
    partition: i32,
    replicas: Option<&[BrokerId]>,
    factor: Option<u32>,
) -> Result<(), (i16, String)> {
    let unknown = || {
        (
            code::UNKNOWN_TOPIC_OR_PARTITION,
            format!("no partition {topic}-{partition}"),
        )
    };
    let partition = u32::try_from(partition).map_err(|_| unknown())?;
    let replicas: Vec<NodeId> = match replicas {
        None => Vec::new(),
        Some([]) => {
            return Err((
                code::INVALID_REPLICA_ASSIGNMENT,
                "a partition needs at least one replica".into(),
            ));
        }
        Some(ids) => ids
            .iter()
            .map(|b| u64::try_from(b.0))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                (
                    code::INVALID_REPLICA_ASSIGNMENT,
                    "a negative broker id".into(),
                )
            })?,
    };
    if let Some(factor) = factor
        && !replicas.is_empty()
        && replicas.len() != factor as usize
    {
        return Err((
            code::INVALID_REPLICATION_FACTOR,
            format!(
                "{} replicas for a partition of {factor}; the request does not allow changing \
                 the replication factor",
                replicas.len()
            ),
        ));
    }
    let request = ReassignPartition {
        partition: crate::types::PartitionId::new(topic, partition),
        replicas,
    };
    service
        .reassign_partition(request)
        .await
        .map_err(|e| (error_code(&e), e.to_string()))
}

/// ListPartitionReassignments: the moves under way, of the partitions asked (null: of every
/// topic). DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
pub(crate) fn list_partition_reassignments(
    request: &ListPartitionReassignmentsRequest,
    service: &BrokerService,
) -> ListPartitionReassignmentsResponse {
    let mut r = ListPartitionReassignmentsResponse::default();
    r.error_message = None;
    let topics: Option<Vec<String>> = request
        .topics
        .as_ref()
        .map(|ts| ts.iter().map(|t| t.name.0.to_string()).collect());
    let moving = match service.list_reassignments(topics.as_deref()) {
        Ok(moving) => moving,
        Err(e) => {
            r.error_code = error_code(&e);
            r.error_message = message(e.to_string());
            return r;
        }
    };
    let asked = |topic: &str, partition: u32| {
        request.topics.as_ref().is_none_or(|ts| {
            ts.iter().any(|t| {
                t.name.0.as_str() == topic
                    && t.partition_indexes
                        .iter()
                        .any(|p| u32::try_from(*p).ok() == Some(partition))
            })
        })
    };
    let ids = |list: &[NodeId]| list.iter().map(|b| broker_id(*b)).collect::<Vec<_>>();
    for m in moving {
        if !asked(&m.partition.topic, m.partition.partition) {
            continue;
        }
        let mut p = OngoingPartitionReassignment::default();
        p.partition_index = i32::try_from(m.partition.partition).unwrap_or(i32::MAX);
        p.replicas = ids(&m.replicas);
        p.adding_replicas = ids(&m.adding);
        p.removing_replicas = ids(&m.removing);
        match r.topics.last_mut() {
            Some(t) if t.name.0.as_str() == m.partition.topic.as_str() => t.partitions.push(p),
            _ => {
                let mut t = OngoingTopicReassignment::default();
                t.name = topic_name(&m.partition.topic);
                t.partitions.push(p);
                r.topics.push(t);
            }
        }
    }
    r
}
