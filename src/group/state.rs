//! One group's state machine, with no I/O: Kafka's classic protocol (`GroupCoordinator`'s
//! rules), driven by requests and by the clock the caller passes in.
//!
//! States, as Kafka names them:
//! - **Empty**: no members (maybe committed offsets).
//! - **PreparingRebalance**: waiting for every member to (re)join, up to the longest rebalance
//!   timeout among them; members that have not rejoined by then are removed.
//! - **CompletingRebalance**: the generation is new; waiting for the leader's assignment.
//! - **Stable**: every member has its assignment and heartbeats.
//!
//! Answers that must wait (a join until the rebalance completes, a follower's sync until the
//! leader's assignment is written) are parked as tickets in the member: the caller numbers
//! each join and sync, and takes the answers the group gives since ([`Group::take_replies`]),
//! each to its ticket. No channel, no random number, no logging: what it does depends on its
//! requests and the clock it is given only (`group/live.rs` keeps the channels). What must be
//! written before the group moves on (a completed rebalance) is returned as a [`Snapshot`],
//! which the coordinator writes and reports back ([`Group::synced`]).
//! A static member's return to a Stable group (`static_member.rs`) is a [`StaticRejoin`]: its
//! snapshot is written, then applied as a loaded one is ([`Group::restore`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::GroupError;

mod snapshot;
mod static_member;

pub(crate) use snapshot::{Committed, Snapshot, SnapshotMember};
pub(crate) use static_member::StaticRejoin;

/// A group's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    /// Kafka's name for the state (what DescribeGroups and ListGroups answer).
    pub(crate) fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

/// What a join answers once its rebalance completes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Joined {
    pub(crate) generation: i32,
    pub(crate) protocol: String,
    pub(crate) leader: String,
    pub(crate) member_id: String,
    /// Every member's subscription for the chosen protocol: for the leader only (it assigns).
    pub(crate) members: Vec<(String, Bytes)>,
}

/// The caller's number for a join or sync that waits for its answer.
pub(crate) type Ticket = u64;

/// An answer to a join or sync that waited, for its ticket.
#[derive(Debug)]
pub(crate) enum Reply {
    Join(Ticket, Result<Joined, GroupError>),
    Sync(Ticket, Result<Bytes, GroupError>),
}

/// A join request's fields.
#[derive(Clone, Debug)]
pub(crate) struct JoinRequest {
    /// Empty for a member joining for the first time.
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    pub(crate) protocol_type: String,
    /// Protocol names with their subscriptions, the member's preferred first.
    pub(crate) protocols: Vec<(String, Bytes)>,
    /// A first join is answered with a member id to join with (Kafka's JoinGroup v4+).
    pub(crate) require_known_member_id: bool,
    /// A static member's `group.instance.id` (Kafka's JoinGroup v5+): see `static_member.rs`.
    pub(crate) group_instance_id: Option<String>,
    /// A random number the caller draws for the member id this join may hand out (the state
    /// machine draws none, so that its tests are deterministic): with the group's own counter,
    /// it keeps ids from two coordinators of the group apart.
    pub(crate) nonce: u64,
}

/// One member.
pub(crate) struct Member {
    /// A static member's `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    pub(crate) protocols: Vec<(String, Bytes)>,
    /// Its assignment in the current generation (empty until the leader's sync).
    pub(crate) assignment: Bytes,
    /// When its session ends unless it is heard from.
    deadline: Instant,
    awaiting_join: Option<Ticket>,
    awaiting_sync: Option<Ticket>,
}

impl Member {
    /// Its subscription for `protocol`.
    pub(crate) fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// Limits the brokers put on groups.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupLimits {
    pub(crate) session_timeout_min: Duration,
    pub(crate) session_timeout_max: Duration,
    pub(crate) members_max: usize,
    /// How long a rebalance of an empty group waits for more members (Kafka's
    /// `group.initial.rebalance.delay.ms`).
    pub(crate) initial_rebalance_delay: Duration,
}

