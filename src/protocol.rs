//! Client requests and responses on the wire (postcard-encoded frame bodies).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::node::service::ProduceBatch;
use crate::raft::types::AppendRequest;
use crate::segment::batch::Batch;
use crate::segment::format::{EntryKind, PayloadFormat};
use crate::segment::frame::{Limits, validate_payload};
use crate::types::{LogIndex, NodeId, Offset, PartitionId, ProducerSeq, Term};

pub(crate) use crate::transport::body::encode;

mod wire_error;
pub(crate) use wire_error::WireError;

/// `Op::Produce` request.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ProduceRequest {
    pub(crate) partition: PartitionId,
    pub(crate) batch: AppendRequest,
}

/// `Op::Produce` request as the broker decodes it: the same bytes as [`ProduceRequest`], with
/// the records borrowed from the frame, so that they reach the log without another copy
/// (see [`ProduceRequestRef::into_batch`]).
#[derive(Debug, Deserialize)]
pub(crate) struct ProduceRequestRef<'a> {
    pub(crate) partition: PartitionId,
    #[serde(borrow)]
    batch: AppendRequestRef<'a>,
}

/// [`AppendRequest`] with borrowed records; the fields in the same order.
#[derive(Debug, Deserialize)]
struct AppendRequestRef<'a> {
    records: &'a [u8],
    record_count: u32,
    producer_id: u64,
    producer_epoch: u16,
    base_sequence: u32,
    #[expect(
        dead_code,
        reason = "decoded to keep the body's layout; the leader stamps every batch"
    )]
    timestamp_ms: u64,
    format: PayloadFormat,
}

impl ProduceRequestRef<'_> {
    /// The batch as the broker service takes it, its records a view of `frame` (the buffer
    /// this request was decoded from). The client's `timestamp_ms` is not part of it: the
    /// leader stamps every batch it appends.
    pub(crate) fn into_batch(self, frame: &Bytes) -> ProduceBatch {
        let b = self.batch;
        ProduceBatch {
            records: frame.slice_ref(b.records),
            format: b.format,
            record_count: b.record_count,
            producer: ProducerSeq {
                producer_id: b.producer_id,
                epoch: b.producer_epoch,
                base_sequence: b.base_sequence,
            },
        }
    }
}

/// `Op::Produce` response.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ProduceResponse {
    pub(crate) log_index: u64,
    pub(crate) base_offset: u64,
    pub(crate) record_count: u32,
}

/// `Op::Fetch` request.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FetchRequest {
    pub(crate) partition: PartitionId,
    pub(crate) offset: u64,
    pub(crate) max_bytes: u32,
    /// The longest the broker may wait for `min_bytes` of committed records from `offset` on
    /// (Kafka's `fetch.max.wait.ms`); 0 answers at once.
    pub(crate) max_wait_ms: u32,
    /// Record bytes worth answering for (Kafka's `fetch.min.bytes`); 0 or 1: any.
    pub(crate) min_bytes: u32,
}

/// `Op::Fetch` response (batches as [`WireBatch`]es), and `Op::FetchAsStored`'s (as
/// [`StoredBatch`]es).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FetchResponse<B = WireBatch> {
    pub(crate) batches: Vec<B>,
    /// The partition's high watermark on the answering replica: records below it are
    /// committed.
    pub(crate) high_watermark: u64,
    /// The first offset still in the answering replica's log.
    pub(crate) log_start: u64,
}

/// `Op::Reassign` request: move partition `partition` of the created topic `topic` to
/// `replicas` (the preferred leader first), or, with no replicas, take back the move under
/// way (as Kafka's null replicas cancel one); answered `Result<(), WireError>` once the
/// metadata leader has recorded it (the partition's leader carries it out).
/// `ReassignmentInProgress` for a partition still moving, `NoReassignmentInProgress` for a
/// cancellation of one that is not, `InvalidReplicaAssignment` for replicas named twice or
/// brokers the cluster lacks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ReassignRequest {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    pub(crate) replicas: Vec<crate::types::NodeId>,
}

