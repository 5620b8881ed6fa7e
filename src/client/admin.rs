//! The cluster's administration through a [`Client`]: describing a topic's partitions
//! ([`PartitionDescription`]), creating and deleting topics, reassigning a partition, listing
//! brokers and topics, and the retry rule all admin requests share (`admin`).

use crate::Address;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{Client, elapsed_ms, jitter};
use crate::error::{Error, Result};
use crate::protocol::{
    CreateTopicRequest, DeleteTopicRequest, MetadataRequest, MetadataResponse, PartitionMetadata,
    ReassignRequest, WireError,
};
use crate::transport::CallError;
use crate::transport::frame::Op;
use crate::types::{NodeId, Offset, PartitionId};

/// A partition moving to other brokers ([`Client::list_reassignments`]), as Kafka's
/// ListPartitionReassignments describes one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Reassignment {
    /// The partition.
    pub partition: PartitionId,
    /// Every broker holding a replica while it moves: those it moves to (the preferred
    /// leader first), then those it leaves.
    pub replicas: Vec<NodeId>,
    /// The brokers it moves to that it was not on.
    pub adding: Vec<NodeId>,
    /// The brokers it leaves.
    pub removing: Vec<NodeId>,
}

/// One of the cluster's brokers ([`Client::describe_brokers`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct BrokerDescription {
    /// Its id.
    pub id: NodeId,
    /// Its address for peers and native clients, as registered (or configured).
    pub addr: Option<String>,
    /// Its Kafka listener's advertised address, if it registered one.
    pub kafka_addr: Option<String>,
    /// Its rack, if it named one.
    pub rack: Option<String>,
    /// Whether it is leaving the cluster.
    pub state: BrokerState,
    /// The partition replicas it holds (assigned, or still leaving it).
    pub replicas: u32,
    /// The partitions it is the preferred leader of.
    pub preferred: u32,
    /// The partitions it leads now.
    pub leaders: u32,
    /// How many log entries its replicas are behind their leaders, summed over them (0 once
    /// it has caught up everywhere; a broker that was down, or just given replicas, has lag).
    pub lag: u64,
    /// Its replicas outside their partition's in-sync set (behind, unheard from, or of a
    /// partition with no leader).
    pub out_of_sync: u32,
}

/// Where a broker is in its life in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum BrokerState {
    /// Serving, and given new replicas.
    Active,
    /// Decommissioned: its replicas are moving to the others, and it is given no new ones.
    Draining,
}

impl std::fmt::Display for BrokerDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            BrokerState::Active => "active",
            BrokerState::Draining => "draining",
        };
        write!(
            f,
            "Broker: {}\tAddress: {}\tKafka: {}\tRack: {}\tState: {state}\tReplicas: {}\tPreferred: {}\tLeaders: {}\tLag: {}\tOut of sync: {}",
            self.id,
            self.addr.as_deref().unwrap_or("-"),
            self.kafka_addr.as_deref().unwrap_or("-"),
            self.rack.as_deref().unwrap_or("-"),
            self.replicas,
            self.preferred,
            self.leaders,
            self.lag,
            self.out_of_sync
        )
    }
}

/// How one partition looks: `Topic: t  Partition: 0  Leader: 1  Replicas: 1,2,3  Isr: 1,2,3`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionDescription {
    /// The partition.
    pub partition: PartitionId,
    /// Its leader, if one is elected.
    pub leader: Option<NodeId>,
    /// The leader's term.
    pub term: u64,
    /// Brokers holding a replica.
    pub replicas: Vec<NodeId>,
    /// Replicas caught up with the leader.
    pub isr: Vec<NodeId>,
    /// First offset in the leader's log.
    pub log_start: Offset,
    /// The committed end of the partition.
    pub high_watermark: Offset,
}

impl std::fmt::Display for PartitionDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |ids: &[NodeId]| {
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let leader = self.leader.map_or("none".to_string(), |l| l.to_string());
        write!(
            f,
            "Topic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
            self.partition.topic,
            self.partition.partition,
            leader,
            list(&self.replicas),
            list(&self.isr)
        )
    }
}

