//! One segment: a memory-mapped `.log` file of frames and its derived `.index`.
//!
//! This module knows nothing of Raft or the network. It creates, opens, recovers, scans and
//! reads segments; [`crate::log`] strings them into a partition log.

// Code that reads bytes from disk must not panic on them: no unchecked indexing here.
#![deny(clippy::indexing_slicing)]

pub(crate) mod format;
pub(crate) mod index;
pub(crate) mod mmap;
pub(crate) mod record;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::config::Preallocate;
use crate::error::{CorruptKind, Error, Result};
use crate::fault::{FaultPoint, Faults};
use crate::types::{LogIndex, Offset, Term};
use format::{
    END_MARK, FRAME_HEADER_LEN, SEGMENT_BYTES_LIMIT, SEGMENT_HEADER_LEN, SegmentHeader,
    index_file_name, segment_file_name,
};
use index::{IndexEntry, IndexFile};
use mmap::{MappedFile, WriteHandle};
use record::{Batch, FrameHeader, Limits, decode_frame};

/// Where the next frame goes: the log index, offset and minimum term it must have.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) next_log_index: u64,
    pub(crate) next_offset: u64,
    pub(crate) last_term: u64,
}

impl Cursor {
    /// Checks FORMAT.md §6 step 6 for a frame that should come next.
    pub(crate) fn check(&self, h: &FrameHeader) -> Result<(), CorruptKind> {
        if h.log_index != self.next_log_index {
            return Err(CorruptKind::LogIndexGap {
                expected: self.next_log_index,
                found: h.log_index,
            });
        }
        if h.term < self.last_term {
            return Err(CorruptKind::TermRegression {
                previous: self.last_term,
                found: h.term,
            });
        }
        if h.base_offset != self.next_offset {
            return Err(CorruptKind::OffsetGap {
                expected: self.next_offset,
                found: h.base_offset,
            });
        }
        Ok(())
    }

    /// The cursor after `h`.
    pub(crate) fn after(h: &FrameHeader) -> Cursor {
        Cursor {
            next_log_index: h.log_index + 1,
            next_offset: h.next_offset(),
            last_term: h.term,
        }
    }
}

/// Why a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ScanStop {
    /// A zero `body_len`: the end of written data.
    Zero,
    /// Reached the log index it was told to stop at.
    Limit,
    /// Not enough bytes left for a frame.
    EndOfData,
    /// A frame failed validation.
    Invalid(CorruptKind),
}

/// The result of scanning frames.
#[derive(Clone, Debug)]
pub(crate) struct Scan {
    /// Position after the last valid frame.
    pub(crate) end: usize,
    pub(crate) cursor: Cursor,
    pub(crate) max_timestamp_ms: u64,
    pub(crate) stop: ScanStop,
}

/// Scans valid frames in `data` from `start`, checking continuity from `cursor`, until the end
/// of data, an invalid frame, or the frame with log index `stop_at`. `on_frame` sees each valid
/// frame's position and header. The work is bounded by `data.len()`.
pub(crate) fn scan(
    data: &[u8],
    start: usize,
    mut cursor: Cursor,
    limits: &Limits,
    stop_at: Option<u64>,
    mut on_frame: impl FnMut(usize, &FrameHeader),
) -> Scan {
    let mut pos = start;
    let mut max_timestamp_ms = 0;
    let stop = loop {
        if stop_at == Some(cursor.next_log_index) {
            break ScanStop::Limit;
        }
        if data.len().saturating_sub(pos) < FRAME_HEADER_LEN {
            break ScanStop::EndOfData;
        }
        match decode_frame(data, pos, limits) {
            Ok(None) => break ScanStop::Zero,
            Err(kind) => break ScanStop::Invalid(kind),
            Ok(Some(h)) => {
                if let Err(kind) = cursor.check(&h) {
                    break ScanStop::Invalid(kind);
                }
                on_frame(pos, &h);
                max_timestamp_ms = max_timestamp_ms.max(h.timestamp_ms);
                cursor = Cursor::after(&h);
                pos += h.frame_len();
            }
        }
    };
    Scan {
        end: pos,
        cursor,
        max_timestamp_ms,
        stop,
    }
}