/// `Op::Brokers` request: the cluster's brokers described (answered
/// `Result<Vec<BrokerDescription>, WireError>`), or one decommissioned (answered
/// `Result<(), WireError>` once the metadata log has the moves of its replicas:
/// `CannotDecommission` where the others cannot take them). Variant index first (postcard):
/// `00` describe; `01` decommission, then the broker id (varint).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum BrokersRequest {
    Describe,
    Decommission { id: crate::types::NodeId },
}

/// `Op::ListReassignments` request: the partitions moving now, of `topics` only if given;
/// answered `Result<Vec<Reassignment>, WireError>` from the answering broker's copy of the
/// metadata log, in partition order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ListReassignmentsRequest {
    pub(crate) topics: Option<Vec<String>>,
}

/// `Op::ListOffsets` request: where `partition` is at `at`; answered
/// `Result<Option<u64>, WireError>` (`None`: no committed record of the time or later).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ListOffsetsRequest {
    pub(crate) partition: PartitionId,
    pub(crate) at: OffsetAt,
}

/// A point in a partition, as ListOffsets names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum OffsetAt {
    /// The first offset still in the log (Kafka's timestamp −2).
    Earliest,
    /// The high watermark (Kafka's −1).
    Latest,
    /// The first committed record whose timestamp is this time or later, in ms since the epoch
    /// (a producer's records have its timestamps, replog's own records their append time).
    Timestamp(u64),
    /// The first record of the largest timestamp, if it is committed (Kafka's −3, KIP-734).
    MaxTimestamp,
}

/// One batch in a fetch response: the frame's fields and its record bytes as stored.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireBatch {
    pub(crate) log_index: u64,
    pub(crate) term: u64,
    pub(crate) base_offset: u64,
    pub(crate) record_count: u32,
    pub(crate) timestamp_ms: u64,
    pub(crate) producer_id: u64,
    pub(crate) producer_epoch: u16,
    pub(crate) base_sequence: u32,
    #[serde(
        serialize_with = "crate::transport::body::lend",
        deserialize_with = "crate::transport::body::in_frame"
    )]
    pub(crate) records: Bytes,
    /// Compaction removed records from the batch: `records` holds each kept one after its
    /// offset delta, and `record_count` is the offsets the batch spans (FORMAT.md §4.3).
    pub(crate) compacted: bool,
}

impl WireBatch {
    /// Fetched batches as native clients get them, at most `max_bytes` of records (the first
    /// batch whatever its size): a batch a Kafka producer sent is served as replog records
    /// (decompressed; its offsets, producer numbers and stamp unchanged), so a native client
    /// reads every batch of a log alike. The read was bounded by the stored sizes, which a
    /// decompressed batch can exceed; the batches past the budget are left for the next fetch.
    pub(crate) fn from_batches(batches: &[Batch], max_bytes: usize) -> Vec<WireBatch> {
        within_budget(batches, max_bytes, WireBatch::from_batch, |w| {
            w.records.len()
        })
    }

    pub(crate) fn from_batch(b: &Batch) -> Self {
        let records = match b.format {
            // A run of emptied entries (its payload is their count): no record.
            _ if b.kind == EntryKind::Gap => Bytes::new(),
            PayloadFormat::Replog => b.payload.clone(),
            // A compacted frame that kept no record.
            PayloadFormat::Kafka if b.payload.is_empty() => Bytes::new(),
            // Checked whole when the leader took it, and its header and the frame's CRC on
            // every read since, so this does not fail short of a replog bug; if it did, the
            // batch is answered without records rather than the fetch failing.
            PayloadFormat::Kafka => {
                let limits = &crate::segment::frame::Limits::ON_DISK;
                crate::segment::kafka::replog_payload(&b.payload, b.compacted, limits)
                    .unwrap_or_else(|e| {
                        tracing::warn!(log_index = %b.log_index, error = %e,
                            "a stored kafka batch does not decode");
                        Bytes::new()
                    })
            }
        };
        WireBatch::with_records(b, records)
    }

    /// `b`'s frame fields with `records`.
    fn with_records(b: &Batch, records: Bytes) -> Self {
        WireBatch {
            log_index: b.log_index.get(),
            term: b.term.get(),
            base_offset: b.base_offset.get(),
            record_count: b.record_count,
            timestamp_ms: b.timestamp_ms,
            producer_id: b.producer_id,
            producer_epoch: b.producer_epoch,
            base_sequence: b.base_sequence,
            records,
            compacted: b.compacted,
        }
    }

