//! [`inspect_segment`]: a read-only scan of a segment file's bytes for the `replog check` tool.

use super::format::{SEGMENT_HEADER_LEN, SegmentHeader};
use super::frame::Limits;
use super::{Cursor, ScanStop, scan};
use crate::error::CorruptKind;

/// What [`inspect_segment`] found in a segment file.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct SegmentReport {
    /// Base log index and base offset from the header, or why the header is invalid.
    pub header: std::result::Result<(u64, u64), CorruptKind>,
    /// Valid frames from the start of the file.
    pub frames: u64,
    /// Records in those frames.
    pub records: u64,
    /// Position after the last valid frame.
    pub end: u64,
    /// Why the scan stopped there: `None` at a clean end of data.
    pub stop: Option<CorruptKind>,
    /// Cursor after the last valid frame: next log index, next offset, last term.
    pub next: (u64, u64, u64),
}

/// Scans a segment file's bytes without changing anything, for the `replog check` tool: with
/// the format's limits, as recovery does (FORMAT.md §4), not the configured ones.
#[doc(hidden)]
pub fn inspect_segment(data: &[u8]) -> SegmentReport {
    let limits = Limits::ON_DISK;
    let header = SegmentHeader::decode(data);
    let (base, header) = match header {
        Ok(h) => (h, Ok((h.base_log_index, h.base_offset))),
        Err(kind) => {
            return SegmentReport {
                header: Err(kind),
                frames: 0,
                records: 0,
                end: 0,
                stop: None,
                next: (0, 0, 0),
            };
        }
    };
    let cursor = Cursor {
        next_log_index: base.base_log_index,
        next_offset: base.base_offset,
        last_term: 0,
    };
    let mut records = 0u64;
    let s = scan(data, SEGMENT_HEADER_LEN, cursor, &limits, None, |_, h| {
        records += u64::from(h.record_count);
    });
    SegmentReport {
        header,
        frames: s.cursor.next_log_index - base.base_log_index,
        records,
        end: s.end as u64,
        stop: match s.stop {
            ScanStop::Invalid(kind) => Some(kind),
            _ => None,
        },
        next: (
            s.cursor.next_log_index,
            s.cursor.next_offset,
            s.cursor.last_term,
        ),
    }
}
