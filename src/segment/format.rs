//! Layout constants and helpers for the on-disk format, which is specified byte by byte in
//! `FORMAT.md` beside this file (rendered as [`crate::format`](mod@crate::format)).
//!
//! Every position below is derived from the previous one and a field width, in the order of the
//! tables above; `const` assertions pin the totals. The helpers here read and write fixed-width
//! little-endian fields and never panic: a read past the end of a slice is `None`.

use crate::error::CorruptKind;

/// Magic bytes at position 0 of every segment file.
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"replog\x1a\n";
/// Magic bytes at position 0 of every index file.
pub(crate) const INDEX_MAGIC: [u8; 8] = *b"replidx\n";
/// The format version this build writes (FORMAT.md §9): 4, which added gap frames.
pub(crate) const FORMAT_VERSION: u16 = 4;
/// The first format version whose segments may hold Kafka batches (the `KAFKA` frame flag).
pub(crate) const FORMAT_VERSION_KAFKA: u16 = 2;
/// The first format version whose segments may hold compacted frames (the `COMPACTED` frame
/// flag) and carry the `COMPACTED` segment flag.
pub(crate) const FORMAT_VERSION_COMPACTED: u16 = 3;
/// The first format version whose segments may hold gap frames (`kind = 3`, FORMAT.md §4.3).
pub(crate) const FORMAT_VERSION_GAP: u16 = 4;
/// The index format version this build writes and reads (FORMAT.md §5, §9): 3, whose entries
/// carry a time. An index of an earlier version is rebuilt from its segment, as any index that
/// does not check out is.
pub(crate) const INDEX_VERSION: u16 = 3;
/// The oldest format version this build reads: version 1 segments hold no Kafka batches.
pub(crate) const FORMAT_VERSION_MIN: u16 = 1;
/// Frame flag: the payload is one Kafka record batch (FORMAT.md §4.2). Written only into
/// segments of version 2 or later, so that a build that predates it refuses the segment
/// (`UnsupportedVersion`) instead of taking the frame for a torn one.
pub(crate) const FRAME_FLAG_KAFKA: u8 = 1;
/// Frame flag: compaction removed records from this data frame (FORMAT.md §4.3): its payload
/// holds the records that remain, each with its offset, and `record_count` is still the number
/// of offsets the frame spans. Written only into segments of version 3 or later.
pub(crate) const FRAME_FLAG_COMPACTED: u8 = 2;

// ---- Segment header (FORMAT.md §3) ----
pub(crate) const SEG_MAGIC_POS: usize = 0;
pub(crate) const SEG_VERSION_POS: usize = SEG_MAGIC_POS + SEGMENT_MAGIC.len();
pub(crate) const SEG_FLAGS_POS: usize = SEG_VERSION_POS + size_of::<u16>();
pub(crate) const SEG_BASE_LOG_INDEX_POS: usize = SEG_FLAGS_POS + size_of::<u16>();
pub(crate) const SEG_BASE_OFFSET_POS: usize = SEG_BASE_LOG_INDEX_POS + size_of::<u64>();
pub(crate) const SEG_CRC_POS: usize = SEG_BASE_OFFSET_POS + size_of::<u64>();
/// Length of the segment header; the first frame starts here.
pub(crate) const SEGMENT_HEADER_LEN: usize = SEG_CRC_POS + size_of::<u32>();
const _: () = assert!(SEGMENT_HEADER_LEN == 32, "FORMAT.md §3 says 32 bytes");

