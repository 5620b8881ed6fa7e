//! The openraft type configuration and the data that goes through Raft.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// replog's Raft types: node ids are replica ids (`u64`), a committed leader id is just the
    /// term (openraft's "std" mode), and a log id is therefore `(term, index)`, which is exactly
    /// what a frame stores.
    pub TypeConfig:
        D = AppendRequest,
        R = AppendResponse,
        Node = BrokerNode,
        LeaderId = openraft::impls::leader_id_std::LeaderId<Self::Term, Self::NodeId>,
);

/// Shorthand for the type configuration.
pub(crate) type C = TypeConfig;
/// A Raft log entry.
pub(crate) type Entry = <C as openraft::RaftTypeConfig>::Entry;
/// A Raft log id: `(term, index)`.
pub(crate) type LogId = openraft::type_config::alias::LogIdOf<C>;
/// A vote.
pub(crate) type Vote = openraft::type_config::alias::VoteOf<C>;

/// A record batch to append: the encoded records exactly as the producer sent them, which the
/// leader writes, replicates and serves without re-encoding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendRequest {
    /// Encoded records (see the record layout in `FORMAT.md`).
    #[serde(
        serialize_with = "crate::transport::body::lend",
        deserialize_with = "crate::transport::body::in_frame"
    )]
    pub records: Bytes,
    /// How many records `records` holds.
    pub record_count: u32,
    /// Idempotent producer id; 0 for none.
    pub producer_id: u64,
    /// The producer's epoch (0 without a producer); a later epoch fences the earlier ones.
    pub producer_epoch: u16,
    /// The producer's sequence number of the first record.
    pub base_sequence: u32,
    /// When the leader accepted the batch (milliseconds since the Unix epoch), stored in the
    /// frame on every replica; 0 lets the leader's log stamp it.
    pub timestamp_ms: u64,
    /// How `records` is encoded: replog's records, or one Kafka record batch kept as its
    /// producer sent it.
    pub format: crate::segment::format::PayloadFormat,
    /// The leader's log compacted the entry before it was sent (a follower catching up over a
    /// compacted range): `record_count` is the offsets it spans, `records` what compaction
    /// kept of them, each with its offset (the layout of the `COMPACTED` frame in
    /// `FORMAT.md`). Never set on a new write.
    pub compacted: bool,
}

impl fmt::Display for AppendRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} records ({} bytes)",
            self.record_count,
            self.records.len()
        )
    }
}

/// Where an appended batch landed, once applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendResponse {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Number of records.
    pub record_count: u32,
    /// The batch's timestamp as the leader stamped it (ms since the Unix epoch); 0 where
    /// unknown (a resent batch whose first copy is no longer in the log).
    pub timestamp_ms: u64,
}

/// What a Raft node id stands for: a broker and the address clients and peers reach it at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerNode {
    /// `host:port`.
    pub addr: String,
}

impl fmt::Display for BrokerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leader's append goes out with its records lent, not copied, and a follower decodes
    /// them as slices of the frame it received: the same request either way.
    #[test]
    fn an_append_goes_out_lent_and_arrives_as_a_slice_of_its_frame() {
        let sent = vec![
            AppendRequest {
                records: Bytes::from(vec![9u8; 64 * 1024]),
                record_count: 7,
                ..AppendRequest::default()
            },
            AppendRequest::default(),
        ];
        let body = crate::transport::body::encode(&sent).unwrap();
        assert_eq!(body.to_vec(), postcard::to_stdvec(&sent).unwrap());
        assert_eq!(
            body.piece_count(),
            3,
            "the records are a piece of their own"
        );
        let frame = Bytes::from(body.to_vec());
        let got: Vec<AppendRequest> = crate::transport::body::decode_in_frame(&frame, || {
            postcard::from_bytes(&frame).unwrap()
        });
        assert_eq!(got, sent);
        let (start, end) = (
            frame.as_ptr() as usize,
            frame.as_ptr() as usize + frame.len(),
        );
        let at = got[0].records.as_ptr() as usize;
        assert!(start <= at && at + got[0].records.len() <= end);
    }

    #[test]
    fn records_decode_from_json_as_before() {
        let sent = AppendRequest {
            records: Bytes::from_static(b"abc"),
            record_count: 1,
            ..AppendRequest::default()
        };
        let json = serde_json::to_string(&sent).unwrap();
        assert_eq!(serde_json::from_str::<AppendRequest>(&json).unwrap(), sent);
    }
}
