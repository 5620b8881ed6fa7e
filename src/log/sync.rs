//! Durability: [`PartitionLog::flush`] with group commit, and the syncing and indexing of
//! sealed segments, in log order, on a background thread or before a flush, truncation or
//! close.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{PartitionLog, PendingSeal, Writer};
use crate::env::Faults;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::segment::Segment;

/// How many sealed segments may wait unsynced before a roll starts syncing the oldest in the
/// background. Appends never wait for the disk below this; a crash recovery scans at most this
/// many sealed segments, plus the one the background sync may have been working on, plus the
/// active one, whatever the size of the log.
pub(super) const UNSYNCED_SEALED_MAX: usize = 2;

impl PartitionLog {
    /// Makes every batch appended before this call durable. Concurrent callers share syncs:
    /// a caller whose batches a running sync already covers returns without another one.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the sync failed (the log then latches), [`Error::PreviousIo`] if an
    /// earlier one did.
    pub fn flush(&self) -> Result<()> {
        let target = self.writer.lock().cursor.next_log_index;
        let _sync = self.sync.lock();
        let durable = self.durable_next_log_index.load(Ordering::Acquire) >= target;
        let (seg, next) = {
            let mut w = self.writer.lock();
            // Every entry may be durable while a segment rolled since (by age, with no write
            // after) still waits to be sealed: indexed, its descriptor closed.
            if durable && w.unsynced.is_empty() && w.pending_seal.is_none() {
                return Ok(());
            }
            self.check_writable()?;
            // Sealed segments come before the active one: make them durable first. This holds
            // the writer lock, so that no roll can index a later segment before they are.
            self.seal_all_locked(&mut w)?;
            if durable {
                return Ok(());
            }
            (Arc::clone(&w.active), w.cursor.next_log_index)
        };
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = seg.sync(&self.opts.faults) {
            self.latch();
            return Err(e.into());
        }
        self.durable_next_log_index
            .fetch_max(next, Ordering::AcqRel);
        Ok(())
    }

