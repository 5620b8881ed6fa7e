//! Log compaction (`cleanup.policy=compact`): keeping at least the latest record of each key.
//!
//! The partition log is the Raft log, so compaction changes no frame's place: every frame
//! keeps its log index, term, base offset and offset span (`record_count`), and only the
//! records inside a data frame go (FORMAT.md §4.3). A follower that needs a compacted range
//! receives those frames as they are and stores them compacted; Raft compares log ids only,
//! which compaction never touches, and every replica ends with the same latest record of each
//! key (DESIGN notes in FORMAT.md §4.3).
//!
//! One run ([`PartitionLog::compact`]):
//!
//! 1. The cleanable range: the sealed segments, oldest first, wholly at or below the log index
//!    the caller says is committed and applied, and none with a frame newer than
//!    `min.compaction.lag.ms`. The active segment is never compacted. The run goes on only if
//!    the segments not compacted since they were written ("dirty") make up at least
//!    `min.cleanable.dirty.ratio` of the range's bytes, or the oldest of them is older than
//!    `max.compaction.lag.ms`.
//! 2. A map of each key to its latest offset in the range.
//! 3. Each segment of the range decided: the records that are their key's latest stay, less
//!    the tombstones (Kafka records with a null value, and in the offsets topic empty values)
//!    older than `delete.retention.ms`; records without a key stay.
//! 4. Consecutive segments written as one file beside the first, as many as fit a segment's
//!    size, runs of emptied entries of one term merged into gap frames (FORMAT.md §4.3). A
//!    lone segment whose rewrite would change nothing and that is marked compacted already is
//!    left alone. So a compacted log keeps about one segment per `segment.bytes` of what is
//!    live, however long it runs.
//! 5. Each new file checked as recovery checks it and swapped in by one rename over the first
//!    segment, the others deleted after it ([`crate::segment::CompactedFile`]); readers
//!    holding the old segments finish on their maps.
//!
//! Reads and appends go on throughout: only the swap takes the log's locks, for a rename.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::PartitionLog;
use crate::error::Result;
use crate::segment::batch::Batch;
use crate::segment::format::{
    END_MARK, EntryKind, FRAME_HEADER_LEN, PayloadFormat, SEGMENT_HEADER_LEN,
};
use crate::segment::frame::{FrameHeader, Limits};
use crate::segment::kafka;
use crate::segment::record::compact_replog_payload;
use crate::segment::{FrameOut, Segment, gap};
use crate::types::LogIndex;

/// What one compaction run ([`PartitionLog::compact`]) may do: how far, and the topic
/// configs Kafka names for it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CompactionPolicy {
    /// Frames after this log index are not compacted (a Raft replica passes what it has
    /// applied: what may still be cut from its log must stay whole).
    pub upto_log_index: u64,
    /// The time the lags and the tombstones' age are reckoned from, in milliseconds since the
    /// Unix epoch.
    pub now_ms: u64,
    /// `min.compaction.lag.ms`: a segment with a frame newer than this is not compacted.
    pub min_lag_ms: u64,
    /// `max.compaction.lag.ms`: a dirty segment older than this is compacted whatever the
    /// dirty ratio.
    pub max_lag_ms: u64,
    /// `delete.retention.ms`: how long a tombstone stays once it is its key's latest.
    pub delete_retention_ms: u64,
    /// `min.cleanable.dirty.ratio`: the share of the range's bytes in segments not compacted
    /// since they were written below which a run does nothing.
    pub min_dirty_ratio: f64,
    /// Bytes of segments read per second at most (0 for no limit): the run's I/O budget.
    pub bytes_per_second: u64,
    /// A record of replog's with an empty value is a tombstone (the offsets topic's deletions,
    /// `group/records.rs`); otherwise only a Kafka record's null value is.
    pub(crate) empty_values_are_tombstones: bool,
}

