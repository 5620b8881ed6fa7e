//! Kafka's record batch (magic 2) as a frame payload: the check every reader runs, the full
//! decode a leader runs before it accepts one, and the copy a Kafka fetch serves. The layout is
//! Kafka's own, restated in `FORMAT.md` §4.2; pure functions, no I/O, no panics on any input.
//!
//! A frame with the `KAFKA` flag holds exactly one such batch as its producer sent it: the
//! records stay compressed, timestamps and headers as they were, and its CRC-32C stays valid
//! because the two fields a broker rewrites on the way out (the base offset and the partition
//! leader epoch) come before the range the CRC covers.
//!
//! This file holds the batch header's layout and its checks ([`check`], [`header`]), the
//! leader's whole check of a producer's batch ([`accept`]), and what reads and compaction build
//! on them: a stored batch's records as replog's ([`decode_records_of`]), its keys
//! ([`for_each_key`]) and its rewrite without some records ([`compact_batch`]). Beneath them,
//! `records.rs` walks the records inside a batch, `inflate.rs` decompresses them and `time.rs`
//! finds their timestamps; `encode.rs` writes what a Kafka fetch serves: a stored batch with its
//! offsets set, or replog's records as a Kafka batch.

use bytes::{Buf, BufMut, Bytes, BytesMut};
#[cfg(test)]
use kafka_protocol::records::Compression;

use crate::error::CorruptKind;
use crate::segment::frame::Limits;
use crate::segment::record::{Header, Record};

// Positions in a batch (FORMAT.md §4.2). Big-endian, as all of Kafka's protocol.
const BASE_OFFSET_POS: usize = 0;
const BATCH_LENGTH_POS: usize = 8;
/// `batch_length` counts the bytes after itself.
const BATCH_LENGTH_END: usize = BATCH_LENGTH_POS + 4;
const LEADER_EPOCH_POS: usize = 12;
const MAGIC_POS: usize = 16;
const CRC_POS: usize = 17;
/// The CRC-32C covers everything from here to the end of the batch.
const ATTRIBUTES_POS: usize = 21;
const LAST_OFFSET_DELTA_POS: usize = 23;
const BASE_TIMESTAMP_POS: usize = 27;
const MAX_TIMESTAMP_POS: usize = 35;
const PRODUCER_ID_POS: usize = 43;
const PRODUCER_EPOCH_POS: usize = 51;
const BASE_SEQUENCE_POS: usize = 53;
const RECORD_COUNT_POS: usize = 57;
/// The fixed part of a batch; its records follow.
pub(crate) const BATCH_HEADER_LEN: usize = 61;
/// The smallest record a batch can hold: a length, the attributes, the timestamp and offset
/// deltas, a key and a value length and a header count, one byte each. A record count is
/// checked against it before anything is decoded or allocated.
const RECORD_LEN_MIN: usize = 7;
const _: () = assert!(RECORD_COUNT_POS + 4 == BATCH_HEADER_LEN);

/// The attribute bits replog accepts: the codec (bits 0–2) and the timestamp type (bit 3).
/// Transactional (4) and control (5) batches belong to transactions, which replog does not
/// serve; bit 6 (delete horizon) is set only by compaction.
const ATTRIBUTES_ACCEPTED: i16 = 0b1111;
const CODEC_MASK: i16 = 0b111;
const CODEC_MAX: i16 = 4;

/// Attribute bit 3: the batch's time is the broker's (LogAppendTime), not the producer's.
const LOG_APPEND_TIME: i16 = 1 << 3;

/// What a batch's header says, once [`check`] passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KafkaBatchInfo {
    /// Records in the batch (`last_offset_delta + 1`, unless compaction removed some).
    pub(crate) record_count: u32,
    /// The last record's offset less the first's: the batch spans `last_offset_delta + 1`
    /// offsets.
    pub(crate) last_offset_delta: u32,
    /// The idempotent producer's id, or -1.
    pub(crate) producer_id: i64,
    /// Its epoch, or -1.
    pub(crate) producer_epoch: i16,
    /// Its sequence number of the first record, or -1.
    pub(crate) base_sequence: i32,
    /// The codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub(crate) codec: i16,
    /// The first record's timestamp, which the others' deltas count from.
    pub(crate) base_timestamp: i64,
    /// The largest record timestamp, as the producer set it.
    pub(crate) max_timestamp: i64,
    /// The batch's time is the broker's (attribute bit 3, LogAppendTime): every record's
    /// timestamp is `max_timestamp`.
    pub(crate) log_append_time: bool,
}

