//! One segment: a memory-mapped `.log` file of frames and its derived `.index`.
//!
//! This module knows nothing of Raft or the network. It creates, opens, recovers, scans and
//! reads segments; [`crate::log`] strings them into a partition log.
//!
//! This file holds the [`Segment`] type, its state (where its data ends, its in-memory sparse
//! index) and what the writer updates on it. The phases are in their own files:
//!
//! - `scan.rs`: the [`Cursor`] continuity check and the frame scan that recovery, index
//!   checks and the tools share.
//! - `open.rs`: opening existing segments when a log opens: header checks, index loading,
//!   recovery of sealed and active segments.
//! - `create.rs`: new segment files: spare files, preallocation, recycling a removed
//!   segment's file, and creating a segment from one.
//! - `read.rs`: finding frames in an open segment and handing them out as batches.
//! - `file.rs`: making a segment durable, writing its index, and deleting its files.
//! - `inspect.rs`: [`inspect_segment`], the read-only scan behind `replog check`.
//! - `lazy.rs`: sealed segments' maps, opened on first read and closed again when unused or
//!   over the process's budget; a sealed segment holds no file descriptor.
//!
//! `format.rs` (layout constants), `frame.rs` (frame codec), `record.rs` (replog's record
//! codec), `batch.rs` (batches as reads hand them out), `kafka.rs` (Kafka's record batch as a
//! payload), `gap.rs` (gap frames' payload), `index.rs` (index file codec) and `mmap.rs` (the
//! map and its single writer) are pure building blocks beneath them; `compact.rs` writes a
//! compacted segment and swaps it in.

// Code that reads bytes from disk must not panic on them: no unchecked indexing here.
#![deny(clippy::indexing_slicing)]

pub(crate) mod batch;
mod compact;
mod create;
mod file;
pub(crate) mod format;
pub(crate) mod frame;
pub(crate) mod gap;
pub(crate) mod index;
mod inspect;
pub(crate) mod kafka;
pub(crate) mod lazy;
pub(crate) mod mmap;
mod open;
mod read;
pub(crate) mod record;
mod scan;
#[cfg(test)]
mod test_util;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::env::Faults;
use crate::error::{CorruptKind, Error};
pub use create::Preallocate;
use format::SegmentHeader;
use format::{index_file_name, segment_file_name};
use frame::{FrameHeader, Limits};
use index::IndexEntry;
use lazy::{LazyMap, MapCache};
use mmap::MappedFile;

pub(crate) use compact::{CompactedFile, FrameOut, write_compacted};
pub(crate) use create::{Recycled, SpareFile, reserve};
pub use inspect::{SegmentReport, inspect_segment};
pub(crate) use open::{Sealed, merged_end};
pub use scan::fuzz_scan_segment;
use scan::scan_from_entry;
pub(crate) use scan::{Cursor, ScanStop, frame_time, scan};

/// The mutable part of a segment, behind its lock.
#[derive(Clone, Debug)]
struct SegmentState {
    /// Bytes [0, data_len) are the header and the segment's valid frames.
    data_len: usize,
    /// Cursor after the last frame below `data_len`.
    cursor: Cursor,
    max_timestamp_ms: u64,
    /// The largest record timestamp below `data_len` ([`index::NO_TIME`] if none): the
    /// producers' CreateTime of Kafka batches, the append time of replog's.
    max_record_time: i64,
    entries: Vec<IndexEntry>,
    /// Position of the frame of the last index entry.
    last_indexed: usize,
}

/// A consistent snapshot of a segment's extent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Extent {
    pub(crate) data_len: usize,
    pub(crate) cursor: Cursor,
    pub(crate) max_timestamp_ms: u64,
    /// The largest record timestamp ([`index::NO_TIME`] if none).
    pub(crate) max_record_time: i64,
}

/// One segment file, mapped (a sealed one only while it is used: `lazy.rs`).
#[derive(Debug)]
pub(crate) struct Segment {
    /// The format version in its header: Kafka batches go only into version 2 or later.
    pub(crate) version: u16,
    pub(crate) base_log_index: u64,
    pub(crate) base_offset: u64,
    pub(crate) path: PathBuf,
    index_path: PathBuf,
    /// The segment file, shared with its write handle, while the segment is active or not
    /// yet durable; `None` once sealed and synced ([`Segment::release`]): a sync then opens
    /// the file for its duration.
    file: Mutex<Option<Arc<File>>>,
    map: Arc<LazyMap>,
    /// The header, read when the segment was opened or created.
    header: Option<SegmentHeader>,
    /// The stamp of the first stamped frame, once known; 0 while not (no frame carries a
    /// stamp of 0 but control frames, which carry none). See [`Segment::first_timestamp_ms`].
    first_timestamp_ms: AtomicU64,
    index_interval_bytes: usize,
    state: RwLock<SegmentState>,
}

