//! Kafka's record batch (magic 2) as a frame payload: the check every reader runs, the full
//! decode a leader runs before it accepts one, and the copy a Kafka fetch serves. The layout is
//! Kafka's own, restated in `FORMAT.md` §4.2; pure functions, no I/O, no panics on any input.
//!
//! A frame with the `KAFKA` flag holds exactly one such batch as its producer sent it: the
//! records stay compressed, timestamps and headers as they were, and its CRC-32C stays valid
//! because the two fields a broker rewrites on the way out (the base offset and the partition
//! leader epoch) come before the range the CRC covers.

use std::io::Read;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::records::Compression;

use crate::error::CorruptKind;
use crate::segment::record::{Header, Limits, Record};

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

/// What a batch's header says, once [`check`] passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KafkaBatchInfo {
    /// Records in the batch (`last_offset_delta + 1`).
    pub(crate) record_count: u32,
    /// The idempotent producer's id, or -1.
    pub(crate) producer_id: i64,
    /// Its epoch, or -1.
    pub(crate) producer_epoch: i16,
    /// Its sequence number of the first record, or -1.
    pub(crate) base_sequence: i32,
    /// The codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub(crate) codec: i16,
    /// The largest record timestamp, as the producer set it.
    pub(crate) max_timestamp: i64,
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
/// it: what every read of a stored batch checks (FORMAT.md §6, step 7). Work is one CRC pass.
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
/// (its record count and producer numbers) before the write path checks it whole, so that
/// the bytes are not summed twice there.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn header(b: &[u8]) -> Result<KafkaBatchInfo, CorruptKind> {
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
    if count < 1 || last_delta != count - 1 {
        return Err(bad("record count does not match the last offset delta"));
    }
    let records_len = b.len() - BATCH_HEADER_LEN;
    if codec == 0 && (count as usize).saturating_mul(RECORD_LEN_MIN) > records_len {
        return Err(bad("more records than the batch has bytes for"));
    }
    Ok(KafkaBatchInfo {
        record_count: u32::try_from(count).map_err(|_| bad("record count"))?,
        producer_id: be_i64(b, PRODUCER_ID_POS).ok_or(CorruptKind::Truncated)?,
        producer_epoch: be_i16(b, PRODUCER_EPOCH_POS).ok_or(CorruptKind::Truncated)?,
        base_sequence: be_i32(b, BASE_SEQUENCE_POS).ok_or(CorruptKind::Truncated)?,
        codec,
        max_timestamp: be_i64(b, MAX_TIMESTAMP_POS).ok_or(CorruptKind::Truncated)?,
    })
}

/// The records of a batch that [`check`] passed, as replog records (a null value reads as an
/// empty one, a null header value as empty). Decompression stops past
/// `limits.batch_bytes_max` bytes, so a small batch that inflates to gigabytes is refused
/// with little memory spent; each record's replog encoding must be within
/// `limits.record_bytes_max`, and the records' offset deltas must be 0, 1, 2, … in order.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn decode_records(b: &Bytes, limits: &Limits) -> Result<Vec<Record>, CorruptKind> {
    let info = check(b)?;
    let cap = usize::try_from(limits.batch_bytes_max).unwrap_or(usize::MAX);
    let codec = match info.codec {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        _ => Compression::Zstd,
    };
    let mut compressed = b.slice(BATCH_HEADER_LEN..);
    let records = inflate(&mut compressed, codec, cap).map_err(|e| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            CorruptKind::LengthOutOfRange {
                len: u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1),
                max: u64::from(limits.batch_bytes_max),
            }
        } else {
            tracing::debug!(error = %e, "a kafka batch that does not decompress");
            bad("records do not decompress")
        }
    })?;
    let count = info.record_count as usize;
    // Nothing is allocated for the records before the bytes are known to hold them.
    if count.saturating_mul(RECORD_LEN_MIN) > records.len() {
        return Err(bad("more records than the batch has bytes for"));
    }
    let mut out = Vec::with_capacity(count);
    let mut rest = records;
    let mut total = 0u64;
    for i in 0..count {
        let record = decode_record(&mut rest, i)?;
        let len = record.encoded_len(limits.record_bytes_max).map_err(|_| {
            CorruptKind::LengthOutOfRange {
                len: u64::MAX,
                max: u64::from(limits.record_bytes_max),
            }
        })?;
        total = total.saturating_add(len as u64);
        if total > u64::from(limits.batch_bytes_max) {
            return Err(CorruptKind::LengthOutOfRange {
                len: total,
                max: u64::from(limits.batch_bytes_max),
            });
        }
        out.push(record);
    }
    if !rest.is_empty() {
        return Err(bad("bytes after the last record"));
    }
    Ok(out)
}

