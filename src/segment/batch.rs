//! The read side of a log: [`Batch`], one frame as a log hands it out, its payload a view of
//! the segment's memory map, and [`RecordIter`], its records as [`Record`]s that share that map
//! (a Kafka producer's batch decompressed first). A batch's payload was checked when its frame
//! was decoded ([`decode_frame`](crate::segment::frame::decode_frame)); a record that still does
//! not read (a replog bug) ends the iteration rather than panics.

use bytes::Bytes;

use crate::segment::format::{EntryKind, FRAME_HEADER_LEN, PayloadFormat, get_u32};
use crate::segment::frame::Limits;
use crate::segment::record::{Header, OFFSET_DELTA_LEN, Record, RecordRef};
use crate::types::{LogIndex, Offset, Term};

/// A batch of records read from a log. Its payload is a view of the segment's memory map.
#[derive(Clone, Debug)]
pub struct Batch {
    pub(crate) log_index: LogIndex,
    pub(crate) term: Term,
    pub(crate) base_offset: Offset,
    pub(crate) record_count: u32,
    pub(crate) timestamp_ms: u64,
    pub(crate) kind: EntryKind,
    /// How the payload of a data batch is encoded.
    pub(crate) format: PayloadFormat,
    /// Compaction removed records from it: `record_count` is the offsets it spans, and its
    /// records carry their offsets (FORMAT.md §4.3).
    pub(crate) compacted: bool,
    pub(crate) producer_id: u64,
    pub(crate) producer_epoch: u16,
    pub(crate) base_sequence: u32,
    /// The frame's payload: validated records or a checked Kafka batch (data), or opaque
    /// bytes (control).
    pub(crate) payload: Bytes,
}

impl Batch {
    /// The log index of this batch's entry.
    pub fn log_index(&self) -> LogIndex {
        self.log_index
    }

    /// The term that wrote this batch (0 in a local-only log).
    pub fn term(&self) -> Term {
        self.term
    }

    /// The offset of the first record.
    pub fn base_offset(&self) -> Offset {
        self.base_offset
    }

    /// The offset after the last record.
    pub fn next_offset(&self) -> Offset {
        Offset(self.base_offset.0 + u64::from(self.record_count))
    }

    /// The number of offsets the batch spans: its records, unless compaction removed some
    /// (then [`records`](Self::records) yields fewer, each with its own offset).
    pub fn record_count(&self) -> u32 {
        self.record_count
    }

    /// The bytes the batch takes in its log: its frame's header and payload.
    pub fn size_bytes(&self) -> usize {
        FRAME_HEADER_LEN + self.payload.len()
    }

    /// Whether compaction removed records from this batch (its offsets have gaps).
    pub fn is_compacted(&self) -> bool {
        self.compacted
    }

    /// When the batch was appended, in milliseconds since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// The idempotent producer that wrote this batch and the sequence number of its first
    /// record, if it was written by one.
    pub fn producer(&self) -> Option<(u64, u32)> {
        (self.producer_id != 0).then_some((self.producer_id, self.base_sequence))
    }

    /// The epoch of the producer that wrote this batch (0 without one). A producer moves to a
    /// later epoch when it gives up on a batch, and the partition then refuses its earlier
    /// epochs.
    pub fn producer_epoch(&self) -> u16 {
        self.producer_epoch
    }

    /// The records with their offsets. No record bytes are copied, except from a batch a
    /// Kafka producer compressed, whose records are decompressed here.
    pub fn records(&self) -> RecordIter {
        let count = if self.kind == EntryKind::Data {
            self.record_count
        } else {
            0
        };
        let kafka = self.kind == EntryKind::Data && self.format == PayloadFormat::Kafka;
        // A Kafka batch's records have their producer's times unless it says LogAppendTime;
        // replog's own have their batch's append time.
        let producer_times = kafka
            && super::kafka::header_of(&self.payload, self.compacted)
                .is_ok_and(|h| !h.log_append_time);
        let decoded = kafka.then(|| {
            if self.payload.is_empty() {
                // A compacted frame that kept no record.
                return Vec::new().into_iter();
            }
            // Checked whole when it was accepted, and its header and the frame's CRC on
            // every read since, so this does not fail
            // short of a replog bug; if it did, the iteration ends rather than panics.
            match super::kafka::decode_timed_records_of(
                &self.payload,
                self.compacted,
                &Limits::ON_DISK,
            ) {
                Ok(records) => records.into_iter(),
                Err(e) => {
                    tracing::warn!(log_index = %self.log_index, error = %e,
                            "a stored kafka batch does not decode");
                    Vec::new().into_iter()
                }
            }
        });
        RecordIter {
            payload: self.payload.clone(),
            pos: 0,
            remaining: count,
            base: self.base_offset,
            next_delta: 0,
            compacted: self.compacted,
            decoded,
            batch_time: self.timestamp_ms,
            time: self.timestamp_ms,
            timestamp_type: if producer_times {
                TimestampType::CreateTime
            } else {
                TimestampType::LogAppendTime
            },
        }
    }

