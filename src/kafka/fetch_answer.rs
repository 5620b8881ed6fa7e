//! A Fetch answer (versions 4 to 12) encoded as pieces: the fields between the records in
//! buffers of their own, each partition's records as the pieces they are (a Kafka producer's
//! batch as it lies in its segment, but for the 16 bytes that carry its offset and leader
//! epoch), so that records are never copied into the answer. Field by field as Kafka's
//! `FetchResponse` schema lays them out (big-endian integers; from version 12 compact arrays,
//! strings and bytes with unsigned varint lengths + 1, and tagged fields):
//!
//! ```text
//! i32 length | i32 correlation id | [v12: tags] | i32 throttle_time_ms
//! | [v7+: i16 error_code, i32 session_id] | array of topics:
//!   string topic (an i16 length before v12) | array of partitions:
//!     i32 partition_index | i16 error_code | i64 high_watermark | i64 last_stable_offset
//!     | [v5+: i64 log_start_offset] | nullable array aborted_transactions (always empty here)
//!     | [v11+: i32 preferred_read_replica] | nullable bytes records
//!     | [v12: tags: 1 current_leader (i32 leader_id, i32 leader_epoch, tags) when known]
//!   | [v12: tags] | [v12: tags]
//! ```
//!
//! `a_fetch_answer_in_pieces_is_the_one_kafkas_encoder_writes` checks it byte for byte against
//! the `kafka-protocol` crate's encoder at every version served.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::FetchResponse;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, LeaderIdAndEpoch, PartitionData, SnapshotId,
};

use super::frame::Frame;