/// Kafka's zigzag varint of at most `max_bytes` bytes (5 for an int, 10 for a long).
fn varint(buf: &mut Bytes, max_bytes: u32) -> Result<i64, CorruptKind> {
    let mut raw = 0u64;
    for i in 0..max_bytes {
        if !buf.has_remaining() {
            return Err(bad("a varint runs past the record"));
        }
        let byte = buf.get_u8();
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
fn bytes_field(buf: &mut Bytes) -> Result<Option<Bytes>, CorruptKind> {
    match varint(buf, 5)? {
        -1 => Ok(None),
        len => {
            let len = usize::try_from(len).map_err(|_| bad("a negative length"))?;
            if len > buf.remaining() {
                return Err(bad("a field runs past the record"));
            }
            Ok(Some(buf.split_to(len)))
        }
    }
}

/// One of a batch's records (Kafka's record format: a varint length, then the attributes,
/// the timestamp and offset deltas, key, value and headers within that length, which they
/// must fill exactly), as a replog record. Its offset delta must be `index`. Every count and
/// length is checked against the bytes left before anything is allocated.
fn decode_record(buf: &mut Bytes, index: usize) -> Result<Record, CorruptKind> {
    let len = usize::try_from(varint(buf, 5)?).map_err(|_| bad("a negative record length"))?;
    if len > buf.remaining() {
        return Err(bad("a record runs past the batch"));
    }
    let mut r = buf.split_to(len);
    if !r.has_remaining() {
        return Err(bad("an empty record"));
    }
    let _attributes = r.get_u8();
    let _timestamp_delta = varint(&mut r, 10)?;
    if usize::try_from(varint(&mut r, 5)?).ok() != Some(index) {
        return Err(bad("offset deltas are not 0, 1, 2, ..."));
    }
    let key = bytes_field(&mut r)?;
    let value = bytes_field(&mut r)?.unwrap_or_default();
    let count = usize::try_from(varint(&mut r, 5)?).map_err(|_| bad("a negative header count"))?;
    // A header takes two bytes at least (two lengths).
    if count.saturating_mul(2) > r.remaining() {
        return Err(bad("more headers than the record has bytes for"));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = bytes_field(&mut r)?.ok_or_else(|| bad("a null header key"))?;
        if std::str::from_utf8(&name).is_err() {
            return Err(bad("a header key that is not UTF-8"));
        }
        let value = bytes_field(&mut r)?.unwrap_or_default();
        headers.push(Header { name, value });
    }
    if r.has_remaining() {
        return Err(bad("bytes after a record's headers"));
    }
    Ok(Record {
        key,
        value,
        headers,
    })
}

/// The records of a batch, decompressed, at most `cap` bytes.
fn inflate(data: &mut Bytes, codec: Compression, cap: usize) -> std::io::Result<Bytes> {
    let too_large = || too_large(cap);
    let input = std::mem::take(data);
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::new();
    match codec {
        Compression::None => return Ok(input),
        Compression::Gzip => {
            flate2::read::MultiGzDecoder::new(&input[..])
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Zstd => {
            // The window a frame asks for is allocated up front: no larger than the output
            // may be (2^20 at least, zstd's own minimum being 2^10).
            let window_log = usize::BITS - cap.max(1 << 20).saturating_sub(1).leading_zeros();
            let mut decoder = zstd::stream::read::Decoder::new(&input[..])?;
            decoder.window_log_max(window_log.min(31))?;
            decoder.take(limit).read_to_end(&mut out).map_err(|e| {
                // zstd's "Frame requires too much memory for decoding": a window past the cap.
                if e.to_string().contains("too much memory") {
                    too_large()
                } else {
                    e
                }
            })?;
        }
        Compression::Lz4 => {
            lz4::Decoder::new(&input[..])?
                .take(limit)
                .read_to_end(&mut out)?;
        }
        Compression::Snappy => out = unsnappy(&input, cap)?,
    }
    if out.len() > cap {
        return Err(too_large());
    }
    Ok(Bytes::from(out))
}

/// Xerial's framing of snappy blocks, which Java clients write: this magic, then blocks of a
/// big-endian `u32` length and a raw snappy block. Without the magic: one raw block (librdkafka).
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

/// The error of a batch whose records decompress past `cap` bytes.
fn too_large(cap: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!("decompresses past {cap} bytes"),
    )
}

fn unsnappy(input: &[u8], cap: usize) -> std::io::Result<Vec<u8>> {
    let too_large = || too_large(cap);
    let block = |raw: &[u8], out: &mut Vec<u8>| -> std::io::Result<()> {
        let len = snap::raw::decompress_len(raw).map_err(std::io::Error::other)?;
        if out.len().saturating_add(len) > cap {
            return Err(too_large());
        }
        let start = out.len();
        out.resize(start + len, 0);
        let wrote = snap::raw::Decoder::new()
            .decompress(raw, out.get_mut(start..).unwrap_or_default())
            .map_err(std::io::Error::other)?;
        out.truncate(start + wrote);
        Ok(())
    };
    let mut out = Vec::new();
    if !input.starts_with(XERIAL_MAGIC) {
        block(input, &mut out)?;
        return Ok(out);
    }
    let mut rest = input.get(XERIAL_HEADER_LEN..).unwrap_or_default();
    // Bounded by the input: each turn consumes at least four bytes.
    while !rest.is_empty() {
        let len = be_u32(rest, 0).ok_or_else(|| std::io::Error::other("a cut snappy block"))?;
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        let raw = rest
            .get(4..4usize.saturating_add(len))
            .ok_or_else(|| std::io::Error::other("a cut snappy block"))?;
        block(raw, &mut out)?;
        rest = rest.get(4 + len..).unwrap_or_default();
    }
    Ok(out)
}

/// The batch as a Kafka fetch serves it: the stored bytes with the base offset and the
/// partition leader epoch set to where and by whom it was appended (fields outside the CRC).
pub(crate) fn serve(stored: &[u8], base_offset: u64, leader_epoch: u64, out: &mut BytesMut) {
    let start = out.len();
    out.extend_from_slice(stored);
    if let Some(mut field) = out.get_mut(start + BASE_OFFSET_POS..start + BATCH_LENGTH_POS) {
        field.put_i64(i64::try_from(base_offset).unwrap_or(i64::MAX));
    }
    if let Some(mut field) = out.get_mut(start + LEADER_EPOCH_POS..start + MAGIC_POS) {
        field.put_i32(i32::try_from(leader_epoch).unwrap_or(i32::MAX));
    }
}

/// [`serve`] as two pieces: the first 16 bytes (up to the magic byte) with the base offset and
/// leader epoch set, then the rest of the stored bytes where they lie (no copy).
pub(crate) fn serve_pieces(stored: &Bytes, base_offset: u64, leader_epoch: u64) -> [Bytes; 2] {
    let split = MAGIC_POS.min(stored.len());
    let mut head = BytesMut::with_capacity(split);
    serve(
        stored.get(..split).unwrap_or_default(),
        base_offset,
        leader_epoch,
        &mut head,
    );
    [head.freeze(), stored.slice(split..)]
}

/// Attribute bit 3: the batch's time is the broker's (LogAppendTime), not the producer's.
const LOG_APPEND_TIME: i16 = 1 << 3;

/// Bytes of `v` as a zigzag varint (Kafka's `varint` and `varlong`).
fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    // At most 10 turns.
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    // At most 10 turns.
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// A length as Kafka writes it (lengths here are bounded by the batch limit, far below 2^31).
fn len_i64(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

/// Appends the records of a batch replog wrote (each with its offset, in order) to `out` as one
/// uncompressed Kafka v2 record batch: see [`encode_native`], which encodes a stored batch's
/// records in place; this one takes decoded records (the tests' model of it).
#[cfg(test)]
fn encode_appended(
    records: &[(u64, Record)],
    leader_epoch: u64,
    timestamp_ms: u64,
    out: &mut BytesMut,
) {
    let (Some((base, _)), Some((last, _))) = (records.first(), records.last()) else {
        return;
    };
    let fields = records.iter().map(|(offset, r)| {
        let headers = r.headers.iter().map(|h| (&h.name[..], &h.value[..]));
        (
            offset.saturating_sub(*base),
            r.key.as_deref(),
            &r.value[..],
            headers,
        )
    });
    let head = BatchHead {
        base: *base,
        last_delta: last.saturating_sub(*base),
        count: records.len(),
        leader_epoch,
        timestamp_ms,
    };
    encode_batch(&head, fields, out);
}

/// Appends a stored batch of replog's own records (`Batch::record_refs`) to `out` as one
/// uncompressed Kafka v2 record batch: the log's append time as LogAppendTime, no producer,
/// partition leader epoch `leader_epoch`, a fresh CRC-32C. Written field by field straight
/// from the stored bytes: no record is decoded into values of its own. Header names that are
/// not UTF-8 go out empty: Kafka's header keys are strings. Writes nothing for no records.
pub(crate) fn encode_native(batch: &crate::segment::record::Batch, out: &mut BytesMut) {
    let count = batch.record_refs().count();
    let Some(last_delta) = (count as u64).checked_sub(1) else {
        return;
    };
    let fields = batch
        .record_refs()
        .enumerate()
        .map(|(i, r)| (i as u64, r.key, r.value, r.headers()));
    let head = BatchHead {
        base: batch.base_offset().get(),
        last_delta,
        count,
        leader_epoch: batch.term().get(),
        timestamp_ms: batch.timestamp_ms(),
    };
    encode_batch(&head, fields, out);
}

/// What a Kafka batch's header says of its records.
struct BatchHead {
    base: u64,
    /// The last record's offset less the first's.
    last_delta: u64,
    count: usize,
    leader_epoch: u64,
    timestamp_ms: u64,
}

/// A record's Kafka header key: its name if it is UTF-8, else empty.
fn header_key(name: &[u8]) -> &[u8] {
    if std::str::from_utf8(name).is_ok() {
        name
    } else {
        &[]
    }
}

/// Writes one Kafka v2 batch of `records`, each its offset delta, key, value and headers.
fn encode_batch<'a, H>(
    head: &BatchHead,
    records: impl Iterator<Item = (u64, Option<&'a [u8]>, &'a [u8], H)>,
    out: &mut BytesMut,
) where
    H: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let start = out.len();
    let timestamp = i64::try_from(head.timestamp_ms).unwrap_or(i64::MAX);
    out.put_i64(i64::try_from(head.base).unwrap_or(i64::MAX));
    out.put_i32(0); // the batch length, set below
    out.put_i32(i32::try_from(head.leader_epoch).unwrap_or(i32::MAX));
    out.put_i8(2);
    out.put_u32(0); // the CRC-32C, set below
    out.put_i16(LOG_APPEND_TIME);
    out.put_i32(i32::try_from(head.last_delta).unwrap_or(i32::MAX));
    out.put_i64(timestamp);
    out.put_i64(timestamp);
    out.put_i64(-1);
    out.put_i16(-1);
    out.put_i32(-1);
    out.put_i32(i32::try_from(head.count).unwrap_or(i32::MAX));
    for (delta, key, value, headers) in records {
        let delta = i64::try_from(delta).unwrap_or(i64::MAX);
        let key_len = key.map_or(-1, |k| len_i64(k.len()));
        let value_len = len_i64(value.len());
        let header_count = len_i64(headers.clone().count());
        let body = 1 // attributes
            + varint_len(0) // timestamp delta
            + varint_len(delta)
            + varint_len(key_len)
            + key.map_or(0, <[u8]>::len)
            + varint_len(value_len)
            + value.len()
            + varint_len(header_count)
            + headers
                .clone()
                .map(|(name, value)| {
                    let n = header_key(name).len();
                    varint_len(len_i64(n)) + n + varint_len(len_i64(value.len())) + value.len()
                })
                .sum::<usize>();
        put_varint(out, len_i64(body));
        out.put_i8(0);
        put_varint(out, 0);
        put_varint(out, delta);
        put_varint(out, key_len);
        if let Some(k) = key {
            out.extend_from_slice(k);
        }
        put_varint(out, value_len);
        out.extend_from_slice(value);
        put_varint(out, header_count);
        for (name, value) in headers {
            let name = header_key(name);
            put_varint(out, len_i64(name.len()));
            out.extend_from_slice(name);
            put_varint(out, len_i64(value.len()));
            out.extend_from_slice(value);
        }
    }
    let batch_len = out.len() - start - BATCH_LENGTH_END;
    if let Some(mut field) = out.get_mut(start + BATCH_LENGTH_POS..start + BATCH_LENGTH_END) {
        field.put_i32(i32::try_from(batch_len).unwrap_or(i32::MAX));
    }
    let crc = out.get(start + ATTRIBUTES_POS..).map_or(0, crc32c::crc32c);
    if let Some(mut field) = out.get_mut(start + CRC_POS..start + ATTRIBUTES_POS) {
        field.put_u32(crc);
    }
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
    let info = check(&data)?;
    let records = decode_records(&Bytes::from(data), &limits)?;
    assert_eq!(
        records.len(),
        info.record_count as usize,
        "check and decode disagree"
    );
    Ok(records.len())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Record as KafkaRecord, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    use super::*;

    const LIMITS: Limits = Limits {
        record_bytes_max: 1 << 20,
        batch_bytes_max: 4 << 20,
    };

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn kafka_record(i: i64, value: Option<Bytes>) -> KafkaRecord {
        let mut headers = IndexMap::new();
        headers.insert(
            StrBytes::from_static_str("h"),
            Some(Bytes::from(format!("{i}"))),
        );
        headers.insert(StrBytes::from_static_str("null"), None);
        KafkaRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 7,
            producer_epoch: 2,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: 40 + i32::try_from(i).unwrap(),
            timestamp: 1_700_000_000_000 + i,
            key: (i % 2 == 0).then(|| Bytes::from(format!("k{i}"))),
            value,
            headers,
        }
    }

    fn batch(records: &[KafkaRecord], compression: Compression) -> Bytes {
        let mut out = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
        out.freeze()
    }

    fn sample(compression: Compression) -> Bytes {
        let records: Vec<KafkaRecord> = (0..5)
            .map(|i| kafka_record(i, (i != 3).then(|| Bytes::from(vec![b'v'; 100]))))
            .collect();
        batch(&records, compression)
    }

    #[test]
    fn every_codec_checks_and_decodes_to_the_same_records() {
        for codec in CODECS {
            let b = sample(codec);
            let info = check(&b).unwrap();
            assert_eq!(info.record_count, 5, "{codec:?}");
            assert_eq!(
                (info.producer_id, info.producer_epoch, info.base_sequence),
                (7, 2, 40)
            );
            assert_eq!(info.codec, codec as i16);
            assert_eq!(info.max_timestamp, 1_700_000_000_004);
            let records = decode_records(&b, &LIMITS).unwrap();
            assert_eq!(records.len(), 5);
            for (i, r) in records.iter().enumerate() {
                assert_eq!(r.key.is_some(), i % 2 == 0, "{codec:?}");
                // A null value reads as an empty one in replog's records.
                let want = if i == 3 { 0 } else { 100 };
                assert_eq!(r.value.len(), want);
                assert_eq!(r.headers.len(), 2);
                assert_eq!(&r.headers[0].value[..], format!("{i}").as_bytes());
                assert!(r.headers[1].value.is_empty());
            }
        }
    }

    /// Kafka's CRC-32C of a batch, recomputed after a test changed a covered byte.
    fn reseal(b: &mut [u8]) {
        let crc = crc32c::crc32c(&b[ATTRIBUTES_POS..]);
        (&mut b[CRC_POS..CRC_POS + 4]).put_u32(crc);
    }

    #[test]
    fn every_broken_rule_is_a_typed_error() {
        let good = sample(Compression::None).to_vec();
        // Every cut.
        for n in 0..good.len() {
            assert!(check(&good[..n]).is_err(), "cut at {n}");
        }
        // Every bit flip after the two fields a broker sets is caught.
        for pos in MAGIC_POS..good.len() {
            let mut bad = good.clone();
            bad[pos] ^= 0x10;
            assert!(check(&bad).is_err(), "flip at {pos}");
        }
        // The base offset and leader epoch are not covered: a broker sets them.
        let mut moved = good.clone();
        moved[3] ^= 1;
        moved[13] ^= 1;
        assert!(check(&moved).is_ok());
        // Rules checked after the CRC.
        let cases: [(usize, &[u8], &str); 5] = [
            (ATTRIBUTES_POS + 1, &[0x10], "transactional"),
            (ATTRIBUTES_POS + 1, &[0x20], "control"),
            (ATTRIBUTES_POS + 1, &[0x05], "codec 5"),
            (LAST_OFFSET_DELTA_POS, &[0, 0, 0, 9], "last delta"),
            (RECORD_COUNT_POS, &[0, 0, 0, 0], "no records"),
        ];
        for (pos, bytes, what) in cases {
            let mut bad = good.clone();
            bad[pos..pos + bytes.len()].copy_from_slice(bytes);
            reseal(&mut bad);
            assert!(
                matches!(check(&bad), Err(CorruptKind::BadKafkaBatch(_))),
                "{what}"
            );
        }
        // Two batches in one payload: the length does not match.
        let mut two = good.clone();
        two.extend_from_slice(&good);
        assert!(matches!(check(&two), Err(CorruptKind::BadKafkaBatch(_))));
        // Records that do not decode inside a valid CRC.
        let mut bad = good.clone();
        bad[BATCH_HEADER_LEN] = 0x7f;
        reseal(&mut bad);
        assert!(check(&bad).is_ok());
        assert!(decode_records(&Bytes::from(bad), &LIMITS).is_err());
    }

    #[test]
    fn decoding_stops_at_the_batch_limit_whatever_the_codec() {
        // 8 MiB of zeros compresses to little; the limit is 1 MiB.
        let records: Vec<KafkaRecord> = (0..8)
            .map(|i| kafka_record(i, Some(Bytes::from(vec![0u8; 1 << 20]))))
            .collect();
        let limits = Limits {
            record_bytes_max: 2 << 20,
            batch_bytes_max: 1 << 20,
        };
        for codec in &CODECS[1..] {
            let b = batch(&records, *codec);
            assert!(b.len() < 1 << 20, "{codec:?} compresses");
            assert!(
                matches!(
                    decode_records(&b, &limits),
                    Err(CorruptKind::LengthOutOfRange { .. })
                ),
                "{codec:?} is refused past the limit"
            );
        }
        // A record over record_bytes_max is refused too.
        let small = Limits {
            record_bytes_max: 50,
            batch_bytes_max: 4 << 20,
        };
        assert!(matches!(
            decode_records(&sample(Compression::Gzip), &small),
            Err(CorruptKind::LengthOutOfRange { .. })
        ));
    }

    #[test]
    fn a_record_count_the_bytes_cannot_hold_is_refused_before_any_allocation() {
        // A valid CRC around a count of i32::MAX: the decoder would reserve room for that
        // many records first.
        for codec in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let mut b = sample(codec).to_vec();
            b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4]
                .copy_from_slice(&[0x7f, 0xff, 0xff, 0xfe]);
            b[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
            reseal(&mut b);
            assert!(
                decode_records(&Bytes::from(b), &LIMITS).is_err(),
                "{codec:?}"
            );
        }
    }

    /// Found by the `kafka_batch` fuzz target: a snappy batch whose one record claims
    /// 2^31 headers made kafka-protocol's decoder reserve 4.4 GB (and abort). Our decoder
    /// checks every count against the bytes left first.
    #[test]
    fn a_header_count_the_record_cannot_hold_is_refused_before_any_allocation() {
        let found = "AAAAAAAAAAAAAACCAAAAAAIyhDsmAAIAAAADAAABi8/laAAAAAGLz+VoAwAAAAAAAAAHAAAAAAAAAAAABIJTTkFQUFkAAAAAAQAAAAEAAAA99gEomgEAAAAEazCAAXb6AQAogq2xOrlQWQACAQEBCyAxmgEABAQEazL+WgAJWhgylgEABgYB/k0ACU0AMw==";
        let bytes = base64_decode(found);
        assert!(fuzz_kafka_batch(&bytes).is_err());
        // And by construction: one record of 4 bytes claiming i32::MAX headers.
        let mut b = sample(Compression::None).to_vec();
        b.truncate(BATCH_HEADER_LEN);
        b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4].copy_from_slice(&[0, 0, 0, 0]);
        b[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&[0, 0, 0, 1]);
        // length 10: attributes, timestamp delta 0, offset delta 0, null key, null value,
        // then a header count of i32::MAX (zigzag 0xFFFFFFFE as a varint).
        b.extend_from_slice(&[20, 0, 0, 0, 1, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f]);
        let len = (b.len() - BATCH_LENGTH_END) as u32;
        (&mut b[BATCH_LENGTH_POS..BATCH_LENGTH_END]).put_u32(len);
        reseal(&mut b);
        assert!(check(&b).is_ok());
        assert!(matches!(
            decode_records(&Bytes::from(b), &LIMITS),
            Err(CorruptKind::BadKafkaBatch(_))
        ));
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u32, 0);
        for c in s.bytes().filter(|c| *c != b'=') {
            let v = alphabet.iter().position(|a| *a == c).unwrap() as u32;
            acc = (acc << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
                acc &= (1 << bits) - 1;
            }
        }
        out
    }

    #[test]
    fn offset_deltas_must_be_dense() {
        let records = [kafka_record(0, None), kafka_record(2, None)];
        let b = batch(&records, Compression::None);
        // The encoder writes last_offset_delta 2 for two records: refused by the count rule.
        assert!(check(&b).is_err());
    }

    #[test]
    fn a_served_batch_keeps_its_bytes_and_crc_with_new_offsets() {
        for codec in CODECS {
            let stored = sample(codec);
            let mut out = BytesMut::new();
            serve(&stored, 1_000, 9, &mut out);
            assert_eq!(out.len(), stored.len());
            assert_eq!(
                out[MAGIC_POS..],
                stored[MAGIC_POS..],
                "verbatim after the epoch"
            );
            assert!(check(&out).is_ok(), "CRC still valid");
            let mut read = out.freeze();
            let set = RecordBatchDecoder::decode(&mut read).unwrap();
            assert_eq!(set.compression, codec);
            let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, vec![1_000, 1_001, 1_002, 1_003, 1_004]);
            assert!(set.records.iter().all(|r| r.partition_leader_epoch == 9));
            assert_eq!(set.records[3].value, None, "a null value stays null");
            assert_eq!(set.records[1].timestamp, 1_700_000_000_001);
        }
    }

    #[test]
    fn replogs_records_go_out_as_a_kafka_batch_any_decoder_reads() {
        let records = vec![
            (
                40u64,
                Record::new("v0")
                    .with_key("k0")
                    .with_header("h", "x")
                    .with_header("", ""),
            ),
            (41, Record::new(Bytes::new())),
            (42, Record::new(vec![b'v'; 300]).with_key(Bytes::new())),
            (
                43,
                Record::new("v3").with_header(Bytes::from_static(&[0xff, 0xfe]), "not utf-8"),
            ),
        ];
        let mut out = BytesMut::from(&b"before"[..]);
        encode_appended(&records, 7, 1_700_000_000_123, &mut out);
        let batch = out.split_off(6).freeze();
        assert_eq!(&out[..], b"before", "appended after what out held");
        let info = check(&batch).unwrap();
        assert_eq!(info.record_count, 4);
        // replog's own decoder.
        let decoded = decode_records(&batch, &LIMITS).unwrap();
        let mut expected: Vec<Record> = records.iter().map(|(_, r)| r.clone()).collect();
        expected[3].headers[0].name = Bytes::new();
        assert_eq!(decoded, expected);
        // kafka-protocol's.
        let mut read = batch.clone();
        let set = RecordBatchDecoder::decode(&mut read).unwrap();
        assert_eq!(set.compression, Compression::None);
        let r = &set.records;
        assert_eq!(
            r.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![40, 41, 42, 43]
        );
        assert!(
            r.iter()
                .all(|r| r.timestamp_type == TimestampType::LogAppend
                    && r.timestamp == 1_700_000_000_123
                    && r.partition_leader_epoch == 7
                    && r.producer_id == -1)
        );
        // kafka-protocol numbers each record from the batch's base sequence, -1 here.
        assert_eq!(r[0].sequence, -1);
        assert_eq!(r[0].key.as_deref(), Some(&b"k0"[..]));
        assert_eq!(r[1].key, None);
        assert_eq!(
            r[2].key.as_deref(),
            Some(&b""[..]),
            "an empty key is not null"
        );
        assert_eq!(r[2].value.as_deref().map(<[u8]>::len), Some(300));
        assert_eq!(r[0].headers.len(), 2);
        assert_eq!(r[3].headers.keys().next().map(|k| k.as_str()), Some(""));
        // Nothing at all for no records.
        let mut none = BytesMut::new();
        encode_appended(&[], 7, 0, &mut none);
        assert!(none.is_empty());
    }

    /// A stored batch encoded in place is the batch its decoded records encode to.
    #[test]
    fn a_stored_batch_encodes_in_place_as_its_decoded_records_do() {
        let dir = tempfile::tempdir().unwrap();
        let log = crate::PartitionLog::open(dir.path(), crate::LogConfig::default()).unwrap();
        let batches: Vec<Vec<Record>> = vec![
            vec![
                Record::new("v0")
                    .with_key("k0")
                    .with_header("h", "x")
                    .with_header("", ""),
                Record::new(Bytes::new()),
                Record::new(vec![b'v'; 300]).with_key(Bytes::new()),
                Record::new("v3").with_header(Bytes::from_static(&[0xff, 0xfe]), "not utf-8"),
            ],
            vec![Record::new(vec![7u8; 1024])],
        ];
        for records in &batches {
            log.append(records).unwrap();
        }
        let stored = log.read(crate::types::Offset(0), 1 << 20).unwrap();
        assert_eq!(stored.len(), 2);
        for b in &stored {
            let decoded: Vec<(u64, Record)> = b.records().map(|(o, r)| (o.get(), r)).collect();
            let mut model = BytesMut::new();
            encode_appended(&decoded, b.term().get(), b.timestamp_ms(), &mut model);
            let mut in_place = BytesMut::new();
            encode_native(b, &mut in_place);
            assert_eq!(in_place, model);
            assert_eq!(
                check(&in_place).unwrap().record_count as usize,
                decoded.len()
            );
        }
    }
}