    /// Rebuilds the batch, validating its records: they came from the network.
    pub(crate) fn into_batch(self, limits: &Limits) -> Result<Batch, Error> {
        self.into_batch_as(PayloadFormat::Replog, limits)
    }

    /// [`into_batch`](Self::into_batch) of records in `format`.
    fn into_batch_as(self, format: PayloadFormat, limits: &Limits) -> Result<Batch, Error> {
        let invalid = |kind| Error::InvalidBatch { kind };
        validate_payload(
            format,
            self.compacted,
            &self.records,
            self.record_count,
            limits,
        )
        .map_err(invalid)?;
        if format == PayloadFormat::Kafka {
            crate::segment::kafka::check_served(&self.records, self.compacted, limits)
                .map_err(invalid)?;
        }
        Ok(Batch {
            log_index: LogIndex(self.log_index),
            term: Term(self.term),
            base_offset: Offset(self.base_offset),
            record_count: self.record_count,
            timestamp_ms: self.timestamp_ms,
            kind: EntryKind::Data,
            format,
            compacted: self.compacted,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            payload: self.records,
        })
    }
}

/// `batches` as `convert` puts them on the wire, as many as fit `max_bytes` of records as
/// `len` counts them (the first whatever its size).
fn within_budget<B>(
    batches: &[Batch],
    max_bytes: usize,
    convert: impl Fn(&Batch) -> B,
    len: impl Fn(&B) -> usize,
) -> Vec<B> {
    let mut out = Vec::with_capacity(batches.len());
    let mut spent = 0usize;
    for b in batches {
        let wire = convert(b);
        spent = spent.saturating_add(len(&wire));
        if spent > max_bytes && !out.is_empty() {
            break;
        }
        out.push(wire);
    }
    out
}

/// One batch in an `Op::FetchAsStored` answer (protocol version 4): its payload's format,
/// then the batch with its records in that format. A Kafka producer's uncompressed batch, and
/// every batch a native producer of version 4 sent, goes out as stored, a Kafka v2 batch
/// (FORMAT.md §4.2), read from the log's memory without a copy; a compressed one is
/// decompressed into replog's records as for `Op::Fetch`, so that an answer's size stays what
/// `max_bytes` asked for and a client never inflates a batch it did not ask to.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StoredBatch {
    pub(crate) format: PayloadFormat,
    pub(crate) batch: WireBatch,
}

impl StoredBatch {
    /// Fetched batches as a native client of protocol version 4 gets them, at most
    /// `max_bytes` of records (the first batch whatever its size).
    pub(crate) fn from_batches(batches: &[Batch], max_bytes: usize) -> Vec<StoredBatch> {
        within_budget(batches, max_bytes, StoredBatch::from_batch, |s| {
            s.batch.records.len()
        })
    }

    /// Whether serving `b` takes decompressing it: a compressed Kafka batch's.
    pub(crate) fn inflates(b: &Batch) -> bool {
        b.format == PayloadFormat::Kafka
            && b.kind == EntryKind::Data
            && crate::segment::kafka::header_of(&b.payload, b.compacted).is_ok_and(|h| h.codec != 0)
    }

    fn from_batch(b: &Batch) -> Self {
        if b.kind == EntryKind::Data && b.format == PayloadFormat::Kafka && !Self::inflates(b) {
            return StoredBatch {
                format: PayloadFormat::Kafka,
                batch: WireBatch::with_records(b, b.payload.clone()),
            };
        }
        StoredBatch {
            format: PayloadFormat::Replog,
            batch: WireBatch::from_batch(b),
        }
    }

    /// Rebuilds the batch, validating its records (they came from the network): a Kafka
    /// batch's header and every record (`kafka::check_served`), replog's records as
    /// [`WireBatch::into_batch`] does.
    pub(crate) fn into_batch(self, limits: &Limits) -> Result<Batch, Error> {
        self.batch.into_batch_as(self.format, limits)
    }
}

/// `Op::Metadata` request: one topic, or every topic.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct MetadataRequest {
    pub(crate) topic: Option<String>,
    /// Describe only the partitions the broker hosts (brokers asking each other); otherwise
    /// the broker asks the hosts of the others.
    pub(crate) local_only: bool,
}

