//! The broker service: what a client can ask of a broker, as typed requests and answers, with
//! no wire encoding in sight. Every door to the broker is a thin codec over it: the native one
//! (`handler.rs`) today, a Kafka-protocol listener next. The meaning of each request (which
//! replica answers, what is refused and why, what counts as written) lives behind this type,
//! never in a codec.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::group::api::MemberRef;
use crate::group::api::{
    CommittedOffset, Coordinator, GroupDescription, GroupListing, JoinGroup, JoinReply,
    OffsetCommit, PartitionResult, SyncGroup,
};
use crate::group::{GroupError, OFFSETS_TOPIC};
use crate::log::AppendInfo;
use crate::protocol::{
    CreateTopicRequest, DeleteTopicRequest, MetadataResponse, OffsetAt, ProposeRequest,
};
use crate::raft::types::AppendRequest;
use crate::transport::Turn;
use crate::types::{Offset, PartitionId};

use super::Broker;
pub(crate) use super::write::Fetched;
use super::write::read_committed;

/// A produce: one encoded batch for one partition.
pub(crate) struct Produce {
    pub(crate) partition: PartitionId,
    /// The records as the producer encoded them, with its idempotence numbers.
    pub(crate) batch: AppendRequest,
    /// The request's place among its connection's requests, if the codec keeps one: batches of
    /// one producer are checked in that order.
    pub(crate) turn: Option<Turn>,
}

/// A fetch: committed batches of one partition from `offset` on.
pub(crate) struct Fetch {
    pub(crate) partition: PartitionId,
    pub(crate) offset: Offset,
    pub(crate) max_bytes: usize,
    /// How long to wait for `min_bytes` (capped at [`FETCH_WAIT_MAX`]).
    pub(crate) max_wait: Duration,
    /// Record bytes worth answering for; 0 never waits.
    pub(crate) min_bytes: usize,
}

type GroupResult<T> = std::result::Result<T, GroupError>;

fn internal_topic() -> Error {
    Error::InvalidTopic {
        reason: format!("{OFFSETS_TOPIC} is written by the group coordinators only"),
    }
}

/// Why [`BrokerService::epoch_end`] did not answer.
#[derive(Debug)]
pub(crate) enum EpochError {
    /// The asker's current epoch is older than the leader's term (Kafka's FENCED_LEADER_EPOCH).
    Fenced,
    /// The asker's current epoch is newer than this leader knows (UNKNOWN_LEADER_EPOCH).
    Unknown,
    /// Not led here, unknown, or a read failed.
    Service(Error),
}

/// The longest a fetch waits for records, whatever it asks.
pub(crate) const FETCH_WAIT_MAX: Duration = Duration::from_secs(60);

/// The broker's operations for clients.
#[derive(Clone)]
pub(crate) struct BrokerService {
    broker: Arc<Broker>,
}

impl BrokerService {
    pub(super) fn new(broker: Arc<Broker>) -> BrokerService {
        BrokerService { broker }
    }

    /// Appends a batch on the partition's leader: [`crate::Node::append`]'s rules. The offsets
    /// topic is written by its coordinators only.
    pub(crate) async fn produce(&self, request: Produce) -> Result<AppendInfo> {
        if request.partition.topic == OFFSETS_TOPIC {
            return Err(internal_topic());
        }
        self.broker
            .append_encoded(&request.partition, request.batch, request.turn)
            .await
    }

    /// Reads committed batches from this broker's replica: [`crate::Node::read`]'s rules, with
    /// the answer kept within this broker's frame limit whatever the asker allowed (a batch is
    /// never larger than a frame: `NodeConfig::validate`).
    pub(crate) fn fetch(&self, request: &Fetch) -> Result<Fetched> {
        let id = &request.partition;
        let max_bytes = self.fetch_bytes_max(request);
        self.broker
            .read_marked(&id.topic, id.partition, request.offset, max_bytes)
    }