    /// The payload's encoding.
    pub(crate) fn format(&self) -> PayloadFormat {
        self.format
    }

    /// The records of a batch of replog's own format, read in place, in order (none for a
    /// Kafka producer's batch or a control entry). Every payload handed out was validated, so
    /// every record reads; if one did not (a replog bug), the iteration ends there.
    /// Each comes with its offset delta: 0, 1, 2, … in a batch compaction did not touch, the
    /// delta stored before it in one it did (FORMAT.md §4.3).
    pub(crate) fn record_refs(&self) -> impl Iterator<Item = (u32, RecordRef<'_>)> {
        let count = if self.kind == EntryKind::Data && self.format == PayloadFormat::Replog {
            self.record_count
        } else {
            0
        };
        let mut pos = 0usize;
        let compacted = self.compacted;
        (0..count).map_while(move |i| {
            if pos >= self.payload.len() {
                return None;
            }
            let delta = if compacted {
                let delta = get_u32(&self.payload, pos)?;
                pos += OFFSET_DELTA_LEN;
                delta
            } else {
                i
            };
            Some((delta, RecordRef::read(&self.payload, &mut pos)?))
        })
    }
}

/// Iterator over the records of a [`Batch`], yielding each with its offset.
#[derive(Debug)]
pub struct RecordIter {
    payload: Bytes,
    pos: usize,
    /// Offsets of the batch not yet passed (records left, at most).
    remaining: u32,
    base: Offset,
    /// The offset delta of the next record of an uncompacted batch.
    next_delta: u32,
    /// Each record carries its offset delta (FORMAT.md §4.3).
    compacted: bool,
    /// A Kafka batch's records, decoded, with their offset deltas and timestamps.
    decoded: Option<std::vec::IntoIter<(u32, i64, Record)>>,
    /// The batch's append time: the time of replog's own records.
    batch_time: u64,
    /// The timestamp of the record last returned.
    time: u64,
    /// Whose time the batch's records have.
    timestamp_type: TimestampType,
}

/// Whose clock a record's timestamp is (Kafka's timestamp types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampType {
    /// Its producer's (a Kafka producer's, or a [`Client`](crate::Client)'s when it made the
    /// batch).
    CreateTime,
    /// The partition leader's when it appended the batch: records appended in process, and
    /// every record of a `message.timestamp.type=LogAppendTime` topic.
    LogAppendTime,
}

impl RecordIter {
    /// The timestamp of the record [`next`](Iterator::next) returned last, in milliseconds
    /// since the Unix epoch: in a Kafka batch (what producers send), the time its producer gave
    /// it (CreateTime), or the batch's where it says LogAppendTime; in a batch of replog's own
    /// records, its append time ([`Batch::timestamp_ms`]), as also for a Kafka record without
    /// a time (a negative one). Before the first record, the batch's append time.
    pub fn timestamp_ms(&self) -> u64 {
        self.time
    }

    /// Whose clock [`timestamp_ms`](Self::timestamp_ms) is: the same for every record of a
    /// batch.
    pub fn timestamp_type(&self) -> TimestampType {
        self.timestamp_type
    }
}

impl Iterator for RecordIter {
    type Item = (Offset, Record);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let (delta, record) = if let Some(decoded) = &mut self.decoded {
            let (delta, time, record) = decoded.next()?;
            self.time = u64::try_from(time).unwrap_or(self.batch_time);
            (delta, record)
        } else {
            // The payload was checked by `validate_payload` before this batch was handed out,
            // so every length below is in bounds; a failure here would be a replog bug, and
            // ends the iteration rather than panicking.
            let delta = if self.compacted {
                let delta = get_u32(&self.payload, self.pos)?;
                self.pos += OFFSET_DELTA_LEN;
                delta
            } else {
                self.next_delta
            };
            let record = decode_record(&self.payload, &mut self.pos);
            debug_assert!(record.is_some(), "validated payload failed to decode");
            (delta, record?)
        };
        // Deltas strictly increase within the batch's span (checked): past it, the iteration
        // ends.
        let passed = delta.checked_add(1)?.checked_sub(self.next_delta)?;
        self.remaining = self.remaining.checked_sub(passed)?;
        self.next_delta = delta + 1;
        Some((Offset(self.base.0 + u64::from(delta)), record))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        let exact = !self.compacted;
        (if exact { n } else { 0 }, Some(n))
    }
}

/// Decodes one record at `*pos`, advancing `*pos`. The returned fields share `payload`.
fn decode_record(payload: &Bytes, pos: &mut usize) -> Option<Record> {
    let r = RecordRef::read(payload, pos)?;
    Some(Record {
        key: r.key.map(|k| payload.slice_ref(k)),
        value: payload.slice_ref(r.value),
        headers: r
            .headers()
            .map(|(name, value)| Header {
                name: payload.slice_ref(name),
                value: payload.slice_ref(value),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests;
