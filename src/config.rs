//! [`LogConfig`]: a partition log's limits, each with its default and its check. (A broker's
//! are [`NodeConfig`](crate::NodeConfig)'s, whose `validate` checks them and this one together.)

use crate::error::{Error, Result};
use crate::segment::Preallocate;
use crate::segment::format::{
    FRAME_HEADER_LEN, RECORD_FIXED_LEN, SEGMENT_BYTES_LIMIT, SEGMENT_HEADER_LEN,
};

/// Configuration of a [`PartitionLog`](crate::PartitionLog).
///
/// Build it from [`LogConfig::default`] and set the fields you need; [`LogConfig::validate`]
/// runs on open.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogConfig {
    /// Capacity of one segment file, header included. A segment rolls when the next batch does
    /// not fit. Default 64 MiB; at most 4 GiB − 1 (index positions are `u32`); at least a
    /// header plus one frame of `batch_bytes_max`.
    pub segment_bytes: u64,
    /// Bytes of frames between two sparse index entries. Default 4 KiB. Smaller makes lookups
    /// scan less and the index larger.
    pub index_interval_bytes: u32,
    /// Largest encoded record (key, value, headers and 10 bytes of lengths). Default 1 MiB.
    pub record_bytes_max: u32,
    /// Largest encoded batch payload (all of its records). Default 4 MiB; at least
    /// `record_bytes_max`.
    pub batch_bytes_max: u32,
    /// Delete the oldest segments as long as the rest still hold at least this many bytes (as
    /// Kafka does). The active segment is never deleted. Default: no limit.
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest batch is older than this. Default: no limit.
    pub retention_time: Option<std::time::Duration>,
    /// How segment files are preallocated. Default [`Preallocate::Auto`].
    pub preallocate: Preallocate,
    /// Bytes of disk blocks given to the active segment file at a time, ahead of the writer.
    /// Default 1 MiB; at least 4 KiB; a value of `segment_bytes` or more gives a segment all
    /// of its blocks when it is created.
    ///
    /// A segment file is `segment_bytes` long from the start, but only its written part and
    /// at most two steps past it have blocks, so a broker with thousands of quiet partitions
    /// does not hold `segment_bytes` of disk for each. A new segment's steps start at 32 KiB
    /// and double as it fills, up to this one, so a segment that holds nothing has 32 KiB. A larger step means fewer
    /// preallocations (one `fallocate(2)`, or one write of zeros, per step) and fewer, larger
    /// extents.
    pub preallocate_step_bytes: u64,
    /// How many segment files that retention or [`purge_to`](crate::PartitionLog::purge_to)
    /// deleted are kept to become later segments, instead of being unlinked. Default 2; 0
    /// turns recycling off.
    ///
    /// A recycled file's blocks are already allocated and written, and its pages are usually
    /// still in the page cache, so a log under retention writes into warm pages instead of
    /// allocating new ones, and preallocates nothing (the same effect as
    /// [`Preallocate::Zeros`] without writing the zeros). Recycling costs disk space
    /// (`recycle_segments × segment_bytes` beyond the log), and old record bytes stay in the
    /// file until they are overwritten: they are never readable through the log (the format
    /// tells them apart, see [`format`](mod@crate::format) §7), but they are on disk, as the
    /// blocks of an unlinked file are. A file is recycled only when no reader still holds a
    /// view of it.
    pub recycle_segments: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 64 << 20,
            index_interval_bytes: 4096,
            record_bytes_max: 1 << 20,
            batch_bytes_max: 4 << 20,
            retention_bytes: None,
            retention_time: None,
            preallocate: Preallocate::default(),
            preallocate_step_bytes: 1 << 20,
            recycle_segments: 2,
        }
    }
}

impl LogConfig {
    /// Checks every field and their combinations.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first field that is out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason: String| Err(Error::InvalidConfig { field, reason });
        let min_record = RECORD_FIXED_LEN as u32;
        if self.record_bytes_max < min_record {
            return bad("record_bytes_max", format!("must be at least {min_record}"));
        }
        if self.batch_bytes_max < self.record_bytes_max {
            return bad(
                "batch_bytes_max",
                "must be at least record_bytes_max".into(),
            );
        }
        let min_segment =
            (SEGMENT_HEADER_LEN + FRAME_HEADER_LEN) as u64 + u64::from(self.batch_bytes_max);
        if self.segment_bytes < min_segment {
            return bad(
                "segment_bytes",
                format!(
                    "must hold a header and one batch of batch_bytes_max: at least {min_segment}"
                ),
            );
        }
        if self.segment_bytes > SEGMENT_BYTES_LIMIT {
            return bad(
                "segment_bytes",
                format!("must be at most {SEGMENT_BYTES_LIMIT}"),
            );
        }
        if self.preallocate_step_bytes < 4096 {
            return bad("preallocate_step_bytes", "must be at least 4096".into());
        }
        if self.retention_bytes == Some(0) {
            return bad(
                "retention_bytes",
                "must be positive (None means no limit)".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        LogConfig::default().validate().unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        let field = |c: LogConfig| match c.validate() {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        let d = LogConfig::default;
        assert_eq!(
            field(LogConfig {
                record_bytes_max: 3,
                ..d()
            }),
            "record_bytes_max"
        );
        assert_eq!(
            field(LogConfig {
                batch_bytes_max: 1000,
                ..d()
            }),
            "batch_bytes_max"
        );
        assert_eq!(
            field(LogConfig {
                segment_bytes: 1000,
                ..d()
            }),
            "segment_bytes"
        );
        assert_eq!(
            field(LogConfig {
                segment_bytes: 1 << 32,
                ..d()
            }),
            "segment_bytes"
        );
        assert_eq!(
            field(LogConfig {
                preallocate_step_bytes: 4095,
                ..d()
            }),
            "preallocate_step_bytes"
        );
        assert_eq!(
            field(LogConfig {
                retention_bytes: Some(0),
                ..d()
            }),
            "retention_bytes"
        );
    }
}