    /// A long poll (Kafka's fetch wait): returns once the partition holds `min_bytes` of
    /// committed records from the fetch's offset on, once `max_wait` passed, or at once if
    /// the fetch cannot be answered with records (an unknown partition, an offset out of
    /// range: the fetch then says why). Waiting costs no CPU: it sleeps on the replica's
    /// high watermark, which each commit that moves it wakes, and holds no reference to the
    /// replica (a replica stopping ends the wait).
    pub(crate) async fn wait_for_fetch(&self, request: &Fetch) {
        if request.min_bytes == 0 || request.max_wait.is_zero() {
            return;
        }
        let deadline = tokio::time::Instant::now() + request.max_wait.min(FETCH_WAIT_MAX);
        let Ok(group) = self.broker.group(&request.partition) else {
            return;
        };
        let mut applied = group.sm.subscribe();
        drop(group);
        let mut stopping = self.broker.stopping.clone();
        if *stopping.borrow_and_update() {
            return;
        }
        // No more than one answer's worth is waited for (a client's `min_bytes` of 4 GiB would
        // otherwise be read again at each commit).
        let min_bytes = request.min_bytes.min(self.fetch_bytes_max(request)).max(1);
        let look_ahead = min_bytes.saturating_add(self.broker.config.log.batch_bytes_max as usize);
        // Bounded by the deadline.
        loop {
            let ready = match self.broker.group(&request.partition) {
                Err(_) => true,
                // Enough frames to hold `min_bytes` of records, and the batch that crosses it.
                Ok(group) => match read_committed(&group, request.offset, look_ahead) {
                    Ok(batches) => {
                        batches.iter().map(|b| b.payload.len()).sum::<usize>() >= min_bytes
                    }
                    Err(_) => true,
                },
            };
            if ready {
                return;
            }
            tokio::select! {
                changed = applied.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => return,
                // The broker is shutting down: answer now with what there is.
                _ = stopping.changed() => return,
            }
        }
    }

    /// The most bytes of frames a fetch answer carries: what it asked for, within the frame
    /// limit (a single batch larger than that is still sent, alone: see `PartitionLog::read`).
    pub(crate) fn fetch_bytes_max(&self, request: &Fetch) -> usize {
        request
            .max_bytes
            .min(self.broker.config.payload_bytes_max())
    }

    /// The memory a fetch answer may take, for the server's answer budget: its frames and the
    /// frame's overhead.
    /// An answer holds at least one batch, however small the fetch's `max_bytes`.
    pub(crate) fn fetch_answer_bytes(&self, request: &Fetch) -> usize {
        let one_batch = self.broker.config.log.batch_bytes_max as usize;
        self.fetch_bytes_max(request).max(one_batch)
            + crate::transport::frame::REQUEST_OVERHEAD_BYTES_MAX as usize
    }

    /// ListOffsets on this broker's replica: the log start, the high watermark, or the first
    /// committed batch written at or after a time (`None` if there is none yet).
    pub(crate) fn list_offset(
        &self,
        partition: &PartitionId,
        at: OffsetAt,
    ) -> Result<Option<Offset>> {
        self.broker.list_offset(partition, at)
    }

    /// Brokers, topics and every partition's current leader (`local_only`: only the partitions
    /// hosted here, as brokers ask each other).
    pub(crate) async fn metadata(&self, topic: Option<&str>, local_only: bool) -> MetadataResponse {
        self.broker.metadata(topic, local_only).await
    }

    /// Creates a topic through the metadata group. The offsets topic is created by the
    /// brokers only (a broker forwards its creation to the metadata leader).
    pub(crate) async fn create_topic(&self, request: CreateTopicRequest) -> Result<()> {
        if request.name == OFFSETS_TOPIC && !request.forwarded {
            return Err(internal_topic());
        }
        self.broker.create_topic(request).await
    }

    /// Deletes a created topic through the metadata group (never the offsets topic).
    pub(crate) async fn delete_topic(&self, request: DeleteTopicRequest) -> Result<()> {
        if request.name == OFFSETS_TOPIC {
            return Err(internal_topic());
        }
        self.broker.delete_topic(request).await
    }

    /// Every broker's Kafka address as clients reach it: the one it registered in the
    /// metadata log, else the one this broker was configured with (`NodeConfig::kafka_peers`),
    /// and this broker's own.
    pub(crate) fn kafka_brokers(
        &self,
    ) -> std::collections::BTreeMap<crate::types::NodeId, SocketAddr> {
        let catalog = self.broker.catalog.read();
        let mut out = std::collections::BTreeMap::new();
        for id in catalog.brokers() {
            if let Some(addr) = catalog
                .kafka_addr(id)
                .or_else(|| self.broker.config.kafka_peers.get(&id).copied())
            {
                out.insert(id, addr);
            }
        }
        if let Some(me) = self.broker.kafka_addr.get() {
            out.insert(self.broker.config.id, *me);
        }
        out
    }

    /// The brokers in the cluster's catalog.
    pub(crate) fn broker_count(&self) -> usize {
        self.broker.catalog.read().brokers().len()
    }