impl Client {
    /// Describes a topic's partitions as their leaders see them.
    ///
    /// # Errors
    ///
    /// [`Error::NoBrokerReachable`]; [`Error::UnknownTopic`].
    pub async fn describe(&self, topic: &str) -> Result<Vec<PartitionDescription>> {
        let meta = self.refresh(Some(topic)).await?;
        if meta.partitions.is_empty() {
            return Err(Error::UnknownTopic(topic.to_string()));
        }
        // The leader knows who is in sync: each leader that is not the broker that answered is
        // asked once, for the partitions it leads.
        let mut leaders: std::collections::BTreeMap<Address, Vec<usize>> = Default::default();
        for (i, p) in meta.partitions.iter().enumerate() {
            if let Some(addr) = self.leader_addr(&p.partition)
                && p.leader != Some(meta.broker)
            {
                leaders.entry(addr).or_default().push(i);
            }
        }
        let mut from_leaders: Vec<Option<PartitionMetadata>> = vec![None; meta.partitions.len()];
        for (addr, led) in leaders {
            let request = MetadataRequest {
                topic: Some(topic.to_string()),
                local_only: false,
            };
            let Ok(Ok(answer)) = self
                .call::<_, MetadataResponse>(&addr, Op::Metadata, &request)
                .await
            else {
                continue; // what the first broker said stands
            };
            for i in led {
                let partition = &meta.partitions[i].partition;
                from_leaders[i] = answer
                    .partitions
                    .iter()
                    .find(|q| &q.partition == partition)
                    .cloned();
            }
        }
        Ok(meta
            .partitions
            .iter()
            .zip(&from_leaders)
            .map(|(p, from_leader)| describe(from_leader.as_ref().unwrap_or(p)))
            .collect())
    }

    /// Waits until every partition of `topic` has a leader, as the brokers' metadata names
    /// it, so that writes to it are taken (Kafka clients wait on metadata the same way); a
    /// topic still being created is waited for too.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if some partition has no leader, or the topic is unknown, when
    /// `timeout` passes (the error says which).
    pub async fn wait_ready(&self, topic: &str, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        // Bounded by the timeout.
        loop {
            let last = match self.refresh(Some(topic)).await {
                Ok(meta) if meta.partitions.is_empty() => format!("unknown topic {topic}"),
                Ok(meta) => match meta.partitions.iter().find(|p| p.leader.is_none()) {
                    None => return Ok(()),
                    Some(p) => format!("{} has no leader", p.partition),
                },
                Err(e) => e.to_string(),
            };
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    elapsed_ms: elapsed_ms(started),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates a topic of `partitions` partitions with `replication_factor` replicas each,
    /// spread over the brokers as Kafka spreads them, and waits (up to the delivery timeout)
    /// until every partition has a leader. Any broker takes the request: it forwards it to
    /// the metadata Raft group's leader.
    ///
    /// # Errors
    ///
    /// [`Error::TopicExists`]; [`Error::InvalidTopic`] (a bad name);
    /// [`Error::InvalidPartitionCount`] (0, or more than a topic may have);
    /// [`Error::InvalidReplicationFactor`] (0, or above the broker count);
    /// [`Error::NoBrokerReachable`];
    /// [`Error::Indeterminate`] if an attempt's outcome stayed unknown (the topic may exist);
    /// [`Error::Timeout`] if the partitions have no leader by the deadline (the topic exists).
    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: u32,
        replication_factor: u32,
    ) -> Result<()> {
        let configs = crate::topic_config::TopicConfigs::default();
        self.create_topic_with_configs(topic, partitions, replication_factor, &configs)
            .await
    }

    /// [`create_topic`](Self::create_topic) with `configs` set on the topic from the start
    /// (Kafka's `kafka-topics --create --config k=v`).
    ///
    /// # Errors
    ///
    /// As [`create_topic`](Self::create_topic), and [`Error::InvalidTopicConfig`] for a
    /// config the brokers refuse (a `max.message.bytes` above their `batch_bytes_max`).
    pub async fn create_topic_with_configs(
        &self,
        topic: &str,
        partitions: u32,
        replication_factor: u32,
        configs: &crate::TopicConfigs,
    ) -> Result<()> {
        let request = CreateTopicRequest {
            configs: configs.clone(),
            assignment: Vec::new(),
            name: topic.to_string(),
            partitions,
            replication_factor,
            forwarded: false,
        };
        let started = Instant::now();
        self.admin(Op::CreateTopic, &request, topic).await?;
        self.wait_for_leaders(topic, partitions, started).await
    }

    /// Grows created topic `topic` to `partitions` partitions (never fewer: a key's records
    /// keep their partition only while the count stays), each with as many replicas as its
    /// others, placed as a new topic's are, and waits (up to the delivery timeout) until every
    /// partition has a leader. Keyed records sent after it go by the new count, as Kafka's.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::PartitionsNotAdded`] for no more partitions than it
    /// has; [`Error::InvalidPartitionCount`] above the most a topic may have;
    /// [`Error::InvalidTopic`] for a topic configured on the brokers;
    /// [`Error::NoBrokerReachable`]; [`Error::Indeterminate`]; [`Error::Timeout`] if the new
    /// partitions have no leader by the deadline (they exist).
    pub async fn create_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        self.create_partitions_assigned(topic, partitions, &[])
            .await
    }

