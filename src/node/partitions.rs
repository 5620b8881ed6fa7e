//! Partitions added to a created topic (Kafka's CreatePartitions): placed as a new topic's
//! are, committed through the metadata Raft group, and started by the brokers assigned them as
//! the catalog applies the command (`replicas.rs`). And a partition's records deleted up to an
//! offset (Kafka's DeleteRecords): the new log start committed through the partition's own
//! Raft group, so that every replica agrees where its records start.

use super::Broker;
use super::metadata::MetaError;
use crate::catalog::{CONFIGURED_TOPIC_ID, MetaCommand, PARTITIONS_MAX, Refused};
use crate::error::{Error, Result};
use crate::protocol::ProposeRequest;
use crate::types::{LeaderHint, NodeId, Offset, PartitionId, Term};

/// How many times an addition is computed again when the topic changed first.
const ATTEMPTS: usize = 5;

/// Checks the brokers a client named for a topic's `added` new partitions, as Kafka checks
/// them (each refusal its INVALID_REPLICA_ASSIGNMENT): one list per new partition, each of
/// the topic's replication factor `factor`, of distinct brokers of the cluster.
fn check_added_replicas(
    assignment: &[Vec<NodeId>],
    added: u32,
    factor: usize,
    brokers: &[NodeId],
) -> Result<()> {
    if assignment.len() != added as usize {
        return Err(Error::InvalidReplicaAssignment(format!(
            "{added} partitions added, but {} assignments given",
            assignment.len()
        )));
    }
    if let Some((p, replicas)) = assignment
        .iter()
        .enumerate()
        .find(|(_, r)| r.len() != factor)
    {
        return Err(Error::InvalidReplicaAssignment(format!(
            "new partition {p} has {} replicas; the topic's replication factor is {factor}",
            replicas.len()
        )));
    }
    super::metadata::check_replica_assignment(assignment, brokers)
}

/// How long a broker waits for its copy of the metadata to learn a topic it is asked to
/// change and does not know, before it answers that the topic is unknown.
const UNKNOWN_TOPIC_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Broker {
    /// Grows created topic `name` to `count` partitions, each with as many replicas as the
    /// topic's first (with `validate_only`, only checks that it could): on the brokers
    /// `assignment` names for each new partition (the preferred leader first), or, if it is
    /// empty, placed as a new topic's are.
    pub(crate) async fn create_partitions(
        &self,
        name: &str,
        count: u32,
        validate_only: bool,
        assignment: &[Vec<NodeId>],
    ) -> Result<()> {
        let mut attempt = 0;
        // Bounded by ATTEMPTS.
        loop {
            attempt += 1;
            let command = match self.plan_partitions(name, count, assignment) {
                // A topic created through another broker a moment ago: this broker's copy
                // of the metadata log learns it within a heartbeat or two.
                Err(Error::UnknownTopic(_))
                    if attempt == 1
                        && self
                            .until_catalog_within(UNKNOWN_TOPIC_WAIT, |c| c.topic(name).is_some())
                            .await =>
                {
                    continue;
                }
                planned => planned?,
            };
            if validate_only {
                return Ok(());
            }
            let request = ProposeRequest {
                command,
                forwarded: false,
            };
            match self.propose_command(request).await {
                // This broker's catalog has the change that came first once it waited for
                // the command's outcome.
                Err(MetaError::Refused(Refused::TopicChanged)) if attempt < ATTEMPTS => continue,
                Err(e) => {
                    return Err(e.into_error(
                        || Error::UnknownTopic(name.to_string()),
                        || Error::TopicExists(name.to_string()),
                    ));
                }
                Ok(()) => return Ok(()),
            }
        }
    }

    /// The command that grows `name` to `count` partitions (on `assignment`'s brokers, if
    /// given), or why it cannot grow so.
    fn plan_partitions(
        &self,
        name: &str,
        count: u32,
        assignment: &[Vec<NodeId>],
    ) -> Result<MetaCommand> {
        let catalog = self.catalog.read();
        let t = catalog
            .topic(name)
            .ok_or_else(|| Error::UnknownTopic(name.to_string()))?;
        if t.id == CONFIGURED_TOPIC_ID {
            return Err(Error::InvalidTopic {
                reason: format!(
                    "topic {name} is configured on the brokers: its partitions are theirs"
                ),
            });
        }
        let current = u32::try_from(t.assignment.len()).unwrap_or(u32::MAX);
        if count <= current {
            return Err(Error::PartitionsNotAdded {
                topic: name.to_string(),
                current,
                requested: count,
            });
        }
        if count > PARTITIONS_MAX {
            return Err(Error::InvalidPartitionCount {
                requested: count,
                max: PARTITIONS_MAX,
            });
        }
        let factor = t.assignment.first().map_or(1, Vec::len);
        let brokers = catalog.placement_brokers();
        let added = if assignment.is_empty() {
            // Placed as a topic of `count` partitions created now would be; the new ones take
            // their places in that layout.
            let layout = catalog
                .place(count, factor, t.id)
                .map_err(|reason| Error::InvalidTopic { reason })?;
            layout.get(current as usize..).unwrap_or_default().to_vec()
        } else {
            check_added_replicas(assignment, count - current, factor, &brokers)?;
            assignment.to_vec()
        };
        Ok(MetaCommand::AddPartitions {
            name: name.to_string(),
            topic_id: t.id,
            from: current,
            assignment: added,
        })
    }

    /// Deletes the records of partition `id` before `before` (`None`: all it has committed)
    /// on every replica: the new log start is committed through the partition's Raft group, on its
    /// leader (elsewhere `NotLeader`, with the leader where this broker knows it); reads below it
    /// are out of range at once, and the segments below it are removed by the next retention pass.
    /// Returns the log start after it (never moved back).
    pub(crate) async fn delete_records(
        &self,
        id: &PartitionId,
        before: Option<u64>,
    ) -> Result<Offset> {
        let replica = self.replica(id)?;
        // Asked of the leader only: a follower's high watermark may lag the leader's, and the
        // new start is the leader's to commit.
        let state = replica.raft.state();
        if state.leader != Some(self.config.id) {
            let leader = state.leader.and_then(|node_id| {
                Some(LeaderHint {
                    node_id,
                    addr: self.broker_addr(node_id)?,
                    term: Term(state.term),
                })
            });
            return Err(Error::NotLeader {
                partition: id.clone(),
                leader,
            });
        }
        let high_watermark = replica.committed_end();
        let target = before.unwrap_or(high_watermark.get());
        if target > high_watermark.get() {
            return Err(Error::OffsetOutOfRange {
                requested: Offset(target),
                start: replica.log_start(),
                end: high_watermark,
            });
        }
        let command = crate::raft::storage::log_start_command(target);
        self.commit(&replica, command, None).await?;
        Ok(replica.log_start())
    }
}
