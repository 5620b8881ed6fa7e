//! Retention: each hosted partition's leader purges what its limits no longer keep.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::{CompactionPolicy, CompactionStats};

use super::write::read_committed;
use super::{Broker, HostedReplica};
use crate::group::records::GroupRecord;

impl Broker {
    /// Compacts every hosted replica of a compacted topic (`cleanup.policy` has `compact`),
    /// one at a time on a blocking thread, up to what each has applied (committed on every
    /// replica that acknowledged it): leaders and followers alike, each its own copy.
    pub(crate) async fn compact_topics(&self) -> Result<CompactionStats> {
        let now = crate::env::now_ms();
        let groups: Vec<Arc<HostedReplica>> = self
            .groups
            .read()
            .values()
            .filter(|g| g.id.topic != crate::group::OFFSETS_TOPIC && g.settings.read().compact)
            .cloned()
            .collect();
        let mut total = CompactionStats::default();
        for group in groups {
            let Some(applied) = group.sm.last_applied().map(|l| l.index) else {
                continue;
            };
            let s = *group.settings.read();
            let mut policy = CompactionPolicy::new(crate::types::LogIndex(applied));
            policy.now_ms = now;
            policy.min_lag_ms = s.min_compaction_lag_ms;
            policy.max_lag_ms = s.max_compaction_lag_ms;
            policy.delete_retention_ms = s.delete_retention_ms;
            policy.min_dirty_ratio = s.min_cleanable_dirty_ratio;
            policy.bytes_per_second = self.config.compaction_bytes_per_second;
            let g = Arc::clone(&group);
            let stats = tokio::task::spawn_blocking(move || g.store.log().compact(&policy))
                .await
                .map_err(|e| Error::Io(Arc::new(std::io::Error::other(e))))??;
            if stats.segments > 0 {
                tracing::info!(partition = %group.id, segments = stats.segments,
                    bytes_before = stats.bytes_before, bytes_after = stats.bytes_after,
                    records_removed = stats.records_removed, keys = stats.keys,
                    "compacted");
            }
            total.segments += stats.segments;
            total.bytes_before += stats.bytes_before;
            total.bytes_after += stats.bytes_after;
            total.records_removed += stats.records_removed;
            total.keys += stats.keys;
        }
        Ok(total)
    }

    pub(crate) async fn enforce_retention(&self) -> Result<()> {
        let now = crate::env::now_ms();
        self.roll_aged_segments(now);
        if let Err(e) = self.compact_topics().await {
            tracing::warn!(error = %e, "compaction postponed");
        }
        let groups: Vec<Arc<HostedReplica>> = self.groups.read().values().cloned().collect();
        for group in groups {
            // The offsets topic keeps what its last rewrite did not supersede, whatever its
            // age or size (its coordinator rewrites it instead of Kafka's compaction).
            let keep_from = if group.id.topic == crate::group::OFFSETS_TOPIC {
                self.offsets_keep_from(&group)
                    .and_then(|k| group.store.log().segment_floor(k))
            } else {
                let s = *group.settings.read();
                let time = s.retention_ms.map(std::time::Duration::from_millis);
                // A compacted topic without `delete` in its policy keeps every segment.
                let log = group.store.log();
                let retained = s
                    .delete
                    .then(|| log.retention_point_with(now, time, s.retention_bytes))
                    .flatten();
                // And the segments whose records DeleteRecords deleted all go.
                let deleted = log.segment_floor_of_offset(group.sm.log_start());
                retained.max(deleted)
            };
            let Some(keep_from) = keep_from else {
                continue;
            };
            let upto = keep_from.saturating_sub(1);
            let applied = group.sm.last_applied().map(|l| l.index);
            if applied.is_none_or(|a| a < upto) {
                continue; // not applied here yet: purge later
            }
            let timeout = self.config.request_timeout;
            if let Err(reason) = group.raft.purge_through(upto, timeout).await {
                return Err(Error::Indeterminate {
                    partition: group.id.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }

    /// The log index from which an offsets partition's records are live, as its latest
    /// rewrite record says (`None` before the first rewrite). Each call reads on from where
    /// the last stopped, at most [`OFFSETS_SCAN_BYTES`] of committed records, decoding only
    /// each record's key.
    fn offsets_keep_from(&self, group: &HostedReplica) -> Option<u64> {
        let log = group.store.log();
        let (mut next, mut keep_from) = self
            .offsets_scans
            .lock()
            .get(&group.id)
            .copied()
            .unwrap_or((log.start_offset(), None));
        next = next.max(log.start_offset());
        let mut read = 0usize;
        // Bounded by OFFSETS_SCAN_BYTES and by the high watermark.
        while read < OFFSETS_SCAN_BYTES {
            let Ok(batches) = read_committed(group, next, 4 << 20) else {
                break;
            };
            if batches.is_empty() {
                break;
            }
            for b in &batches {
                read += b.payload.len();
                for (offset, r) in b.records() {
                    if offset < next {
                        continue;
                    }
                    let key = r.key.unwrap_or_default();
                    if crate::group::records::is_rewrite_key(&key)
                        && let Ok(GroupRecord::Rewrite {
                            keep_from_log_index,
                        }) = crate::group::records::decode(&key, &r.value)
                    {
                        keep_from = keep_from.max(Some(keep_from_log_index));
                    }
                }
                next = next.max(b.next_offset());
            }
        }
        self.offsets_scans
            .lock()
            .insert(group.id.clone(), (next, keep_from));
        keep_from
    }
}

/// Most record bytes of an offsets partition read per retention check.
const OFFSETS_SCAN_BYTES: usize = 64 << 20;
