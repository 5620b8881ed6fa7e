//! The group requests a broker serves and their answers, as the broker service takes them
//! (and as the native wire carries them, postcard-encoded in an `Op::Group` frame). Their
//! fields and meanings are those of Kafka's requests of the same names, so that a Kafka codec
//! maps onto them field by field.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::GroupError;
use crate::types::NodeId;

/// A group request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum GroupRequest {
    /// Which broker coordinates `group`: answered `Result<Coordinator, GroupError>`.
    FindCoordinator { group: String },
    /// Answered `Result<JoinReply, GroupError>` once the rebalance completes.
    Join(JoinGroup),
    /// Answered `Result<Bytes, GroupError>`: the member's assignment.
    Sync(SyncGroup),
    /// Answered `Result<(), GroupError>`.
    Heartbeat {
        group: String,
        generation: i32,
        member_id: String,
        /// A static member's `group.instance.id`.
        group_instance_id: Option<String>,
    },
    /// Answered `Result<(), GroupError>`. A static member may be named by its
    /// `group_instance_id` alone (an empty `member_id`).
    Leave {
        group: String,
        member_id: String,
        group_instance_id: Option<String>,
    },
    /// Answered `Result<Vec<PartitionResult>, GroupError>`.
    Commit(OffsetCommit),
    /// Answered `Result<Vec<CommittedOffset>, GroupError>`; every committed partition when
    /// `partitions` is `None`.
    FetchOffsets {
        group: String,
        partitions: Option<Vec<(String, u32)>>,
    },
    /// The groups this broker coordinates: answered `Vec<GroupListing>`.
    List,
    /// Answered `Result<GroupDescription, GroupError>`.
    Describe { group: String },
    /// Deletes a group without members and its committed offsets (Kafka's DeleteGroups, one
    /// group): answered `Result<(), GroupError>`.
    Delete { group: String },
    /// Deletes committed offsets of a group (Kafka's OffsetDelete): answered
    /// `Result<Vec<PartitionResult>, GroupError>`.
    DeleteOffsets {
        group: String,
        partitions: Vec<(String, u32)>,
    },
}

/// A group's coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Coordinator {
    pub(crate) node: NodeId,
    pub(crate) addr: String,
}

/// Kafka's JoinGroup.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct JoinGroup {
    pub(crate) group: String,
    /// Empty on a member's first join.
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) session_timeout_ms: u32,
    pub(crate) rebalance_timeout_ms: u32,
    pub(crate) protocol_type: String,
    /// Protocol names and the member's subscription for each, preferred first.
    pub(crate) protocols: Vec<(String, Bytes)>,
    /// A first join is answered [`JoinReply::MemberIdRequired`] (Kafka's JoinGroup v4+),
    /// unless it is a static member's.
    pub(crate) require_known_member_id: bool,
    /// A static member's `group.instance.id` (Kafka's JoinGroup v5+): it keeps its place in
    /// the group when it comes back within its session (see `group/state/static_member.rs`).
    pub(crate) group_instance_id: Option<String>,
}

/// The member a Heartbeat or LeaveGroup speaks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MemberRef {
    /// Empty in a LeaveGroup that names a static member by its instance id alone.
    pub(crate) member_id: String,
    /// A static member's `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
}

/// What a JoinGroup gets when it is not refused.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum JoinReply {
    /// The rebalance completed.
    Joined(JoinAnswer),
    /// Join again with this member id (Kafka's `MEMBER_ID_REQUIRED`, 79, with the id).
    MemberIdRequired(String),
}

/// JoinGroup's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct JoinAnswer {
    pub(crate) generation: i32,
    pub(crate) protocol: String,
    pub(crate) leader: String,
    pub(crate) member_id: String,
    /// For the leader: every member's id and subscription.
    pub(crate) members: Vec<(String, Bytes)>,
}

/// Kafka's SyncGroup.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SyncGroup {
    pub(crate) group: String,
    pub(crate) generation: i32,
    pub(crate) member_id: String,
    /// The leader's assignment of every member (empty from the others).
    pub(crate) assignments: Vec<(String, Bytes)>,
    /// A static member's `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
}

/// Kafka's OffsetCommit. A negative generation with an empty member id commits for a group
/// with no members.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct OffsetCommit {
    pub(crate) group: String,
    pub(crate) generation: i32,
    pub(crate) member_id: String,
    pub(crate) offsets: Vec<CommitOffset>,
    /// A static member's `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
}

/// One partition's offset to commit: the offset of the next record to consume.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CommitOffset {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    /// `None` deletes the committed offset (a reset to "nothing committed").
    pub(crate) offset: Option<u64>,
    pub(crate) metadata: String,
    /// The committer's leader epoch of the partition (Kafka's `committed_leader_epoch`),
    /// kept with the offset and answered by OffsetFetch.
    pub(crate) leader_epoch: Option<i32>,
}

/// One partition's outcome in a commit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PartitionResult {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    pub(crate) error: Option<GroupError>,
}

/// A committed offset, as OffsetFetch answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommittedOffset {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    /// `None`: nothing committed.
    pub(crate) offset: Option<u64>,
    pub(crate) metadata: String,
    /// The leader epoch committed with the offset, if the committer named one.
    pub(crate) leader_epoch: Option<i32>,
    /// Why the partition is not answered (its topic is not the client's to describe).
    pub(crate) error: Option<GroupError>,
}

/// A group in ListGroups' answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct GroupListing {
    pub(crate) group: String,
    pub(crate) protocol_type: String,
    pub(crate) state: String,
}

/// DescribeGroups' answer for one group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct GroupDescription {
    pub(crate) group: String,
    /// Kafka's state name; "Dead" for a group the coordinator does not know.
    pub(crate) state: String,
    pub(crate) protocol_type: String,
    pub(crate) protocol: String,
    pub(crate) generation: i32,
    pub(crate) members: Vec<MemberDescription>,
}

/// A member in [`GroupDescription`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct MemberDescription {
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) metadata: Bytes,
    pub(crate) assignment: Bytes,
    /// A static member's `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
}