    /// [`create_partitions`](Self::create_partitions) with each new partition's brokers
    /// named (the preferred leader first), as Kafka's CreatePartitions assignments and
    /// `kafka-topics --alter --replica-assignment` name them: `assignments` holds one list per
    /// new partition, in order (empty: placed as a new topic's are).
    ///
    /// # Errors
    ///
    /// As [`create_partitions`](Self::create_partitions), and
    /// [`Error::InvalidReplicaAssignment`] for an assignment whose list count is not the
    /// number of partitions added, a list not of the topic's replication factor, a broker
    /// named twice in one list, or one the cluster does not have (nothing added).
    pub async fn create_partitions_assigned(
        &self,
        topic: &str,
        partitions: u32,
        assignments: &[Vec<NodeId>],
    ) -> Result<()> {
        let request = crate::protocol::CreatePartitionsRequest {
            name: topic.to_string(),
            count: partitions,
            validate_only: false,
            assignment: assignments.to_vec(),
        };
        let started = Instant::now();
        self.admin(Op::CreatePartitions, &request, topic).await?;
        self.wait_for_leaders(topic, partitions, started).await
    }

    /// Waits, until the delivery deadline counted from `started`, for `topic` to have
    /// `partitions` partitions, each with a leader.
    async fn wait_for_leaders(&self, topic: &str, partitions: u32, started: Instant) -> Result<()> {
        // Bounded by the delivery deadline.
        let deadline = started + self.config.delivery_timeout;
        let mut last = String::from("no leader yet");
        // A new partition is usually led within a few round trips: asked again soon at first.
        let mut pause = Duration::from_millis(5);
        loop {
            match self.refresh(Some(topic)).await {
                Ok(meta)
                    if meta.partitions.len() == partitions as usize
                        && meta.partitions.iter().all(|p| p.leader.is_some()) =>
                {
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => last = e.to_string(),
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    elapsed_ms: elapsed_ms(started),
                    last: format!("the partitions of {topic} exist; waiting for leaders: {last}"),
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Deletes a topic created with [`create_topic`](Self::create_topic): every broker stops
    /// its replicas and removes their data. Topics configured on the brokers cannot be
    /// deleted.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::InvalidTopic`] for a
    /// configured one; [`Error::NoBrokerReachable`].
    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        let request = DeleteTopicRequest {
            name: topic.to_string(),
            forwarded: false,
        };
        self.admin(Op::DeleteTopic, &request, topic).await?;
        self.forget_topic(topic);
        Ok(())
    }

    /// Sends an admin request to brokers in turn until one answers it. A broker that cannot
    /// reach the metadata leader, or finds no leader yet, makes the client try again (with
    /// backoff) until the delivery deadline.
    ///
    /// An attempt whose outcome is unknown (no answer after sending; the command committed
    /// but not confirmed in time) may have taken effect: if a later attempt is then refused
    /// as `TopicExists` or unknown topic, that refusal may be this very request's own doing,
    /// so the answer is [`Error::Indeterminate`], as it is at the deadline.
    pub(super) async fn admin<Req: Serialize>(
        &self,
        op: Op,
        request: &Req,
        topic: &str,
    ) -> Result<()> {
        self.admin_on(op, request, PartitionId::new(topic, 0)).await
    }

    /// [`admin`](Self::admin) about partition `id` (named in its errors).
    async fn admin_on<Req: Serialize>(&self, op: Op, request: &Req, id: PartitionId) -> Result<()> {
        let started = Instant::now();
        let deadline = started + self.config.delivery_timeout;
        let mut backoff = Duration::from_millis(100);
        let mut tried = Vec::new();
        let mut maybe_applied = false;
        let indeterminate = |tried: &[String], now: String| Error::Indeterminate {
            partition: id.clone(),
            reason: format!(
                "an earlier attempt may have taken effect ({}); now: {now}",
                tried.join(", ")
            ),
        };
        // Bounded by the deadline.
        loop {
            for addr in self.candidates() {
                match self.call::<_, ()>(&addr, op, request).await {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(
                        e @ (WireError::TopicExists(_)
                        | WireError::UnknownTopic
                        | WireError::NoReassignmentInProgress),
                    )) if maybe_applied => {
                        return Err(indeterminate(&tried, format!("{e:?}")));
                    }
                    Ok(Err(
                        e @ (WireError::TopicExists(_)
                        | WireError::InvalidTopic(_)
                        | WireError::InvalidPartitionCount { .. }
                        | WireError::InvalidReplicationFactor { .. }
                        | WireError::InvalidTopicConfig { .. }
                        | WireError::PartitionsNotAdded { .. }
                        | WireError::InvalidReplicaAssignment(_)
                        | WireError::ReassignmentInProgress
                        | WireError::NoReassignmentInProgress
                        | WireError::CannotDecommission { .. }
                        | WireError::UnknownPartition
                        | WireError::TopicAuthorizationFailed
                        | WireError::ClusterAuthorizationFailed
                        | WireError::AuthenticationFailed(_)
                        | WireError::UnknownTopic),
                    )) => return Err(e.into_error(&id, 0)),
                    // Refused before anything was proposed.
                    Ok(Err(e @ (WireError::TryAgain(_) | WireError::NotLeader { .. }))) => {
                        tried.push(format!("{addr} ({e:?})"));
                    }
                    Ok(Err(e)) => {
                        maybe_applied = true;
                        tried.push(format!("{addr} ({e:?})"));
                    }
                    Err(e @ CallError::Unreachable(_)) => tried.push(format!("{addr} ({e})")),
                    Err(e) => {
                        maybe_applied = true;
                        tried.push(format!("{addr} ({e})"));
                    }
                }
                // The last attempts are enough to say what happened.
                if tried.len() > 8 {
                    tried.remove(0);
                }
            }
            if Instant::now() >= deadline {
                if maybe_applied {
                    return Err(indeterminate(&tried, "delivery deadline passed".into()));
                }
                return Err(Error::NoBrokerReachable {
                    tried: tried.join(", "),
                });
            }
            tokio::time::sleep(jitter(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
            if !maybe_applied {
                tried.clear();
            }
        }
    }

    /// Moves partition `partition` of a created topic to the brokers `replicas` (the first is
    /// its preferred leader), as Kafka's partition reassignment does. Returns once the move is
    /// recorded in the metadata log; the partition's leader then adds the new replicas, lets
    /// them copy the log, and changes the Raft group's voters, after which the brokers it left
    /// remove their replicas. [`describe`](Self::describe) shows the new replicas at once
    /// and the in-sync ones as they catch up.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::InvalidTopic`] for a
    /// configured topic, a partition or broker that does not exist, a broker named twice, or
    /// a partition that is still moving; [`Error::NoBrokerReachable`];
    /// [`Error::Indeterminate`] if an attempt's outcome stayed unknown.
    pub async fn reassign_partition(
        &self,
        topic: &str,
        partition: u32,
        replicas: &[NodeId],
    ) -> Result<()> {
        let request = ReassignRequest {
            topic: topic.to_string(),
            partition,
            replicas: replicas.to_vec(),
        };
        let id = PartitionId::new(topic, partition);
        self.admin_on(Op::Reassign, &request, id).await
    }

    /// The cluster's brokers, each with its addresses, its state (leaving or not), and the
    /// replicas it holds, is preferred for and leads.
    ///
    /// # Errors
    ///
    /// [`Error::ClusterAuthorizationFailed`] without DESCRIBE on the cluster;
    /// [`Error::NoBrokerReachable`].
    pub async fn describe_brokers(&self) -> Result<Vec<BrokerDescription>> {
        self.ask_any(Op::Brokers, &crate::protocol::BrokersRequest::Describe)
            .await
    }

    /// Decommissions broker `id`: every partition it is on moves to the other brokers (each
    /// keeping its replication factor; the broker's leaderships are handed over first), no
    /// new replica goes to it, and once it holds none it leaves the metadata Raft group and the
    /// cluster; then it can stop with no partition under-replicated.
    /// [`describe_brokers`](Self::describe_brokers) shows it draining, with the replicas it
    /// has left, until it is gone. Returns once the moves are recorded; asking again is
    /// harmless.
    ///
    /// # Errors
    ///
    /// [`Error::CannotDecommission`] where the other brokers cannot hold a partition's
    /// replicas, a partition on it is moving, or it holds a topic configured on the brokers
    /// (nothing is moved then); [`Error::ClusterAuthorizationFailed`] without ALTER on the
    /// cluster; [`Error::NoBrokerReachable`].
    pub async fn decommission_broker(&self, id: NodeId) -> Result<()> {
        let request = crate::protocol::BrokersRequest::Decommission { id };
        self.admin(Op::Brokers, &request, crate::catalog::METADATA_TOPIC)
            .await
    }

    /// Takes back the move of partition `partition` of `topic` under way (as Kafka's
    /// AlterPartitionReassignments with null replicas): the partition goes back to the
    /// replicas it had before, and the brokers the move added drop theirs.
    ///
    /// # Errors
    ///
    /// [`Error::NoReassignmentInProgress`] if the partition is not moving;
    /// [`Error::UnknownTopic`] / [`Error::UnknownPartition`];
    /// [`Error::ClusterAuthorizationFailed`] without ALTER on the cluster;
    /// [`Error::NoBrokerReachable`].
    pub async fn cancel_reassignment(&self, topic: &str, partition: u32) -> Result<()> {
        let request = ReassignRequest {
            topic: topic.to_string(),
            partition,
            replicas: Vec::new(),
        };
        let id = PartitionId::new(topic, partition);
        self.admin_on(Op::Reassign, &request, id).await
    }

    /// The partitions moving now (Kafka's ListPartitionReassignments), of `topics` only if
    /// given, as the answering broker's copy of the metadata log has them.
    ///
    /// # Errors
    ///
    /// [`Error::ClusterAuthorizationFailed`] without DESCRIBE on the cluster;
    /// [`Error::NoBrokerReachable`].
    pub async fn list_reassignments(&self, topics: Option<&[&str]>) -> Result<Vec<Reassignment>> {
        let request = crate::protocol::ListReassignmentsRequest {
            topics: topics.map(|t| t.iter().map(|t| (*t).to_string()).collect()),
        };
        self.ask_any(Op::ListReassignments, &request).await
    }

    /// Hands each partition's leadership to its preferred replica (the first of its
    /// replicas), as Kafka's preferred-leader election (`kafka-leader-election
    /// --election-type PREFERRED`) does, by a Raft leadership transfer: no election timeout is
    /// paid, and a replica that does not hold every entry is not made leader. `partitions`:
    /// the partitions to move, `None` for every partition of every topic. Returns each
    /// partition's outcome; a broker that leads several does them a few at a time.
    ///
    /// # Errors
    ///
    /// [`Error::ClusterAuthorizationFailed`] without ALTER on the cluster;
    /// [`Error::NoBrokerReachable`].
    ///
    /// ```no_run
    /// # async fn run(client: &replog::Client) -> replog::Result<()> {
    /// for (partition, outcome) in client.elect_leaders(None).await? {
    ///     println!("{partition}: {outcome:?}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn elect_leaders(
        &self,
        partitions: Option<&[PartitionId]>,
    ) -> Result<Vec<(PartitionId, crate::Election)>> {
        let request = crate::protocol::ElectLeadersRequest {
            partitions: partitions.map(<[PartitionId]>::to_vec),
            forwarded: false,
        };
        self.ask_any(Op::ElectLeaders, &request).await
    }

    /// Deletes partition `partition` of `topic`'s records before offset `before` on every
    /// replica (Kafka's DeleteRecords, `kafka-delete-records`): the partition's leader commits
    /// the new log start through the partition's Raft group, reads below it are out of range from
    /// then on, and the segments wholly below it are removed by the brokers' next retention
    /// pass. Returns the partition's log start after it (never moved back: an offset below
    /// the current start changes nothing). Asked of the leader, following `NotLeader` hints (as
    /// [`send`](Self::send) does) until the delivery timeout; asking again is harmless.
    ///
    /// # Errors
    ///
    /// [`Error::OffsetOutOfRange`] for an offset past the high watermark (nothing deleted);
    /// [`Error::UnknownTopic`]; [`Error::UnknownPartition`];
    /// [`Error::TopicAuthorizationFailed`] without DELETE on the topic;
    /// [`Error::Timeout`] if no leader took it by the deadline.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: u32,
        before: Offset,
    ) -> Result<Offset> {
        let id = PartitionId::new(topic, partition);
        let request = crate::protocol::DeleteRecordsRequest {
            partition: id.clone(),
            before: Some(before.get()),
        };
        let started = Instant::now();
        let deadline = started + self.config.delivery_timeout;
        let mut backoff = Duration::from_millis(50);
        let mut hops = 0;
        let mut next: Option<Address> = None;
        let mut last = String::from("no leader known");
        // Bounded by the deadline.
        loop {
            if next.is_none() && self.leader_addr(&id).is_none() {
                let _ = self.refresh_for(Some(topic), Some(&id)).await;
            }
            let addr = next
                .take()
                .or_else(|| self.leader_addr(&id))
                .or_else(|| self.candidates().first().cloned());
            let Some(addr) = addr else {
                return Err(Error::NoBrokerReachable { tried: last });
            };
            match self
                .call::<_, u64>(&addr, Op::DeleteRecords, &request)
                .await
            {
                Ok(Ok(start)) => return Ok(Offset(start)),
                Ok(Err(WireError::NotLeader { leader })) => {
                    last = format!("{addr}: not the leader");
                    let hops_left = hops < self.config.redirect_hops_max;
                    match super::routing::redirect(&addr, self.cached_hint(&id), leader) {
                        super::routing::Redirect::Follow(h) if hops_left => {
                            hops += 1;
                            next = Some(h.addr.clone());
                            self.learn_leader(&id, h);
                            continue;
                        }
                        super::routing::Redirect::KeepCache(a) if hops_left => {
                            hops += 1;
                            next = Some(a);
                            continue;
                        }
                        _ => self.forget_leader(&id),
                    }
                }
                // Moving the start to the same offset again changes nothing: an attempt
                // whose outcome is unknown is simply asked again.
                Ok(Err(e @ (WireError::TryAgain(_) | WireError::Indeterminate(_)))) => {
                    last = format!("{addr}: {e:?}");
                }
                Ok(Err(e)) => return Err(e.into_error(&id, before.get())),
                Err(e) => {
                    last = format!("{addr}: {e}");
                    self.forget_leader(&id);
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    elapsed_ms: elapsed_ms(started),
                    last,
                });
            }
            tokio::time::sleep(jitter(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Every broker of the cluster and its address, as the metadata Raft group records them (a
    /// broker that came back on another address is named at the new one).
    ///
    /// # Errors
    ///
    /// [`Error::NoBrokerReachable`].
    pub async fn brokers(&self) -> Result<Vec<(NodeId, Address)>> {
        let meta = self.refresh(None).await?;
        Ok(meta
            .brokers
            .iter()
            .filter_map(|(id, addr)| Some((*id, addr.parse().ok()?)))
            .collect())
    }

    /// Every topic and its partition count, as the cluster reports it.
    ///
    /// # Errors
    ///
    /// [`Error::NoBrokerReachable`].
    pub async fn list_topics(&self) -> Result<Vec<(String, u32)>> {
        let meta = self.refresh(None).await?;
        let mut topics: Vec<(String, u32)> = Vec::new();
        for p in &meta.partitions {
            match topics.iter_mut().find(|(t, _)| *t == p.partition.topic) {
                Some((_, n)) => *n += 1,
                None => topics.push((p.partition.topic.clone(), 1)),
            }
        }
        Ok(topics)
    }

    /// How many partitions `topic` has, from cached metadata (fetched if not cached).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::NoBrokerReachable`].
    pub async fn partition_count(&self, topic: &str) -> Result<u32> {
        if let Some(n) = self.topics.lock().get(topic) {
            return Ok(*n);
        }
        self.refresh(Some(topic)).await?;
        self.topics
            .lock()
            .get(topic)
            .copied()
            .ok_or_else(|| Error::UnknownTopic(topic.to_string()))
    }
}

/// How `p` is described.
fn describe(p: &PartitionMetadata) -> PartitionDescription {
    let mut isr = p.isr.clone();
    isr.sort_unstable();
    PartitionDescription {
        partition: p.partition.clone(),
        leader: p.leader,
        term: p.term,
        replicas: p.replicas.clone(),
        isr,
        log_start: Offset(p.log_start),
        high_watermark: Offset(p.high_watermark),
    }
}
