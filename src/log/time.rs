//! Finding records by time: Kafka's ListOffsets by timestamp over the log, on record
//! timestamps (a Kafka producer's CreateTime, or the append time of replog's own batches).

use super::PartitionLog;
use crate::error::Result;
use crate::types::Offset;

impl PartitionLog {
    /// The offset of the first record whose timestamp is `timestamp_ms` or later (Kafka's
    /// ListOffsets by timestamp), or `None` if every record is older. A record's timestamp is
    /// its producer's (CreateTime) in a batch a Kafka producer sent, and its batch's append time
    /// in a batch of replog's records. Timestamps may decrease along the log (producers set
    /// them); the answer is still the first record in offset order that is late enough.
    ///
    /// Never scans the log: the segment comes from the largest record timestamp each segment
    /// keeps in memory, the place in it from its index (each entry keeps the largest timestamp
    /// before it), then at most one index interval of frames is read, each by its header
    /// (and a Kafka batch's max timestamp), and only the batch that holds the record is
    /// decoded.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`](crate::Error::Corrupt) if a frame on the way fails validation.
    pub fn offset_for_timestamp(&self, timestamp_ms: u64) -> Result<Option<Offset>> {
        Ok(self
            .record_for_timestamp(timestamp_ms)?
            .map(|(offset, _)| offset))
    }

    /// [`offset_for_timestamp`](Self::offset_for_timestamp), with the record's timestamp.
    pub(crate) fn record_for_timestamp(&self, timestamp_ms: u64) -> Result<Option<(Offset, u64)>> {
        let time = i64::try_from(timestamp_ms).unwrap_or(i64::MAX);
        let seg = {
            let segs = self.segments.read();
            segs.iter()
                .find(|s| s.extent().max_record_time >= time)
                .cloned()
        };
        let Some(seg) = seg else {
            return Ok(None);
        };
        let mut found = None;
        // Later segments are walked too: a segment's maximum can be above what it still holds
        // (it is not lowered when a truncation cuts it).
        self.walk(
            Some(seg),
            |s| s.seek_time(time),
            |_| false,
            |s, pos, h| {
                if let Some((offset, t)) = s.first_record_at(pos, h, time)? {
                    found = Some((Offset(offset), u64::try_from(t).unwrap_or(0)));
                    return Ok(false);
                }
                Ok(true)
            },
        )?;
        Ok(found)
    }

    /// The largest record timestamp in the log (see
    /// [`offset_for_timestamp`](Self::offset_for_timestamp)), if it holds a record with a
    /// timestamp not below 0.
    pub(crate) fn max_record_timestamp(&self) -> Option<u64> {
        let segs = self.segments.read();
        let max = segs.iter().map(|s| s.extent().max_record_time).max()?;
        u64::try_from(max).ok()
    }
}

#[cfg(test)]
mod tests;