impl CompactionPolicy {
    /// A run up to `upto_log_index`, now, with Kafka's defaults: no lags, tombstones kept
    /// a day, a dirty ratio of 0.5, no I/O limit.
    pub fn new(upto_log_index: LogIndex) -> CompactionPolicy {
        CompactionPolicy {
            upto_log_index: upto_log_index.get(),
            now_ms: super::now_ms(),
            min_lag_ms: 0,
            max_lag_ms: u64::MAX,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_dirty_ratio: 0.5,
            bytes_per_second: 0,
            empty_values_are_tombstones: false,
        }
    }
}

/// What a compaction run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Segments rewritten.
    pub segments: usize,
    /// Bytes of the segments rewritten, before.
    pub bytes_before: u64,
    /// Bytes of the segments rewritten, after.
    pub bytes_after: u64,
    /// Records removed.
    pub records_removed: u64,
    /// Distinct keys in the cleaned range.
    pub keys: usize,
}

/// Where a test stops a compaction run, to check that a crash there loses nothing.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompactionStep {
    /// The compacted file written and synced under its temporary name.
    Written,
    /// The old segment's index deleted, the compacted file not yet renamed.
    IndexRemoved,
    /// The compacted file renamed into place, its index not yet written.
    Renamed,
}

impl PartitionLog {
    /// Compacts the log (Kafka's `cleanup.policy=compact`): rewrites its sealed segments up to
    /// `policy.upto_log_index` with at least the latest record of each key, and returns what
    /// it did. Offsets never change: a compacted log has gaps, which reads skip. Appends and
    /// reads go on meanwhile; a crash at any point leaves the log as it was or with some
    /// segments compacted (the on-disk steps are in [`crate::format`](mod@crate::format),
    /// §4.3).
    ///
    /// ```
    /// use replog::{CompactionPolicy, LogConfig, LogIndex, Offset, PartitionLog, Record};
    ///
    /// # fn main() -> replog::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let log = PartitionLog::open(dir.path(), LogConfig::default())?;
    /// for v in 0..3 {
    ///     log.append(&[Record::new(format!("v{v}")).with_key("k")])?;
    /// }
    /// log.roll()?; // the active segment is never compacted
    /// let upto = LogIndex(log.next_log_index().get() - 1);
    /// let stats = log.compact(&CompactionPolicy::new(upto))?;
    /// assert_eq!(stats.records_removed, 2);
    /// let left: Vec<_> = log.iter(Offset(0)).map(|r| r.map(|(o, _)| o)).collect::<Result<_, _>>()?;
    /// assert_eq!(left, vec![Offset(2)]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Io`] if a file could not be written or renamed (the log is unchanged
    /// where the error struck), [`crate::Error::Corrupt`] if a segment does not read.
    pub fn compact(&self, policy: &CompactionPolicy) -> Result<CompactionStats> {
        self.compact_until(
            policy,
            #[cfg(test)]
            None,
        )
    }

