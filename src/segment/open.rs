//! Opening existing segments when a log opens (FORMAT.md §7): checking each file's size and
//! header, trusting or rebuilding its index, and recovering it: a sealed segment whole, torn
//! (the log's tail) or corrupt; the active segment cut at the end of its valid data.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::format::{
    FRAME_HEADER_LEN, SEGMENT_BYTES_LIMIT, SEGMENT_HEADER_LEN, SegmentHeader, index_file_name,
    segment_file_name,
};
use super::frame::{Limits, decode_frame};
use super::index::{IndexFile, NO_TIME};
use super::mmap::{MappedFile, WriteHandle};
use super::scan::{scan_from_entry, scan_segment};
use super::{
    Cursor, RecoveryEvent, ScanStop, Segment, SegmentOptions, SegmentState, corrupt, format,
};
use crate::env::{FaultPoint, sync_dir};
use crate::error::{CorruptKind, Result};

/// What opening a sealed segment found.
#[derive(Debug)]
pub(crate) enum Sealed {
    /// A whole segment.
    Open(Arc<Segment>),
    /// A segment that was still being synced when the process stopped, and whose valid data
    /// ends before the next segment's base: it becomes the log's end.
    TornTail(RecoveryEvent),
}

impl Segment {
    /// Opens a sealed segment (any but the last). `next_base` is the next segment's base log
    /// index; `prev` the cursor after the previous segment (its last term and, for checking,
    /// the offsets), or `None` for the first segment, which starts at its header's base.
    ///
    /// `may_be_unsynced` is set for the sealed segments after the last one with an index: they
    /// may not have been synced before a crash, so one of them can be torn. For them, valid data
    /// that ends before `next_base` is [`Sealed::TornTail`], not corruption.
    pub(crate) fn open_sealed(
        dir: &Path,
        base_log_index: u64,
        next_base: u64,
        prev: Option<Cursor>,
        opts: &SegmentOptions,
        may_be_unsynced: bool,
    ) -> Result<Sealed> {
        let (file, file_len, base, version) = open_checked(dir, base_log_index, prev)?;
        let map = MappedFile::map_read_only(&file, file_len, file_len)?;
        let path = dir.join(segment_file_name(base_log_index));
        let data = map.published();
        let from_index = load_index(dir, base, file_len, data).filter(|(f, _)| {
            // An index that ends before the next segment cannot be right: rebuild it.
            f.next_log_index >= next_base
        });
        let file = Arc::new(file);
        let seg = match from_index {
            Some((f, time)) if f.next_log_index == next_base => Segment::new(
                dir,
                version,
                base,
                file,
                map,
                opts,
                state_from_index(f, time),
            )?,
            _ => {
                let (state, scan) = scan_segment(data, base, opts, Some(next_base));
                let reason = match scan.stop {
                    ScanStop::Limit => None,
                    ScanStop::Invalid(kind) => Some(kind),
                    ScanStop::Zero | ScanStop::EndOfData => Some(CorruptKind::MissingEntries {
                        expected: next_base,
                        found: scan.cursor.next_log_index,
                    }),
                };
                if let Some(kind) = reason {
                    if may_be_unsynced {
                        let event = RecoveryEvent {
                            file: path,
                            position: scan.end as u64,
                            reason: Some(kind),
                        };
                        return Ok(Sealed::TornTail(event));
                    }
                    return Err(corrupt(&path, scan.end, kind));
                }
                let seg = Segment::new(dir, version, base, file, map, opts, state)?;
                // An index promises synced data (a tail segment may have come back from the
                // page cache only): sync first.
                seg.sync(&opts.faults)?;
                if let Err(e) = seg.write_index(&opts.faults) {
                    tracing::warn!(file = %seg.index_path.display(), error = %e,
                        "could not rewrite segment index; it will be rebuilt on the next open");
                }
                seg
            }
        };
        // Durable now: the segment lets go of its file and map until a read needs them.
        seg.release(true);
        Ok(Sealed::Open(Arc::new(seg)))
    }

