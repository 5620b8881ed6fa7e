//! [`PartitionLog`]: an ordered list of segments with one writer and many readers.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

use crate::config::LogConfig;
use crate::dirlock::DirLock;
use crate::error::{Error, Result};
use crate::fault::{FaultPoint, Faults};
use crate::segment::format::{
    END_MARK, EntryKind, SEGMENT_HEADER_LEN, index_file_name, parse_segment_file_name,
    segment_file_name,
};
use crate::segment::mmap::WriteHandle;
use crate::segment::record::{
    Batch, FrameHeader, Limits, Payload, Record, body_len_for, encode_frame,
};
use crate::segment::{
    Cursor, RecoveryEvent, Recycled, Sealed, Segment, SegmentOptions, SpareFile, sync_dir,
};
use crate::types::{LogIndex, Offset, Term};

/// What a caller of the crate-internal append path decides about a new entry; anything left
/// `None` or 0 comes from the log (next log index, last term, no producer).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EntrySpec {
    pub(crate) log_index: Option<u64>,
    pub(crate) term: Option<u64>,
    pub(crate) producer_id: u64,
    pub(crate) producer_epoch: u16,
    pub(crate) base_sequence: u32,
    /// The frame's timestamp; `None` for now. A Raft replica writes the leader's, so that
    /// replicas hold identical frames.
    pub(crate) timestamp_ms: Option<u64>,
}

/// Where an appended batch landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// The log index of the batch's entry.
    pub log_index: LogIndex,
    /// The offset of the batch's first record.
    pub base_offset: Offset,
    /// The number of records in the batch.
    pub record_count: u32,
}

impl AppendInfo {
    /// The offset of the batch's last record.
    pub fn last_offset(&self) -> Offset {
        Offset(self.base_offset.0 + u64::from(self.record_count.saturating_sub(1)))
    }
}

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
}

/// How many sealed segments may wait unsynced before a roll starts syncing the oldest in the
/// background. Appends never wait for the disk below this; a crash recovery scans at most this
/// many segments plus the active one, whatever the size of the log.
const UNSYNCED_SEALED_MAX: usize = 2;

