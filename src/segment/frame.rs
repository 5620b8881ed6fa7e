//! The record-batch frame codec (FORMAT.md §4, §6): a frame's fixed header ([`FrameHeader`]),
//! the limits a decoder enforces ([`Limits`]), the encoding of a frame around its payload, and
//! [`decode_frame`], which every frame read from disk goes through. Pure functions over byte
//! slices, no I/O.
//!
//! [`decode_frame`] checks every length before slicing and never panics for any input (the
//! `record_decode` fuzz target holds it to that, through [`fuzz_decode_frame`]). It checks a
//! data frame's payload in its format ([`validate_payload`]): replog's records by `record.rs`,
//! a Kafka batch's header by `kafka.rs`. The layout is in `FORMAT.md`.

use bytes::Bytes;

use crate::error::{CorruptKind, Error};
use crate::segment::batch::Batch;
use crate::segment::format::{
    EntryKind, FRAME_BASE_OFFSET_POS, FRAME_BASE_SEQUENCE_POS, FRAME_BODY_FIXED_LEN,
    FRAME_BODY_LEN_POS, FRAME_CRC_POS, FRAME_FLAG_COMPACTED, FRAME_FLAG_KAFKA, FRAME_FLAGS_POS,
    FRAME_HEADER_LEN, FRAME_KIND_POS, FRAME_LOG_INDEX_POS, FRAME_PRODUCER_EPOCH_POS,
    FRAME_PRODUCER_ID_POS, FRAME_RECORD_COUNT_POS, FRAME_RESERVED2_POS, FRAME_TERM_POS,
    FRAME_TIMESTAMP_POS, PayloadFormat, get_u16, get_u32, get_u64, put,
};
use crate::segment::record::{Record, validate_compacted_records, validate_records};
use crate::types::{LogIndex, Offset, Term};

/// The limits a decoder enforces: `LogConfig`'s for batches arriving to be appended, the
/// format's own for bytes already on disk (so that lowering a limit never makes written data
/// unreadable).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) record_bytes_max: u32,
    pub(crate) batch_bytes_max: u32,
}

impl Limits {
    /// What the format itself allows: a `body_len` that fits its `u32`.
    pub(crate) const ON_DISK: Limits = Limits {
        record_bytes_max: u32::MAX,
        batch_bytes_max: u32::MAX - FRAME_BODY_FIXED_LEN as u32,
    };
}

/// The fixed fields of a frame, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub(crate) body_len: u32,
    pub(crate) log_index: u64,
    pub(crate) term: u64,
    pub(crate) base_offset: u64,
    pub(crate) record_count: u32,
    pub(crate) kind: EntryKind,
    /// How a data frame's payload is encoded (the `KAFKA` flag).
    pub(crate) format: PayloadFormat,
    /// Compaction removed records from the frame (the `COMPACTED` flag, FORMAT.md §4.3):
    /// `record_count` is the offsets it spans, its payload holds fewer records, each with its
    /// offset. Always set on a gap frame.
    pub(crate) compacted: bool,
    /// The log entries the frame stands for: 1, but for a gap frame (FORMAT.md §4.3).
    pub(crate) entries: u64,
    pub(crate) timestamp_ms: u64,
    /// Idempotent producer that wrote the batch; 0 for none.
    pub(crate) producer_id: u64,
    /// That producer's epoch (0 without a producer): a later epoch fences the earlier ones.
    pub(crate) producer_epoch: u16,
    /// That producer's sequence number of the batch's first record (0 without a producer).
    pub(crate) base_sequence: u32,
}

impl FrameHeader {
    /// Bytes the whole frame occupies.
    pub(crate) fn frame_len(&self) -> usize {
        FRAME_CRC_POS + size_of::<u32>() + usize::try_from(self.body_len).unwrap_or(usize::MAX)
    }

    /// The oldest segment format version that may hold this frame (FORMAT.md §9).
    pub(crate) fn min_format_version(&self) -> u16 {
        if self.kind == EntryKind::Gap {
            super::format::FORMAT_VERSION_GAP
        } else if self.compacted {
            super::format::FORMAT_VERSION_COMPACTED
        } else if self.format == PayloadFormat::Kafka {
            super::format::FORMAT_VERSION_KAFKA
        } else {
            super::format::FORMAT_VERSION_MIN
        }
    }

