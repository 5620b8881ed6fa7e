//! replog's record codec (FORMAT.md §4.1, §4.3): [`Record`] and its encoding into a batch
//! payload, [`RecordRef`], one stored record read in place, and the checks a payload of records
//! passes ([`validate_records`], [`validate_compacted_records`]) before anything reads it. Pure
//! functions over byte slices, no I/O.
//!
//! The checks bound every length before slicing and never panic for any input (the
//! `record_decode` fuzz target holds them to that, through
//! [`decode_frame`](crate::segment::frame::decode_frame)). The frame around a payload is
//! `frame.rs`'s; the batches a log hands out are `batch.rs`'s.

use bytes::Bytes;

use crate::error::{CorruptKind, Error};
use crate::segment::batch::Batch;
use crate::segment::format::{
    NULL_KEY_LEN, RECORD_FIXED_LEN, RECORD_HEADER_COUNT_POS, RECORD_HEADER_FIXED_LEN,
    RECORD_KEY_LEN_POS, RECORD_VALUE_LEN_POS, get_u16, get_u32, put,
};
use crate::segment::frame::Limits;

/// One user record: an optional key, a value and optional headers.
///
/// The byte fields are [`Bytes`], so records read from a log share the segment's memory map
/// instead of copying it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The key, if any. `None` and an empty key are different values.
    pub key: Option<Bytes>,
    /// The value.
    pub value: Bytes,
    /// Application headers, in order. Names are bytes; replog does not interpret them.
    pub headers: Vec<Header>,
}

/// One record header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Header name (at most `u16::MAX` bytes).
    pub name: Bytes,
    /// Header value.
    pub value: Bytes,
}

impl Record {
    /// A record with only a value.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Record {
            key: None,
            value: value.into(),
            headers: Vec::new(),
        }
    }

    /// Sets the key.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Appends a header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.headers.push(Header {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// The number of bytes this record takes in a batch, or an error if it cannot be encoded
    /// within `record_bytes_max`.
    pub(crate) fn encoded_len(&self, record_bytes_max: u32) -> Result<usize, Error> {
        let too_large = |len: usize| Error::RecordTooLarge {
            len: u64::try_from(len).unwrap_or(u64::MAX),
            max: u64::from(record_bytes_max),
        };
        let mut len = RECORD_FIXED_LEN;
        if let Some(key) = &self.key {
            len = len.saturating_add(key.len());
        }
        len = len.saturating_add(self.value.len());
        if u16::try_from(self.headers.len()).is_err() {
            return Err(too_large(usize::MAX));
        }
        for h in &self.headers {
            if u16::try_from(h.name.len()).is_err() {
                return Err(too_large(usize::MAX));
            }
            len = len
                .saturating_add(RECORD_HEADER_FIXED_LEN)
                .saturating_add(h.name.len())
                .saturating_add(h.value.len());
        }
        if len > usize::try_from(record_bytes_max).unwrap_or(usize::MAX) {
            return Err(too_large(len));
        }
        Ok(len)
    }

    /// Writes the record at the start of `dst` and returns the bytes written. `dst` must hold
    /// [`Record::encoded_len`] bytes, which also guarantees every length fits its field.
    pub(super) fn encode(&self, dst: &mut [u8]) -> usize {
        let key_len = match &self.key {
            Some(k) => len_u32(k.len()),
            None => NULL_KEY_LEN,
        };
        put(dst, RECORD_KEY_LEN_POS, &key_len.to_le_bytes());
        put(
            dst,
            RECORD_VALUE_LEN_POS,
            &len_u32(self.value.len()).to_le_bytes(),
        );
        let header_count = u16::try_from(self.headers.len()).expect("checked by encoded_len");
        put(dst, RECORD_HEADER_COUNT_POS, &header_count.to_le_bytes());
        let mut pos = RECORD_FIXED_LEN;
        if let Some(k) = &self.key {
            put(dst, pos, k);
            pos += k.len();
        }
        put(dst, pos, &self.value);
        pos += self.value.len();
        for h in &self.headers {
            let name_len = u16::try_from(h.name.len()).expect("checked by encoded_len");
            put(dst, pos, &name_len.to_le_bytes());
            put(dst, pos + 2, &len_u32(h.value.len()).to_le_bytes());
            pos += RECORD_HEADER_FIXED_LEN;
            put(dst, pos, &h.name);
            pos += h.name.len();
            put(dst, pos, &h.value);
            pos += h.value.len();
        }
        pos
    }
}

