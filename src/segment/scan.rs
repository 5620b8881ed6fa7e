//! Frame scanning: the [`Cursor`] that checks each frame continues the one before it
//! (the continuity rules of FORMAT.md §6, step 6), the bounded scan over a segment's bytes that recovery, index
//! checks and `replog check` share, and the fuzz entry point that drives it.

use super::format::{
    EntryKind, FRAME_HEADER_LEN, PayloadFormat, SEGMENT_HEADER_LEN, SegmentHeader,
};
use super::frame::{FrameHeader, Limits, decode_frame};
use super::index::{IndexFile, NO_TIME};
use super::kafka;
use super::{SegmentOptions, SegmentState, add_index_entry};
use crate::error::{CorruptKind, Result};

/// Where the next frame goes: the log index, offset and minimum term it must have.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) next_log_index: u64,
    pub(crate) next_offset: u64,
    pub(crate) last_term: u64,
}

impl Cursor {
    /// Checks the continuity rules of FORMAT.md §6 step 6 (log index, term, offset) for a frame
    /// that should come next; `decode_frame` checks the step's overflow rule.
    pub(crate) fn check(&self, h: &FrameHeader) -> Result<(), CorruptKind> {
        if h.log_index != self.next_log_index {
            return Err(CorruptKind::LogIndexGap {
                expected: self.next_log_index,
                found: h.log_index,
            });
        }
        if h.term < self.last_term {
            return Err(CorruptKind::TermRegression {
                previous: self.last_term,
                found: h.term,
            });
        }
        if h.base_offset != self.next_offset {
            return Err(CorruptKind::OffsetGap {
                expected: self.next_offset,
                found: h.base_offset,
            });
        }
        Ok(())
    }

    /// The cursor after `h`.
    pub(crate) fn after(h: &FrameHeader) -> Cursor {
        Cursor {
            next_log_index: h.log_index + h.entries,
            next_offset: h.next_offset(),
            last_term: h.term,
        }
    }
}

/// Why a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ScanStop {
    /// A zero `body_len`: the end of written data.
    Zero,
    /// Reached the log index it was told to stop at.
    Limit,
    /// Not enough bytes left for a frame.
    EndOfData,
    /// A frame failed validation.
    Invalid(CorruptKind),
}

/// The result of scanning frames.
#[derive(Clone, Debug)]
pub(crate) struct Scan {
    /// Position after the last valid frame.
    pub(crate) end: usize,
    pub(crate) cursor: Cursor,
    pub(crate) max_timestamp_ms: u64,
    pub(crate) stop: ScanStop,
}

/// Scans valid frames in `data` from `start`, checking continuity from `cursor`, until the end
/// of data, an invalid frame, or the frame with log index `stop_at`. `on_frame` sees each valid
/// frame's position and header. The work is bounded by `data.len()`.
pub(crate) fn scan(
    data: &[u8],
    start: usize,
    mut cursor: Cursor,
    limits: &Limits,
    stop_at: Option<u64>,
    mut on_frame: impl FnMut(usize, &FrameHeader),
) -> Scan {
    let mut pos = start;
    let mut max_timestamp_ms = 0;
    let stop = loop {
        if stop_at == Some(cursor.next_log_index) {
            break ScanStop::Limit;
        }
        if data.len().saturating_sub(pos) < FRAME_HEADER_LEN {
            break ScanStop::EndOfData;
        }
        match decode_frame(data, pos, limits) {
            Ok(None) => break ScanStop::Zero,
            Err(kind) => break ScanStop::Invalid(kind),
            Ok(Some(h)) => {
                if let Err(kind) = cursor.check(&h) {
                    break ScanStop::Invalid(kind);
                }
                on_frame(pos, &h);
                max_timestamp_ms = max_timestamp_ms.max(h.timestamp_ms);
                cursor = Cursor::after(&h);
                pos += h.frame_len();
            }
        }
    };
    Scan {
        end: pos,
        cursor,
        max_timestamp_ms,
        stop,
    }
}

/// The largest record timestamp of the frame at `pos` in `data`, whose header `h` is: a
/// Kafka batch's max timestamp (its producer's CreateTime, checked against its records when
/// it was accepted), or the append time of a batch of replog's records, which have no time of
/// their own; `None` for a control frame, which holds no records.
pub(crate) fn frame_time(data: &[u8], pos: usize, h: &FrameHeader) -> Option<i64> {
    if h.kind != EntryKind::Data || h.record_count == 0 {
        return None;
    }
    match h.format {
        PayloadFormat::Replog => Some(i64::try_from(h.timestamp_ms).unwrap_or(i64::MAX)),
        PayloadFormat::Kafka => {
            let start = pos.checked_add(FRAME_HEADER_LEN)?;
            kafka::max_timestamp(data.get(start..pos.checked_add(h.frame_len())?)?)
        }
    }
}

