//! Gap frames (FORMAT.md §4.3): a run of data entries of one term that compaction emptied,
//! stored as one frame that stands for all of them.
//!
//! A log of small batches whose keys are rewritten often (a group's committed offsets, a
//! changelog) compacts to mostly empty frames, each still 64 bytes of header because Raft
//! needs every entry's log id. A gap frame keeps what Raft and the offsets need of all of
//! them in a few bytes: the frame header carries the first entry's log index and base offset,
//! the term they share and the last one's time; the payload says how many entries there were
//! and how many offsets each spanned, run-length encoded (batches of one size repeat), so
//! that the entries can be handed out again one by one, each as it was (empty), and every
//! replica appends them at the same offsets.
//!
//! Payload, little-endian:
//!
//! ```text
//! offset  size  field
//! 0       8     entries: u64   the log entries the frame stands for, >= 1
//! 8       ..    runs           pairs of unsigned LEB128 varints, at least one pair:
//!                                count (<= 10 bytes, >= 1): consecutive entries that
//!                                  spanned the same number of offsets
//!                                span (<= 5 bytes, >= 1, <= u32::MAX): that number
//!                              the counts add up to `entries`, count × span to the frame's
//!                              record_count; nothing after the last pair
//! ```
//!
//! The frame's `kind` is 3, its flags 0 (a gap frame is always in replog's format, and
//! compacted by definition), its producer fields 0: an idempotent producer's last batch in a
//! compacted range never joins a gap, since a replica learns the producer's last sequence
//! from it.

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::Batch;
use crate::error::CorruptKind;
use crate::types::{LogIndex, Offset};

/// Length of a gap payload's entry count.
const COUNT_LEN: usize = size_of::<u64>();

/// The most runs compaction puts in one gap frame, which bounds its payload (at most
/// 8 + 15 × 65,536 bytes, under 1 MiB; a few bytes when its batches were of one size).
pub(crate) const GAP_RUNS_MAX: usize = 1 << 16;

/// Consecutive entries that each spanned `span` offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) count: u64,
    pub(crate) span: u32,
}

/// Appends `count` entries of `span` offsets each to `runs`, joining the last run if it is of
/// the same span.
pub(crate) fn push_run(runs: &mut Vec<Run>, count: u64, span: u32) {
    match runs.last_mut() {
        Some(last) if last.span == span => last.count += count,
        _ => runs.push(Run { count, span }),
    }
}

/// The payload of a gap frame of `runs`.
pub(crate) fn encode(runs: &[Run]) -> Bytes {
    let mut out = BytesMut::with_capacity(COUNT_LEN + runs.len() * 4);
    out.put_u64_le(runs.iter().fold(0u64, |n, r| n.saturating_add(r.count)));
    for r in runs {
        put_uvarint(&mut out, r.count);
        put_uvarint(&mut out, u64::from(r.span));
    }
    out.freeze()
}

/// The runs of a gap frame, from its payload, checked: at least one, each of one entry and
/// one offset at least, their entries adding up to the count, their offsets to
/// `record_count`, nothing after them.
pub(crate) fn runs(payload: &[u8], record_count: u32) -> Result<Vec<Run>, CorruptKind> {
    let bad = CorruptKind::BadRecord;
    let (entries, mut rest) = payload
        .split_first_chunk::<COUNT_LEN>()
        .ok_or(bad.clone())?;
    let entries = u64::from_le_bytes(*entries);
    let mut runs = Vec::new();
    let (mut counted, mut spanned) = (0u64, 0u64);
    // Bounded: each turn takes two bytes of the payload at least.
    while !rest.is_empty() {
        let count = uvarint(&mut rest, 10).ok_or(bad.clone())?;
        let span = uvarint(&mut rest, 5)
            .and_then(|s| u32::try_from(s).ok())
            .ok_or(bad.clone())?;
        if count == 0 || span == 0 {
            return Err(bad);
        }
        counted = counted.checked_add(count).ok_or(bad.clone())?;
        spanned = count
            .checked_mul(u64::from(span))
            .and_then(|s| s.checked_add(spanned))
            .ok_or(bad.clone())?;
        runs.push(Run { count, span });
    }
    if runs.is_empty() || counted != entries || spanned != u64::from(record_count) {
        return Err(bad);
    }
    Ok(runs)
}

/// The entry count of a gap payload checked by [`runs`].
pub(crate) fn entries(payload: &[u8], record_count: u32) -> Result<u64, CorruptKind> {
    // The counts add up without overflow: `runs` checked it.
    runs(payload, record_count).map(|r| r.iter().map(|r| r.count).sum())
}

/// The entries a gap frame stands for, one by one, each as Raft sees it: an emptied data
/// entry of the gap's term and time, in replog's format, with the `COMPACTED` flag, spanning
/// its offsets, without a producer. Made as they are asked for: a gap of a million entries
/// costs what is read of it.
pub(crate) struct GapEntries {
    /// The gap frame as a batch: its term, time and first log index and offset.
    frame: Batch,
    runs: std::vec::IntoIter<Run>,
    /// The run being handed out and the entries of it left.
    run: Option<Run>,
    next_index: u64,
    next_offset: u64,
}

impl GapEntries {
    /// The entries of the gap frame `frame` of `runs`.
    pub(crate) fn new(frame: Batch, runs: Vec<Run>) -> GapEntries {
        let (next_index, next_offset) = (frame.log_index.get(), frame.base_offset.get());
        let mut runs = runs.into_iter();
        GapEntries {
            frame,
            run: runs.next(),
            runs,
            next_index,
            next_offset,
        }
    }