/// Encodes `records` into a batch payload (what a data frame carries after its header), as a
/// producer sends it. Returns the payload and its record count.
pub(crate) fn encode_records(
    records: &[Record],
    record_bytes_max: u32,
) -> Result<(Bytes, u32), Error> {
    let mut len = 0usize;
    for r in records {
        len = len.saturating_add(r.encoded_len(record_bytes_max)?);
    }
    let count = u32::try_from(records.len()).map_err(|_| Error::BatchTooLarge {
        len: len as u64,
        max: u64::from(u32::MAX),
    })?;
    let mut payload = vec![0u8; len];
    let mut pos = 0;
    for r in records {
        pos += r.encode(payload.get_mut(pos..).unwrap_or_default());
    }
    debug_assert_eq!(pos, len);
    Ok((Bytes::from(payload), count))
}

/// Encodes records with their offset deltas as a compacted frame's payload (FORMAT.md §4.3):
/// each record after its delta. The deltas must increase; the caller's records passed
/// [`Record::encoded_len`] when they were first written.
pub(crate) fn encode_compacted_records(records: &[(u32, Record)]) -> Result<Bytes, Error> {
    let mut len = 0usize;
    for (_, r) in records {
        len = len.saturating_add(OFFSET_DELTA_LEN + r.encoded_len(u32::MAX)?);
    }
    let mut payload = vec![0u8; len];
    let mut pos = 0;
    for (delta, r) in records {
        put(&mut payload, pos, &delta.to_le_bytes());
        pos += OFFSET_DELTA_LEN;
        pos += r.encode(payload.get_mut(pos..).unwrap_or_default());
    }
    debug_assert_eq!(pos, len);
    Ok(Bytes::from(payload))
}

/// The payload of replog's records `batch` holds (compacted or not) with only the records
/// `keep` chooses (given each one's offset delta and key), as a compacted frame's payload
/// (FORMAT.md §4.3): each kept record's bytes as stored, after its offset delta. `None` when
/// every record is kept and the batch was not compacted before (nothing to rewrite).
pub(crate) fn compact_replog_payload(
    batch: &Batch,
    mut keep: impl FnMut(u32, Option<&[u8]>, &[u8]) -> bool,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut dropped = false;
    let mut pos = 0usize;
    let payload = &batch.payload[..];
    for i in 0..batch.record_count {
        if pos >= payload.len() {
            break;
        }
        let delta = if batch.compacted {
            let delta = get_u32(payload, pos)?;
            pos += OFFSET_DELTA_LEN;
            delta
        } else {
            i
        };
        let start = pos;
        let record = RecordRef::read(payload, &mut pos)?;
        if keep(delta, record.key, record.value) {
            out.extend_from_slice(&delta.to_le_bytes());
            out.extend_from_slice(payload.get(start..pos)?);
        } else {
            dropped = true;
        }
    }
    dropped.then_some(out)
}

/// Converts a length that `encoded_len` already bounded by a `u32` limit.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("lengths are bounded by record_bytes_max, a u32")
}

/// Checks a compacted frame's replog payload (FORMAT.md §4.3): records, each after a `u32`
/// offset delta, the deltas strictly increasing and below `span` (the frame's
/// `record_count`), each record within `record_bytes_max`, filling the payload exactly. Empty
/// is valid: compaction removed every record. The work is bounded by `payload.len()`.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn validate_compacted_records(
    payload: &[u8],
    span: u32,
    limits: &Limits,
) -> Result<(), CorruptKind> {
    if span == 0 {
        return Err(CorruptKind::BadRecord);
    }
    let mut pos = 0usize;
    let mut next_delta = 0u64;
    while pos < payload.len() {
        let delta = get_u32(payload, pos).ok_or(CorruptKind::BadRecord)?;
        if u64::from(delta) < next_delta || delta >= span {
            return Err(CorruptKind::BadRecord);
        }
        next_delta = u64::from(delta) + 1;
        pos += OFFSET_DELTA_LEN;
        pos = record_end(payload, pos, limits)?;
    }
    Ok(())
}

/// Bytes of the offset delta before each record of a compacted replog payload.
pub(crate) const OFFSET_DELTA_LEN: usize = size_of::<u32>();

/// Checks that `payload` holds exactly `count` (≥ 1) well-formed records, each within
/// `record_bytes_max`. The work is bounded by `payload.len()`, whatever `count` claims.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn validate_records(
    payload: &[u8],
    count: u32,
    limits: &Limits,
) -> Result<(), CorruptKind> {
    if count == 0 {
        return Err(CorruptKind::BadRecord);
    }
    let mut pos = 0usize;
    for _ in 0..count {
        pos = record_end(payload, pos, limits)?;
    }
    if pos != payload.len() {
        return Err(CorruptKind::BadRecord);
    }
    Ok(())
}