// ---- Frame header (FORMAT.md §4) ----
pub(crate) const FRAME_BODY_LEN_POS: usize = 0;
pub(crate) const FRAME_CRC_POS: usize = FRAME_BODY_LEN_POS + size_of::<u32>();
/// The CRC covers everything from here to the end of the frame.
pub(crate) const FRAME_LOG_INDEX_POS: usize = FRAME_CRC_POS + size_of::<u32>();
pub(crate) const FRAME_TERM_POS: usize = FRAME_LOG_INDEX_POS + size_of::<u64>();
pub(crate) const FRAME_BASE_OFFSET_POS: usize = FRAME_TERM_POS + size_of::<u64>();
pub(crate) const FRAME_RECORD_COUNT_POS: usize = FRAME_BASE_OFFSET_POS + size_of::<u64>();
pub(crate) const FRAME_KIND_POS: usize = FRAME_RECORD_COUNT_POS + size_of::<u32>();
pub(crate) const FRAME_FLAGS_POS: usize = FRAME_KIND_POS + size_of::<u8>();
pub(crate) const FRAME_PRODUCER_EPOCH_POS: usize = FRAME_FLAGS_POS + size_of::<u8>();
pub(crate) const FRAME_TIMESTAMP_POS: usize = FRAME_PRODUCER_EPOCH_POS + size_of::<u16>();
pub(crate) const FRAME_PRODUCER_ID_POS: usize = FRAME_TIMESTAMP_POS + size_of::<u64>();
pub(crate) const FRAME_BASE_SEQUENCE_POS: usize = FRAME_PRODUCER_ID_POS + size_of::<u64>();
pub(crate) const FRAME_RESERVED2_POS: usize = FRAME_BASE_SEQUENCE_POS + size_of::<u32>();
/// Length of the fixed frame header; the payload starts here.
pub(crate) const FRAME_HEADER_LEN: usize = FRAME_RESERVED2_POS + size_of::<u32>();
/// The smallest legal `body_len`: the fixed fields after the CRC.
pub(crate) const FRAME_BODY_FIXED_LEN: usize = FRAME_HEADER_LEN - FRAME_LOG_INDEX_POS;
const _: () = assert!(FRAME_HEADER_LEN == 64, "FORMAT.md §4 says 64 bytes");
/// The end-of-data mark the writer keeps after a segment's last frame when it fits: a zero
/// `body_len` (FORMAT.md §7).
pub(crate) const END_MARK: [u8; size_of::<u32>()] = [0; size_of::<u32>()];
const _: () = assert!(FRAME_BODY_FIXED_LEN == 56, "FORMAT.md §4: body_len >= 56");

// ---- Record (FORMAT.md §4.1) ----
pub(crate) const RECORD_KEY_LEN_POS: usize = 0;
pub(crate) const RECORD_VALUE_LEN_POS: usize = RECORD_KEY_LEN_POS + size_of::<u32>();
pub(crate) const RECORD_HEADER_COUNT_POS: usize = RECORD_VALUE_LEN_POS + size_of::<u32>();
/// Fixed part of a record; the key starts here.
pub(crate) const RECORD_FIXED_LEN: usize = RECORD_HEADER_COUNT_POS + size_of::<u16>();
/// Fixed part of one record header: `name_len: u16`, `value_len: u32`.
pub(crate) const RECORD_HEADER_FIXED_LEN: usize = size_of::<u16>() + size_of::<u32>();
/// `key_len` value that means "no key".
pub(crate) const NULL_KEY_LEN: u32 = u32::MAX;
const _: () = assert!(RECORD_FIXED_LEN == 10);
const _: () = assert!(RECORD_HEADER_FIXED_LEN == 6);

// ---- Index (FORMAT.md §5) ----
pub(crate) const IDX_MAGIC_POS: usize = 0;
pub(crate) const IDX_VERSION_POS: usize = IDX_MAGIC_POS + INDEX_MAGIC.len();
pub(crate) const IDX_FLAGS_POS: usize = IDX_VERSION_POS + size_of::<u16>();
pub(crate) const IDX_ENTRY_COUNT_POS: usize = IDX_FLAGS_POS + size_of::<u16>();
pub(crate) const IDX_BASE_LOG_INDEX_POS: usize = IDX_ENTRY_COUNT_POS + size_of::<u32>();
pub(crate) const IDX_DATA_LEN_POS: usize = IDX_BASE_LOG_INDEX_POS + size_of::<u64>();
pub(crate) const IDX_NEXT_LOG_INDEX_POS: usize = IDX_DATA_LEN_POS + size_of::<u64>();
pub(crate) const IDX_NEXT_OFFSET_POS: usize = IDX_NEXT_LOG_INDEX_POS + size_of::<u64>();
pub(crate) const IDX_MAX_TIMESTAMP_POS: usize = IDX_NEXT_OFFSET_POS + size_of::<u64>();
pub(crate) const IDX_LAST_TERM_POS: usize = IDX_MAX_TIMESTAMP_POS + size_of::<u64>();
pub(crate) const IDX_RESERVED_POS: usize = IDX_LAST_TERM_POS + size_of::<u64>();
pub(crate) const IDX_CRC_POS: usize = IDX_RESERVED_POS + size_of::<u32>();
pub(crate) const INDEX_HEADER_LEN: usize = IDX_CRC_POS + size_of::<u32>();
pub(crate) const INDEX_ENTRY_LEN: usize = 3 * size_of::<u32>() + size_of::<i64>();
const _: () = assert!(INDEX_HEADER_LEN == 72, "FORMAT.md §5 says 72 bytes");
const _: () = assert!(INDEX_ENTRY_LEN == 20);

/// Largest segment file replog accepts: positions are stored as `u32` in the index.
pub(crate) const SEGMENT_BYTES_LIMIT: u64 = u32::MAX as u64;