/// Scans the valid frames of `data` (a segment's, up to where it ends) from an index entry:
/// its frame at `position`, which `start` continues from, and `time_before` the largest record
/// timestamp before it. Returns the scan and the largest record timestamp up to where it
/// stopped.
pub(crate) fn scan_from_entry(
    data: &[u8],
    position: usize,
    start: Cursor,
    time_before: i64,
) -> (Scan, i64) {
    let mut time = time_before;
    let s = scan(data, position, start, &Limits::ON_DISK, None, |pos, h| {
        if let Some(t) = frame_time(data, pos, h) {
            time = time.max(t);
        }
    });
    (s, time)
}

/// Scans a whole segment's frames, building its index as it goes.
pub(super) fn scan_segment(
    data: &[u8],
    base: Cursor,
    opts: &SegmentOptions,
    stop_at: Option<u64>,
) -> (SegmentState, Scan) {
    let mut state = SegmentState {
        data_len: SEGMENT_HEADER_LEN,
        cursor: base,
        max_timestamp_ms: 0,
        max_record_time: NO_TIME,
        entries: Vec::new(),
        last_indexed: 0,
    };
    let interval = usize::try_from(opts.index_interval_bytes).unwrap_or(usize::MAX);
    let s = scan(
        data,
        SEGMENT_HEADER_LEN,
        base,
        &Limits::ON_DISK,
        stop_at,
        |pos, h| {
            add_index_entry(
                &mut state,
                base.next_log_index,
                base.next_offset,
                interval,
                pos,
                h,
            );
            if let Some(time) = frame_time(data, pos, h) {
                state.max_record_time = state.max_record_time.max(time);
            }
        },
    );
    state.data_len = s.end;
    state.cursor = s.cursor;
    state.max_timestamp_ms = s.max_timestamp_ms;
    (state, s)
}

/// Decodes a segment file from arbitrary bytes the way recovery does, without touching disk:
/// the entry point of the `segment_open` fuzz target. Returns the number of valid frames.
///
/// # Panics
///
/// Never, for any input.
#[doc(hidden)]
pub fn fuzz_scan_segment(data: &[u8]) -> std::result::Result<u64, CorruptKind> {
    let header = SegmentHeader::decode(data)?;
    let limits = Limits {
        record_bytes_max: 1 << 20,
        batch_bytes_max: 1 << 22,
    };
    let base = Cursor {
        next_log_index: header.base_log_index,
        next_offset: header.base_offset,
        last_term: 0,
    };
    let s = scan(data, SEGMENT_HEADER_LEN, base, &limits, None, |_, _| {});
    let _ = IndexFile::decode(data, header.base_log_index, data.len() as u64);
    Ok(s.cursor
        .next_log_index
        .saturating_sub(header.base_log_index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_stops_at_each_kind_of_end() {
        let limits = Limits {
            record_bytes_max: 100,
            batch_bytes_max: 1000,
        };
        let zeros = [0u8; 100];
        let s = scan(&zeros, 0, Cursor::default(), &limits, None, |_, _| {});
        assert_eq!(s.stop, ScanStop::Zero);
        assert_eq!(s.end, 0);
        let s = scan(&zeros[..10], 0, Cursor::default(), &limits, None, |_, _| {});
        assert_eq!(s.stop, ScanStop::EndOfData);
        let s = scan(&zeros, 0, Cursor::default(), &limits, Some(0), |_, _| {});
        assert_eq!(s.stop, ScanStop::Limit);
        let garbage = [0xAB; 100];
        let s = scan(&garbage, 0, Cursor::default(), &limits, None, |_, _| {});
        assert!(matches!(
            s.stop,
            ScanStop::Invalid(CorruptKind::LengthOutOfRange { .. })
        ));
    }

    #[test]
    fn fuzz_scan_rejects_garbage_and_accepts_header_only() {
        assert!(fuzz_scan_segment(&[1, 2, 3]).is_err());
        let mut data = SegmentHeader {
            version: crate::segment::format::FORMAT_VERSION,
            base_log_index: 5,
            base_offset: 9,
            restart: false,
            compacted: false,
        }
        .encode()
        .to_vec();
        data.extend_from_slice(&[0u8; 64]);
        assert_eq!(fuzz_scan_segment(&data), Ok(0));
    }
}
