//! The broker service: what a client can ask of a broker, as typed requests and answers, with
//! no wire encoding in sight. Every door to the broker is a thin codec over it: the native one
//! (`handler.rs`) today, a Kafka-protocol listener next. The meaning of each request (which
//! replica answers, what is refused and why, what counts as written) lives behind this type,
//! never in a codec.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use crate::catalog::MetaCommand;
use crate::error::{Error, Result};
use crate::group::api::MemberRef;
use crate::group::api::{
    CommittedOffset, Coordinator, GroupDescription, GroupListing, JoinGroup, JoinReply,
    OffsetCommit, PartitionResult, SyncGroup,
};
use crate::group::{GroupError, GroupResult, OFFSETS_TOPIC};
use crate::log::AppendInfo;
use crate::security::Session;
use crate::security::acl::{AclOperation, ResourceType};
use crate::transport::Turn;
use crate::types::PartitionId;

use super::Broker;
pub(crate) use super::write::Fetched;

mod acls;
mod authorize;
mod fetch;
mod login;
mod offsets;
mod requests;
mod topics;
mod users;

pub(crate) use fetch::{Fetch, PartitionFetch};
pub(crate) use login::{LoginStep, SaslSettings};
pub(crate) use requests::{
    AlterConfigs, ClusterMetadata, CreatePartitions, CreateTopic, DeleteTopic, ElectLeaders,
    OffsetSpec, PartitionInfo, ProduceBatch, Propose, ReassignPartition, SizeLimits,
};
pub(crate) use topics::NewTopic;
pub(crate) use users::{CredentialChange, UserError};

/// A produce: one encoded batch for one partition.
pub(crate) struct Produce {
    /// The partition written.
    pub(crate) partition: PartitionId,
    /// The records as the producer encoded them, with its idempotence numbers.
    pub(crate) batch: ProduceBatch,
    /// The request's place among its connection's requests, if the codec keeps one: batches of
    /// one producer are checked in that order.
    pub(crate) turn: Option<Turn>,
}

fn internal_topic() -> Error {
    Error::InvalidTopic {
        reason: format!("{OFFSETS_TOPIC} is written by the group coordinators only"),
    }
}

/// The broker's operations for clients, on behalf of one connection's session (see
/// `authorize.rs`).
#[derive(Clone)]
pub(crate) struct BrokerService {
    broker: Arc<Broker>,
    session: Session,
}

impl BrokerService {
    /// The service for a connection nobody authenticated on, whose address is unknown.
    pub(super) fn new(broker: Arc<Broker>) -> BrokerService {
        BrokerService {
            broker,
            session: Session::anonymous(None),
        }
    }

