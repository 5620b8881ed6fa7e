//! Opening a log: listing its segment files, finishing or undoing what a crash interrupted
//! (a reset, a torn tail of unsynced sealed segments, the active segment's end), and building
//! the [`PartitionLog`] from what is left (FORMAT.md §7).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use parking_lot::{Mutex, RwLock};

use super::{PartitionLog, Writer};
use crate::config::LogConfig;
use crate::dirlock::DirLock;
use crate::env::Env;
use crate::env::sync_dir;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::segment::format::{index_file_name, parse_segment_file_name, segment_file_name};
use crate::segment::frame::Limits;
use crate::segment::{Cursor, RecoveryEvent, Sealed, Segment, SegmentOptions};

impl PartitionLog {
    /// Opens the log in `dir`, creating the directory and an empty log if needed, and recovers
    /// it after a crash (see the recovery rules in [`crate::format`](mod@crate::format)).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidConfig`] if `config` does not validate.
    /// - [`Error::Locked`] if another open log holds the directory.
    /// - [`Error::Corrupt`] for damage that recovery must not repair silently: a bad segment
    ///   header, or an invalid frame (or missing entries) in a sealed segment known durable,
    ///   that is, any up to the last sealed segment with an index file. In the sealed segments
    ///   after it (not synced before a crash), invalid data is a torn tail: the log ends there.
    /// - [`Error::Io`] for operating-system errors.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Self> {
        PartitionLog::open_in(dir, config, &Env::default())
    }

    /// [`open`](Self::open) in the environment `env` (for tests: the disk faults its file
    /// operations meet).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_in(dir: impl AsRef<Path>, config: LogConfig, env: &Env) -> Result<Self> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        crate::env::create_dir_all(&dir)?;
        let lock = DirLock::acquire(&dir)?;
        let opts = SegmentOptions {
            capacity: config.segment_bytes,
            index_interval_bytes: config.index_interval_bytes,
            preallocate: config.preallocate,
            preallocate_step: config.preallocate_step_bytes,
            limits: Limits {
                record_bytes_max: config.record_bytes_max,
                batch_bytes_max: config.batch_bytes_max,
            },
            faults: env.disk_faults(),
            maps: env.map_cache(),
            zeros_syncs: Arc::default(),
        };
        let bases = drop_segments_before_restart(&dir, list_segments(&dir)?)?;
        let bases = drop_merged_segments(&dir, bases, &opts)?;
        let (segments, handle, recovery) = match bases.split_last() {
            None => {
                let (seg, handle) = Segment::create(&dir, Cursor::default(), &opts, None, false)?;
                let event = RecoveryEvent {
                    file: seg.path.clone(),
                    position: 0,
                    reason: None,
                };
                (vec![seg], handle, event)
            }
            Some((&last, sealed)) => {
                // Sealed segments after the last one with an index may not have been synced
                // before a crash: they are the log's tail, and may end torn (FORMAT.md §7).
                let tail_from = sealed
                    .iter()
                    .rposition(|&b| dir.join(index_file_name(b)).exists())
                    .map_or(0, |i| i + 1);
                let mut segments = Vec::with_capacity(bases.len());
                let mut prev: Option<Cursor> = None;
                let mut active_base = last;
                for (i, &base) in sealed.iter().enumerate() {
                    let next_base = bases.get(i + 1).copied().unwrap_or(last);
                    match Segment::open_sealed(&dir, base, next_base, prev, &opts, i >= tail_from)?
                    {
                        Sealed::Open(seg) => {
                            prev = Some(seg.extent().cursor);
                            segments.push(seg);
                        }
                        Sealed::TornTail(event) => {
                            // Nothing after this segment's valid data was ever durable: drop the
                            // newer segments, newest first; this one becomes the active segment.
                            tracing::warn!(file = %event.file.display(), position = event.position,
                                reason = ?event.reason,
                                "recovery found an unsynced sealed segment torn; dropping newer segments");
                            for &newer in bases.get(i + 1..).unwrap_or_default().iter().rev() {
                                remove_segment_files(&dir, newer)?;
                            }
                            sync_dir(&dir)?;
                            active_base = base;
                            break;
                        }
                    }
                }
                let (seg, handle, event) = Segment::open_active(&dir, active_base, prev, &opts)?;
                segments.push(seg);
                (segments, handle, event)
            }
        };
        let active = Arc::clone(segments.last().expect("never empty"));
        let cursor = active.extent().cursor;
        let active_free = handle.free_len() as u64;
        let segment_bytes = config.segment_bytes;
        let log = PartitionLog {
            dir,
            config,
            opts,
            _lock: lock,
            segments: RwLock::new(segments),
            writer: Mutex::new(Writer {
                active,
                handle,
                cursor,
                unsynced: std::collections::VecDeque::new(),
                pending_seal: None,
                buf: Vec::new(),
                spare: None,
                recycled: Vec::new(),
                flushes_seen: 0,
            }),
            sync: Mutex::new(()),
            durable_next_log_index: AtomicU64::new(cursor.next_log_index),
            end_offset: AtomicU64::new(cursor.next_offset),
            next_log_index: AtomicU64::new(cursor.next_log_index),
            active_free_bytes: AtomicU64::new(active_free),
            failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            recovery,
            syncs: AtomicU64::new(0),
            segment_bytes: AtomicU64::new(segment_bytes),
        };
        Ok(log)
    }
}