    pub(crate) fn compact_until(
        &self,
        policy: &CompactionPolicy,
        #[cfg(test)] stop: Option<CompactionStep>,
    ) -> Result<CompactionStats> {
        let mut stats = CompactionStats::default();
        let range = self.cleanable(policy)?;
        if range.is_empty() {
            return Ok(stats);
        }
        let throttle = Throttle::new(policy.bytes_per_second);
        // The key map: each key's latest offset in the range.
        let mut latest: HashMap<Box<[u8]>, u64> = HashMap::new();
        // Each idempotent producer's last batch in the range, which stays a frame of its own
        // even if emptied (as Kafka's cleaner keeps it): a replica that replays the range
        // learns the producer's last sequence from it.
        let mut last_of_producer: HashMap<u64, u64> = HashMap::new();
        for seg in &range {
            for (pos, h) in seg.frames()? {
                if h.kind != EntryKind::Data {
                    continue;
                }
                if h.producer_id != 0 {
                    last_of_producer.insert(h.producer_id, h.log_index);
                }
                let batch = seg.batch(pos, &h)?;
                for_each_key(&batch, |offset, key, _| {
                    if let Some(key) = key {
                        match latest.get_mut(key) {
                            Some(at) => *at = (*at).max(offset),
                            None => {
                                latest.insert(key.into(), offset);
                            }
                        }
                    }
                })?;
            }
            throttle.spent(seg.data_len() as u64);
        }
        stats.keys = latest.len();
        // Each segment's frames decided, then the segments written: consecutive ones merged
        // into one file as long as it stays within a segment's size.
        let mut decided = Vec::with_capacity(range.len());
        for seg in &range {
            decided.push(decide(seg, &latest, &last_of_producer, policy)?);
            throttle.spent(seg.data_len() as u64);
        }
        let capacity = usize::try_from(self.opts.capacity).unwrap_or(usize::MAX);
        let mut start = 0;
        // Bounded: each turn moves `start` past one segment at least.
        while let Some(first) = decided.get(start) {
            let mut end = start + 1;
            let mut len = SEGMENT_HEADER_LEN + END_MARK.len() + first.len;
            while let Some(add) = decided
                .get(end)
                .map(|next| next.len_after(&decided[end - 1]))
                .filter(|add| len + add <= capacity)
            {
                len += add;
                end += 1;
            }
            let (group, parts) = (&range[start..end], &decided[start..end]);
            start = end;
            let mut frames = Runs::default();
            for (seg, d) in parts.iter().enumerate() {
                for f in &d.frames {
                    let out = match &f.payload {
                        Some(p) => FrameOut::Rewrite(f.header, p.clone()),
                        None => FrameOut::Keep { seg, pos: f.pos },
                    };
                    frames.push(out, &f.header, f.gap.clone());
                }
            }
            let (frames, collapsed) = frames.finish();
            let marked = group
                .iter()
                .all(|s| s.header().is_some_and(|h| h.compacted));
            if group.len() == 1 && marked && !collapsed && parts.iter().all(|d| !d.changed) {
                continue;
            }
            let file = crate::segment::write_compacted(group, &frames, &self.opts)?;
            let after = file.data_len as u64;
            #[cfg(test)]
            if stop == Some(CompactionStep::Written) {
                return Ok(stats);
            }
            if !self.swap(
                group,
                file,
                #[cfg(test)]
                stop,
            )? {
                continue;
            }
            #[cfg(test)]
            if stop.is_some() {
                return Ok(stats);
            }
            stats.segments += group.len();
            stats.bytes_before += group.iter().map(|s| s.data_len() as u64).sum::<u64>();
            stats.bytes_after += after;
            stats.records_removed += parts.iter().map(|d| d.removed).sum::<u64>();
        }
        if stats.segments > 0 {
            tracing::debug!(dir = %self.dir.display(), segments = stats.segments,
                before = stats.bytes_before, after = stats.bytes_after,
                removed = stats.records_removed, "compacted");
        }
        Ok(stats)
    }

    /// The segments one run may compact (module docs, step 1), oldest first; none if the
    /// dirty ones are too few and too young.
    fn cleanable(&self, policy: &CompactionPolicy) -> Result<Vec<Arc<Segment>>> {
        let segs = self.segments.read().clone();
        let mut range = Vec::new();
        for pair in segs.windows(2) {
            let [seg, next] = pair else { break };
            let extent = seg.extent();
            if next.base_log_index > policy.upto_log_index.saturating_add(1)
                || extent.max_timestamp_ms.saturating_add(policy.min_lag_ms) > policy.now_ms
            {
                break;
            }
            range.push(Arc::clone(seg));
        }
        // Sealed segments still waiting for their sync (and index) are made durable first, so
        // that no background sync writes an index beside a compacted file.
        let last = range.last().map_or(0, |s| s.extent().cursor.next_log_index);
        if self.durable_next_log_index.load(Ordering::Acquire) < last {
            self.flush()?;
        }
        let total: u64 = range.iter().map(|s| s.data_len() as u64).sum();
        let dirty: Vec<&Arc<Segment>> = range
            .iter()
            .filter(|s| !s.header().is_some_and(|h| h.compacted))
            .collect();
        let dirty_bytes: u64 = dirty.iter().map(|s| s.data_len() as u64).sum();
        let overdue = dirty.iter().any(|s| {
            s.first_timestamp_ms()
                .is_some_and(|t| t.saturating_add(policy.max_lag_ms) <= policy.now_ms)
        });
        let ratio = if total == 0 {
            0.0
        } else {
            dirty_bytes as f64 / total as f64
        };
        if dirty.is_empty() || (ratio < policy.min_dirty_ratio && !overdue) {
            return Ok(Vec::new());
        }
        Ok(range)
    }