/// One group.
pub(crate) struct Group {
    pub(crate) state: State,
    pub(crate) generation: i32,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol: Option<String>,
    pub(crate) leader: Option<String>,
    pub(crate) members: BTreeMap<String, Member>,
    /// When the current rebalance stops waiting for members to rejoin.
    rebalance_deadline: Option<Instant>,
    /// The current rebalance started from Empty: it waits out its delay whoever has joined.
    initial: bool,
    pub(crate) offsets: HashMap<(String, u32), Committed>,
    /// Counts member ids handed out, so that two are never the same.
    next_member: u64,
    /// Member ids handed to first joins not yet joined with, and until when they may.
    pending: HashMap<String, Instant>,
    /// Answers to waiting joins and syncs, not yet taken by the caller.
    replies: Vec<Reply>,
}

/// The answer to a join: now, or once the rebalance completes.
pub(crate) enum JoinStep {
    Now(Result<Joined, GroupError>),
    /// A first join gets its member id to join again with (`MEMBER_ID_REQUIRED`).
    MemberIdRequired(String),
    /// Answered later, as a [`Reply::Join`] for the join's ticket.
    Parked,
    /// A static member came back to a Stable group: write the rejoin's snapshot, then apply
    /// it with [`Group::rejoined`], which answers the join.
    Rejoin(StaticRejoin),
}

/// What moving a group's time on did.
#[derive(Debug, Default)]
pub(crate) struct Ticked {
    /// The members whose session ended, removed.
    pub(crate) expired: Vec<String>,
    /// The group's snapshot to write, if it emptied.
    pub(crate) emptied: Option<Snapshot>,
}

/// The answer to a sync.
pub(crate) enum SyncStep {
    Now(Result<Bytes, GroupError>),
    /// Waiting for the leader's assignment to be written: answered later, as a
    /// [`Reply::Sync`] for the sync's ticket.
    Parked,
    /// The leader's sync: write `snapshot`, then call [`Group::synced`]; the member's answer
    /// comes as a [`Reply::Sync`].
    Write(Snapshot),
}

impl Default for Group {
    fn default() -> Self {
        Group::new()
    }
}