fn be_i16(b: &[u8], pos: usize) -> Option<i16> {
    Some(b.get(pos..pos.checked_add(2)?)?.get_i16())
}

fn be_i32(b: &[u8], pos: usize) -> Option<i32> {
    Some(b.get(pos..pos.checked_add(4)?)?.get_i32())
}

fn be_u32(b: &[u8], pos: usize) -> Option<u32> {
    Some(b.get(pos..pos.checked_add(4)?)?.get_u32())
}

fn be_i64(b: &[u8], pos: usize) -> Option<i64> {
    Some(b.get(pos..pos.checked_add(8)?)?.get_i64())
}

fn bad(reason: &'static str) -> CorruptKind {
    CorruptKind::BadKafkaBatch(reason)
}

/// Checks that `b` is exactly one Kafka v2 batch whose CRC-32C holds, without decompressing
/// it: the first step of [`accept`], where a batch enters a log. Work is one CRC pass.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn check(b: &[u8]) -> Result<KafkaBatchInfo, CorruptKind> {
    let info = header(b)?;
    let expected = be_u32(b, CRC_POS).ok_or(CorruptKind::Truncated)?;
    let actual = crc32c::crc32c(b.get(ATTRIBUTES_POS..).unwrap_or_default());
    if expected != actual {
        return Err(CorruptKind::ChecksumMismatch { expected, actual });
    }
    Ok(info)
}

/// [`check`] without the CRC-32C: what the Kafka listener reads of a producer's batch
/// (its record count and producer numbers) before the write path checks it whole, and what
/// every read of a stored batch and every replica's append check (FORMAT.md §6, step 7); the
/// CRC-32C is checked once, by [`accept`] on the leader, and the frame's CRC-32 covers the
/// stored bytes after it.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn header(b: &[u8]) -> Result<KafkaBatchInfo, CorruptKind> {
    header_of(b, false)
}

/// [`header`] of a batch that may have been compacted (FORMAT.md §4.3): then it may hold fewer
/// records than its last offset delta spans.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn header_of(b: &[u8], compacted: bool) -> Result<KafkaBatchInfo, CorruptKind> {
    if b.len() < BATCH_HEADER_LEN {
        return Err(bad("shorter than a batch header"));
    }
    let length = be_i32(b, BATCH_LENGTH_POS).ok_or(CorruptKind::Truncated)?;
    if usize::try_from(length).ok() != b.len().checked_sub(BATCH_LENGTH_END) {
        return Err(bad("batch length does not match the payload"));
    }
    if b.get(MAGIC_POS) != Some(&2) {
        return Err(bad("magic is not 2"));
    }
    let attributes = be_i16(b, ATTRIBUTES_POS).ok_or(CorruptKind::Truncated)?;
    if attributes & !ATTRIBUTES_ACCEPTED != 0 {
        return Err(bad("transactional, control or compacted batch"));
    }
    let codec = attributes & CODEC_MASK;
    if codec > CODEC_MAX {
        return Err(bad("unknown compression codec"));
    }
    let last_delta = be_i32(b, LAST_OFFSET_DELTA_POS).ok_or(CorruptKind::Truncated)?;
    let count = be_i32(b, RECORD_COUNT_POS).ok_or(CorruptKind::Truncated)?;
    // `count - 1` only once `count` is known to be at least 1 (i32::MIN would overflow).
    let spans = count >= 1
        && if compacted {
            last_delta >= count - 1
        } else {
            last_delta == count - 1
        };
    if !spans {
        return Err(bad("record count does not match the last offset delta"));
    }
    let records_len = b.len() - BATCH_HEADER_LEN;
    if codec == 0 && (count as usize).saturating_mul(RECORD_LEN_MIN) > records_len {
        return Err(bad("more records than the batch has bytes for"));
    }
    Ok(KafkaBatchInfo {
        record_count: u32::try_from(count).map_err(|_| bad("record count"))?,
        last_offset_delta: u32::try_from(last_delta).map_err(|_| bad("last offset delta"))?,
        producer_id: be_i64(b, PRODUCER_ID_POS).ok_or(CorruptKind::Truncated)?,
        producer_epoch: be_i16(b, PRODUCER_EPOCH_POS).ok_or(CorruptKind::Truncated)?,
        base_sequence: be_i32(b, BASE_SEQUENCE_POS).ok_or(CorruptKind::Truncated)?,
        codec,
        base_timestamp: be_i64(b, BASE_TIMESTAMP_POS).ok_or(CorruptKind::Truncated)?,
        max_timestamp: be_i64(b, MAX_TIMESTAMP_POS).ok_or(CorruptKind::Truncated)?,
        log_append_time: attributes & LOG_APPEND_TIME != 0,
    })
}

