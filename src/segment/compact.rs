//! Compaction's part of a segment (FORMAT.md §4.3, §7): a new file written beside one or more
//! consecutive sealed segments, holding what compaction kept of their frames, checked whole,
//! and then installed in the first one's place by one rename, the others deleted after it.
//!
//! The new file has the first segment's name with `.compacted.tmp` after it until the rename,
//! so a crash before it leaves a temporary file that the next open removes, and the old
//! segments whole. The first segment's index is deleted before the rename: a crash between the
//! two leaves the old segment without an index (rebuilt on open), a crash after the rename the
//! new one without an index (rebuilt too). No crash leaves an index describing the other file.
//! A crash after the rename and before the other segments are deleted leaves them beside a
//! first segment that holds their frames too: the next open reads the first up to the next
//! one's base log index (where a sealed segment's scan stops), so the log reads the same, and
//! the next compaction merges them again.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::format::{END_MARK, FORMAT_VERSION, SEGMENT_HEADER_LEN, SegmentHeader};
use super::frame::{FrameHeader, Limits, body_len_for, decode_frame, encode_frame_header};
use super::mmap::MappedFile;
use super::scan::scan_segment;
use super::{Cursor, ScanStop, Segment, SegmentOptions, SegmentState, corrupt};
use crate::env::sync_dir;
use crate::error::{CorruptKind, Result};

/// One frame of a compacted segment: a frame kept as it is, or one rewritten with fewer
/// records.
#[derive(Debug)]
pub(crate) enum FrameOut {
    /// The frame at position `pos` of the `seg`th old segment, copied byte for byte.
    Keep { seg: usize, pos: usize },
    /// The frame with this header (its `compacted` flag set, its `body_len` computed here)
    /// and the records compaction kept.
    Rewrite(FrameHeader, Bytes),
}

/// A compacted segment written and checked under its temporary name, not yet in place.
#[derive(Debug)]
pub(crate) struct CompactedFile {
    tmp: PathBuf,
    file: File,
    map: Arc<MappedFile>,
    state: SegmentState,
    base: Cursor,
    /// Bytes of data (header and frames).
    pub(crate) data_len: usize,
}

impl Segment {
    /// The segment's header, read from its published bytes.
    pub(crate) fn header(&self) -> Option<SegmentHeader> {
        self.header
    }

    /// Every frame of the segment: its position and header, in order.
    pub(crate) fn frames(&self) -> Result<Vec<(usize, FrameHeader)>> {
        let data_len = self.data_len();
        let map = self.mapped()?;
        let data = map.published().get(..data_len).unwrap_or_default();
        let mut pos = SEGMENT_HEADER_LEN;
        let mut out = Vec::new();
        // Bounded by `data_len`: each turn moves past one frame of at least a header.
        while pos < data_len {
            match decode_frame(data, pos, &Limits::ON_DISK) {
                Ok(Some(h)) => {
                    out.push((pos, h));
                    pos += h.frame_len();
                }
                Ok(None) => return Err(corrupt(&self.path, pos, CorruptKind::Truncated)),
                Err(kind) => return Err(corrupt(&self.path, pos, kind)),
            }
        }
        Ok(out)
    }
}