/// A sealed segment being synced and indexed on its own thread.
#[derive(Debug)]
struct PendingSeal {
    thread: std::thread::JoinHandle<std::io::Result<()>>,
    /// Set by `abandon` so that a simulated crash does not let the index appear later.
    cancel: Arc<AtomicBool>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl PartitionLog {
    /// Opens the log in `dir`, creating the directory and an empty log if needed, and recovers
    /// it after a crash (see the recovery rules in [`crate::format`](mod@crate::format)).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidConfig`] if `config` does not validate.
    /// - [`Error::Locked`] if another open log holds the directory.
    /// - [`Error::Corrupt`] for damage that recovery must not repair silently: a bad segment
    ///   header, or an invalid frame in any segment but the last.
    /// - [`Error::Io`] for operating-system errors.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Self> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let lock = DirLock::acquire(&dir)?;
        let opts = SegmentOptions {
            capacity: config.segment_bytes,
            index_interval_bytes: config.index_interval_bytes,
            preallocate: config.preallocate,
            limits: Limits {
                record_bytes_max: config.record_bytes_max,
                batch_bytes_max: config.batch_bytes_max,
            },
            faults: Faults::from_config(&config),
        };
        let bases = drop_segments_before_restart(&dir, list_segments(&dir)?)?;
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
        };
        log.start_spare(&mut log.writer.lock());
        Ok(log)
    }

    /// Appends `records` as one batch and returns where it landed. The batch is readable when
    /// this returns, and durable after the next [`flush`](Self::flush).
    ///
    /// # Correctness
    ///
    /// Offsets are dense: the batch's records get `base_offset .. base_offset + len`, directly
    /// after the previous batch's. A batch is written whole or, after a crash before it was
    /// flushed, not at all.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyBatch`], [`Error::RecordTooLarge`], [`Error::BatchTooLarge`] for input
    /// outside the configured limits (nothing is written); [`Error::PreviousIo`] after a failed
    /// sync; [`Error::Io`] if a new segment could not be created.
    pub fn append(&self, records: &[Record]) -> Result<AppendInfo> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let max = self.config.record_bytes_max;
        let mut payload_len = 0usize;
        for r in records {
            payload_len = payload_len.saturating_add(r.encoded_len(max)?);
        }
        let count = u32::try_from(records.len()).map_err(|_| Error::BatchTooLarge {
            len: payload_len as u64,
            max: u64::from(self.config.batch_bytes_max),
        })?;
        let spec = EntrySpec::default();
        self.append_frame(
            EntryKind::Data,
            count,
            payload_len,
            &Payload::Records(records),
            spec,
        )
    }

    /// Appends an entry whose log index and term the caller decides (a Raft replica writing the
    /// leader's entries). `payload` is an encoded record payload (validated here) for a data
    /// entry, or opaque bytes for a control entry (`record_count == 0`).
    pub(crate) fn append_entry(
        &self,
        spec: EntrySpec,
        record_count: u32,
        payload: &[u8],
    ) -> Result<AppendInfo> {
        let kind = if record_count == 0 {
            EntryKind::Control
        } else {
            EntryKind::Data
        };
        if kind == EntryKind::Data {
            crate::segment::record::validate_records(payload, record_count, &self.opts.limits)
                .map_err(|kind| Error::InvalidBatch { kind })?;
        }
        self.append_frame(
            kind,
            record_count,
            payload.len(),
            &Payload::Raw(payload),
            spec,
        )
    }

    /// Appends a control entry with the next log index and the last term (for tests).
    #[cfg(test)]
    pub(crate) fn append_control(&self, payload: &[u8]) -> Result<AppendInfo> {
        self.append_entry(EntrySpec::default(), 0, payload)
    }

    fn append_frame(
        &self,
        kind: EntryKind,
        record_count: u32,
        payload_len: usize,
        payload: &Payload<'_>,
        spec: EntrySpec,
    ) -> Result<AppendInfo> {
        let body_len = body_len_for(payload_len, &self.opts.limits)?;
        let timestamp_ms = spec.timestamp_ms.unwrap_or_else(now_ms);
        let mut w = self.writer.lock();
        self.check_writable()?;
        if let Some(requested) = spec.log_index
            && requested != w.cursor.next_log_index
        {
            return Err(Error::LogIndexOutOfRange {
                requested: LogIndex(requested),
                first: self.first_log_index(),
                next: LogIndex(w.cursor.next_log_index),
            });
        }
        let term = spec.term.unwrap_or(w.cursor.last_term);
        if term < w.cursor.last_term {
            return Err(Error::TermRegression {
                previous: Term(w.cursor.last_term),
                requested: Term(term),
            });
        }
        if spec.producer_id == 0 && (spec.base_sequence != 0 || spec.producer_epoch != 0) {
            return Err(Error::InvalidBatch {
                kind: crate::error::CorruptKind::NonZeroReserved,
            });
        }
        let header = FrameHeader {
            body_len,
            log_index: w.cursor.next_log_index,
            term,
            base_offset: w.cursor.next_offset,
            record_count,
            kind,
            timestamp_ms,
            producer_id: spec.producer_id,
            producer_epoch: spec.producer_epoch,
            base_sequence: spec.base_sequence,
        };
        let frame_len = header.frame_len();
        if w.handle.free_len() < frame_len {
            self.roll_locked(&mut w)?;
        }
        if w.handle.free_len() < frame_len {
            // Only possible if a segment larger than the configured size limit was asked for.
            return Err(Error::BatchTooLarge {
                len: payload_len as u64,
                max: u64::from(self.config.batch_bytes_max),
            });
        }
        let w = &mut *w;
        // Encode into the reused buffer (every byte of the frame is written, so stale bytes in
        // it do not matter), then write it after the published bytes in one pwrite, followed
        // by the end-of-data mark where it fits (FORMAT.md §7: the bytes after a segment's
        // data may be a recycled file's old frames).
        let trailer = if w.handle.free_len() - frame_len >= END_MARK.len() {
            END_MARK.len()
        } else {
            0
        };
        if w.buf.len() < frame_len + trailer {
            w.buf.resize(frame_len + trailer, 0);
        }
        let frame = w.buf.get_mut(..frame_len).expect("sized above");
        let written = encode_frame(frame, &header, payload);
        debug_assert_eq!(written, frame_len);
        if let Some(mark) = w.buf.get_mut(frame_len..frame_len + trailer) {
            mark.fill(0);
        }
        let bytes = w.buf.get(..frame_len + trailer).expect("sized above");
        let pos = match self
            .opts
            .faults
            .check(FaultPoint::Write)
            .and_then(|()| w.handle.append(bytes, trailer))
        {
            Ok(pos) => {
                self.opts
                    .faults
                    .wrote(&w.active.path, pos as u64, frame_len as u64);
                pos
            }
            Err(e) => {
                // Unpublished bytes may be half written: harmless, but the device is failing.
                self.latch();
                return Err(e.into());
            }
        };
        debug_assert_eq!(
            crate::segment::record::decode_frame(
                w.handle.map().published(),
                pos,
                &self.opts.limits
            ),
            Ok(Some(header)),
            "a frame must decode to what was encoded"
        );
        w.active.note_appended(pos, &header);
        w.cursor = Cursor::after(&header);
        self.publish(w);
        Ok(AppendInfo {
            log_index: LogIndex(header.log_index),
            base_offset: Offset(header.base_offset),
            record_count,
        })
    }

    /// Seals the active segment and starts a new one.
    ///
    /// The new segment is created durably; the old one joins the unsynced sealed segments,
    /// so appends do not wait for the disk. When more than [`UNSYNCED_SEALED_MAX`] wait, the
    /// oldest are synced and indexed on a background thread, one batch at a time and in log
    /// order. Recovery treats the sealed segments after the last one with an index as a
    /// possibly torn tail (FORMAT.md §7).
    fn roll_locked(&self, w: &mut Writer) -> Result<()> {
        let recycled = w.recycled.pop();
        let from_pool = recycled.is_some();
        let spare = recycled.or_else(|| self.take_spare(w));
        let (seg, handle) = match Segment::create(&self.dir, w.cursor, &self.opts, spare, false) {
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
        if !from_pool {
            self.start_spare(w);
        }
        w.unsynced.push_back(old);
        if w.unsynced.len() > UNSYNCED_SEALED_MAX {
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
        }
        Ok(())
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

    /// Deletes the spare files: the one made in the background and the recycled ones.
    fn discard_spares(&self, w: &mut Writer) {
        if let Some(spare) = self.take_spare(w) {
            spare.discard();
        }
        for spare in w.recycled.drain(..) {
            spare.discard();
        }
    }

    /// Starts preallocating the next segment's file in the background.
    fn start_spare(&self, w: &mut Writer) {
        if let Some(old) = self.take_spare(w) {
            old.discard();
        }
        let (dir, opts) = (self.dir.clone(), self.opts.clone());
        w.spare = std::thread::Builder::new()
            .name("replog-prealloc".into())
            .spawn(move || SpareFile::create(&dir, "spare.tmp", &opts))
            .ok();
    }

    /// Waits for the background sync, if one runs. Its failure latches the log.
    fn join_pending_seal(&self, w: &mut Writer) -> Result<()> {
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
    fn seal_all_locked(&self, w: &mut Writer) -> Result<()> {
        self.join_pending_seal(w)?;
        let unsynced: Vec<Arc<Segment>> = w.unsynced.drain(..).collect();
        if let Err(e) = seal_all(&unsynced, &self.opts.faults, &AtomicBool::new(false)) {
            self.latch();
            return Err(e.into());
        }
        Ok(())
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
        if self.durable_next_log_index.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        self.check_writable()?;
        let (seg, next) = {
            let mut w = self.writer.lock();
            // Sealed segments come before the active one: make them durable first. This holds
            // the writer lock, so that no roll can index a later segment before they are.
            self.seal_all_locked(&mut w)?;
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

    /// Reads batches holding records from `from` on, up to about `max_bytes` of frames. The
    /// first batch may start before `from` (skip its records below `from`); at least one batch
    /// is returned if `from` is below the end, even if it is larger than `max_bytes`. Returns an
    /// empty list at the end of the log.
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
                if h.kind != EntryKind::Data || h.next_offset() <= from.0 {
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
                out.push(s.batch(pos, h)?);
                bytes = bytes.saturating_add(h.frame_len());
                Ok(bytes < max_bytes)
            },
        )?;
        Ok(out)
    }

    /// Walks frames in log order from `seg` on, through later segments found by base log index
    /// (not by position, so that a concurrent purge or truncation cannot make a walk skip or
    /// repeat segments). `seek` picks where to start in each segment; if the first frame found
    /// there `overshoots` what is wanted (an index that passed its checks but points too far),
    /// the segment is scanned from its start instead, so a bad index never makes a read skip
    /// frames. `visit` sees every frame and returns `false` to stop. Bounded: each segment is
    /// visited once, each frame at most twice.
    fn walk(
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
            done: false,
        }
    }

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
                seg.cut(pos, new_base);
                seg.write_index(faults)?;
                sync_dir(&self.dir)?;
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
            let (new, handle) = Segment::create(&self.dir, new_base, &self.opts, None, false)?;
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
            let created = Segment::create(&self.dir, base, &self.opts, None, true)?;
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

    /// Reads entries (data and control) with log indices in `[from, to)`, up to about
    /// `max_bytes` of frames (at least one entry if any is in range).
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
                if h.log_index < want {
                    return Ok(true);
                }
                out.push(s.batch(pos, h)?);
                expected.set(want + 1);
                bytes = bytes.saturating_add(h.frame_len());
                Ok(bytes < max_bytes && want + 1 < to)
            },
        )?;
        Ok(out)
    }

    /// Deletes whole segments whose entries all have log indices below `log_index`, oldest
    /// first, never the active one.
    pub(crate) fn purge_to_log_index(&self, log_index: u64) -> Result<usize> {
        self.remove_leading(|segs, i| {
            segs.get(i + 1)
                .is_some_and(|n| n.base_log_index <= log_index)
        })
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

    /// Applies `retention_bytes` and `retention_ms` at `now_ms` (milliseconds since the Unix
    /// epoch): deletes the oldest segments whose newest batch is older than `retention_ms`, and
    /// the oldest segments while the rest would still hold at least `retention_bytes` (as Kafka
    /// does). The active segment is never deleted. Returns the number of segments deleted.
    ///
    /// # Errors
    ///
    /// As [`purge_to`](Self::purge_to).
    pub fn enforce_retention(&self, now_ms: u64) -> Result<usize> {
        self.remove_leading(self.retention_rule(now_ms))
    }

    /// The log index before which retention would delete every entry at `now_ms` (the first
    /// kept segment's base), or `None` if it would delete nothing. The Raft layer purges up to
    /// it through openraft, so that replicas agree on what is gone.
    pub(crate) fn retention_point(&self, now_ms: u64) -> Option<u64> {
        let segs = self.segments.read().clone();
        let mut rule = self.retention_rule(now_ms);
        let mut n = 0;
        while n + 1 < segs.len() && rule(&segs, n) {
            n += 1;
        }
        (n > 0).then(|| segs.get(n).map_or(0, |s| s.base_log_index))
    }

    /// Says whether leading segment `i` is due for deletion, given those before it are.
    fn retention_rule(&self, now_ms: u64) -> impl FnMut(&[Arc<Segment>], usize) -> bool {
        let (ms, max_bytes) = (self.config.retention_ms, self.config.retention_bytes);
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
                match s.recycle(to, self.opts.capacity)? {
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

    /// Flushes, writes the active segment's index, and releases the directory. Dropping the log
    /// does the same, ignoring errors.
    ///
    /// # Errors
    ///
    /// As [`flush`](Self::flush), and [`Error::Io`] if the index could not be written.
    pub fn close(self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.flush()?;
        let mut w = self.writer.lock();
        self.seal_all_locked(&mut w)?;
        w.active.write_index(&self.opts.faults)?;
        Ok(())
    }

    /// Drops the log without flushing or writing an index, as a crash would leave it (except
    /// that the page cache keeps what was written). For tests.
    #[doc(hidden)]
    pub fn abandon(self) {
        self.closed.store(true, Ordering::Release);
        let mut w = self.writer.lock();
        self.discard_spares(&mut w);
        if let Some(pending) = w.pending_seal.take() {
            // A crash would stop the background sync wherever it is; stop it before its index.
            pending.cancel.store(true, Ordering::Release);
            let _ = pending.thread.join();
        }
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

impl Drop for PartitionLog {
    fn drop(&mut self) {
        // Never leave a thread that may still write into the directory after the lock is gone.
        if let Some(pending) = self.writer.lock().pending_seal.take() {
            let _ = pending.thread.join();
        }
        self.discard_spares(&mut self.writer.lock());
        if self.failed.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.close_inner() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "closing the log failed");
        }
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
    }
    Ok(())
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

/// Iterator over a log's records; see [`PartitionLog::iter`].
#[derive(Debug)]
pub struct LogIter<'a> {
    log: &'a PartitionLog,
    next: Offset,
    buffered: std::vec::IntoIter<(Offset, Record)>,
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
    use super::*;
    use crate::error::CorruptKind;
    use crate::fault::{FaultInjector, FaultPoint};

    /// Tiny segments so that rolls happen every few batches.
    fn small() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_interval_bytes: 64,
            record_bytes_max: 256,
            batch_bytes_max: 512,
            preallocate: crate::Preallocate::Fallocate,
            ..LogConfig::default()
        }
    }

    /// [`small`] with a fault injector attached.
    fn small_with_faults() -> (Arc<FaultInjector>, LogConfig) {
        let faults = FaultInjector::new();
        let cfg = LogConfig {
            faults: Some(Arc::clone(&faults)),
            ..small()
        };
        (faults, cfg)
    }

    fn values(log: &PartitionLog, from: u64) -> Vec<(u64, Vec<u8>)> {
        log.iter(Offset(from))
            .map(|r| r.map(|(o, rec)| (o.0, rec.value.to_vec())))
            .collect::<Result<_>>()
            .unwrap()
    }

    fn fill(log: &PartitionLog, n: u64) {
        for i in 0..n {
            log.append(&[Record::new(format!("value-{i}"))]).unwrap();
        }
    }

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
    fn limits_are_enforced_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        assert!(matches!(log.append(&[]), Err(Error::EmptyBatch)));
        assert!(matches!(
            log.append(&[Record::new(vec![0u8; 300])]),
            Err(Error::RecordTooLarge { .. })
        ));
        let r = Record::new(vec![0u8; 200]);
        assert!(matches!(
            log.append(&[r.clone(), r.clone(), r]),
            Err(Error::BatchTooLarge { .. })
        ));
        assert_eq!(log.end_offset(), Offset(0));
        // A batch that exactly fills the batch limit fits.
        let exact = Record::new(vec![0u8; 256 - 10]);
        let fill = Record::new(vec![0u8; 512 - 256 - 10]);
        log.append(&[exact, fill]).unwrap();
    }

    #[test]
    fn second_open_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let _log = PartitionLog::open(dir.path(), small()).unwrap();
        assert!(matches!(
            PartitionLog::open(dir.path(), small()),
            Err(Error::Locked { .. })
        ));
    }

    #[test]
    fn control_entries_take_a_log_index_but_no_offset() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        fill(&log, 2);
        let c = log.append_control(b"membership").unwrap();
        assert_eq!((c.log_index, c.base_offset), (LogIndex(2), Offset(2)));
        let d = log.append(&[Record::new("x")]).unwrap();
        assert_eq!((d.log_index, d.base_offset), (LogIndex(3), Offset(2)));
        assert_eq!(values(&log, 0).len(), 3);
        drop(log);
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        assert_eq!(log.next_log_index(), LogIndex(4));
        assert_eq!(values(&log, 2), vec![(2, b"x".to_vec())]);
    }

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
            retention_ms: Some(1),
            ..small()
        };
        drop(log);
        let log = PartitionLog::open(dir.path(), log_ms).unwrap();
        log.enforce_retention(now_ms() + 10_000).unwrap();
        assert_eq!(log.segment_count(), 1, "only the active segment is left");
    }

    /// Segments of exactly four 80-byte frames (one record of a 6-byte value each).
    fn four_frame_segments(recycle_segments: usize) -> LogConfig {
        LogConfig {
            segment_bytes: (SEGMENT_HEADER_LEN + 4 * 80) as u64,
            index_interval_bytes: 64,
            record_bytes_max: 64,
            batch_bytes_max: 256,
            preallocate: crate::Preallocate::Fallocate,
            recycle_segments,
            ..LogConfig::default()
        }
    }

    fn append_numbered(log: &PartitionLog, range: std::ops::Range<u64>) {
        for i in range {
            let info = log.append(&[Record::new(format!("{i:06}"))]).unwrap();
            assert_eq!(info.base_offset, Offset(i));
        }
    }

    fn numbered(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, Vec<u8>)> {
        range.map(|i| (i, format!("{i:06}").into_bytes())).collect()
    }

    fn recycled_files(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("recycled-")
            })
            .count()
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

    #[test]
    fn failed_sync_latches_until_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg) = small_with_faults();
        let log = PartitionLog::open(dir.path(), cfg.clone()).unwrap();
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
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
        assert!(log.end_offset() >= Offset(3), "everything flushed survives");
        log.append(&[Record::new("ok")]).unwrap();
        log.flush().unwrap();
    }

    /// A simulated power loss takes exactly the frames written since the last sync, in the
    /// active segment and in sealed segments not yet synced, and recovery finds the rest.
    #[test]
    fn a_power_loss_takes_what_was_not_synced_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg) = small_with_faults();
        let log = PartitionLog::open(dir.path(), cfg.clone()).unwrap();
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
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
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
    fn failed_roll_keeps_the_log_usable() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg) = small_with_faults();
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
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
        let (faults, cfg) = small_with_faults();
        let log = PartitionLog::open(dir.path(), cfg.clone()).unwrap();
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
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
        assert_eq!(values(&log, 0).len() as u64, appended);
        log.append(&[Record::new("after")]).unwrap();
        assert_eq!(log.end_offset(), Offset(appended + 1));
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

    #[test]
    fn a_batch_that_exactly_fills_a_segment_stays_in_it() {
        let dir = tempfile::tempdir().unwrap();
        // The smallest segment the limits allow: a header and one frame of batch_bytes_max.
        let cfg = LogConfig {
            segment_bytes: 32 + 64 + 512,
            ..small()
        };
        let log = PartitionLog::open(dir.path(), cfg.clone()).unwrap();
        // Frame = 64-byte header + records.
        let free = usize::try_from(cfg.segment_bytes).unwrap() - 32 - 64;
        let records = [
            Record::new(vec![1u8; 256 - 10]),
            Record::new(vec![2u8; free - 256 - 10]),
        ];
        log.append(&records).unwrap();
        assert_eq!(log.segment_count(), 1, "the batch fits exactly");
        assert_eq!(log.size_bytes(), cfg.segment_bytes);
        log.append(&[Record::new("next")]).unwrap();
        assert_eq!(log.segment_count(), 2, "the next batch rolls");
        drop(log);
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
        assert_eq!(values(&log, 0)[1].1.len(), free - 256 - 10);
        assert_eq!(values(&log, 2), vec![(2, b"next".to_vec())]);
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

    // ---- Regressions: each from a review of the crash and concurrency paths. ----

    /// A crash inside a second truncation brought back entries the first one removed, because
    /// the kept segment's stale frames were only hidden by the next segment's existence.
    #[test]
    fn regression_truncated_entries_stay_gone_after_a_crash_mid_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let (faults, cfg) = small_with_faults();
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
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
        let (faults, cfg) = small_with_faults();
        let log = PartitionLog::open(dir.path(), cfg).unwrap();
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

    /// A frame whose offsets would overflow made the record iterator overflow (a panic in
    /// debug and fuzz builds).
    #[test]
    fn regression_overflowing_counters_are_corruption() {
        use crate::segment::record::{
            FrameHeader, Payload, body_len_for, encode_frame, fuzz_decode_frame,
        };
        let (payload, n) =
            crate::segment::record::encode_records(&[Record::new("x")], 1024).unwrap();
        let h = FrameHeader {
            body_len: body_len_for(payload.len(), &Limits::ON_DISK).unwrap(),
            log_index: 0,
            term: 0,
            base_offset: u64::MAX,
            record_count: n,
            kind: EntryKind::Data,
            timestamp_ms: 0,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let mut buf = vec![0u8; h.frame_len()];
        encode_frame(&mut buf, &h, &Payload::Raw(&payload));
        assert!(fuzz_decode_frame(&buf).is_err());
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
        let (header, entries) = (72, 12);
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
}
