//! Rolling: sealing the active segment and starting the next one, whose file comes from the
//! pool of recycled segment files, else from the spare made on a background thread once the
//! active segment was half full, else is created on the spot.

use std::sync::Arc;

use super::{PartitionLog, Writer};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::segment::{Segment, SpareFile};

impl PartitionLog {
    /// Seals the active segment and starts a new one.
    ///
    /// The new segment is created durably; the old one joins the unsynced sealed segments,
    /// so appends do not wait for the disk. When more than [`UNSYNCED_SEALED_MAX`](super::sync::UNSYNCED_SEALED_MAX) wait, the
    /// oldest are synced and indexed on a background thread, one batch at a time and in log
    /// order. Recovery treats the sealed segments after the last one with an index as a
    /// possibly torn tail (FORMAT.md §7).
    pub(super) fn roll_locked(&self, w: &mut Writer) -> Result<()> {
        let spare = w.recycled.pop().or_else(|| self.take_spare(w));
        let (seg, handle) =
            match Segment::create(&self.dir, w.cursor, &self.segment_opts(), spare, false) {
                Ok(created) => created,
                Err(e) => {
                    // A failure before the new file was renamed into place changed nothing on disk:
                    // the log stays writable. After it, the directory may hold a segment whose base
                    // the old segment would later grow past, so the log latches.
                    let name = crate::segment::format::segment_file_name(w.cursor.next_log_index);
                    if self.dir.join(name).exists() {
                        self.latch();
                    }
                    return Err(e);
                }
            };
        self.segments.write().push(Arc::clone(&seg));
        let old = std::mem::replace(&mut w.active, seg);
        w.handle = handle;
        w.unsynced.push_back(old);
        self.sync_oldest_in_background(w)
    }

    /// The spare file made in the background, if it is ready and good.
    fn take_spare(&self, w: &mut Writer) -> Option<SpareFile> {
        match w.spare.take()?.join() {
            Ok(Ok(spare)) => Some(spare),
            Ok(Err(e)) => {
                tracing::warn!(dir = %self.dir.display(), error = %e,
                    "preallocating the next segment failed; creating it now");
                None
            }
            Err(_) => None,
        }
    }

    /// Replaces the active segment, which holds no entry, with a new one of the current
    /// format under the same name (a Kafka batch never goes into a version-1 segment, and a
    /// roll would create a second segment with the same base). The new file is renamed over
    /// the old one, so a crash leaves either; readers holding the old segment keep its map.
    pub(super) fn replace_empty_active_locked(&self, w: &mut Writer) -> Result<()> {
        debug_assert_eq!(w.cursor.next_log_index, w.active.base_log_index);
        let spare = self.take_spare(w);
        let (seg, handle) =
            Segment::create(&self.dir, w.cursor, &self.segment_opts(), spare, false)?;
        if let Some(last) = self.segments.write().last_mut() {
            *last = Arc::clone(&seg);
        }
        w.active = seg;
        w.handle = handle;
        Ok(())
    }

    /// Deletes the spare files: the one made in the background and the recycled ones.
    pub(super) fn discard_spares(&self, w: &mut Writer) {
        if let Some(spare) = self.take_spare(w) {
            spare.discard();
        }
        for spare in w.recycled.drain(..) {
            spare.discard();
        }
    }

    /// Starts making the next segment's file in the background.
    pub(super) fn start_spare(&self, w: &mut Writer) {
        if let Some(old) = self.take_spare(w) {
            old.discard();
        }
        let (dir, opts) = (self.dir.clone(), self.segment_opts());
        w.spare = std::thread::Builder::new()
            .name("replog-prealloc".into())
            .spawn(move || SpareFile::create(&dir, "spare.tmp", &opts))
            .ok();
    }