/// Options for creating segments.
#[derive(Clone, Debug)]
pub(crate) struct SegmentOptions {
    pub(crate) capacity: u64,
    pub(crate) index_interval_bytes: u32,
    pub(crate) preallocate: Preallocate,
    /// Bytes of blocks given to a segment file at a time (`LogConfig::preallocate_step_bytes`).
    pub(crate) preallocate_step: u64,
    pub(crate) limits: Limits,
    pub(crate) faults: Faults,
    /// The budget of open sealed maps this log's segments count against.
    pub(crate) maps: Arc<MapCache>,
    /// Syncs of zeros made ahead of the writer ([`reserve`]), shared by the log's segments.
    pub(crate) zeros_syncs: Arc<std::sync::atomic::AtomicU64>,
}

/// What recovery did to a segment, for the log and for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryEvent {
    /// The segment file.
    pub file: PathBuf,
    /// Where the valid data ends.
    pub position: u64,
    /// What stopped the scan there; `None` for a clean end of data.
    pub reason: Option<CorruptKind>,
}

fn corrupt(path: &Path, position: usize, kind: CorruptKind) -> Error {
    Error::Corrupt {
        file: path.to_path_buf(),
        position: position as u64,
        kind,
    }
}

impl Segment {
    #[allow(clippy::too_many_arguments)]
    fn new(
        dir: &Path,
        version: u16,
        base: Cursor,
        file: Arc<File>,
        map: Arc<MappedFile>,
        opts: &SegmentOptions,
        state: SegmentState,
    ) -> std::io::Result<Segment> {
        let path = dir.join(segment_file_name(base.next_log_index));
        let header = SegmentHeader::decode(map.published()).ok();
        let map = LazyMap::new(path.clone(), &file, map, Arc::clone(&opts.maps))?;
        let seg = Segment {
            version,
            base_log_index: base.next_log_index,
            base_offset: base.next_offset,
            path,
            index_path: dir.join(index_file_name(base.next_log_index)),
            file: Mutex::new(Some(file)),
            map,
            header,
            first_timestamp_ms: AtomicU64::new(0),
            index_interval_bytes: usize::try_from(opts.index_interval_bytes).unwrap_or(usize::MAX),
            state: RwLock::new(state),
        };
        // While the map is open: a sealed segment keeps the stamp after closing it.
        let _ = seg.first_timestamp_ms();
        Ok(seg)
    }

    /// The segment's map, opened again if it was closed (`lazy.rs`).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the segment was removed from its log or its file cannot be mapped.
    pub(crate) fn mapped(&self) -> crate::error::Result<Arc<MappedFile>> {
        self.map.get()
    }

    /// Lets the sealed, durable segment go of its file and makes its map closable; with
    /// `close`, closes the map now (a segment recovery opened, which no one reads yet).
    pub(crate) fn release(&self, close: bool) {
        *self.file.lock() = None;
        self.map.set_evictable();
        if close {
            self.map.close();
        }
    }

    /// Marks the segment as removed from its log: its file is never opened again, since
    /// another file may take its name.
    pub(crate) fn retire(&self) {
        self.map.retire();
    }

    /// Whether the segment holds its file open now (for tests).
    #[cfg(test)]
    pub(crate) fn holds_file(&self) -> bool {
        self.file.lock().is_some()
    }

