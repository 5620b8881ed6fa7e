//! The sparse offset and time index: pure encode/decode of the `.index` file and lookups
//! (FORMAT.md §5).
//!
//! The index is derived data. [`IndexFile::decode`] checks every field it can; whatever it
//! cannot check (that positions point at the frames they claim) the caller spot-checks against
//! the segment, and any failure means "scan the segment and rebuild", never an error.

use crate::error::CorruptKind;
use crate::segment::format::{
    IDX_BASE_LOG_INDEX_POS, IDX_CRC_POS, IDX_DATA_LEN_POS, IDX_ENTRY_COUNT_POS, IDX_FLAGS_POS,
    IDX_LAST_TERM_POS, IDX_MAGIC_POS, IDX_MAX_TIMESTAMP_POS, IDX_NEXT_LOG_INDEX_POS,
    IDX_NEXT_OFFSET_POS, IDX_RESERVED_POS, IDX_VERSION_POS, INDEX_ENTRY_LEN, INDEX_HEADER_LEN,
    INDEX_MAGIC, INDEX_VERSION, SEGMENT_HEADER_LEN, get_i64, get_u16, get_u32, get_u64, put,
};

/// The time of no record: what [`IndexEntry::time_before`] is when no record comes before.
pub(crate) const NO_TIME: i64 = i64::MIN;

/// One sparse index entry: where the frame with a given log index and first offset starts,
/// and the largest record timestamp before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub(crate) rel_log_index: u32,
    pub(crate) rel_offset: u32,
    pub(crate) position: u32,
    /// The largest record timestamp of the segment's frames before this entry's frame
    /// ([`NO_TIME`] if none): every record there is of this time or earlier, so a lookup by
    /// time may start at the last entry whose `time_before` is earlier than the time sought.
    pub(crate) time_before: i64,
}

/// The contents of an index file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexFile {
    pub(crate) base_log_index: u64,
    pub(crate) data_len: u64,
    pub(crate) next_log_index: u64,
    pub(crate) next_offset: u64,
    pub(crate) max_timestamp_ms: u64,
    pub(crate) last_term: u64,
    pub(crate) entries: Vec<IndexEntry>,
}

impl IndexFile {
    /// Encodes the whole file.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let count = u32::try_from(self.entries.len()).expect("entries are bounded by a u32 size");
        let mut buf = vec![0u8; INDEX_HEADER_LEN + self.entries.len() * INDEX_ENTRY_LEN];
        put(&mut buf, IDX_MAGIC_POS, &INDEX_MAGIC);
        put(&mut buf, IDX_VERSION_POS, &INDEX_VERSION.to_le_bytes());
        put(&mut buf, IDX_FLAGS_POS, &0u16.to_le_bytes());
        put(&mut buf, IDX_ENTRY_COUNT_POS, &count.to_le_bytes());
        put(
            &mut buf,
            IDX_BASE_LOG_INDEX_POS,
            &self.base_log_index.to_le_bytes(),
        );
        put(&mut buf, IDX_DATA_LEN_POS, &self.data_len.to_le_bytes());
        put(
            &mut buf,
            IDX_NEXT_LOG_INDEX_POS,
            &self.next_log_index.to_le_bytes(),
        );
        put(
            &mut buf,
            IDX_NEXT_OFFSET_POS,
            &self.next_offset.to_le_bytes(),
        );
        put(
            &mut buf,
            IDX_MAX_TIMESTAMP_POS,
            &self.max_timestamp_ms.to_le_bytes(),
        );
        put(&mut buf, IDX_LAST_TERM_POS, &self.last_term.to_le_bytes());
        put(&mut buf, IDX_RESERVED_POS, &0u32.to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            let pos = INDEX_HEADER_LEN + i * INDEX_ENTRY_LEN;
            put(&mut buf, pos, &e.rel_log_index.to_le_bytes());
            put(&mut buf, pos + 4, &e.rel_offset.to_le_bytes());
            put(&mut buf, pos + 8, &e.position.to_le_bytes());
            put(&mut buf, pos + 12, &e.time_before.to_le_bytes());
        }
        let crc = index_crc(&buf);
        put(&mut buf, IDX_CRC_POS, &crc.to_le_bytes());
        buf
    }

    /// Decodes and checks an index file for the segment with `base_log_index` whose file is
    /// `segment_len` bytes long.
    ///
    /// # Panics
    ///
    /// Never, for any input.
    pub(crate) fn decode(
        buf: &[u8],
        base_log_index: u64,
        segment_len: u64,
    ) -> Result<IndexFile, CorruptKind> {
        let header = buf.get(..INDEX_HEADER_LEN).ok_or(CorruptKind::Truncated)?;
        if header.get(..INDEX_MAGIC.len()) != Some(&INDEX_MAGIC[..]) {
            return Err(CorruptKind::BadMagic);
        }
        let version = get_u16(header, IDX_VERSION_POS).ok_or(CorruptKind::Truncated)?;
        if version != INDEX_VERSION {
            return Err(CorruptKind::UnsupportedVersion(version));
        }
        if get_u16(header, IDX_FLAGS_POS) != Some(0) || get_u32(header, IDX_RESERVED_POS) != Some(0)
        {
            return Err(CorruptKind::NonZeroReserved);
        }
        let count = get_u32(header, IDX_ENTRY_COUNT_POS).ok_or(CorruptKind::Truncated)?;
        let expected_len = u64::from(count) * INDEX_ENTRY_LEN as u64 + INDEX_HEADER_LEN as u64;
        if buf.len() as u64 != expected_len {
            return Err(CorruptKind::LengthOutOfRange {
                len: buf.len() as u64,
                max: expected_len,
            });
        }
        let expected = get_u32(header, IDX_CRC_POS).ok_or(CorruptKind::Truncated)?;
        let actual = index_crc(buf);
        if expected != actual {
            return Err(CorruptKind::ChecksumMismatch { expected, actual });
        }
        let field = |pos| get_u64(header, pos).ok_or(CorruptKind::Truncated);
        let file = IndexFile {
            base_log_index: field(IDX_BASE_LOG_INDEX_POS)?,
            data_len: field(IDX_DATA_LEN_POS)?,
            next_log_index: field(IDX_NEXT_LOG_INDEX_POS)?,
            next_offset: field(IDX_NEXT_OFFSET_POS)?,
            max_timestamp_ms: field(IDX_MAX_TIMESTAMP_POS)?,
            last_term: field(IDX_LAST_TERM_POS)?,
            entries: decode_entries(buf.get(INDEX_HEADER_LEN..).unwrap_or_default())?,
        };
        if file.base_log_index != base_log_index {
            return Err(CorruptKind::BaseMismatch {
                expected: base_log_index,
                found: file.base_log_index,
            });
        }
        if file.data_len < SEGMENT_HEADER_LEN as u64 || file.data_len > segment_len {
            return Err(CorruptKind::LengthOutOfRange {
                len: file.data_len,
                max: segment_len,
            });
        }
        if file.next_log_index < base_log_index {
            return Err(CorruptKind::LogIndexGap {
                expected: base_log_index,
                found: file.next_log_index,
            });
        }
        check_entries(&file)?;
        Ok(file)
    }
}