/// What the leader checks of a Kafka producer's batch before it proposes it, once, where the
/// batch enters a log: [`check`] (its header and CRC-32C), then every record, walked once
/// without being decoded into values of its own ([`walk_records`]), and that no record's
/// timestamp is past the batch's max timestamp (the time index relies on it; Kafka's clients
/// always set it so). Returns the header.
/// Replicas and readers after it check the header only ([`header`]): the frame's own CRC
/// covers the stored bytes.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn accept(b: &Bytes, limits: &Limits) -> Result<KafkaBatchInfo, CorruptKind> {
    accept_keyed(b, limits).map(|a| a.info)
}

/// What [`accept_keyed`] found in a batch's records besides its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// The header.
    pub(crate) info: KafkaBatchInfo,
    /// A record has no key (which a compacted topic refuses).
    pub(crate) keyless: bool,
    /// The earliest record timestamp (the latest is the header's max timestamp, checked).
    pub(crate) earliest: i64,
}

/// [`accept`], also saying whether a record of the batch has no key and its earliest
/// timestamp.
pub(crate) fn accept_keyed(b: &Bytes, limits: &Limits) -> Result<Accepted, CorruptKind> {
    let info = check(b)?;
    let records = records_bytes(b, &info, limits)?;
    let mut keyless = false;
    let (mut earliest, mut latest) = (i64::MAX, i64::MIN);
    walk_records(&records, &info, false, limits, |r| {
        keyless |= r.key.is_none();
        let time = record_time(&info, &r);
        earliest = earliest.min(time);
        latest = latest.max(time);
    })?;
    if latest > info.max_timestamp {
        return Err(bad(
            "a record's timestamp is past the batch's max timestamp",
        ));
    }
    Ok(Accepted {
        info,
        keyless,
        earliest,
    })
}

/// What a native client checks of a Kafka batch a broker served it as stored (a fetch of
/// protocol version 4): its header ([`header_of`]) and every record walked as [`accept`]
/// walks them, within `limits`, so that reading its records later cannot fail; not the
/// CRC-32C, which the leader checked where the batch entered the log (the frame's CRC-32
/// covers it on disk, the connection in transit, as for replog's records).
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn check_served(b: &Bytes, compacted: bool, limits: &Limits) -> Result<(), CorruptKind> {
    if compacted && b.is_empty() {
        return Ok(());
    }
    let info = header_of(b, compacted)?;
    let records = records_bytes(b, &info, limits)?;
    walk_records(&records, &info, compacted, limits, |_| {})
}

/// A copy of the accepted batch `b` stamped with the broker's time, as Kafka's leader stamps
/// the batches of a `LogAppendTime` topic: the timestamp-type attribute set, the max
/// timestamp `time_ms`, and the CRC-32C summed again over the changed bytes. Consumers read
/// `time_ms` as every record's timestamp. A batch too short for a header is returned as is
/// (the caller checked it).
pub(crate) fn stamp_log_append_time(b: &[u8], time_ms: u64) -> Bytes {
    let mut out = BytesMut::from(b);
    if out.len() < BATCH_HEADER_LEN {
        return out.freeze();
    }
    let attributes = be_i16(b, ATTRIBUTES_POS).unwrap_or(0) | LOG_APPEND_TIME;
    if let Some(mut field) = out.get_mut(ATTRIBUTES_POS..ATTRIBUTES_POS + 2) {
        field.put_i16(attributes);
    }
    if let Some(mut field) = out.get_mut(MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8) {
        field.put_i64(i64::try_from(time_ms).unwrap_or(i64::MAX));
    }
    let crc = crc32c::crc32c(out.get(ATTRIBUTES_POS..).unwrap_or_default());
    if let Some(mut field) = out.get_mut(CRC_POS..ATTRIBUTES_POS) {
        field.put_u32(crc);
    }
    out.freeze()
}