    /// Whether the segment holds its map open now (for tests and figures).
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        self.map.is_open()
    }

    /// A consistent snapshot of the segment's extent.
    pub(crate) fn extent(&self) -> Extent {
        let s = self.state.read();
        Extent {
            data_len: s.data_len,
            cursor: s.cursor,
            max_timestamp_ms: s.max_timestamp_ms,
            max_record_time: s.max_record_time,
        }
    }

    /// The stamp of the segment's first stamped frame (FORMAT.md §5), if it has one: what
    /// `segment.ms` and the compaction lag count from. Control frames (a new leader's blank
    /// entry, a membership change) carry a stamp of 0, which means none: a segment that
    /// starts with one is as old as its first write, not as old as 1970. Known from the
    /// appends, or else found by reading the published frames (checked when they were written
    /// or recovered) up to the first stamped one.
    pub(crate) fn first_timestamp_ms(&self) -> Option<u64> {
        let known = self.first_timestamp_ms.load(Ordering::Acquire);
        if known != 0 {
            return Some(known);
        }
        let data_len = self.state.read().data_len;
        if data_len <= format::SEGMENT_HEADER_LEN {
            return None;
        }
        let map = self.map.get().ok()?;
        let data = map.published().get(..data_len)?;
        // Only the fixed fields are read (FORMAT.md §4), not the payloads: usually the first
        // or second frame has a stamp. Bounded: every frame moves `pos` on by at least its
        // header, and `data` ends.
        let mut pos = format::SEGMENT_HEADER_LEN;
        loop {
            let body_len = format::get_u32(data, pos + format::FRAME_BODY_LEN_POS)?;
            if body_len == 0 {
                return None;
            }
            let stamp = format::get_u64(data, pos + format::FRAME_TIMESTAMP_POS)?;
            if stamp != 0 {
                self.note_stamp(stamp);
                return Some(stamp);
            }
            pos = pos.checked_add(format::FRAME_LOG_INDEX_POS + usize::try_from(body_len).ok()?)?;
        }
    }

    /// Keeps `stamp` as the first stamped frame's, unless one is known already.
    fn note_stamp(&self, stamp: u64) {
        if stamp != 0 {
            let _ = self.first_timestamp_ms.compare_exchange(
                0,
                stamp,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Records a frame the writer has just published at `pos`.
    pub(crate) fn note_appended(&self, pos: usize, h: &FrameHeader) {
        let mut s = self.state.write();
        debug_assert_eq!(s.data_len, pos, "frames are appended at the end");
        debug_assert_eq!(s.cursor.check(h), Ok(()), "writer keeps continuity");
        add_index_entry(
            &mut s,
            self.base_log_index,
            self.base_offset,
            self.index_interval_bytes,
            pos,
            h,
        );
        s.data_len = pos + h.frame_len();
        s.cursor = Cursor::after(h);
        self.note_stamp(h.timestamp_ms);
        s.max_timestamp_ms = s.max_timestamp_ms.max(h.timestamp_ms);
        // The active segment's map is always open.
        let map = self.map.current();
        if let Some(time) = map.and_then(|m| frame_time(m.published(), pos, h)) {
            s.max_record_time = s.max_record_time.max(time);
        }
    }

    /// Ends the segment at `pos`, where the frame with `cursor.next_log_index` starts.
    ///
    /// # Errors
    ///
    /// As [`mapped`](Self::mapped).
    pub(crate) fn cut(&self, pos: usize, cursor: Cursor) -> crate::error::Result<()> {
        let map = self.map.get()?;
        let mut s = self.state.write();
        // The first stamped frame may be among those cut: found again when next asked for.
        self.first_timestamp_ms.store(0, Ordering::Release);
        s.data_len = pos;
        s.cursor = cursor;
        s.entries.retain(|e| (e.position as usize) < pos);
        s.last_indexed = s.entries.last().map_or(0, |e| e.position as usize);
        let data = map.published().get(..pos).unwrap_or_default();
        s.max_record_time = s.entries.last().map_or(index::NO_TIME, |last| {
            let start = Cursor {
                next_log_index: self.base_log_index + u64::from(last.rel_log_index),
                next_offset: self.base_offset + u64::from(last.rel_offset),
                last_term: 0,
            };
            scan_from_entry(data, last.position as usize, start, last.time_before).1
        });
        Ok(())
    }

    /// Bytes of valid data in the segment, header included.
    pub(crate) fn data_len(&self) -> usize {
        self.state.read().data_len
    }
}

fn add_index_entry(
    s: &mut SegmentState,
    base_log_index: u64,
    base_offset: u64,
    interval: usize,
    pos: usize,
    h: &FrameHeader,
) {
    if !s.entries.is_empty() && pos - s.last_indexed < interval {
        return;
    }
    let rel = |v: u64, base: u64| u32::try_from(v - base).unwrap_or(u32::MAX);
    s.entries.push(IndexEntry {
        rel_log_index: rel(h.log_index, base_log_index),
        rel_offset: rel(h.base_offset, base_offset),
        position: u32::try_from(pos).unwrap_or(u32::MAX),
        time_before: s.max_record_time,
    });
    s.last_indexed = pos;
}