    /// Once more than [`UNSYNCED_SEALED_MAX`] sealed segments wait unsynced (each roll adds
    /// one), waits for the previous background sync and hands the oldest to a new one, so that
    /// segments become durable (and get their index) in log order.
    pub(super) fn sync_oldest_in_background(&self, w: &mut Writer) -> Result<()> {
        if w.unsynced.len() <= UNSYNCED_SEALED_MAX {
            return Ok(());
        }
        self.join_pending_seal(w)?;
        let n = w.unsynced.len() - UNSYNCED_SEALED_MAX;
        let oldest: Vec<Arc<Segment>> = w.unsynced.drain(..n).collect();
        let faults = self.opts.faults.clone();
        let cancel = Arc::new(AtomicBool::new(false));
        let cancelled = Arc::clone(&cancel);
        let spawned = std::thread::Builder::new()
            .name("replog-seal".into())
            .spawn(move || seal_all(&oldest, &faults, &cancelled));
        match spawned {
            Ok(thread) => w.pending_seal = Some(PendingSeal { thread, cancel }),
            Err(e) => {
                // No thread: the segments it would have synced are gone from `unsynced`,
                // so the log cannot promise anything any more.
                self.latch();
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Waits for the background sync, if one runs. Its failure latches the log.
    pub(super) fn join_pending_seal(&self, w: &mut Writer) -> Result<()> {
        let Some(pending) = w.pending_seal.take() else {
            return Ok(());
        };
        let result = pending
            .thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the segment sync thread panicked")));
        if let Err(e) = result {
            self.latch();
            return Err(e.into());
        }
        Ok(())
    }

    /// Makes every sealed segment durable and indexed, in log order. A failure latches the log.
    pub(super) fn seal_all_locked(&self, w: &mut Writer) -> Result<()> {
        self.join_pending_seal(w)?;
        let unsynced: Vec<Arc<Segment>> = w.unsynced.drain(..).collect();
        if let Err(e) = seal_all(&unsynced, &self.opts.faults, &AtomicBool::new(false)) {
            self.latch();
            return Err(e.into());
        }
        Ok(())
    }
}

/// Syncs and indexes `segments` in order, stopping at the first failed sync. An index that
/// cannot be written is only a warning: the next open rebuilds it.
fn seal_all(
    segments: &[Arc<Segment>],
    faults: &Faults,
    cancel: &AtomicBool,
) -> std::io::Result<()> {
    for seg in segments {
        seg.sync(faults)?;
        if cancel.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Err(e) = seg.write_index(faults) {
            tracing::warn!(segment = %seg.path.display(), error = %e,
                "could not write a sealed segment's index; the next open will rebuild it");
        }
        // Durable: its descriptor goes, and its map may be closed when unused.
        seg.release(false);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{fill, small_with_faults, values};
    use super::*;
    use crate::config::LogConfig;
    use crate::env::FaultPoint;
    use crate::error::Error;
    use crate::segment::record::Record;
    use crate::types::Offset;

    #[test]
    fn failed_sync_latches_until_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg, env) = small_with_faults();
        let log = PartitionLog::open_in(dir.path(), cfg.clone(), &env).unwrap();
        fill(&log, 3);
        log.flush().unwrap();
        log.append(&[Record::new("unsynced")]).unwrap();
        faults.fail_times(FaultPoint::Sync, std::io::ErrorKind::Other, 1);
        assert!(matches!(log.flush(), Err(Error::Io(_))));
        // The fault is gone, but the log stays latched: no retry of a failed sync.
        assert!(matches!(log.flush(), Err(Error::PreviousIo)));
        assert!(matches!(
            log.append(&[Record::new("x")]),
            Err(Error::PreviousIo)
        ));
        assert!(matches!(log.truncate_after(None), Err(Error::PreviousIo)));
        // Reads still work.
        assert_eq!(values(&log, 0).len(), 4);
        drop(log);
        let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
        assert!(log.end_offset() >= Offset(3), "everything flushed survives");
        log.append(&[Record::new("ok")]).unwrap();
        log.flush().unwrap();
    }

    /// Zeros preallocated ahead of the writer are synced only while `flush` syncs: a sync of
    /// the file also writes back the writer's dirty pages, so a log that is never flushed paid
    /// for a sync every step. A single flush of such a log still makes everything before it
    /// durable: a power loss right after it takes nothing.
    #[test]
    fn zeros_ahead_are_synced_only_while_the_log_is_flushed() {
        for mode in [crate::Preallocate::Zeros, crate::Preallocate::Auto] {
            let dir = tempfile::tempdir().unwrap();
            let (faults, _, env) = small_with_faults();
            let cfg = LogConfig {
                preallocate: mode,
                preallocate_step_bytes: 4096,
                ..LogConfig::default()
            };
            let log = PartitionLog::open_in(dir.path(), cfg.clone(), &env).unwrap();
            let value = |i: u64| format!("{i:08}").repeat(125);
            // About 250 steps of 4 KiB, not one flush.
            for i in 0..1000 {
                log.append(&[Record::new(value(i))]).unwrap();
            }
            assert_eq!(
                log.zeros_sync_count(),
                0,
                "{mode:?}: never flushed, never synced"
            );
            log.flush().unwrap();
            let loss = faults.lose_power();
            assert_eq!(loss.bytes(), 0, "{mode:?}: the flush covered every append");
            drop(log);
            faults.clear();
            let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
            assert_eq!(log.end_offset(), Offset(1000));
            // Flushed after every append: the zeros ahead are synced too.
            for i in 1000..1100 {
                log.append(&[Record::new(value(i))]).unwrap();
                log.flush().unwrap();
            }
            assert!(log.zeros_sync_count() > 0, "{mode:?}: flushed, so synced");
            let want: Vec<_> = (0..1100).map(|i| (i, value(i).into_bytes())).collect();
            assert_eq!(values(&log, 0), want);
        }
    }

    #[test]
    fn one_sync_covers_every_append_queued_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(PartitionLog::open(dir.path(), LogConfig::default()).unwrap());
        let syncs_before = log.sync_count();
        // Hold the sync lock, as a sync in progress would, while four threads append and flush.
        let held = log.sync.lock();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    log.append(&[Record::new(format!("t{i}"))]).unwrap();
                    log.flush().unwrap();
                })
            })
            .collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while log.end_offset() < Offset(4) {
            assert!(
                std::time::Instant::now() < deadline,
                "appends did not arrive"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            log.sync_count() - syncs_before,
            1,
            "the first flush covered all four"
        );
    }
}
