//! The metadata Raft group from a broker's side: proposing commands (topics created and deleted,
//! brokers registered, moves), forwarding them to the metadata leader, and following the
//! metadata log into the catalog.

use std::time::Duration;

use serde::Serialize;

use crate::Address;
use crate::catalog::{
    CONFIGURED_TOPIC_ID, METADATA_TOPIC, MetaCommand, PARTITIONS_MAX, Refused, check_topic_name,
};
use crate::error::{Error, Result};
use crate::protocol::{
    CreateTopicRequest, DeleteTopicRequest, MetadataRequest, MetadataResponse, ProposeRequest,
    WireError,
};
use crate::raft::types::AppendRequest;
use crate::segment::record::{Record, encode_records};
use crate::transport::frame::Op;
use crate::types::{NodeId, Offset, PartitionId};

use super::service::DeleteTopic;
use super::write::read_committed;
use super::{Broker, META_RECORD_BYTES_MAX};

mod requests;
pub(super) use requests::{Forwardable, MetaError};

/// Producer ids a broker takes from the cluster at a time (as Kafka's brokers do).
const PRODUCER_ID_BLOCK: u64 = 1000;

impl Broker {
    /// Where broker `id` is: this broker's own address, or the one it registered in the
    /// metadata log, or else the configured one.
    pub(super) fn broker_addr(&self, id: NodeId) -> Option<Address> {
        if id == self.config.id {
            Some(self.addr.clone())
        } else {
            let registered = self.catalog.read().broker_addr(id);
            registered.or_else(|| self.config.peers.get(&id).cloned())
        }
    }

    /// Records this broker's address in the metadata log (see [`MetaCommand::RegisterBroker`]).
    pub(super) async fn register(&self) -> Result<()> {
        // A broker that joined once is in the catalog (its own replica replays the metadata
        // log); from then on it only moves.
        let me = self.config.id;
        let join = self.config.join && !self.catalog.read().brokers().contains(&me);
        let request = ProposeRequest {
            command: MetaCommand::RegisterBroker {
                id: me,
                addr: self.addr.to_string(),
                join,
            },
            forwarded: false,
        };
        if self.meta.raft.leader().is_some() {
            return self.propose(request).await;
        }
        // No metadata leader known here (a joining broker is nobody's follower yet): any
        // founding broker takes the registration to its leader.
        let timeout = self.config.request_timeout;
        let mut tried = Vec::new();
        for peer in self.config.peers.keys() {
            let answer: Result<std::result::Result<(), WireError>> =
                self.forward(*peer, Op::Propose, &request, timeout).await;
            match answer {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => tried.push(format!("broker {peer} ({e:?})")),
                Err(e) => tried.push(format!("broker {peer} ({e})")),
            }
        }
        Err(Error::NoBrokerReachable {
            tried: tried.join(", "),
        })
    }

    /// Commits a metadata command through the metadata Raft group (see [`Op::Propose`]).
    pub(crate) async fn propose(&self, request: ProposeRequest) -> Result<()> {
        // A registration moves a broker's traffic once it is committed (the catalog applies
        // it). Before that, only if the broker answers at the new address as itself: the
        // metadata Raft group may need that very broker's vote or acknowledgement to commit its
        // registration, and a claim nobody verified must not divert traffic meanwhile.
        if let MetaCommand::RegisterBroker { id, addr, .. } = &request.command
            && *id != self.config.id
            && let Ok(addr) = addr.parse::<Address>()
            && self.peers.addr_of(*id).as_ref() != Some(&addr)
            && self.answers_at(*id, addr.clone()).await
        {
            self.peers.set_addr(*id, addr);
        }
        let partition = || match &request.command {
            MetaCommand::ReassignPartition {
                name, partition, ..
            }
            | MetaCommand::CancelReassignment { name, partition } => {
                PartitionId::new(name.clone(), *partition)
            }
            _ => PartitionId::new(METADATA_TOPIC, 0),
        };
        let unknown = || match &request.command {
            MetaCommand::AddPartitions { name, .. } => Error::UnknownTopic(name.clone()),
            _ => Error::UnknownPartition(partition()),
        };
        self.propose_command(request.clone())
            .await
            .map_err(|e| match e {
                MetaError::Refused(Refused::Moving) => Error::ReassignmentInProgress(partition()),
                MetaError::Refused(Refused::NotMoving) => {
                    Error::NoReassignmentInProgress(partition())
                }
                MetaError::Refused(Refused::Invalid(reason))
                    if matches!(request.command, MetaCommand::DecommissionBroker { .. }) =>
                {
                    let broker = match request.command {
                        MetaCommand::DecommissionBroker { id } => id,
                        _ => 0,
                    };
                    Error::CannotDecommission { broker, reason }
                }
                e => e.into_error(unknown, || Error::InvalidTopic {
                    reason: "the topic exists".into(),
                }),
            })
    }