    /// Installs `file` in place of the consecutive segments `group` if they are still in the
    /// log, one after another; `false` (and the file deleted) if retention or a reset removed
    /// one meanwhile.
    fn swap(
        &self,
        group: &[Arc<Segment>],
        file: crate::segment::CompactedFile,
        #[cfg(test)] stop: Option<CompactionStep>,
    ) -> Result<bool> {
        // The list changes only under the writer lock (retention, truncation and resets take
        // it): holding it, the group stays where it is found.
        let _w = self.writer.lock();
        let at = {
            let segs = self.segments.read();
            group.first().and_then(|first| {
                let at = segs.iter().position(|s| Arc::ptr_eq(s, first))?;
                let found = segs.get(at..at + group.len())?;
                found
                    .iter()
                    .zip(group)
                    .all(|(a, b)| Arc::ptr_eq(a, b))
                    .then_some(at)
            })
        };
        let Some(at) = at else {
            file.discard();
            return Ok(false);
        };
        let new = file.install(
            group,
            &self.opts,
            #[cfg(test)]
            stop,
        )?;
        {
            let mut segs = self.segments.write();
            if at + group.len() <= segs.len() {
                segs.splice(at..at + group.len(), [Arc::clone(&new)]);
            }
        }
        #[cfg(test)]
        if stop == Some(CompactionStep::Renamed) {
            return Ok(true);
        }
        if let Err(e) = new.write_index(&self.opts.faults) {
            tracing::warn!(segment = %new.path.display(), error = %e,
                "could not write a compacted segment's index; the next open will rebuild it");
        }
        new.release(false);
        Ok(true)
    }
}

/// One frame of a segment as compaction decided it.
struct Decision {
    pos: usize,
    header: FrameHeader,
    /// The records kept, if fewer than the frame holds (`None`: the frame as it is).
    payload: Option<Bytes>,
    /// Its entries' spans if it is an emptied entry (or a gap frame) that may join a gap.
    gap: Option<Vec<gap::Run>>,
}

/// A segment's frames as compaction decided them.
struct Decided {
    frames: Vec<Decision>,
    /// Some frame is rewritten.
    changed: bool,
    /// Bytes of its frames once written, before runs of emptied ones merge.
    len: usize,
    /// Records removed.
    removed: u64,
}

impl Decided {
    /// The bytes this segment's frames add to a file after `before`'s: less the gap frame
    /// header its first emptied entries need no more if they continue `before`'s last run.
    fn len_after(&self, before: &Decided) -> usize {
        let last = before
            .frames
            .last()
            .and_then(|d| Some((d.header.term, d.gap.as_ref()?)));
        let first = self
            .frames
            .first()
            .and_then(|d| Some((d.header.term, d.gap.as_ref()?)));
        match (last, first) {
            (Some((t1, r1)), Some((t2, r2))) if t1 == t2 => {
                let extends = r1.last().map(|r| r.span) == r2.first().map(|r| r.span);
                let saved = FRAME_HEADER_LEN + 8 + if extends { GAP_RUN_LEN_MAX } else { 0 };
                self.len.saturating_sub(saved)
            }
            _ => self.len,
        }
    }
}

