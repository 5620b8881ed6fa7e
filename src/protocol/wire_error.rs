//! [`WireError`]: the error half of every answer on the native wire (PROTOCOL.md lists its
//! variants), and its conversions from and to the crate's [`Error`].

use serde::{Deserialize, Serialize};

use crate::error::{CorruptKind, Error};
use crate::types::{LeaderHint, Offset, PartitionId};

/// An error on the wire; the client turns it back into [`Error`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum WireError {
    NotLeader {
        /// The leader, if the refusing broker knows one.
        leader: Option<LeaderHint>,
    },
    UnknownPartition,
    Indeterminate(String),
    OffsetOutOfRange {
        start: u64,
        end: u64,
    },
    InvalidBatch(String),
    Other(String),
    TryAgain(String),
    OutOfOrderSequence {
        producer_id: u64,
        expected: u32,
        got: u32,
    },
    TopicExists(String),
    InvalidTopic(String),
    ProducerFenced {
        producer_id: u64,
        epoch: u16,
        current: u16,
    },
    /// A record over the broker's `record_bytes_max`: nothing written.
    RecordTooLarge {
        len: u64,
        max: u64,
    },
    /// A batch over the broker's `batch_bytes_max`: nothing written.
    BatchTooLarge {
        len: u64,
        max: u64,
    },
    /// A topic's partition count out of range: not created.
    InvalidPartitionCount {
        requested: u32,
        max: u32,
    },
    /// A topic's replication factor out of range: not created.
    InvalidReplicationFactor {
        requested: u32,
        brokers: u32,
    },
    /// No topic of the name asked about (the partition's, for a request about one).
    UnknownTopic,
    /// The client's principal may not do this on the topic.
    TopicAuthorizationFailed,
    /// The client's principal may not do this to the cluster.
    ClusterAuthorizationFailed,
    /// The connection's SASL login failed (the reason as the client is told it: never which
    /// of user and password was wrong); the broker closes the connection after this answer.
    AuthenticationFailed(String),
    /// The broker enforces no ACLs, so it keeps none to show or change.
    SecurityDisabled,
    /// An ACL binding or filter that cannot be taken as asked.
    InvalidAcl(String),
    /// A topic config key or value refused.
    InvalidTopicConfig {
        key: String,
        value: Option<String>,
        reason: String,
    },
    /// A record its topic does not take.
    InvalidRecord(String),
    /// A replica assignment that cannot be taken.
    InvalidReplicaAssignment(String),
    /// A topic asked to grow to no more partitions than it has.
    PartitionsNotAdded {
        topic: String,
        current: u32,
        requested: u32,
    },
    /// A partition asked to move while it is still moving.
    ReassignmentInProgress,
    /// A partition's move cancelled where none is under way.
    NoReassignmentInProgress,
    /// A broker that cannot leave the cluster, and why.
    CannotDecommission {
        broker: u64,
        reason: String,
    },
    /// A Hello whose versions do not meet the broker's: the broker's own range (see
    /// `transport/hello.rs`; protocol version 2 and later).
    UnsupportedVersion {
        min: u16,
        max: u16,
    },
}

impl WireError {
    pub(crate) fn from_error(e: &Error) -> Self {
        match e {
            Error::NotLeader { leader, .. } => WireError::NotLeader {
                leader: leader.clone(),
            },
            Error::UnknownPartition(_) => WireError::UnknownPartition,
            Error::UnknownTopic(_) => WireError::UnknownTopic,
            Error::TopicAuthorizationFailed(_) => WireError::TopicAuthorizationFailed,
            Error::ClusterAuthorizationFailed => WireError::ClusterAuthorizationFailed,
            Error::AuthenticationFailed(reason) => WireError::AuthenticationFailed(reason.clone()),
            Error::SecurityDisabled => WireError::SecurityDisabled,
            Error::InvalidAcl(reason) => WireError::InvalidAcl(reason.clone()),
            Error::InvalidTopicConfig { key, value, reason } => WireError::InvalidTopicConfig {
                key: key.clone(),
                value: value.clone(),
                reason: reason.clone(),
            },
            Error::InvalidRecord(reason) => WireError::InvalidRecord(reason.clone()),
            // No variant of its own: a client of any version reads it.
            Error::InvalidTimestamp(reason) => WireError::InvalidRecord(reason.clone()),
            Error::InvalidReplicaAssignment(reason) => {
                WireError::InvalidReplicaAssignment(reason.clone())
            }
            Error::ReassignmentInProgress(_) => WireError::ReassignmentInProgress,
            Error::NoReassignmentInProgress(_) => WireError::NoReassignmentInProgress,
            Error::CannotDecommission { broker, reason } => WireError::CannotDecommission {
                broker: *broker,
                reason: reason.clone(),
            },
            Error::PartitionsNotAdded {
                topic,
                current,
                requested,
            } => WireError::PartitionsNotAdded {
                topic: topic.clone(),
                current: *current,
                requested: *requested,
            },
            Error::Indeterminate { reason, .. } => WireError::Indeterminate(reason.clone()),
            Error::OffsetOutOfRange { start, end, .. } => WireError::OffsetOutOfRange {
                start: start.get(),
                end: end.get(),
            },
            Error::InvalidBatch { kind } => WireError::InvalidBatch(kind.to_string()),
            Error::TryAgain { reason, .. } => WireError::TryAgain(reason.clone()),
            Error::OutOfOrderSequence {
                producer_id,
                expected,
                got,
                ..
            } => WireError::OutOfOrderSequence {
                producer_id: *producer_id,
                expected: *expected,
                got: *got,
            },
            Error::ProducerFenced {
                producer_id,
                epoch,
                current,
                ..
            } => WireError::ProducerFenced {
                producer_id: *producer_id,
                epoch: *epoch,
                current: *current,
            },
            Error::RecordTooLarge { len, max } => WireError::RecordTooLarge {
                len: *len,
                max: *max,
            },
            Error::BatchTooLarge { len, max } => WireError::BatchTooLarge {
                len: *len,
                max: *max,
            },
            Error::TopicExists(t) => WireError::TopicExists(t.clone()),
            Error::InvalidTopic { reason } => WireError::InvalidTopic(reason.clone()),
            Error::InvalidPartitionCount { requested, max } => WireError::InvalidPartitionCount {
                requested: *requested,
                max: *max,
            },
            Error::InvalidReplicationFactor { requested, brokers } => {
                WireError::InvalidReplicationFactor {
                    requested: *requested,
                    brokers: *brokers,
                }
            }
            other => WireError::Other(other.to_string()),
        }
    }