/// If a segment is marked as a restart (see [`PartitionLog::reset`]), deletes every older
/// segment, left over from a reset that a crash interrupted, and returns the rest.
fn drop_segments_before_restart(dir: &Path, bases: Vec<u64>) -> Result<Vec<u64>> {
    use crate::segment::format::{SEGMENT_HEADER_LEN, SegmentHeader};
    use std::io::Read;
    for (i, &base) in bases.iter().enumerate().rev() {
        let mut header = [0u8; SEGMENT_HEADER_LEN];
        let mut file = File::open(dir.join(segment_file_name(base)))?;
        let restart = file.read_exact(&mut header).is_ok()
            && SegmentHeader::decode(&header).is_ok_and(|h| h.restart);
        if restart {
            let older = bases.get(..i).unwrap_or_default();
            for &old in older {
                tracing::warn!(
                    segment = old,
                    restart = base,
                    "deleting a segment older than a restart"
                );
                remove_segment_files(dir, old)?;
            }
            if !older.is_empty() {
                sync_dir(dir)?;
            }
            return Ok(bases.get(i..).unwrap_or_default().to_vec());
        }
    }
    Ok(bases)
}

/// Finishes a compaction that merged segments and stopped after putting the merged file in
/// place, before deleting the segments it replaced (FORMAT.md §7): a compacted segment
/// without an index whose frames reach past the next segment's base holds that segment's
/// entries, and the segments that start before its end are deleted. A merged file that ends
/// anywhere but at a later segment's base is left for the open to judge.
fn drop_merged_segments(dir: &Path, bases: Vec<u64>, opts: &SegmentOptions) -> Result<Vec<u64>> {
    let mut kept: Vec<u64> = Vec::with_capacity(bases.len());
    let mut i = 0;
    // Bounded: each turn moves `i` past one segment at least.
    while let Some(&base) = bases.get(i) {
        kept.push(base);
        i += 1;
        let Some(&next) = bases.get(i) else { break };
        let Some(end) = crate::segment::merged_end(dir, base, opts)? else {
            continue;
        };
        if end <= next {
            continue;
        }
        let covered = bases
            .get(i..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&b| b < end)
            .count();
        // The segments merged were sealed: one comes after them, at the merged file's end.
        if bases.get(i + covered) != Some(&end) {
            continue;
        }
        for &old in bases.get(i..i + covered).unwrap_or_default().iter().rev() {
            tracing::info!(
                segment = old,
                merged_into = base,
                "deleting a segment a compaction merged before it stopped"
            );
            remove_segment_files(dir, old)?;
        }
        sync_dir(dir)?;
        i += covered;
    }
    Ok(kept)
}

