//! Reading: [`PartitionLog::read`] by offset, the crate-internal
//! [`read_entries`](PartitionLog::read_entries) by log index, and [`LogIter`], all over one walk
//! of the segments that tolerates concurrent purges and truncations.

use std::sync::Arc;

use super::{PartitionLog, segment_index_of};
use crate::error::{Error, Result};
use crate::segment::Segment;
use crate::segment::batch::Batch;
use crate::segment::format::{EntryKind, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
use crate::segment::frame::{FrameHeader, Limits};
use crate::segment::record::Record;
use crate::types::Offset;

impl PartitionLog {
    /// Reads batches holding records from `from` on, at most `max_bytes` of frames. The first
    /// batch may start before `from` (skip its records below `from`); at least one batch is
    /// returned if `from` is below the end, even if it alone is larger than `max_bytes`. Returns
    /// an empty list at the end of the log.
    ///
    /// Every frame is validated (CRC, layout, continuity) before it is returned.
    ///
    /// # Errors
    ///
    /// [`Error::OffsetOutOfRange`] if `from` is below the log start or past its end;
    /// [`Error::Corrupt`] if a frame on the way fails validation.
    pub fn read(&self, from: Offset, max_bytes: usize) -> Result<Vec<Batch>> {
        let end = self.end_offset();
        let seg = {
            let segs = self.segments.read();
            let start = Offset(segs.first().map_or(0, |s| s.base_offset));
            if from < start || from > end {
                return Err(Error::OffsetOutOfRange {
                    requested: from,
                    start,
                    end,
                });
            }
            let i = segs.partition_point(|s| s.extent().cursor.next_offset <= from.0);
            segs.get(i).cloned()
        };
        let mut out: Vec<Batch> = Vec::new();
        let mut bytes = 0usize;
        self.walk(
            seg,
            |s| s.seek_offset(from.0),
            |h| h.base_offset > from.0,
            |s, pos, h| {
                if h.kind == EntryKind::Control || h.next_offset() <= from.0 {
                    return Ok(true);
                }
                // Stop at the end offset read above: a frame can be visible in its segment a
                // moment before the end offset moves past it, and a read must never return
                // records that a following `read(next)` would call out of range.
                if h.base_offset >= end.0 {
                    return Ok(false);
                }
                // Batches must follow each other; a concurrent truncation ends the read here.
                if out
                    .last()
                    .is_some_and(|prev| prev.next_offset().0 != h.base_offset)
                {
                    return Ok(false);
                }
                let len = h.frame_len();
                if !within(out.len(), bytes, len, max_bytes) {
                    return Ok(false);
                }
                out.push(s.batch(pos, h)?);
                bytes = bytes.saturating_add(len);
                Ok(bytes < max_bytes)
            },
        )?;
        Ok(out)
    }

    /// Where the frames of `term` and earlier terms end (Kafka's OffsetForLeaderEpoch, a
    /// Raft term being a leader epoch): the largest term at or below `term` that the log holds
    /// and the offset after its last record (the first offset of the next term). `None` if the
    /// log holds no frame of `term` or earlier (they were purged, or it starts later). Terms
    /// never decrease along the log: the segment is found from the terms each keeps in memory,
    /// the frame by a binary search over its index, then at most one index interval is read.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] if a frame on the way fails validation.
    pub(crate) fn end_of_term(&self, term: u64) -> Result<Option<(u64, Offset)>> {
        let (seg, before) = {
            let segs = self.segments.read();
            match segs.iter().position(|s| s.extent().cursor.last_term > term) {
                None => {
                    // Every frame is of `term` or earlier.
                    let last = segs.last().map(|s| s.extent().cursor);
                    return Ok(last
                        .filter(|c| c.next_log_index > self.first_log_index().get())
                        .map(|c| (c.last_term, Offset(c.next_offset))));
                }
                Some(i) => {
                    let before = i
                        .checked_sub(1)
                        .and_then(|j| segs.get(j))
                        .map(|s| s.extent().cursor.last_term);
                    (segs.get(i).cloned(), before)
                }
            }
        };
        let Some(seg) = seg else { return Ok(None) };
        let start = seg.seek_term(term, &Limits::ON_DISK)?;
        // The first frame read sets it unless the scan starts at the segment's start (or
        // restarts there after an index entry that points too far).
        let mut last_term = before;
        let mut found = None;
        self.walk(
            Some(seg),
            |_| start,
            |h| h.term > term,
            |_, _, h| {
                if h.term > term {
                    found = last_term.map(|t| (t, Offset(h.base_offset)));
                    return Ok(false);
                }
                last_term = Some(h.term);
                Ok(true)
            },
        )?;
        Ok(found)
    }

    /// The latest segment's largest batch timestamp (0 if none): where the leader's next
    /// stamp starts from. Looks at the last segments only (timestamps do not decrease): one,
    /// unless it was just rolled and holds nothing yet.
    pub(crate) fn max_timestamp_ms(&self) -> u64 {
        self.segments
            .read()
            .iter()
            .rev()
            .map(|s| s.extent().max_timestamp_ms)
            .find(|t| *t > 0)
            .unwrap_or(0)
    }

    /// Walks frames in log order from `seg` on, through later segments found by base log index
    /// (not by position, so that a concurrent purge or truncation cannot make a walk skip or
    /// repeat segments). `seek` picks where to start in each segment; if the first frame found
    /// there `overshoots` what is wanted (an index that passed its checks but points too far),
    /// the segment is scanned from its start instead, so a bad index never makes a read skip
    /// frames. `visit` sees every frame and returns `false` to stop. Bounded: each segment is
    /// visited once, each frame at most twice.
    pub(super) fn walk(
        &self,
        mut seg: Option<Arc<Segment>>,
        seek: impl Fn(&Segment) -> usize,
        overshoots: impl Fn(&FrameHeader) -> bool,
        mut visit: impl FnMut(&Segment, usize, &FrameHeader) -> Result<bool>,
    ) -> Result<()> {
        while let Some(current) = seg {
            let ext = current.extent();
            let mut pos = seek(&current);
            let mut first = true;
            while pos < ext.data_len {
                let h = current.frame_at(pos, ext.data_len, &Limits::ON_DISK)?;
                if std::mem::take(&mut first) && pos != SEGMENT_HEADER_LEN && overshoots(&h) {
                    pos = SEGMENT_HEADER_LEN;
                    continue;
                }
                if !visit(&current, pos, &h)? {
                    return Ok(());
                }
                pos += h.frame_len();
            }
            // An empty segment ends where it begins: it is the last one.
            seg = self
                .segment_at(ext.cursor.next_log_index)
                .filter(|next| !Arc::ptr_eq(next, &current));
        }
        Ok(())
    }

    /// The segment whose base log index is `base`, if the log still has it.
    fn segment_at(&self, base: u64) -> Option<Arc<Segment>> {
        let segs = self.segments.read();
        let i = segs.partition_point(|s| s.base_log_index < base);
        segs.get(i).filter(|s| s.base_log_index == base).cloned()
    }

    /// Iterates over records from `from` to the end of the log as it is when the iterator
    /// reaches it.
    pub fn iter(&self, from: Offset) -> LogIter<'_> {
        LogIter {
            log: self,
            next: from,
            buffered: Vec::new().into_iter(),
            after: from,
            done: false,
        }
    }

    /// The bytes of frames after the entry at `log_index`: what a replica that holds the log up
    /// to `log_index` lacks. An upper bound, counted from the index point at or before the next
    /// entry (at most `index_interval_bytes` early); the whole log if `log_index` is below it.
    pub(crate) fn bytes_after(&self, log_index: u64) -> u64 {
        let next = log_index.saturating_add(1);
        if next >= self.next_log_index().get() {
            return 0;
        }
        let segs = self.segments.read();
        let first = segs
            .partition_point(|s| s.base_log_index <= next)
            .saturating_sub(1);
        segs.iter()
            .enumerate()
            .skip(first)
            .map(|(i, s)| {
                let from = if i == first {
                    s.seek_log_index(next)
                } else {
                    SEGMENT_HEADER_LEN
                };
                s.data_len().saturating_sub(from) as u64
            })
            .sum()
    }

    /// Reads entries (data and control) with log indices in `[from, to)`, at most `max_bytes`
    /// of frames, except that the first entry is returned whatever its size (at least one entry
    /// if any is in range).
    ///
    /// # Errors
    ///
    /// [`Error::LogIndexOutOfRange`] if `from` is below the log's first entry or past its end;
    /// [`Error::Corrupt`] if a frame fails validation.
    pub(crate) fn read_entries(&self, from: u64, to: u64, max_bytes: usize) -> Result<Vec<Batch>> {
        let next = self.next_log_index().0;
        let seg = {
            let segs = self.segments.read();
            let i = segment_index_of(&segs, from, next)?;
            segs.get(i).cloned()
        };
        let to = to.min(next);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let expected = std::cell::Cell::new(from);
        if from >= to {
            return Ok(out);
        }
        self.walk(
            seg,
            |s| s.seek_log_index(expected.get()),
            |h| h.log_index > expected.get(),
            |s, pos, h| {
                let want = expected.get();
                if h.log_index > want {
                    return Err(Error::Corrupt {
                        file: s.path.clone(),
                        position: pos as u64,
                        kind: crate::error::CorruptKind::LogIndexGap {
                            expected: want,
                            found: h.log_index,
                        },
                    });
                }
                if h.log_index + h.entries <= want {
                    return Ok(true);
                }
                if h.kind == EntryKind::Gap {
                    // The entries a gap frame stands for, each as Raft sees it, counted as
                    // a frame header each (what a replica appends for it).
                    let mut entries = s.gap_entries(pos, h)?;
                    entries.skip_to(want);
                    for entry in entries {
                        let len = FRAME_HEADER_LEN;
                        if entry.log_index.get() >= to || !within(out.len(), bytes, len, max_bytes)
                        {
                            return Ok(false);
                        }
                        expected.set(entry.log_index.get() + 1);
                        out.push(entry);
                        bytes = bytes.saturating_add(len);
                    }
                    return Ok(bytes < max_bytes && expected.get() < to);
                }
                let len = h.frame_len();
                if !within(out.len(), bytes, len, max_bytes) {
                    return Ok(false);
                }
                out.push(s.batch(pos, h)?);
                expected.set(want + 1);
                bytes = bytes.saturating_add(len);
                Ok(bytes < max_bytes && want + 1 < to)
            },
        )?;
        Ok(out)
    }
}

