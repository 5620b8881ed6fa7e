//! Consumer groups, as Kafka's classic group protocol defines them: members join a group,
//! one of them (the leader) assigns the subscribed partitions, every member heartbeats within
//! its session timeout, and the group's committed offsets are kept in a replicated internal
//! topic, [`OFFSETS_TOPIC`].
//!
//! A group lives in one partition of that topic: `coordinator_partition(group)`, the hash of its
//! id as Kafka computes it. The leader of that partition is the group's **coordinator**: it
//! holds the group's membership in memory, and writes each commit (and each completed
//! rebalance) to the partition through Raft before it answers. A broker that becomes the
//! partition's leader reads the partition once and serves its groups from there (see
//! `coordinator.rs`), so committed offsets survive the coordinator's failover.
//!
//! The parts, one file each:
//! - `state.rs`: one group's state machine (Empty, PreparingRebalance, CompletingRebalance,
//!   Stable), with no I/O, no channel, no randomness and no logging: the rules of join, sync,
//!   heartbeat, leave and commit; `state/static_member.rs` those of static members (a
//!   `group.instance.id`).
//! - `live.rs`: a group as its coordinator serves it, the state machine with the channels
//!   of the joins and syncs waiting on it.
//! - `records.rs`: the bytes of the records in the offsets topic.
//! - `coordinator.rs`: a broker's coordinators' shards, one per offsets partition it leads,
//!   each holding the groups that hash to that partition, and applying a record to them.
//! - `runtime.rs` (and `runtime/`): the coordinators at work: finding a group's coordinator,
//!   loading a shard, serving the group requests, the timers. It reaches the broker only
//!   through its `Host` trait (`node/groups.rs` implements it).
//! - `assignor.rs`: the partition assignors a consumer group's leader runs (range,
//!   round-robin) and Kafka's consumer-protocol encoding of subscriptions and assignments.

pub(crate) mod api;
pub(crate) mod assignor;
pub(crate) mod coordinator;
pub(crate) mod live;
pub(crate) mod records;
pub(crate) mod runtime;
pub(crate) mod state;

use serde::{Deserialize, Serialize};

/// The internal topic that holds the groups' committed offsets and memberships (Kafka's
/// name). Created by the brokers on the first group request; clients may read it but not write
/// it.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// A group request's result.
pub(crate) type GroupResult<T> = std::result::Result<T, GroupError>;

/// Why a group request was refused, as Kafka's error codes name them ([`code`](Self::code)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The coordinator is still reading the group's partition after its election: retry.
    #[error("the coordinator is loading the group")]
    CoordinatorLoadInProgress,
    /// No coordinator can be named yet (the offsets topic is being created, or its partition
    /// has no leader): retry after finding the coordinator again.
    #[error("no coordinator is available")]
    CoordinatorNotAvailable,
    /// The broker asked is not the group's coordinator: find it again.
    #[error("this broker is not the group's coordinator")]
    NotCoordinator,
    /// The member's generation is not the group's: it must rejoin.
    #[error("the generation is not the group's current one")]
    IllegalGeneration,
    /// The member's protocol type or protocols do not match the group's.
    #[error("the member's protocols do not match the group's")]
    InconsistentGroupProtocol,
    /// An empty or oversized group id.
    #[error("invalid group id")]
    InvalidGroupId,
    /// The member is not (or no longer) in the group: it must join again without its id.
    #[error("unknown member id")]
    UnknownMemberId,
    /// The session timeout is outside the brokers' bounds.
    #[error("the session timeout is outside the brokers' bounds")]
    InvalidSessionTimeout,
    /// The group is rebalancing: the member must rejoin.
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    /// A request for a group that does not exist.
    #[error("no such group")]
    GroupIdNotFound,
    /// The group has live members (an offset reset, or deleting the group, needs a group
    /// without any).
    #[error("the group has live members")]
    NonEmptyGroup,
    /// The group's members consume this partition's topic: its committed offset cannot be
    /// deleted while they do (Kafka's `GROUP_SUBSCRIBED_TO_TOPIC`, per partition).
    #[error("the group's members consume the topic")]
    GroupSubscribedToTopic,
    /// The group has as many members as the brokers allow.
    #[error("the group is full")]
    GroupMaxSizeReached,
    /// A commit's metadata is longer than the brokers allow.
    #[error("the commit's metadata is too large")]
    OffsetMetadataTooLarge,
    /// A commit for a partition that does not exist.
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    /// Another member joined with this member's `group.instance.id` and took its place.
    #[error("another member joined with this member's group instance id")]
    FencedInstanceId,
    /// The client's principal may not do this to the group (Kafka's
    /// `GROUP_AUTHORIZATION_FAILED`).
    #[error("not authorized to access the group")]
    AuthorizationFailed,
    /// The client's principal may not read (commit) or describe (fetch) this partition's
    /// topic (Kafka's `TOPIC_AUTHORIZATION_FAILED`, per partition).
    #[error("not authorized to access the topic")]
    TopicAuthorizationFailed,
}