/// The records of a stored batch (one [`accept`] passed where it entered the log), as replog
/// records (a null value reads as an empty one, a null header value as empty). Its header is
/// checked again ([`header`]), its CRC-32C not: the frame's CRC caught damage on disk.
/// Decompression stops past `limits.batch_bytes_max` bytes, so a small batch that inflates to
/// gigabytes is refused with little memory spent; each record's replog encoding must be within
/// `limits.record_bytes_max`, and the records' offset deltas must be 0, 1, 2, … in order.
///
/// # Panics
///
/// Never, for any input.
#[cfg(test)]
pub(crate) fn decode_records(b: &Bytes, limits: &Limits) -> Result<Vec<Record>, CorruptKind> {
    Ok(decode_records_of(b, false, limits)?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// [`decode_records`] of a batch that may have been compacted (FORMAT.md §4.3), each record
/// with its offset delta.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn decode_records_of(
    b: &Bytes,
    compacted: bool,
    limits: &Limits,
) -> Result<Vec<(u32, Record)>, CorruptKind> {
    let timed = decode_timed_records_of(b, compacted, limits)?;
    Ok(timed.into_iter().map(|(delta, _, r)| (delta, r)).collect())
}

/// [`decode_records_of`], each record with its timestamp too: its producer's (CreateTime,
/// the base timestamp plus its delta), or the batch's max timestamp where the batch says
/// LogAppendTime.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn decode_timed_records_of(
    b: &Bytes,
    compacted: bool,
    limits: &Limits,
) -> Result<Vec<(u32, i64, Record)>, CorruptKind> {
    let info = header_of(b, compacted)?;
    let records = records_bytes(b, &info, limits)?;
    // Nothing is allocated for the records before the bytes are known to hold them.
    let count = info.record_count as usize;
    if count.saturating_mul(RECORD_LEN_MIN) > records.len() {
        return Err(bad("more records than the batch has bytes for"));
    }
    let mut out = Vec::with_capacity(count);
    let field = |f: &[u8]| records.slice_ref(f);
    walk_records(&records, &info, compacted, limits, |r| {
        out.push((
            r.offset_delta,
            record_time(&info, &r),
            Record {
                key: r.key.map(field),
                value: r.value.map(field).unwrap_or_default(),
                headers: r
                    .headers()
                    .map(|(name, value)| Header {
                        name: field(name),
                        value: value.map(field).unwrap_or_default(),
                    })
                    .collect(),
            },
        ));
    })?;
    Ok(out)
}