    /// Seals the active segment and starts a new one, if the active segment holds any entry.
    /// Appends roll by themselves when a segment is full; this is for callers that want a
    /// boundary now (for example so that retention can delete everything written so far).
    ///
    /// # Errors
    ///
    /// As [`flush`](Self::flush), and [`Error::Io`] if the new segment could not be created.
    pub fn roll(&self) -> Result<()> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        if w.cursor.next_log_index == w.active.base_log_index {
            return Ok(());
        }
        self.roll_locked(&mut w)
    }

    /// Seals the active segment if it holds `floor` bytes or more and at least as many as the
    /// sealed segments together: a compacted log whose live records are few keeps its active
    /// segment, which compaction never touches, about their size. Returns whether it rolled.
    ///
    /// # Errors
    ///
    /// As [`roll`](Self::roll).
    pub(crate) fn roll_if_outgrown(&self, floor: u64) -> Result<bool> {
        let mut w = self.writer.lock();
        self.check_writable()?;
        let active = w.active.data_len() as u64;
        let sealed: u64 = self
            .segments
            .read()
            .iter()
            .filter(|s| !Arc::ptr_eq(s, &w.active))
            .map(|s| s.data_len() as u64)
            .sum();
        if active < floor.max(sealed) || w.cursor.next_log_index == w.active.base_log_index {
            return Ok(false);
        }
        self.roll_locked(&mut w)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{
        append_numbered, four_frame_segments, numbered, recycled_files, small_with_faults, values,
    };
    use super::*;
    use crate::config::LogConfig;
    use crate::env::FaultPoint;
    use crate::error::Error;
    use crate::segment::format::{END_MARK, SEGMENT_HEADER_LEN, segment_file_name};
    use crate::segment::record::Record;
    use crate::types::Offset;

    /// The active segment is sealed once it holds the floor and as much as the sealed ones,
    /// not before, and never empty.
    #[test]
    fn an_outgrown_active_segment_is_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        let floor = 4096;
        assert!(!log.roll_if_outgrown(0).unwrap(), "an empty segment stays");
        let value = vec![b'v'; 1000];
        let append = |n: usize| {
            for _ in 0..n {
                log.append(&[Record::new(value.clone()).with_key("k")])
                    .unwrap();
            }
        };
        append(2);
        assert!(!log.roll_if_outgrown(floor).unwrap(), "below the floor");
        append(3);
        assert!(
            log.roll_if_outgrown(floor).unwrap(),
            "past the floor, nothing sealed"
        );
        assert_eq!(log.segment_count(), 2);
        append(4);
        assert!(
            !log.roll_if_outgrown(floor).unwrap(),
            "less than the sealed segment"
        );
        append(2);
        assert!(
            log.roll_if_outgrown(floor).unwrap(),
            "as much as the sealed segment"
        );
        assert_eq!(log.segment_count(), 3);
    }

    #[test]
    fn a_recycled_segments_old_frames_never_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), four_frame_segments(1)).unwrap();
        append_numbered(&log, 0..9); // [0, 4) [4, 8) and the active [8, 9)
        log.flush().unwrap();
        let old = std::fs::read(dir.path().join(segment_file_name(0))).unwrap();
        assert_eq!(log.purge_to(Offset(4)).unwrap(), Offset(4));
        assert_eq!(
            recycled_files(dir.path()),
            1,
            "the deleted segment is kept for reuse"
        );
        append_numbered(&log, 9..14); // fills [8, 12); the roll at 12 takes the old file
        assert_eq!(recycled_files(dir.path()), 0);
        let path = dir.path().join(segment_file_name(12));
        let new = std::fs::read(&path).unwrap();
        // Frames 12 and 13, the end mark, then the old file's third frame.
        let end = SEGMENT_HEADER_LEN + 2 * 80;
        assert_eq!(new[end..end + 4], END_MARK);
        assert_eq!(new[end + 4..end + 80], old[end + 4..end + 80]);
        assert_eq!(values(&log, 4), numbered(4..=13));

        // A crash loses the write of the end mark: a whole, valid old frame follows the data.
        log.abandon();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &old[end..end + 4], end as u64).unwrap();
        drop(file);
        let log = PartitionLog::open(dir.path(), four_frame_segments(1)).unwrap();
        assert_eq!(
            values(&log, 4),
            numbered(4..=13),
            "the old frame is not the log's"
        );
        append_numbered(&log, 14..15);
        drop(log);
        let log = PartitionLog::open(dir.path(), four_frame_segments(1)).unwrap();
        assert_eq!(
            log.recovery().reason,
            None,
            "a clean close ends at the end mark"
        );
        assert_eq!(values(&log, 4), numbered(4..=14));
    }

    #[test]
    fn failed_roll_keeps_the_log_usable() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg, env) = small_with_faults();
        let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
        faults.fail_always(FaultPoint::Preallocate, std::io::ErrorKind::StorageFull);
        let mut failed = 0;
        for i in 0..40 {
            match log.append(&[Record::new(format!("value-{i}"))]) {
                Ok(_) => {}
                Err(Error::Io(e)) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull);
                    failed += 1;
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(failed > 0);
        faults.clear();
        let before = log.end_offset();
        log.append(&[Record::new("after")]).unwrap();
        log.flush().unwrap();
        assert_eq!(log.end_offset(), Offset(before.0 + 1));
        assert_eq!(values(&log, 0).len() as u64, before.0 + 1);
    }

    #[test]
    fn a_roll_that_fails_after_creating_the_file_latches() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg, env) = small_with_faults();
        let log = PartitionLog::open_in(dir.path(), cfg.clone(), &env).unwrap();
        faults.fail_times(FaultPoint::SyncDir, std::io::ErrorKind::Other, 1);
        let mut appended = 0u64;
        let err = loop {
            match log.append(&[Record::new(format!("value-{appended}"))]) {
                Ok(_) => appended += 1,
                Err(e) => break e,
            }
            assert!(appended < 100, "a roll must happen");
        };
        assert!(matches!(err, Error::Io(_)), "{err}");
        // The new segment file exists, so continuing in the old one could be cut off later.
        assert!(matches!(
            log.append(&[Record::new("x")]),
            Err(Error::PreviousIo)
        ));
        drop(log);
        let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
        assert_eq!(values(&log, 0).len() as u64, appended);
        log.append(&[Record::new("after")]).unwrap();
        assert_eq!(log.end_offset(), Offset(appended + 1));
    }

    /// Bytes of disk blocks a file holds.
    fn blocks_bytes(path: &std::path::Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(suffix))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_segment_holds_blocks_only_for_its_data_and_a_step_past_it() {
        const STEP: u64 = 1 << 20;
        const SEGMENT: u64 = 16 << 20;
        for mode in [crate::Preallocate::Fallocate, crate::Preallocate::Zeros] {
            let dir = tempfile::tempdir().unwrap();
            let cfg = LogConfig {
                segment_bytes: SEGMENT,
                preallocate: mode,
                preallocate_step_bytes: STEP,
                ..LogConfig::default()
            };
            let log = PartitionLog::open(dir.path(), cfg.clone()).unwrap();
            let seg = dir.path().join(segment_file_name(0));
            assert_eq!(std::fs::metadata(&seg).unwrap().len(), SEGMENT, "{mode:?}");
            assert!(
                blocks_bytes(&seg) <= STEP,
                "{mode:?}: a new segment holds one step"
            );
            assert!(
                files_ending(dir.path(), ".tmp").is_empty(),
                "a quiet log has no spare"
            );
            // 6 MiB of records: blocks for the data and at most two steps past it.
            let batch: Vec<Record> = (0..64).map(|_| Record::new(vec![7u8; 1000])).collect();
            for _ in 0..96 {
                log.append(&batch).unwrap();
            }
            let data = log.size_bytes();
            let held = blocks_bytes(&seg);
            assert!(
                held >= data && held <= data + 2 * STEP,
                "{mode:?}: {held} for {data}"
            );
            assert!(
                files_ending(dir.path(), ".tmp").is_empty(),
                "under half full: no spare"
            );
            // Past half full the next segment's file is made, one step of it.
            for _ in 0..40 {
                log.append(&batch).unwrap();
            }
            log.flush().unwrap();
            drop(log);
            let log = PartitionLog::open(dir.path(), cfg).unwrap();
            assert_eq!(log.end_offset(), Offset(136 * 64), "{mode:?}");
            for _ in 0..130 {
                log.append(&batch).unwrap();
            }
            assert!(log.segment_count() >= 2);
            let segments = files_ending(dir.path(), ".log");
            let last = segments.last().unwrap();
            assert!(blocks_bytes(last) <= blocks_bytes(&segments[0]), "{mode:?}");
            assert_eq!(values(&log, 0).len() as u64, 266 * 64);
        }
    }

    #[test]
    fn a_full_disk_refuses_an_append_before_writing_and_the_log_stays_writable() {
        let dir = tempfile::tempdir().unwrap();
        let faults = crate::env::FaultInjector::new();
        let env = crate::Env::default().with_disk_faults(std::sync::Arc::clone(&faults));
        let cfg = LogConfig {
            segment_bytes: 1 << 20,
            batch_bytes_max: 64 << 10,
            record_bytes_max: 64 << 10,
            preallocate_step_bytes: 4096,
            preallocate: crate::Preallocate::Fallocate,
            ..LogConfig::default()
        };
        let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
        let record = |i: u64| Record::new(format!("{i:06}").repeat(100));
        let mut i = 0;
        faults.fail_always(FaultPoint::Preallocate, std::io::ErrorKind::StorageFull);
        let err = loop {
            match log.append(&[record(i)]) {
                Ok(info) => assert_eq!(info.base_offset, Offset(i)),
                Err(e) => break e,
            }
            i += 1;
            assert!(i < 100, "the first step fills within a few records");
        };
        assert!(
            matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::StorageFull),
            "{err}"
        );
        assert_eq!(
            log.end_offset(),
            Offset(i),
            "nothing of the refused batch is in the log"
        );
        faults.clear();
        log.append(&[record(i)]).unwrap();
        log.flush().unwrap();
        let expect: Vec<_> = (0..=i)
            .map(|n| (n, format!("{n:06}").repeat(100).into_bytes()))
            .collect();
        assert_eq!(values(&log, 0), expect);
    }

    /// Zeros made ahead on a background thread never land in a file after its writer is done
    /// with it: segments roll and are recycled as new ones many times over, under load, and
    /// every record reads back as written, before and after a reopen.
    #[test]
    fn zeros_made_ahead_never_reach_a_recycled_segments_new_frames() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig {
            segment_bytes: 64 << 10,
            record_bytes_max: 8 << 10,
            batch_bytes_max: 16 << 10,
            preallocate: crate::Preallocate::Zeros,
            preallocate_step_bytes: 4096,
            recycle_segments: 2,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(dir.path(), cfg.clone()).unwrap();
        let value = |i: u64| format!("{i:08}").repeat(1 + (i % 13) as usize * 40);
        let mut kept_from = 0;
        for i in 0..3000u64 {
            log.append(&[Record::new(value(i))]).unwrap();
            if i % 200 == 199 {
                // Keep the last 100 records or so: whole sealed segments before them go, and
                // their files come back as the next segments.
                kept_from = log.purge_to(Offset(i.saturating_sub(100))).unwrap().0;
            }
        }
        assert!(log.segment_count() < 20, "purged as it went");
        assert!(
            recycled_files(dir.path()) > 0,
            "deleted segments wait to be reused"
        );
        let expect: Vec<_> = (kept_from..3000)
            .map(|i| (i, value(i).into_bytes()))
            .collect();
        assert_eq!(values(&log, kept_from), expect);
        log.flush().unwrap();
        drop(log);
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
        assert_eq!(log.recovery().reason, None);
        assert_eq!(values(&log, kept_from), expect);
    }
}