/// Whether a frame of `len` bytes joins a read that holds `taken` frames of `bytes` bytes
/// within `max_bytes`: it does if it fits, and the first frame always does (one larger than the
/// budget goes alone).
fn within(taken: usize, bytes: usize, len: usize, max_bytes: usize) -> bool {
    taken == 0 || bytes.saturating_add(len) <= max_bytes
}

/// Iterator over a log's records; see [`PartitionLog::iter`].
#[derive(Debug)]
pub struct LogIter<'a> {
    log: &'a PartitionLog,
    next: Offset,
    buffered: std::vec::IntoIter<(Offset, Record)>,
    /// The offset after the last batch read: where the next read starts once `buffered` is
    /// empty (past the last record when compaction left the batch's end without records).
    after: Offset,
    done: bool,
}

impl Iterator for LogIter<'_> {
    type Item = Result<(Offset, Record)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.buffered.next() {
                self.next = Offset(item.0.0 + 1);
                return Some(Ok(item));
            }
            if self.done {
                return None;
            }
            self.next = self.next.max(self.after);
            let batches = match self.log.read(self.next, 1 << 20) {
                Ok(b) => b,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if batches.is_empty() {
                self.done = true;
                return None;
            }
            let from = self.next;
            self.after = batches.last().map_or(from, Batch::next_offset);
            self.buffered = batches
                .iter()
                .flat_map(Batch::records)
                .filter(|(o, _)| *o >= from)
                .collect::<Vec<_>>()
                .into_iter();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{fill, small, values};
    use super::*;

    #[test]
    fn bytes_after_counts_what_a_replica_at_an_index_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), crate::LogConfig::default()).unwrap();
        // Records over the index interval (4 KiB), so that every frame has an index point.
        let record = || Record::new(vec![1u8; 10_000]);
        let a = log.append(&[record()]).unwrap();
        let b = log.append(&[record(), record()]).unwrap();
        let end = log.next_log_index().get() - 1;
        assert_eq!(log.bytes_after(end), 0, "the last entry: nothing lacking");
        let after_a = log.bytes_after(a.log_index.get());
        assert!(
            (20_000..30_000).contains(&after_a),
            "b's two records lie after a: {after_a}"
        );
        assert!(b.log_index.get() == end);
    }
    use crate::config::LogConfig;

    #[test]
    fn reads_share_the_map_instead_of_copying() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        log.append(&[Record::new("shared bytes").with_key("k")])
            .unwrap();
        let a = log
            .read(Offset(0), 100)
            .unwrap()
            .remove(0)
            .records()
            .next()
            .unwrap()
            .1;
        let b = log
            .read(Offset(0), 100)
            .unwrap()
            .remove(0)
            .records()
            .next()
            .unwrap()
            .1;
        // Two reads hand out the same memory: the segment's map, not two copies.
        assert_eq!(a.value.as_ptr(), b.value.as_ptr());
        assert_eq!(a.key.unwrap().as_ptr(), b.key.unwrap().as_ptr());
    }

    #[test]
    fn out_of_range_reads_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        fill(&log, 3);
        assert!(matches!(
            log.read(Offset(4), 100),
            Err(Error::OffsetOutOfRange {
                requested: Offset(4),
                start: Offset(0),
                end: Offset(3)
            })
        ));
        assert!(log.read(Offset(3), 100).unwrap().is_empty());
    }

    #[test]
    fn concurrent_readers_see_whole_batches() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(PartitionLog::open(dir.path(), small()).unwrap());
        let writer = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    let batch: Vec<_> = (0..3).map(|j| Record::new(format!("{i}:{j}"))).collect();
                    log.append(&batch).unwrap();
                }
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = 0;
        while seen < 6000 && std::time::Instant::now() < deadline {
            let end = log.end_offset().0;
            let got = values(&log, 0);
            assert!(
                got.len() as u64 >= end,
                "everything below the end offset is readable"
            );
            assert_eq!(got.len() % 3, 0, "batches are whole");
            for (o, v) in &got {
                assert_eq!(v, format!("{}:{}", o / 3, o % 3).as_bytes());
            }
            seen = got.len();
        }
        writer.join().unwrap();
        assert_eq!(values(&log, 0).len(), 6000);
    }

    /// A read racing a purge walked segments by position and skipped records.
    #[test]
    fn regression_reads_racing_purges_stay_contiguous() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(PartitionLog::open(dir.path(), small()).unwrap());
        fill(&log, 3000);
        let purger = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut o = 0;
                while o < 2900 {
                    o += 7;
                    log.purge_to(Offset(o)).unwrap();
                    std::thread::yield_now();
                }
            })
        };
        for _ in 0..2000 {
            let Ok(batches) = log.read(log.start_offset(), usize::MAX) else {
                continue;
            };
            for pair in batches.windows(2) {
                assert_eq!(
                    pair[0].next_offset(),
                    pair[1].base_offset(),
                    "a read skipped records"
                );
            }
        }
        purger.join().unwrap();
    }

    /// An index entry that passes every check but points past the frame a read needs must not
    /// make the read skip records: it rescans the segment.
    #[test]
    fn a_misleading_index_entry_never_skips_records() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig {
            segment_bytes: 64 << 10,
            index_interval_bytes: 64,
            ..small()
        };
        let log = PartitionLog::open(dir.path(), cfg.clone()).unwrap();
        fill(&log, 50);
        drop(log);
        let path = dir.path().join(crate::segment::format::index_file_name(0));
        let mut bytes = std::fs::read(&path).unwrap();
        let (header, entries) = (72, 20);
        let count = (bytes.len() - header) / entries;
        assert!(count > 10);
        // Entry 5 claims the first offset of entry 4's frame: still non-decreasing.
        let e4 = header + 4 * entries;
        let e5 = header + 5 * entries;
        let rel4: [u8; 4] = bytes[e4 + 4..e4 + 8].try_into().unwrap();
        bytes[e5 + 4..e5 + 8].copy_from_slice(&rel4);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&bytes[..68]);
        crc.update(&bytes[header..]);
        let sum = crc.finalize().to_le_bytes();
        bytes[68..72].copy_from_slice(&sum);
        std::fs::write(&path, &bytes).unwrap();
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
        let target = u64::from(u32::from_le_bytes(rel4));
        let batches = log.read(Offset(target), 1 << 20).unwrap();
        assert_eq!(
            batches[0].base_offset(),
            Offset(target),
            "the read starts at the wanted record"
        );
        assert_eq!(values(&log, 0).len(), 50);
    }

    #[test]
    fn end_of_term_matches_a_scan_over_many_segments() {
        use crate::log::EntrySpec;
        use crate::segment::record::encode_records;
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        // (term, records) of each frame; 0 records: a control frame (a new leader's blank).
        let mut frames = Vec::new();
        for term in [1u64, 1, 1, 2, 2, 5, 5, 5, 5, 8] {
            frames.push((term, 2));
        }
        frames.insert(3, (2, 0));
        frames.insert(7, (5, 0));
        for _ in 0..4 {
            frames.extend([(9, 1), (9, 3)]);
        }
        let mut model = Vec::new(); // (term, offset after the frame)
        for (i, (term, n)) in frames.iter().enumerate() {
            let spec = EntrySpec {
                term: Some(*term),
                ..EntrySpec::default()
            };
            let info = if *n == 0 {
                log.append_entry(spec, 0, &[0]).unwrap()
            } else {
                let records: Vec<Record> = (0..*n)
                    .map(|j| Record::new(format!("{i}-{j}-{:060}", 0)))
                    .collect();
                let (payload, count) = encode_records(&records, 256).unwrap();
                log.append_entry(spec, count, &payload).unwrap()
            };
            model.push((*term, info.base_offset.get() + u64::from(info.record_count)));
        }
        assert!(log.segments.read().len() > 3, "many segments");
        for asked in 0..12u64 {
            let want = model
                .iter()
                .rev()
                .find(|(t, _)| *t <= asked)
                .map(|(t, end)| (*t, Offset(*end)));
            assert_eq!(log.end_of_term(asked).unwrap(), want, "term {asked}");
        }
        // After a purge of the first segments, a term wholly before the log start is unknown.
        log.purge_to(Offset(8)).unwrap();
        assert_eq!(log.end_of_term(0).unwrap(), None);
        assert_eq!(log.end_of_term(9).unwrap(), Some((9, log.end_offset())));
    }
}
