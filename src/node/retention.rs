//! Retention: each hosted partition's leader purges what its limits no longer keep.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::{CompactionPolicy, CompactionStats};

use super::{Broker, HostedReplica};

impl Broker {
    /// Compacts every hosted replica of a compacted topic (`cleanup.policy` has `compact`, and
    /// the offsets topic whatever its configs say), one at a time on a blocking thread, up to
    /// what each has applied (committed on every replica that acknowledged it): leaders and
    /// followers alike, each its own copy. In the offsets topic a record with an empty value
    /// is a deletion (`group/records.rs`), removed as a tombstone is.
    pub(crate) async fn compact_topics(&self) -> Result<CompactionStats> {
        let now = crate::env::now_ms();
        let replicas: Vec<Arc<HostedReplica>> = self
            .replicas
            .read()
            .values()
            .filter(|g| is_offsets(g) || g.settings.read().compact)
            .cloned()
            .collect();
        let mut total = CompactionStats::default();
        for replica in replicas {
            let Some(applied) = replica.sm.last_applied().map(|l| l.index) else {
                continue;
            };
            // The offsets topic's live records are few (a record per group and partition
            // committed): its active segment is sealed, to be compacted, once it outgrows them.
            if is_offsets(&replica) && replica.store.log().roll_if_outgrown(OFFSETS_ACTIVE_MIN)? {
                tracing::debug!(partition = %replica.id, "offsets partition's active segment sealed");
            }
            let s = *replica.settings.read();
            let mut policy = CompactionPolicy::new(crate::types::LogIndex(applied));
            policy.now_ms = now;
            policy.min_lag_ms = s.min_compaction_lag_ms;
            policy.max_lag_ms = s.max_compaction_lag_ms;
            policy.delete_retention_ms = s.delete_retention_ms;
            policy.min_dirty_ratio = s.min_cleanable_dirty_ratio;
            policy.bytes_per_second = self.config.compaction_bytes_per_second;
            policy.empty_values_are_tombstones = is_offsets(&replica);
            let g = Arc::clone(&replica);
            let stats = tokio::task::spawn_blocking(move || g.store.log().compact(&policy))
                .await
                .map_err(|e| Error::Io(Arc::new(std::io::Error::other(e))))??;
            if stats.segments > 0 {
                tracing::info!(partition = %replica.id, segments = stats.segments,
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
        self.roll_aged_segments(now).await;
        if let Err(e) = self.compact_topics().await {
            tracing::warn!(error = %e, "compaction postponed");
        }
        let replicas: Vec<Arc<HostedReplica>> = self.replicas.read().values().cloned().collect();
        for replica in replicas {
            let s = *replica.settings.read();
            let time = s.retention_ms.map(std::time::Duration::from_millis);
            // A compacted topic without `delete` in its policy keeps every segment, and so
            // does the offsets topic, which compaction alone keeps small.
            let log = replica.store.log();
            let retained = (s.delete && !is_offsets(&replica))
                .then(|| log.retention_point_with(now, time, s.retention_bytes))
                .flatten();
            // And the segments whose records DeleteRecords deleted all go.
            let deleted = log.segment_floor_of_offset(replica.sm.log_start());
            let keep_from = retained.max(deleted);
            let Some(keep_from) = keep_from else {
                continue;
            };
            let upto = keep_from.saturating_sub(1);
            let applied = replica.sm.last_applied().map(|l| l.index);
            if applied.is_none_or(|a| a < upto) {
                continue; // not applied here yet: purge later
            }
            let timeout = self.config.request_timeout;
            if let Err(reason) = replica.raft.purge_through(upto, timeout).await {
                return Err(Error::Indeterminate {
                    partition: replica.id.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }
}

/// The least an offsets partition's active segment holds before it is sealed for compaction
/// (when it holds more than the sealed ones too).
const OFFSETS_ACTIVE_MIN: u64 = 64 << 10;

/// Whether `replica` is a partition of the offsets topic.
fn is_offsets(replica: &HostedReplica) -> bool {
    replica.id.topic == crate::group::OFFSETS_TOPIC
}
