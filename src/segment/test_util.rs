//! Helpers shared by the unit tests of the record, frame and batch codecs (`record.rs`,
//! `frame.rs`, `batch.rs`): sample records, and frames encoded from them.

use crate::segment::format::{EntryKind, FRAME_CRC_POS, FRAME_LOG_INDEX_POS, PayloadFormat};
use crate::segment::frame::{FrameHeader, Limits, Payload, body_len_for, encode_frame};
use crate::segment::record::Record;

/// The limits the tests encode and decode with.
pub(super) const LIMITS: Limits = Limits {
    record_bytes_max: 1024,
    batch_bytes_max: 64 * 1024,
};

/// A data frame's header for `records`, without a producer.
pub(super) fn header_for(records: &[Record], log_index: u64, base_offset: u64) -> FrameHeader {
    let payload_len: usize = records
        .iter()
        .map(|r| r.encoded_len(LIMITS.record_bytes_max).unwrap())
        .sum();
    FrameHeader {
        body_len: body_len_for(payload_len, &LIMITS).unwrap(),
        log_index,
        term: 3,
        base_offset,
        record_count: u32::try_from(records.len()).unwrap(),
        kind: EntryKind::Data,
        format: PayloadFormat::Replog,
        compacted: false,
        entries: 1,
        timestamp_ms: 1_700_000_000_000,
        producer_id: 0,
        producer_epoch: 0,
        base_sequence: 0,
    }
}

/// `records` as a whole frame (log index 5, base offset 10), with its header.
pub(super) fn encode(records: &[Record]) -> (FrameHeader, Vec<u8>) {
    let h = header_for(records, 5, 10);
    let mut buf = vec![0u8; h.frame_len()];
    let n = encode_frame(&mut buf, &h, &Payload::Records(records));
    assert_eq!(n, buf.len());
    (h, buf)
}

/// Records of every shape: with and without a key (empty or not), headers, an empty value.
pub(super) fn sample() -> Vec<Record> {
    vec![
        Record::new("v1"),
        Record::new("").with_key(""),
        Record::new(vec![7u8; 100])
            .with_key("k")
            .with_header("h1", "x")
            .with_header("", ""),
    ]
}

/// Re-seals a hand-edited frame with a correct CRC, so later checks are reached.
pub(super) fn reseal(buf: &mut [u8]) {
    let crc = crc32fast::hash(&buf[FRAME_LOG_INDEX_POS..]);
    buf[FRAME_CRC_POS..FRAME_CRC_POS + 4].copy_from_slice(&crc.to_le_bytes());
}
