//! The log's start: [`PartitionLog::purge_to`], [`PartitionLog::enforce_retention`] and the
//! Raft layer's purges delete whole segments from the front (or hand their files to the pool
//! of recycled segment files), never the active one.

use std::sync::Arc;

use super::PartitionLog;
use crate::env::sync_dir;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::segment::{Recycled, Segment};
use crate::types::Offset;

impl PartitionLog {
    /// Deletes whole segments whose entries all have log indices below `log_index`, oldest
    /// first, never the active one.
    pub(crate) fn purge_to_log_index(&self, log_index: u64) -> Result<usize> {
        self.remove_leading(|segs, i| {
            segs.get(i + 1)
                .is_some_and(|n| n.base_log_index <= log_index)
        })
    }

    /// The base log index of the segment that holds `offset`, if segments come before it
    /// (what a purge of the records below `offset` would delete up to; `None` if nothing).
    pub(crate) fn segment_floor_of_offset(&self, offset: u64) -> Option<u64> {
        let segs = self.segments.read();
        let i = segs.partition_point(|s| s.base_offset <= offset);
        (i > 1)
            .then(|| segs.get(i - 1).map(|s| s.base_log_index))
            .flatten()
    }

    /// Deletes whole segments whose records are all below `offset`, oldest first. The active
    /// segment is never deleted, so the log may keep records below `offset`. Returns the new
    /// start offset.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a file could not be deleted; [`Error::PreviousIo`] after a failed sync.
    pub fn purge_to(&self, offset: Offset) -> Result<Offset> {
        self.remove_leading(|segs, i| segs.get(i + 1).is_some_and(|n| n.base_offset <= offset.0))?;
        Ok(self.start_offset())
    }

    /// Applies `retention_bytes` and `retention_time` at `now_ms` (milliseconds since the Unix
    /// epoch): deletes the oldest segments whose newest batch is older than `retention_time`, and
    /// the oldest segments while the rest would still hold at least `retention_bytes` (as Kafka
    /// does). The active segment is never deleted. Returns the number of segments deleted.
    ///
    /// # Errors
    ///
    /// As [`purge_to`](Self::purge_to).
    pub fn enforce_retention(&self, now_ms: u64) -> Result<usize> {
        // Retention runs periodically: a good time to close sealed maps nobody reads.
        self.opts.maps.close_idle();
        self.remove_leading(self.retention_rule(now_ms))
    }

    /// The log index before which retention with these limits (a topic's `retention.ms` and
    /// `retention.bytes`; 0 bytes keeps only the active segment) would delete every entry at
    /// `now_ms` (the first kept segment's base), or `None` if it would delete nothing. The
    /// Raft layer purges up to it through openraft, so that replicas agree on what is gone.
    pub(crate) fn retention_point_with(
        &self,
        now_ms: u64,
        time: Option<std::time::Duration>,
        bytes: Option<u64>,
    ) -> Option<u64> {
        self.opts.maps.close_idle();
        let segs = self.segments.read().clone();
        let mut rule = self.retention_rule_with(now_ms, time, bytes);
        let mut n = 0;
        while n + 1 < segs.len() && rule(&segs, n) {
            n += 1;
        }
        (n > 0).then(|| segs.get(n).map_or(0, |s| s.base_log_index))
    }

    /// Says whether leading segment `i` is due for deletion, given those before it are.
    fn retention_rule(&self, now_ms: u64) -> impl FnMut(&[Arc<Segment>], usize) -> bool {
        self.retention_rule_with(
            now_ms,
            self.config.retention_time,
            self.config.retention_bytes,
        )
    }

    /// [`retention_rule`](Self::retention_rule) with these limits.
    fn retention_rule_with(
        &self,
        now_ms: u64,
        time: Option<std::time::Duration>,
        max_bytes: Option<u64>,
    ) -> impl FnMut(&[Arc<Segment>], usize) -> bool {
        let ms = time.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        let mut total: u64 = self.size_bytes();
        move |segs, i| {
            let Some(seg) = segs.get(i) else { return false };
            let size = seg.data_len() as u64;
            let old =
                ms.is_some_and(|ms| seg.extent().max_timestamp_ms.saturating_add(ms) < now_ms);
            let big = max_bytes.is_some_and(|max| total.saturating_sub(size) >= max);
            if old || big {
                total = total.saturating_sub(size);
            }
            old || big
        }
    }

