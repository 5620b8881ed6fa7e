//! The write path: [`PartitionLog::append`] and the crate-internal
//! [`append_entry`](PartitionLog::append_entry) turn records (or a Raft entry's payload) into
//! one frame, check it against the writer's cursor, and write it after the active segment's
//! published bytes, rolling first if it does not fit.

use std::sync::atomic::Ordering;

use super::{PartitionLog, Writer, now_ms};
use crate::env::FaultPoint;
use crate::error::{Error, Result};
use crate::segment::Cursor;
use crate::segment::format::{END_MARK, EntryKind, PayloadFormat};
use crate::segment::frame::{
    FrameHeader, Payload, body_len_for, encode_frame, encode_frame_header,
};
use crate::segment::record::Record;
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
    /// How a data entry's payload is encoded.
    pub(crate) format: PayloadFormat,
    /// The frame's timestamp; `None` for now. A Raft replica writes the leader's, so that
    /// replicas hold identical frames.
    pub(crate) timestamp_ms: Option<u64>,
    /// A data entry's payload is compacted (FORMAT.md §4.3): a follower writing entries its
    /// leader had compacted before sending them.
    pub(crate) compacted: bool,
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
    /// The batch's timestamp as its frame holds it, in ms since the Unix epoch: the time the
    /// partition's leader appended it (Kafka's LogAppendTime), which is every record's
    /// timestamp on a `message.timestamp.type=LogAppendTime` topic. 0 where it cannot be
    /// known: a resent idempotent batch whose first copy is no longer in the log.
    pub timestamp_ms: u64,
}

impl AppendInfo {
    /// The offset of the batch's last record.
    pub fn last_offset(&self) -> Offset {
        Offset(self.base_offset.0 + u64::from(self.record_count.saturating_sub(1)))
    }
}

impl PartitionLog {
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
            crate::segment::frame::validate_payload(
                spec.format,
                spec.compacted,
                payload,
                record_count,
                &self.opts.limits,
            )
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
            format: if kind == EntryKind::Data {
                spec.format
            } else {
                PayloadFormat::Replog
            },
            compacted: kind == EntryKind::Data && spec.compacted,
            entries: 1,
            timestamp_ms,
            producer_id: spec.producer_id,
            producer_epoch: spec.producer_epoch,
            base_sequence: spec.base_sequence,
        };
        let frame_len = header.frame_len();
        // A Kafka batch never goes into a segment of format version 1, nor a compacted frame
        // into one older than 3 (FORMAT.md §9): a build that reads only the older version must
        // refuse the segment, not cut it at the frame.
        let old_format = w.active.version < header.min_format_version();
        // A segment is as large as its topic's `segment.bytes` says now, also one created
        // when it said more (a topic's first segment is created before its configs apply).
        let used = w.handle.capacity() - w.handle.free_len();
        let full = used > crate::segment::format::SEGMENT_HEADER_LEN
            && (used + frame_len) as u64 > self.segment_bytes();
        if old_format && w.cursor.next_log_index == w.active.base_log_index {
            self.replace_empty_active_locked(&mut w)?;
        } else if w.handle.free_len() < frame_len || old_format || full {
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
        // Written after the published bytes in one write, followed by the end-of-data mark
        // where it fits (FORMAT.md §7: the bytes after a segment's data may be a recycled
        // file's old frames).
        let trailer = if w.handle.free_len() - frame_len >= END_MARK.len() {
            END_MARK.len()
        } else {
            0
        };
        // Blocks first, so that a full disk refuses the batch before any byte of it is written
        // (and the log stays writable once space is freed).
        let end = w.handle.capacity() - w.handle.free_len() + frame_len + trailer;
        self.reserve_locked(w, end)?;
        let written = self.opts.faults.check(FaultPoint::Write).and_then(|()| {
            match payload {
                // An encoded payload (a Raft entry, a Kafka batch) is written where it is,
                // after its header: no copy.
                Payload::Raw(bytes) => {
                    let head = encode_frame_header(&header, bytes);
                    let mark = END_MARK.get(..trailer).unwrap_or_default();
                    w.handle.append_parts([&head, bytes, mark], trailer)
                }
                // Records are encoded into the reused buffer (every byte of the frame is
                // written, so stale bytes in it do not matter).
                Payload::Records(_) => {
                    if w.buf.len() < frame_len + trailer {
                        w.buf.resize(frame_len + trailer, 0);
                    }
                    let frame = w.buf.get_mut(..frame_len).expect("sized above");
                    let encoded = encode_frame(frame, &header, payload);
                    debug_assert_eq!(encoded, frame_len);
                    if let Some(mark) = w.buf.get_mut(frame_len..frame_len + trailer) {
                        mark.fill(0);
                    }
                    let bytes = w.buf.get(..frame_len + trailer).expect("sized above");
                    w.handle.append(bytes, trailer)
                }
            }
        });
        let pos = match written {
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
            crate::segment::frame::decode_frame(w.handle.map().published(), pos, &self.opts.limits),
            Ok(Some(header)),
            "a frame must decode to what was encoded"
        );
        w.active.note_appended(pos, &header);
        w.cursor = Cursor::after(&header);
        self.publish(w);
        // The next segment's file is made in the background once this one is half full (a
        // quiet partition holds no spare), unless a recycled file is waiting.
        if w.spare.is_none()
            && w.recycled.is_empty()
            && w.handle.free_len() < w.handle.capacity() / 2
        {
            self.start_spare(w);
        }
        Ok(AppendInfo {
            log_index: LogIndex(header.log_index),
            base_offset: Offset(header.base_offset),
            record_count,
            timestamp_ms: header.timestamp_ms,
        })
    }
}

