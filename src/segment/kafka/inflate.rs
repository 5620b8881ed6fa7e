//! A Kafka batch's records decompressed ([`records_bytes`]), whatever the codec (gzip, snappy
//! in raw or Xerial framing, lz4, zstd), and never past the batch limit: decompression stops
//! there, so a small batch that inflates to gigabytes is refused with little memory spent.

use std::io::Read;

use bytes::Bytes;
use kafka_protocol::records::Compression;

use super::{BATCH_HEADER_LEN, KafkaBatchInfo, bad, be_u32};
use crate::error::CorruptKind;
use crate::segment::frame::Limits;

/// The records' bytes of a batch whose header passed, decompressed, at most
/// `limits.batch_bytes_max` of them; an uncompressed batch's are a slice of `b`.
pub(super) fn records_bytes(
    b: &Bytes,
    info: &KafkaBatchInfo,
    limits: &Limits,
) -> Result<Bytes, CorruptKind> {
    let cap = usize::try_from(limits.batch_bytes_max).unwrap_or(usize::MAX);
    let codec = match info.codec {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        _ => Compression::Zstd,
    };
    let mut compressed = b.slice(BATCH_HEADER_LEN.min(b.len())..);
    inflate(&mut compressed, codec, cap).map_err(|e| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            CorruptKind::LengthOutOfRange {
                len: u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1),
                max: u64::from(limits.batch_bytes_max),
            }
        } else {
            tracing::debug!(error = %e, "a kafka batch that does not decompress");
            bad("records do not decompress")
        }
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

#[cfg(test)]
mod tests;