    /// Removes leading segments while `remove(segments, i)` says so, never the last one.
    fn remove_leading(
        &self,
        mut remove: impl FnMut(&[Arc<Segment>], usize) -> bool,
    ) -> Result<usize> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        // The list only changes under the writer lock, held here: the count stays right.
        let n = {
            let segs = self.segments.read();
            let mut n = 0;
            while n + 1 < segs.len() && remove(&segs, n) {
                n += 1;
            }
            n
        };
        if n == 0 {
            // Nothing to delete: never wait for a background sync for nothing.
            return Ok(0);
        }
        self.join_pending_seal(&mut w)?;
        let removed: Vec<Arc<Segment>> = self.segments.write().drain(..n).collect();
        w.unsynced
            .retain(|s| !removed.iter().any(|r| Arc::ptr_eq(r, s)));
        // Oldest first, each deletion durable before the next: a crash leaves a suffix. A
        // recycled file leaves the log the same way, by a rename to a temporary name. (An
        // unsynced one keeps its dirty pages: rewriting them costs no more than clean ones,
        // and its new header is made durable without syncing them.)
        let count = removed.len();
        for s in removed {
            let s = if w.recycled.len() < self.config.recycle_segments {
                let to = self.dir.join(format!("recycled-{}.tmp", s.base_log_index));
                match s.recycle(to, self.segment_bytes())? {
                    Recycled::Spare(spare) => {
                        w.recycled.push(spare);
                        sync_dir(&self.dir)?;
                        continue;
                    }
                    Recycled::No(s) => s,
                }
            } else {
                s
            };
            s.remove_files()?;
            sync_dir(&self.dir)?;
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::super::now_ms;
    use super::super::test_util::{
        append_numbered, fill, four_frame_segments, numbered, recycled_files, small, values,
    };
    use super::*;
    use crate::config::LogConfig;
    use crate::error::Error;
    use crate::segment::batch::Batch;

    #[test]
    fn purge_and_retention_delete_whole_old_segments() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig {
            retention_bytes: Some(3000),
            ..small()
        };
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
        fill(&log, 100);
        let segments = log.segment_count();
        let start = log.purge_to(Offset(30)).unwrap();
        assert!(
            start <= Offset(30) && start > Offset(0),
            "purged to a boundary: {start}"
        );
        assert!(matches!(
            log.read(Offset(0), 10),
            Err(Error::OffsetOutOfRange { .. })
        ));
        assert_eq!(values(&log, start.0).len() as u64, 100 - start.0);
        assert!(log.segment_count() < segments);

        log.enforce_retention(now_ms()).unwrap();
        assert!(log.size_bytes() >= 3000, "keeps at least retention_bytes");
        assert!(
            log.size_bytes() < 3000 + 1024,
            "drops what is beyond one segment"
        );
        let start = log.start_offset();
        drop(log);
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        assert_eq!(log.start_offset(), start);
        assert_eq!(log.end_offset(), Offset(100));

        // Time retention: every sealed segment is older than 0 ms in the future.
        let log_ms = LogConfig {
            retention_time: Some(std::time::Duration::from_millis(1)),
            ..small()
        };
        drop(log);
        let log = PartitionLog::open(dir.path(), log_ms).unwrap();
        log.enforce_retention(now_ms() + 10_000).unwrap();
        assert_eq!(log.segment_count(), 1, "only the active segment is left");
    }

    #[test]
    fn only_segments_nobody_reads_are_recycled() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), four_frame_segments(2)).unwrap();
        append_numbered(&log, 0..9);
        // Never synced: recycled all the same (the roll that takes it does not sync it).
        log.purge_to(Offset(4)).unwrap();
        assert_eq!(recycled_files(dir.path()), 1);
        append_numbered(&log, 9..13);
        assert_eq!(recycled_files(dir.path()), 0, "the roll at 12 took it");
        // A reader still holds a view of [4, 8): its bytes must never change under it.
        let view = log.read(Offset(4), 1).unwrap(); // at least one batch: record 4
        log.purge_to(Offset(12)).unwrap();
        assert_eq!(
            recycled_files(dir.path()),
            1,
            "[8, 12) is recycled, [4, 8) deleted"
        );
        append_numbered(&log, 13..40);
        let held: Vec<(u64, Vec<u8>)> = view
            .iter()
            .flat_map(Batch::records)
            .map(|(o, r)| (o.0, r.value.to_vec()))
            .collect();
        assert_eq!(held, numbered(4..=4));
        assert_eq!(values(&log, 12), numbered(12..=39));
    }
}