    /// User `user`'s SCRAM credential for `mechanism`, as the metadata log has it.
    pub(crate) fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::ScramMechanism,
    ) -> Option<crate::ScramCredential> {
        self.broker.catalog.read().scram_credential(user, mechanism)
    }

    /// Every SCRAM credential of user `user` (a PLAIN login is checked against them).
    pub(crate) fn scram_credentials(&self, user: &str) -> Vec<crate::ScramCredential> {
        self.broker.catalog.read().scram_credentials(user)
    }

    /// Appends a batch on the partition's leader: [`crate::Node::append`]'s rules. The offsets
    /// topic is written by its coordinators only.
    pub(crate) async fn produce(&self, request: Produce) -> Result<AppendInfo> {
        self.authorize_topic(AclOperation::Write, &request.partition.topic)?;
        if request.partition.topic == OFFSETS_TOPIC {
            return Err(internal_topic());
        }
        self.broker
            .append_encoded(&request.partition, request.batch, request.turn)
            .await
    }

    /// Whether the records of `partition`'s topic take the time their leader appended them
    /// (`message.timestamp.type=LogAppendTime`), as this broker's replica has the topic's
    /// configs; false for a partition it does not host.
    pub(crate) fn log_append_time(&self, partition: &crate::types::PartitionId) -> bool {
        self.broker
            .replica(partition)
            .is_ok_and(|g| g.settings.read().log_append_time)
    }

    /// Brokers, topics and every partition's current leader (`local_only`: only the partitions
    /// hosted here, as brokers ask each other). A client is told only of the topics it may
    /// describe.
    pub(crate) async fn metadata(&self, topic: Option<&str>, local_only: bool) -> ClusterMetadata {
        if let Some(t) = topic
            && !local_only
            && !self.may(AclOperation::Describe, ResourceType::Topic, t)
        {
            let mut answer = self.broker.metadata(Some(t), local_only).await;
            answer.partitions.clear();
            return answer;
        }
        let mut answer = self.broker.metadata(topic, local_only).await;
        if !local_only && self.authorizes() {
            answer.partitions.retain(|p| {
                self.may(
                    AclOperation::Describe,
                    ResourceType::Topic,
                    &p.partition.topic,
                )
            });
        }
        answer
    }

    /// Creates a topic through the metadata Raft group. The offsets topic is created by the
    /// brokers only (a broker forwards its creation to the metadata leader).
    pub(crate) async fn create_topic(&self, request: CreateTopic) -> Result<()> {
        if !request.forwarded {
            self.authorize_create_topic(&request.topic.name)?;
        }
        if request.topic.name == OFFSETS_TOPIC && !request.forwarded {
            return Err(internal_topic());
        }
        self.broker.create_topic(request.into()).await
    }

    /// Deletes a created topic through the metadata Raft group (never the offsets topic).
    pub(crate) async fn delete_topic(&self, request: DeleteTopic) -> Result<()> {
        if !request.forwarded {
            self.authorize_topic(AclOperation::Delete, &request.name)?;
        }
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
    ) -> std::collections::BTreeMap<crate::types::NodeId, crate::Address> {
        let catalog = self.broker.catalog.read();
        let mut out = std::collections::BTreeMap::new();
        for id in catalog.brokers() {
            if let Some(addr) = catalog
                .kafka_addr(id)
                .or_else(|| self.broker.config.kafka_peers.get(&id).cloned())
            {
                out.insert(id, addr);
            }
        }
        if let Some(me) = self.broker.kafka_addr.get() {
            out.insert(self.broker.config.id, me.clone());
        }
        out
    }

    /// The rack broker `id` registered, if any.
    pub(crate) fn rack(&self, id: crate::types::NodeId) -> Option<String> {
        self.broker.catalog.read().rack(id).map(str::to_string)
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

    /// A topic's UUID (KIP-516), if the catalog has the topic.
    pub(crate) fn topic_uuid(&self, name: &str) -> Option<[u8; 16]> {
        self.broker.catalog.read().topic(name).map(|t| t.uuid(name))
    }

    /// The topic whose UUID is `uuid`, if the catalog has one.
    pub(crate) fn topic_named_by(&self, uuid: [u8; 16]) -> Option<String> {
        let catalog = self.broker.catalog.read();
        let found = catalog.topics().find(|(name, t)| t.uuid(name) == uuid);
        found.map(|(name, _)| name.clone())
    }

    /// FindCoordinator: the broker leading the group's offsets partition.
    pub(crate) async fn find_coordinator(&self, group: &str) -> GroupResult<Coordinator> {
        self.authorize_group(AclOperation::Describe, group)?;
        self.broker
            .coordinator
            .find_coordinator(&self.broker, group)
            .await
    }

    /// JoinGroup (Kafka's classic protocol): answered once the rebalance completes.
    /// `from` is the member's address, shown as its host.
    pub(crate) async fn join_group(
        &self,
        request: JoinGroup,
        from: Option<SocketAddr>,
    ) -> GroupResult<JoinReply> {
        self.authorize_group(AclOperation::Read, &request.group)?;
        self.broker
            .coordinator
            .join_group(&self.broker, request, from)
            .await
    }

    /// SyncGroup: the member's assignment, once the leader's is written.
    pub(crate) async fn sync_group(&self, request: SyncGroup) -> GroupResult<Bytes> {
        self.authorize_group(AclOperation::Read, &request.group)?;
        self.broker
            .coordinator
            .sync_group(&self.broker, request)
            .await
    }

    /// Heartbeat.
    pub(crate) async fn heartbeat(
        &self,
        group: &str,
        generation: i32,
        member_id: &MemberRef,
    ) -> GroupResult<()> {
        self.authorize_group(AclOperation::Read, group)?;
        self.broker
            .coordinator
            .heartbeat(&self.broker, group, generation, member_id)
            .await
    }

    /// LeaveGroup.
    pub(crate) async fn leave_group(&self, group: &str, member_id: &MemberRef) -> GroupResult<()> {
        self.authorize_group(AclOperation::Read, group)?;
        self.broker
            .coordinator
            .leave_group(&self.broker, group, member_id)
            .await
    }

    /// OffsetCommit, fenced by the member's generation: READ on the group, and on each
    /// partition's topic (a partition whose topic the session may not read is answered with
    /// its error, and not committed).
    pub(crate) async fn commit_offsets(
        &self,
        mut request: OffsetCommit,
    ) -> GroupResult<Vec<PartitionResult>> {
        self.authorize_group(AclOperation::Read, &request.group)?;
        let mut refused = Vec::new();
        if self.authorizes() {
            request.offsets.retain(|o| {
                let ok = self.may(AclOperation::Read, ResourceType::Topic, &o.topic);
                if !ok {
                    refused.push(PartitionResult {
                        topic: o.topic.clone(),
                        partition: o.partition,
                        error: Some(GroupError::TopicAuthorizationFailed),
                    });
                }
                ok
            });
        }
        let mut results = self
            .broker
            .coordinator
            .commit_offsets(&self.broker, request)
            .await?;
        results.extend(refused);
        Ok(results)
    }

    /// OffsetFetch (every committed partition of the group when `partitions` is `None`).
    pub(crate) async fn fetch_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> GroupResult<Vec<CommittedOffset>> {
        self.authorize_group(AclOperation::Describe, group)?;
        let asked = partitions.is_some();
        let mut offsets = self
            .broker
            .coordinator
            .fetch_offsets(&self.broker, group, partitions)
            .await?;
        if self.authorizes() {
            // Partitions asked for are answered with their error; of all the group's, those
            // of topics the session may not describe are left out (as Kafka does).
            offsets.retain_mut(|o| {
                if self.may(AclOperation::Describe, ResourceType::Topic, &o.topic) {
                    return true;
                }
                o.offset = None;
                o.metadata.clear();
                o.leader_epoch = None;
                o.error = Some(GroupError::TopicAuthorizationFailed);
                asked
            });
        }
        Ok(offsets)
    }

    /// ListGroups: the groups this broker coordinates.
    /// (Every group with DESCRIBE on the cluster; otherwise those the session may describe.)
    pub(crate) async fn list_groups(&self) -> Vec<GroupListing> {
        let mut groups = self.broker.coordinator.list_groups(&self.broker).await;
        if self.authorizes() && !self.may_on_cluster(AclOperation::Describe) {
            groups.retain(|g| self.may(AclOperation::Describe, ResourceType::Group, &g.group));
        }
        groups
    }

    /// DescribeGroups for one group.
    pub(crate) async fn describe_group(&self, group: &str) -> GroupResult<GroupDescription> {
        self.authorize_group(AclOperation::Describe, group)?;
        self.broker
            .coordinator
            .describe_group(&self.broker, group)
            .await
    }

    /// DeleteGroups for one group: DELETE on the group.
    pub(crate) async fn delete_group(&self, group: &str) -> GroupResult<()> {
        self.authorize_group(AclOperation::Delete, group)?;
        self.broker
            .coordinator
            .delete_group(&self.broker, group)
            .await
    }

    /// OffsetDelete: DELETE on the group, and READ on each partition's topic (a partition
    /// whose topic the session may not read is answered with its error, and kept).
    pub(crate) async fn delete_offsets(
        &self,
        group: &str,
        mut partitions: Vec<(String, u32)>,
    ) -> GroupResult<Vec<PartitionResult>> {
        self.authorize_group(AclOperation::Delete, group)?;
        let mut refused = Vec::new();
        if self.authorizes() {
            partitions.retain(|(topic, partition)| {
                let ok = self.may(AclOperation::Read, ResourceType::Topic, topic);
                if !ok {
                    refused.push(PartitionResult {
                        topic: topic.clone(),
                        partition: *partition,
                        error: Some(GroupError::TopicAuthorizationFailed),
                    });
                }
                ok
            });
        }
        let mut results = self
            .broker
            .coordinator
            .delete_offsets(&self.broker, group, partitions)
            .await?;
        results.extend(refused);
        Ok(results)
    }

    /// InitProducerId for an idempotent producer: a producer id no other producer of the
    /// cluster has, at epoch 0. As Kafka's brokers do for a producer without a transactional
    /// id, a producer that asks again (after a fatal error, KIP-360) gets a new id: what it
    /// sent under the old one cannot be confused with what it sends next.
    pub(crate) async fn init_producer_id(&self) -> Result<(u64, u16)> {
        self.authorize_idempotent_write()?;
        Ok((self.broker.new_producer_id().await?, 0))
    }

    /// Moves a created topic's partition to other brokers, or with no replicas takes back its
    /// move under way: recorded through the metadata Raft group (the metadata leader checks the
    /// move), carried out by the partition's leader.
    pub(crate) async fn reassign_partition(&self, request: ReassignPartition) -> Result<()> {
        self.authorize_cluster(AclOperation::Alter)?;
        let (name, partition) = (request.partition.topic, request.partition.partition);
        let command = if request.replicas.is_empty() {
            MetaCommand::CancelReassignment { name, partition }
        } else {
            MetaCommand::ReassignPartition {
                name,
                partition,
                replicas: request.replicas,
            }
        };
        self.commit_command(command).await
    }

    /// The partitions moving now, of `topics` only if given, as this broker's catalog has
    /// them: DESCRIBE on the cluster.
    pub(crate) fn list_reassignments(
        &self,
        topics: Option<&[String]>,
    ) -> Result<Vec<crate::client::Reassignment>> {
        self.authorize_cluster(AclOperation::Describe)?;
        Ok(self.broker.catalog.read().reassignments(topics))
    }

    /// Decommissions broker `id` (ALTER on the cluster): the moves of its replicas recorded
    /// through the metadata Raft group.
    pub(crate) async fn decommission_broker(&self, id: crate::types::NodeId) -> Result<()> {
        self.authorize_cluster(AclOperation::Alter)?;
        self.commit_command(MetaCommand::DecommissionBroker { id })
            .await
    }

    /// The cluster's brokers described (DESCRIBE on the cluster): from this broker's catalog,
    /// and each partition's leader as Metadata finds it.
    pub(crate) async fn describe_brokers(&self) -> Result<Vec<crate::client::BrokerDescription>> {
        self.authorize_cluster(AclOperation::Describe)?;
        let metadata = self.broker.metadata(None, false).await;
        let mut leaders: std::collections::BTreeMap<crate::types::NodeId, u32> = Default::default();
        // Per broker: entries its replicas are behind their leaders, and partitions on it out
        // of the in-sync set.
        let mut lag: std::collections::BTreeMap<crate::types::NodeId, u64> = Default::default();
        let mut out_of_sync: std::collections::BTreeMap<crate::types::NodeId, u32> =
            Default::default();
        for p in &metadata.partitions {
            if let Some(l) = p.leader {
                *leaders.entry(l).or_default() += 1;
            }
            for (id, behind) in &p.lag {
                *lag.entry(*id).or_default() += behind;
            }
            for id in p.replicas.iter().filter(|r| !p.isr.contains(r)) {
                *out_of_sync.entry(*id).or_default() += 1;
            }
        }
        let catalog = self.broker.catalog.read();
        Ok(catalog
            .brokers()
            .into_iter()
            .map(|id| {
                let (replicas, preferred) = catalog.replicas_on(id);
                crate::client::BrokerDescription {
                    id,
                    addr: self.broker.broker_addr(id).map(|a| a.to_string()),
                    kafka_addr: catalog.kafka_addr(id).map(|a| a.to_string()),
                    rack: catalog.rack(id).map(str::to_string),
                    state: if catalog.is_draining(id) {
                        crate::client::BrokerState::Draining
                    } else {
                        crate::client::BrokerState::Active
                    },
                    replicas: u32::try_from(replicas).unwrap_or(u32::MAX),
                    preferred: u32::try_from(preferred).unwrap_or(u32::MAX),
                    leaders: leaders.get(&id).copied().unwrap_or(0),
                    lag: lag.get(&id).copied().unwrap_or(0),
                    out_of_sync: out_of_sync.get(&id).copied().unwrap_or(0),
                }
            })
            .collect())
    }

    /// Hands partitions to their preferred replicas (Kafka's preferred-leader ElectLeaders):
    /// ALTER on the cluster, unless a broker forwards the partitions it leads.
    pub(crate) async fn elect_leaders(
        &self,
        request: ElectLeaders,
    ) -> Result<Vec<(PartitionId, crate::node::Election)>> {
        if !request.forwarded {
            self.authorize_cluster(AclOperation::Alter)?;
        }
        Ok(self
            .broker
            .elect_preferred_leaders(request.partitions, request.forwarded)
            .await)
    }

    /// Commits a metadata command a peer broker sends (a registration, a forwarded proposal,
    /// a move's end).
    pub(crate) async fn propose(&self, request: Propose) -> Result<()> {
        self.broker.propose(request.into()).await
    }

    /// Commits a metadata command this broker makes for a client, through the metadata Raft
    /// group (forwarded to its leader if need be).
    async fn commit_command(&self, command: MetaCommand) -> Result<()> {
        let request = Propose {
            command,
            forwarded: false,
        };
        self.broker.propose(request.into()).await
    }
}