/// Writes `frames` as the consecutive sealed segments `group` compacted into one, beside the
/// first under a temporary name, synced, and checks the result as recovery would: the first
/// segment's first log index and offset, the last one's next, every frame valid. The segments
/// themselves are untouched.
pub(crate) fn write_compacted(
    group: &[Arc<Segment>],
    frames: &[FrameOut],
    opts: &SegmentOptions,
) -> Result<CompactedFile> {
    let (Some(first), Some(last)) = (group.first(), group.last()) else {
        return Err(std::io::Error::other("no segment to compact").into());
    };
    let end = last.extent().cursor;
    let maps: Vec<_> = group.iter().map(|s| s.mapped()).collect::<Result<_>>()?;
    let datas: Vec<&[u8]> = maps
        .iter()
        .zip(group)
        .map(|(m, s)| m.published().get(..s.data_len()).unwrap_or_default())
        .collect();
    let restart = first.header().is_some_and(|h| h.restart);
    let tmp = first.path.with_extension("log.compacted.tmp");
    let result = (|| -> Result<CompactedFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            base_log_index: first.base_log_index,
            base_offset: first.base_offset,
            restart,
            compacted: true,
        };
        out.write_all(&header.encode())?;
        let mut len = SEGMENT_HEADER_LEN;
        for frame in frames {
            match frame {
                FrameOut::Keep { seg, pos } => {
                    let (data, path) = datas
                        .get(*seg)
                        .zip(group.get(*seg).map(|s| &s.path))
                        .ok_or_else(|| std::io::Error::other("a frame of no segment"))?;
                    let h = decode_frame(data, *pos, &Limits::ON_DISK)
                        .ok()
                        .flatten()
                        .ok_or_else(|| corrupt(path, *pos, CorruptKind::Truncated))?;
                    let bytes = data
                        .get(*pos..*pos + h.frame_len())
                        .ok_or_else(|| corrupt(path, *pos, CorruptKind::Truncated))?;
                    out.write_all(bytes)?;
                    len += bytes.len();
                }
                FrameOut::Rewrite(h, payload) => {
                    let mut h = *h;
                    h.body_len = body_len_for(payload.len(), &Limits::ON_DISK)?;
                    h.compacted = true;
                    out.write_all(&encode_frame_header(&h, payload))?;
                    out.write_all(payload)?;
                    len += h.frame_len();
                }
            }
        }
        out.write_all(&END_MARK)?;
        out.flush()?;
        drop(out);
        file.sync_all()?;
        let file_len = len + END_MARK.len();
        let map = MappedFile::map_read_only(&file, file_len, file_len)?;
        let base = Cursor {
            next_log_index: first.base_log_index,
            next_offset: first.base_offset,
            last_term: 0,
        };
        let (state, scan) = scan_segment(map.published(), base, opts, Some(end.next_log_index));
        if scan.stop != ScanStop::Limit
            || scan.cursor.next_offset != end.next_offset
            || scan.end != len
        {
            let kind = match scan.stop {
                ScanStop::Invalid(kind) => kind,
                _ => CorruptKind::MissingEntries {
                    expected: end.next_log_index,
                    found: scan.cursor.next_log_index,
                },
            };
            return Err(corrupt(&tmp, scan.end, kind));
        }
        Ok(CompactedFile {
            tmp: tmp.clone(),
            file,
            map,
            state,
            base,
            data_len: len,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl CompactedFile {
    /// Puts the compacted file in place of the segments `group` (the first one's index deleted
    /// first, then one rename over the first, the directory synced, then the other segments'
    /// files deleted and the directory synced again) and returns it as a segment, which has no
    /// index file yet: the caller writes it. The caller holds the log's locks, so that the
    /// segments are still in the log and nothing else changes their files.
    pub(crate) fn install(
        self,
        group: &[Arc<Segment>],
        opts: &SegmentOptions,
        #[cfg(test)] stop: Option<crate::log::CompactionStep>,
    ) -> Result<Arc<Segment>> {
        let Some((old, merged)) = group.split_first() else {
            return Err(std::io::Error::other("no segment to replace").into());
        };
        let dir = old
            .path
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        old.remove_index_file()?;
        sync_dir(&dir)?;
        #[cfg(test)]
        if stop == Some(crate::log::CompactionStep::IndexRemoved) {
            return Err(std::io::Error::other("stopped for a test").into());
        }
        std::fs::rename(&self.tmp, &old.path)?;
        // The new file has the old one's name: the old segment must never open it as its own
        // (nor could it: the inodes differ, `lazy.rs`).
        old.retire();
        sync_dir(&dir)?;
        #[cfg(test)]
        if stop == Some(crate::log::CompactionStep::Renamed) && !merged.is_empty() {
            return Err(std::io::Error::other("stopped for a test").into());
        }
        if !merged.is_empty() {
            for s in merged {
                s.remove_files()?;
            }
            sync_dir(&dir)?;
        }
        Ok(Arc::new(Segment::new(
            &dir,
            FORMAT_VERSION,
            self.base,
            Arc::new(self.file),
            self.map,
            opts,
            self.state,
        )?))
    }

    /// Deletes the file.
    pub(crate) fn discard(self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}
