//! Cutting the log: [`PartitionLog::truncate_after`] removes entries from the end (Raft
//! conflicts), and the crate-internal [`reset`](PartitionLog::reset) empties the log and
//! restarts it at a new base (a Raft snapshot installed past the log). Both are durable when they
//! return.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{PartitionLog, segment_index_of};
use crate::env::sync_dir;
use crate::error::{Error, Result};
use crate::segment::frame::Limits;
use crate::segment::mmap::WriteHandle;
use crate::segment::{Cursor, Segment};
use crate::types::LogIndex;

impl PartitionLog {
    /// Removes every entry after `last_kept` (every entry, if `None`), as Raft does with
    /// entries that conflict with the leader's. Durable when it returns. Does nothing if there
    /// is nothing after `last_kept`.
    ///
    /// # Correctness
    ///
    /// Bytes already handed to readers stay valid: truncation never rewrites published bytes,
    /// it moves the writer to a new segment file.
    ///
    /// # Errors
    ///
    /// [`Error::LogIndexOutOfRange`] if `last_kept` is below the log's first entry minus one
    /// (those entries were purged); [`Error::PreviousIo`] after a failed sync; [`Error::Io`]
    /// (the log then latches, since it may be half done).
    pub fn truncate_after(&self, last_kept: Option<LogIndex>) -> Result<()> {
        let _sync = self.sync.lock();
        let mut w = self.writer.lock();
        self.check_writable()?;
        self.seal_all_locked(&mut w)?;
        let segs = self.segments.read().clone();
        let first = segs.first().map_or(0, |s| s.base_log_index);
        let next = w.cursor.next_log_index;
        let cut = match last_kept {
            None => first,
            Some(i) => i.0.saturating_add(1),
        };
        if cut >= next {
            return Ok(());
        }
        let k = segment_index_of(&segs, cut, next)?;
        let seg = segs.get(k).expect("cut >= first, so some segment holds it");
        let (pos, before) = seg.locate(cut, &Limits::ON_DISK)?;
        let keeps_part = cut > seg.base_log_index;
        let new_base = if keeps_part {
            before
        } else {
            let last_term = k
                .checked_sub(1)
                .and_then(|p| segs.get(p))
                .map_or(0, |p| p.extent().cursor.last_term);
            Cursor {
                next_log_index: cut,
                next_offset: seg.base_offset,
                last_term,
            }
        };
        let result = (|| -> Result<Arc<Segment>> {
            let faults = &self.opts.faults;
            if keeps_part {
                // The kept part must stand on its own before anything after it goes: synced,
                // and its index saying where it ends, so that recovery never reads the stale
                // frames past the cut even when every later segment is gone (FORMAT.md §7).
                seg.sync(faults)?;
                seg.cut(pos, new_base)?;
                seg.write_index(faults)?;
                sync_dir(&self.dir)?;
                // Sealed and durable now (it may have been the active segment).
                seg.release(false);
            } else {
                // The new segment replaces this file by rename; its index must go first.
                seg.remove_index_file()?;
                sync_dir(&self.dir)?;
            }
            // Newest first, each deletion durable before the next: a crash leaves a prefix.
            for s in segs.get(k + 1..).unwrap_or_default().iter().rev() {
                s.remove_files()?;
                sync_dir(&self.dir)?;
            }
            let (new, handle) =
                Segment::create(&self.dir, new_base, &self.segment_opts(), None, false)?;
            if !keeps_part {
                // Its file was replaced: it must never open the new one as its own.
                seg.retire();
            }
            w.handle = handle;
            Ok(new)
        })();
        let new = match result {
            Ok(new) => new,
            Err(e) => {
                self.latch();
                return Err(e);
            }
        };
        {
            let mut list = self.segments.write();
            list.truncate(if keeps_part { k + 1 } else { k });
            list.push(Arc::clone(&new));
        }
        w.active = new;
        w.cursor = new_base;
        self.publish(&w);
        self.durable_next_log_index.fetch_min(cut, Ordering::AcqRel);
        Ok(())
    }