    /// Moves past the entries before `log_index`, a run at a time.
    pub(crate) fn skip_to(&mut self, log_index: u64) {
        // Bounded by the runs.
        while let Some(run) = &mut self.run {
            let behind = log_index.saturating_sub(self.next_index);
            if behind == 0 {
                return;
            }
            let skipped = behind.min(run.count);
            self.next_index += skipped;
            self.next_offset += skipped * u64::from(run.span);
            run.count -= skipped;
            if run.count == 0 {
                self.run = self.runs.next();
            }
        }
    }
}

impl Iterator for GapEntries {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        let run = self.run.as_mut()?;
        let entry = Batch {
            log_index: LogIndex(self.next_index),
            base_offset: Offset(self.next_offset),
            record_count: run.span,
            kind: super::format::EntryKind::Data,
            format: super::format::PayloadFormat::Replog,
            compacted: true,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
            payload: Bytes::new(),
            ..self.frame.clone()
        };
        self.next_index += 1;
        self.next_offset += u64::from(run.span);
        run.count -= 1;
        if run.count == 0 {
            self.run = self.runs.next();
        }
        Some(entry)
    }
}

fn put_uvarint(out: &mut BytesMut, mut v: u64) {
    // At most ten turns: seven bits each of a u64.
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// An unsigned LEB128 varint of at most `max_len` bytes that fits a `u64`; `buf` moves past it.
fn uvarint(buf: &mut &[u8], max_len: usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..max_len {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        let bits = u64::from(byte & 0x7f);
        // The tenth byte of a u64 holds its top bit only.
        if i == 9 && bits > 1 {
            return None;
        }
        v |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(count: u64, span: u32) -> Run {
        Run { count, span }
    }

    #[test]
    fn refuses_what_a_gap_payload_cannot_be() {
        let ok = encode(&[run(2, 1), run(1, 300)]);
        assert_eq!(runs(&ok, 302), Ok(vec![run(2, 1), run(1, 300)]));
        // The spans add up to something else.
        assert_eq!(runs(&ok, 303), Err(CorruptKind::BadRecord));
        // Bytes after the runs, a run cut off, no count, no run, a zero count or span.
        let mut longer = ok.to_vec();
        longer.push(1);
        assert_eq!(runs(&longer, 302), Err(CorruptKind::BadRecord));
        assert_eq!(runs(&ok[..ok.len() - 1], 302), Err(CorruptKind::BadRecord));
        assert_eq!(runs(&ok[..4], 302), Err(CorruptKind::BadRecord));
        assert_eq!(runs(&encode(&[]), 0), Err(CorruptKind::BadRecord));
        assert_eq!(runs(&encode(&[run(0, 1)]), 0), Err(CorruptKind::BadRecord));
        assert_eq!(runs(&encode(&[run(1, 0)]), 0), Err(CorruptKind::BadRecord));
        // A count the runs do not add up to.
        let mut wrong = ok.to_vec();
        wrong[0] = 4;
        assert_eq!(runs(&wrong, 302), Err(CorruptKind::BadRecord));
        // Counts and spans whose products or sums overflow.
        let huge = encode(&[run(u64::MAX, 2)]);
        assert_eq!(runs(&huge, 0), Err(CorruptKind::BadRecord));
        let mut both = encode(&[run(u64::MAX, 1), run(1, 1)]).to_vec();
        both[..8].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(runs(&both, 0), Err(CorruptKind::BadRecord));
        // A span past u32::MAX, an eleventh varint byte.
        let mut big = 1u64.to_le_bytes().to_vec();
        big.extend([0x01, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert_eq!(runs(&big, u32::MAX), Err(CorruptKind::BadRecord));
        let mut long = 1u64.to_le_bytes().to_vec();
        long.extend([
            0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00,
        ]);
        long.push(1);
        assert_eq!(runs(&long, 1), Err(CorruptKind::BadRecord));
    }

    #[test]
    fn entries_come_one_by_one_and_skip_a_run_at_a_time() {
        let frame = Batch {
            log_index: LogIndex(10),
            term: crate::types::Term(3),
            base_offset: Offset(100),
            record_count: 12,
            timestamp_ms: 7,
            kind: crate::segment::format::EntryKind::Gap,
            format: crate::segment::format::PayloadFormat::Replog,
            compacted: true,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
            payload: encode(&[run(3, 1), run(2, 5), run(1, 2)]),
        };
        let runs = vec![run(3, 1), run(2, 5), run(1, 2)];
        let all: Vec<(u64, u64, u32)> = GapEntries::new(frame.clone(), runs.clone())
            .map(|b| (b.log_index.get(), b.base_offset.get(), b.record_count))
            .collect();
        assert_eq!(
            all,
            vec![
                (10, 100, 1),
                (11, 101, 1),
                (12, 102, 1),
                (13, 103, 5),
                (14, 108, 5),
                (15, 113, 2)
            ]
        );
        for from in 10..=16 {
            let mut it = GapEntries::new(frame.clone(), runs.clone());
            it.skip_to(from);
            let rest: Vec<_> = it
                .map(|b| (b.log_index.get(), b.base_offset.get(), b.record_count))
                .collect();
            assert_eq!(rest, all[(from - 10) as usize..], "from {from}");
        }
    }

    proptest! {
        #[test]
        fn runs_read_back_as_written(
            r in proptest::collection::vec((1u64..100_000, prop_oneof![1u32..3, 1u32..=1000]), 1..64),
        ) {
            let mut want = Vec::new();
            for (count, span) in &r {
                push_run(&mut want, *count, *span);
            }
            let total: u64 = want.iter().map(|r| r.count * u64::from(r.span)).sum();
            prop_assume!(total <= u64::from(u32::MAX));
            prop_assert_eq!(runs(&encode(&want), total as u32), Ok(want));
        }

        #[test]
        fn any_bytes_are_runs_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                          count in any::<u32>()) {
            let _ = runs(&bytes, count);
        }
    }
}