/// The records of the stored batch `b` (compacted or not) in replog's layout, as a native
/// fetch answers them: FORMAT.md §4.1's records, each after its offset delta when `compacted`
/// (§4.3), a null value or header value as empty. They are what the records
/// [`decode_records_of`] gives encode to, written straight from the batch's bytes
/// (decompressed first if its producer compressed them) into one buffer sized by a first walk:
/// no record is built on the way. The walk checked that each fits replog's layout.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn replog_payload(
    b: &Bytes,
    compacted: bool,
    limits: &Limits,
) -> Result<Bytes, CorruptKind> {
    use crate::segment::format::{NULL_KEY_LEN, RECORD_FIXED_LEN, RECORD_HEADER_FIXED_LEN};
    use crate::segment::record::OFFSET_DELTA_LEN;
    let info = header_of(b, compacted)?;
    let records = records_bytes(b, &info, limits)?;
    let field_len = |f: Option<&[u8]>| f.map_or(0, <[u8]>::len);
    let mut len = 0usize;
    walk_records(&records, &info, compacted, limits, |r| {
        let headers: usize = (r.headers())
            .map(|(name, value)| RECORD_HEADER_FIXED_LEN + name.len() + field_len(value))
            .sum();
        let prefix = if compacted { OFFSET_DELTA_LEN } else { 0 };
        let record = prefix + RECORD_FIXED_LEN + field_len(r.key) + field_len(r.value) + headers;
        len = len.saturating_add(record);
    })?;
    let u32_len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let mut out = BytesMut::with_capacity(len);
    walk_records(&records, &info, compacted, limits, |r| {
        if compacted {
            out.put_u32_le(r.offset_delta);
        }
        out.put_u32_le(r.key.map_or(NULL_KEY_LEN, |k| u32_len(k.len())));
        out.put_u32_le(u32_len(field_len(r.value)));
        out.put_u16_le(u16::try_from(r.header_count).unwrap_or(u16::MAX));
        out.put_slice(r.key.unwrap_or_default());
        out.put_slice(r.value.unwrap_or_default());
        for (name, value) in r.headers() {
            out.put_u16_le(u16::try_from(name.len()).unwrap_or(u16::MAX));
            out.put_u32_le(u32_len(field_len(value)));
            out.put_slice(name);
            out.put_slice(value.unwrap_or_default());
        }
    })?;
    debug_assert_eq!(out.len(), len, "sized by the first walk");
    Ok(out.freeze())
}

/// Each record of a stored batch (compacted or not) as compaction sees it: its offset delta,
/// its key, and whether it is a tombstone (a null value).
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn for_each_key(
    b: &Bytes,
    compacted: bool,
    limits: &Limits,
    mut each: impl FnMut(u32, Option<&[u8]>, bool),
) -> Result<(), CorruptKind> {
    let info = header_of(b, compacted)?;
    let records = records_bytes(b, &info, limits)?;
    walk_records(&records, &info, compacted, limits, |r| {
        each(r.offset_delta, r.key, r.value.is_none());
    })
}

/// The stored batch `b` with only the records `keep` chooses (given each one's offset delta,
/// key, and whether it is a tombstone), as compaction writes it (FORMAT.md §4.3): the same
/// header (base offset, last offset delta, timestamps, producer), the kept records' bytes as
/// they were (their offset deltas unchanged), uncompressed, `records_count` and the length set
/// to what is left and the CRC-32C summed again. `Ok(None)` when no record is kept;
/// `Ok(Some(b))` unchanged when every one is.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn compact_batch(
    b: &Bytes,
    compacted: bool,
    limits: &Limits,
    mut keep: impl FnMut(u32, Option<&[u8]>, bool) -> bool,
) -> Result<Option<Bytes>, CorruptKind> {
    let info = header_of(b, compacted)?;
    let records = records_bytes(b, &info, limits)?;
    let mut kept: Vec<&[u8]> = Vec::new();
    let mut dropped = false;
    walk_records(&records, &info, compacted, limits, |r| {
        if keep(r.offset_delta, r.key, r.value.is_none()) {
            kept.push(r.raw);
        } else {
            dropped = true;
        }
    })?;
    if !dropped {
        return Ok(Some(b.clone()));
    }
    if kept.is_empty() {
        return Ok(None);
    }
    let head = b.get(..BATCH_HEADER_LEN).ok_or(CorruptKind::Truncated)?;
    let mut out =
        BytesMut::with_capacity(BATCH_HEADER_LEN + kept.iter().map(|r| r.len()).sum::<usize>());
    out.extend_from_slice(head);
    for r in &kept {
        out.extend_from_slice(r);
    }
    let attributes = be_i16(head, ATTRIBUTES_POS).ok_or(CorruptKind::Truncated)? & !CODEC_MASK;
    if let Some(mut field) = out.get_mut(ATTRIBUTES_POS..ATTRIBUTES_POS + 2) {
        field.put_i16(attributes);
    }
    if let Some(mut field) = out.get_mut(RECORD_COUNT_POS..BATCH_HEADER_LEN) {
        field.put_i32(i32::try_from(kept.len()).map_err(|_| bad("record count"))?);
    }
    let batch_len = out.len() - BATCH_LENGTH_END;
    if let Some(mut field) = out.get_mut(BATCH_LENGTH_POS..BATCH_LENGTH_END) {
        field.put_i32(i32::try_from(batch_len).map_err(|_| bad("batch length"))?);
    }
    let crc = crc32c::crc32c(out.get(ATTRIBUTES_POS..).unwrap_or_default());
    if let Some(mut field) = out.get_mut(CRC_POS..ATTRIBUTES_POS) {
        field.put_u32(crc);
    }
    Ok(Some(out.freeze()))
}