impl GroupError {
    /// Kafka's error code for this error.
    pub fn code(self) -> i16 {
        match self {
            GroupError::UnknownTopicOrPartition => 3,
            GroupError::OffsetMetadataTooLarge => 12,
            GroupError::CoordinatorLoadInProgress => 14,
            GroupError::CoordinatorNotAvailable => 15,
            GroupError::NotCoordinator => 16,
            GroupError::IllegalGeneration => 22,
            GroupError::InconsistentGroupProtocol => 23,
            GroupError::InvalidGroupId => 24,
            GroupError::UnknownMemberId => 25,
            GroupError::InvalidSessionTimeout => 26,
            GroupError::RebalanceInProgress => 27,
            GroupError::NonEmptyGroup => 68,
            GroupError::GroupIdNotFound => 69,
            GroupError::GroupMaxSizeReached => 81,
            GroupError::FencedInstanceId => 82,
            GroupError::AuthorizationFailed => 30,
            GroupError::TopicAuthorizationFailed => 29,
            GroupError::GroupSubscribedToTopic => 86,
        }
    }

    /// True for the errors that mean "find the coordinator again and retry".
    pub(crate) fn coordinator_moved(self) -> bool {
        matches!(
            self,
            GroupError::CoordinatorLoadInProgress
                | GroupError::CoordinatorNotAvailable
                | GroupError::NotCoordinator
        )
    }
}

/// Longest group id, member id, client id, protocol name or host accepted, in bytes.
pub(crate) const GROUP_NAME_BYTES_MAX: usize = 255;

/// Longest commit metadata accepted, in bytes (Kafka's `offset.metadata.max.bytes`).
pub(crate) const COMMIT_METADATA_BYTES_MAX: usize = 4096;

/// Largest subscription or assignment a member may send, in bytes.
pub(crate) const MEMBER_BLOB_BYTES_MAX: usize = 1 << 20;

/// The offsets partition that holds `group`: Java's `String.hashCode` of the id, made
/// non-negative as Kafka's `Utils.abs` does, modulo the partition count (so a group lands
/// where a Kafka cluster with as many offsets partitions would put it).
pub(crate) fn coordinator_partition(group: &str, partitions: u32) -> u32 {
    let mut h: i32 = 0;
    for unit in group.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    (abs as u32) % partitions.max(1)
}

/// Checks a group id: 1 to [`GROUP_NAME_BYTES_MAX`] bytes.
pub(crate) fn check_group_id(group: &str) -> Result<(), GroupError> {
    if group.is_empty() || group.len() > GROUP_NAME_BYTES_MAX {
        return Err(GroupError::InvalidGroupId);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of Java's `"...".hashCode()`, and Kafka's partition for them with 50 partitions.
    #[test]
    fn groups_land_where_kafka_puts_them() {
        // "a".hashCode() == 97; "group".hashCode() == 98629247; "email".hashCode() == 96619420.
        assert_eq!(coordinator_partition("a", 50), 97 % 50);
        assert_eq!(coordinator_partition("group", 50), 98_629_247 % 50);
        assert_eq!(coordinator_partition("email", 50), 96_619_420 % 50);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE: Kafka's abs makes it 0.
        assert_eq!(coordinator_partition("polygenelubricants", 50), 0);
    }
}