    /// The offset after this frame's records.
    pub(crate) fn next_offset(&self) -> u64 {
        self.base_offset
            .saturating_add(u64::from(self.record_count))
    }
}

/// What to put in a frame's payload.
pub(crate) enum Payload<'a> {
    /// User records, encoded in place.
    Records(&'a [Record]),
    /// Bytes of a control entry, or a pre-encoded and validated record payload.
    Raw(&'a [u8]),
}

/// Writes a whole frame at the start of `dst` and returns its length. The caller computed
/// `header.body_len` from the payload's encoded size ([`body_len_for`]) and sized `dst` to
/// hold `header.frame_len()` bytes.
pub(crate) fn encode_frame(dst: &mut [u8], header: &FrameHeader, payload: &Payload<'_>) -> usize {
    let frame_len = header.frame_len();
    assert!(dst.len() >= frame_len, "caller sizes dst for the frame");
    put_header_fields(dst, header);
    let mut pos = FRAME_HEADER_LEN;
    match payload {
        Payload::Records(records) => {
            for r in *records {
                pos += r.encode(dst.get_mut(pos..frame_len).expect("sized by caller"));
            }
        }
        Payload::Raw(bytes) => {
            put(dst, pos, bytes);
            pos += bytes.len();
        }
    }
    assert_eq!(
        pos, frame_len,
        "payload_len disagrees with the encoded payload"
    );
    let crc = crc32fast::hash(dst.get(FRAME_LOG_INDEX_POS..frame_len).expect("sized"));
    put(dst, FRAME_BODY_LEN_POS, &header.body_len.to_le_bytes());
    put(dst, FRAME_CRC_POS, &crc.to_le_bytes());
    frame_len
}

/// The header of the frame whose payload is `payload` (already encoded), so that the frame can
/// be written as the header followed by `payload` without copying it: the same bytes
/// [`encode_frame`] writes for `Payload::Raw(payload)`.
pub(crate) fn encode_frame_header(header: &FrameHeader, payload: &[u8]) -> [u8; FRAME_HEADER_LEN] {
    assert_eq!(
        header.frame_len(),
        FRAME_HEADER_LEN + payload.len(),
        "payload_len disagrees with the payload"
    );
    let mut dst = [0u8; FRAME_HEADER_LEN];
    put_header_fields(&mut dst, header);
    let mut crc = crc32fast::Hasher::new();
    crc.update(dst.get(FRAME_LOG_INDEX_POS..).expect("sized"));
    crc.update(payload);
    put(&mut dst, FRAME_BODY_LEN_POS, &header.body_len.to_le_bytes());
    put(&mut dst, FRAME_CRC_POS, &crc.finalize().to_le_bytes());
    dst
}

/// Writes every header field but `body_len` and the CRC (FORMAT.md §4).
fn put_header_fields(dst: &mut [u8], header: &FrameHeader) {
    put(dst, FRAME_LOG_INDEX_POS, &header.log_index.to_le_bytes());
    put(dst, FRAME_TERM_POS, &header.term.to_le_bytes());
    put(
        dst,
        FRAME_BASE_OFFSET_POS,
        &header.base_offset.to_le_bytes(),
    );
    put(
        dst,
        FRAME_RECORD_COUNT_POS,
        &header.record_count.to_le_bytes(),
    );
    put(dst, FRAME_KIND_POS, &[header.kind as u8]);
    let mut flags = match header.format {
        PayloadFormat::Replog => 0,
        PayloadFormat::Kafka => FRAME_FLAG_KAFKA,
    };
    if header.compacted && header.kind == EntryKind::Data {
        flags |= FRAME_FLAG_COMPACTED;
    }
    put(dst, FRAME_FLAGS_POS, &[flags]);
    put(
        dst,
        FRAME_PRODUCER_EPOCH_POS,
        &header.producer_epoch.to_le_bytes(),
    );
    put(dst, FRAME_TIMESTAMP_POS, &header.timestamp_ms.to_le_bytes());
    put(
        dst,
        FRAME_PRODUCER_ID_POS,
        &header.producer_id.to_le_bytes(),
    );
    put(
        dst,
        FRAME_BASE_SEQUENCE_POS,
        &header.base_sequence.to_le_bytes(),
    );
    put(dst, FRAME_RESERVED2_POS, &0u32.to_le_bytes());
}

/// The `body_len` of a frame with a payload of `payload_len` bytes, if it is within limits.
pub(crate) fn body_len_for(payload_len: usize, limits: &Limits) -> Result<u32, Error> {
    if payload_len > usize::try_from(limits.batch_bytes_max).unwrap_or(usize::MAX) {
        return Err(Error::BatchTooLarge {
            len: u64::try_from(payload_len).unwrap_or(u64::MAX),
            max: u64::from(limits.batch_bytes_max),
        });
    }
    let body = payload_len + FRAME_BODY_FIXED_LEN;
    u32::try_from(body).map_err(|_| Error::BatchTooLarge {
        len: u64::try_from(payload_len).unwrap_or(u64::MAX),
        max: u64::from(limits.batch_bytes_max),
    })
}

/// Decodes and validates the frame at `data[pos..]` (FORMAT.md §6, steps 1–5 and 7, and step 6's
/// overflow rule; the caller checks step 6's continuity rules). `Ok(None)` means a zero
/// `body_len`: the end of written data.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn decode_frame(
    data: &[u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<FrameHeader>, CorruptKind> {
    let rest = data.get(pos..).ok_or(CorruptKind::Truncated)?;
    let body_len = get_u32(rest, FRAME_BODY_LEN_POS).ok_or(CorruptKind::Truncated)?;
    if body_len == 0 {
        return Ok(None);
    }
    let body_max = u64::from(limits.batch_bytes_max) + FRAME_BODY_FIXED_LEN as u64;
    if u64::from(body_len) > body_max || (body_len as usize) < FRAME_BODY_FIXED_LEN {
        return Err(CorruptKind::LengthOutOfRange {
            len: u64::from(body_len),
            max: body_max,
        });
    }
    let expected = get_u32(rest, FRAME_CRC_POS).ok_or(CorruptKind::Truncated)?;
    let frame_end = FRAME_LOG_INDEX_POS
        .checked_add(usize::try_from(body_len).map_err(|_| CorruptKind::Truncated)?)
        .ok_or(CorruptKind::Truncated)?;
    let frame = rest.get(..frame_end).ok_or(CorruptKind::Truncated)?;
    let body = frame
        .get(FRAME_LOG_INDEX_POS..)
        .ok_or(CorruptKind::Truncated)?;
    let actual = crc32fast::hash(body);
    if actual != expected {
        return Err(CorruptKind::ChecksumMismatch { expected, actual });
    }
    let kind = EntryKind::from_u8(*frame.get(FRAME_KIND_POS).ok_or(CorruptKind::Truncated)?)?;
    let flags = *frame.get(FRAME_FLAGS_POS).ok_or(CorruptKind::Truncated)?;
    if flags & !(FRAME_FLAG_KAFKA | FRAME_FLAG_COMPACTED) != 0
        || (flags != 0 && kind != EntryKind::Data)
    {
        return Err(CorruptKind::NonZeroReserved);
    }
    let format = if flags & FRAME_FLAG_KAFKA != 0 {
        PayloadFormat::Kafka
    } else {
        PayloadFormat::Replog
    };
    let compacted = flags & FRAME_FLAG_COMPACTED != 0;
    if get_u32(frame, FRAME_RESERVED2_POS) != Some(0) {
        return Err(CorruptKind::NonZeroReserved);
    }
    let mut header = FrameHeader {
        body_len,
        log_index: get_u64(frame, FRAME_LOG_INDEX_POS).ok_or(CorruptKind::Truncated)?,
        term: get_u64(frame, FRAME_TERM_POS).ok_or(CorruptKind::Truncated)?,
        base_offset: get_u64(frame, FRAME_BASE_OFFSET_POS).ok_or(CorruptKind::Truncated)?,
        record_count: get_u32(frame, FRAME_RECORD_COUNT_POS).ok_or(CorruptKind::Truncated)?,
        kind,
        format,
        compacted: compacted || kind == EntryKind::Gap,
        entries: 1,
        timestamp_ms: get_u64(frame, FRAME_TIMESTAMP_POS).ok_or(CorruptKind::Truncated)?,
        producer_id: get_u64(frame, FRAME_PRODUCER_ID_POS).ok_or(CorruptKind::Truncated)?,
        producer_epoch: get_u16(frame, FRAME_PRODUCER_EPOCH_POS).ok_or(CorruptKind::Truncated)?,
        base_sequence: get_u32(frame, FRAME_BASE_SEQUENCE_POS).ok_or(CorruptKind::Truncated)?,
    };
    if header.producer_id == 0 && (header.base_sequence != 0 || header.producer_epoch != 0) {
        return Err(CorruptKind::NonZeroReserved);
    }
    // Counters that would overflow after this frame cannot come from a writer.
    if header.log_index == u64::MAX
        || header
            .base_offset
            .checked_add(u64::from(header.record_count))
            .is_none()
    {
        return Err(CorruptKind::LengthOutOfRange {
            len: header.base_offset,
            max: u64::MAX,
        });
    }
    let payload = frame
        .get(FRAME_HEADER_LEN..)
        .ok_or(CorruptKind::Truncated)?;
    match kind {
        EntryKind::Data => {
            validate_payload(format, compacted, payload, header.record_count, limits)?
        }
        EntryKind::Control if header.record_count != 0 => return Err(CorruptKind::BadRecord),
        EntryKind::Control => {}
        EntryKind::Gap => header.entries = gap_entries(payload, &header)?,
    }
    Ok(Some(header))
}

/// The entries a gap frame stands for (FORMAT.md §4.3), from its payload (`super::gap`):
/// at least one, without a producer, and the log index after them within range.
fn gap_entries(payload: &[u8], header: &FrameHeader) -> Result<u64, CorruptKind> {
    let entries = super::gap::entries(payload, header.record_count)?;
    if header.producer_id != 0 || header.log_index.checked_add(entries).is_none() {
        return Err(CorruptKind::BadRecord);
    }
    Ok(entries)
}

/// Checks a data frame's payload in its format: replog's records ([`validate_records`]), or
/// one Kafka batch of `count` records by its header ([`super::kafka::header`], which neither
/// decompresses nor sums it: a leader checks a Kafka batch whole, CRC-32C included, before it
/// accepts it, and the frame's CRC covers the stored bytes after that). A compacted frame's
/// payload (FORMAT.md §4.3) holds at most `count` records within the frame's `count` offsets:
/// replog's records each after its offset delta ([`validate_compacted_records`]), or one Kafka
/// batch whose last offset delta is `count − 1`, or nothing at all.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn validate_payload(
    format: PayloadFormat,
    compacted: bool,
    payload: &[u8],
    count: u32,
    limits: &Limits,
) -> Result<(), CorruptKind> {
    match (format, compacted) {
        (PayloadFormat::Replog, false) => validate_records(payload, count, limits),
        (PayloadFormat::Replog, true) => validate_compacted_records(payload, count, limits),
        (PayloadFormat::Kafka, _) if compacted && payload.is_empty() => Ok(()),
        (PayloadFormat::Kafka, _) => {
            let info = super::kafka::header_of(payload, compacted)?;
            let span = if compacted {
                info.last_offset_delta.saturating_add(1)
            } else {
                info.record_count
            };
            if span != count {
                return Err(CorruptKind::BadKafkaBatch(
                    "record count differs from the frame's",
                ));
            }
            Ok(())
        }
    }
}

/// Decodes a frame from arbitrary bytes and walks its records: the entry point of the
/// `record_decode` fuzz target. Returns the number of records seen.
///
/// # Panics
///
/// Never, for any input.
#[doc(hidden)]
pub fn fuzz_decode_frame(data: &[u8]) -> Result<usize, CorruptKind> {
    let limits = Limits {
        record_bytes_max: 1 << 20,
        batch_bytes_max: 1 << 22,
    };
    let Some(header) = decode_frame(data, 0, &limits)? else {
        return Ok(0);
    };
    let batch = Batch {
        log_index: LogIndex(header.log_index),
        term: Term(header.term),
        base_offset: Offset(header.base_offset),
        record_count: header.record_count,
        timestamp_ms: header.timestamp_ms,
        kind: header.kind,
        format: header.format,
        compacted: header.compacted,
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        base_sequence: header.base_sequence,
        payload: Bytes::copy_from_slice(
            data.get(FRAME_HEADER_LEN..header.frame_len())
                .unwrap_or_default(),
        ),
    };
    let n = batch.records().count();
    // A Kafka batch's records are checked whole only when a leader accepts it: bytes whose
    // two CRCs hold but whose records do not decode read as no records.
    if header.kind == EntryKind::Data && header.format == PayloadFormat::Replog && !header.compacted
    {
        assert_eq!(
            n as u64,
            u64::from(header.record_count),
            "validated batch must decode fully"
        );
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