/// CRC-32 of the header up to the CRC field, then every entry.
fn index_crc(buf: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(buf.get(..IDX_CRC_POS).unwrap_or_default());
    h.update(buf.get(INDEX_HEADER_LEN..).unwrap_or_default());
    h.finalize()
}

fn decode_entries(bytes: &[u8]) -> Result<Vec<IndexEntry>, CorruptKind> {
    bytes
        .chunks_exact(INDEX_ENTRY_LEN)
        .map(|c| {
            Ok(IndexEntry {
                rel_log_index: get_u32(c, 0).ok_or(CorruptKind::Truncated)?,
                rel_offset: get_u32(c, 4).ok_or(CorruptKind::Truncated)?,
                position: get_u32(c, 8).ok_or(CorruptKind::Truncated)?,
                time_before: get_i64(c, 12).ok_or(CorruptKind::Truncated)?,
            })
        })
        .collect()
}

/// Entries must start at the first frame (with no time before it), increase (their times do
/// not decrease), and stay below `data_len` and the segment's log index range.
fn check_entries(file: &IndexFile) -> Result<(), CorruptKind> {
    let frames = file.next_log_index - file.base_log_index;
    let has_frames = frames > 0;
    match file.entries.first() {
        None if has_frames => return Err(CorruptKind::Truncated),
        Some(_) if !has_frames => return Err(CorruptKind::BadRecord),
        Some(first)
            if first.position as usize != SEGMENT_HEADER_LEN
                || first.rel_log_index != 0
                || first.time_before != NO_TIME =>
        {
            return Err(CorruptKind::BadRecord);
        }
        _ => {}
    }
    for pair in file.entries.windows(2) {
        let [a, b] = pair else { continue };
        if b.rel_log_index <= a.rel_log_index
            || b.position <= a.position
            || b.rel_offset < a.rel_offset
            || b.time_before < a.time_before
        {
            return Err(CorruptKind::BadRecord);
        }
    }
    if let Some(last) = file.entries.last()
        && (u64::from(last.position) >= file.data_len || u64::from(last.rel_log_index) >= frames)
    {
        return Err(CorruptKind::BadRecord);
    }
    Ok(())
}

