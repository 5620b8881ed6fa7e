//! Gap frames (FORMAT.md §4.3): a run of data entries of one term that compaction emptied,
//! stored as one frame that stands for all of them.
//!
//! A log of small batches whose keys are rewritten often (a group's committed offsets, a
//! changelog) compacts to mostly empty frames, each still 64 bytes of header because Raft
//! needs every entry's log id. A gap frame keeps what Raft and the offsets need of each of
//! them in a byte or two: the frame header carries the first entry's log index and base
//! offset, the term they share and the last one's time; the payload says how many entries
//! there were and how many offsets each spanned, so that the entries can be handed out again
//! one by one, each as it was (empty), and every replica appends them at the same offsets.
//!
//! Payload, little-endian:
//!
//! ```text
//! offset  size  field
//! 0       8     entries: u64   the log entries the frame stands for, >= 1
//! 8       ..    spans          `entries` unsigned LEB128 varints of at most 5 bytes, each
//!                              >= 1 and <= u32::MAX: the offsets each entry spanned, in
//!                              order; they add up to the frame's record_count
//! ```
//!
//! The frame's `kind` is 3, its flags 0 (a gap frame is always in replog's format, and
//! compacted by definition), its producer fields 0: an idempotent producer's last batch in a
//! compacted range never joins a gap, since a replica learns the producer's last sequence
//! from it.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CorruptKind;

/// Length of a gap payload's entry count.
const COUNT_LEN: usize = size_of::<u64>();

/// The most bytes one span takes (a `u32` in 7-bit groups).
const SPAN_MAX_LEN: usize = 5;

/// The most entries compaction puts in one gap frame, which bounds its payload (at most
/// 8 + 5 × 16,384 bytes, about 80 KiB; 16 KiB for spans under 128 offsets) and the entries one
/// read of the Raft log expands it into.
pub(crate) const GAP_ENTRIES_MAX: u64 = 16_384;

/// The payload of a gap frame for entries of `spans` offsets each.
pub(crate) fn encode(spans: &[u32]) -> Bytes {
    let mut out = BytesMut::with_capacity(COUNT_LEN + spans.len() * 2);
    out.put_u64_le(spans.len() as u64);
    for &span in spans {
        let mut v = span;
        // At most five turns: seven bits each of a u32.
        while v >= 0x80 {
            out.put_u8((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.put_u8(v as u8);
    }
    out.freeze()
}

/// The offsets each entry of a gap frame spanned, from its payload, checked: as many as the
/// count says, each at least one, adding up to `record_count`, nothing after them.
pub(crate) fn spans(payload: &[u8], record_count: u32) -> Result<Vec<u32>, CorruptKind> {
    let (count, mut rest) = payload
        .split_first_chunk::<COUNT_LEN>()
        .ok_or(CorruptKind::BadRecord)?;
    let count = u64::from_le_bytes(*count);
    // Each span takes a byte at least: a count the payload cannot hold is refused before
    // anything is allocated for it.
    if count == 0 || count > rest.len() as u64 {
        return Err(CorruptKind::BadRecord);
    }
    let mut spans = Vec::with_capacity(count as usize);
    let mut total = 0u64;
    for _ in 0..count {
        let span = uvarint(&mut rest).ok_or(CorruptKind::BadRecord)?;
        if span == 0 {
            return Err(CorruptKind::BadRecord);
        }
        total += u64::from(span);
        spans.push(span);
    }
    if !rest.is_empty() || total != u64::from(record_count) {
        return Err(CorruptKind::BadRecord);
    }
    Ok(spans)
}

/// The entry count of a gap payload checked by [`spans`].
pub(crate) fn entries(payload: &[u8], record_count: u32) -> Result<u64, CorruptKind> {
    spans(payload, record_count).map(|s| s.len() as u64)
}

/// An unsigned LEB128 varint of at most five bytes that fits a `u32`; `buf` moves past it.
fn uvarint(buf: &mut &[u8]) -> Option<u32> {
    let mut v = 0u64;
    for i in 0..SPAN_MAX_LEN {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return u32::try_from(v).ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refuses_what_a_gap_payload_cannot_be() {
        let ok = encode(&[1, 300, 2]);
        assert_eq!(spans(&ok, 303), Ok(vec![1, 300, 2]));
        // The spans add up to something else.
        assert_eq!(spans(&ok, 304), Err(CorruptKind::BadRecord));
        // Bytes after the spans, a span cut off, no count, zero entries, a zero span.
        let mut longer = ok.to_vec();
        longer.push(1);
        assert_eq!(spans(&longer, 304), Err(CorruptKind::BadRecord));
        assert_eq!(spans(&ok[..ok.len() - 2], 303), Err(CorruptKind::BadRecord));
        assert_eq!(spans(&ok[..4], 303), Err(CorruptKind::BadRecord));
        assert_eq!(spans(&encode(&[]), 0), Err(CorruptKind::BadRecord));
        assert_eq!(spans(&encode(&[0]), 0), Err(CorruptKind::BadRecord));
        // A count of 2^64 - 1 with one byte after it allocates nothing.
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.push(1);
        assert_eq!(spans(&huge, 1), Err(CorruptKind::BadRecord));
        // A sixth varint byte, and a five-byte varint past u32::MAX.
        let mut long = 1u64.to_le_bytes().to_vec();
        long.extend([0x81, 0x80, 0x80, 0x80, 0x80, 0x00]);
        assert_eq!(spans(&long, 1), Err(CorruptKind::BadRecord));
        let mut big = 1u64.to_le_bytes().to_vec();
        big.extend([0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert_eq!(spans(&big, u32::MAX), Err(CorruptKind::BadRecord));
    }

    proptest! {
        #[test]
        fn spans_read_back_as_written(
            s in proptest::collection::vec(prop_oneof![1u32..300, 1..=u32::MAX / 64], 1..64),
        ) {
            let total: u64 = s.iter().map(|&x| u64::from(x)).sum();
            let payload = encode(&s);
            prop_assert_eq!(spans(&payload, total as u32), Ok(s));
        }

        #[test]
        fn any_bytes_are_spans_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                           count in any::<u32>()) {
            let _ = spans(&bytes, count);
        }
    }
}