    /// [`propose`](Self::propose), with the metadata leader's refusal as it is.
    pub(super) async fn propose_command(
        &self,
        request: ProposeRequest,
    ) -> std::result::Result<(), MetaError> {
        self.meta_command(
            request.command.clone(),
            request.forwarded,
            Op::Propose,
            &request,
        )
        .await
    }

    /// A producer id no other producer of the cluster has (Kafka's `ProducerIdManager`): the
    /// next of this broker's block, and when the block is spent, a new one of
    /// [`PRODUCER_ID_BLOCK`] ids taken through the metadata log (asked again, within the
    /// request timeout, while the metadata Raft group has no leader or its leader cannot be
    /// reached: a leader that just died is still named until the others elect another).
    pub(crate) async fn new_producer_id(&self) -> Result<u64> {
        let mut ids = self.producer_ids.lock().await;
        if ids.is_empty() {
            let deadline = tokio::time::Instant::now() + self.config.request_timeout;
            // Bounded by the deadline.
            *ids = loop {
                match self.take_producer_ids(deadline).await {
                    Err(
                        Error::NotLeader { .. }
                        | Error::TryAgain { .. }
                        | Error::NoBrokerReachable { .. },
                    ) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    taken => break taken?,
                }
            };
        }
        let id = ids.start;
        ids.start += 1;
        Ok(id)
    }

    /// Takes a new block of producer ids through the metadata log; returns it once the catalog
    /// here has applied it.
    async fn take_producer_ids(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<std::ops::Range<u64>> {
        let me = self.config.id;
        let tag = crate::client::new_producer_id();
        let command = MetaCommand::AllocateProducerIds {
            broker: me,
            count: PRODUCER_ID_BLOCK,
            tag,
        };
        self.propose(ProposeRequest {
            command,
            forwarded: false,
        })
        .await?;
        // Applied by the metadata leader; here a moment later.
        let mut applied = self.catalog_applied.subscribe();
        // Bounded by the deadline.
        loop {
            let block = self.catalog.read().producer_block(me);
            if let Some(block) = block.filter(|b| b.tag == tag) {
                return Ok(block.ids);
            }
            let changed = tokio::time::timeout_at(deadline, applied.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return Err(Error::Indeterminate {
                    partition: self.meta.id.clone(),
                    reason: "a block of producer ids was taken, but not applied here in time"
                        .into(),
                });
            }
        }
    }

    /// Whether the broker listening at `addr` is broker `id`: it answers a metadata request
    /// (of this broker's own, local only), within an election timeout, naming itself.
    async fn answers_at(&self, id: NodeId, addr: Address) -> bool {
        let request = MetadataRequest {
            topic: Some(METADATA_TOPIC.to_string()),
            local_only: true,
        };
        let Ok(body) = crate::transport::body::encode(&request) else {
            return false;
        };
        let timeout = self.config.election_timeout;
        match self
            .peers
            .probe(id, addr, Op::Metadata, body, timeout)
            .await
        {
            Ok(bytes) => {
                postcard::from_bytes::<std::result::Result<MetadataResponse, WireError>>(&bytes)
                    .is_ok_and(|answer| answer.is_ok_and(|meta| meta.broker == id))
            }
            Err(_) => false,
        }
    }

    /// Sends a request to broker `to` and decodes its answer; `None` if it did not answer
    /// within an election timeout or answered an error.
    pub(super) async fn ask<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        to: NodeId,
        op: Op,
        request: Req,
    ) -> Option<Resp> {
        let timeout = self
            .config
            .request_timeout
            .min(self.config.election_timeout);
        let result: std::result::Result<Resp, WireError> =
            self.forward(to, op, &request, timeout).await.ok()?;
        result.ok()
    }

