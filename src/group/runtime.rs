//! The group coordinator's runtime: which broker coordinates a group, loading a coordinator's
//! shard from its offsets partition, serving the group requests against it, and the timers
//! that expire sessions and finish rebalances. The rules themselves are `state.rs`'s, the
//! records `records.rs`'s, the shards `coordinator.rs`'s.
//!
//! The runtime knows the broker that runs it only through [`Host`]: the offsets topic's
//! partitions, which of them this broker leads, reading their committed records and writing
//! records to them. The parts:
//! - this file: [`Host`], [`GroupCoordinator`], finding a group's coordinator and writing
//!   records;
//! - `runtime/load.rs`: a shard loaded from its partition when this broker comes to lead it;
//! - `runtime/members.rs`: JoinGroup, SyncGroup, Heartbeat and LeaveGroup;
//! - `runtime/offsets.rs`: OffsetCommit, OffsetFetch, ListGroups and DescribeGroups;
//! - `runtime/delete.rs`: DeleteGroups and OffsetDelete;
//! - `runtime/timers.rs`: session expiry, rebalance deadlines, emptied groups written.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::api::Coordinator;
use super::coordinator::{Shard, Shards};
use super::records::group_record;
use super::state::{GroupLimits, Snapshot};
use super::{GroupError, GroupResult, OFFSETS_TOPIC, check_group_id, coordinator_partition};
use crate::error::Error;
use crate::segment::batch::Batch;
use crate::segment::record::Record;
use crate::types::Offset;

mod delete;
mod load;
mod members;
mod offsets;
mod timers;

/// What the group coordinators need of the broker that runs them: the offsets topic and its
/// partitions, the ones this broker leads, and reading and writing their records. `Broker`
/// implements it (`node/groups.rs`); nothing else of the broker is reached from here.
pub(crate) trait Host: Send + Sync + 'static {
    /// This broker's replica of one offsets partition, held by a request from the moment it
    /// finds this broker leading the partition until it answers: its reads and writes go to
    /// that very replica, not to one started after it.
    type Replica: Send + Sync + 'static;

    /// The offsets topic's partition count, once the topic exists.
    fn offsets_partition_count(&self) -> Option<u32>;

    /// Creates the offsets topic (compacted, with the brokers' partition count and
    /// replication factor). [`Error::TopicExists`] if another broker created it first.
    fn create_offsets_topic(&self) -> impl Future<Output = crate::Result<()>> + Send;

    /// The broker that leads offsets partition `partition` and its address, as this broker's
    /// metadata names them; `None` while the partition has no leader or no known address.
    fn leader_of(&self, partition: u32) -> impl Future<Output = Option<Coordinator>> + Send;

    /// This broker's replica of offsets partition `partition` and its Raft term, if this
    /// broker hosts it and leads it now.
    fn leading(&self, partition: u32) -> Option<(Self::Replica, u64)>;

    /// Returns once `replica`, a leader, has applied every entry committed before the call
    /// (a read barrier); an error if it is not the leader any more.
    fn read_barrier(
        &self,
        replica: &Self::Replica,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// The first offset of `replica`'s log.
    fn log_start(&self, replica: &Self::Replica) -> Offset;

    /// Committed batches of `replica` from `offset` on, up to about `max_bytes`
    /// ([`Error::OffsetOutOfRange`] below the log's start).
    fn read_committed(
        &self,
        replica: &Self::Replica,
        offset: Offset,
        max_bytes: usize,
    ) -> crate::Result<Vec<Batch>>;

    /// Appends `records` to `replica`'s partition, in batches within its log's limits, and
    /// returns once each is committed (the next one is proposed after the one before).
    fn append(
        &self,
        replica: &Self::Replica,
        records: Vec<Record>,
    ) -> impl Future<Output = crate::Result<()>> + Send;

    /// Each topic's partition count, as this broker's copy of the metadata has it.
    fn partition_counts(&self) -> BTreeMap<String, usize>;

    /// Whether partition `partition` of topic `topic` exists.
    fn partition_exists(&self, topic: &str, partition: u32) -> bool;
}

/// A broker's group coordinators: the shards of the offsets partitions it leads, and what
/// serving them takes. Each request names the [`Host`] it is served on.
pub(crate) struct GroupCoordinator {
    shards: Shards,
    limits: GroupLimits,
    /// How long loading a shard may take before the request is answered
    /// `CoordinatorLoadInProgress`.
    load_timeout: Duration,
    /// Set while this broker is creating the offsets topic.
    offsets_topic_creating: AtomicBool,
}

impl GroupCoordinator {
    /// Coordinators that hold groups to `limits` and give up loading a shard after
    /// `load_timeout`.
    pub(crate) fn new(limits: GroupLimits, load_timeout: Duration) -> GroupCoordinator {
        GroupCoordinator {
            shards: Shards::default(),
            limits,
            load_timeout,
            offsets_topic_creating: AtomicBool::new(false),
        }
    }

