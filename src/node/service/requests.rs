//! The service's own requests and answers: what a door asks of the broker once it has decoded
//! its wire, and what it is told, in none of the wires' types (neither the native protocol's
//! nor Kafka's) and not as Raft's log entries. Each door converts its request to one of these
//! at its boundary, and an answer to its wire's; the broker turns the requests into Raft
//! entries, metadata commands and the bodies it forwards to other brokers itself.

use bytes::Bytes;

use super::NewTopic;
use crate::catalog::MetaCommand;
use crate::segment::format::PayloadFormat;
use crate::topic_config::ConfigChange;
use crate::types::{NodeId, PartitionId, ProducerSeq};

/// The records of a produce, as the producer encoded them: written, replicated and served
/// without re-encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProduceBatch {
    /// The encoded records (replog's record layout, or one Kafka record batch as sent).
    pub(crate) records: Bytes,
    /// How `records` is encoded.
    pub(crate) format: PayloadFormat,
    /// How many records `records` holds.
    pub(crate) record_count: u32,
    /// The idempotent producer's id, epoch and first record's sequence number; producer id 0:
    /// no idempotent producer.
    pub(crate) producer: ProducerSeq,
}

/// A topic to create, as a client or a forwarding broker asks for it.
#[derive(Clone)]
pub(crate) struct CreateTopic {
    /// The topic. [`BrokerService::create_topic`](super::BrokerService::create_topic) applies
    /// no defaults: a partition count or replication factor left out is taken from the
    /// assignment.
    pub(crate) topic: NewTopic,
    /// Sent by a broker to the metadata leader, authorized where the client asked: not to be
    /// forwarded again.
    pub(crate) forwarded: bool,
}

/// A created topic to delete.
#[derive(Clone)]
pub(crate) struct DeleteTopic {
    /// The topic.
    pub(crate) name: String,
    /// Sent by a broker to the metadata leader, authorized where the client asked: not to be
    /// forwarded again.
    pub(crate) forwarded: bool,
}

/// A partition of a created topic moved to other brokers, or its move under way taken back.
pub(crate) struct ReassignPartition {
    /// The partition.
    pub(crate) partition: PartitionId,
    /// Its new replicas, the preferred leader first; empty: the move under way taken back.
    pub(crate) replicas: Vec<NodeId>,
}

/// Partitions' leadership handed to their preferred replicas.
pub(crate) struct ElectLeaders {
    /// The partitions; `None`: every partition of every topic.
    pub(crate) partitions: Option<Vec<PartitionId>>,
    /// Sent by a broker to the leader of `partitions`, authorized where the client asked.
    pub(crate) forwarded: bool,
}

/// A metadata command a peer broker asks to commit (a registration, a forwarded proposal, a
/// move's end).
pub(crate) struct Propose {
    /// The command.
    pub(crate) command: MetaCommand,
    /// Sent by a broker to the metadata leader: not to be forwarded again.
    pub(crate) forwarded: bool,
}

/// What a broker knows of the cluster, as Metadata answers it.
pub(crate) struct ClusterMetadata {
    /// The answering broker.
    pub(crate) broker: NodeId,
    /// Every broker and its address.
    pub(crate) brokers: Vec<(NodeId, String)>,
    /// The partitions asked about, in partition order.
    pub(crate) partitions: Vec<PartitionInfo>,
    /// The answering broker's size limits.
    pub(crate) limits: SizeLimits,
}

/// A broker's size limits, as its configuration sets them: what a client need not send,
/// because no broker would take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SizeLimits {
    /// `LogConfig::record_bytes_max`.
    pub(crate) record_bytes_max: u32,
    /// `LogConfig::batch_bytes_max`.
    pub(crate) batch_bytes_max: u32,
    /// `NodeConfig::frame_bytes_max`.
    pub(crate) frame_bytes_max: u32,
}

/// What a broker knows of one partition.
#[derive(Clone, Debug)]
pub(crate) struct PartitionInfo {
    /// The partition.
    pub(crate) partition: PartitionId,
    /// Its leader, if one is known.
    pub(crate) leader: Option<NodeId>,
    /// The leader's term: newer metadata has a higher one.
    pub(crate) term: u64,
    /// Its replicas, the preferred leader first.
    pub(crate) replicas: Vec<NodeId>,
    /// Replicas caught up with the leader (known only when the answering broker leads, or
    /// asked the leader).
    pub(crate) isr: Vec<NodeId>,
    /// How many entries each follower is behind the leader's log (known only from the
    /// leader; empty otherwise).
    pub(crate) lag: Vec<(NodeId, u64)>,
    /// The first offset in the describing replica's log.
    pub(crate) log_start: u64,
    /// The describing replica's high watermark.
    pub(crate) high_watermark: u64,
}

/// A change to a topic's configs.
#[derive(Clone)]
pub(crate) struct AlterConfigs {
    /// The topic.
    pub(crate) topic: String,
    /// The changes, in order.
    pub(crate) changes: Vec<ConfigChange>,
    /// The topic keeps exactly the keys `changes` set (Kafka's AlterConfigs: only
    /// [`ConfigChange::Set`] allowed); otherwise the changes apply to the configs it has
    /// (IncrementalAlterConfigs).
    pub(crate) replace: bool,
    /// Only check that the change could be made.
    pub(crate) validate_only: bool,
    /// Sent by a broker to the metadata leader, authorized where the client asked: not to be
    /// forwarded again.
    pub(crate) forwarded: bool,
}

/// A created topic grown to more partitions.
pub(crate) struct CreatePartitions {
    /// The topic.
    pub(crate) name: String,
    /// Its partition count after.
    pub(crate) count: u32,
    /// Only check that it could be done.
    pub(crate) validate_only: bool,
    /// Each new partition's brokers, the preferred leader first, as the client placed them;
    /// empty: placed as a new topic's partitions are.
    pub(crate) assignment: Vec<Vec<NodeId>>,
}

/// A point in a partition, as ListOffsets asks for it (Kafka's `OffsetSpec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OffsetSpec {
    /// The first offset still in the log.
    Earliest,
    /// The high watermark.
    Latest,
    /// The first committed record whose timestamp is this time or later, in ms since the epoch.
    Timestamp(u64),
    /// The first record of the largest timestamp, if it is committed.
    MaxTimestamp,
}