    /// Sends a request to broker `to` and decodes its answer, waiting at most `timeout`.
    pub(super) async fn forward<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        to: NodeId,
        op: Op,
        request: &Req,
        timeout: Duration,
    ) -> Result<std::result::Result<Resp, WireError>> {
        let unreachable = |reason: String| Error::NoBrokerReachable {
            tried: format!("broker {to} ({reason})"),
        };
        let peer = self
            .peers
            .get(to, true)
            .ok_or_else(|| unreachable("not a peer".into()))?;
        let body = crate::protocol::encode(request).map_err(|e| unreachable(e.to_string()))?;
        let bytes = self
            .peers
            .call(&peer, to, op, body, timeout)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        postcard::from_bytes(&bytes).map_err(|e| unreachable(format!("bad answer: {e}")))
    }

    /// The command that creates the topic `request` names, with its replicas placed, or why
    /// it cannot be created: a name no topic can have, a partition count or replication factor
    /// out of range, a name taken. The metadata leader applies the same checks again.
    pub(crate) fn plan_topic(&self, request: &CreateTopicRequest) -> Result<MetaCommand> {
        check_topic_name(&request.name).map_err(|reason| Error::InvalidTopic { reason })?;
        if request.partitions == 0 || request.partitions > PARTITIONS_MAX {
            return Err(Error::InvalidPartitionCount {
                requested: request.partitions,
                max: PARTITIONS_MAX,
            });
        }
        let catalog = self.catalog.read();
        if catalog.topic(&request.name).is_some() {
            return Err(Error::TopicExists(request.name.clone()));
        }
        let brokers = catalog.placement_brokers();
        let factor = request.replication_factor;
        if !request.assignment.is_empty() {
            check_replica_assignment(&request.assignment, &brokers)?;
        } else if factor == 0 || factor as usize > brokers.len() {
            return Err(Error::InvalidReplicationFactor {
                requested: factor,
                brokers: u32::try_from(brokers.len()).unwrap_or(u32::MAX),
            });
        }
        let created = catalog.created();
        let assignment = if request.assignment.is_empty() {
            catalog
                .place(request.partitions, factor as usize, created)
                .map_err(|reason| Error::InvalidTopic { reason })?
        } else {
            request.assignment.clone()
        };
        self.check_topic_configs(&request.configs)?;
        let name = request.name.clone();
        Ok(if request.configs.is_empty() {
            MetaCommand::CreateTopic { name, assignment }
        } else {
            MetaCommand::CreateTopicWithConfigs {
                name,
                assignment,
                configs: request.configs.clone(),
            }
        })
    }

    /// Creates a topic through the metadata Raft group: proposed here when this broker leads it,
    /// otherwise forwarded (once) to its leader.
    pub(crate) async fn create_topic(&self, request: CreateTopicRequest) -> Result<()> {
        let command = self.plan_topic(&request)?;
        self.meta_command(command, request.forwarded, Op::CreateTopic, &request)
            .await
            .map_err(|e| {
                e.into_error(
                    || Error::UnknownTopic(request.name.clone()),
                    || Error::TopicExists(request.name.clone()),
                )
            })
    }

    /// Deletes a created topic through the metadata Raft group (see
    /// [`create_topic`](Self::create_topic)).
    pub(crate) async fn delete_topic(&self, request: DeleteTopic) -> Result<()> {
        let unknown = || Error::UnknownTopic(request.name.clone());
        match self.catalog.read().topic(&request.name) {
            None => return Err(unknown()),
            Some(t) if t.id == CONFIGURED_TOPIC_ID => {
                return Err(Error::InvalidTopic {
                    reason: format!(
                        "topic {} is configured on the brokers and cannot be deleted",
                        request.name
                    ),
                });
            }
            Some(_) => {}
        }
        let command = MetaCommand::DeleteTopic {
            name: request.name.clone(),
        };
        let forwarded = request.forwarded;
        let body = DeleteTopicRequest {
            name: request.name.clone(),
            forwarded,
        };
        self.meta_command(command, forwarded, Op::DeleteTopic, &body)
            .await
            .map_err(|e| e.into_error(unknown, || Error::TopicExists(request.name.clone())))
    }

    /// Commits `command` in the metadata log and answers once the metadata leader has applied
    /// it: on the leader directly; elsewhere by forwarding `request` (marked as forwarded) to
    /// the leader, unless it was forwarded already (a broker that forwarded applies it a
    /// moment later, as every broker does).
    pub(super) async fn meta_command<Req: Serialize + Clone + Forwardable>(
        &self,
        command: MetaCommand,
        forwarded: bool,
        op: Op,
        request: &Req,
    ) -> std::result::Result<(), MetaError> {
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        // Wait (boundedly) for the metadata Raft group to have a leader.
        let leader = loop {
            if let Some(leader) = self.meta.raft.leader() {
                break leader;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MetaError::Failed(Error::TryAgain {
                    partition: self.meta.id.clone(),
                    reason: "the metadata Raft group has no leader yet".into(),
                }));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if leader != self.config.id {
            if forwarded {
                return Err(MetaError::Failed(Error::NotLeader {
                    partition: self.meta.id.clone(),
                    leader: None,
                }));
            }
            let answer: std::result::Result<(), WireError> = self
                .forward(
                    leader,
                    op,
                    &request.clone().forwarded(),
                    deadline.saturating_duration_since(tokio::time::Instant::now()),
                )
                .await
                .map_err(MetaError::Failed)?;
            return answer.map_err(|e| MetaError::Failed(e.into_error(&self.meta.id, 0)));
        }
        self.check_proposal_version(&command)
            .map_err(MetaError::Failed)?;
        let value = postcard::to_stdvec(&command)
            .map_err(|e| MetaError::Failed(Error::Remote(e.to_string())))?;
        let (records, record_count) = encode_records(&[Record::new(value)], META_RECORD_BYTES_MAX)
            .map_err(MetaError::Failed)?;
        let append = AppendRequest {
            format: crate::segment::format::PayloadFormat::Replog,
            compacted: false,
            timestamp_ms: 0,
            records,
            record_count,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let info = self
            .append_to(&self.meta, append, None)
            .await
            .map_err(MetaError::Failed)?;
        let offset = info.base_offset.get();
        let mut applied = self.catalog_applied.subscribe();
        let waited =
            tokio::time::timeout_at(deadline, applied.wait_for(|next| *next > offset)).await;
        if !matches!(waited, Ok(Ok(_))) {
            return Err(MetaError::Failed(Error::Indeterminate {
                partition: self.meta.id.clone(),
                reason: "committed, but not applied here in time".into(),
            }));
        }
        match self.catalog.read().outcome(offset) {
            Some(Ok(())) => Ok(()),
            Some(Err(refused)) => Err(MetaError::Refused(refused)),
            None => Err(MetaError::Failed(Error::Indeterminate {
                partition: self.meta.id.clone(),
                reason: "the outcome is no longer remembered".into(),
            })),
        }
    }

    /// Waits, within the request timeout, for this broker's catalog to satisfy `applied`
    /// (whether it did): a command forwarded to the metadata leader is applied here a moment
    /// after the leader answered, and a client that reads back what it changed expects it.
    pub(crate) async fn until_catalog(
        &self,
        applied: impl Fn(&crate::catalog::Catalog) -> bool,
    ) -> bool {
        self.until_catalog_within(self.config.request_timeout, applied)
            .await
    }

    /// [`until_catalog`](Self::until_catalog) for at most `within`.
    pub(crate) async fn until_catalog_within(
        &self,
        within: std::time::Duration,
        applied: impl Fn(&crate::catalog::Catalog) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let mut changes = self.catalog_applied.subscribe();
        // Bounded by the deadline; each turn waits for the catalog to apply more.
        loop {
            if applied(&self.catalog.read()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    /// Applies the metadata records committed since the last call to the catalog.
    pub(super) fn catch_up_catalog(&self) -> Result<bool> {
        let mut progressed = false;
        // Bounded: each round consumes at least one record or stops.
        loop {
            let next = self.catalog.read().next_offset();
            let batches = read_committed(&self.meta, Offset(next), 1 << 20)?;
            if batches.is_empty() {
                return Ok(progressed);
            }
            let mut catalog = self.catalog.write();
            let mut refused = None;
            'batches: for batch in &batches {
                for (offset, record) in batch.records() {
                    if offset.get() < catalog.next_offset() {
                        continue;
                    }
                    let command = postcard::from_bytes::<MetaCommand>(&record.value).ok();
                    // Not skipped: a broker that skipped a record it does not understand would
                    // run on a catalog the others do not have.
                    if let Err(e) = self.check_record_version(offset.get(), command.as_ref()) {
                        refused = Some(e);
                        break 'batches;
                    }
                    catalog.apply(offset.get(), command.as_ref());
                    if let Some(MetaCommand::RegisterBroker { id, .. }) = &command
                        && let Some(addr) = catalog.broker_addr(*id)
                    {
                        self.peers.set_addr(*id, addr);
                    }
                    progressed = true;
                }
            }
            let next = catalog.next_offset();
            drop(catalog);
            self.catalog_applied.send_replace(next);
            if let Some(e) = refused {
                return Err(e);
            }
        }
    }
}

/// Checks a replica assignment a client gave: every partition with the same number of
/// distinct brokers of the cluster.
pub(super) fn check_replica_assignment(
    assignment: &[Vec<NodeId>],
    brokers: &[NodeId],
) -> Result<()> {
    let bad = |reason: String| Err(Error::InvalidReplicaAssignment(reason));
    let factor = assignment.first().map_or(0, Vec::len);
    for (p, replicas) in assignment.iter().enumerate() {
        if replicas.len() != factor || factor == 0 {
            return bad(format!(
                "partition {p} has {} replicas, partition 0 {factor}",
                replicas.len()
            ));
        }
        let distinct: std::collections::BTreeSet<&NodeId> = replicas.iter().collect();
        if distinct.len() != replicas.len() {
            return bad(format!("partition {p} names a broker twice"));
        }
        if let Some(unknown) = replicas.iter().find(|b| !brokers.contains(b)) {
            return bad(format!(
                "partition {p}: broker {unknown} is not in the cluster"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