/// Checks and decodes a Kafka batch from arbitrary bytes: the entry point of the
/// `kafka_batch` fuzz target. The CRC-32C is set right first (otherwise nearly every mutation
/// would stop there), so the fuzzer reaches the header rules, the decompressors and the
/// record decoder. Returns the number of records decoded.
///
/// # Panics
///
/// Never, for any input, unless the check and the decode disagree on the record count (a
/// replog bug, which the fuzz target is there to find).
#[doc(hidden)]
pub fn fuzz_kafka_batch(data: &[u8]) -> Result<usize, CorruptKind> {
    let limits = Limits {
        record_bytes_max: 1 << 20,
        batch_bytes_max: 4 << 20,
    };
    let mut data = data.to_vec();
    if let Some(covered) = data.get(ATTRIBUTES_POS..) {
        let crc = crc32c::crc32c(covered);
        if let Some(mut field) = data.get_mut(CRC_POS..ATTRIBUTES_POS) {
            field.put_u32(crc);
        }
    }
    let data = Bytes::from(data);
    // As a compacted batch (FORMAT.md §4.3) too: its decode, and compaction's rewrite of it
    // keeping every other record, whose result must decode as a compacted batch.
    if let Ok(records) = decode_records_of(&data, true, &limits) {
        let model = crate::segment::record::encode_compacted_records(&records).ok();
        let direct = replog_payload(&data, true, &limits).ok();
        assert_eq!(
            direct, model,
            "the direct conversion writes what the records encode to"
        );
        let mut i = 0usize;
        let kept = compact_batch(&data, true, &limits, |_, _, _| {
            i += 1;
            i.is_multiple_of(2)
        });
        if let Ok(Some(kept)) = kept {
            let again = decode_records_of(&kept, true, &limits).expect("a rewrite decodes");
            assert_eq!(again.len(), records.len() / 2, "every other record kept");
        }
    }
    // What a native client checks of a batch served as stored promises that its records read.
    for compacted in [false, true] {
        if check_served(&data, compacted, &limits).is_ok() {
            let decoded = decode_records_of(&data, compacted, &limits);
            assert!(decoded.is_ok(), "a batch the client checked decodes");
        }
    }
    let info = accept(&data, &limits)?;
    let records = decode_records_of(&data, false, &limits)?;
    assert_eq!(
        records.len(),
        info.record_count as usize,
        "check and decode disagree"
    );
    let plain: Vec<Record> = records.iter().map(|(_, r)| r.clone()).collect();
    let model = crate::segment::record::encode_records(&plain, u32::MAX).map(|(p, _)| p);
    let direct = replog_payload(&data, false, &limits).ok();
    assert_eq!(
        direct,
        model.ok(),
        "the direct conversion writes what the records encode to"
    );
    // A native producer's encoding of the same records is a batch the leader accepts, which
    // reads back as they do (a null value as empty; header keys are UTF-8 here, checked).
    let sent = encode::encode_produced(&plain, 0).expect("keys checked UTF-8");
    let again = decode_records_of(&sent, false, &limits).map(|r| r.len());
    assert_eq!(
        again,
        Ok(plain.len()),
        "a native producer's batch reads back"
    );
    assert!(accept(&sent, &limits).is_ok(), "and is accepted");
    Ok(records.len())
}

/// Every codec, for tests.
#[cfg(test)]
pub(crate) const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

pub(crate) mod encode;
mod inflate;
mod records;
#[cfg(test)]
mod tests;
mod time;

use inflate::records_bytes;
use records::walk_records;
use time::record_time;
pub(crate) use time::{first_record_at, max_timestamp};