    pub(crate) fn into_error(self, partition: &PartitionId, requested: u64) -> Error {
        match self {
            WireError::NotLeader { leader } => Error::NotLeader {
                partition: partition.clone(),
                leader,
            },
            WireError::UnknownPartition => Error::UnknownPartition(partition.clone()),
            WireError::UnknownTopic => Error::UnknownTopic(partition.topic.clone()),
            WireError::TopicAuthorizationFailed => {
                Error::TopicAuthorizationFailed(partition.topic.clone())
            }
            WireError::ClusterAuthorizationFailed => Error::ClusterAuthorizationFailed,
            WireError::AuthenticationFailed(reason) => Error::AuthenticationFailed(reason),
            WireError::SecurityDisabled => Error::SecurityDisabled,
            WireError::InvalidAcl(reason) => Error::InvalidAcl(reason),
            WireError::Indeterminate(reason) => Error::Indeterminate {
                partition: partition.clone(),
                reason,
            },
            WireError::OffsetOutOfRange { start, end } => Error::OffsetOutOfRange {
                requested: Offset(requested),
                start: Offset(start),
                end: Offset(end),
            },
            WireError::InvalidBatch(_) => Error::InvalidBatch {
                kind: CorruptKind::BadRecord,
            },
            WireError::Other(msg) => Error::Remote(msg),
            WireError::TryAgain(reason) => Error::TryAgain {
                partition: partition.clone(),
                reason,
            },
            WireError::OutOfOrderSequence {
                producer_id,
                expected,
                got,
            } => Error::OutOfOrderSequence {
                partition: partition.clone(),
                producer_id,
                expected,
                got,
            },
            WireError::ProducerFenced {
                producer_id,
                epoch,
                current,
            } => Error::ProducerFenced {
                partition: partition.clone(),
                producer_id,
                epoch,
                current,
            },
            WireError::RecordTooLarge { len, max } => Error::RecordTooLarge { len, max },
            WireError::BatchTooLarge { len, max } => Error::BatchTooLarge { len, max },
            WireError::TopicExists(t) => Error::TopicExists(t),
            WireError::InvalidTopicConfig { key, value, reason } => {
                Error::InvalidTopicConfig { key, value, reason }
            }
            WireError::InvalidRecord(reason) => Error::InvalidRecord(reason),
            WireError::InvalidReplicaAssignment(reason) => Error::InvalidReplicaAssignment(reason),
            WireError::ReassignmentInProgress => Error::ReassignmentInProgress(partition.clone()),
            WireError::NoReassignmentInProgress => {
                Error::NoReassignmentInProgress(partition.clone())
            }
            WireError::CannotDecommission { broker, reason } => {
                Error::CannotDecommission { broker, reason }
            }
            WireError::UnsupportedVersion { min, max } => Error::UnsupportedVersion {
                what: format!("the broker (speaking versions {min} to {max})"),
                needed: min,
                supported: crate::PROTOCOL_VERSION,
            },
            WireError::PartitionsNotAdded {
                topic,
                current,
                requested,
            } => Error::PartitionsNotAdded {
                topic,
                current,
                requested,
            },
            WireError::InvalidTopic(reason) => Error::InvalidTopic { reason },
            WireError::InvalidPartitionCount { requested, max } => {
                Error::InvalidPartitionCount { requested, max }
            }
            WireError::InvalidReplicationFactor { requested, brokers } => {
                Error::InvalidReplicationFactor { requested, brokers }
            }
        }
    }
}