/// Frame `kind` values (FORMAT.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A batch of user records; takes `record_count` offsets.
    Data = 1,
    /// An entry of the layer above (e.g. Raft membership); takes no offsets.
    Control = 2,
    /// A run of data entries compaction emptied, collapsed into one frame (FORMAT.md §4.3):
    /// it stands for `entries` log entries and spans `record_count` offsets.
    Gap = 3,
}

/// How a data frame's payload is encoded (FORMAT.md §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PayloadFormat {
    /// replog's records (§4.1).
    #[default]
    Replog,
    /// One Kafka record batch, magic 2, as its producer sent it (§4.2).
    Kafka,
}

impl EntryKind {
    pub(crate) fn from_u8(v: u8) -> Result<Self, CorruptKind> {
        match v {
            1 => Ok(EntryKind::Data),
            2 => Ok(EntryKind::Control),
            3 => Ok(EntryKind::Gap),
            other => Err(CorruptKind::UnknownEntryKind(other)),
        }
    }
}

/// Reads a little-endian `u16` at `pos`, or `None` past the end.
pub(crate) fn get_u16(buf: &[u8], pos: usize) -> Option<u16> {
    let bytes = buf.get(pos..pos.checked_add(2)?)?;
    Some(u16::from_le_bytes(bytes.try_into().ok()?))
}

/// Reads a little-endian `u32` at `pos`, or `None` past the end.
pub(crate) fn get_u32(buf: &[u8], pos: usize) -> Option<u32> {
    let bytes = buf.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// Reads a little-endian `u64` at `pos`, or `None` past the end.
pub(crate) fn get_u64(buf: &[u8], pos: usize) -> Option<u64> {
    let bytes = buf.get(pos..pos.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Reads a little-endian `i64` at `pos`, or `None` past the end.
pub(crate) fn get_i64(buf: &[u8], pos: usize) -> Option<i64> {
    let bytes = buf.get(pos..pos.checked_add(8)?)?;
    Some(i64::from_le_bytes(bytes.try_into().ok()?))
}

/// Writes `bytes` at `pos`. Callers size `buf` from the layout constants; a write that does not
/// fit is a bug in replog, not bad input, hence the assertion.
pub(crate) fn put(buf: &mut [u8], pos: usize, bytes: &[u8]) {
    let end = pos + bytes.len();
    assert!(
        end <= buf.len(),
        "layout bug: write of {} at {pos} into {}",
        bytes.len(),
        buf.len()
    );
    #[expect(clippy::indexing_slicing, reason = "bounds asserted on the line above")]
    buf[pos..end].copy_from_slice(bytes);
}

/// The decoded segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// [`FORMAT_VERSION`] for every segment this build creates.
    pub(crate) version: u16,
    pub(crate) base_log_index: u64,
    pub(crate) base_offset: u64,
    /// [`SEG_FLAG_RESTART`]: the log restarts here; every older segment is being deleted.
    pub(crate) restart: bool,
    /// [`SEG_FLAG_COMPACTED`]: compaction wrote this segment.
    pub(crate) compacted: bool,
}

/// Segment header flag: the log restarts at this segment (after a Raft snapshot install or a
/// purge past the end); any older segment found next to it is left over from an interrupted
/// reset and is deleted on open.
pub(crate) const SEG_FLAG_RESTART: u16 = 1;
/// Segment header flag: compaction wrote this segment (FORMAT.md §4.3), so it holds only
/// the latest record of each key as of its compaction; a segment without it is "dirty".
pub(crate) const SEG_FLAG_COMPACTED: u16 = 2;

impl SegmentHeader {
    /// Encodes the header (FORMAT.md §3).
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut buf = [0u8; SEGMENT_HEADER_LEN];
        put(&mut buf, SEG_MAGIC_POS, &SEGMENT_MAGIC);
        put(&mut buf, SEG_VERSION_POS, &self.version.to_le_bytes());
        let mut flags = if self.restart { SEG_FLAG_RESTART } else { 0 };
        if self.compacted {
            flags |= SEG_FLAG_COMPACTED;
        }
        put(&mut buf, SEG_FLAGS_POS, &flags.to_le_bytes());
        put(
            &mut buf,
            SEG_BASE_LOG_INDEX_POS,
            &self.base_log_index.to_le_bytes(),
        );
        put(
            &mut buf,
            SEG_BASE_OFFSET_POS,
            &self.base_offset.to_le_bytes(),
        );
        let crc = crc32fast::hash(buf.get(..SEG_CRC_POS).unwrap_or_default());
        put(&mut buf, SEG_CRC_POS, &crc.to_le_bytes());
        debug_assert_eq!(
            Self::decode(&buf),
            Ok(*self),
            "header must decode to what was encoded"
        );
        buf
    }

    /// Decodes and checks a segment header, in the order given in FORMAT.md §6.
    ///
    /// # Panics
    ///
    /// Never, for any input.
    pub(crate) fn decode(buf: &[u8]) -> Result<Self, CorruptKind> {
        let header = buf
            .get(..SEGMENT_HEADER_LEN)
            .ok_or(CorruptKind::Truncated)?;
        if header.get(..SEGMENT_MAGIC.len()) != Some(&SEGMENT_MAGIC[..]) {
            return Err(CorruptKind::BadMagic);
        }
        let version = get_u16(header, SEG_VERSION_POS).ok_or(CorruptKind::Truncated)?;
        if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version) {
            return Err(CorruptKind::UnsupportedVersion(version));
        }
        let flags = get_u16(header, SEG_FLAGS_POS).ok_or(CorruptKind::Truncated)?;
        if flags & !(SEG_FLAG_RESTART | SEG_FLAG_COMPACTED) != 0 {
            return Err(CorruptKind::NonZeroReserved);
        }
        let expected = get_u32(header, SEG_CRC_POS).ok_or(CorruptKind::Truncated)?;
        let actual = crc32fast::hash(header.get(..SEG_CRC_POS).unwrap_or_default());
        if expected != actual {
            return Err(CorruptKind::ChecksumMismatch { expected, actual });
        }
        Ok(SegmentHeader {
            version,
            base_log_index: get_u64(header, SEG_BASE_LOG_INDEX_POS)
                .ok_or(CorruptKind::Truncated)?,
            base_offset: get_u64(header, SEG_BASE_OFFSET_POS).ok_or(CorruptKind::Truncated)?,
            restart: flags & SEG_FLAG_RESTART != 0,
            compacted: flags & SEG_FLAG_COMPACTED != 0,
        })
    }
}