/// Where the record at `payload[pos..]` ends, checking that it fits in `payload` and within
/// `record_bytes_max`.
fn record_end(payload: &[u8], pos: usize, limits: &Limits) -> Result<usize, CorruptKind> {
    let len = record_len_at(payload, pos)?;
    if len > u64::from(limits.record_bytes_max) {
        return Err(CorruptKind::LengthOutOfRange {
            len,
            max: u64::from(limits.record_bytes_max),
        });
    }
    let end = pos
        .checked_add(usize::try_from(len).map_err(|_| CorruptKind::BadRecord)?)
        .ok_or(CorruptKind::BadRecord)?;
    if end > payload.len() {
        return Err(CorruptKind::BadRecord);
    }
    Ok(end)
}

/// The encoded length of the record at `payload[pos..]`, checking that it fits in `payload`.
fn record_len_at(payload: &[u8], pos: usize) -> Result<u64, CorruptKind> {
    let rec = payload.get(pos..).ok_or(CorruptKind::BadRecord)?;
    let key_len = get_u32(rec, RECORD_KEY_LEN_POS).ok_or(CorruptKind::BadRecord)?;
    let value_len = get_u32(rec, RECORD_VALUE_LEN_POS).ok_or(CorruptKind::BadRecord)?;
    let header_count = get_u16(rec, RECORD_HEADER_COUNT_POS).ok_or(CorruptKind::BadRecord)?;
    let key_len = if key_len == NULL_KEY_LEN {
        0
    } else {
        u64::from(key_len)
    };
    let mut len = RECORD_FIXED_LEN as u64 + key_len + u64::from(value_len);
    let rec_len = rec.len() as u64;
    for _ in 0..header_count {
        if len > rec_len {
            return Err(CorruptKind::BadRecord);
        }
        let hpos = usize::try_from(len).map_err(|_| CorruptKind::BadRecord)?;
        let name_len = get_u16(rec, hpos).ok_or(CorruptKind::BadRecord)?;
        let val_len = get_u32(rec, hpos + 2).ok_or(CorruptKind::BadRecord)?;
        len += RECORD_HEADER_FIXED_LEN as u64 + u64::from(name_len) + u64::from(val_len);
    }
    if len > rec_len {
        return Err(CorruptKind::BadRecord);
    }
    Ok(len)
}

/// A record of a replog payload read in place: its key, value and headers borrow the payload
/// (no reference taken on it, nothing allocated). Layout: FORMAT.md §4.1.
#[derive(Clone, Copy)]
pub(crate) struct RecordRef<'a> {
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: &'a [u8],
    /// The headers' bytes, `header_count` of them one after the other.
    headers: &'a [u8],
    header_count: u16,
}

impl<'a> RecordRef<'a> {
    /// Reads the record at `*pos` of `payload`, advancing `*pos`; `None` if it does not fit.
    pub(crate) fn read(payload: &'a [u8], pos: &mut usize) -> Option<RecordRef<'a>> {
        let rec = payload.get(*pos..)?;
        let key_len = get_u32(rec, RECORD_KEY_LEN_POS)?;
        let value_len = usize::try_from(get_u32(rec, RECORD_VALUE_LEN_POS)?).ok()?;
        let header_count = get_u16(rec, RECORD_HEADER_COUNT_POS)?;
        let mut p = RECORD_FIXED_LEN;
        let mut take = |n: usize| -> Option<&'a [u8]> {
            let bytes = rec.get(p..p.checked_add(n)?)?;
            p += n;
            Some(bytes)
        };
        let key = if key_len == NULL_KEY_LEN {
            None
        } else {
            Some(take(usize::try_from(key_len).ok()?)?)
        };
        let value = take(value_len)?;
        let headers_start = p;
        for _ in 0..header_count {
            let name_len = usize::from(get_u16(rec, p)?);
            let val_len = usize::try_from(get_u32(rec, p + 2)?).ok()?;
            p = p
                .checked_add(RECORD_HEADER_FIXED_LEN + name_len)?
                .checked_add(val_len)?;
        }
        let headers = rec.get(headers_start..p)?;
        *pos += p;
        Some(RecordRef {
            key,
            value,
            headers,
            header_count,
        })
    }

    /// Its headers, each a name and a value.
    pub(crate) fn headers(self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + 'a {
        let bytes = self.headers;
        let mut p = 0usize;
        (0..self.header_count).map_while(move |_| {
            let name_len = usize::from(get_u16(bytes, p)?);
            let val_len = usize::try_from(get_u32(bytes, p + 2)?).ok()?;
            let name_at = p + RECORD_HEADER_FIXED_LEN;
            let name = bytes.get(name_at..name_at + name_len)?;
            let value = bytes.get(name_at + name_len..name_at + name_len + val_len)?;
            p = name_at + name_len + val_len;
            Some((name, value))
        })
    }
}

#[cfg(test)]
mod tests;
