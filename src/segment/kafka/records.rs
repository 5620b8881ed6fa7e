//! The records inside a Kafka batch (FORMAT.md §4.2): [`walk_records`], the one pass that
//! checks each record (its varint length and fields, offset deltas, header keys, its size as
//! replog's record) and hands out a [`RecordView`] of it where it lies, and the varint and
//! length-prefixed field readers beneath it. Nothing allocated, no panics on any input.

use super::{KafkaBatchInfo, RECORD_LEN_MIN, bad};
use crate::error::CorruptKind;
use crate::segment::format::{RECORD_FIXED_LEN, RECORD_HEADER_FIXED_LEN};
use crate::segment::frame::Limits;

/// One record of a batch, its fields where they lie in the records' bytes.
pub(super) struct RecordView<'a> {
    /// The record's whole bytes, its length first, as stored.
    pub(super) raw: &'a [u8],
    /// The record's offset less the batch's base offset.
    pub(super) offset_delta: u32,
    /// The record's timestamp less the batch's base timestamp.
    pub(super) timestamp_delta: i64,
    pub(super) key: Option<&'a [u8]>,
    pub(super) value: Option<&'a [u8]>,
    /// The headers' bytes after their count, which [`walk_records`] checked.
    headers: &'a [u8],
    pub(super) header_count: usize,
}

impl<'a> RecordView<'a> {
    /// The headers: each a name (UTF-8) and a value (`None` for null).
    pub(super) fn headers(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + use<'a> {
        let mut rest = self.headers;
        // Checked by the walk: each turn parses a header it passed, and stops at any error.
        (0..self.header_count).map_while(move |_| {
            let name = bytes_field(&mut rest).ok()??;
            let value = bytes_field(&mut rest).ok()?;
            Some((name, value))
        })
    }
}

/// Walks the header's `record_count` records in `records` (decompressed), checking each and
/// handing it to `each`: Kafka's record format (a varint length, then the attributes, the
/// timestamp and offset deltas, key, value and headers within that length, which they must
/// fill exactly), offset deltas 0, 1, 2, … (in a compacted batch: strictly increasing, up to
/// the last offset delta), header keys UTF-8, each record's replog encoding within
/// `limits.record_bytes_max` and all of them within `limits.batch_bytes_max`; the records must
/// fill `records` exactly. One pass; nothing allocated. The count is checked against the bytes
/// before the first record.
pub(super) fn walk_records<'a>(
    records: &'a [u8],
    info: &KafkaBatchInfo,
    compacted: bool,
    limits: &Limits,
    mut each: impl FnMut(RecordView<'a>),
) -> Result<(), CorruptKind> {
    let count = info.record_count as usize;
    if count.saturating_mul(RECORD_LEN_MIN) > records.len() {
        return Err(bad("more records than the batch has bytes for"));
    }
    let too_large = |len: u64| CorruptKind::LengthOutOfRange {
        len,
        max: u64::from(limits.record_bytes_max),
    };
    let mut rest = records;
    let mut total = 0u64;
    let mut next_delta = 0i64;
    for _ in 0..count {
        let start = rest;
        let len =
            usize::try_from(varint(&mut rest, 5)?).map_err(|_| bad("a negative record length"))?;
        let mut r = take(&mut rest, len).ok_or_else(|| bad("a record runs past the batch"))?;
        let raw = start.get(..start.len() - rest.len()).unwrap_or_default();
        let _attributes = take(&mut r, 1).ok_or_else(|| bad("an empty record"))?;
        let timestamp_delta = varint(&mut r, 10)?;
        let offset_delta = varint(&mut r, 5)?;
        let in_order = if compacted {
            offset_delta >= next_delta && offset_delta <= i64::from(info.last_offset_delta)
        } else {
            offset_delta == next_delta
        };
        if !in_order {
            return Err(bad("offset deltas are not 0, 1, 2, ..."));
        }
        next_delta = offset_delta + 1;
        let offset_delta = u32::try_from(offset_delta).map_err(|_| bad("offset delta"))?;
        let key = bytes_field(&mut r)?;
        let value = bytes_field(&mut r)?;
        let header_count =
            usize::try_from(varint(&mut r, 5)?).map_err(|_| bad("a negative header count"))?;
        // A header takes two bytes at least (two lengths).
        if header_count.saturating_mul(2) > r.len() {
            return Err(bad("more headers than the record has bytes for"));
        }
        if u16::try_from(header_count).is_err() {
            return Err(too_large(u64::MAX));
        }
        let headers = r;
        // The record's length as replog encodes it (`Record::encoded_len`).
        let mut encoded =
            (RECORD_FIXED_LEN + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)) as u64;
        for _ in 0..header_count {
            let name = bytes_field(&mut r)?.ok_or_else(|| bad("a null header key"))?;
            if std::str::from_utf8(name).is_err() {
                return Err(bad("a header key that is not UTF-8"));
            }
            if u16::try_from(name.len()).is_err() {
                return Err(too_large(u64::MAX));
            }
            let value = bytes_field(&mut r)?;
            encoded += (RECORD_HEADER_FIXED_LEN + name.len() + value.map_or(0, <[u8]>::len)) as u64;
        }
        if !r.is_empty() {
            return Err(bad("bytes after a record's headers"));
        }
        if encoded > u64::from(limits.record_bytes_max) {
            return Err(too_large(encoded));
        }
        total = total.saturating_add(encoded);
        if total > u64::from(limits.batch_bytes_max) {
            return Err(CorruptKind::LengthOutOfRange {
                len: total,
                max: u64::from(limits.batch_bytes_max),
            });
        }
        each(RecordView {
            raw,
            offset_delta,
            timestamp_delta,
            key,
            value,
            headers,
            header_count,
        });
    }
    if !rest.is_empty() {
        return Err(bad("bytes after the last record"));
    }
    Ok(())
}

/// The first `len` bytes of `buf`, which moves past them; `None` if it has fewer.
fn take<'a>(buf: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    if len > buf.len() {
        return None;
    }
    let (head, tail) = buf.split_at(len);
    *buf = tail;
    Some(head)
}

/// Kafka's zigzag varint of at most `max_bytes` bytes (5 for an int, 10 for a long).
fn varint(buf: &mut &[u8], max_bytes: u32) -> Result<i64, CorruptKind> {
    let mut raw = 0u64;
    for i in 0..max_bytes {
        let [byte, rest @ ..] = *buf else {
            return Err(bad("a varint runs past the record"));
        };
        *buf = rest;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            // Zigzag: 0, -1, 1, -2, … as 0, 1, 2, 3, …
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(bad("a varint is too long"))
}

/// A length-prefixed field: `None` for Kafka's null (-1); any other negative length, or one
/// past the bytes left, is an error.
fn bytes_field<'a>(buf: &mut &'a [u8]) -> Result<Option<&'a [u8]>, CorruptKind> {
    match varint(buf, 5)? {
        -1 => Ok(None),
        len => {
            let len = usize::try_from(len).map_err(|_| bad("a negative length"))?;
            take(buf, len)
                .map(Some)
                .ok_or_else(|| bad("a field runs past the record"))
        }
    }
}

#[cfg(test)]
mod tests;