impl Group {
    pub(crate) fn new() -> Group {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            rebalance_deadline: None,
            initial: false,
            offsets: HashMap::new(),
            next_member: 0,
            pending: HashMap::new(),
            replies: Vec::new(),
        }
    }

    /// The answers given to waiting joins and syncs since the last call.
    pub(crate) fn take_replies(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.replies)
    }

    /// Whether a member still waits on `ticket` (an answer not given yet).
    pub(crate) fn holds(&self, ticket: Ticket) -> bool {
        self.members
            .values()
            .any(|m| m.awaiting_join == Some(ticket) || m.awaiting_sync == Some(ticket))
    }

    /// Nothing to keep: no members and no committed offsets.
    /// A group that never had a member (its generation is still 0, so nothing written names
    /// it) and has no committed offsets: made by a refused request. A group that had members
    /// is kept, so that its generation never goes back (a snapshot of a lower generation than
    /// one already read is ignored when a coordinator loads).
    pub(crate) fn is_forgettable(&self) -> bool {
        self.state == State::Empty
            && self.offsets.is_empty()
            && self.generation == 0
            && self.pending.is_empty()
    }

    /// Handles a join (see the module's rules); a join that waits is answered for `ticket`.
    pub(crate) fn join(
        &mut self,
        request: JoinRequest,
        ticket: Ticket,
        limits: &GroupLimits,
        now: Instant,
    ) -> JoinStep {
        if request.session_timeout < limits.session_timeout_min
            || request.session_timeout > limits.session_timeout_max
        {
            return JoinStep::Now(Err(GroupError::InvalidSessionTimeout));
        }
        if request.protocol_type.is_empty()
            || request.protocols.is_empty()
            || !self.supports(&request.protocol_type, &request.protocols)
        {
            return JoinStep::Now(Err(GroupError::InconsistentGroupProtocol));
        }
        if let Some(instance) = request.group_instance_id.clone() {
            match self.static_member_id(&instance) {
                // A static member back with no member id takes its old slot.
                Some(old) if request.member_id.is_empty() => {
                    return self.replace_static_member(old, request, ticket, limits, now);
                }
                Some(current) if current != request.member_id => {
                    return JoinStep::Now(Err(GroupError::FencedInstanceId));
                }
                _ => {}
            }
        }
        let pending = self.pending.remove(&request.member_id).is_some();
        if request.member_id.is_empty() || pending {
            if self.members.len() + self.pending.len() >= limits.members_max {
                return JoinStep::Now(Err(GroupError::GroupMaxSizeReached));
            }
            let id = if pending {
                request.member_id.clone()
            } else {
                self.new_member_id(&request.client_id, request.nonce)
            };
            // A static member is known by its instance id: it joins at once (as in Kafka).
            if !pending && request.require_known_member_id && request.group_instance_id.is_none() {
                // Kafka's JoinGroup v4+: the id is handed out first, and the member joins
                // with it, so that a join sent again after a lost answer adds no one.
                self.pending
                    .insert(id.clone(), now + request.session_timeout);
                return JoinStep::MemberIdRequired(id);
            }
            self.add_member(id, request, ticket, now);
            match self.state {
                State::PreparingRebalance => self.maybe_complete_join(now),
                _ => self.prepare_rebalance(now, limits),
            }
            return JoinStep::Parked;
        }
        let id = request.member_id.clone();
        let Some(member) = self.members.get_mut(&id) else {
            return JoinStep::Now(Err(GroupError::UnknownMemberId));
        };
        let same = member.protocols == request.protocols;
        member.deadline = now + member.session_timeout.max(request.session_timeout);
        let answer_now = match self.state {
            State::Empty => return JoinStep::Now(Err(GroupError::UnknownMemberId)),
            State::PreparingRebalance => false,
            // A member that lost its answer asks again: the same generation, unchanged.
            State::CompletingRebalance => same,
            // In a stable group only the leader's join (or changed protocols) rebalances.
            State::Stable => same && !self.is_leader(&id),
        };
        if answer_now {
            return JoinStep::Now(Ok(self.joined(&id)));
        }
        if let Some(member) = self.members.get_mut(&id) {
            update_member(member, request, ticket);
        }
        if self.state == State::PreparingRebalance {
            self.maybe_complete_join(now);
        } else {
            self.prepare_rebalance(now, limits);
        }
        JoinStep::Parked
    }

    /// Handles a sync: the leader's carries every member's assignment. A sync that waits is
    /// answered for `ticket`.
    pub(crate) fn sync(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        ticket: Ticket,
        now: Instant,
    ) -> SyncStep {
        if let Err(e) = self.check_fenced(member_id, group_instance_id) {
            return SyncStep::Now(Err(e));
        }
        let Some(member) = self.members.get_mut(member_id) else {
            return SyncStep::Now(Err(GroupError::UnknownMemberId));
        };
        if generation != self.generation {
            return SyncStep::Now(Err(GroupError::IllegalGeneration));
        }
        member.deadline = now + member.session_timeout;
        match self.state {
            State::Empty => SyncStep::Now(Err(GroupError::UnknownMemberId)),
            State::PreparingRebalance => SyncStep::Now(Err(GroupError::RebalanceInProgress)),
            State::Stable => SyncStep::Now(Ok(member.assignment.clone())),
            State::CompletingRebalance => {
                member.awaiting_sync = Some(ticket);
                if !self.is_leader(member_id) {
                    return SyncStep::Parked;
                }
                let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                for (id, m) in &mut self.members {
                    m.assignment = given.remove(id).unwrap_or_default();
                }
                SyncStep::Write(self.snapshot())
            }
        }
    }

    /// The leader's assignment of `generation` was written (`Ok`) or could not be (`Err`):
    /// the group turns Stable and every waiting member gets its assignment, or they all get
    /// the error and the group rebalances again.
    pub(crate) fn synced(
        &mut self,
        generation: i32,
        written: Result<(), GroupError>,
        limits: &GroupLimits,
        now: Instant,
    ) {
        if self.generation != generation || self.state != State::CompletingRebalance {
            return;
        }
        match written {
            Ok(()) => {
                self.state = State::Stable;
                for m in self.members.values_mut() {
                    if let Some(ticket) = m.awaiting_sync.take() {
                        self.replies
                            .push(Reply::Sync(ticket, Ok(m.assignment.clone())));
                    }
                    m.deadline = now + m.session_timeout;
                }
            }
            Err(e) => {
                for m in self.members.values_mut() {
                    m.assignment = Bytes::new();
                    if let Some(ticket) = m.awaiting_sync.take() {
                        self.replies.push(Reply::Sync(ticket, Err(e)));
                    }
                }
                self.prepare_rebalance(now, limits);
            }
        }
    }

    /// Handles a heartbeat.
    pub(crate) fn heartbeat(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        self.check_fenced(member_id, group_instance_id)?;
        let state = self.state;
        let current = self.generation;
        let member = self
            .members
            .get_mut(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if state == State::Empty {
            return Err(GroupError::UnknownMemberId);
        }
        if generation != current {
            return Err(GroupError::IllegalGeneration);
        }
        member.deadline = now + member.session_timeout;
        match state {
            State::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Handles a member's leave: it is removed, and the group rebalances without it. A static
    /// member may be named by its instance id alone (an empty member id), as Kafka's
    /// LeaveGroup v3+ allows.
    pub(crate) fn leave(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        limits: &GroupLimits,
        now: Instant,
    ) -> Result<(), GroupError> {
        let id = match group_instance_id {
            Some(instance) => {
                let current = self
                    .static_member_id(instance)
                    .ok_or(GroupError::UnknownMemberId)?;
                if !member_id.is_empty() && member_id != current {
                    return Err(GroupError::FencedInstanceId);
                }
                current
            }
            None => member_id.to_string(),
        };
        let member = self
            .members
            .remove(&id)
            .ok_or(GroupError::UnknownMemberId)?;
        self.answer_removed(member);
        self.after_removal(limits, now);
        Ok(())
    }

    /// Checks a commit's fencing: a member of the current generation, outside the wait for
    /// the leader's assignment; or, with no member id and a negative generation, a commit for
    /// a group with no members (offsets kept for a consumer that assigns its own partitions,
    /// or an administrator's reset).
    pub(crate) fn check_commit(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        self.check_fenced(member_id, group_instance_id)?;
        // Kafka's `validateOffsetCommit`: a commit from outside the group only while it has
        // no members; a member's commit names its generation.
        if generation < 0 && member_id.is_empty() {
            return if self.state == State::Empty {
                Ok(())
            } else {
                Err(GroupError::UnknownMemberId)
            };
        }
        if self.state == State::Empty {
            return Err(GroupError::IllegalGeneration);
        }
        if self.state == State::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        let current = self.generation;
        let member = self
            .members
            .get_mut(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if generation != current {
            return Err(GroupError::IllegalGeneration);
        }
        member.deadline = now + member.session_timeout;
        Ok(())
    }

    /// Applies a written commit (`None`: the partition's offset deleted).
    pub(crate) fn commit(&mut self, topic: String, partition: u32, committed: Option<Committed>) {
        match committed {
            Some(c) => {
                self.offsets.insert((topic, partition), c);
            }
            None => {
                self.offsets.remove(&(topic, partition));
            }
        }
    }

    /// Moves time on: members whose session ended are removed (a member waiting for its join
    /// or sync answer is kept: it is waiting on the group), and a rebalance whose deadline
    /// passed completes without the members that did not rejoin. Says which members expired,
    /// and gives a snapshot to write if the group emptied.
    pub(crate) fn tick(&mut self, limits: &GroupLimits, now: Instant) -> Ticked {
        self.pending.retain(|_, until| *until > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.awaiting_join.is_none() && m.awaiting_sync.is_none() && m.deadline <= now
            })
            .map(|(id, _)| id.clone())
            .collect();
        let was_empty = self.state == State::Empty;
        for id in &expired {
            if let Some(m) = self.members.remove(id) {
                self.answer_removed(m);
            }
        }
        if !expired.is_empty() {
            self.after_removal(limits, now);
        }
        if self.state == State::PreparingRebalance {
            self.maybe_complete_join(now);
        }
        Ticked {
            emptied: (!was_empty && self.state == State::Empty).then(|| self.snapshot()),
            expired,
        }
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    /// The group takes this protocol type and shares a protocol with these.
    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return true;
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        protocols.iter().any(|(name, _)| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        })
    }

    fn add_member(&mut self, id: String, request: JoinRequest, ticket: Ticket, now: Instant) {
        if self.members.is_empty() {
            self.protocol_type = Some(request.protocol_type.clone());
        }
        self.members.insert(
            id,
            Member {
                group_instance_id: request.group_instance_id,
                client_id: request.client_id,
                client_host: request.client_host,
                session_timeout: request.session_timeout,
                rebalance_timeout: request.rebalance_timeout,
                protocols: request.protocols,
                assignment: Bytes::new(),
                deadline: now + request.session_timeout,
                awaiting_join: Some(ticket),
                awaiting_sync: None,
            },
        );
    }

    /// A topic the members consume grew (CreatePartitions): a Stable or completing group
    /// rebalances, so that its assignment takes the new partitions in, as Kafka's consumers
    /// do when their metadata shows more partitions.
    pub(crate) fn topic_grew(&mut self, now: Instant, limits: &GroupLimits) {
        if matches!(self.state, State::Stable | State::CompletingRebalance) {
            self.prepare_rebalance(now, limits);
        }
    }

    /// Starts a rebalance: members waiting for the leader's assignment are told to rejoin, and
    /// every member has until the longest rebalance timeout to join again.
    fn prepare_rebalance(&mut self, now: Instant, limits: &GroupLimits) {
        if self.state == State::CompletingRebalance {
            for m in self.members.values_mut() {
                if let Some(ticket) = m.awaiting_sync.take() {
                    self.replies
                        .push(Reply::Sync(ticket, Err(GroupError::RebalanceInProgress)));
                }
            }
        }
        let longest = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.initial = self.state == State::Empty;
        let wait = if self.initial {
            limits.initial_rebalance_delay.min(longest)
        } else {
            longest
        };
        self.state = State::PreparingRebalance;
        self.rebalance_deadline = Some(now + wait);
        self.maybe_complete_join(now);
    }

    /// After members left: rebalance, or finish the one under way if only they were missing.
    fn after_removal(&mut self, limits: &GroupLimits, now: Instant) {
        if self
            .leader
            .as_ref()
            .is_some_and(|l| !self.members.contains_key(l))
        {
            self.leader = None;
        }
        match self.state {
            State::Stable | State::CompletingRebalance if self.members.is_empty() => {
                self.become_empty();
            }
            State::Stable | State::CompletingRebalance => self.prepare_rebalance(now, limits),
            State::PreparingRebalance => self.maybe_complete_join(now),
            State::Empty => {}
        }
    }

    /// The last member is gone. The group keeps its protocol type (as Kafka's does: an empty
    /// consumer group is still listed as one), which the next first member may change.
    fn become_empty(&mut self) {
        self.state = State::Empty;
        self.generation += 1;
        self.protocol = None;
        self.leader = None;
        self.rebalance_deadline = None;
    }

    /// Completes the join phase once every member has rejoined (unless the group started
    /// empty, which waits out its delay) or the deadline passed: members that did not rejoin
    /// are removed, the generation moves on, a protocol every member supports is chosen, and
    /// every waiting join is answered.
    fn maybe_complete_join(&mut self, now: Instant) {
        if self.state != State::PreparingRebalance {
            return;
        }
        let all_joined = self.members.values().all(|m| m.awaiting_join.is_some());
        let deadline_passed = self.rebalance_deadline.is_none_or(|d| d <= now);
        if !(deadline_passed || (all_joined && !self.initial)) {
            return;
        }
        let missing: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.awaiting_join.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in missing {
            if let Some(m) = self.members.remove(&id) {
                self.answer_removed(m);
            }
        }
        if self.members.is_empty() {
            self.become_empty();
            return;
        }
        self.generation += 1;
        self.protocol = Some(self.choose_protocol());
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = State::CompletingRebalance;
        self.rebalance_deadline = None;
        self.initial = false;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let joined = self.joined(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.deadline = now + m.session_timeout;
                m.assignment = Bytes::new();
                if let Some(ticket) = m.awaiting_join.take() {
                    self.replies.push(Reply::Join(ticket, Ok(joined)));
                }
            }
        }
    }

    /// The protocol every member supports that most members prefer (Kafka's vote: each
    /// member votes for its first choice among those all support; ties go to the first
    /// name).
    fn choose_protocol(&self) -> String {
        vote(self.members.values().map(|m| m.protocols.as_slice()))
    }

    /// The join answer for `member_id` in the current generation.
    fn joined(&self, member_id: &str) -> Joined {
        let protocol = self.protocol.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members
                .iter()
                .map(|(id, m)| (id.clone(), m.metadata(&protocol)))
                .collect()
        } else {
            Vec::new()
        };
        Joined {
            generation: self.generation,
            protocol,
            leader,
            member_id: member_id.to_string(),
            members,
        }
    }
}

