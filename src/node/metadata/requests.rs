//! The requests a broker forwards to the metadata leader, and why a metadata command did not
//! take effect.

use crate::catalog::Refused;
use crate::error::Error;
use crate::protocol::{CreateTopicRequest, DeleteTopicRequest, ProposeRequest};

use crate::node::service::{CreateTopic, Propose};

/// Why a metadata command did not take effect.
pub(in crate::node) enum MetaError {
    Refused(Refused),
    Failed(Error),
}

impl MetaError {
    /// The caller's error: `unknown` and `exists` say what an unknown or an existing topic
    /// means for its command.
    pub(in crate::node) fn into_error(
        self,
        unknown: impl FnOnce() -> Error,
        exists: impl FnOnce() -> Error,
    ) -> Error {
        match self {
            MetaError::Refused(Refused::UnknownTopic) => unknown(),
            MetaError::Refused(Refused::TopicExists) => exists(),
            MetaError::Refused(Refused::Invalid(reason)) => Error::InvalidTopic { reason },
            MetaError::Refused(Refused::BadReplicas(reason)) => {
                Error::InvalidReplicaAssignment(reason)
            }
            MetaError::Refused(Refused::Moving | Refused::NotMoving) => Error::InvalidTopic {
                reason: "a partition's move refused".into(),
            },
            MetaError::Refused(Refused::InvalidConfig(key, value, reason)) => {
                Error::InvalidTopicConfig { key, value, reason }
            }
            MetaError::Refused(Refused::TopicChanged) => Error::TryAgain {
                partition: crate::types::PartitionId::new(crate::catalog::METADATA_TOPIC, 0),
                reason: "the topic changed meanwhile".into(),
            },
            MetaError::Failed(e) => e,
        }
    }
}

/// An admin request that can be marked as forwarded by a broker to the metadata leader.
pub(in crate::node) trait Forwardable {
    fn forwarded(self) -> Self;
}

impl Forwardable for crate::protocol::TopicConfigsRequest {
    fn forwarded(self) -> Self {
        match self {
            Self::Alter(alter) => Self::Alter(crate::protocol::AlterTopicConfigs {
                forwarded: true,
                ..alter
            }),
            describe => describe,
        }
    }
}

impl Forwardable for CreateTopicRequest {
    fn forwarded(self) -> Self {
        CreateTopicRequest {
            forwarded: true,
            ..self
        }
    }
}

impl Forwardable for ProposeRequest {
    fn forwarded(self) -> Self {
        ProposeRequest {
            forwarded: true,
            ..self
        }
    }
}

impl Forwardable for DeleteTopicRequest {
    fn forwarded(self) -> Self {
        DeleteTopicRequest {
            forwarded: true,
            ..self
        }
    }
}

/// The service's topic creation as the metadata leader is asked for it (the forwarding body
/// of `Op::CreateTopic`): a partition count or replication factor left out is the
/// assignment's.
impl From<CreateTopic> for CreateTopicRequest {
    fn from(request: CreateTopic) -> Self {
        let topic = request.topic;
        let placed = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let first = topic.assignment.first().map_or(0, Vec::len);
        CreateTopicRequest {
            partitions: topic
                .partitions
                .unwrap_or_else(|| placed(topic.assignment.len())),
            replication_factor: topic.replication_factor.unwrap_or_else(|| placed(first)),
            name: topic.name,
            configs: topic.configs,
            assignment: topic.assignment,
            forwarded: request.forwarded,
        }
    }
}

/// A peer's metadata command as the metadata leader is asked for it (the forwarding body of
/// `Op::Propose`).
impl From<Propose> for ProposeRequest {
    fn from(request: Propose) -> Self {
        ProposeRequest {
            command: request.command,
            forwarded: request.forwarded,
        }
    }
}