/// `Op::CreateTopic` request; answered `Result<(), WireError>` once the topic is in the
/// catalog of the metadata leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CreateTopicRequest {
    pub(crate) name: String,
    pub(crate) partitions: u32,
    pub(crate) replication_factor: u32,
    /// Configs set on the topic from the start (the rest are the brokers' defaults).
    pub(crate) configs: crate::topic_config::TopicConfigs,
    /// Each partition's brokers, the preferred leader first, as the client placed them
    /// (Kafka's replica assignment); empty: placed by the metadata leader's proposer.
    pub(crate) assignment: Vec<Vec<crate::types::NodeId>>,
    /// Sent by a broker to the metadata leader: not to be forwarded again.
    pub(crate) forwarded: bool,
}

/// `Op::TopicConfigs` request: a topic's configs described, or changed through the metadata
/// Raft group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum TopicConfigsRequest {
    /// Every config of `topic`, with its value and source; answered
    /// `Result<Vec<ConfigEntry>, WireError>`.
    Describe { topic: String },
    /// Answered `Result<(), WireError>` once the change is in the catalog of the metadata
    /// leader.
    Alter(AlterTopicConfigs),
}

/// A change to a topic's configs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AlterTopicConfigs {
    pub(crate) topic: String,
    pub(crate) changes: Vec<crate::topic_config::ConfigChange>,
    /// Kafka's AlterConfigs: the topic keeps exactly the keys `changes` set (only
    /// [`ConfigChange::Set`](crate::topic_config::ConfigChange::Set) allowed); otherwise
    /// IncrementalAlterConfigs: the changes apply to the configs it has.
    pub(crate) replace: bool,
    /// Only check that the change could be made.
    pub(crate) validate_only: bool,
    /// Sent by a broker to the metadata leader: not to be forwarded again.
    pub(crate) forwarded: bool,
}

/// `Op::CreatePartitions` request: topic `name` grown to `count` partitions; answered
/// `Result<(), WireError>` once the metadata leader applied it.
///
/// `assignment` came last, after the other fields: a body that ends before it (from a client
/// of before) is read as one without (see [`CreatePartitionsRequest::decode`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CreatePartitionsRequest {
    pub(crate) name: String,
    pub(crate) count: u32,
    /// Only check that it could be done.
    pub(crate) validate_only: bool,
    /// Each new partition's brokers, the preferred leader first, as the client placed them
    /// (Kafka's CreatePartitions assignments); empty: placed as a new topic's partitions are.
    pub(crate) assignment: Vec<Vec<crate::types::NodeId>>,
}

/// [`CreatePartitionsRequest`] as clients sent it before it had `assignment`.
#[derive(Deserialize)]
struct CreatePartitionsRequestUnassigned {
    name: String,
    count: u32,
    validate_only: bool,
}

impl CreatePartitionsRequest {
    /// Decodes a body with or without the trailing `assignment` (none: placed by replog).
    pub(crate) fn decode(body: &[u8]) -> postcard::Result<CreatePartitionsRequest> {
        postcard::from_bytes(body).or_else(|_| {
            let old: CreatePartitionsRequestUnassigned = postcard::from_bytes(body)?;
            Ok(CreatePartitionsRequest {
                name: old.name,
                count: old.count,
                validate_only: old.validate_only,
                assignment: Vec::new(),
            })
        })
    }
}

