//! The broker as its group coordinators' [`Host`]: the offsets topic, the partitions of it
//! this broker leads, and reading and writing their records. The coordinators themselves
//! (which broker coordinates a group, loading, serving the group requests, timers) are
//! `group/runtime.rs`'s; the service calls them with the broker as their host.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use crate::error::Result;
use crate::group::OFFSETS_TOPIC;
use crate::group::api::Coordinator;
use crate::group::runtime::{GroupCoordinator, Host};
use crate::group::state::GroupLimits;
use crate::protocol::CreateTopicRequest;
use crate::raft::types::AppendRequest;
use crate::segment::batch::Batch;
use crate::segment::record::{Record, encode_records};
use crate::types::{Offset, PartitionId};

use super::write::read_committed;
use super::{Broker, HostedReplica, NodeConfig};

/// The broker's group coordinators, holding groups to the limits of `config`, and giving up
/// loading a shard after its request timeout.
pub(super) fn coordinator(config: &NodeConfig) -> Arc<GroupCoordinator> {
    let limits = GroupLimits {
        session_timeout_min: config.group_session_timeout_min,
        session_timeout_max: config.group_session_timeout_max,
        members_max: config.group_members_max,
        initial_rebalance_delay: config.group_initial_rebalance_delay,
    };
    Arc::new(GroupCoordinator::new(limits, config.request_timeout))
}

/// Runs `broker`'s group coordinators' timers until shutdown.
pub(super) async fn run_timers(broker: Arc<Broker>, shutdown: watch::Receiver<bool>) {
    let coordinator = Arc::clone(&broker.coordinator);
    coordinator.run_timers(broker, shutdown).await;
}

impl Host for Broker {
    type Replica = Arc<HostedReplica>;

    fn offsets_partition_count(&self) -> Option<u32> {
        let count = self
            .catalog
            .read()
            .topic(OFFSETS_TOPIC)
            .map(|t| t.assignment.len());
        count.and_then(|n| u32::try_from(n).ok())
    }

    async fn create_offsets_topic(&self) -> Result<()> {
        let brokers = u32::try_from(self.catalog.read().brokers().len()).unwrap_or(1);
        let request = CreateTopicRequest {
            // Compacted whatever it says (`retention.rs`); it says so to clients.
            configs: crate::topic_config::TopicConfigs::from_pairs([("cleanup.policy", "compact")])
                .unwrap_or_default(),
            assignment: Vec::new(),
            name: OFFSETS_TOPIC.into(),
            partitions: self.config.offsets_topic_partitions,
            replication_factor: self
                .config
                .offsets_topic_replication_factor
                .min(brokers)
                .max(1),
            forwarded: false,
        };
        self.create_topic(request).await
    }

    async fn leader_of(&self, partition: u32) -> Option<Coordinator> {
        let meta = self.metadata(Some(OFFSETS_TOPIC), false).await;
        let leader = meta
            .partitions
            .iter()
            .find(|m| m.partition.partition == partition)
            .and_then(|m| m.leader)?;
        let addr = meta
            .brokers
            .iter()
            .find(|(id, _)| *id == leader)
            .map(|(_, a)| a.clone())?;
        Some(Coordinator { node: leader, addr })
    }

    fn leading(&self, partition: u32) -> Option<(Arc<HostedReplica>, u64)> {
        let replica = self
            .replica(&PartitionId::new(OFFSETS_TOPIC, partition))
            .ok()?;
        let state = replica.raft.state();
        (state.leader == Some(self.config.id)).then_some((replica, state.term))
    }

    async fn read_barrier(&self, replica: &Arc<HostedReplica>) -> std::result::Result<(), String> {
        replica.raft.read_barrier().await
    }

    fn log_start(&self, replica: &Arc<HostedReplica>) -> Offset {
        replica.store.log().start_offset()
    }

    fn read_committed(
        &self,
        replica: &Arc<HostedReplica>,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Vec<Batch>> {
        read_committed(replica, offset, max_bytes)
    }

    /// Batches of at most half the log's largest batch (an estimate: each record's key and
    /// value and 32 bytes), each committed before the next is proposed.
    async fn append(&self, replica: &Arc<HostedReplica>, records: Vec<Record>) -> Result<()> {
        let limits = replica.store.log().limits();
        let budget = (limits.batch_bytes_max as usize / 2).max(1);
        let mut chunk: Vec<Record> = Vec::new();
        let mut bytes = 0usize;
        let mut chunks = Vec::new();
        for r in records {
            let len = r.value.len() + r.key.as_ref().map_or(0, Bytes::len) + 32;
            if !chunk.is_empty() && bytes + len > budget {
                chunks.push(std::mem::take(&mut chunk));
                bytes = 0;
            }
            bytes += len;
            chunk.push(r);
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        for chunk in chunks {
            let (payload, record_count) = encode_records(&chunk, limits.record_bytes_max)?;
            let request = AppendRequest {
                format: crate::segment::format::PayloadFormat::Replog,
                compacted: false,
                timestamp_ms: 0,
                records: payload,
                record_count,
                producer_id: 0,
                producer_epoch: 0,
                base_sequence: 0,
            };
            self.append_to(replica, request, None).await?;
        }
        Ok(())
    }

    fn partition_counts(&self) -> BTreeMap<String, usize> {
        self.catalog
            .read()
            .topics()
            .map(|(name, t)| (name.clone(), t.assignment.len()))
            .collect()
    }

    fn partition_exists(&self, topic: &str, partition: u32) -> bool {
        self.catalog
            .read()
            .topic(topic)
            .is_some_and(|t| (partition as usize) < t.assignment.len())
    }
}