/// The mutable part of a segment, behind its lock.
#[derive(Clone, Debug)]
struct SegmentState {
    /// Bytes [0, data_len) are the header and the segment's valid frames.
    data_len: usize,
    /// Cursor after the last frame below `data_len`.
    cursor: Cursor,
    max_timestamp_ms: u64,
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
}

/// One segment file, mapped.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_log_index: u64,
    pub(crate) base_offset: u64,
    pub(crate) path: PathBuf,
    index_path: PathBuf,
    /// The segment file, for syncing.
    file: File,
    map: Arc<MappedFile>,
    index_interval_bytes: usize,
    state: RwLock<SegmentState>,
}

/// Options for creating segments.
#[derive(Clone, Debug)]
pub(crate) struct SegmentOptions {
    pub(crate) capacity: u64,
    pub(crate) index_interval_bytes: u32,
    pub(crate) preallocate: Preallocate,
    pub(crate) limits: Limits,
    pub(crate) faults: Faults,
}

/// A preallocated file under a temporary name, waiting to become a segment: either new
/// (zeros, or `fallocate`d extents, synced), or a recycled segment that retention deleted (old
/// frames, FORMAT.md §7). Rolls use one made ahead of time on a background thread, or a
/// recycled one, so that preallocating (which writes the whole file when
/// `Preallocate::Zeros`) is off the append path.
#[derive(Debug)]
pub(crate) struct SpareFile {
    file: File,
    path: PathBuf,
    capacity: u64,
}