/// `Op::DeleteRecords` request: partition `partition`'s records before `before` deleted on
/// every replica (Kafka's DeleteRecords); answered `Result<u64, WireError>`, the partition's
/// log start after it (never moved back), once its leader committed the new start.
///
/// Served by the partition's leader only: elsewhere `NotLeader` (with the leader's hint where
/// the broker knows it); `OffsetOutOfRange` for a `before` past the high watermark;
/// `UnknownTopic` / `UnknownPartition`; `TopicAuthorizationFailed` without DELETE on the
/// topic.
///
/// The body, byte by byte (postcard, as every body: unsigned integers are LEB128 varints):
///
/// | pos | size | field | rule |
/// |---|---|---|---|
/// | 0 | 1–5 | topic length | varint |
/// | … | length | topic | UTF-8 bytes |
/// | … | 1–5 | partition | varint (`u32`) |
/// | … | 1 | before tag | `00`: every committed record (the high watermark); `01`: an offset follows |
/// | … | 1–10 | before | varint (`u64`), only after tag `01` |
///
/// So `{ partition: "t"-3, before: Some(300) }` is `01 74 03 01 AC 02`. The answer
/// `Ok(300)` is `00 AC 02`; a follower's refusal starts `01 00` (`Err`, `NotLeader`), then
/// `00` (no hint) or `01` and the hint (`node_id` varint, address as a string `HOST:PORT`
/// (length varint, UTF-8), `term` varint).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct DeleteRecordsRequest {
    pub(crate) partition: PartitionId,
    /// Records below this offset go; `None`: every committed record.
    pub(crate) before: Option<u64>,
}

/// `Op::ElectLeaders` request: each partition's leadership handed to its preferred replica
/// (the first of its assignment) by a Raft leadership transfer (Kafka's preferred-leader
/// ElectLeaders); answered `Result<Vec<(PartitionId, Election)>, WireError>`, one outcome
/// per partition asked (`None`: every partition of every topic), once each transfer is done
/// or refused.
///
/// A client's request (`forwarded = false`) goes to any broker: it finds each partition's
/// leader and asks it, with `forwarded = true` and only the partitions it leads (a request
/// only brokers send). `ClusterAuthorizationFailed` without ALTER on the cluster.
///
/// The body, byte by byte (postcard):
///
/// | pos | size | field | rule |
/// |---|---|---|---|
/// | 0 | 1 | partitions tag | `00`: every partition; `01`: a list follows |
/// | … | 1–5 | count | varint, only after tag `01`; then each partition as topic length (varint), topic (UTF-8), partition (varint `u32`) |
/// | … | 1 | forwarded | `00` or `01` |
///
/// So `{ partitions: Some(["t"-3]), forwarded: false }` is `01 01 01 74 03 00`. In the
/// answer each outcome is its variant's index (`Elected` 0, `NotNeeded` 1,
/// `PreferredUnavailable` 2, `UnknownPartition` 3, `TryAgain` 4), the last two with a
/// string after it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ElectLeadersRequest {
    /// The partitions; `None`: all.
    pub(crate) partitions: Option<Vec<PartitionId>>,
    /// Sent by a broker to a leader, for partitions it leads.
    pub(crate) forwarded: bool,
}

/// `Op::Propose` request: a metadata command to commit (a broker's registration, a partition's
/// move or its end); answered `Result<(), WireError>` once the metadata leader has applied it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ProposeRequest {
    pub(crate) command: crate::catalog::MetaCommand,
    pub(crate) forwarded: bool,
}

/// `Op::Acls` request: the ACL bindings a filter selects, new bindings, or the bindings
/// filters select removed (Kafka's DescribeAcls, CreateAcls, DeleteAcls; bindings and
/// filters with Kafka's codes). Answered `Result<T, WireError>`, `T` per variant:
/// `Vec<AclRecord>`; one `Result<(), WireError>` per binding; per filter, the bindings it
/// removed (`Vec<Vec<AclRecord>>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum AclsRequest {
    Describe(crate::catalog::AclFilterRecord),
    Create(Vec<crate::catalog::AclRecord>),
    Delete(Vec<crate::catalog::AclFilterRecord>),
}

/// `Op::Users` request: users' SCRAM credentials listed (those named, or all for `None`), or
/// changed (Kafka's DescribeUserScramCredentials and AlterUserScramCredentials: a credential
/// arrives as a salted password, never a password). Answered `Result<T, WireError>`, `T` per
/// variant: per user, its credentials (`(mechanism code, iterations)`) or why not
/// (`Vec<(String, Result<Vec<(i8, u32)>, String>)>`); per user changed, `Result<(), String>`.
/// `Op::Users`' answer to `Describe`: per user, its credentials as `(mechanism code,
/// iterations)`, or why not.
pub(crate) type DescribedUsers = Vec<(String, Result<Vec<(i8, u32)>, String>)>;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum UsersRequest {
    Describe(Option<Vec<String>>),
    Alter(Vec<(String, crate::node::service::CredentialChange)>),
}

