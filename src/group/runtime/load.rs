//! A coordinator's shard of groups: loading it from its offsets partition when this broker
//! comes to lead the partition. (The partition is kept small by compaction, as every
//! compacted topic is: `node/retention.rs`.)

use std::sync::Arc;

use tokio::time::Instant;

use super::{GroupCoordinator, Host};
use crate::error::Error;
use crate::group::GroupError;
use crate::group::GroupResult;
use crate::group::coordinator::Shard;

/// Bytes of the offsets partition read at once while loading.
const LOAD_BYTES: usize = 4 << 20;

impl GroupCoordinator {
    /// Offsets partition `p` and its loaded shard, if this broker leads it.
    pub(super) async fn coordinate_partition<H: Host>(
        &self,
        host: &H,
        p: u32,
    ) -> GroupResult<(H::Replica, Arc<Shard>)> {
        let (replica, term) = host.leading(p).ok_or(GroupError::NotCoordinator)?;
        let shard = self.shards.get(p, term);
        let outcome = {
            let mut loaded = shard.loaded.lock().await;
            if shard.is_dead() {
                // Dropped while this request waited (its load failed, or the leadership
                // moved): the next request starts from a new shard.
                return Err(GroupError::CoordinatorLoadInProgress);
            }
            if *loaded {
                Ok(())
            } else {
                let load = load_shard(host, &replica, &shard);
                let r = tokio::time::timeout(self.load_timeout, load)
                    .await
                    .unwrap_or(Err(GroupError::CoordinatorLoadInProgress));
                *loaded = r.is_ok();
                r
            }
        };
        match outcome {
            Ok(()) => Ok((replica, shard)),
            Err(e) => {
                self.shards.drop_shard(&shard);
                Err(e)
            }
        }
    }
}

/// Reads the whole offsets partition into `shard`, after a read barrier.
async fn load_shard<H: Host>(host: &H, replica: &H::Replica, shard: &Shard) -> GroupResult<()> {
    let started = std::time::Instant::now();
    host.read_barrier(replica).await.map_err(|e| {
        tracing::debug!(error = %e, "no read barrier: not the coordinator");
        GroupError::NotCoordinator
    })?;
    let now = Instant::now();
    let mut next = host.log_start(replica);
    let (mut records, mut skipped) = (0u64, 0u64);
    // Bounded by the high watermark: each read moves `next` past what it returned.
    loop {
        let batches = match host.read_committed(replica, next, LOAD_BYTES) {
            Ok(b) => b,
            Err(Error::OffsetOutOfRange { start, .. }) if next < start => {
                next = start;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "loading the offsets partition failed");
                return Err(GroupError::CoordinatorLoadInProgress);
            }
        };
        if batches.is_empty() {
            break;
        }
        // A long history is read in chunks; between them the worker serves others.
        tokio::task::yield_now().await;
        for b in &batches {
            for (offset, r) in b.records() {
                if offset < next {
                    continue;
                }
                let key = r.key.unwrap_or_default();
                match shard.apply(&key, &r.value, now) {
                    Ok(()) => records += 1,
                    Err(e) => {
                        skipped += 1;
                        tracing::warn!(%offset, error = %e, "skipping an offsets record");
                    }
                }
            }
            next = next.max(b.next_offset());
        }
    }
    tracing::info!(
        partition = shard.partition,
        term = shard.term,
        records,
        skipped,
        groups = shard.groups.lock().len(),
        ms = started.elapsed().as_millis() as u64,
        "group coordinator loaded"
    );
    Ok(())
}
