//! The metadata log's commands: what a record of the metadata Raft group says (FORMAT.md §6.2
//! gives each variant byte by byte; `metadata_commands_are_pinned_byte_by_byte` pins them).

use serde::{Deserialize, Serialize};

use super::AclRecord;
use crate::TopicConfigs;
use crate::types::NodeId;

/// A command in the metadata log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum MetaCommand {
    /// Create a topic with this replica assignment (one broker list per partition, the
    /// preferred leader first). The proposer computes the assignment; applying it checks it.
    CreateTopic {
        name: String,
        assignment: Vec<Vec<NodeId>>,
    },
    /// Delete a created topic.
    DeleteTopic { name: String },
    /// Broker `id` serves at `addr` (a socket address): every broker sends it Raft traffic
    /// there, and metadata responses name it. Each broker registers itself when it starts
    /// wherever its address differs from the catalog's, so a broker that comes back on another
    /// address is found again without changing the others' configuration. With `join`, a
    /// broker the cluster does not have yet becomes one of its brokers (without, it is
    /// refused: a mistyped id must not add a broker nobody runs).
    RegisterBroker {
        id: NodeId,
        addr: String,
        join: bool,
    },
    /// Move a created topic's partition to `replicas` (Kafka's partition reassignment). The
    /// brokers it leaves keep their replica until [`ReassignDone`](Self::ReassignDone): the
    /// partition's leader adds the new replicas as learners, changes the Raft group's voters to
    /// `replicas`, and then proposes that.
    ReassignPartition {
        name: String,
        partition: u32,
        replicas: Vec<NodeId>,
    },
    /// The Raft group of partition `partition` of topic `topic_id` has exactly `replicas` as its
    /// voters: the brokers it left may drop their replicas.
    ReassignDone {
        topic_id: u64,
        partition: u32,
        replicas: Vec<NodeId>,
    },
    /// Broker `id` serves Kafka's clients at `addr` (its advertised Kafka address): every
    /// broker's Kafka metadata names it there. Each broker with a Kafka listener registers it
    /// when it starts wherever it differs from the catalog's.
    RegisterKafka { id: NodeId, addr: String },
    /// Broker `broker` takes the next `count` producer ids (at most [`PRODUCER_ID_BLOCK_MAX`])
    /// to hand out to producers (Kafka's InitProducerId): no other block ever holds them, so
    /// no two producers of the cluster share an id. `tag`, a random number, tells the broker
    /// which block is the one it asked for (not one it took before a restart, replayed later).
    AllocateProducerIds {
        broker: NodeId,
        count: u64,
        tag: u64,
    },
    /// User `user` logs in with SCRAM mechanism `mechanism` (Kafka's code: 1 SHA-256, 2
    /// SHA-512) by this credential, replacing any it had for the mechanism: a salt, an
    /// iteration count and the two keys the password derives (never the password).
    PutScramCredential {
        user: String,
        mechanism: u8,
        salt: Vec<u8>,
        iterations: u32,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
    },
    /// User `user` no longer logs in with SCRAM mechanism `mechanism`.
    DeleteScramCredential { user: String, mechanism: u8 },
    /// Adds these ACL bindings (those present already stay as they are).
    CreateAcls { acls: Vec<AclRecord> },
    /// Removes these ACL bindings (a broker resolves a delete's filters to the bindings its
    /// catalog holds before it proposes, so every broker removes exactly the same).
    DeleteAcls { acls: Vec<AclRecord> },
    /// [`CreateTopic`](Self::CreateTopic), with configs set on the topic from the start.
    CreateTopicWithConfigs {
        name: String,
        assignment: Vec<Vec<NodeId>>,
        configs: TopicConfigs,
    },
    /// The topic `name` has exactly `configs` set, if its configs are still those of
    /// `version` (the count of config changes it had when the proposer read them): a change
    /// computed from configs another change has since replaced is refused, and its proposer
    /// computes it again, so two changes made at once never lose one another.
    SetTopicConfigs {
        name: String,
        version: u64,
        configs: TopicConfigs,
    },
    /// Topic `name` (of id `topic_id`, with `from` partitions) grows by `assignment`'s
    /// partitions (their brokers, the preferred leader first), numbered from `from`. Refused
    /// if the topic is another by now, or grew meanwhile (its proposer computes it again).
    AddPartitions {
        name: String,
        topic_id: u64,
        from: u32,
        assignment: Vec<Vec<NodeId>>,
    },
    /// Take back the reassignment of partition `partition` of `name` in progress (Kafka's
    /// AlterPartitionReassignments with null replicas): the partition goes back to the
    /// replicas it had, the brokers the move added leaving it as those it removed would have.
    CancelReassignment { name: String, partition: u32 },
    /// Broker `id` leaves the cluster: every partition it holds a replica of moves to the
    /// others (each keeping its replication factor: the broker's place goes to the broker
    /// holding the fewest replicas among those the partition is not on), and no new replica
    /// is placed on it. Refused where the others cannot hold a partition's replicas, where a
    /// partition it is on is moving, and for a topic configured on the brokers.
    DecommissionBroker { id: NodeId },
    /// Broker `id`, decommissioned, holds no replica any more: it is no longer one of the
    /// cluster's brokers (nor named in metadata). Proposed by the metadata leader once it has
    /// taken the broker out of the metadata Raft group.
    RemoveBroker { id: NodeId },
    /// Broker `id` runs in rack `rack` (`None`: no rack named). Each broker registers its rack
    /// when it starts wherever it differs from the catalog's.
    RegisterRack { id: NodeId, rack: Option<String> },
    /// Every broker of the cluster speaks protocol version `version` (see `version.rs`):
    /// records of that version may be written from now on. Proposed by the metadata leader
    /// once each registered broker speaks it over a live connection; never lowers the
    /// finalized version (protocol version 2).
    FinalizeVersion { version: u16 },
}

impl MetaCommand {
    /// The protocol version that brought the command in: none is proposed before the cluster
    /// finalized it, and a broker pinned below it refuses to apply it.
    pub(crate) fn since(&self) -> u16 {
        match self {
            MetaCommand::FinalizeVersion { .. } => 2,
            _ => 1,
        }
    }
}