/// `Op::DeleteTopic` request; answered `Result<(), WireError>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct DeleteTopicRequest {
    pub(crate) name: String,
    pub(crate) forwarded: bool,
}

/// `Op::Metadata` response.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct MetadataResponse {
    /// The answering broker.
    pub(crate) broker: NodeId,
    pub(crate) brokers: Vec<(NodeId, String)>,
    pub(crate) partitions: Vec<PartitionMetadata>,
    /// The answering broker's size limits, so that a client refuses at once what no broker
    /// would take (instead of sending it, or resending it until its delivery timeout).
    pub(crate) limits: BrokerLimits,
}

/// A broker's size limits, as its configuration sets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BrokerLimits {
    /// `LogConfig::record_bytes_max`.
    pub(crate) record_bytes_max: u32,
    /// `LogConfig::batch_bytes_max`.
    pub(crate) batch_bytes_max: u32,
    /// `NodeConfig::frame_bytes_max`.
    pub(crate) frame_bytes_max: u32,
}

impl BrokerLimits {
    /// The tighter of two brokers' limits, limit by limit: what both take.
    pub(crate) fn min(self, other: BrokerLimits) -> BrokerLimits {
        BrokerLimits {
            record_bytes_max: self.record_bytes_max.min(other.record_bytes_max),
            batch_bytes_max: self.batch_bytes_max.min(other.batch_bytes_max),
            frame_bytes_max: self.frame_bytes_max.min(other.frame_bytes_max),
        }
    }
}