    /// Opens the last segment for appending, recovering it after a crash. Returns the segment,
    /// its write handle, and what recovery found.
    pub(crate) fn open_active(
        dir: &Path,
        base_log_index: u64,
        prev: Option<Cursor>,
        opts: &SegmentOptions,
    ) -> Result<(Arc<Segment>, WriteHandle, RecoveryEvent)> {
        let (file, file_len, base, version) = open_checked(dir, base_log_index, prev)?;
        let path = dir.join(segment_file_name(base_log_index));
        let index_path = dir.join(index_file_name(base_log_index));
        // Scan (or trust a clean-close index) through a read-only map that is dropped before
        // the file is cut, so no map ever sees the file shrink (mmap.rs, rule 1).
        let (state, clean, reason) = {
            let ro = MappedFile::map_read_only(&file, file_len, file_len)?;
            let data = ro.published();
            match load_index(dir, base, file_len, data) {
                // A valid index on the last segment was written by a clean close, or when a
                // conflict truncation cut this segment (and the segments after it are gone
                // since): either way nothing past its data_len is part of the log.
                Some((f, time)) => {
                    let end = usize::try_from(f.data_len).unwrap_or(usize::MAX);
                    let clean = matches!(decode_frame(data, end, &Limits::ON_DISK), Ok(None))
                        || data.len().saturating_sub(end) < FRAME_HEADER_LEN;
                    (state_from_index(f, time), clean, None)
                }
                None => {
                    let (state, s) = scan_segment(data, base, opts, None);
                    let reason = match s.stop {
                        ScanStop::Invalid(kind) => Some(kind),
                        _ => None,
                    };
                    (state, false, reason)
                }
            }
        };
        if index_path.exists() {
            // From here on the index would vouch for bytes it has not seen: remove it durably.
            std::fs::remove_file(&index_path)?;
            sync_dir(dir)?;
        }
        let capacity = file_len;
        if !clean {
            // After a crash, stale bytes may follow the end; cut them off so that no stale frame
            // can ever line up behind a new one, then give the tail its blocks back.
            // The tail becomes a hole (zeros); the writer gives it blocks again a step at a
            // time, as it does in a new segment.
            let end = state.data_len as u64;
            file.set_len(end)?;
            file.set_len(capacity as u64)?;
            opts.faults.check(FaultPoint::Sync)?;
            file.sync_all()?;
        }
        let event = RecoveryEvent {
            file: path,
            position: state.data_len as u64,
            reason,
        };
        if let Some(kind) = &event.reason {
            tracing::warn!(file = %event.file.display(), position = event.position, reason = %kind,
                "recovery truncated the log's tail at an invalid frame");
        }
        let map = MappedFile::map_read_only(&file, capacity, state.data_len)?;
        let file = Arc::new(file);
        let handle = WriteHandle::new(Arc::clone(&map), Arc::clone(&file), state.data_len);
        Ok((
            Arc::new(Segment::new(dir, version, base, file, map, opts, state)?),
            handle,
            event,
        ))
    }
}

/// Opens a segment file, checks its size and header, and (for any but the first segment) that
/// it starts where the previous one ended.
/// Where the segment with base `base_log_index` ends (its next log index), if it is a
/// compacted segment without an index file: what a compaction that merged segments leaves
/// when it stops after putting the merged file in place and before deleting the segments it
/// replaced (`compact.rs`). `None` for any other segment, or one that does not scan whole.
pub(crate) fn merged_end(
    dir: &Path,
    base_log_index: u64,
    opts: &SegmentOptions,
) -> Result<Option<u64>> {
    if dir.join(index_file_name(base_log_index)).exists() {
        return Ok(None);
    }
    let (file, file_len, base, _) = open_checked(dir, base_log_index, None)?;
    let map = MappedFile::map_read_only(&file, file_len, file_len)?;
    let data = map.published();
    if !SegmentHeader::decode(data).is_ok_and(|h| h.compacted) {
        return Ok(None);
    }
    let (_, scan) = scan_segment(data, base, opts, None);
    // A compacted file is written whole and synced before it is renamed into place: it ends
    // at its end mark.
    Ok(matches!(scan.stop, ScanStop::EndOfData | ScanStop::Zero)
        .then_some(scan.cursor.next_log_index))
}