/// Decides what compaction keeps of each frame of `seg`, given each key's latest offset in
/// the range and each idempotent producer's last batch there.
fn decide(
    seg: &Segment,
    latest: &HashMap<Box<[u8]>, u64>,
    last_of_producer: &HashMap<u64, u64>,
    policy: &CompactionPolicy,
) -> Result<Decided> {
    let tombstone_gone =
        |frame_time: u64| frame_time.saturating_add(policy.delete_retention_ms) <= policy.now_ms;
    let corrupt = |pos: usize, kind| crate::Error::Corrupt {
        file: seg.path.clone(),
        position: pos as u64,
        kind,
    };
    let mut out = Decided {
        frames: Vec::new(),
        changed: false,
        len: 0,
        removed: 0,
    };
    for (pos, h) in seg.frames()? {
        let mut decision = Decision {
            pos,
            header: h,
            payload: None,
            gap: None,
        };
        if h.kind == EntryKind::Gap {
            let payload = seg.batch(pos, &h)?.payload;
            let runs = gap::runs(&payload, h.record_count).map_err(|kind| corrupt(pos, kind))?;
            decision.gap = Some(runs);
        } else if h.kind == EntryKind::Data {
            let batch = seg.batch(pos, &h)?;
            let base = h.base_offset;
            let mut removed = 0u64;
            let mut keep = |delta: u32, key: Option<&[u8]>, tombstone: bool| {
                let kept = match key {
                    None => true,
                    Some(key) => {
                        latest.get(key) == Some(&(base + u64::from(delta)))
                            && !(tombstone && tombstone_gone(h.timestamp_ms))
                    }
                };
                removed += u64::from(!kept);
                kept
            };
            decision.payload = match h.format {
                PayloadFormat::Replog => compact_replog_payload(&batch, |d, k, v| {
                    keep(d, k, policy.empty_values_are_tombstones && v.is_empty())
                })
                .map(Bytes::from),
                PayloadFormat::Kafka if batch.payload.is_empty() => None,
                PayloadFormat::Kafka => {
                    match kafka::compact_batch(&batch.payload, h.compacted, &Limits::ON_DISK, keep)
                        .map_err(|kind| corrupt(pos, kind))?
                    {
                        Some(b) if removed == 0 => {
                            debug_assert_eq!(b, batch.payload);
                            None
                        }
                        Some(b) => Some(b),
                        None => Some(Bytes::new()),
                    }
                }
            };
            out.changed |= decision.payload.is_some();
            out.removed += removed;
            let empty = match &decision.payload {
                Some(p) => p.is_empty(),
                None => h.compacted && batch.payload.is_empty(),
            };
            // An emptied frame joins a gap unless it is an idempotent producer's last, or
            // spans no offset (a log-start entry, which is not a batch).
            let collapsible = h.record_count > 0
                && (h.producer_id == 0
                    || last_of_producer.get(&h.producer_id) != Some(&h.log_index));
            decision.gap = (empty && collapsible).then(|| {
                vec![gap::Run {
                    count: 1,
                    span: h.record_count,
                }]
            });
        }
        // What the frame adds to the file, at most: an emptied entry after another of its term
        // only the runs it adds to the gap frame they become (none if it extends the last).
        let previous = out
            .frames
            .last()
            .and_then(|p| p.gap.as_ref().filter(|_| p.header.term == h.term));
        out.len += match (&decision.gap, previous) {
            (Some(runs), Some(before)) => {
                let extends = before.last().map(|r| r.span) == runs.first().map(|r| r.span);
                GAP_RUN_LEN_MAX * (runs.len() - usize::from(extends))
            }
            (Some(runs), None) => FRAME_HEADER_LEN + 8 + GAP_RUN_LEN_MAX * runs.len(),
            (None, _) => match &decision.payload {
                Some(p) => FRAME_HEADER_LEN + p.len(),
                None => h.frame_len(),
            },
        };
        out.frames.push(decision);
    }
    Ok(out)
}

/// A compacted segment's frames as they are decided, with the runs of emptied entries (data
/// frames that kept no record, and gap frames) of one term collapsed into gap frames
/// (FORMAT.md §4.3, `crate::segment::gap`).
#[derive(Default)]
struct Runs {
    out: Vec<FrameOut>,
    /// The emptied frames being gathered: each one's output and header.
    run: Vec<(FrameOut, FrameHeader)>,
    /// Their entries' spans, run-length encoded.
    spans: Vec<gap::Run>,
    /// The entries and the offsets they span.
    entries: u64,
    span: u64,
    /// A run was collapsed: the segment changes.
    collapsed: bool,
}