/// What a broker knows of one partition.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PartitionMetadata {
    pub(crate) partition: PartitionId,
    pub(crate) leader: Option<NodeId>,
    /// The leader's term: newer metadata has a higher one.
    pub(crate) term: u64,
    pub(crate) replicas: Vec<NodeId>,
    /// Replicas caught up with the leader (known only when the answering broker leads).
    pub(crate) isr: Vec<NodeId>,
    /// How many entries each follower is behind the leader's log (known only when the
    /// answering broker leads; empty otherwise).
    pub(crate) lag: Vec<(NodeId, u64)>,
    pub(crate) log_start: u64,
    pub(crate) high_watermark: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CreatePartitions body with its assignment decodes with it; one that ends before it
    /// (a client of before it existed) decodes as placed by replog.
    #[test]
    fn a_create_partitions_request_decodes_with_and_without_its_assignment() {
        let with = CreatePartitionsRequest {
            name: "t".into(),
            count: 4,
            validate_only: false,
            assignment: vec![vec![1, 2], vec![2, 3]],
        };
        let bytes = postcard::to_stdvec(&with).unwrap();
        assert_eq!(
            bytes,
            [0x01, b't', 0x04, 0x00, 0x02, 0x02, 1, 2, 0x02, 2, 3]
        );
        let decoded = CreatePartitionsRequest::decode(&bytes).unwrap();
        assert_eq!(decoded.assignment, vec![vec![1, 2], vec![2, 3]]);
        let old = CreatePartitionsRequest::decode(&bytes[..4]).unwrap();
        assert_eq!((old.name.as_str(), old.count), ("t", 4));
        assert!(!old.validate_only && old.assignment.is_empty());
        assert!(CreatePartitionsRequest::decode(&bytes[..2]).is_err());
    }

    /// `Op::DeleteRecords`' request and answer, pinned byte by byte as the struct's docs
    /// have them.
    #[test]
    fn a_delete_records_request_is_pinned_byte_by_byte() {
        let request = DeleteRecordsRequest {
            partition: PartitionId::new("t", 3),
            before: Some(300),
        };
        let bytes = postcard::to_stdvec(&request).unwrap();
        assert_eq!(bytes, [0x01, b't', 0x03, 0x01, 0xAC, 0x02]);
        let all = DeleteRecordsRequest {
            partition: PartitionId::new("t", 3),
            before: None,
        };
        assert_eq!(postcard::to_stdvec(&all).unwrap(), [0x01, b't', 0x03, 0x00]);
        let answer: std::result::Result<u64, WireError> = Ok(300);
        assert_eq!(postcard::to_stdvec(&answer).unwrap(), [0x00, 0xAC, 0x02]);
        let refused: std::result::Result<u64, WireError> =
            Err(WireError::NotLeader { leader: None });
        assert_eq!(postcard::to_stdvec(&refused).unwrap(), [0x01, 0x00, 0x00]);
    }

    /// The borrowing decoder reads what the client encodes, and its records share the frame.
    #[test]
    fn a_produce_request_decodes_without_copying_its_records() {
        let request = ProduceRequest {
            partition: PartitionId::new("t", 3),
            batch: AppendRequest {
                format: crate::segment::format::PayloadFormat::Replog,
                compacted: false,
                records: Bytes::from_static(b"some encoded records"),
                record_count: 2,
                producer_id: 9,
                producer_epoch: 3,
                base_sequence: 77,
                timestamp_ms: 1234,
            },
        };
        let frame = Bytes::from(postcard::to_stdvec(&request).unwrap());
        let decoded: ProduceRequestRef<'_> = postcard::from_bytes(&frame).unwrap();
        assert_eq!(decoded.partition, request.partition);
        let batch = decoded.into_batch(&frame);
        assert_eq!(batch.records, request.batch.records);
        assert_eq!(batch.format, request.batch.format);
        assert_eq!(batch.record_count, 2);
        assert_eq!(batch.producer, ProducerSeq::new(9, 77).with_epoch(3));
        let inside = frame.as_ptr_range();
        assert!(
            inside.contains(&batch.records.as_ptr()),
            "a view of the frame"
        );
    }

    /// A fetch of protocol version 4 sends a Kafka batch as it lies in the log, which the
    /// client reads back as the records sent; `Op::Fetch` converts the same batch into
    /// replog's records; and the client refuses a served batch whose records do not hold
    /// together instead of handing out a batch whose records stop short.
    #[test]
    fn a_fetch_as_stored_sends_a_kafka_batch_as_it_lies() {
        use crate::segment::record::Record;
        let records: Vec<Record> = (0..3)
            .map(|i| Record::new(vec![b'v'; 10 + i]).with_key("k"))
            .collect();
        let stored =
            crate::segment::kafka::encode::encode_produced(&records, 1_700_000_000_000).unwrap();
        let batch = |payload: Bytes| Batch {
            log_index: LogIndex(5),
            term: Term(2),
            base_offset: Offset(40),
            record_count: 3,
            timestamp_ms: 1_700_000_000_001,
            kind: EntryKind::Data,
            format: PayloadFormat::Kafka,
            compacted: false,
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 30,
            payload,
        };
        let b = batch(stored.clone());
        let sent = StoredBatch::from_batches(std::slice::from_ref(&b), 1 << 20);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].format, PayloadFormat::Kafka);
        assert_eq!(
            sent[0].batch.records.as_ptr(),
            stored.as_ptr(),
            "the stored bytes, not a copy"
        );
        let wire = postcard::to_stdvec(&sent[0]).unwrap();
        let got: StoredBatch = postcard::from_bytes(&wire).unwrap();
        let read = got.into_batch(&Limits::ON_DISK).unwrap();
        assert_eq!(
            (read.base_offset(), read.producer()),
            (Offset(40), Some((9, 30)))
        );
        let back: Vec<(Offset, Record)> = read.records().collect();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2], (Offset(42), records[2].clone()));
        // `Op::Fetch`: replog's records, for a client of before version 4.
        let converted = WireBatch::from_batches(std::slice::from_ref(&b), 1 << 20);
        let (model, _) = crate::segment::record::encode_records(&records, u32::MAX).unwrap();
        assert_eq!(converted[0].records, model);
        // A first record whose length runs past the batch: refused, whole.
        let mut damaged = stored.to_vec();
        damaged[crate::segment::kafka::BATCH_HEADER_LEN] = 0x7e;
        let sent = StoredBatch::from_batches(&[batch(Bytes::from(damaged))], 1 << 20);
        let refused = sent
            .into_iter()
            .next()
            .unwrap()
            .into_batch(&Limits::ON_DISK);
        assert!(
            matches!(refused, Err(Error::InvalidBatch { .. })),
            "{refused:?}"
        );
    }
}