/// Removes the files of the segment with `base` (the index first).
fn remove_segment_files(dir: &Path, base: u64) -> Result<()> {
    match std::fs::remove_file(dir.join(index_file_name(base))) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    std::fs::remove_file(dir.join(segment_file_name(base)))?;
    Ok(())
}

/// Lists the base log indices of the segment files in `dir`, sorted, and removes leftover
/// temporary files.
fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") {
            std::fs::remove_file(entry.path())?;
        } else if let Some(base) = parse_segment_file_name(name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{fill, small, small_with_faults, values};
    use super::*;
    use crate::error::{CorruptKind, Error};
    use crate::segment::record::Record;
    use crate::types::Offset;

    #[test]
    fn second_open_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let _log = PartitionLog::open(dir.path(), small()).unwrap();
        assert!(matches!(
            PartitionLog::open(dir.path(), small()),
            Err(Error::Locked { .. })
        ));
    }

    /// A simulated power loss takes exactly the frames written since the last sync, in the
    /// active segment and in sealed segments not yet synced, and recovery finds the rest.
    #[test]
    fn a_power_loss_takes_what_was_not_synced_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg, env) = small_with_faults();
        let log = PartitionLog::open_in(dir.path(), cfg.clone(), &env).unwrap();
        fill(&log, 3);
        log.flush().unwrap();
        let kept = log.end_offset();
        // Enough unsynced frames to roll past a segment or more.
        fill(&log, 40);
        let segments = log.segment_count();
        let loss = faults.lose_power();
        assert!(loss.bytes() > 0);
        assert!(log.flush().is_err(), "the machine is off");
        drop(log);
        let lost = loss.apply().unwrap();
        faults.clear();
        let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
        let end = log.end_offset();
        // Rolls sync sealed segments in the background, so some may have been synced: at
        // least the flushed records survive, and never more than was written.
        // The last frame sits in the active segment, never synced: it is always lost.
        assert!(end >= kept && end.get() < kept.get() + 40, "{end:?} {lost}");
        let want: Vec<String> = (0..3)
            .chain(0..end.get() - 3)
            .map(|i| format!("value-{i}"))
            .collect();
        let got: Vec<String> = values(&log, 0)
            .into_iter()
            .map(|(_, v)| String::from_utf8(v).unwrap())
            .collect();
        assert_eq!(got, want, "a prefix, nothing else ({segments} segments)");
        log.append(&[Record::new("after")]).unwrap();
        log.flush().unwrap();
    }

    #[test]
    fn sealed_damage_is_corrupt_not_truncated() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = PartitionLog::open(dir.path(), small()).unwrap();
            fill(&log, 50);
        }
        let first = dir
            .path()
            .join(crate::segment::format::segment_file_name(0));
        std::fs::remove_file(dir.path().join(crate::segment::format::index_file_name(0))).unwrap();
        let mut bytes = std::fs::read(&first).unwrap();
        bytes[100] ^= 0xFF;
        std::fs::write(&first, &bytes).unwrap();
        match PartitionLog::open(dir.path(), small()) {
            Err(Error::Corrupt {
                file,
                kind,
                position,
            }) => {
                assert_eq!(file, first);
                // Byte 100 lies in the first frame (64 + 10 + 7 bytes from position 32).
                assert_eq!(position, 32);
                assert!(
                    matches!(kind, CorruptKind::ChecksumMismatch { .. }),
                    "{kind}"
                );
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    /// Lowering `batch_bytes_max` and reopening after a crash cut flushed frames that were
    /// valid when written: on-disk frames are checked against the format's limits only.
    #[test]
    fn regression_lower_limits_never_cut_written_data() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        log.append(&[Record::new("a")]).unwrap();
        log.append(&[Record::new(vec![1u8; 200])]).unwrap();
        log.append(&[Record::new("c")]).unwrap();
        log.flush().unwrap();
        log.abandon();
        let lower = LogConfig {
            record_bytes_max: 100,
            batch_bytes_max: 100,
            ..small()
        };
        let log = PartitionLog::open(dir.path(), lower).unwrap();
        assert_eq!(log.end_offset(), Offset(3));
        assert_eq!(values(&log, 0).len(), 3);
    }
}
