//! What a group's records say of it: its committed offsets ([`Committed`]) and its
//! membership ([`Snapshot`]), written by the coordinator (`group/records.rs` has their bytes)
//! and applied back ([`Group::restore`]) when a coordinator loads, or when a static member's
//! return was written.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::{Group, Member, State, millis_u32};

/// A committed offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Committed {
    pub(crate) offset: u64,
    pub(crate) metadata: String,
    pub(crate) commit_timestamp_ms: u64,
    /// The committer's leader epoch of the partition (Kafka's `committed_leader_epoch`).
    pub(crate) leader_epoch: Option<i32>,
}

/// What the coordinator writes after a rebalance completes (or the group empties, or a static
/// member returns under a new member id): enough
/// to serve the group from another broker after a failover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) generation: i32,
    pub(crate) protocol_type: String,
    pub(crate) protocol: String,
    pub(crate) leader: String,
    pub(crate) members: Vec<SnapshotMember>,
}

/// One member in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SnapshotMember {
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout_ms: u32,
    pub(crate) rebalance_timeout_ms: u32,
    pub(crate) subscription: Bytes,
    pub(crate) assignment: Bytes,
    /// A static member's `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
}

impl Group {
    /// A group as a [`Snapshot`] left it (read back after a failover, or written by this
    /// coordinator): Stable with its members. A member already here keeps its session and
    /// protocols; any other is given a whole session from `now` to be heard from again.
    pub(crate) fn restore(&mut self, snapshot: Snapshot, now: Instant) {
        self.generation = snapshot.generation;
        self.protocol_type = Some(snapshot.protocol_type).filter(|t| !t.is_empty());
        self.protocol = Some(snapshot.protocol).filter(|p| !p.is_empty());
        self.leader = Some(snapshot.leader).filter(|l| !l.is_empty());
        let protocol = self.protocol.clone().unwrap_or_default();
        let mut before = std::mem::take(&mut self.members);
        for m in snapshot.members {
            let session_timeout = Duration::from_millis(m.session_timeout_ms.into());
            let kept = before.remove(&m.member_id);
            let deadline = kept.as_ref().map_or(now + session_timeout, |k| k.deadline);
            // Its protocols as it joined with them, unless they do not say what was written.
            let protocols = match kept {
                Some(k) if k.metadata(&protocol) == m.subscription => k.protocols,
                _ => vec![(protocol.clone(), m.subscription)],
            };
            self.members.insert(
                m.member_id,
                Member {
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout,
                    rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.into()),
                    protocols,
                    assignment: m.assignment,
                    deadline,
                    awaiting_join: None,
                    awaiting_sync: None,
                },
            );
        }
        for (_, gone) in before {
            self.answer_removed(gone);
        }
        self.state = if self.members.is_empty() {
            State::Empty
        } else {
            State::Stable
        };
        self.rebalance_deadline = None;
    }

    /// The group as it stands, for writing.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let protocol = self.protocol.clone().unwrap_or_default();
        Snapshot {
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            members: self
                .members
                .iter()
                .map(|(id, m)| SnapshotMember {
                    group_instance_id: m.group_instance_id.clone(),
                    member_id: id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: millis_u32(m.session_timeout),
                    rebalance_timeout_ms: millis_u32(m.rebalance_timeout),
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }
}
