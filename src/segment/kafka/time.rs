//! Record timestamps of a stored Kafka batch, for ListOffsets by time: the largest, from the
//! header alone, and the first record at or after a time, found by decoding the records.

use bytes::Bytes;

use super::inflate::records_bytes;
use super::records::{RecordView, walk_records};
use super::{KafkaBatchInfo, MAX_TIMESTAMP_POS, be_i64, header_of};
use crate::error::CorruptKind;
use crate::segment::frame::Limits;

/// A record's timestamp: the batch's max timestamp under LogAppendTime, else the base
/// timestamp plus the record's delta (Kafka's `DefaultRecord.timestamp`; saturating, where
/// Java would wrap).
pub(super) fn record_time(info: &KafkaBatchInfo, r: &RecordView<'_>) -> i64 {
    if info.log_append_time {
        info.max_timestamp
    } else {
        info.base_timestamp.saturating_add(r.timestamp_delta)
    }
}

/// The largest record timestamp a stored batch's header states (no record is read): the
/// leader checked it against every record when it accepted the batch. `None` if `b` is too
/// short to hold it.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn max_timestamp(b: &[u8]) -> Option<i64> {
    be_i64(b, MAX_TIMESTAMP_POS)
}

/// The first record of a stored batch whose timestamp is `at_least` or later, as its offset
/// delta and timestamp; `None` if every record is earlier. Decompresses the records unless the
/// batch's header already tells (its max timestamp is earlier, or LogAppendTime gives every
/// record that time).
///
/// # Errors
///
/// The [`CorruptKind`] of a batch whose header or records do not decode.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn first_record_at(
    b: &Bytes,
    compacted: bool,
    at_least: i64,
    limits: &Limits,
) -> Result<Option<(u32, i64)>, CorruptKind> {
    if compacted && b.is_empty() {
        return Ok(None);
    }
    let info = header_of(b, compacted)?;
    if info.max_timestamp < at_least {
        return Ok(None);
    }
    if info.log_append_time && !compacted {
        return Ok(Some((0, info.max_timestamp)));
    }
    let records = records_bytes(b, &info, limits)?;
    let mut found = None;
    walk_records(&records, &info, compacted, limits, |r| {
        let time = record_time(&info, &r);
        if found.is_none() && time >= at_least {
            found = Some((r.offset_delta, time));
        }
    })?;
    Ok(found)
}