    /// Every shard this broker holds.
    pub(crate) fn shards(&self) -> Vec<Arc<Shard>> {
        self.shards.all()
    }

    /// The offsets topic's partition count, once it exists; otherwise its creation is started
    /// (once at a time) and the caller is told to retry.
    fn offsets_partitions<H: Host>(self: &Arc<Self>, host: &Arc<H>) -> GroupResult<u32> {
        if let Some(n) = host.offsets_partition_count() {
            return Ok(n);
        }
        if !self.offsets_topic_creating.swap(true, Ordering::AcqRel) {
            let (me, host) = (Arc::clone(self), Arc::clone(host));
            tokio::spawn(async move {
                match host.create_offsets_topic().await {
                    Ok(()) | Err(Error::TopicExists(_)) => {
                        tracing::info!(topic = OFFSETS_TOPIC, "offsets topic created");
                    }
                    Err(e) => tracing::warn!(error = %e, "creating the offsets topic failed"),
                }
                me.offsets_topic_creating.store(false, Ordering::Release);
            });
        }
        Err(GroupError::CoordinatorNotAvailable)
    }

    /// FindCoordinator: the broker that leads the group's offsets partition.
    pub(crate) async fn find_coordinator<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
    ) -> GroupResult<Coordinator> {
        check_group_id(group)?;
        let n = self.offsets_partitions(host)?;
        let p = coordinator_partition(group, n);
        host.leader_of(p)
            .await
            .ok_or(GroupError::CoordinatorNotAvailable)
    }

    /// The group's offsets partition and its loaded shard, if this broker coordinates it.
    async fn coordinate<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
    ) -> GroupResult<(H::Replica, Arc<Shard>)> {
        check_group_id(group)?;
        let n = self.offsets_partitions(host)?;
        self.coordinate_partition(host.as_ref(), coordinator_partition(group, n))
            .await
    }

    /// Whether this broker still leads the shard's partition in the shard's term.
    fn still_leads<H: Host>(&self, host: &H, shard: &Shard) -> bool {
        host.leading(shard.partition)
            .is_some_and(|(_, term)| term == shard.term)
    }

    /// After taking a shard's writer: whether the shard may still write (it was not dropped,
    /// and this broker still leads its partition in its term). A write checked against an
    /// older term's state must not land in a newer term's log.
    fn may_write<H: Host>(&self, host: &H, shard: &Shard) -> GroupResult<()> {
        if shard.is_dead() || !self.still_leads(host, shard) {
            return Err(GroupError::NotCoordinator);
        }
        Ok(())
    }

    /// Writes a group's snapshot; the caller holds the shard's writer. Not for a group
    /// deleted since the snapshot was taken (an emptied group's, or a sync's that lost its
    /// members meanwhile): that would bring the group back.
    async fn write_snapshot<H: Host>(
        &self,
        host: &H,
        replica: &H::Replica,
        shard: &Shard,
        group: &str,
        snapshot: &Snapshot,
    ) -> GroupResult<()> {
        if !shard.groups.lock().contains_key(group) {
            return Err(GroupError::GroupIdNotFound);
        }
        let (key, value) = group_record(group, snapshot);
        write_records(host, replica, vec![Record::new(value).with_key(key)]).await
    }

    /// Writes `records` of `group` to the shard's partition, then applies them to the shard
    /// as a coordinator that loads the partition would: one path from record to state. The
    /// caller holds the shard's writer.
    async fn write_and_apply<H: Host>(
        &self,
        host: &H,
        replica: &H::Replica,
        shard: &Shard,
        group: &str,
        records: Vec<Record>,
    ) -> GroupResult<()> {
        write_records(host, replica, records.clone()).await?;
        let now = Instant::now();
        for r in &records {
            let key = r.key.as_deref().unwrap_or_default();
            if let Err(e) = shard.apply(key, &r.value, now) {
                tracing::error!(%group, error = %e, "a record just written does not decode");
            }
        }
        Ok(())
    }
}

/// Appends records to an offsets partition and waits for their commit, the broker's refusals
/// told as a group request's.
async fn write_records<H: Host>(
    host: &H,
    replica: &H::Replica,
    records: Vec<Record>,
) -> GroupResult<()> {
    host.append(replica, records).await.map_err(|e| match e {
        Error::TryAgain { .. } => GroupError::CoordinatorLoadInProgress,
        Error::RecordTooLarge { .. } | Error::BatchTooLarge { .. } => {
            GroupError::OffsetMetadataTooLarge
        }
        other => {
            tracing::debug!(error = %other, "an offsets write failed");
            GroupError::NotCoordinator
        }
    })
}
