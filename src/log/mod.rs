//! [`PartitionLog`]: an ordered list of segments with one writer and many readers.
//!
//! This module holds the type, its state (the segment list, the writer, the counters readers
//! poll) and the small accessors. Each phase of the log's life is in its own file:
//!
//! - `recovery.rs`: [`PartitionLog::open`], which lists, repairs and opens the segments.
//! - `append.rs`: the write path, from records to a frame in the active segment.
//! - `roll.rs`: sealing the active segment and creating the next one from a spare or
//!   recycled file.
//! - `sync.rs`: durability: [`PartitionLog::flush`] (group commit) and the background sync
//!   and indexing of sealed segments.
//! - `read.rs`: reads by offset and by log index, and [`LogIter`].
//! - `time.rs`: finding records by time (ListOffsets by timestamp).
//! - `truncate.rs`: cutting the log's end (Raft conflicts) and resetting it.
//! - `retention.rs`: deleting (or recycling) whole segments at the log's start.
//! - `close.rs`: closing, dropping, and abandoning the log.
//!
//! Unit tests sit beside the code they test; `test_util.rs` holds the helpers they share.

mod append;
mod close;
mod compact;
mod read;
mod recovery;
mod retention;
mod roll;
mod settings;
mod sync;
#[cfg(test)]
mod test_util;
mod time;
mod truncate;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::config::LogConfig;
use crate::dirlock::DirLock;
use crate::error::{Error, Result};
use crate::segment::frame::Limits;
use crate::segment::mmap::WriteHandle;
use crate::segment::{Cursor, RecoveryEvent, Segment, SegmentOptions, SpareFile};
use crate::types::{LogIndex, Offset};

pub use append::AppendInfo;
pub(crate) use append::EntrySpec;
#[cfg(test)]
pub(crate) use compact::CompactionStep;
pub use compact::{CompactionPolicy, CompactionStats};
pub use read::LogIter;

/// A local, append-only log of record batches in memory-mapped segment files.
///
/// One writer appends while any number of readers read, from any thread (`&self` everywhere).
/// Records read back share the segment's memory map: no record bytes are copied.
///
/// The on-disk format, and what recovery does after a crash, is written down in
/// [`crate::format`](mod@crate::format).
///
/// # Durability
///
/// [`append`](Self::append) returns once the batch is written and readable, not once it is on
/// disk. [`flush`](Self::flush) makes everything appended before it durable; concurrent
/// flushes share one sync (group commit). If a sync fails, the log latches: every later write
/// and flush returns [`Error::PreviousIo`] until the log is reopened, because a repeated sync
/// can report success for data the kernel already dropped.
///
/// Dropping the log closes it cleanly: it flushes and writes the active segment's index, so the
/// next open does not scan anything.
///
/// # Ownership
///
/// The log takes its directory exclusively (an `flock` on `LOCK`, plus a table of the
/// directories open in this process); a second open fails with [`Error::Locked`], at once in
/// the same process and after a bounded wait of half a second when another process holds it. Nothing else may modify files in the directory while it is open (see the
/// memory-map contract in [`crate::format`](mod@crate::format)).
///
/// # Example
///
/// ```
/// use replog::{LogConfig, Offset, PartitionLog, Record};
///
/// # fn main() -> replog::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let log = PartitionLog::open(dir.path(), LogConfig::default())?;
/// let info = log.append(&[Record::new("hello"), Record::new("world").with_key("k")])?;
/// assert_eq!(info.base_offset, Offset(0));
/// log.flush()?;
///
/// let batches = log.read(Offset(1), 1 << 20)?;
/// let (offset, record) = batches[0].records().nth(1).unwrap();
/// assert_eq!((offset, &record.value[..]), (Offset(1), &b"world"[..]));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    opts: SegmentOptions,
    _lock: DirLock,
    /// Ordered by base log index; never empty; the last one is the active segment.
    segments: RwLock<Vec<Arc<Segment>>>,
    writer: Mutex<Writer>,
    /// Serializes syncs, and truncation against syncs. Lock order: `sync`, then `writer`, then
    /// `segments`.
    sync: Mutex<()>,
    /// Every entry below this log index is durable.
    durable_next_log_index: AtomicU64,
    /// The offset the next appended record gets, for readers.
    end_offset: AtomicU64,
    /// The log index the next entry gets, for readers (no lock: async callers poll it).
    next_log_index: AtomicU64,
    /// Free bytes in the active segment after the last append.
    active_free_bytes: AtomicU64,
    failed: AtomicBool,
    closed: AtomicBool,
    recovery: RecoveryEvent,
    /// Syncs of the active segment by `flush`, for tests of group commit.
    syncs: AtomicU64,
    /// The capacity of segments created from now on (`LogConfig::segment_bytes`, or what
    /// its topic's `segment.bytes` changed it to).
    segment_bytes: AtomicU64,
}

#[derive(Debug)]
struct Writer {
    active: Arc<Segment>,
    handle: WriteHandle,
    cursor: Cursor,
    /// Sealed segments not yet synced, oldest first. Their data is durable only after a
    /// flush, or after a roll hands them to a background sync.
    unsynced: std::collections::VecDeque<Arc<Segment>>,
    /// The background sync of segments that left `unsynced`, if it may still run. At most one
    /// at a time, so that segments become durable (and get their index) in log order.
    pending_seal: Option<PendingSeal>,
    /// Reused buffer a frame is encoded into before it is written.
    buf: Vec<u8>,
    /// The next segment's file, being preallocated on a background thread.
    spare: Option<std::thread::JoinHandle<std::io::Result<SpareFile>>>,
    /// Files of deleted segments kept to become new ones (`LogConfig::recycle_segments`);
    /// rolls take these before `spare`.
    recycled: Vec<SpareFile>,
    /// `PartitionLog::syncs` when the active segment's last step of blocks was preallocated:
    /// zeros are written and synced ahead of the writer only if `flush` synced since (see
    /// [`reserve`](crate::segment::reserve)).
    flushes_seen: u64,
}

