//! Reading an open segment: where to start looking for an offset or a log index (the sparse
//! index), validating the frame found there, and handing it out as a [`Batch`] that shares the
//! map.

use super::batch::Batch;
use super::format::{FRAME_HEADER_LEN, PayloadFormat, SEGMENT_HEADER_LEN};
use super::frame::{FrameHeader, Limits, decode_frame};
use super::{Cursor, Segment, corrupt, frame_time, index, kafka};
use crate::error::{CorruptKind, Result};
use crate::types::{LogIndex, Offset, Term};

impl Segment {
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

    /// Where to start scanning for the first record of `time` or later: the last index entry
    /// with no record that late before it (or the segment's start). Only the index is read.
    pub(crate) fn seek_time(&self, time: i64) -> usize {
        let s = self.state.read();
        index::floor_by_time(&s.entries, time).map_or(SEGMENT_HEADER_LEN, |e| e.position as usize)
    }

    /// The first record of `time` or later in the data frame at `pos`, whose header is `h`: its
    /// offset and timestamp. A batch of replog's records has its append time for every record;
    /// a Kafka batch's records have their own, read from the batch (decompressed).
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`](crate::Error::Corrupt) if the frame's Kafka batch does not decode.
    pub(crate) fn first_record_at(
        &self,
        pos: usize,
        h: &FrameHeader,
        time: i64,
    ) -> Result<Option<(u64, i64)>> {
        let Some(latest) = frame_time(self.mapped()?.published(), pos, h) else {
            return Ok(None);
        };
        if latest < time {
            return Ok(None);
        }
        if h.format == PayloadFormat::Replog {
            return Ok(Some((h.base_offset, latest)));
        }
        let batch = self.batch(pos, h)?;
        let found = kafka::first_record_at(&batch.payload, h.compacted, time, &Limits::ON_DISK)
            .map_err(|kind| corrupt(&self.path, pos, kind))?;
        Ok(found.map(|(delta, t)| (h.base_offset.saturating_add(u64::from(delta)), t)))
    }

    /// Where to start scanning for the first frame of a term above `term`: the last index
    /// entry whose frame is of `term` or earlier (or the segment's start); terms never
    /// decrease along a log.
    pub(crate) fn seek_term(&self, term: u64, limits: &Limits) -> Result<usize> {
        self.seek_by(limits, |h| h.term <= term)
    }

    /// The position of the last index entry whose frame is `before` what is sought (or the
    /// segment's start), by a binary search over the index that decodes one frame per step;
    /// `before` must hold for a prefix of the entries.
    fn seek_by(&self, limits: &Limits, before: impl Fn(&FrameHeader) -> bool) -> Result<usize> {
        let ext = self.extent();
        let positions: Vec<usize> = {
            let s = self.state.read();
            s.entries.iter().map(|e| e.position as usize).collect()
        };
        let (mut lo, mut hi) = (0usize, positions.len());
        // Bounded: the range halves each step.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let Some(&pos) = positions.get(mid).filter(|p| **p < ext.data_len) else {
                hi = mid;
                continue;
            };
            if before(&self.frame_at(pos, ext.data_len, limits)?) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo
            .checked_sub(1)
            .and_then(|i| positions.get(i).copied())
            .unwrap_or(SEGMENT_HEADER_LEN))
    }

    /// Decodes and fully validates the frame at `pos`, which must lie below `data_len`.
    pub(crate) fn frame_at(
        &self,
        pos: usize,
        data_len: usize,
        limits: &Limits,
    ) -> Result<FrameHeader> {
        let map = self.mapped()?;
        let data = map.published().get(..data_len).unwrap_or_default();
        match decode_frame(data, pos, limits) {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(corrupt(&self.path, pos, CorruptKind::Truncated)),
            Err(kind) => Err(corrupt(&self.path, pos, kind)),
        }
    }

    /// The frame at `pos` as a batch whose payload shares the map (no copy).
    pub(crate) fn batch(&self, pos: usize, h: &FrameHeader) -> Result<Batch> {
        let payload = self
            .mapped()?
            .bytes(pos + FRAME_HEADER_LEN, pos + h.frame_len())
            .ok_or_else(|| corrupt(&self.path, pos, CorruptKind::Truncated))?;
        Ok(Batch {
            log_index: LogIndex(h.log_index),
            term: Term(h.term),
            base_offset: Offset(h.base_offset),
            record_count: h.record_count,
            timestamp_ms: h.timestamp_ms,
            kind: h.kind,
            format: h.format,
            compacted: h.compacted,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            payload,
        })
    }

    /// The entries the gap frame at `pos`, whose header is `h`, stands for (FORMAT.md §4.3),
    /// one by one as they are asked for ([`super::gap::GapEntries`]).
    pub(crate) fn gap_entries(
        &self,
        pos: usize,
        h: &FrameHeader,
    ) -> Result<super::gap::GapEntries> {
        let frame = self.batch(pos, h)?;
        let runs = super::gap::runs(&frame.payload, h.record_count)
            .map_err(|kind| corrupt(&self.path, pos, kind))?;
        Ok(super::gap::GapEntries::new(frame, runs))
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
            if h.log_index < log_index && log_index < h.log_index + h.entries {
                // Inside a gap frame: entries compaction merged, all committed, which no
                // replica ever cuts apart (Raft truncates only what is not committed).
                return Err(crate::Error::Io(std::sync::Arc::new(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "log index {log_index} lies inside a compacted gap of entries {}..{} \
                         in {}",
                        h.log_index,
                        h.log_index + h.entries,
                        self.path.display()
                    ),
                ))));
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
}