/// The protocol every member (each given by its protocols, preferred first) supports that
/// most prefer: each votes for its first choice among those all support; ties go to the
/// first member's order.
fn vote<'a>(members: impl Iterator<Item = &'a [(String, Bytes)]> + Clone) -> String {
    let Some(first) = members.clone().next() else {
        return String::new();
    };
    let common: Vec<&String> = first
        .iter()
        .map(|(n, _)| n)
        .filter(|n| members.clone().all(|m| m.iter().any(|(p, _)| p == *n)))
        .collect();
    let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
    for m in members {
        if let Some((n, _)) = m.iter().find(|(p, _)| common.contains(&p)) {
            *votes.entry(n).or_default() += 1;
        }
    }
    let best = votes.values().copied().max().unwrap_or(0);
    common
        .into_iter()
        .find(|n| votes.get(n).copied().unwrap_or(0) == best)
        .cloned()
        .unwrap_or_default()
}

fn update_member(member: &mut Member, request: JoinRequest, ticket: Ticket) {
    member.group_instance_id = request.group_instance_id;
    member.protocols = request.protocols;
    member.session_timeout = request.session_timeout;
    member.rebalance_timeout = request.rebalance_timeout;
    member.client_id = request.client_id;
    member.client_host = request.client_host;
    // A join sent again while the first waits replaces it (the first's asker gave up).
    member.awaiting_join = Some(ticket);
}

impl Group {
    /// A removed member's waiting requests are told it is gone.
    fn answer_removed(&mut self, mut member: Member) {
        self.answer_waiting(&mut member, GroupError::UnknownMemberId);
    }

    /// A member's waiting join and sync are answered `error`.
    pub(super) fn answer_waiting(&mut self, member: &mut Member, error: GroupError) {
        if let Some(ticket) = member.awaiting_join.take() {
            self.replies.push(Reply::Join(ticket, Err(error)));
        }
        if let Some(ticket) = member.awaiting_sync.take() {
            self.replies.push(Reply::Sync(ticket, Err(error)));
        }
    }
}

fn millis_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// A member id's unique part: the caller's random number and the group's counter.
fn new_member_suffix(nonce: u64, counter: u64) -> String {
    format!("{nonce:016x}{counter:x}")
}

#[cfg(test)]
mod tests;