impl SpareFile {
    /// Creates `dir/name`, preallocated to `opts.capacity` and synced.
    pub(crate) fn create(dir: &Path, name: &str, opts: &SegmentOptions) -> io::Result<SpareFile> {
        let path = dir.join(name);
        let result = (|| -> io::Result<File> {
            opts.faults.check(FaultPoint::CreateSegment)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            preallocate(&file, opts.capacity, opts.preallocate, &opts.faults)?;
            file.sync_all()?;
            Ok(file)
        })();
        match result {
            Ok(file) => Ok(SpareFile {
                file,
                path,
                capacity: opts.capacity,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Deletes the file.
    pub(crate) fn discard(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What [`Segment::recycle`] did.
#[derive(Debug)]
pub(crate) enum Recycled {
    /// The segment's file, renamed to a spare.
    Spare(SpareFile),
    /// Someone still holds the segment or a view of its bytes, or its file is not a full
    /// segment of the current capacity: delete it instead.
    No(Arc<Segment>),
}

/// What opening a sealed segment found.
#[derive(Debug)]
pub(crate) enum Sealed {
    /// A whole segment.
    Open(Arc<Segment>),
    /// A segment that was still being synced when the process stopped, and whose valid data
    /// ends before the next segment's base: it becomes the log's end.
    TornTail(RecoveryEvent),
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

/// Writes `bytes` at `pos` with `RWF_DSYNC`: durable when it returns, like a write followed by
/// `fdatasync` of just that range (Linux 4.7 and later).
fn write_dsync(file: &File, bytes: &[u8], pos: u64) -> io::Result<()> {
    let written = rustix::io::pwritev2(
        file,
        &[io::IoSlice::new(bytes)],
        pos,
        rustix::io::ReadWriteFlags::DSYNC,
    )?;
    if written != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!(
                "short synchronous write: {written} of {} bytes",
                bytes.len()
            ),
        ));
    }
    Ok(())
}

/// Syncs a directory so that creating, renaming or deleting files in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Segment {
    /// Creates a new, empty segment at `base` durably: a preallocated file under a temporary
    /// name (`spare`, made ahead of time, or a new one), given its header, synced, renamed into
    /// place (replacing any file of that name), and the directory synced. Returns it with its
    /// write handle.
    pub(crate) fn create(
        dir: &Path,
        base: Cursor,
        opts: &SegmentOptions,
        spare: Option<SpareFile>,
        restart: bool,
    ) -> Result<(Arc<Segment>, WriteHandle)> {
        let path = dir.join(segment_file_name(base.next_log_index));
        let spare = match spare {
            Some(s) if s.capacity == opts.capacity => s,
            other => {
                if let Some(s) = other {
                    s.discard();
                }
                let name = format!("{}.tmp", segment_file_name(base.next_log_index));
                SpareFile::create(dir, &name, opts)?
            }
        };
        let result = (|| -> io::Result<()> {
            let header = SegmentHeader {
                base_log_index: base.next_log_index,
                base_offset: base.next_offset,
                restart,
            };
            // The header and, right after it, the end-of-data mark: a recycled file still
            // holds old frames there (FORMAT.md §7).
            let mut start = [0u8; SEGMENT_HEADER_LEN + END_MARK.len()];
            if let Some(h) = start.get_mut(..SEGMENT_HEADER_LEN) {
                h.copy_from_slice(&header.encode());
            }
            // Durable by a write that syncs only its own bytes: a recycled file may still hold
            // its old data unsynced, which a whole-file sync would write out for nothing. (The
            // file's size and blocks were made durable when it was first preallocated.)
            opts.faults.check(FaultPoint::Sync)?;
            write_dsync(&spare.file, &start, 0)?;
            std::fs::rename(&spare.path, &path)?;
            opts.faults.check(FaultPoint::SyncDir)?;
            sync_dir(dir)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&spare.path);
            return Err(e.into());
        }
        let file = spare.file;
        let capacity = usize::try_from(opts.capacity)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let map = MappedFile::map_read_only(&file, capacity, SEGMENT_HEADER_LEN)?;
        let handle = WriteHandle::new(Arc::clone(&map), file.try_clone()?);
        let state = SegmentState {
            data_len: SEGMENT_HEADER_LEN,
            cursor: base,
            max_timestamp_ms: 0,
            entries: Vec::new(),
            last_indexed: 0,
        };
        let seg = Segment::new(dir, base, file, map, opts, state);
        Ok((Arc::new(seg), handle))
    }

    fn new(
        dir: &Path,
        base: Cursor,
        file: File,
        map: Arc<MappedFile>,
        opts: &SegmentOptions,
        state: SegmentState,
    ) -> Segment {
        Segment {
            base_log_index: base.next_log_index,
            base_offset: base.next_offset,
            path: dir.join(segment_file_name(base.next_log_index)),
            index_path: dir.join(index_file_name(base.next_log_index)),
            file,
            map,
            index_interval_bytes: usize::try_from(opts.index_interval_bytes).unwrap_or(usize::MAX),
            state: RwLock::new(state),
        }
    }

    /// Opens a sealed segment (any but the last). `next_base` is the next segment's base log
    /// index; `prev` the cursor after the previous segment (its last term and, for checking,
    /// the offsets), or the header's own base for the first segment.
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
        let (file, file_len, base) = open_checked(dir, base_log_index, prev)?;
        let map = MappedFile::map_read_only(&file, file_len, file_len)?;
        let path = dir.join(segment_file_name(base_log_index));
        let data = map.published();
        let from_index = load_index(dir, base, file_len, data).filter(|f| {
            // An index that ends before the next segment cannot be right: rebuild it.
            f.next_log_index >= next_base
        });
        let state = match from_index {
            Some(f) if f.next_log_index == next_base => state_from_index(f),
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
                let seg = Segment::new(
                    dir,
                    base,
                    file.try_clone()?,
                    Arc::clone(&map),
                    opts,
                    state.clone(),
                );
                // An index promises synced data (a tail segment may have come back from the
                // page cache only): sync first.
                seg.sync(&opts.faults)?;
                if let Err(e) = seg.write_index(&opts.faults) {
                    tracing::warn!(file = %seg.index_path.display(), error = %e,
                        "could not rewrite segment index; it will be rebuilt on the next open");
                }
                state
            }
        };
        Ok(Sealed::Open(Arc::new(Segment::new(
            dir, base, file, map, opts, state,
        ))))
    }

    /// Opens the last segment for appending, recovering it after a crash. Returns the segment,
    /// its write handle, and what recovery found.
    pub(crate) fn open_active(
        dir: &Path,
        base_log_index: u64,
        prev: Option<Cursor>,
        opts: &SegmentOptions,
    ) -> Result<(Arc<Segment>, WriteHandle, RecoveryEvent)> {
        let (file, file_len, base) = open_checked(dir, base_log_index, prev)?;
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
                Some(f) => {
                    let end = usize::try_from(f.data_len).unwrap_or(usize::MAX);
                    let clean = matches!(decode_frame(data, end, &Limits::ON_DISK), Ok(None))
                        || data.len().saturating_sub(end) < FRAME_HEADER_LEN;
                    (state_from_index(f), clean, None)
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
            let end = state.data_len as u64;
            file.set_len(end)?;
            // fallocate, even where new segments are zero-filled: recovery should be quick, and
            // only the rest of this one segment pays the slower first sync of unwritten blocks.
            preallocate_from(
                &file,
                end,
                capacity as u64,
                Preallocate::Fallocate,
                &opts.faults,
            )?;
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
        let handle = WriteHandle::new(Arc::clone(&map), file.try_clone()?);
        Ok((
            Arc::new(Segment::new(dir, base, file, map, opts, state)),
            handle,
            event,
        ))
    }

    /// A consistent snapshot of the segment's extent.
    pub(crate) fn extent(&self) -> Extent {
        let s = self.state.read();
        Extent {
            data_len: s.data_len,
            cursor: s.cursor,
            max_timestamp_ms: s.max_timestamp_ms,
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
        s.max_timestamp_ms = s.max_timestamp_ms.max(h.timestamp_ms);
    }

    /// Ends the segment at `pos`, where the frame with `cursor.next_log_index` starts.
    pub(crate) fn cut(&self, pos: usize, cursor: Cursor) {
        let mut s = self.state.write();
        s.data_len = pos;
        s.cursor = cursor;
        s.entries.retain(|e| (e.position as usize) < pos);
        s.last_indexed = s.entries.last().map_or(0, |e| e.position as usize);
    }

    /// Where to start scanning for the frame holding `offset`.
    pub(crate) fn seek_offset(&self, offset: u64) -> usize {
        let s = self.state.read();
        let rel = offset.saturating_sub(self.base_offset);
        index::floor_by_offset(&s.entries, rel).map_or(SEGMENT_HEADER_LEN, |e| e.position as usize)
    }

    /// Where to start scanning for the frame with `log_index`.
    pub(crate) fn seek_log_index(&self, log_index: u64) -> usize {
        let s = self.state.read();
        let rel = log_index.saturating_sub(self.base_log_index);
        index::floor_by_log_index(&s.entries, rel)
            .map_or(SEGMENT_HEADER_LEN, |e| e.position as usize)
    }

    /// Decodes and fully validates the frame at `pos`, which must lie below `data_len`.
    pub(crate) fn frame_at(
        &self,
        pos: usize,
        data_len: usize,
        limits: &Limits,
    ) -> Result<FrameHeader> {
        let data = self.map.published().get(..data_len).unwrap_or_default();
        match decode_frame(data, pos, limits) {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(corrupt(&self.path, pos, CorruptKind::Truncated)),
            Err(kind) => Err(corrupt(&self.path, pos, kind)),
        }
    }

    /// The frame at `pos` as a batch whose payload shares the map (no copy).
    pub(crate) fn batch(&self, pos: usize, h: &FrameHeader) -> Result<Batch> {
        let payload = self
            .map
            .bytes(pos + FRAME_HEADER_LEN, pos + h.frame_len())
            .ok_or_else(|| corrupt(&self.path, pos, CorruptKind::Truncated))?;
        Ok(Batch {
            log_index: LogIndex(h.log_index),
            term: Term(h.term),
            base_offset: Offset(h.base_offset),
            record_count: h.record_count,
            timestamp_ms: h.timestamp_ms,
            kind: h.kind,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            payload,
        })
    }

    /// Finds the frame with `log_index` (which must be in this segment), returning its position
    /// and the cursor just before it.
    pub(crate) fn locate(&self, log_index: u64, limits: &Limits) -> Result<(usize, Cursor)> {
        let ext = self.extent();
        // Start at or before the frame preceding `log_index`, so that its term is known.
        let mut pos = self.seek_log_index(log_index.saturating_sub(1).max(self.base_log_index));
        let mut before = None;
        // Bounded: each step moves forward by one frame within data_len.
        while pos < ext.data_len {
            let h = self.frame_at(pos, ext.data_len, limits)?;
            if h.log_index == log_index {
                let cursor = before.unwrap_or(Cursor {
                    next_log_index: h.log_index,
                    next_offset: h.base_offset,
                    last_term: 0,
                });
                return Ok((pos, cursor));
            }
            before = Some(Cursor::after(&h));
            pos += h.frame_len();
        }
        if log_index == ext.cursor.next_log_index {
            return Ok((ext.data_len, ext.cursor));
        }
        Err(corrupt(
            &self.path,
            pos,
            CorruptKind::LogIndexGap {
                expected: log_index,
                found: ext.cursor.next_log_index,
            },
        ))
    }

    /// Durably writes bytes `[from, data_len)` of the map.
    pub(crate) fn sync(&self, faults: &Faults) -> io::Result<()> {
        faults.check(FaultPoint::Sync)?;
        let token = faults.sync_token();
        self.file.sync_data()?;
        faults.synced(&self.path, token);
        Ok(())
    }

    /// Writes the index file (temporary name, sync, rename). The segment's bytes it describes
    /// must already be durable.
    pub(crate) fn write_index(&self, faults: &Faults) -> io::Result<()> {
        let s = self.state.read().clone();
        let file = IndexFile {
            base_log_index: self.base_log_index,
            data_len: s.data_len as u64,
            next_log_index: s.cursor.next_log_index,
            next_offset: s.cursor.next_offset,
            max_timestamp_ms: s.max_timestamp_ms,
            last_term: s.cursor.last_term,
            entries: s.entries,
        };
        let tmp = self.index_path.with_extension("index.tmp");
        let result = (|| {
            faults.check(FaultPoint::WriteIndex)?;
            let f = File::create(&tmp)?;
            f.write_all_at(&file.encode(), 0)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.index_path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Deletes the segment's index file, if it has one.
    pub(crate) fn remove_index_file(&self) -> io::Result<()> {
        match std::fs::remove_file(&self.index_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Takes a segment that was just removed from the log for reuse: if nothing else holds it
    /// (no other `Arc`, no reader's view of its map, which could otherwise see the bytes
    /// change) and its file has `capacity` bytes, deletes its index and renames the file to
    /// `to`. The caller syncs the directory.
    pub(crate) fn recycle(self: Arc<Self>, to: PathBuf, capacity: u64) -> io::Result<Recycled> {
        if self.file.metadata()?.len() != capacity {
            return Ok(Recycled::No(self));
        }
        let seg = match Arc::try_unwrap(self) {
            Ok(seg) => seg,
            Err(shared) => return Ok(Recycled::No(shared)),
        };
        // Views of the bytes hold the map; with the segment owned here, no new one can appear.
        if Arc::strong_count(&seg.map) != 1 || Arc::weak_count(&seg.map) != 0 {
            return Ok(Recycled::No(Arc::new(seg)));
        }
        seg.remove_index_file()?;
        std::fs::rename(&seg.path, &to)?;
        Ok(Recycled::Spare(SpareFile {
            file: seg.file,
            path: to,
            capacity,
        }))
    }

    /// Deletes the segment's files. Existing maps stay valid until their last user drops them.
    pub(crate) fn remove_files(&self) -> io::Result<()> {
        match std::fs::remove_file(&self.index_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::remove_file(&self.path)
    }

    /// Bytes of valid data in the segment, header included.
    pub(crate) fn data_len(&self) -> usize {
        self.state.read().data_len
    }
}

/// Opens a segment file, checks its size and header, and (for any but the first segment) that
/// it starts where the previous one ended.
fn open_checked(
    dir: &Path,
    base_log_index: u64,
    prev: Option<Cursor>,
) -> Result<(File, usize, Cursor)> {
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
    Ok((file, file_len, base))
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
    });
    s.last_indexed = pos;
}

/// Scans a whole segment's frames, building its index as it goes.
fn scan_segment(
    data: &[u8],
    base: Cursor,
    opts: &SegmentOptions,
    stop_at: Option<u64>,
) -> (SegmentState, Scan) {
    let mut state = SegmentState {
        data_len: SEGMENT_HEADER_LEN,
        cursor: base,
        max_timestamp_ms: 0,
        entries: Vec::new(),
        last_indexed: 0,
    };
    let interval = usize::try_from(opts.index_interval_bytes).unwrap_or(usize::MAX);
    let s = scan(
        data,
        SEGMENT_HEADER_LEN,
        base,
        &Limits::ON_DISK,
        stop_at,
        |pos, h| {
            add_index_entry(
                &mut state,
                base.next_log_index,
                base.next_offset,
                interval,
                pos,
                h,
            );
        },
    );
    state.data_len = s.end;
    state.cursor = s.cursor;
    state.max_timestamp_ms = s.max_timestamp_ms;
    (state, s)
}

fn state_from_index(f: IndexFile) -> SegmentState {
    SegmentState {
        data_len: usize::try_from(f.data_len).unwrap_or(usize::MAX),
        cursor: Cursor {
            next_log_index: f.next_log_index,
            next_offset: f.next_offset,
            last_term: f.last_term,
        },
        max_timestamp_ms: f.max_timestamp_ms,
        last_indexed: f.entries.last().map_or(0, |e| e.position as usize),
        entries: f.entries,
    }
}

/// Loads and checks the segment's index file. `None` (rebuild) if it is missing, malformed,
/// or disagrees with the segment: the frame of its last entry must decode with the log index
/// and offset the entry claims, and the last frame must end exactly at `data_len`.
fn load_index(dir: &Path, base: Cursor, file_len: usize, data: &[u8]) -> Option<IndexFile> {
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
            .then_some(f);
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
    let s = scan(
        data,
        last.position as usize,
        start,
        &Limits::ON_DISK,
        None,
        |_, _| {},
    );
    let consistent = s.end == data_len
        && s.cursor.next_log_index == f.next_log_index
        && s.cursor.next_offset == f.next_offset
        && s.cursor.last_term == f.last_term
        && base.last_term <= first_term(data, &Limits::ON_DISK).unwrap_or(u64::MAX);
    consistent.then_some(f)
}

/// The term of the segment's first frame, if it has one.
fn first_term(data: &[u8], limits: &Limits) -> Option<u64> {
    decode_frame(data, SEGMENT_HEADER_LEN, limits)
        .ok()
        .flatten()
        .map(|h| h.term)
}

/// Gives a new file `len` bytes of allocated blocks.
fn preallocate(file: &File, len: u64, mode: Preallocate, faults: &Faults) -> io::Result<()> {
    preallocate_from(file, 0, len, mode, faults)
}

/// Gives bytes `[from, len)` of `file` allocated blocks that read as zeros.
fn preallocate_from(
    file: &File,
    from: u64,
    len: u64,
    mode: Preallocate,
    faults: &Faults,
) -> io::Result<()> {
    faults.check(FaultPoint::Preallocate)?;
    if len <= from {
        return Ok(());
    }
    if mode == Preallocate::Fallocate {
        match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), from, len - from) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Err(e.into()),
        }
    }
    const CHUNK: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK];
    let mut pos = from;
    // Bounded by len / CHUNK iterations.
    while pos < len {
        let n = usize::try_from((len - pos).min(CHUNK as u64)).unwrap_or(CHUNK);
        file.write_all_at(zeros.get(..n).unwrap_or_default(), pos)?;
        pos += n as u64;
    }
    Ok(())
}

/// Decodes a segment file from arbitrary bytes the way recovery does, without touching disk:
/// the entry point of the `segment_open` fuzz target. Returns the number of valid frames.
///
/// # Panics
///
/// Never, for any input.
#[doc(hidden)]
pub fn fuzz_scan_segment(data: &[u8]) -> std::result::Result<u64, CorruptKind> {
    let header = SegmentHeader::decode(data)?;
    let limits = Limits {
        record_bytes_max: 1 << 20,
        batch_bytes_max: 1 << 22,
    };
    let base = Cursor {
        next_log_index: header.base_log_index,
        next_offset: header.base_offset,
        last_term: 0,
    };
    let s = scan(data, SEGMENT_HEADER_LEN, base, &limits, None, |_, _| {});
    let _ = IndexFile::decode(data, header.base_log_index, data.len() as u64);
    Ok(s.cursor
        .next_log_index
        .saturating_sub(header.base_log_index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_stops_at_each_kind_of_end() {
        let limits = Limits {
            record_bytes_max: 100,
            batch_bytes_max: 1000,
        };
        let zeros = [0u8; 100];
        let s = scan(&zeros, 0, Cursor::default(), &limits, None, |_, _| {});
        assert_eq!(s.stop, ScanStop::Zero);
        assert_eq!(s.end, 0);
        let s = scan(&zeros[..10], 0, Cursor::default(), &limits, None, |_, _| {});
        assert_eq!(s.stop, ScanStop::EndOfData);
        let s = scan(&zeros, 0, Cursor::default(), &limits, Some(0), |_, _| {});
        assert_eq!(s.stop, ScanStop::Limit);
        let garbage = [0xAB; 100];
        let s = scan(&garbage, 0, Cursor::default(), &limits, None, |_, _| {});
        assert!(matches!(
            s.stop,
            ScanStop::Invalid(CorruptKind::LengthOutOfRange { .. })
        ));
    }

    #[test]
    fn fuzz_scan_rejects_garbage_and_accepts_header_only() {
        assert!(fuzz_scan_segment(&[1, 2, 3]).is_err());
        let mut data = SegmentHeader {
            base_log_index: 5,
            base_offset: 9,
            restart: false,
        }
        .encode()
        .to_vec();
        data.extend_from_slice(&[0u8; 64]);
        assert_eq!(fuzz_scan_segment(&data), Ok(0));
    }
}

/// What [`inspect_segment`] found in a segment file.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct SegmentReport {
    /// Base log index and base offset from the header, or why the header is invalid.
    pub header: std::result::Result<(u64, u64), CorruptKind>,
    /// Valid frames from the start of the file.
    pub frames: u64,
    /// Records in those frames.
    pub records: u64,
    /// Position after the last valid frame.
    pub end: u64,
    /// Why the scan stopped there: `None` at a clean end of data.
    pub stop: Option<CorruptKind>,
    /// Cursor after the last valid frame: next log index, next offset, last term.
    pub next: (u64, u64, u64),
}

/// Scans a segment file's bytes without changing anything, for the `replog check` tool: with
/// the format's limits, as recovery does (FORMAT.md §4), not the configured ones.
#[doc(hidden)]
pub fn inspect_segment(data: &[u8]) -> SegmentReport {
    let limits = Limits::ON_DISK;
    let header = SegmentHeader::decode(data);
    let (base, header) = match header {
        Ok(h) => (h, Ok((h.base_log_index, h.base_offset))),
        Err(kind) => {
            return SegmentReport {
                header: Err(kind),
                frames: 0,
                records: 0,
                end: 0,
                stop: None,
                next: (0, 0, 0),
            };
        }
    };
    let cursor = Cursor {
        next_log_index: base.base_log_index,
        next_offset: base.base_offset,
        last_term: 0,
    };
    let mut records = 0u64;
    let s = scan(data, SEGMENT_HEADER_LEN, cursor, &limits, None, |_, h| {
        records += u64::from(h.record_count);
    });
    SegmentReport {
        header,
        frames: s.cursor.next_log_index - base.base_log_index,
        records,
        end: s.end as u64,
        stop: match s.stop {
            ScanStop::Invalid(kind) => Some(kind),
            _ => None,
        },
        next: (
            s.cursor.next_log_index,
            s.cursor.next_offset,
            s.cursor.last_term,
        ),
    }
}