/// The last entry at or before the frame that holds relative offset `rel_offset`: the place to
/// start scanning for it. `None` if the index is empty.
pub(crate) fn floor_by_offset(entries: &[IndexEntry], rel_offset: u64) -> Option<&IndexEntry> {
    let n = entries.partition_point(|e| u64::from(e.rel_offset) <= rel_offset);
    entries.get(n.checked_sub(1)?)
}

/// The last entry whose `time_before` is earlier than `time`: where a scan for the first record
/// of `time` or later starts (no record before it is that late). `None` if the index is empty.
pub(crate) fn floor_by_time(entries: &[IndexEntry], time: i64) -> Option<&IndexEntry> {
    let n = entries.partition_point(|e| e.time_before < time);
    entries.get(n.checked_sub(1)?)
}

/// The last entry at or before relative log index `rel_log_index`.
pub(crate) fn floor_by_log_index(
    entries: &[IndexEntry],
    rel_log_index: u64,
) -> Option<&IndexEntry> {
    let n = entries.partition_point(|e| u64::from(e.rel_log_index) <= rel_log_index);
    entries.get(n.checked_sub(1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> IndexFile {
        IndexFile {
            base_log_index: 100,
            data_len: 5000,
            next_log_index: 110,
            next_offset: 900,
            max_timestamp_ms: 77,
            last_term: 3,
            entries: vec![
                IndexEntry {
                    rel_log_index: 0,
                    rel_offset: 0,
                    position: 32,
                    time_before: NO_TIME,
                },
                IndexEntry {
                    rel_log_index: 4,
                    rel_offset: 40,
                    position: 2000,
                    time_before: -1,
                },
                IndexEntry {
                    rel_log_index: 5,
                    rel_offset: 40,
                    position: 2100,
                    time_before: 50,
                },
                IndexEntry {
                    rel_log_index: 9,
                    rel_offset: 70,
                    position: 4000,
                    time_before: 50,
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let f = sample();
        assert_eq!(IndexFile::decode(&f.encode(), 100, 8192), Ok(f));
    }

    #[test]
    fn every_bit_flip_is_rejected() {
        let buf = sample().encode();
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    IndexFile::decode(&bad, 100, 8192).is_err(),
                    "flip at {byte}:{bit}"
                );
            }
        }
    }

    #[test]
    fn inconsistent_contents_are_rejected() {
        let check = |f: IndexFile| IndexFile::decode(&f.encode(), 100, 8192);
        assert!(matches!(
            check(IndexFile {
                base_log_index: 1,
                ..sample()
            }),
            Err(CorruptKind::BaseMismatch { .. })
        ));
        assert!(
            check(IndexFile {
                data_len: 9000,
                ..sample()
            })
            .is_err()
        );
        assert!(
            check(IndexFile {
                data_len: 10,
                ..sample()
            })
            .is_err()
        );
        assert!(
            check(IndexFile {
                next_log_index: 105,
                ..sample()
            })
            .is_err()
        );
        let mut f = sample();
        f.entries.swap(1, 2);
        assert!(check(f).is_err());
        let mut f = sample();
        f.entries[0].position = 40;
        assert!(check(f).is_err());
        let mut f = sample();
        f.entries.clear();
        assert!(check(f).is_err());
        let mut f = sample();
        f.entries[0].time_before = 0;
        assert!(check(f).is_err(), "a time before the first frame");
        let mut f = sample();
        f.entries[3].time_before = 49;
        assert!(check(f).is_err(), "a time that decreases");
        assert!(IndexFile::decode(&sample().encode()[..70], 100, 8192).is_err());
        assert!(IndexFile::decode(&[], 100, 8192).is_err());
    }

    #[test]
    fn floor_lookups() {
        let e = sample().entries;
        assert_eq!(floor_by_offset(&e, 0).unwrap().position, 32);
        assert_eq!(floor_by_offset(&e, 39).unwrap().position, 32);
        assert_eq!(floor_by_offset(&e, 40).unwrap().position, 2100);
        assert_eq!(floor_by_offset(&e, 1000).unwrap().position, 4000);
        assert_eq!(floor_by_log_index(&e, 4).unwrap().position, 2000);
        assert_eq!(floor_by_log_index(&e, 8).unwrap().position, 2100);
        assert!(floor_by_offset(&[], 3).is_none());
        assert_eq!(floor_by_time(&e, 0).unwrap().position, 2000);
        assert_eq!(floor_by_time(&e, 50).unwrap().position, 2000);
        assert_eq!(floor_by_time(&e, 51).unwrap().position, 4000);
        assert_eq!(floor_by_time(&e, i64::MIN + 1).unwrap().position, 32);
        assert!(floor_by_time(&[], 3).is_none());
    }
}