impl PartitionLog {
    /// Gives the active segment blocks up to byte `end` ([`reserve`](crate::segment::reserve)),
    /// telling it whether `flush` synced since the last step was preallocated: only then are
    /// zeros written and synced ahead of the writer. A log that is never flushed never pays for
    /// a sync; one flushed at least once a step gets blocks whose allocation is durable before
    /// its frames are written there, so that its syncs write only their bytes.
    fn reserve_locked(&self, w: &mut Writer, end: usize) -> Result<()> {
        let flushes = self.syncs.load(Ordering::Relaxed);
        let synced = flushes != w.flushes_seen;
        if crate::segment::reserve(&mut w.handle, end, &self.opts, synced)? {
            w.flushes_seen = flushes;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{fill, small, values};
    use super::*;
    use crate::config::LogConfig;
    use crate::segment::format::FORMAT_VERSION;

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

    /// A Kafka producer's batch of `n` records (values `v0`, `v1`, …) as a Kafka client
    /// encodes it.
    fn kafka_batch(n: i64, compression: kafka_protocol::records::Compression) -> bytes::Bytes {
        let times = vec![1_700_000_000_000; usize::try_from(n).unwrap()];
        super::super::test_util::kafka_batch(&times, compression, false)
    }

    fn kafka_spec() -> EntrySpec {
        EntrySpec {
            format: PayloadFormat::Kafka,
            ..EntrySpec::default()
        }
    }

    fn expected_values() -> Vec<(u64, Vec<u8>)> {
        let mut want = vec![(0, b"native".to_vec())];
        want.extend((0..3).map(|i| (1 + i, format!("v{i}").into_bytes())));
        want.push((4, b"after".to_vec()));
        want
    }

    /// A log of 64 KiB segments holding one native record, `native`, at offset 0.
    fn log_with_a_native_record() -> (tempfile::TempDir, LogConfig, PartitionLog) {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 64 << 10,
            ..small()
        };
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        log.append(&[Record::new("native")]).unwrap();
        (dir, config, log)
    }

    #[test]
    fn kafka_batches_are_kept_as_sent_and_read_as_records_after_a_reopen() {
        let (dir, config, log) = log_with_a_native_record();
        let sent = kafka_batch(3, kafka_protocol::records::Compression::Gzip);
        let info = log.append_entry(kafka_spec(), 3, &sent).unwrap();
        assert_eq!(info.base_offset, Offset(1));
        log.append(&[Record::new("after")]).unwrap();
        // A count that is not the batch's, and bytes that are not a batch, are refused.
        for (count, bytes) in [(4, &sent[..]), (1, &b"not a batch"[..])] {
            assert!(matches!(
                log.append_entry(kafka_spec(), count, bytes),
                Err(Error::InvalidBatch { .. })
            ));
        }
        assert_eq!(values(&log, 0), expected_values());
        let stored = log.read(Offset(1), 1 << 20).unwrap();
        assert_eq!(stored[0].format(), PayloadFormat::Kafka);
        assert_eq!(stored[0].payload, sent, "the bytes as sent");
        drop(log);
        // A clean reopen trusts the index; without it the segment is scanned.
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        assert_eq!(values(&log, 0), expected_values());
        drop(log);
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "index") {
                std::fs::remove_file(path).unwrap();
            }
        }
        let log = PartitionLog::open(dir.path(), config).unwrap();
        assert_eq!(values(&log, 0), expected_values());
    }

    /// A Kafka batch's CRC-32C is checked where it enters the log, not on reads: damage on
    /// disk inside its records is caught on read by the frame's own CRC.
    #[test]
    fn damage_inside_a_stored_kafka_batch_is_caught_on_read() {
        use std::os::unix::fs::FileExt;
        let (dir, config, log) = log_with_a_native_record();
        let sent = kafka_batch(3, kafka_protocol::records::Compression::None);
        log.append_entry(kafka_spec(), 3, &sent).unwrap();
        log.roll().unwrap();
        log.append(&[Record::new("after")]).unwrap();
        drop(log);
        let path = dir
            .path()
            .join(crate::segment::format::segment_file_name(0));
        let bytes = std::fs::read(&path).unwrap();
        let at = bytes
            .windows(sent.len())
            .position(|w| w == &sent[..])
            .unwrap();
        // The value of the batch's second record, `v1`: inside the CRC-32C's range.
        let v1 = at + sent.windows(2).rposition(|w| w == b"v1").unwrap();
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        assert_eq!(values(&log, 0), expected_values());
        // The byte rots under the open log (written in place: the file keeps its length).
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(b"2", (v1 + 1) as u64).unwrap();
        let corrupt = |r: Result<Vec<crate::segment::batch::Batch>>| {
            matches!(
                r,
                Err(Error::Corrupt {
                    kind: crate::error::CorruptKind::ChecksumMismatch { .. },
                    ..
                })
            )
        };
        assert!(corrupt(log.read(Offset(1), 1 << 20)), "caught on read");
        assert_eq!(values(&log, 4), vec![(4, b"after".to_vec())]);
        drop(log);
        assert!(
            matches!(
                PartitionLog::open(dir.path(), config),
                Err(Error::Corrupt { .. })
            ),
            "and on a reopen"
        );
    }

    /// An empty version-1 active segment (a roll just before the upgrade) is replaced by a
    /// current-version one under the same name, not followed by a second segment of the same base.
    #[test]
    fn an_empty_version_1_active_segment_is_replaced_before_a_kafka_batch() {
        let (dir, config, log) = log_with_a_native_record();
        log.roll().unwrap();
        drop(log);
        set_segment_version(dir.path(), 1);
        assert_eq!(segment_versions(dir.path()), vec![1, 1]);
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        let sent = kafka_batch(3, kafka_protocol::records::Compression::Lz4);
        log.append_entry(kafka_spec(), 3, &sent).unwrap();
        log.append(&[Record::new("after")]).unwrap();
        assert_eq!(log.segment_count(), 2);
        assert_eq!(values(&log, 0), expected_values());
        drop(log);
        assert_eq!(segment_versions(dir.path()), vec![1, FORMAT_VERSION]);
        let log = PartitionLog::open(dir.path(), config).unwrap();
        assert_eq!(values(&log, 0), expected_values());
        // Retention of the first segment leaves the second whole.
        log.purge_to(Offset(1)).unwrap();
        assert_eq!(values(&log, 1), expected_values()[1..].to_vec());
    }

    /// Sets the format version in every segment header of `dir` (and the header's CRC).
    fn set_segment_version(dir: &std::path::Path, version: u16) {
        use crate::segment::format::{SEG_CRC_POS, SEG_VERSION_POS};
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "log") {
                continue;
            }
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[SEG_VERSION_POS..SEG_VERSION_POS + 2].copy_from_slice(&version.to_le_bytes());
            let crc = crc32fast::hash(&bytes[..SEG_CRC_POS]);
            bytes[SEG_CRC_POS..SEG_CRC_POS + 4].copy_from_slice(&crc.to_le_bytes());
            std::fs::write(&path, bytes).unwrap();
        }
    }

    fn segment_versions(dir: &std::path::Path) -> Vec<u16> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| {
                let bytes = std::fs::read(p).unwrap();
                u16::from_le_bytes([bytes[8], bytes[9]])
            })
            .collect()
    }

    /// A log of format version 1 (the only difference: the version in its segment headers,
    /// since version 2 added the Kafka flag and nothing else) opens and reads as before; a
    /// Kafka batch goes to a new, segment of the current version, so that a build reading only version 1
    /// refuses that segment instead of cutting the log at the frame. A version this build does
    /// not know is refused with a clear error.
    #[test]
    fn a_version_1_log_opens_and_takes_kafka_batches_in_a_new_segment() {
        let (dir, config, log) = log_with_a_native_record();
        drop(log);
        set_segment_version(dir.path(), 1);
        assert_eq!(segment_versions(dir.path()), vec![1]);
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        assert_eq!(values(&log, 0), vec![(0, b"native".to_vec())]);
        let sent = kafka_batch(3, kafka_protocol::records::Compression::Snappy);
        log.append_entry(kafka_spec(), 3, &sent).unwrap();
        log.append(&[Record::new("after")]).unwrap();
        assert_eq!(values(&log, 0), expected_values());
        drop(log);
        assert_eq!(segment_versions(dir.path()), vec![1, FORMAT_VERSION]);
        let log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        assert_eq!(values(&log, 0), expected_values());
        drop(log);
        let newer = FORMAT_VERSION + 1;
        set_segment_version(dir.path(), newer);
        match PartitionLog::open(dir.path(), config) {
            Err(Error::Corrupt { kind, .. }) => {
                assert_eq!(kind, crate::error::CorruptKind::UnsupportedVersion(newer));
            }
            other => panic!("a version-{newer} log opened: {:?}", other.map(|_| ())),
        }
    }
}
