//! A coordinator's shard of groups: loading it from its offsets partition when this broker
//! comes to lead the partition, and rewriting the partition to its live records when it has
//! grown well past them.

use super::*;

impl Broker {
    /// Offsets partition `p` and its loaded shard, if this broker leads it.
    pub(super) async fn coordinate_partition(
        self: &Arc<Self>,
        p: u32,
    ) -> GroupResult<(Arc<HostedReplica>, Arc<Shard>)> {
        let hosted = self
            .group(&PartitionId::new(OFFSETS_TOPIC, p))
            .map_err(|_| GroupError::NotCoordinator)?;
        let state = hosted.raft.state();
        if state.leader != Some(self.config.id) {
            return Err(GroupError::NotCoordinator);
        }
        let shard = self.coordinator.get(p, state.term);
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
                let timeout = self.config.request_timeout;
                let r = tokio::time::timeout(timeout, self.load_shard(&hosted, &shard))
                    .await
                    .unwrap_or(Err(GroupError::CoordinatorLoadInProgress));
                *loaded = r.is_ok();
                r
            }
        };
        match outcome {
            Ok(()) => Ok((hosted, shard)),
            Err(e) => {
                self.coordinator.drop_shard(&shard);
                Err(e)
            }
        }
    }

    /// Reads the whole offsets partition into `shard`, after a read barrier.
    async fn load_shard(&self, hosted: &HostedReplica, shard: &Shard) -> GroupResult<()> {
        let started = std::time::Instant::now();
        hosted.raft.read_barrier().await.map_err(|e| {
            tracing::debug!(error = %e, "no read barrier: not the coordinator");
            GroupError::NotCoordinator
        })?;
        let now = Instant::now();
        let mut next = hosted.store.log().start_offset();
        let (mut records, mut skipped) = (0u64, 0u64);
        // Bounded by the high watermark: each read moves `next` past what it returned.
        loop {
            let batches = match read_committed(hosted, next, LOAD_BYTES) {
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

    /// Whether `shard`'s partition is due for a rewrite: it holds `offsets_rewrite_bytes`
    /// and four times what a rewrite would write.
    fn needs_rewrite(&self, hosted: &HostedReplica, shard: &Shard) -> bool {
        let size = hosted.store.log().size_bytes();
        let since = size.saturating_sub(shard.size_after_rewrite.load(Ordering::Acquire));
        if size < self.config.offsets_rewrite_bytes || since < self.config.offsets_rewrite_bytes / 2
        {
            return false;
        }
        let live: u64 = shard
            .groups
            .lock()
            .iter()
            .map(|(name, g)| {
                let per_offset = 64 + name.len() as u64;
                let members = g.persisted.as_ref().map_or(0, |s| {
                    s.members
                        .iter()
                        .map(|m| 64 + (m.subscription.len() + m.assignment.len()) as u64)
                        .sum::<u64>()
                });
                g.offsets.len() as u64 * per_offset + members
            })
            .sum();
        size > live.saturating_mul(4)
    }

    /// Re-appends every live record of `shard`'s partition (each group's persisted membership
    /// and committed offsets), then a rewrite record naming where they start: the segments
    /// before it hold only superseded records, and every replica's retention purges them.
    /// Holds the shard's writer throughout, so that nothing is written in between.
    async fn rewrite(&self, hosted: &HostedReplica, shard: &Shard) -> GroupResult<()> {
        let started = std::time::Instant::now();
        let _writer = shard.writer.lock().await;
        self.may_write(shard)?;
        let log = hosted.store.log();
        let (before, keep_from) = (log.size_bytes(), log.next_log_index().get());
        let mut records = Vec::new();
        {
            let groups = shard.groups.lock();
            for (name, g) in groups.iter() {
                if let Some(s) = &g.persisted {
                    let (key, value) = group_record(name, s);
                    records.push(Record::new(value).with_key(key));
                }
                for ((topic, partition), c) in &g.offsets {
                    let (key, value) = offset_record(name, topic, *partition, c, -1);
                    records.push(Record::new(value).with_key(key));
                }
            }
        }
        let rewritten = records.len();
        let (key, value) = crate::group::records::rewrite_record(keep_from);
        records.push(Record::new(value).with_key(key));
        self.write_group_records(hosted, records).await?;
        shard
            .size_after_rewrite
            .store(log.size_bytes(), Ordering::Release);
        tracing::info!(
            partition = shard.partition,
            records = rewritten,
            bytes_before = before,
            keep_from,
            ms = started.elapsed().as_millis() as u64,
            "offsets partition rewritten"
        );
        Ok(())
    }

    /// Starts a rewrite of `shard`'s partition if it is due and none runs.
    pub(super) fn maybe_rewrite(self: &Arc<Self>, shard: &Arc<Shard>) {
        let Ok(hosted) = self.group(&PartitionId::new(OFFSETS_TOPIC, shard.partition)) else {
            return;
        };
        if !self.needs_rewrite(&hosted, shard) || shard.rewriting.swap(true, Ordering::AcqRel) {
            return;
        }
        let (broker, shard) = (Arc::clone(self), Arc::clone(shard));
        tokio::spawn(async move {
            if let Err(e) = broker.rewrite(&hosted, &shard).await {
                tracing::warn!(partition = shard.partition, error = ?e, "rewriting an offsets partition failed");
            }
            shard.rewriting.store(false, Ordering::Release);
        });
    }
}
