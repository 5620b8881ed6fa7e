//! The crate's error type.

use std::path::PathBuf;
use std::sync::Arc;

use crate::types::{LeaderHint, LogIndex, NodeId, Offset, PartitionId};

/// What replog's fallible functions return.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in replog.
///
/// Input from disk or the network only ever produces one of these, never a panic.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// This broker does not lead the partition, so it did not take the write. `leader` names
    /// the leader if one is known; it is `None` while an election runs. Safe to retry there.
    #[error("not the leader of {partition}; leader: {leader:?}")]
    NotLeader {
        /// The partition written to.
        partition: PartitionId,
        /// Where the leader is, if known.
        leader: Option<LeaderHint>,
    },

    /// The topic exists, but not this partition of it (its number is past the topic's
    /// partition count).
    #[error("unknown partition {0}")]
    UnknownPartition(PartitionId),

    /// No topic of this name exists (Kafka's `UNKNOWN_TOPIC_OR_PARTITION` for a whole topic).
    #[error("unknown topic {0}")]
    UnknownTopic(String),

    /// The client's principal may not do what it asked on this topic (Kafka's
    /// `TOPIC_AUTHORIZATION_FAILED`), or may not know whether it exists. Not retriable: an ACL
    /// must change first.
    #[error("not authorized to access topic {0}")]
    TopicAuthorizationFailed(String),

    /// The client's principal may not do what it asked of the cluster (Kafka's
    /// `CLUSTER_AUTHORIZATION_FAILED`). Not retriable.
    #[error("not authorized for this cluster operation")]
    ClusterAuthorizationFailed,

    /// A broker refused this client's SASL login (Kafka's `SASL_AUTHENTICATION_FAILED`):
    /// wrong credentials, a mechanism the broker does not offer, a malformed message. The
    /// reason never tells a wrong password from an unknown user. Not retriable.
    #[error("authentication failed: {0}")]
    AuthenticationFailed(String),

    /// An ACL binding or filter that cannot be taken as asked (a principal not of the form
    /// `Type:name`, an unknown code, a host that is not an IP address, …).
    #[error("invalid ACL: {0}")]
    InvalidAcl(String),

    /// The broker enforces no ACLs ([`NodeConfig::authorization`](crate::NodeConfig) is not
    /// set), so it keeps none to show or change (Kafka's `SECURITY_DISABLED`).
    #[error("authorization is not enabled on this broker")]
    SecurityDisabled,

    /// A protocol version this broker does not speak: a peer whose versions do not meet its
    /// own, a metadata record newer than it understands, or a cluster whose finalized version
    /// is above the one it was pinned to (see [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION)).
    #[error("{what} needs protocol version {needed}; this broker speaks up to {supported}")]
    UnsupportedVersion {
        /// What needs it.
        what: String,
        /// The version it needs.
        needed: u16,
        /// The newest version this broker speaks (its pin, if it was given one).
        supported: u16,
    },

    /// A topic of this name exists already.
    #[error("topic {0} already exists")]
    TopicExists(String),

    /// A topic cannot be created or deleted as asked (its name, partition count or
    /// replication factor, or it is a configured topic).
    #[error("invalid topic request: {reason}")]
    InvalidTopic {
        /// What is wrong.
        reason: String,
    },

    /// A topic config key or value refused: a key replog does not know, or a value out of the
    /// key's range (see [`TopicConfigs`](crate::TopicConfigs)). Nothing changed.
    #[error("invalid topic config {key}{}: {reason}", value.as_ref().map(|v| format!("={v}")).unwrap_or_default())]
    InvalidTopicConfig {
        /// The key.
        key: String,
        /// The value refused, if one was given.
        value: Option<String>,
        /// Why.
        reason: String,
    },

    /// A record its topic does not take (a record without a key on a compacted topic):
    /// nothing of its batch was written.
    #[error("invalid record: {0}")]
    InvalidRecord(String),

    /// A record stamped by its producer (CreateTime) outside what its topic takes of the
    /// leader's clock (`message.timestamp.before.max.ms`, `message.timestamp.after.max.ms`):
    /// nothing of its batch was written. A native client reads it as
    /// [`InvalidRecord`](Error::InvalidRecord).
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),

    /// The write was sent but its outcome is unknown (a timeout, or the leader changed after
    /// appending it): it may or may not be committed. Retrying it may duplicate it unless the
    /// producer is idempotent.
    #[error("outcome of the write to {partition} is unknown: {reason}")]
    Indeterminate {
        /// The partition written to.
        partition: PartitionId,
        /// What happened.
        reason: String,
    },

    /// The leader refused the write for now and wrote nothing: it was elected moments ago and
    /// has not applied its predecessors' entries yet, or an earlier copy of the same idempotent
    /// batch is still being committed. Retry after a short pause.
    #[error("{partition} is not ready for the write: {reason}")]
    TryAgain {
        /// The partition written to.
        partition: PartitionId,
        /// Why.
        reason: String,
    },

    /// An idempotent batch's sequence number is not the one the partition expects next from its
    /// producer; nothing was written. With at most five batches in flight this means an
    /// earlier batch has not arrived yet (retry shortly), or was lost for good.
    #[error("{partition}: producer {producer_id} sent sequence {got}, expected {expected}")]
    OutOfOrderSequence {
        /// The partition written to.
        partition: PartitionId,
        /// The producer.
        producer_id: u64,
        /// The sequence the partition expects next.
        expected: u32,
        /// The batch's base sequence.
        got: u32,
    },

    /// An idempotent batch came from an earlier epoch of its producer than a batch the
    /// partition has already taken; nothing was written, and nothing of that epoch ever will be
    /// (Kafka's fencing by producer epoch).
    #[error("{partition}: producer {producer_id} epoch {epoch} is fenced by its epoch {current}")]
    ProducerFenced {
        /// The partition written to.
        partition: PartitionId,
        /// The producer.
        producer_id: u64,
        /// The batch's epoch.
        epoch: u16,
        /// The producer's latest epoch the partition has taken.
        current: u16,
    },

    /// The requested offset is not in the log: below its start (purged) or past its end.
    #[error("offset {requested} is outside the log [{start}, {end})")]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: Offset,
        /// The first offset still in the log.
        start: Offset,
        /// The offset the next appended record will get.
        end: Offset,
    },

    /// The asker's leader epoch for the partition (Kafka's `current_leader_epoch`; a Raft term
    /// here) is not the replica's current term. Older: the asker missed a leader change
    /// (Kafka's FENCED_LEADER_EPOCH); newer: this replica has not heard of the new term yet
    /// (UNKNOWN_LEADER_EPOCH). Either way the asker refreshes its metadata and asks again.
    #[error("{partition}: leader epoch {asked} asked, the replica is at term {current}")]
    LeaderEpochMismatch {
        /// The partition.
        partition: PartitionId,
        /// The epoch the asker named.
        asked: u64,
        /// The replica's current term.
        current: u64,
    },

    /// A topic cannot have this many partitions (1 to `max`).
    #[error("a topic has 1 to {max} partitions, not {requested}")]
    InvalidPartitionCount {
        /// The partition count asked for.
        requested: u32,
        /// The most a topic may have.
        max: u32,
    },

    /// A replica assignment given for a new topic that cannot be taken: partitions of
    /// different replica counts, a broker named twice for one partition, a broker the cluster
    /// does not have.
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),

    /// A partition asked to move while an earlier move of it is still under way (Kafka's
    /// REASSIGNMENT_IN_PROGRESS): wait for it to end, or cancel it.
    #[error("partition {0} is still moving to the replicas it was last given")]
    ReassignmentInProgress(PartitionId),

    /// A broker that cannot leave the cluster: the others cannot hold a partition's replicas,
    /// a partition it is on is moving, or it holds a topic configured on the brokers.
    #[error("broker {broker} cannot be decommissioned: {reason}")]
    CannotDecommission {
        /// The broker.
        broker: NodeId,
        /// Why not.
        reason: String,
    },

    /// A partition's move cancelled where none is under way (Kafka's
    /// NO_REASSIGNMENT_IN_PROGRESS).
    #[error("partition {0} is not moving")]
    NoReassignmentInProgress(PartitionId),

    /// A topic asked to grow to no more partitions than it has: partitions are only ever
    /// added (a key's records would otherwise lose their partition).
    #[error("topic {topic} has {current} partitions; it only grows, not to {requested}")]
    PartitionsNotAdded {
        /// The topic.
        topic: String,
        /// Its partitions.
        current: u32,
        /// The count asked for.
        requested: u32,
    },

    /// A topic's replication factor is 0 or larger than the cluster's broker count.
    #[error("replication factor {requested} with {brokers} brokers")]
    InvalidReplicationFactor {
        /// The replication factor asked for.
        requested: u32,
        /// The brokers in the cluster.
        brokers: u32,
    },

    /// The requested log index is not in the log.
    #[error("log index {requested} is outside the log [{first}, {next})")]
    LogIndexOutOfRange {
        /// The log index asked for.
        requested: LogIndex,
        /// The first log index still in the log.
        first: LogIndex,
        /// The log index the next appended entry will get.
        next: LogIndex,
    },

    /// One record is larger than `LogConfig::record_bytes_max`.
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// Encoded size of the record.
        len: u64,
        /// The configured limit.
        max: u64,
    },

    /// A batch is larger than `LogConfig::batch_bytes_max`.
    #[error("batch of {len} bytes exceeds the limit of {max} bytes")]
    BatchTooLarge {
        /// Encoded size of the batch's records.
        len: u64,
        /// The configured limit.
        max: u64,
    },

    /// A batch received for appending (from a peer or a client) is malformed.
    #[error("invalid batch: {kind}")]
    InvalidBatch {
        /// What is wrong with it.
        kind: CorruptKind,
    },

    /// An entry's term is lower than the term of the entry before it.
    #[error("term {requested} is lower than the previous entry's term {previous}")]
    TermRegression {
        /// The term of the last entry in the log.
        previous: crate::types::Term,
        /// The term asked for.
        requested: crate::types::Term,
    },

    /// No broker in the bootstrap list, or known from metadata, could be reached.
    #[error("no broker reachable (tried {tried})")]
    NoBrokerReachable {
        /// The addresses tried.
        tried: String,
    },

    /// The request did not complete within its deadline (nothing was sent, or the outcome of
    /// what was sent is reported as [`Error::Indeterminate`] instead).
    #[error("gave up after {elapsed_ms} ms: {last}")]
    Timeout {
        /// Time spent.
        elapsed_ms: u64,
        /// The last failure seen.
        last: String,
    },

    /// A consumer-group request was refused by the group's coordinator (see
    /// [`GroupError`](crate::GroupError): a member fenced by a newer generation, an unknown
    /// member, a rebalance under way...).
    #[error("group {group}: {error}")]
    Group {
        /// The group.
        group: String,
        /// Why, with Kafka's error code.
        error: crate::group::GroupError,
    },

    /// A broker reported an error this client has no variant for.
    #[error("broker error: {0}")]
    Remote(String),

    /// An append carried no records.
    #[error("a batch must hold at least one record")]
    EmptyBatch,

    /// Bytes on disk failed validation. Never caused by a caller's bug.
    #[error("corrupt data in {} at byte {position}: {kind}", file.display())]
    Corrupt {
        /// The file that holds the bad bytes.
        file: PathBuf,
        /// Byte position of the structure that failed validation.
        position: u64,
        /// What was wrong.
        kind: CorruptKind,
    },

    /// An earlier write or sync failed, so the log refuses writes until it is reopened.
    /// Retrying a failed sync can report success for data that never reached the disk.
    #[error("an earlier I/O failure made this log read-only; reopen it")]
    PreviousIo,

    /// Another `PartitionLog` (in this or another process) has the directory open.
    #[error("{} is locked by another open log", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },

    /// An address that is not `HOST:PORT` with a host name or IP address and a port.
    #[error("invalid address {addr:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A configuration value is out of range or inconsistent with another.
    #[error("invalid configuration: {field}: {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// A TLS certificate or key could not be loaded or used (see [`TlsError`](crate::TlsError)).
    #[error("tls: {0}")]
    Tls(#[from] crate::tls::TlsError),

    /// An I/O error from the operating system (shared, so that an error can be copied: a
    /// producer hands each record of a failed batch the same one).
    #[error("i/o error: {0}")]
    Io(#[source] Arc<std::io::Error>),
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

/// What was wrong with bytes that failed validation (see the format's validation order).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptKind {
    /// The file does not start with replog's magic bytes.
    #[error("bad magic")]
    BadMagic,
    /// A format version this build does not know: a file written by a newer build (this one
    /// writes segments of version 4 and reads 1 to 4; FORMAT.md §9).
    #[error(
        "unsupported format version {0} (this build reads segments of versions {min} to {max})",
        min = crate::segment::format::FORMAT_VERSION_MIN,
        max = crate::segment::format::FORMAT_VERSION
    )]
    UnsupportedVersion(u16),
    /// A flags or reserved field is not zero.
    #[error("non-zero reserved or flags field")]
    NonZeroReserved,
    /// A structure ends past the end of the data.
    #[error("truncated structure")]
    Truncated,
    /// A length field is outside its allowed range.
    #[error("length {len} outside the allowed range (max {max})")]
    LengthOutOfRange {
        /// The length found.
        len: u64,
        /// The largest length allowed.
        max: u64,
    },
    /// The stored CRC does not match the bytes.
    #[error("checksum mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    ChecksumMismatch {
        /// The CRC stored on disk.
        expected: u32,
        /// The CRC of the bytes as read.
        actual: u32,
    },
    /// A frame kind this build does not know.
    #[error("unknown entry kind {0}")]
    UnknownEntryKind(u8),
    /// A frame's log index does not follow the previous one.
    #[error("log index gap: expected {expected}, found {found}")]
    LogIndexGap {
        /// The log index that should come next.
        expected: u64,
        /// The log index found.
        found: u64,
    },
    /// A frame's first offset does not follow the previous frame's records.
    #[error("offset gap: expected {expected}, found {found}")]
    OffsetGap {
        /// The offset that should come next.
        expected: u64,
        /// The offset found.
        found: u64,
    },
    /// A frame's term is lower than the previous frame's.
    #[error("term went back from {previous} to {found}")]
    TermRegression {
        /// The previous frame's term.
        previous: u64,
        /// The term found.
        found: u64,
    },
    /// The records in a batch do not add up to its payload or its record count.
    #[error("record layout does not match the batch")]
    BadRecord,
    /// A Kafka record batch kept in a frame (or arriving to be appended) is not one that
    /// replog stores: the reason says which rule it broke.
    #[error("bad kafka record batch: {0}")]
    BadKafkaBatch(&'static str),
    /// A segment header names a different base log index than its file name.
    #[error("header base log index {found} does not match the file name's {expected}")]
    BaseMismatch {
        /// The base log index in the file name.
        expected: u64,
        /// The base log index in the header.
        found: u64,
    },
    /// A sealed segment ends before the log index the next segment starts at.
    #[error("segment ends at log index {found} but the next segment starts at {expected}")]
    MissingEntries {
        /// The next segment's base log index.
        expected: u64,
        /// Where this segment's entries end.
        found: u64,
    },
}
