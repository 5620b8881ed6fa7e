//! The native wire's requests as the broker service takes them, and the service's answers
//! as the native wire carries them.

use crate::node::service::{
    AlterConfigs, ClusterMetadata, CreatePartitions, CreateTopic, DeleteTopic, ElectLeaders,
    NewTopic, OffsetSpec, Propose, ReassignPartition,
};
use crate::protocol::{
    AlterTopicConfigs, BrokerLimits, CreatePartitionsRequest, CreateTopicRequest,
    DeleteTopicRequest, MetadataResponse, OffsetAt, PartitionMetadata, ProposeRequest,
    ReassignRequest,
};

// The native wire's requests as the broker service takes them.

impl From<CreateTopicRequest> for CreateTopic {
    fn from(r: CreateTopicRequest) -> Self {
        CreateTopic {
            topic: NewTopic {
                name: r.name,
                partitions: Some(r.partitions),
                replication_factor: Some(r.replication_factor),
                configs: r.configs,
                assignment: r.assignment,
            },
            forwarded: r.forwarded,
        }
    }
}

impl From<DeleteTopicRequest> for DeleteTopic {
    fn from(r: DeleteTopicRequest) -> Self {
        DeleteTopic {
            name: r.name,
            forwarded: r.forwarded,
        }
    }
}

impl From<ReassignRequest> for ReassignPartition {
    fn from(r: ReassignRequest) -> Self {
        ReassignPartition {
            partition: crate::types::PartitionId::new(r.topic, r.partition),
            replicas: r.replicas,
        }
    }
}

impl From<crate::protocol::ElectLeadersRequest> for ElectLeaders {
    fn from(r: crate::protocol::ElectLeadersRequest) -> Self {
        ElectLeaders {
            partitions: r.partitions,
            forwarded: r.forwarded,
        }
    }
}

impl From<ProposeRequest> for Propose {
    fn from(r: ProposeRequest) -> Self {
        Propose {
            command: r.command,
            forwarded: r.forwarded,
        }
    }
}

impl From<AlterTopicConfigs> for AlterConfigs {
    fn from(r: AlterTopicConfigs) -> Self {
        AlterConfigs {
            topic: r.topic,
            changes: r.changes,
            replace: r.replace,
            validate_only: r.validate_only,
            forwarded: r.forwarded,
        }
    }
}

impl From<CreatePartitionsRequest> for CreatePartitions {
    fn from(r: CreatePartitionsRequest) -> Self {
        CreatePartitions {
            name: r.name,
            count: r.count,
            validate_only: r.validate_only,
            assignment: r.assignment,
        }
    }
}

/// `Op::ListOffsets`' point in the partition.
pub(super) fn offset_spec(at: OffsetAt) -> OffsetSpec {
    match at {
        OffsetAt::Earliest => OffsetSpec::Earliest,
        OffsetAt::Latest => OffsetSpec::Latest,
        OffsetAt::Timestamp(ms) => OffsetSpec::Timestamp(ms),
        OffsetAt::MaxTimestamp => OffsetSpec::MaxTimestamp,
    }
}

// The broker service's answers as the native wire carries them.

/// `Op::Metadata`'s answer.
pub(super) fn metadata_response(answer: ClusterMetadata) -> MetadataResponse {
    let partitions = answer.partitions.into_iter().map(|p| PartitionMetadata {
        partition: p.partition,
        leader: p.leader,
        term: p.term,
        replicas: p.replicas,
        isr: p.isr,
        lag: p.lag,
        log_start: p.log_start,
        high_watermark: p.high_watermark,
    });
    let limits = answer.limits;
    MetadataResponse {
        broker: answer.broker,
        brokers: answer.brokers,
        partitions: partitions.collect(),
        limits: BrokerLimits {
            record_bytes_max: limits.record_bytes_max,
            batch_bytes_max: limits.batch_bytes_max,
            frame_bytes_max: limits.frame_bytes_max,
        },
    }
}
