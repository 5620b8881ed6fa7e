//! The service's own requests: what a door asks of the broker once it has decoded its wire,
//! in none of the wires' types (neither the native protocol's nor Kafka's) and not as Raft's
//! log entries. Each door converts its request to one of these at its boundary; the broker
//! turns them into Raft entries and metadata commands itself.

use bytes::Bytes;

use crate::segment::format::PayloadFormat;
use crate::types::ProducerSeq;

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
