//! Record and record-batch frame codec: pure functions over byte slices, no I/O.
//!
//! Everything that reads bytes from disk goes through [`decode_frame`] and
//! [`validate_records`], which check every length before slicing and never panic for any input
//! (the `record_decode` fuzz target holds them to that). The layout is in `FORMAT.md`.

use bytes::Bytes;

use crate::error::{CorruptKind, Error};
use crate::segment::format::{
    EntryKind, FRAME_BASE_OFFSET_POS, FRAME_BASE_SEQUENCE_POS, FRAME_BODY_FIXED_LEN,
    FRAME_BODY_LEN_POS, FRAME_CRC_POS, FRAME_FLAG_COMPACTED, FRAME_FLAG_KAFKA, FRAME_FLAGS_POS,
    FRAME_HEADER_LEN, FRAME_KIND_POS, FRAME_LOG_INDEX_POS, FRAME_PRODUCER_EPOCH_POS,
    FRAME_PRODUCER_ID_POS, FRAME_RECORD_COUNT_POS, FRAME_RESERVED2_POS, FRAME_TERM_POS,
    FRAME_TIMESTAMP_POS, NULL_KEY_LEN, PayloadFormat, RECORD_FIXED_LEN, RECORD_HEADER_COUNT_POS,
    RECORD_HEADER_FIXED_LEN, RECORD_KEY_LEN_POS, RECORD_VALUE_LEN_POS, get_u16, get_u32, get_u64,
    put,
};
use crate::types::{LogIndex, Offset, Term};

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
    fn encode(&self, dst: &mut [u8]) -> usize {
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

/// A batch of records read from a log. Its payload is a view of the segment's memory map.
#[derive(Clone, Debug)]
pub struct Batch {
    pub(crate) log_index: LogIndex,
    pub(crate) term: Term,
    pub(crate) base_offset: Offset,
    pub(crate) record_count: u32,
    pub(crate) timestamp_ms: u64,
    pub(crate) kind: EntryKind,
    /// How the payload of a data batch is encoded.
    pub(crate) format: PayloadFormat,
    /// Compaction removed records from it: `record_count` is the offsets it spans, and its
    /// records carry their offsets (FORMAT.md §4.3).
    pub(crate) compacted: bool,
    pub(crate) producer_id: u64,
    pub(crate) producer_epoch: u16,
    pub(crate) base_sequence: u32,
    /// The frame's payload: validated records or a checked Kafka batch (data), or opaque
    /// bytes (control).
    pub(crate) payload: Bytes,
}

impl Batch {
    /// The log index of this batch's entry.
    pub fn log_index(&self) -> LogIndex {
        self.log_index
    }

    /// The term that wrote this batch (0 in a local-only log).
    pub fn term(&self) -> Term {
        self.term
    }

    /// The offset of the first record.
    pub fn base_offset(&self) -> Offset {
        self.base_offset
    }

    /// The offset after the last record.
    pub fn next_offset(&self) -> Offset {
        Offset(self.base_offset.0 + u64::from(self.record_count))
    }

    /// The number of offsets the batch spans: its records, unless compaction removed some
    /// (then [`records`](Self::records) yields fewer, each with its own offset).
    pub fn record_count(&self) -> u32 {
        self.record_count
    }

    /// The bytes the batch takes in its log: its frame's header and payload.
    pub fn size_bytes(&self) -> usize {
        FRAME_HEADER_LEN + self.payload.len()
    }

    /// Whether compaction removed records from this batch (its offsets have gaps).
    pub fn is_compacted(&self) -> bool {
        self.compacted
    }

    /// When the batch was appended, in milliseconds since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// The idempotent producer that wrote this batch and the sequence number of its first
    /// record, if it was written by one.
    pub fn producer(&self) -> Option<(u64, u32)> {
        (self.producer_id != 0).then_some((self.producer_id, self.base_sequence))
    }

    /// The epoch of the producer that wrote this batch (0 without one). A producer moves to a
    /// later epoch when it gives up on a batch, and the partition then refuses its earlier
    /// epochs.
    pub fn producer_epoch(&self) -> u16 {
        self.producer_epoch
    }

    /// The records with their offsets. No record bytes are copied, except from a batch a
    /// Kafka producer compressed, whose records are decompressed here.
    pub fn records(&self) -> RecordIter {
        let count = if self.kind == EntryKind::Data {
            self.record_count
        } else {
            0
        };
        let decoded =
            (self.kind == EntryKind::Data && self.format == PayloadFormat::Kafka).then(|| {
                if self.payload.is_empty() {
                    // A compacted frame that kept no record.
                    return Vec::new().into_iter();
                }
                // Checked whole when it was accepted, and its header and the frame's CRC on
                // every read since, so this does not fail
                // short of a replog bug; if it did, the iteration ends rather than panics.
                match super::kafka::decode_records_of(
                    &self.payload,
                    self.compacted,
                    &Limits::ON_DISK,
                ) {
                    Ok(records) => records.into_iter(),
                    Err(e) => {
                        tracing::warn!(log_index = %self.log_index, error = %e,
                            "a stored kafka batch does not decode");
                        Vec::new().into_iter()
                    }
                }
            });
        RecordIter {
            payload: self.payload.clone(),
            pos: 0,
            remaining: count,
            base: self.base_offset,
            next_delta: 0,
            compacted: self.compacted,
            decoded,
        }
    }

    /// The payload's encoding.
    pub(crate) fn format(&self) -> PayloadFormat {
        self.format
    }
}

/// Iterator over the records of a [`Batch`], yielding each with its offset.
#[derive(Debug)]
pub struct RecordIter {
    payload: Bytes,
    pos: usize,
    /// Offsets of the batch not yet passed (records left, at most).
    remaining: u32,
    base: Offset,
    /// The offset delta of the next record of an uncompacted batch.
    next_delta: u32,
    /// Each record carries its offset delta (FORMAT.md §4.3).
    compacted: bool,
    /// A Kafka batch's records, decoded, with their offset deltas.
    decoded: Option<std::vec::IntoIter<(u32, Record)>>,
}

impl Iterator for RecordIter {
    type Item = (Offset, Record);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let (delta, record) = if let Some(decoded) = &mut self.decoded {
            decoded.next()?
        } else {
            // The payload was checked by `validate_payload` before this batch was handed out,
            // so every length below is in bounds; a failure here would be a replog bug, and
            // ends the iteration rather than panicking.
            let delta = if self.compacted {
                let delta = get_u32(&self.payload, self.pos)?;
                self.pos += OFFSET_DELTA_LEN;
                delta
            } else {
                self.next_delta
            };
            let record = decode_record(&self.payload, &mut self.pos);
            debug_assert!(record.is_some(), "validated payload failed to decode");
            (delta, record?)
        };
        // Deltas strictly increase within the batch's span (checked): past it, the iteration
        // ends.
        let passed = delta.checked_add(1)?.checked_sub(self.next_delta)?;
        self.remaining = self.remaining.checked_sub(passed)?;
        self.next_delta = delta + 1;
        Some((Offset(self.base.0 + u64::from(delta)), record))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        let exact = !self.compacted;
        (if exact { n } else { 0 }, Some(n))
    }
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

impl Batch {
    /// The records of a batch of replog's own format, read in place, in order (none for a
    /// Kafka producer's batch or a control entry). Every payload handed out was validated, so
    /// every record reads; if one did not (a replog bug), the iteration ends there.
    /// Each comes with its offset delta: 0, 1, 2, … in a batch compaction did not touch, the
    /// delta stored before it in one it did (FORMAT.md §4.3).
    pub(crate) fn record_refs(&self) -> impl Iterator<Item = (u32, RecordRef<'_>)> {
        let count = if self.kind == EntryKind::Data && self.format == PayloadFormat::Replog {
            self.record_count
        } else {
            0
        };
        let mut pos = 0usize;
        let compacted = self.compacted;
        (0..count).map_while(move |i| {
            if pos >= self.payload.len() {
                return None;
            }
            let delta = if compacted {
                let delta = get_u32(&self.payload, pos)?;
                pos += OFFSET_DELTA_LEN;
                delta
            } else {
                i
            };
            Some((delta, RecordRef::read(&self.payload, &mut pos)?))
        })
    }
}

/// Decodes one record at `*pos`, advancing `*pos`. The returned fields share `payload`.
fn decode_record(payload: &Bytes, pos: &mut usize) -> Option<Record> {
    let r = RecordRef::read(payload, pos)?;
    Some(Record {
        key: r.key.map(|k| payload.slice_ref(k)),
        value: payload.slice_ref(r.value),
        headers: r
            .headers()
            .map(|(name, value)| Header {
                name: payload.slice_ref(name),
                value: payload.slice_ref(value),
            })
            .collect(),
    })
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