/// A sealed segment being synced and indexed on its own thread.
#[derive(Debug)]
struct PendingSeal {
    thread: std::thread::JoinHandle<std::io::Result<()>>,
    /// Set by `abandon` so that a simulated crash does not let the index appear later.
    cancel: Arc<AtomicBool>,
}

pub(crate) use crate::env::now_ms;

impl PartitionLog {
    /// The first offset in the log.
    pub fn start_offset(&self) -> Offset {
        Offset(self.segments.read().first().map_or(0, |s| s.base_offset))
    }

    /// The offset the next appended record will get.
    pub fn end_offset(&self) -> Offset {
        Offset(self.end_offset.load(Ordering::Acquire))
    }

    /// The log index of the first entry in the log.
    pub fn first_log_index(&self) -> LogIndex {
        LogIndex(self.segments.read().first().map_or(0, |s| s.base_log_index))
    }

    /// The log index the next appended entry will get.
    pub fn next_log_index(&self) -> LogIndex {
        LogIndex(self.next_log_index.load(Ordering::Acquire))
    }

    /// Makes the writer's position visible to lock-free readers.
    fn publish(&self, w: &Writer) {
        self.end_offset
            .store(w.cursor.next_offset, Ordering::Release);
        self.next_log_index
            .store(w.cursor.next_log_index, Ordering::Release);
        self.active_free_bytes
            .store(w.handle.free_len() as u64, Ordering::Release);
    }

    /// Whether frames with payloads of these sizes fit in the active segment without a roll,
    /// as of the last append (a caller that must not block on a roll's file creation and
    /// syncs appends inline only then).
    pub(crate) fn fits_without_roll(&self, payload_lens: impl IntoIterator<Item = usize>) -> bool {
        let need: u64 = payload_lens
            .into_iter()
            .map(|len| (len + crate::segment::format::FRAME_HEADER_LEN) as u64)
            .sum();
        need < self.active_free_bytes.load(Ordering::Acquire)
    }

    /// The segments, oldest first (for tests of what they hold open).
    #[cfg(test)]
    pub(crate) fn segments(&self) -> Vec<Arc<Segment>> {
        self.segments.read().clone()
    }

    /// The number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.read().len()
    }

    /// Bytes of data in all segments (headers and frames; not preallocated space).
    pub fn size_bytes(&self) -> u64 {
        self.segments
            .read()
            .iter()
            .map(|s| s.data_len() as u64)
            .sum()
    }

    /// How many times `flush` has synced the active segment since open.
    #[doc(hidden)]
    pub fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// How many steps of zeros preallocated ahead of the writer were synced since open (only
    /// ever while `flush` syncs: see [`Preallocate::Zeros`](crate::Preallocate::Zeros)).
    #[doc(hidden)]
    pub fn zeros_sync_count(&self) -> u64 {
        self.opts.zeros_syncs.load(Ordering::Relaxed)
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What recovery found in the active segment when the log was opened: where its data
    /// ends and, if the tail was cut at an invalid frame, why.
    pub fn recovery(&self) -> &RecoveryEvent {
        &self.recovery
    }

    /// The record and batch limits this log enforces.
    pub(crate) fn limits(&self) -> &Limits {
        &self.opts.limits
    }

    fn check_writable(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::PreviousIo);
        }
        Ok(())
    }

    fn latch(&self) {
        tracing::error!(dir = %self.dir.display(), "i/o failure: the log is read-only until reopened");
        self.failed.store(true, Ordering::Release);
    }
}

/// The position in `segs` of the segment that holds (or would hold) `log_index`, which must lie
/// in `[first, next]`.
fn segment_index_of(segs: &[Arc<Segment>], log_index: u64, next: u64) -> Result<usize> {
    let first = segs.first().map_or(0, |s| s.base_log_index);
    if log_index < first || log_index > next {
        return Err(Error::LogIndexOutOfRange {
            requested: LogIndex(log_index),
            first: LogIndex(first),
            next: LogIndex(next),
        });
    }
    Ok(segs
        .partition_point(|s| s.base_log_index <= log_index)
        .saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::test_util::{small, values};
    use super::*;
    use crate::segment::record::Record;

    #[test]
    fn append_read_across_rolls_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = PartitionLog::open(dir.path(), small()).unwrap();
            for i in 0..100u64 {
                let info = log.append(&[Record::new(format!("value-{i}"))]).unwrap();
                assert_eq!(info.base_offset, Offset(i));
                assert_eq!(info.log_index, LogIndex(i));
            }
            assert!(log.segment_count() > 5, "tiny segments roll");
            let got = values(&log, 0);
            assert_eq!(got.len(), 100);
            assert_eq!(got[57], (57, b"value-57".to_vec()));
            assert_eq!(values(&log, 99).len(), 1);
            assert_eq!(values(&log, 100).len(), 0);
        }
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        assert_eq!(log.end_offset(), Offset(100));
        assert_eq!(log.recovery().reason, None);
        let got = values(&log, 40);
        assert_eq!(got.first().unwrap().0, 40);
        assert_eq!(got.len(), 60);
        log.append(&[Record::new("after")]).unwrap();
        assert_eq!(values(&log, 100), vec![(100, b"after".to_vec())]);
    }
}