    /// A topic's partition count and replication factor, if the catalog has it.
    pub(crate) fn topic_shape(&self, name: &str) -> Option<(u32, u32)> {
        let catalog = self.broker.catalog.read();
        let t = catalog.topic(name)?;
        let partitions = u32::try_from(t.assignment.len()).unwrap_or(u32::MAX);
        let factor = t.assignment.first().map_or(0, Vec::len);
        Some((partitions, u32::try_from(factor).unwrap_or(u32::MAX)))
    }

    /// The log settings every partition of this broker is written with.
    pub(crate) fn log_config(&self) -> &crate::config::LogConfig {
        &self.broker.config.log
    }

    /// Kafka's OffsetForLeaderEpoch on this broker, which must lead the partition, with
    /// Kafka's answers (its `LeaderEpochFileCache::endOffsetFor`): for the current term, the
    /// high watermark (only committed records are ever served); for an earlier `epoch`, the
    /// largest term at or below it that the log holds and the offset where that term's
    /// records end (a leader's log never loses entries of earlier terms, so this is not capped
    /// by a high watermark that may still lag right after an election); for an epoch older
    /// than the log, the epoch itself and the log start; `Ok(None)` (Kafka's undefined epoch
    /// and offset) for an epoch above the current term. `current` is the asker's idea of the
    /// current term (`None`: not checked).
    pub(crate) fn epoch_end(
        &self,
        partition: &PartitionId,
        epoch: u64,
        current: Option<u64>,
    ) -> std::result::Result<Option<(u64, Offset)>, EpochError> {
        let group = self.broker.group(partition).map_err(EpochError::Service)?;
        let state = group.raft.state();
        if state.leader != Some(self.broker.config.id) {
            return Err(EpochError::Service(Error::NotLeader {
                partition: partition.clone(),
                leader: None,
            }));
        }
        match current {
            Some(c) if c < state.term => return Err(EpochError::Fenced),
            Some(c) if c > state.term => return Err(EpochError::Unknown),
            _ => {}
        }
        let log = group.store.log();
        if epoch > state.term {
            return Ok(None);
        }
        if epoch == state.term {
            let high_watermark = Offset(group.sm.high_watermark().min(log.end_offset().get()));
            return Ok(Some((state.term, high_watermark)));
        }
        let end = log.end_of_term(epoch).map_err(EpochError::Service)?;
        Ok(Some(end.unwrap_or((epoch, log.start_offset()))))
    }

    /// FindCoordinator: the broker leading the group's offsets partition.
    pub(crate) async fn find_coordinator(&self, group: &str) -> GroupResult<Coordinator> {
        self.broker.find_coordinator(group).await
    }

    /// JoinGroup (Kafka's classic protocol): answered once the rebalance completes.
    /// `from` is the member's address, shown as its host.
    pub(crate) async fn join_group(
        &self,
        request: JoinGroup,
        from: Option<SocketAddr>,
    ) -> GroupResult<JoinReply> {
        self.broker.join_group(request, from).await
    }

    /// SyncGroup: the member's assignment, once the leader's is written.
    pub(crate) async fn sync_group(&self, request: SyncGroup) -> GroupResult<Bytes> {
        self.broker.sync_group(request).await
    }

    /// Heartbeat.
    pub(crate) async fn heartbeat(
        &self,
        group: &str,
        generation: i32,
        member_id: &MemberRef,
    ) -> GroupResult<()> {
        self.broker.heartbeat(group, generation, member_id).await
    }

    /// LeaveGroup.
    pub(crate) async fn leave_group(&self, group: &str, member_id: &MemberRef) -> GroupResult<()> {
        self.broker.leave_group(group, member_id).await
    }

    /// OffsetCommit, fenced by the member's generation.
    pub(crate) async fn commit_offsets(
        &self,
        request: OffsetCommit,
    ) -> GroupResult<Vec<PartitionResult>> {
        self.broker.commit_offsets(request).await
    }

    /// OffsetFetch (every committed partition of the group when `partitions` is `None`).
    pub(crate) async fn fetch_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> GroupResult<Vec<CommittedOffset>> {
        self.broker.fetch_offsets(group, partitions).await
    }

    /// ListGroups: the groups this broker coordinates.
    pub(crate) async fn list_groups(&self) -> Vec<GroupListing> {
        self.broker.list_groups().await
    }

    /// DescribeGroups for one group.
    pub(crate) async fn describe_group(&self, group: &str) -> GroupResult<GroupDescription> {
        self.broker.describe_group(group).await
    }

    /// Commits a metadata command (a registration, a reassignment).
    pub(crate) async fn propose(&self, request: ProposeRequest) -> Result<()> {
        self.broker.propose(request).await
    }
}