fn open_checked(
    dir: &Path,
    base_log_index: u64,
    prev: Option<Cursor>,
) -> Result<(File, usize, Cursor, u16)> {
    let path = dir.join(segment_file_name(base_log_index));
    let file = OpenOptions::new().read(true).write(true).open(&path)?;
    let file_len = file.metadata()?.len();
    if file_len > SEGMENT_BYTES_LIMIT {
        return Err(corrupt(
            &path,
            0,
            CorruptKind::LengthOutOfRange {
                len: file_len,
                max: SEGMENT_BYTES_LIMIT,
            },
        ));
    }
    let file_len =
        usize::try_from(file_len).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    let read = read_up_to(&file, &mut header)?;
    let header = SegmentHeader::decode(header.get(..read).unwrap_or_default())
        .map_err(|kind| corrupt(&path, 0, kind))?;
    if header.base_log_index != base_log_index {
        return Err(corrupt(
            &path,
            0,
            CorruptKind::BaseMismatch {
                expected: base_log_index,
                found: header.base_log_index,
            },
        ));
    }
    let last_term = prev.map_or(0, |p| p.last_term);
    if let Some(p) = prev
        && p.next_offset != header.base_offset
    {
        return Err(corrupt(
            &path,
            format::SEG_BASE_OFFSET_POS,
            CorruptKind::OffsetGap {
                expected: p.next_offset,
                found: header.base_offset,
            },
        ));
    }
    let base = Cursor {
        next_log_index: header.base_log_index,
        next_offset: header.base_offset,
        last_term,
    };
    Ok((file, file_len, base, header.version))
}

/// Reads as many bytes as the file has, up to `buf.len()`.
fn read_up_to(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
        match file.read_at(rest, done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The state an index that checked out describes; `max_record_time` is the segment's largest
/// record timestamp, which [`load_index`] found.
fn state_from_index(f: IndexFile, max_record_time: i64) -> SegmentState {
    SegmentState {
        data_len: usize::try_from(f.data_len).unwrap_or(usize::MAX),
        cursor: Cursor {
            next_log_index: f.next_log_index,
            next_offset: f.next_offset,
            last_term: f.last_term,
        },
        max_timestamp_ms: f.max_timestamp_ms,
        max_record_time,
        last_indexed: f.entries.last().map_or(0, |e| e.position as usize),
        entries: f.entries,
    }
}

/// Loads and checks the segment's index file, with the segment's largest record timestamp
/// (from the last entry's time and the frames after it). `None` (rebuild) if it is missing,
/// malformed, or disagrees with the segment: the frame of its last entry must decode with the
/// log index and offset the entry claims, and the last frame must end exactly at `data_len`.
fn load_index(dir: &Path, base: Cursor, file_len: usize, data: &[u8]) -> Option<(IndexFile, i64)> {
    let path = dir.join(index_file_name(base.next_log_index));
    let meta = std::fs::metadata(&path).ok()?;
    // An index can have at most one entry per frame; refuse to read a larger file.
    let max_len = format::INDEX_HEADER_LEN as u64
        + (file_len / FRAME_HEADER_LEN + 1) as u64 * format::INDEX_ENTRY_LEN as u64;
    if meta.len() > max_len {
        return None;
    }
    let bytes = std::fs::read(&path).ok()?;
    let f = match IndexFile::decode(&bytes, base.next_log_index, file_len as u64) {
        Ok(f) => f,
        Err(kind) => {
            tracing::info!(file = %path.display(), reason = %kind, "ignoring invalid index");
            return None;
        }
    };
    if f.next_log_index == base.next_log_index {
        // An empty segment: its data is exactly the header.
        return (f.data_len == SEGMENT_HEADER_LEN as u64 && f.next_offset == base.next_offset)
            .then_some((f, NO_TIME));
    }
    let last = f.entries.last()?;
    let data_len = usize::try_from(f.data_len).ok()?;
    let data = data.get(..data_len)?;
    // Walk from the last entry to the end: every frame valid and continuous, ending exactly at
    // data_len with the cursor the index claims.
    let start = Cursor {
        next_log_index: base
            .next_log_index
            .checked_add(u64::from(last.rel_log_index))?,
        next_offset: base.next_offset.checked_add(u64::from(last.rel_offset))?,
        last_term: 0,
    };
    let (s, time) = scan_from_entry(data, last.position as usize, start, last.time_before);
    let consistent = s.end == data_len
        && s.cursor.next_log_index == f.next_log_index
        && s.cursor.next_offset == f.next_offset
        && s.cursor.last_term == f.last_term
        && base.last_term <= first_term(data, &Limits::ON_DISK).unwrap_or(u64::MAX);
    consistent.then_some((f, time))
}

/// The term of the segment's first frame, if it has one.
fn first_term(data: &[u8], limits: &Limits) -> Option<u64> {
    decode_frame(data, SEGMENT_HEADER_LEN, limits)
        .ok()
        .flatten()
        .map(|h| h.term)
}