/// Kafka's unsigned varint.
fn put_uvarint(out: &mut BytesMut, mut v: u64) {
    // At most 10 turns.
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// An array's or a string's length: compact (`n + 1` as a varint) from version 12.
fn put_len(out: &mut BytesMut, flexible: bool, n: usize) {
    if flexible {
        put_uvarint(out, n as u64 + 1);
    } else {
        out.put_i32(i32::try_from(n).unwrap_or(i32::MAX));
    }
}

/// The answer to a Fetch of `version` whose partitions (in `response`'s order) hold the record
/// pieces `records`; `response`'s own `records` fields are not read. Errors on what this
/// encoder does not write (aborted transactions, diverging epochs, snapshot ids), which the
/// listener never answers.
pub(super) fn encode(
    correlation_id: i32,
    version: i16,
    response: &FetchResponse,
    records: Vec<Vec<Bytes>>,
) -> Result<Frame, String> {
    let flexible = version >= 12;
    let mut frame = Frame::default();
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(correlation_id);
    if flexible {
        put_uvarint(&mut out, 0);
    }
    out.put_i32(response.throttle_time_ms);
    if version >= 7 {
        out.put_i16(response.error_code);
        out.put_i32(response.session_id);
    }
    put_len(&mut out, flexible, response.responses.len());
    let mut records = records.into_iter();
    for topic in &response.responses {
        // A string's length is an i16 before version 12.
        if flexible {
            put_uvarint(&mut out, topic.topic.len() as u64 + 1);
        } else {
            out.put_i16(i16::try_from(topic.topic.len()).unwrap_or(i16::MAX));
        }
        out.put_slice(topic.topic.as_bytes());
        put_len(&mut out, flexible, topic.partitions.len());
        for p in &topic.partitions {
            let pieces = records.next().unwrap_or_default();
            partition(&mut out, version, p, &pieces)?;
            frame.push(out.split().freeze());
            for piece in pieces {
                frame.push(piece);
            }
            partition_tags(&mut out, version, p);
        }
        if flexible {
            put_uvarint(&mut out, 0);
        }
    }
    if flexible {
        put_uvarint(&mut out, 0);
    }
    frame.push(out.freeze());
    let len = i32::try_from(bytes::Buf::remaining(&frame))
        .map_err(|_| "an answer over 2 GiB".to_string())?;
    // Kafka's framing is big-endian: `BufMut` writes it.
    let mut prefix = BytesMut::with_capacity(4);
    prefix.put_i32(len);
    frame.push_front(prefix.freeze());
    Ok(frame)
}

/// A partition's fields up to and including its records' length.
fn partition(
    out: &mut BytesMut,
    version: i16,
    p: &PartitionData,
    records: &[Bytes],
) -> Result<(), String> {
    let flexible = version >= 12;
    if p.diverging_epoch != EpochEndOffset::default() || p.snapshot_id != SnapshotId::default() {
        return Err("a diverging epoch or snapshot id is not encoded here".into());
    }
    out.put_i32(p.partition_index);
    out.put_i16(p.error_code);
    out.put_i64(p.high_watermark);
    out.put_i64(p.last_stable_offset);
    if version >= 5 {
        out.put_i64(p.log_start_offset);
    }
    match &p.aborted_transactions {
        None if flexible => put_uvarint(out, 0),
        None => out.put_i32(-1),
        Some(aborted) if aborted.is_empty() => put_len(out, flexible, 0),
        Some(_) => return Err("aborted transactions are not encoded here".into()),
    }
    if version >= 11 {
        out.put_i32(p.preferred_read_replica.0);
    }
    let len: usize = records.iter().map(Bytes::len).sum();
    match &p.records {
        None if flexible => put_uvarint(out, 0),
        None => out.put_i32(-1),
        Some(_) => put_len(out, flexible, len),
    }
    Ok(())
}

/// A partition's tagged fields (from version 12): its current leader, when known.
fn partition_tags(out: &mut BytesMut, version: i16, p: &PartitionData) {
    if version < 12 {
        return;
    }
    if p.current_leader == LeaderIdAndEpoch::default() {
        put_uvarint(out, 0);
        return;
    }
    put_uvarint(out, 1); // one tagged field
    put_uvarint(out, 1); // tag 1: current_leader
    put_uvarint(out, 9); // its size: two i32 and its own (empty) tags
    out.put_i32(p.current_leader.leader_id.0);
    out.put_i32(p.current_leader.leader_epoch);
    put_uvarint(out, 0);
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
    use kafka_protocol::messages::{ApiKey, BrokerId, ResponseHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn partition(index: i32, error: i16, leader: Option<(i32, i32)>) -> PartitionData {
        let mut p = PartitionData::default();
        p.partition_index = index;
        p.error_code = error;
        p.high_watermark = 1_000 + i64::from(index);
        p.last_stable_offset = p.high_watermark;
        p.log_start_offset = 7;
        p.preferred_read_replica = BrokerId(-1);
        if let Some((id, epoch)) = leader {
            p.current_leader.leader_id = BrokerId(id);
            p.current_leader.leader_epoch = epoch;
        }
        p
    }

    #[test]
    fn a_fetch_answer_in_pieces_is_the_one_kafkas_encoder_writes() {
        let mut response = FetchResponse::default();
        let mut a = FetchableTopicResponse::default();
        a.topic = TopicName(StrBytes::from_static_str("email.send"));
        a.partitions = vec![
            partition(0, 0, None),
            partition(1, 6, Some((3, 9))),
            partition(2, 0, None),
        ];
        let mut b = FetchableTopicResponse::default();
        b.topic = TopicName(StrBytes::from_static_str("b"));
        b.partitions = vec![partition(0, 1, None)];
        response.responses = vec![a, b];
        let pieces: Vec<Vec<Bytes>> = vec![
            vec![Bytes::from_static(b"head"), Bytes::from(vec![5u8; 300])],
            vec![],
            vec![Bytes::from(vec![9u8; 20_000])],
            vec![],
        ];
        for version in [4, 5, 7, 11, 12] {
            let mut whole = response.clone();
            let mut joined = pieces.iter().map(|p| p.concat());
            for t in &mut whole.responses {
                for p in &mut t.partitions {
                    p.records = Some(Bytes::from(joined.next().unwrap()));
                    if version < 12 {
                        p.current_leader = LeaderIdAndEpoch::default();
                    }
                }
            }
            let mut expected = BytesMut::new();
            let mut header = ResponseHeader::default();
            header.correlation_id = 77;
            let header_version = ApiKey::Fetch.response_header_version(version);
            header.encode(&mut expected, header_version).unwrap();
            whole.encode(&mut expected, version).unwrap();
            let frame = encode(77, version, &whole, pieces.clone()).unwrap();
            let got = frame.joined();
            let at = got[4..].iter().zip(&expected[..]).position(|(a, b)| a != b);
            assert_eq!(
                (got.len() - 4, at),
                (expected.len(), None),
                "version {version}: first difference"
            );
            assert_eq!(bytes::Buf::get_i32(&mut &got[..4]), expected.len() as i32);
        }
    }
}