impl Runs {
    /// Adds a frame; `spans` (its entries' spans) if it is an emptied entry, or a gap frame
    /// of them, which may join a gap.
    fn push(&mut self, frame: FrameOut, h: &FrameHeader, spans: Option<Vec<gap::Run>>) {
        let Some(spans) = spans else {
            self.flush();
            self.out.push(frame);
            return;
        };
        let joins = self.run.first().is_none_or(|(_, first)| {
            first.term == h.term
                && self.span + u64::from(h.record_count) <= GAP_SPAN_MAX
                && self.spans.len() + spans.len() <= gap::GAP_RUNS_MAX
        });
        if !joins {
            self.flush();
        }
        self.span += u64::from(h.record_count);
        for r in spans {
            self.entries += r.count;
            gap::push_run(&mut self.spans, r.count, r.span);
        }
        self.run.push((frame, *h));
    }

    /// Ends the run: a gap frame for two entries or more, else the frame as it was decided.
    fn flush(&mut self) {
        let run = std::mem::take(&mut self.run);
        let spans = std::mem::take(&mut self.spans);
        let entries = std::mem::take(&mut self.entries);
        let span = std::mem::take(&mut self.span);
        let Some((_, first)) = run.first() else {
            return;
        };
        let already_one_gap = run.len() == 1 && first.kind == EntryKind::Gap;
        if entries < 2 || already_one_gap {
            self.out.extend(run.into_iter().map(|(frame, _)| frame));
            return;
        }
        let last = run
            .last()
            .map_or(first.timestamp_ms, |(_, h)| h.timestamp_ms);
        let gap = FrameHeader {
            kind: EntryKind::Gap,
            format: PayloadFormat::Replog,
            compacted: true,
            entries,
            record_count: u32::try_from(span).unwrap_or(u32::MAX),
            timestamp_ms: last,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
            ..*first
        };
        self.out.push(FrameOut::Rewrite(gap, gap::encode(&spans)));
        self.collapsed = true;
    }

    fn finish(mut self) -> (Vec<FrameOut>, bool) {
        self.flush();
        (self.out, self.collapsed)
    }
}

/// The most bytes one run of a gap frame takes (a count and a span, FORMAT.md §4.3).
const GAP_RUN_LEN_MAX: usize = 15;

/// The most offsets one gap frame spans: what a Kafka batch's last offset delta can say,
/// since a Kafka fetch serves the gap as one empty batch.
const GAP_SPAN_MAX: u64 = i32::MAX as u64;

/// Each record of a data batch as compaction sees it: its offset, key, and whether it is a
/// tombstone (only Kafka's records can be: replog's have no null value).
fn for_each_key(batch: &Batch, mut each: impl FnMut(u64, Option<&[u8]>, bool)) -> Result<()> {
    let base = batch.base_offset().get();
    match batch.format() {
        PayloadFormat::Replog => {
            for (delta, r) in batch.record_refs() {
                each(base + u64::from(delta), r.key, false);
            }
            Ok(())
        }
        PayloadFormat::Kafka if batch.payload.is_empty() => Ok(()),
        PayloadFormat::Kafka => kafka::for_each_key(
            &batch.payload,
            batch.is_compacted(),
            &Limits::ON_DISK,
            |delta, key, tombstone| each(base + u64::from(delta), key, tombstone),
        )
        .map_err(|kind| crate::Error::InvalidBatch { kind }),
    }
}

/// Paces a run to its bytes-per-second budget by sleeping (it runs on a blocking thread).
struct Throttle {
    bytes_per_second: u64,
    start: Instant,
    spent: std::cell::Cell<u64>,
}

impl Throttle {
    fn new(bytes_per_second: u64) -> Throttle {
        Throttle {
            bytes_per_second,
            start: Instant::now(),
            spent: std::cell::Cell::new(0),
        }
    }

    fn spent(&self, bytes: u64) {
        self.spent.set(self.spent.get().saturating_add(bytes));
        if self.bytes_per_second == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.spent.get() as f64 / self.bytes_per_second as f64);
        let elapsed = self.start.elapsed();
        if due > elapsed {
            // At most a few seconds at a time: a segment is at most 4 GiB, a budget at least
            // some MiB/s in practice.
            std::thread::sleep((due - elapsed).min(Duration::from_secs(5)));
        }
    }
}

#[cfg(test)]
mod tests;
