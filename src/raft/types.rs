//! The openraft type configuration and the data that goes through Raft.

use std::cell::RefCell;
use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};

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
    #[serde(deserialize_with = "records_in_frame")]
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

thread_local! {
    /// The received frame that the requests being decoded on this thread lie in (see
    /// [`decode_in_frame`]).
    static FRAME: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Runs `decode` (a synchronous decode of bytes that lie in `frame`) so that every
/// [`AppendRequest::records`] it decodes is a slice of `frame`, not a copy: a follower's
/// entries keep the replication frame's buffer instead of copying each batch out of it. The
/// bytes decoded are the same either way; a `records` not within `frame` is copied.
pub(crate) fn decode_in_frame<T>(frame: &Bytes, decode: impl FnOnce() -> T) -> T {
    /// Puts back what the thread had before, even if `decode` unwinds.
    struct Restore(Option<Bytes>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            FRAME.with(|f| *f.borrow_mut() = before);
        }
    }
    let before = FRAME.with(|f| f.borrow_mut().replace(frame.clone()));
    let _restore = Restore(before);
    decode()
}

/// `v` as a slice of the frame being decoded on this thread if it lies within it, else a copy.
fn in_frame(v: &[u8]) -> Bytes {
    FRAME.with(|f| match f.borrow().as_ref() {
        Some(frame) if !v.is_empty() && within(frame, v) => frame.slice_ref(v),
        _ => Bytes::copy_from_slice(v),
    })
}

/// Whether `v` lies within `frame`'s bytes.
fn within(frame: &[u8], v: &[u8]) -> bool {
    let (start, end) = (
        frame.as_ptr() as usize,
        frame.as_ptr() as usize + frame.len(),
    );
    let (v_start, v_end) = (v.as_ptr() as usize, v.as_ptr() as usize + v.len());
    start <= v_start && v_end <= end
}

/// [`AppendRequest::records`] decoded: borrowed bytes within the frame being decoded on this
/// thread ([`decode_in_frame`]) are a slice of it; anything else is copied, as `Bytes`'s own
/// `Deserialize` does.
fn records_in_frame<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    struct Records;
    impl<'de> serde::de::Visitor<'de> for Records {
        type Value = Bytes;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_borrowed_bytes<E: serde::de::Error>(self, v: &'de [u8]) -> Result<Bytes, E> {
            Ok(in_frame(v))
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v))
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(v))
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(Bytes::from(out))
        }
    }
    d.deserialize_bytes(Records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(records: &[u8]) -> AppendRequest {
        AppendRequest {
            records: Bytes::copy_from_slice(records),
            record_count: 1,
            ..AppendRequest::default()
        }
    }

    #[test]
    fn records_decoded_in_their_frame_are_slices_of_it() {
        let sent = vec![request(b"first batch"), request(b""), request(b"third")];
        let frame = Bytes::from(postcard::to_stdvec(&sent).unwrap());
        let got: Vec<AppendRequest> =
            decode_in_frame(&frame, || postcard::from_bytes(&frame).unwrap());
        assert_eq!(got, sent);
        for r in got.iter().filter(|r| !r.records.is_empty()) {
            assert!(within(&frame, &r.records), "{r} is a slice of the frame");
        }
        // Outside `decode_in_frame`, and for bytes not in the frame: copies, the same bytes.
        let copied: Vec<AppendRequest> = postcard::from_bytes(&frame).unwrap();
        assert_eq!(copied, sent);
        assert!(copied.iter().all(|r| !within(&frame, &r.records)));
        let other = Bytes::from(postcard::to_stdvec(&sent).unwrap());
        let elsewhere: Vec<AppendRequest> =
            decode_in_frame(&frame, || postcard::from_bytes(&other).unwrap());
        assert_eq!(elsewhere, sent);
        assert!(elsewhere.iter().all(|r| !within(&frame, &r.records)));
        assert!(
            FRAME.with(|f| f.borrow().is_none()),
            "the thread's frame is put back"
        );
    }

    #[test]
    fn records_decode_from_json_as_before() {
        let sent = request(b"abc");
        let json = serde_json::to_string(&sent).unwrap();
        assert_eq!(serde_json::from_str::<AppendRequest>(&json).unwrap(), sent);
    }
}