/// The file name of the segment whose first frame has `base_log_index`.
pub(crate) fn segment_file_name(base_log_index: u64) -> String {
    format!("{base_log_index:020}.log")
}

/// The file name of the index of the segment with `base_log_index`.
pub(crate) fn index_file_name(base_log_index: u64) -> String {
    format!("{base_log_index:020}.index")
}

/// Parses a segment file name back to its base log index; `None` for any other name.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = SegmentHeader {
            version: FORMAT_VERSION,
            base_log_index: 7,
            base_offset: u64::MAX - 1,
            restart: true,
            compacted: true,
        };
        assert_eq!(SegmentHeader::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn header_corruption_kinds() {
        let good = SegmentHeader {
            version: FORMAT_VERSION,
            base_log_index: 1,
            base_offset: 2,
            restart: false,
            compacted: false,
        }
        .encode();
        assert_eq!(
            SegmentHeader::decode(&good[..31]),
            Err(CorruptKind::Truncated)
        );
        assert_eq!(SegmentHeader::decode(&[]), Err(CorruptKind::Truncated));

        let mut bad = good;
        bad[0] ^= 1;
        assert_eq!(SegmentHeader::decode(&bad), Err(CorruptKind::BadMagic));

        let mut bad = good;
        bad[SEG_VERSION_POS] = 9;
        assert_eq!(
            SegmentHeader::decode(&bad),
            Err(CorruptKind::UnsupportedVersion(9))
        );

        // A version-1 header (before Kafka batches) still reads, as version 1.
        let old = SegmentHeader {
            version: 1,
            base_log_index: 1,
            base_offset: 2,
            restart: false,
            compacted: false,
        };
        assert_eq!(SegmentHeader::decode(&old.encode()), Ok(old));
        for version in [0u16, FORMAT_VERSION + 1] {
            let mut bad = good;
            put(&mut bad, SEG_VERSION_POS, &version.to_le_bytes());
            let crc = crc32fast::hash(&bad[..SEG_CRC_POS]);
            put(&mut bad, SEG_CRC_POS, &crc.to_le_bytes());
            assert_eq!(
                SegmentHeader::decode(&bad),
                Err(CorruptKind::UnsupportedVersion(version))
            );
        }

        let mut bad = good;
        bad[SEG_FLAGS_POS] = 4;
        assert_eq!(
            SegmentHeader::decode(&bad),
            Err(CorruptKind::NonZeroReserved)
        );

        let mut bad = good;
        bad[SEG_BASE_OFFSET_POS] ^= 0x80;
        assert!(matches!(
            SegmentHeader::decode(&bad),
            Err(CorruptKind::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn file_names_sort_and_parse() {
        assert_eq!(segment_file_name(42), "00000000000000000042.log");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_file_name("42.log"), None);
        assert_eq!(parse_segment_file_name("0000000000000000004x.log"), None);
        assert_eq!(parse_segment_file_name("00000000000000000042.index"), None);
        assert!(segment_file_name(9) < segment_file_name(10));
    }
}
