//! What a log's topic may change while it is open: the capacity of the segments it creates
//! from now on (`segment.bytes`), and a roll by age (`segment.ms`).

use std::sync::atomic::Ordering;

use super::PartitionLog;
use crate::error::Result;
use crate::segment::SegmentOptions;
use crate::segment::format::{FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};

impl PartitionLog {
    /// The capacity of segments created from now on.
    pub(crate) fn segment_bytes(&self) -> u64 {
        self.segment_bytes.load(Ordering::Relaxed)
    }

    /// The options new segments are created with: the log's, at the current capacity.
    pub(super) fn segment_opts(&self) -> SegmentOptions {
        SegmentOptions {
            capacity: self.segment_bytes(),
            ..self.opts.clone()
        }
    }

    /// Creates segments of `bytes` from the next roll on, raised to what a header and one
    /// batch of the log's largest size need and lowered to the format's limit (a segment
    /// must hold any batch the log takes). Returns the capacity taken.
    pub(crate) fn set_segment_bytes(&self, bytes: u64) -> u64 {
        let least = (SEGMENT_HEADER_LEN + FRAME_HEADER_LEN) as u64
            + u64::from(self.limits().batch_bytes_max);
        let bytes = bytes.clamp(least, crate::segment::format::SEGMENT_BYTES_LIMIT);
        self.segment_bytes.store(bytes, Ordering::Relaxed);
        bytes
    }

    /// Rolls the active segment if its first entry was stamped more than `age_ms` before
    /// `now_ms` (Kafka's `segment.ms`, which lets retention and compaction reach records of a
    /// partition written slowly). Returns whether it rolled.
    ///
    /// # Errors
    ///
    /// As [`roll`](Self::roll).
    pub(crate) fn roll_if_older(&self, age_ms: u64, now_ms: u64) -> Result<bool> {
        let active = {
            let segs = self.segments.read();
            let Some(active) = segs.last() else {
                return Ok(false);
            };
            std::sync::Arc::clone(active)
        };
        let Some(first) = active.first_timestamp_ms() else {
            return Ok(false);
        };
        if first.saturating_add(age_ms) >= now_ms {
            return Ok(false);
        }
        self.roll()?;
        // No write may follow for a long while (a quiet partition): the segment rolled is
        // sealed now, not at the next write's flush, so that it holds no descriptor meanwhile.
        self.flush()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::LogConfig;
    use crate::log::PartitionLog;
    use crate::segment::record::Record;

    #[test]
    fn new_segments_take_the_capacity_set_and_an_old_active_segment_rolls() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            record_bytes_max: 1024,
            batch_bytes_max: 4096,
            segment_bytes: 64 << 10,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(dir.path(), config).unwrap();
        // Below a batch's need, raised to it.
        let least = 4096
            + (crate::segment::format::SEGMENT_HEADER_LEN
                + crate::segment::format::FRAME_HEADER_LEN) as u64;
        assert_eq!(log.set_segment_bytes(10), least);
        let taken = log.set_segment_bytes(16 << 10);
        assert_eq!(taken, 16 << 10);
        log.append(&[Record::new(vec![0u8; 900])]).unwrap();
        assert!(!log.roll_if_older(60_000, crate::env::now_ms()).unwrap());
        assert!(log.roll_if_older(0, crate::env::now_ms() + 10).unwrap());
        assert_eq!(log.segment_count(), 2);
        // The new active segment is empty: nothing to roll.
        assert!(!log.roll_if_older(0, u64::MAX).unwrap());
        for _ in 0..40 {
            log.append(&[Record::new(vec![1u8; 900])]).unwrap();
        }
        // 40 records of ~930 bytes in segments of 16 KiB: at least three segments more.
        assert!(log.segment_count() >= 4, "{}", log.segment_count());
        let len = std::fs::metadata(
            dir.path()
                .join(crate::segment::format::segment_file_name(1)),
        )
        .unwrap()
        .len();
        assert_eq!(len, 16 << 10);
    }

    /// A segment that starts with control frames (a new leader's blank entry, stamped 0) is
    /// as old as its first write, not as old as 1970: `segment.ms` does not roll it while it
    /// holds no stamped frame, nor while that frame is younger than the age, and rolls it
    /// after. (Every founding replica's segments start with such frames; each rolled at the
    /// first retention pass, and the sealed segment it left kept a descriptor open.)
    #[test]
    fn an_age_counts_from_the_first_stamped_frame_not_from_a_control_frame() {
        use crate::log::append::EntrySpec;
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        let control = |index| EntrySpec {
            log_index: Some(index),
            term: Some(1),
            timestamp_ms: Some(0),
            ..EntrySpec::default()
        };
        log.append_entry(control(0), 0, b"membership").unwrap();
        log.append_entry(control(1), 0, &[0]).unwrap();
        let now = crate::env::now_ms();
        assert!(
            !log.roll_if_older(60_000, now).unwrap(),
            "control frames only"
        );
        let (payload, count) =
            crate::segment::record::encode_records(&[Record::new("v")], 1024).unwrap();
        let stamped = EntrySpec {
            log_index: Some(2),
            term: Some(1),
            timestamp_ms: Some(now),
            ..EntrySpec::default()
        };
        log.append_entry(stamped, count, &payload).unwrap();
        assert!(
            !log.roll_if_older(60_000, now + 1_000).unwrap(),
            "younger than the age"
        );
        assert_eq!(log.segment_count(), 1);
        log.flush().unwrap();
        assert!(log.roll_if_older(60_000, now + 61_000).unwrap());
        assert_eq!(log.segment_count(), 2);
        // Its entries were durable before the roll: the segment rolled is sealed all the same
        // (indexed, its descriptor closed), with no write after it.
        let sealed = std::sync::Arc::clone(&log.segments.read()[0]);
        assert!(
            !sealed.holds_file(),
            "a segment rolled by age keeps its descriptor"
        );
        assert!(sealed.path.with_extension("index").exists());
        // Reopened, the sealed segment finds its first stamp by reading its frames.
        drop(log);
        let log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        let first = log
            .segments
            .read()
            .first()
            .and_then(|s| s.first_timestamp_ms());
        assert_eq!(first, Some(now));
    }
}