    /// Empties the log and restarts it at `next_log_index` and `next_offset`, as a Raft replica
    /// does when it installs a snapshot past its log, or purges past its last entry. Durable
    /// when it returns.
    pub(crate) fn reset(&self, next_log_index: u64, next_offset: u64) -> Result<()> {
        let _sync = self.sync.lock();
        let mut w = self.writer.lock();
        self.check_writable()?;
        self.join_pending_seal(&mut w)?;
        let segs = self.segments.read().clone();
        if let Some(last) = segs.last().filter(|s| s.base_log_index > next_log_index) {
            return Err(Error::LogIndexOutOfRange {
                requested: LogIndex(next_log_index),
                first: LogIndex(last.base_log_index),
                next: LogIndex(w.cursor.next_log_index),
            });
        }
        let base = Cursor {
            next_log_index,
            next_offset,
            last_term: 0,
        };
        let result = (|| -> Result<(Arc<Segment>, WriteHandle)> {
            // The new segment is marked as a restart and made durable first; recovery deletes
            // whatever older segments a crash leaves beside it (FORMAT.md §7). A segment with
            // the same base (an empty active one) is replaced by the rename.
            let created = Segment::create(&self.dir, base, &self.segment_opts(), None, true)?;
            // Every old segment leaves the log; one may have had its file replaced just now.
            for s in &segs {
                s.retire();
            }
            for s in segs.iter().filter(|s| s.base_log_index != next_log_index) {
                s.remove_files()?;
            }
            sync_dir(&self.dir)?;
            Ok(created)
        })();
        let (new, handle) = match result {
            Ok(created) => created,
            Err(e) => {
                self.latch();
                return Err(e);
            }
        };
        *self.segments.write() = vec![Arc::clone(&new)];
        w.unsynced.clear();
        w.active = new;
        w.handle = handle;
        w.cursor = base;
        self.publish(&w);
        self.durable_next_log_index
            .store(next_log_index, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::EntrySpec;
    use super::super::test_util::{fill, small, small_with_faults, values};
    use super::*;
    use crate::env::FaultPoint;
    use crate::segment::record::Record;
    use crate::types::Offset;

    #[test]
    fn truncate_within_and_at_segment_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        fill(&log, 60);
        let held = log.read(Offset(50), 1 << 20).unwrap();
        log.truncate_after(Some(LogIndex(49))).unwrap();
        assert_eq!(log.end_offset(), Offset(50));
        assert_eq!(log.next_log_index(), LogIndex(50));
        // Views handed out before the truncation still read the old bytes.
        assert_eq!(&held[0].records().next().unwrap().1.value[..], b"value-50");
        log.append(&[Record::new("new-50")]).unwrap();
        assert_eq!(
            values(&log, 49),
            vec![(49, b"value-49".to_vec()), (50, b"new-50".to_vec())]
        );
        // Truncate exactly at a segment's first entry.
        let base = log.segments.read()[2].base_log_index;
        log.truncate_after(Some(LogIndex(base - 1))).unwrap();
        assert_eq!(log.end_offset(), Offset(base));
        drop(log);
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        assert_eq!(log.end_offset(), Offset(base));
        assert_eq!(values(&log, 0).len() as u64, base);
        log.truncate_after(None).unwrap();
        assert_eq!(log.end_offset(), Offset(0));
        assert!(values(&log, 0).is_empty());
        fill(&log, 3);
        assert_eq!(values(&log, 0).len(), 3);
        // Nothing after the end: a no-op.
        log.truncate_after(Some(LogIndex(100))).unwrap();
        assert_eq!(log.end_offset(), Offset(3));
    }

    /// A crash inside a second truncation brought back entries the first one removed, because
    /// the kept segment's stale frames were only hidden by the next segment's existence.
    #[test]
    fn regression_truncated_entries_stay_gone_after_a_crash_mid_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg, env) = small_with_faults();
        let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
        for i in 0..8 {
            log.append(&[Record::new(format!("old-{i}"))]).unwrap();
        }
        log.truncate_after(Some(LogIndex(4))).unwrap();
        log.append(&[Record::new("new-5")]).unwrap();
        log.flush().unwrap();
        faults.fail_times(FaultPoint::CreateSegment, std::io::ErrorKind::Other, 1);
        assert!(log.truncate_after(Some(LogIndex(2))).is_err());
        drop(log);
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        let got = values(&log, 0);
        assert!(got.iter().all(|(_, v)| !v.starts_with(b"old-5")), "{got:?}");
        assert!(
            got.len() <= 6,
            "at most the first truncation's result: {got:?}"
        );
    }

    /// A crash inside `truncate_after(None)` after a purge restarted the log at offset 0.
    #[test]
    fn regression_a_crash_mid_truncate_all_keeps_the_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg, env) = small_with_faults();
        let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
        fill(&log, 40);
        log.roll().unwrap();
        log.purge_to(Offset(40)).unwrap();
        fill(&log, 3);
        log.flush().unwrap();
        faults.fail_times(FaultPoint::CreateSegment, std::io::ErrorKind::Other, 1);
        assert!(log.truncate_after(None).is_err());
        drop(log);
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        assert_eq!(
            log.start_offset(),
            Offset(40),
            "offsets must never be reused"
        );
        assert!(log.end_offset() >= Offset(40));
    }

    /// A truncation whose index seek landed on the cut frame reset the last term to 0, so a
    /// lower term was accepted and then cut off as a regression on the next open.
    #[test]
    fn regression_truncation_keeps_the_last_term() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        let (payload, n) =
            crate::segment::record::encode_records(&[Record::new("x")], 256).unwrap();
        for i in 0..6u64 {
            let spec = EntrySpec {
                log_index: Some(i),
                term: Some(5),
                ..EntrySpec::default()
            };
            log.append_entry(spec, n, &payload).unwrap();
        }
        log.truncate_after(Some(LogIndex(3))).unwrap();
        let spec = EntrySpec {
            log_index: Some(4),
            term: Some(1),
            ..EntrySpec::default()
        };
        assert!(matches!(
            log.append_entry(spec, n, &payload),
            Err(Error::TermRegression { .. })
        ));
        let spec = EntrySpec {
            log_index: Some(4),
            term: Some(6),
            ..EntrySpec::default()
        };
        log.append_entry(spec, n, &payload).unwrap();
        log.flush().unwrap();
        drop(log);
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        assert_eq!(log.next_log_index(), LogIndex(5));
    }
}
